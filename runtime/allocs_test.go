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
// Client on b, on the wall clock.
func pairAllocs(t *testing.T, b leaseapi.Backend) float64 {
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
	k := leaseapi.MustKey("allocs", "pair")
	ctx := context.Background()
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

// TestPairAllocs guards what the runtime allocates per pair: on the
// memory backend (which never blocks, so no call needs a bound) the owner
// id, the handle with its supervisor, the goroutine, the mailbox, the
// release request and its reply, and two views; on a backend whose calls
// must be bounded, also the acquisition's own timeout context (the
// caller's ctx is its parent) but none for the release, whose bound is a
// context shared by the calls of a slot of time.
func TestPairAllocs(t *testing.T) {
	store, _ := memory.New(memory.Options{})
	if n, want := pairAllocs(t, store), 10.0+raceAllocs; n > want {
		t.Errorf("memory backend: got %v allocations per pair, want at most %v", n, want)
	}
	// The fault wrapper adds one per call it makes (its WithoutCancel).
	bounded, _ := memory.New(memory.Options{})
	if n, want := pairAllocs(t, simtest.NewFaulty(bounded)), 16.0+raceAllocs; n > want {
		t.Errorf("bounded backend: got %v allocations per pair, want at most %v", n, want)
	}
}
