package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

// TestManagedOnInjectedClock: on a clock other than the wall clock
// (clock.Mock here), a lease's timer runs on that clock. Managed renewals
// that keep failing end in one Loss at the deadline, by the mock's time.
// (Every other test runs on the wall clock, simulated by synctest, where
// the actor uses the time package's timers directly.)
func TestManagedOnInjectedClock(t *testing.T) {
	mock := clock.NewMock()
	store, err := memory.New(memory.Options{Clock: mock})
	if err != nil {
		t.Fatal(err)
	}
	f := simtest.NewFaulty(store)
	c, err := runtime.NewClient(f, runtime.ClientOptions{Clock: mock})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	p := basicPolicy(t)
	h, err := c.TryAcquire(t.Context(), testKey(t, "mock-clock"), p)
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.StartManaged(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	deadline := h.Deadline()
	f.SetMode(simtest.Down)
	// Mock.Add fires the timers that are due, but the actor re-arms its
	// timer after it has reacted: step the mock until the loss arrives.
	// The real-time limit only bounds a broken run.
	limit := time.After(time.Minute)
	for {
		select {
		case l, ok := <-m.Loss():
			if !ok {
				t.Fatal("Loss closed without a value")
			}
			if l.State != leaseapi.StateExpired || leaseapi.Kind(l.Err) != leaseapi.ErrLost {
				t.Fatalf("Loss: got (%v, %v), want (Expired, ErrLost)", l.State, l.Err)
			}
			if l.At.Before(deadline) {
				t.Fatalf("Loss at %v, before the deadline %v", l.At, deadline)
			}
			if n := f.Calls(leaseapi.OperationRenew); n == 0 {
				t.Fatal("no managed renewal was attempted on the mock clock")
			}
			return
		case <-limit:
			t.Fatalf("no Loss by mock time %v (deadline %v)", mock.Now(), deadline)
		default:
		}
		mock.Add(250 * time.Millisecond)
	}
}
