package valkey_test

import (
	"context"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/internal/backendtest/storetest"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// Run with: go test -run '^$' -bench . -count 6 ./backend/valkey
// and compare BenchmarkRawPair with BenchmarkStorePair using benchstat.

const benchTTL = 10 * time.Second

// rawPair runs the acquire and release scripts through valkey-go directly,
// with the same keys, arguments and result decoding a Store does, minus
// the Store's validation and error classification.
type rawPair struct {
	c                vk.Client
	s                *valkey.Store
	prefix           string
	acquire, release *vk.Lua
}

func (r *rawPair) run(ctx context.Context, b *testing.B, k leaseapi.Key) {
	lk, tk := r.s.Keys(k)
	// The last argument is the request id, echoed after the reply's
	// status; a fixed one will do here.
	ttl := strconv.FormatInt(benchTTL.Microseconds(), 10)
	line, err := r.acquire.Exec(ctx, r.c, []string{lk, tk}, []string{ownerA, ttl, "0", "7"}).ToString()
	f := strings.Fields(line)
	if err != nil || len(f) != 4 || f[0] != "1" || f[1] != "7" {
		b.Fatalf("raw acquire: %q %v", line, err)
	}
	line, err = r.release.Exec(ctx, r.c, []string{lk}, []string{ttl + ":" + f[2] + ":" + ownerA, "8"}).ToString()
	if err != nil || line != "1 8" {
		b.Fatalf("raw release: %q %v", line, err)
	}
}

func storePair(ctx context.Context, b *testing.B, s *valkey.Store, k leaseapi.Key) {
	rec, err := s.TryAcquire(ctx, k, ownerA, benchTTL)
	if err != nil {
		b.Fatalf("TryAcquire: %v", err)
	}
	if err := s.Release(ctx, rec); err != nil {
		b.Fatalf("Release: %v", err)
	}
}

// benchKeys returns n distinct keys, so parallel goroutines never contend.
func benchKeys(n int) []leaseapi.Key {
	keys := make([]leaseapi.Key, n)
	for i := range keys {
		keys[i] = leaseapi.MustKey("bench", "k"+strconv.Itoa(i))
	}
	return keys
}

// pairBench runs pair serially and with 64 goroutines (SetParallelism over
// GOMAXPROCS), each goroutine on its own key.
func pairBench(b *testing.B, pair func(ctx context.Context, b *testing.B, k leaseapi.Key)) {
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		k := leaseapi.MustKey("bench", "serial")
		for b.Loop() {
			pair(ctx, b, k)
		}
	})
	b.Run("parallel64", func(b *testing.B) {
		b.ReportAllocs()
		keys := benchKeys(1024)
		var next atomic.Int64
		procs := max(1, 64/testingGOMAXPROCS())
		b.SetParallelism(procs)
		b.RunParallel(func(pb *testing.PB) {
			k := keys[int(next.Add(1)-1)%len(keys)]
			for pb.Next() {
				pair(ctx, b, k)
			}
		})
	})
}

func testingGOMAXPROCS() int {
	n := runtimeGOMAXPROCS()
	if n < 1 {
		return 1
	}
	return n
}

func BenchmarkRawPair(b *testing.B) {
	c := newClient(b, serverAddr(b))
	prefix := uniquePrefix()
	r := &rawPair{
		c: c, s: newStore(b, c, valkey.Options{Prefix: prefix}), prefix: prefix,
		acquire: vk.NewLuaScript(valkey.SrcAcquire), release: vk.NewLuaScript(valkey.SrcRelease),
	}
	pairBench(b, r.run)
}

func BenchmarkStorePair(b *testing.B) {
	c := newClient(b, serverAddr(b))
	s := newStore(b, c, valkey.Options{})
	pairBench(b, func(ctx context.Context, b *testing.B, k leaseapi.Key) { storePair(ctx, b, s, k) })
}

// BenchmarkHandoff measures release -> notified for a watcher on another
// client and Store (through the server's pub/sub), and reports the p50.
func BenchmarkHandoff(b *testing.B) {
	addr := serverAddr(b)
	prefix := uniquePrefix()
	holder := newStore(b, newClient(b, addr), valkey.Options{Prefix: prefix})
	waiter := newStore(b, newClient(b, addr), valkey.Options{Prefix: prefix})
	warmWatch(b, waiter, holder)
	ctx := context.Background()
	k := leaseapi.MustKey("bench", "handoff")
	var lat []time.Duration
	for b.Loop() {
		rec, err := holder.TryAcquire(ctx, k, ownerA, benchTTL)
		if err != nil {
			b.Fatal(err)
		}
		ch, stop := waiter.WatchRelease(k)
		markWaiting(b, waiter, k) // as a waiting Acquire's attempt would
		start := time.Now()
		if err := holder.Release(ctx, rec); err != nil {
			b.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(2 * time.Second):
			b.Fatal("no notification")
		}
		lat = append(lat, time.Since(start))
		stop()
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// serverCPU is the server's used_cpu_sys + used_cpu_user.
func serverCPU(b *testing.B, c vk.Client) time.Duration {
	info, err := c.Do(context.Background(), c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
		i := indexOf(info, f)
		if i < 0 {
			continue
		}
		j := i + len(f)
		e := j
		for e < len(info) && (info[e] == '.' || info[e] >= '0' && info[e] <= '9') {
			e++
		}
		v, _ := strconv.ParseFloat(info[j:e], 64)
		total += v
	}
	return time.Duration(total * float64(time.Second))
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

const batchLeases = 10_000

// acquireMany acquires n leases with 64 concurrent callers.
func acquireMany(b *testing.B, s *valkey.Store, n int) []leaseapi.RenewRequest {
	keys := benchKeys(n)
	reqs := make([]leaseapi.RenewRequest, n)
	if err := storetest.Parallel(64, n, func(i int) error {
		rec, err := s.TryAcquire(context.Background(), keys[i], ownerA, time.Minute)
		if err != nil {
			return err
		}
		reqs[i] = leaseapi.RenewRequest{Record: rec, TTL: time.Minute}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	return reqs
}

// BenchmarkRenewBatch10k renews 10,000 leases per op with one RenewBatch
// (pipelined scripts) and reports renewals/s and CPU per renewal in this
// process and in the server.
func BenchmarkRenewBatch10k(b *testing.B) {
	c := newClient(b, serverAddr(b))
	s := newStore(b, c, valkey.Options{})
	reqs := acquireMany(b, s, batchLeases)
	storetest.BenchRenewBatch(b, s, reqs, func() time.Duration { return serverCPU(b, c) })
}

// BenchmarkRenewConcurrent10k renews the same 10,000 leases with
// individual Renew calls from 64 goroutines (valkey-go pipelines concurrent
// calls on its connections), for comparison with RenewBatch.
func BenchmarkRenewConcurrent10k(b *testing.B) {
	c := newClient(b, serverAddr(b))
	s := newStore(b, c, valkey.Options{})
	reqs := acquireMany(b, s, batchLeases)
	storetest.BenchRenewConcurrent(b, s, reqs, func() time.Duration { return serverCPU(b, c) })
}

func runtimeGOMAXPROCS() int { return goruntime.GOMAXPROCS(0) }

// countingStore counts successful renewals and RenewBatch calls.
type countingStore struct {
	*valkey.Store
	renewed, batches atomic.Int64
}

func (c *countingStore) RenewBatch(ctx context.Context, reqs []leaseapi.RenewRequest) []leaseapi.RenewResult {
	c.batches.Add(1)
	res := c.Store.RenewBatch(ctx, reqs)
	for _, r := range res {
		if r.Err == nil {
			c.renewed.Add(1)
		}
	}
	return res
}

func (c *countingStore) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	c.batches.Add(1)
	got, err := c.Store.Renew(ctx, rec, ttl)
	if err == nil {
		c.renewed.Add(1)
	}
	return got, err
}

// BenchmarkManaged10k holds 10,000 leases under the runtime's managed
// renewal (TTL 2s, renewal every 450ms: about 22,000 renewals/s due) and
// measures, over a 2s window per op, the renewals/s achieved, how many
// renewals shared each RenewBatch round trip, the CPU per renewal in this
// process (runtime + Store + driver) and in the server, and how many
// leases were lost (must be 0).
func BenchmarkManaged10k(b *testing.B) {
	c := newClient(b, serverAddr(b))
	cs := &countingStore{Store: newStore(b, c, valkey.Options{})}
	rc, err := runtime.NewClient(cs, runtime.ClientOptions{MaxManaged: batchLeases})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = rc.Close(ctx)
	}()
	pol, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 2 * time.Second, RenewEvery: 450 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	keys := benchKeys(batchLeases)
	handles, err := storetest.StartManaged(context.Background(), rc, pol, 64, batchLeases, func(i int) leaseapi.Key { return keys[i] })
	if err != nil {
		b.Fatal(err)
	}
	const window = 2 * time.Second
	var renewed, batches int64
	var cpu, srv, el time.Duration
	for b.Loop() {
		r0, b0 := cs.renewed.Load(), cs.batches.Load()
		cpu0, srv0, start := storetest.CPUTime(), serverCPU(b, c), time.Now()
		time.Sleep(window) // the measurement window: renewals run on their own timers
		el += time.Since(start)
		cpu += storetest.CPUTime() - cpu0
		srv += serverCPU(b, c) - srv0
		renewed += cs.renewed.Load() - r0
		batches += cs.batches.Load() - b0
	}
	lost := 0
	for _, h := range handles {
		if h.State() != leaseapi.StateActive {
			lost++
		}
	}
	b.ReportMetric(float64(renewed)/el.Seconds(), "renewals/s")
	b.ReportMetric(float64(renewed)/float64(max(batches, 1)), "renewals/batch")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(max(renewed, 1)), "client-cpu-ns/renewal")
	b.ReportMetric(float64(srv.Nanoseconds())/float64(max(renewed, 1)), "server-cpu-ns/renewal")
	b.ReportMetric(float64(lost), "lost")
}

// BenchmarkRuntimeHandoff measures release -> the waiter holds the lease:
// the holder releases through one runtime Client and Store, the waiter is
// parked in Client.Acquire (retry interval 1s) on another client and Store,
// woken by the release notification, and acquires. Reports the p50/p99.
func BenchmarkRuntimeHandoff(b *testing.B) {
	addr := serverAddr(b)
	prefix := uniquePrefix()
	sa := newStore(b, newClient(b, addr), valkey.Options{Prefix: prefix})
	sb := newStore(b, newClient(b, addr), valkey.Options{Prefix: prefix})
	warmWatch(b, sb, sa)
	x := storetest.NewHandoff(b, sa, sb)
	ctx := context.Background()
	k := leaseapi.MustKey("bench", "runtime-handoff")
	h, err := x.Holder.Acquire(ctx, k, x.Policy)
	if err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	for b.Loop() {
		next, d, err := x.Once(ctx, h, k)
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, d)
		if err := next.Release(ctx); err != nil {
			b.Fatal(err)
		}
		if h, err = x.Holder.Acquire(ctx, k, x.Policy); err != nil {
			b.Fatal(err)
		}
	}
	_ = h.Release(ctx)
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
