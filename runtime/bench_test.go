package runtime_test

import (
	"context"
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// BenchmarkTryAcquireRelease measures one TryAcquire + Release pair on the
// memory backend through the whole runtime (owner id, supervisor spawn,
// release round trip through the actor).
func BenchmarkTryAcquireRelease(b *testing.B) { benchPair(b, runtime.ClientOptions{}) }

// BenchmarkTryAcquireReleaseBounded is BenchmarkTryAcquireRelease behind
// a wrapper that claims no capability, so that every call is bounded by
// OperationTimeout as on Valkey and PostgreSQL: the difference is what
// the runtime pays for the bounds.
func BenchmarkTryAcquireReleaseBounded(b *testing.B) {
	store, _ := memory.New(memory.Options{})
	benchPairOn(b, hideCapabilities{store}, runtime.ClientOptions{}, false)
}

// BenchmarkTryAcquireReleaseHeld is BenchmarkTryAcquireReleaseBounded
// while the client holds another lease, as under any concurrent load: each
// pair's supervisor runs on the goroutine of the previous one
// (supervisor/pool.go).
func BenchmarkTryAcquireReleaseHeld(b *testing.B) {
	store, _ := memory.New(memory.Options{})
	benchPairOn(b, hideCapabilities{store}, runtime.ClientOptions{}, true)
}

// benchPair runs TryAcquire + Release pairs on one key of a memory store
// through a client with options o.
func benchPair(b *testing.B, o runtime.ClientOptions) {
	store, _ := memory.New(memory.Options{})
	benchPairOn(b, store, o, false)
}

// benchPairOn runs TryAcquire + Release pairs on one key of backend st
// through a client with options o; with held, while the client holds
// another lease.
func benchPairOn(b *testing.B, st leaseapi.Backend, o runtime.ClientOptions, held bool) {
	c, _ := runtime.NewClient(st, o)
	defer c.Close(context.Background())
	p, _ := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: time.Minute})
	k := leaseapi.MustKey("bench", "pair")
	ctx := context.Background()
	if held {
		if _, err := c.TryAcquire(ctx, leaseapi.MustKey("bench", "held"), p); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		h, err := c.TryAcquire(ctx, k, p)
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTryAcquireReleaseParallel runs pairs on distinct keys from
// GOMAXPROCS goroutines.
func BenchmarkTryAcquireReleaseParallel(b *testing.B) {
	store, _ := memory.New(memory.Options{})
	c, _ := runtime.NewClient(store, runtime.ClientOptions{})
	defer c.Close(context.Background())
	p, _ := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: time.Minute})
	var id atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		k := leaseapi.MustKey("bench", fmt.Sprint("par-", id.Add(1)))
		ctx := context.Background()
		for pb.Next() {
			h, err := c.TryAcquire(ctx, k, p)
			if err != nil {
				b.Error(err)
				return
			}
			if err := h.Release(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// countingBackend counts successful renewals and signals when their count
// reaches a target, so the benchmark waits on renewals, not on a clock.
type countingBackend struct {
	leaseapi.Backend
	renewals atomic.Int64

	mu      sync.Mutex
	target  int64
	reached chan struct{}
}

func (cb *countingBackend) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	r, err := cb.Backend.Renew(ctx, rec, ttl)
	if err == nil {
		n := cb.renewals.Add(1)
		cb.mu.Lock()
		if cb.reached != nil && n >= cb.target {
			close(cb.reached)
			cb.reached = nil
		}
		cb.mu.Unlock()
	}
	return r, err
}

// after returns a channel closed once n more renewals have succeeded.
func (cb *countingBackend) after(n int64) <-chan struct{} {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	ch := make(chan struct{})
	cb.target, cb.reached = cb.renewals.Load()+n, ch
	return ch
}

// Capabilities claims NeverBlocks, as the memory store it wraps does, so
// the benchmark measures the path a memory-backed client really takes.
func (cb *countingBackend) Capabilities() leaseapi.Capabilities {
	return leaseapi.Capabilities{NeverBlocks: leaseapi.CapabilitiesOf(cb.Backend).NeverBlocks}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// liveBytes returns the live heap and the stack memory in use after GC.
func liveBytes() (heap, stack uint64) {
	goruntime.GC()
	goruntime.GC()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.StackInuse
}

// BenchmarkManaged100k holds 100,000 leases under managed renewal on the
// memory backend (real clock, TTL 30s, RenewEvery 10s: 10,000 renewals/s)
// and reports the memory each managed lease costs (heap + stacks), the CPU
// time each renewal costs and the renewal rate. Each b.N iteration is one
// renewal round (every lease renewed once: one RenewEvery, 10s) of steady
// state. Run it as one call per process
// (-benchtime 1x): a second call in the same process reuses the first's
// goroutine structures and inherits the runtime's adaptive initial stack
// size from its mass Close, and so measures something else.
func BenchmarkManaged100k(b *testing.B) {
	const n = 100_000
	store, _ := memory.New(memory.Options{})
	cb := &countingBackend{Backend: store}
	c, err := runtime.NewClient(cb, runtime.ClientOptions{MaxManaged: n})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	p, _ := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 30 * time.Second, SafetyMargin: 3 * time.Second, RenewEvery: 10 * time.Second})
	ctx := context.Background()
	keys := make([]leaseapi.Key, n)
	for i := range keys {
		keys[i] = leaseapi.MustKey("bench", fmt.Sprint("managed-", i))
	}
	// The backend's own entries are part of the baseline, not of the cost
	// of a managed lease: create them first.
	for _, k := range keys {
		rec, _ := store.TryAcquire(ctx, k, "warm-up-owner", time.Second)
		_ = store.Release(ctx, rec)
	}
	heap0, stack0 := liveBytes()
	handles := make([]*runtime.Handle, n)
	for i, k := range keys {
		h, err := c.TryAcquire(ctx, k, p)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := h.StartManaged(ctx); err != nil {
			b.Fatal(err)
		}
		handles[i] = h
	}
	setupHeap, setupStack := liveBytes()
	// Reach steady state (every lease renewed once), then measure whole
	// renewal rounds: each b.N iteration waits for n more renewals, one
	// RenewEvery period of the steady state.
	<-cb.after(n)
	b.ResetTimer()
	r0, cpu0, t0 := cb.renewals.Load(), cpuTime(), time.Now()
	for range b.N {
		<-cb.after(n)
	}
	renewals := cb.renewals.Load() - r0
	cpu := cpuTime() - cpu0
	elapsed := time.Since(t0)
	b.StopTimer()
	// Memory at steady state, after renewals ran (stacks may have grown),
	// and right after setup; the larger is reported.
	heap1, stack1 := liveBytes()
	heap1, stack1 = max(heap1, setupHeap), max(stack1, setupStack)
	heapPer, stackPer := float64(heap1-heap0)/n, float64(stack1-stack0)/n
	for _, h := range handles {
		if h.State() != leaseapi.StateActive {
			b.Fatalf("a managed lease is %v", h.State())
		}
	}
	b.ReportMetric(heapPer+stackPer, "B/lease")
	b.ReportMetric(heapPer, "heap-B/lease")
	b.ReportMetric(stackPer, "stack-B/lease")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(renewals), "cpu-ns/renewal")
	b.ReportMetric(float64(renewals)/elapsed.Seconds(), "renewals/s")
	b.ReportMetric(0, "ns/op")
}
