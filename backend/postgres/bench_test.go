package postgres_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/leaseapi"
)

// benchConns is the pool size of every benchmark, raw and store alike.
const benchConns = 16

// parallelism makes RunParallel use 64 goroutines whatever GOMAXPROCS is.
func parallelism(b *testing.B) {
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
}

func benchStore(b *testing.B) (*postgres.Store, *pgxpool.Pool) {
	b.Helper()
	url := dbURL(b)
	pool := newPool(b, url, func(c *pgxpool.Config) { c.MaxConns = benchConns })
	s, _ := newStore(b, url, pool)
	return s, pool
}

// BenchmarkRawPair runs the Store's own acquire and release statements
// straight through pgxpool: the floor the Store is measured against.
func BenchmarkRawPair(b *testing.B) {
	s, pool := benchStore(b)
	acquireSQL, releaseSQL, channel := s.Statements()
	pair := func(ctx context.Context, key string, hash string) error {
		var (
			tok      int64
			acq, exp time.Time
		)
		if err := pool.QueryRow(ctx, acquireSQL, key, "bench-owner", int64(60_000_000)).Scan(&tok, &acq, &exp); err != nil {
			return err
		}
		var outcome int32
		return pool.QueryRow(ctx, releaseSQL, key, "bench-owner", tok, channel, hash).Scan(&outcome)
	}
	runPairs(b, func(ctx context.Context, k leaseapi.Key) error {
		return pair(ctx, k.String(), postgres.KeyHash(k))
	})
}

// BenchmarkStorePair is TryAcquire followed by Release through the Store.
func BenchmarkStorePair(b *testing.B) {
	s, _ := benchStore(b)
	runPairs(b, func(ctx context.Context, k leaseapi.Key) error {
		rec, err := s.TryAcquire(ctx, k, "bench-owner", time.Minute)
		if err != nil {
			return err
		}
		return s.Release(ctx, rec)
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

// BenchmarkRenewBatch10k renews 10,000 live leases per iteration with one
// RenewBatch (one UPDATE ... FROM unnest(...) statement) and reports
// renewals/s and the client's CPU time per renewal.
func BenchmarkRenewBatch10k(b *testing.B) {
	const n = 10_000
	s, pool := benchStore(b)
	ctx := context.Background()
	reqs := make([]leaseapi.RenewRequest, n)
	keys := make([]string, n)
	for i := range reqs {
		k := leaseapi.MustKey("batch", fmt.Sprint("k", i))
		keys[i] = k.String()
		reqs[i] = leaseapi.RenewRequest{Record: leaseapi.Record{Key: k, Owner: "bench-owner", Token: 1}, TTL: time.Hour}
	}
	// Seed the 10,000 grants in one statement (the setup is not measured).
	tbl := tableOf(b, s)
	if _, err := pool.Exec(ctx, "INSERT INTO "+tbl+` (key, owner, token, acquired_at, expires_at)
SELECT k, 'bench-owner', 1, clock_timestamp(), clock_timestamp() + interval '1 hour' FROM unnest($1::text[]) AS k`, keys); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		for i, r := range s.RenewBatch(ctx, reqs) {
			if r.Err != nil {
				b.Fatalf("element %d: %v", i, r.Err)
			}
		}
	}
	cpu := cpuTime() - cpu0
	renewals := float64(n) * float64(b.N)
	b.ReportMetric(renewals/b.Elapsed().Seconds(), "renewals/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/renewals, "client-cpu-ns/renewal")
}

// tableOf is the quoted lease table of s's schema.
func tableOf(b *testing.B, s *postgres.Store) string {
	b.Helper()
	return pgx.Identifier{postgres.SchemaOf(s), postgres.DefaultTable}.Sanitize()
}

// cpuTime is this process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
