package memory_test

import (
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	simtest.Conformance(t, simtest.Harness{
		Simulated: true,
		New: func(t *testing.T) leaseapi.Backend {
			s, err := memory.New(memory.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Late: lateRig,
	})
}

// holdClock is a store clock that, while held, does not return from Now:
// a mutation that reads it (under the store's mutex, after its checks) is
// held back inside the backend until Release.
type holdClock struct {
	mu      sync.Mutex
	held    chan struct{} // closed by release; nil when not holding
	arrived chan struct{} // receives when a Now is held back (buffer 1)
}

func (c *holdClock) Now() time.Time {
	c.mu.Lock()
	held, arrived := c.held, c.arrived
	c.mu.Unlock()
	if held != nil {
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-held
	}
	return time.Now()
}

// lateRig holds a mutation back in the store's clock. It ignores the
// suite's backend: the rig's store is one of its own, on a holdClock.
func lateRig(t *testing.T, _ leaseapi.Backend) *simtest.LateRig {
	clk := &holdClock{arrived: make(chan struct{}, 1)}
	s, err := memory.New(memory.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	release := func(*testing.T) {
		clk.mu.Lock()
		defer clk.mu.Unlock()
		if clk.held != nil {
			close(clk.held)
			clk.held = nil
		}
	}
	t.Cleanup(func() { release(t) })
	return &simtest.LateRig{
		Backend: s,
		Hold: func(*testing.T, leaseapi.Key) {
			clk.mu.Lock()
			defer clk.mu.Unlock()
			clk.held = make(chan struct{})
		},
		WaitHeld: func(t *testing.T, errc <-chan error) {
			select {
			case <-clk.arrived:
			case err := <-errc:
				t.Fatalf("the call returned before it was held back: %v", err)
			}
		},
		WaitPast: func(_ *testing.T, deadline time.Time, _ time.Duration) {
			simtest.Advance(time.Until(deadline) + time.Millisecond) // the deadline passes
		},
		Release: release, // the call returns once executed; the suite waits for it
	}
}

// TestTokenBoundary: a key whose token is 2^64-1 cannot be acquired again;
// the attempt fails closed and grants nothing, and the token before the
// boundary is still granted.
func TestTokenBoundary(t *testing.T) {
	s, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	k := leaseapi.MustKey("boundary", "k")
	memory.SetToken(s, k, math.MaxUint64-1)
	rec, err := s.TryAcquire(t.Context(), k, "a", time.Minute)
	if err != nil || rec.Token != math.MaxUint64 {
		t.Fatalf("the last token: got (%d, %v), want (2^64-1, nil)", rec.Token, err)
	}
	if err := s.Release(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	got, err := s.TryAcquire(t.Context(), k, "b", time.Minute)
	if !errors.Is(err, leaseapi.ErrInvalidState) || leaseapi.Kind(err) != leaseapi.ErrInvalidState || got != (leaseapi.Record{}) {
		t.Fatalf("past the last token: got (%+v, %v), want ErrInvalidState and no record", got, err)
	}
	after, held, err := s.Inspect(t.Context(), k)
	if err != nil || held || after.Token != math.MaxUint64 {
		t.Fatalf("after the refusal: got (token %d, held %v, %v), want (2^64-1, free, nil)", after.Token, held, err)
	}
	// The old grant stays released: nothing was granted to anyone.
	_, err = s.Validate(t.Context(), rec)
	if !errors.Is(err, leaseapi.ErrStaleOwner) {
		t.Fatalf("Validate of the released grant: got %v, want ErrStaleOwner", err)
	}
}

// TestZeroAndNilStore: a Store that New did not make returns
// ErrInvalidState from every operation instead of panicking.
func TestZeroAndNilStore(t *testing.T) {
	ctx := t.Context()
	k := leaseapi.MustKey("zero", "k")
	rec := leaseapi.Record{Key: k, Owner: "owner", Token: 1, AcquiredAt: time.Unix(1, 0), ExpiresAt: time.Unix(2, 0)}
	for name, s := range map[string]*memory.Store{"zero": {}, "nil": nil} {
		t.Run(name, func(t *testing.T) {
			want := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, leaseapi.ErrInvalidState) || leaseapi.Kind(err) != leaseapi.ErrInvalidState {
					t.Fatalf("%s: got %v, want ErrInvalidState", what, err)
				}
			}
			_, err := s.TryAcquire(ctx, k, "owner", time.Minute)
			want("TryAcquire", err)
			_, err = s.Renew(ctx, rec, time.Minute)
			want("Renew", err)
			_, err = s.Validate(ctx, rec)
			want("Validate", err)
			want("Release", s.Release(ctx, rec))
			_, _, err = s.Inspect(ctx, k)
			want("Inspect", err)
			res := s.RenewBatch(ctx, []leaseapi.RenewRequest{{Record: rec, TTL: time.Minute}})
			want("RenewBatch", res[0].Err)
			ch, stop := s.WatchRelease(k)
			stop()
			select {
			case <-ch:
				t.Fatal("WatchRelease of an unusable store received")
			default:
			}
			// A typed-nil or zero store is refused by the client up front
			// (typed nil) or fails its first call closed (zero).
			_, err = runtime.NewClient(s, runtime.ClientOptions{})
			if name == "nil" {
				want("NewClient with a typed-nil store", err)
			} else if err != nil {
				t.Fatalf("NewClient with a zero store: %v", err)
			}
		})
	}
}
