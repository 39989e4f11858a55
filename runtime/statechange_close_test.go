package runtime_test

import (
	"context"
	"sync"
	"testing"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

// TestCloseFromStateChangeHook: a hook that calls Close does not deadlock
// (the bubble would report every goroutine blocked): Close releases the
// other lease and returns nil while the hook runs, and the shutdown's
// change is delivered after the hook returns. A later Close reports the
// same shutdown.
func TestCloseFromStateChangeHook(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		var (
			log    changeLog
			c      *runtime.Client
			closed = make(chan error, 1)
			other  *runtime.Handle
			after  leaseapi.State // other's state when Close returned in the hook
			once   sync.Once      // the hook closes on the first release only
		)
		o := runtimeOpts()
		o.KeyHasher = fleetHasher
		o.OnStateChange = func(sc runtime.StateChange) {
			log.hook(sc)
			if sc.To == leaseapi.StateReleased {
				once.Do(func() {
					err := c.Close(context.Background())
					after = other.State()
					closed <- err
				})
			}
		}
		b := setup(t, o)
		c = b.client
		p := basicPolicy(t)
		first := mustAcquire(t, c, testKey(t, "first"), p)
		other = mustAcquire(t, c, testKey(t, "other"), p)
		if err := first.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := <-closed; err != nil {
			t.Fatalf("Close from the hook: %v", err)
		}
		if after != leaseapi.StateReleased {
			t.Errorf("when Close returned in the hook, the other lease was %v, want released", after)
		}
		if _, held, err := b.store.Inspect(t.Context(), other.Key()); err != nil || held {
			t.Errorf("the other lease on the backend after Close: held %v (%v)", held, err)
		}
		got := log.take() // the delivery goroutine went on after the hook
		if len(got) != 2 || got[1].Token != other.Token() || got[1].To != leaseapi.StateReleased {
			t.Fatalf("changes: got %v, want first's release, then other's", got)
		}
		if err := c.Close(t.Context()); err != nil {
			t.Errorf("Close again: %v", err)
		}
		if _, err := c.TryAcquire(t.Context(), testKey(t, "late"), p); leaseapi.Kind(err) != leaseapi.ErrInvalidState {
			t.Errorf("TryAcquire after a Close from the hook: %v, want ErrInvalidState", err)
		}
	})
}

// TestCloseWaitsForStateChangeHook: a Close that the hook did not make
// still waits for the hook's call in progress to return.
func TestCloseWaitsForStateChangeHook(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		gate := make(chan struct{})
		entered := make(chan struct{}, 1)
		o := runtimeOpts()
		o.OnStateChange = func(sc runtime.StateChange) {
			select {
			case entered <- struct{}{}:
				<-gate // only the first call blocks
			default:
			}
		}
		b := setup(t, o)
		h := mustAcquire(t, b.client, testKey(t, "k"), basicPolicy(t))
		if err := h.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		<-entered
		done := make(chan error, 1)
		go func() { done <- b.client.Close(context.Background()) }()
		simtest.Settle()
		select {
		case err := <-done:
			t.Fatalf("Close returned (%v) while the hook was still running", err)
		default:
		}
		close(gate)
		if err := <-done; err != nil {
			t.Fatalf("Close: %v", err)
		}
	})
}
