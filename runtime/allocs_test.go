package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

// pairAllocs is the allocations of one TryAcquire+Release pair through a
// Client on b, on the wall clock, with the caller's context ctx; with
// held, while the client holds another lease.
func pairAllocs(t *testing.T, b leaseapi.Backend, ctx context.Context, held bool) float64 {
	t.Helper()
	c, err := runtime.NewClient(b, runtime.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: time.Minute, OperationTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if held {
		if _, err := c.TryAcquire(ctx, leaseapi.MustKey("allocs", "held"), p); err != nil {
			t.Fatal(err)
		}
	}
	k := leaseapi.MustKey("allocs", "pair")
	return testing.AllocsPerRun(200, func() {
		h, err := c.TryAcquire(ctx, k, p)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestPairAllocs guards what the runtime allocates per pair: the owner
// id, the handle with its supervisor, the goroutine, the mailbox (three),
// and the reply channel of the lease's first request (the release's; the
// exchange is reused: mailbox.Slot); the first view and the final one are
// part of the supervisor's allocation. A backend whose calls
// must be bounded adds the acquisition's exact bound (one allocation: its
// deadline, over a context shared by the calls of a slot of time, as the
// release's bound is), none when the caller's context already ends before
// the OperationTimeout, and a timeout context of its own (four) when the
// caller's context may be canceled later than that. While the client
// holds another lease, the supervisor runs on the goroutine of an ended
// one (supervisor/pool.go): one allocation less, the go statement's.
func TestPairAllocs(t *testing.T) {
	store, _ := memory.New(memory.Options{})
	bounded := hideCapabilities{store} // not NeverBlocks: every call is bounded
	type key struct{}
	soon, cancel := context.WithTimeout(context.Background(), time.Second) // before the 2s OperationTimeout
	defer cancel()
	later, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for _, tc := range []struct {
		name string
		b    leaseapi.Backend
		ctx  context.Context
		held bool
		want float64
	}{
		{"memory backend", store, context.Background(), false, 7},
		{"bounded backend", bounded, context.Background(), false, 8},
		{"bounded backend, caller's context ends first", bounded, soon, false, 7},
		{"bounded backend, caller's context with a value", bounded, context.WithValue(context.Background(), key{}, 1), false, 8},
		{"bounded backend, caller's context ends later", bounded, later, false, 11},
		// The fault wrapper adds one per call it makes (its WithoutCancel).
		{"fault wrapper", simtest.NewFaulty(store), context.Background(), false, 10},
		// A pair whose previous actor has not parked yet when the next
		// starts (a loaded machine) makes a goroutine: allow half of them.
		{"memory backend, another lease held", store, context.Background(), true, 6.5},
		{"bounded backend, another lease held", bounded, context.Background(), true, 7.5},
	} {
		n, want := pairAllocs(t, tc.b, tc.ctx, tc.held), tc.want+raceAllocs
		t.Logf("%s: %v allocations per pair", tc.name, n)
		if n > want {
			t.Errorf("%s: got %v allocations per pair, want at most %v", tc.name, n, want)
		}
	}
}

// TestHandleSizeClass guards the bytes of the allocation that holds a
// lease's Handle and Supervisor: the allocator adds an 8-byte header to
// an object over 512 bytes that holds pointers, so up to 760 bytes it
// takes the 768-byte size class, and 8 bytes more take it to 896 (128
// bytes more per lease, held or managed; BenchmarkTryAcquireRelease
// allocated 1,315 bytes per pair at 768 against 1,189 at 760).
func TestHandleSizeClass(t *testing.T) {
	if got, want := runtime.HandleSize, uintptr(760); got > want {
		t.Errorf("Handle with its Supervisor: got %d bytes, want at most %d (the 768-byte size class with its header)", got, want)
	}
}

// hideCapabilities is a backend that claims no capability.
type hideCapabilities struct{ leaseapi.Backend }

// batchingMemory is a memory store seen as a backend that blocks and
// renews in batches: its renewals go through the Client's batcher.
type batchingMemory struct{ *memory.Store }

func (batchingMemory) Capabilities() leaseapi.Capabilities {
	return leaseapi.Capabilities{RenewBatch: true}
}

// TestBatchedRenewAllocs guards what the runtime allocates per batched
// Handle.Renew, on the wall clock: the request to the supervisor and its
// reply (two), the view it publishes, and the memory store's result
// slice. The batcher's own request and reply channel are reused, a batch
// runs under a context of the client's life shared by the batches whose
// bounds end in the same slot (internal/callctx) instead of making one
// (three allocations and a timer), and it allocates no error for the
// elements that have a result.
func TestBatchedRenewAllocs(t *testing.T) {
	store, _ := memory.New(memory.Options{})
	c, err := runtime.NewClient(batchingMemory{store}, runtime.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: time.Minute, OperationTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h, err := c.TryAcquire(ctx, leaseapi.MustKey("allocs", "renew"), p)
	if err != nil {
		t.Fatal(err)
	}
	n := testing.AllocsPerRun(200, func() {
		if err := h.Renew(ctx); err != nil {
			t.Fatal(err)
		}
	})
	if want := 4.0 + raceAllocs; n > want {
		t.Errorf("got %v allocations per batched renewal, want at most %v", n, want)
	}
}
