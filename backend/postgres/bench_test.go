package postgres_test

import (
	"context"
	"fmt"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/internal/backendtest/storetest"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// benchConns is the pool size of every benchmark, raw and store alike.
const benchConns = 16

// parallelism makes RunParallel use 64 goroutines whatever GOMAXPROCS is.
func parallelism(b *testing.B) {
	b.SetParallelism(max(1, 64/goruntime.GOMAXPROCS(0)))
}

func benchStore(b *testing.B) (*postgres.Store, *pgxpool.Pool) {
	b.Helper()
	url := dbURL(b)
	pool := newPool(b, url, func(c *pgxpool.Config) { c.MaxConns = benchConns })
	s, _ := newStore(b, url, pool)
	return s, pool
}

// rawPair returns a function that runs the Store's own acquire and release
// statements straight through pgxpool: the floor the Store is measured
// against.
func rawPair(s *postgres.Store, pool *pgxpool.Pool) func(context.Context, leaseapi.Key) error {
	acquireSQL, releaseSQL, channel := s.Statements()
	return func(ctx context.Context, k leaseapi.Key) error {
		var (
			tok pgtype.Int8
			acq pgtype.Timestamptz
		)
		key := k.String()
		if err := pool.QueryRow(ctx, acquireSQL, key, "bench-owner", int64(60_000_000), nil).Scan(&tok, &acq); err != nil {
			return err
		}
		ct, err := pool.Exec(ctx, releaseSQL, key, "bench-owner", tok.Int64, channel)
		if err == nil && ct.RowsAffected() != 1 {
			err = fmt.Errorf("raw release: %d rows", ct.RowsAffected())
		}
		return err
	}
}

// The floor: the minimal fenced acquire and release statements (the
// peers benchmark's raw-pg adapter, verbatim but for the table name), on a
// table of their own in the Store's schema.
const (
	floorSchema = `CREATE TABLE IF NOT EXISTS %s (
	key        text PRIMARY KEY,
	owner      text,
	token      bigint NOT NULL,
	expires_at timestamptz NOT NULL
)`
	floorAcquire = `INSERT INTO %s AS l (key, owner, token, expires_at)
VALUES ($1, $2, 1, now() + $3 * interval '1 millisecond')
ON CONFLICT (key) DO UPDATE
   SET owner = EXCLUDED.owner, token = l.token + 1, expires_at = EXCLUDED.expires_at
 WHERE l.expires_at <= now()
RETURNING token`
	floorRelease = `UPDATE %s SET owner = NULL, expires_at = '-infinity'
WHERE key = $1 AND owner = $2 AND token = $3`
)

// floorPair returns the floor's acquire and release pair on a table of its
// own next to s's.
func floorPair(b testing.TB, s *postgres.Store, pool *pgxpool.Pool) func(context.Context, leaseapi.Key) error {
	b.Helper()
	tbl := pgx.Identifier{postgres.SchemaOf(s), "floor_leases"}.Sanitize()
	if _, err := pool.Exec(context.Background(), fmt.Sprintf(floorSchema, tbl)); err != nil {
		b.Fatal(err)
	}
	acq, rel := fmt.Sprintf(floorAcquire, tbl), fmt.Sprintf(floorRelease, tbl)
	return func(ctx context.Context, k leaseapi.Key) error {
		var tok int64
		key := k.String()
		if err := pool.QueryRow(ctx, acq, key, "bench-owner", int64(60_000)).Scan(&tok); err != nil {
			return err
		}
		ct, err := pool.Exec(ctx, rel, key, "bench-owner", tok)
		if err == nil && ct.RowsAffected() != 1 {
			err = fmt.Errorf("floor release: %d rows", ct.RowsAffected())
		}
		return err
	}
}

// BenchmarkFloorPair runs the floor's acquire and release statements.
func BenchmarkFloorPair(b *testing.B) {
	s, pool := benchStore(b)
	runPairs(b, floorPair(b, s, pool))
}

// BenchmarkFloorInterleaved alternates a floor pair and a Store pair in
// every iteration, as BenchmarkPairInterleaved does for the raw pair: the
// Store's pairs/s as a ratio of the floor's in one run (store/floor is the
// inverse of the throughput ratio). Releases with no waiter must not
// notify, or the 64-goroutine ratio collapses (commits of notifying
// transactions are serialised database-wide).
func BenchmarkFloorInterleaved(b *testing.B) {
	s, pool := benchStore(b)
	interleave(b, floorPair(b, s, pool), storePair(s), "floor")
}

// storePair is TryAcquire followed by Release through the Store.
func storePair(s *postgres.Store) func(context.Context, leaseapi.Key) error {
	return func(ctx context.Context, k leaseapi.Key) error {
		rec, err := s.TryAcquire(ctx, k, "bench-owner", time.Minute)
		if err != nil {
			return err
		}
		return s.Release(ctx, rec)
	}
}

// BenchmarkRawPair runs the Store's acquire and release statements straight
// through pgxpool.
func BenchmarkRawPair(b *testing.B) {
	s, pool := benchStore(b)
	runPairs(b, rawPair(s, pool))
}

// BenchmarkStorePair is TryAcquire followed by Release through the Store.
func BenchmarkStorePair(b *testing.B) {
	s, _ := benchStore(b)
	runPairs(b, storePair(s))
}

// BenchmarkPairInterleaved alternates a raw pair and a Store pair in every
// iteration (on different keys) and reports both mean latencies and their
// ratio, so that load changes on a shared machine hit both alike.
func BenchmarkPairInterleaved(b *testing.B) {
	s, pool := benchStore(b)
	interleave(b, rawPair(s, pool), storePair(s), "raw")
}

// interleave alternates base and st in every iteration (on different keys)
// and reports both mean latencies and their ratio, serially and from 64
// goroutines.
func interleave(b *testing.B, raw, st func(context.Context, leaseapi.Key) error, name string) {
	ctx := context.Background()
	report := func(b *testing.B, rawNs, storeNs, n int64) {
		b.ReportMetric(float64(rawNs)/float64(n), name+"-ns/pair")
		b.ReportMetric(float64(storeNs)/float64(n), "store-ns/pair")
		b.ReportMetric(float64(storeNs)/float64(rawNs), "store/"+name)
	}
	b.Run("serial", func(b *testing.B) {
		kr, ks := leaseapi.MustKey("bench", "ir"), leaseapi.MustKey("bench", "is")
		var rawNs, storeNs, n int64
		for b.Loop() {
			t0 := time.Now()
			if err := raw(ctx, kr); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := st(ctx, ks); err != nil {
				b.Fatal(err)
			}
			rawNs += int64(t1.Sub(t0))
			storeNs += int64(time.Since(t1))
			n++
		}
		report(b, rawNs, storeNs, n)
	})
	b.Run("parallel64", func(b *testing.B) {
		parallelism(b)
		var next, rawNs, storeNs, n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := next.Add(1)
			kr, ks := leaseapi.MustKey("bench", fmt.Sprint("ir", i)), leaseapi.MustKey("bench", fmt.Sprint("is", i))
			for pb.Next() {
				t0 := time.Now()
				if err := raw(ctx, kr); err != nil {
					b.Error(err)
					return
				}
				t1 := time.Now()
				if err := st(ctx, ks); err != nil {
					b.Error(err)
					return
				}
				rawNs.Add(int64(t1.Sub(t0)))
				storeNs.Add(int64(time.Since(t1)))
				n.Add(1)
			}
		})
		report(b, rawNs.Load(), storeNs.Load(), n.Load())
	})
}

// runPairs runs pair serially on one key, then from 64 goroutines, each on
// its own key (no contention: this measures the statements, not the lock).
func runPairs(b *testing.B, pair func(context.Context, leaseapi.Key) error) {
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		k := leaseapi.MustKey("bench", "serial")
		for b.Loop() {
			if err := pair(ctx, k); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel64", func(b *testing.B) {
		b.ReportAllocs()
		parallelism(b)
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			k := leaseapi.MustKey("bench", fmt.Sprint("p", next.Add(1)))
			for pb.Next() {
				if err := pair(ctx, k); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

const batchLeases = 10_000

// seedLeases creates n live grants (owner bench-owner, token 1, one hour) in
// one statement and returns renew requests for them.
func seedLeases(b *testing.B, s *postgres.Store, pool *pgxpool.Pool, n int) []leaseapi.RenewRequest {
	b.Helper()
	reqs := make([]leaseapi.RenewRequest, n)
	keys := make([]string, n)
	for i := range reqs {
		k := leaseapi.MustKey("batch", fmt.Sprint("k", i))
		keys[i] = k.String()
		reqs[i] = leaseapi.RenewRequest{Record: leaseapi.Record{Key: k, Owner: "bench-owner", Token: 1}, TTL: time.Hour}
	}
	if _, err := pool.Exec(context.Background(), "INSERT INTO "+tableOf(b, s)+` (key, owner, token, acquired_at, expires_at)
SELECT k, 'bench-owner', 1, clock_timestamp(), clock_timestamp() + interval '1 hour' FROM unnest($1::text[]) AS k`, keys); err != nil {
		b.Fatal(err)
	}
	return reqs
}

// serverCPU reads the CPU time of the benchmark pool's sessions, for a
// [storetest.RenewMeter] (from /proc when the server is local; 0, so
// omitted, otherwise).
func serverCPU(b *testing.B, pool *pgxpool.Pool) func() time.Duration {
	b.Helper()
	var pids []int
	rows, err := pool.Query(context.Background(), `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, benchApp)
	if err == nil {
		pids, _ = pgx.CollectRows(rows, pgx.RowTo[int])
	}
	return func() time.Duration { return procCPU(pids) }
}

// benchApp tags the benchmark pools' sessions, so that their server
// processes can be found.
const benchApp = "lease-bench"

func benchPool(b *testing.B, conns int32) (*postgres.Store, *pgxpool.Pool) {
	b.Helper()
	url := dbURL(b)
	pool := newPool(b, url, func(c *pgxpool.Config) {
		c.MaxConns, c.MinConns = conns, conns
		c.ConnConfig.RuntimeParams["application_name"] = benchApp
	})
	s, _ := newStore(b, url, pool)
	return s, pool
}

// BenchmarkRenewBatch10k renews 10,000 live leases per iteration with one
// RenewBatch (one UPDATE ... FROM unnest(...) statement).
func BenchmarkRenewBatch10k(b *testing.B) {
	s, pool := benchPool(b, 1)
	reqs := seedLeases(b, s, pool, batchLeases)
	storetest.BenchRenewBatch(b, s, reqs, serverCPU(b, pool))
}

// BenchmarkRenewConcurrent10k renews the same 10,000 leases with one Renew
// statement each, from 64 goroutines over 16 connections, for comparison
// with RenewBatch.
func BenchmarkRenewConcurrent10k(b *testing.B) {
	s, pool := benchPool(b, benchConns)
	reqs := seedLeases(b, s, pool, batchLeases)
	storetest.BenchRenewConcurrent(b, s, reqs, serverCPU(b, pool))
}

// countingStore counts the renewals the runtime sends, batched or not. The
// embedded Store's Capabilities are promoted, so the runtime still batches.
type countingStore struct {
	*postgres.Store
	renewals atomic.Int64
}

func (c *countingStore) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	c.renewals.Add(1)
	return c.Store.Renew(ctx, rec, ttl)
}

func (c *countingStore) RenewBatch(ctx context.Context, reqs []leaseapi.RenewRequest) []leaseapi.RenewResult {
	c.renewals.Add(int64(len(reqs)))
	return c.Store.RenewBatch(ctx, reqs)
}

// BenchmarkManaged10k holds 10,000 leases under the runtime's managed
// renewal (TTL 10s, RenewEvery 1s) on this backend; the runtime coalesces
// renewals that fall due together into RenewBatch calls. Each b.N
// iteration is one second of steady state; it reports renewals/s and the
// CPU each renewal costs in this process and in the server.
func BenchmarkManaged10k(b *testing.B) {
	const n = 10_000
	s, pool := benchPool(b, benchConns)
	cs := &countingStore{Store: s}
	c, err := runtime.NewClient(cs, runtime.ClientOptions{MaxManaged: n})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: time.Second, RenewEvery: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	handles, err := storetest.StartManaged(ctx, c, p, benchConns, n, func(i int) leaseapi.Key {
		return leaseapi.MustKey("managed", fmt.Sprint("k", i))
	})
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(2 * time.Second) // let renewal reach its steady state
	b.ResetTimer()
	r0 := cs.renewals.Load()
	m := storetest.StartRenewMeter(serverCPU(b, pool))
	for range b.N {
		time.Sleep(time.Second)
	}
	m.Report(b, cs.renewals.Load()-r0)
	b.StopTimer()
	for _, h := range handles {
		if h.State() != leaseapi.StateActive {
			b.Fatalf("a managed lease is %v", h.State())
		}
	}
	b.ReportMetric(0, "ns/op")
}

// tableOf is the quoted lease table of s's schema.
func tableOf(b *testing.B, s *postgres.Store) string {
	b.Helper()
	return pgx.Identifier{postgres.SchemaOf(s), postgres.DefaultTable}.Sanitize()
}

// procCPU is the user+system CPU time of the given local processes (0 when
// /proc cannot tell, e.g. a remote server).
func procCPU(pids []int) time.Duration {
	var total time.Duration
	for _, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0
		}
		// Fields after the parenthesised command name; utime and stime are
		// fields 14 and 15 (1-based), in clock ticks (USER_HZ = 100).
		rest := string(raw)
		if i := strings.LastIndexByte(rest, ')'); i >= 0 {
			rest = rest[i+1:]
		}
		f := strings.Fields(rest)
		if len(f) < 13 {
			return 0
		}
		ut, err1 := strconv.ParseInt(f[11], 10, 64)
		st, err2 := strconv.ParseInt(f[12], 10, 64)
		if err1 != nil || err2 != nil {
			return 0
		}
		total += time.Duration(ut+st) * 10 * time.Millisecond
	}
	return total
}
