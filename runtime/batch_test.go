package runtime_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

// batchingBackend is a memory store seen as a remote backend: it blocks
// (each batch takes 10ms of simulated time), renews in batches, and counts.
type batchingBackend struct {
	s *memory.Store

	mu      sync.Mutex
	batches []int
	singles int
}

// Capabilities claims batched renewal: the runtime batches only for a
// backend that claims it.
func (b *batchingBackend) Capabilities() leaseapi.Capabilities {
	return leaseapi.Capabilities{RenewBatch: true}
}

func (b *batchingBackend) TryAcquire(ctx context.Context, k leaseapi.Key, o string, ttl time.Duration) (leaseapi.Record, error) {
	return b.s.TryAcquire(ctx, k, o, ttl)
}
func (b *batchingBackend) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	b.mu.Lock()
	b.singles++
	b.mu.Unlock()
	return b.s.Renew(ctx, rec, ttl)
}
func (b *batchingBackend) Validate(ctx context.Context, rec leaseapi.Record) (leaseapi.Record, error) {
	return b.s.Validate(ctx, rec)
}
func (b *batchingBackend) Release(ctx context.Context, rec leaseapi.Record) error {
	return b.s.Release(ctx, rec)
}
func (b *batchingBackend) RenewBatch(ctx context.Context, reqs []leaseapi.RenewRequest) []leaseapi.RenewResult {
	t := time.NewTimer(10 * time.Millisecond) // one round trip
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		out := make([]leaseapi.RenewResult, len(reqs))
		for i := range out {
			out[i].Err = leaseapi.NewError("renew", leaseapi.ErrAmbiguousOutcome, "")
		}
		return out
	}
	b.mu.Lock()
	b.batches = append(b.batches, len(reqs))
	b.mu.Unlock()
	return b.s.RenewBatch(ctx, reqs)
}

func TestRenewalsDueTogetherShareBatches(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, _ := memory.New(memory.Options{})
		bb := &batchingBackend{s: store}
		ob, _ := runtime.NewObservedBackend(bb, nil) // batching is found through the wrapper
		c, err := runtime.NewClient(ob, runtime.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		p := basicPolicy(t)
		const n = 50
		var hs []*runtime.Handle
		for i := range n {
			h := mustAcquire(t, c, testKey(t, fmt.Sprint("batch-", i)), p)
			if _, err := h.StartManaged(t.Context()); err != nil {
				t.Fatal(err)
			}
			hs = append(hs, h)
		}
		const ticks = 100
		for range ticks {
			simtest.Advance(p.RenewEvery())
		}
		for _, h := range hs {
			wantState(t, "managed lease after 100 renewal intervals", h, leaseapi.StateActive)
		}
		bb.mu.Lock()
		defer bb.mu.Unlock()
		total := 0
		for _, n := range bb.batches {
			total += n
		}
		if bb.singles != 0 {
			t.Fatalf("single renewals: got %d, want 0 (all through batches)", bb.singles)
		}
		if total < n*(ticks-1) {
			t.Fatalf("renewals in batches: got %d, want >= %d", total, n*(ticks-1))
		}
		// The first BatchesInFlight renewals due each go at once; all the
		// others due with them share the next batch.
		if per, want := float64(len(bb.batches))/ticks, float64(runtime.BatchesInFlight+1); per > want {
			t.Fatalf("batches per renewal interval: got %.1f for %d leases, want <= %v", per, n, want)
		}
	})
}

func TestNoBatchingOption(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, _ := memory.New(memory.Options{})
		bb := &batchingBackend{s: store}
		c, _ := runtime.NewClient(bb, runtime.ClientOptions{NoBatching: true})
		defer c.Close(context.Background())
		h := mustAcquire(t, c, testKey(t, "nobatch"), basicPolicy(t))
		if err := h.Renew(t.Context()); err != nil {
			t.Fatal(err)
		}
		if bb.singles != 1 || len(bb.batches) != 0 {
			t.Fatalf("got %d singles, %d batches; want 1, 0", bb.singles, len(bb.batches))
		}
	})
}

func TestBatchedRenewalTimesOutAmbiguous(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, _ := memory.New(memory.Options{})
		bb := &batchingBackend{s: store}
		c, _ := runtime.NewClient(bb, runtime.ClientOptions{})
		defer c.Close(context.Background())
		p := policy(t, leaseapi.PolicyOptions{TTL: time.Second, SafetyMargin: 100 * time.Millisecond, OperationTimeout: 5 * time.Millisecond})
		h := mustAcquire(t, c, testKey(t, "batch-timeout"), p)
		wantKind(t, "renewal slower than the operation timeout", h.Renew(t.Context()), leaseapi.ErrAmbiguousOutcome)
		wantState(t, "after a timed-out batch", h, leaseapi.StateUncertain)
	})
}

// hangingBatches blocks every RenewBatch until its context ends.
type hangingBatches struct{ *batchingBackend }

func (h hangingBatches) RenewBatch(ctx context.Context, reqs []leaseapi.RenewRequest) []leaseapi.RenewResult {
	<-ctx.Done()
	out := make([]leaseapi.RenewResult, len(reqs))
	for i := range out {
		out[i].Err = leaseapi.NewError("renew", leaseapi.ErrAmbiguousOutcome, "")
	}
	return out
}

// TestCloseWithBatchInFlight: Close while the batcher waits on a hanging
// backend returns, releases, and leaves no goroutine (the bubble checks).
func TestCloseWithBatchInFlight(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, _ := memory.New(memory.Options{})
		c, err := runtime.NewClient(hangingBatches{&batchingBackend{s: store}}, runtime.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p := basicPolicy(t)
		var hs []*runtime.Handle
		for i := range 5 {
			h := mustAcquire(t, c, testKey(t, fmt.Sprint("close-batch-", i)), p)
			if _, err := h.StartManaged(t.Context()); err != nil {
				t.Fatal(err)
			}
			hs = append(hs, h)
		}
		simtest.Advance(p.RenewEvery() + time.Millisecond) // renewals are stuck in a batch
		for _, h := range hs {
			if h.State() != leaseapi.StateActive {
				t.Fatalf("state while the batch hangs: %v", h.State())
			}
		}
		if err := c.Close(t.Context()); err != nil {
			t.Fatalf("Close: %v", err)
		}
		for i, h := range hs {
			if h.State() != leaseapi.StateReleased {
				t.Fatalf("handle %d after Close: %v, want released", i, h.State())
			}
			if _, held, _ := store.Inspect(t.Context(), h.Key()); held {
				t.Fatalf("handle %d still held on the backend after Close", i)
			}
		}
	})
}

// TestQueuedRenewalPastItsBoundIsLeftOut: a renewal whose bound ends while
// it waits for a batch (every batch slot is busy) is withdrawn: it is
// never sent, says so (ErrTimeout, not an ambiguous outcome), and does not
// fail the renewals queued with it (a batch runs under its earliest
// element's bound).
func TestQueuedRenewalPastItsBoundIsLeftOut(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, _ := memory.New(memory.Options{})
		bb := &batchingBackend{s: store}
		c, err := runtime.NewClient(bb, runtime.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		long := policy(t, leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: time.Second, OperationTimeout: 50 * time.Millisecond})
		short := policy(t, leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: time.Second, OperationTimeout: 5 * time.Millisecond})
		const n = runtime.BatchesInFlight
		errs := make(chan error, n+1)
		for i := range n {
			a := mustAcquire(t, c, testKey(t, fmt.Sprint("left-out-a", i)), long)
			go func() { errs <- a.Renew(t.Context()) }()
			simtest.Settle() // a batch of its own, in flight (10ms)
		}
		b := mustAcquire(t, c, testKey(t, "left-out-b"), short)
		d := mustAcquire(t, c, testKey(t, "left-out-d"), long)
		var bErr error
		done := make(chan struct{})
		go func() { bErr = b.Renew(t.Context()); close(done) }()
		go func() { errs <- d.Renew(t.Context()) }()
		simtest.Settle() // b and d wait for the next batch
		<-done           // b's 5ms bound ends during the a's batches
		wantKind(t, "renewal whose bound ended while queued", bErr, leaseapi.ErrTimeout)
		for range n + 1 {
			if err := <-errs; err != nil {
				t.Fatalf("renewal queued with an expired one: %v", err)
			}
		}
		wantState(t, "after a renewal withdrawn unsent", b, leaseapi.StateUncertain)
		bb.mu.Lock()
		defer bb.mu.Unlock()
		want := make([]int, n+1) // the a's, then d's without b
		for i := range want {
			want[i] = 1
		}
		if fmt.Sprint(bb.batches) != fmt.Sprint(want) {
			t.Fatalf("batch sizes: got %v, want %v (the a's, then d's without b)", bb.batches, want)
		}
	})
}

// countingHang is hangingBatches that counts the batches it was sent.
type countingHang struct {
	hangingBatches
	sent atomic.Int32
}

func (h *countingHang) RenewBatch(ctx context.Context, reqs []leaseapi.RenewRequest) []leaseapi.RenewResult {
	h.sent.Add(1)
	return h.hangingBatches.RenewBatch(ctx, reqs)
}

// TestCloseAnswersQueuedRenewals: a renewal still queued behind hanging
// batches (as many as may be in flight) when the client closes is never
// sent, and no caller is told of a success: all get an error (the queued
// one, whose call context ends at Close, ErrAmbiguousOutcome or
// ErrInvalidState, whichever of its context and the batcher's shutdown
// answers first), and the backend saw the batches in flight only.
func TestCloseAnswersQueuedRenewals(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, _ := memory.New(memory.Options{})
		hb := &countingHang{hangingBatches: hangingBatches{&batchingBackend{s: store}}}
		c, err := runtime.NewClient(hb, runtime.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p := basicPolicy(t)
		const n = runtime.BatchesInFlight
		aErr, bErr := make(chan error, n), make(chan error, 1)
		for i := range n {
			a := mustAcquire(t, c, testKey(t, fmt.Sprint("queued-close-a", i)), p)
			go func() { aErr <- a.Renew(context.Background()) }()
			simtest.Settle() // a batch of its own, in flight, hanging
		}
		b := mustAcquire(t, c, testKey(t, "queued-close-b"), p)
		go func() { bErr <- b.Renew(context.Background()) }()
		simtest.Settle()         // b waits for the next batch
		_ = c.Close(t.Context()) // its result is TestCloseWithBatchInFlight's
		for range n {
			wantKind(t, "renewal in a hanging batch at Close", <-aErr, leaseapi.ErrAmbiguousOutcome)
		}
		if eb := <-bErr; leaseapi.Kind(eb) != leaseapi.ErrAmbiguousOutcome && leaseapi.Kind(eb) != leaseapi.ErrInvalidState {
			t.Fatalf("queued renewal at Close: got %v, want ErrAmbiguousOutcome or ErrInvalidState", eb)
		}
		if got := hb.sent.Load(); got != n {
			t.Fatalf("batches sent: got %d, want %d (the queued renewal is never sent)", got, n)
		}
	})
}

// concurrentBatches is batchingBackend that records how many of its
// batches were in flight at once.
type concurrentBatches struct {
	*batchingBackend
	now, most atomic.Int32
}

func (c *concurrentBatches) RenewBatch(ctx context.Context, reqs []leaseapi.RenewRequest) []leaseapi.RenewResult {
	n := c.now.Add(1)
	defer c.now.Add(-1)
	for m := c.most.Load(); n > m && !c.most.CompareAndSwap(m, n); m = c.most.Load() {
	}
	return c.batchingBackend.RenewBatch(ctx, reqs)
}

// TestBatchesInFlightAtOnce: renewals that arrive while a batch is in
// flight do not wait for it while a sender is free: up to BatchesInFlight
// batches are in flight at once, and only then do renewals queue (and
// share the next batch).
func TestBatchesInFlightAtOnce(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, _ := memory.New(memory.Options{})
		cb := &concurrentBatches{batchingBackend: &batchingBackend{s: store}}
		c, err := runtime.NewClient(cb, runtime.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		p := basicPolicy(t)
		const n = runtime.BatchesInFlight
		errs := make(chan error, n+2)
		for i := range n + 2 {
			h := mustAcquire(t, c, testKey(t, fmt.Sprint("in-flight-", i)), p)
			go func() { errs <- h.Renew(t.Context()) }()
			simtest.Settle() // taken at once by a free sender, or queued
		}
		if got := cb.now.Load(); got != n {
			t.Fatalf("batches in flight: got %d, want %d", got, n)
		}
		for range n + 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if got := cb.most.Load(); got != n {
			t.Fatalf("most batches in flight at once: got %d, want %d", got, n)
		}
		cb.mu.Lock()
		defer cb.mu.Unlock()
		want := make([]int, n, n+1)
		for i := range want {
			want[i] = 1
		}
		want = append(want, 2) // the two that queued share one batch
		if fmt.Sprint(cb.batches) != fmt.Sprint(want) {
			t.Fatalf("batch sizes: got %v, want %v", cb.batches, want)
		}
	})
}
