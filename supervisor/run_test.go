package supervisor_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/simtest"
	"github.com/leasekit/lease/supervisor"
)

// changes records the state changes a supervisor reports.
type changes struct {
	mu   sync.Mutex
	seen []supervisor.StateChange
}

func (c *changes) record(sc supervisor.StateChange) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, sc)
}

func (c *changes) get() []supervisor.StateChange {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]supervisor.StateChange(nil), c.seen...)
}

// start acquires key on f and starts its supervisor with the hook.
func start(t *testing.T, f *simtest.Faulty, life context.Context, rec *changes) (*supervisor.Supervisor, leaseapi.Policy) {
	t.Helper()
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: time.Second, RenewEvery: 3 * time.Second, OperationTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg := (&supervisor.Config{Backend: f, Clock: clock.New(), Life: life, OnStateChange: rec.record}).Defaults()
	return startGranted(t, f, cfg, p, "hook"), p
}

// TestStateChangeHook: every state change is reported once, on the actor,
// after the view is published and before the reply: From, To, the cause
// and the token, at the local instant of the step.
func TestStateChangeHook(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, err := memory.New(memory.Options{})
		if err != nil {
			t.Fatal(err)
		}
		f := simtest.NewFaulty(store)
		rec := &changes{}
		s, _ := start(t, f, context.Background(), rec)
		token := s.View().Record.Token

		f.Inject(leaseapi.OperationRenew, simtest.LoseReply)
		if err := s.Renew(t.Context()); leaseapi.Kind(err) != leaseapi.ErrAmbiguousOutcome {
			t.Fatalf("renew with a lost reply: got %v, want ErrAmbiguousOutcome", err)
		}
		// The hook ran before the reply: the change is there already.
		if got := rec.get(); len(got) != 1 {
			t.Fatalf("changes after the ambiguous renew: got %d, want 1", len(got))
		}
		if err := s.Validate(t.Context()); err != nil {
			t.Fatalf("validate: %v", err)
		}
		if err := s.Validate(t.Context()); err != nil { // no change: not reported
			t.Fatalf("validate: %v", err)
		}
		at := time.Now()
		if err := s.Release(t.Context()); err != nil {
			t.Fatalf("release: %v", err)
		}
		<-s.Done()
		A, U, R := leaseapi.StateActive, leaseapi.StateUncertain, leaseapi.StateReleased
		want := []struct {
			from, to leaseapi.State
			cause    error
		}{{A, U, leaseapi.ErrAmbiguousOutcome}, {U, A, nil}, {A, R, nil}}
		got := rec.get()
		if len(got) != len(want) {
			t.Fatalf("changes: got %+v, want %d of them", got, len(want))
		}
		for i, w := range want {
			g := got[i]
			if g.From != w.from || g.To != w.to || leaseapi.Kind(g.Cause) != w.cause || g.Token != token {
				t.Errorf("change %d: got {%v → %v, cause %v, token %d}, want {%v → %v, cause kind %v, token %d}", i, g.From, g.To, g.Cause, g.Token, w.from, w.to, w.cause, token)
			}
		}
		if !got[2].At.Equal(at) {
			t.Errorf("release change at: got %v, want %v (the step's instant)", got[2].At, at)
		}
	})
}

// TestStateChangeHookOnExpiryAndClose: the deadline and the client's
// close are state changes like the others.
func TestStateChangeHookOnExpiryAndClose(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, err := memory.New(memory.Options{})
		if err != nil {
			t.Fatal(err)
		}
		f := simtest.NewFaulty(store)

		expiring := &changes{}
		s, p := start(t, f, context.Background(), expiring)
		simtest.Advance(p.TTL())
		<-s.Done()
		if got := expiring.get(); len(got) != 1 || got[0].To != leaseapi.StateExpired || leaseapi.Kind(got[0].Cause) != leaseapi.ErrLost {
			t.Fatalf("expiry: got %+v, want one change to expired with an ErrLost cause", got)
		}

		closing := &changes{}
		life, cancel := context.WithCancel(context.Background())
		s, _ = start(t, f, life, closing)
		f.Inject(leaseapi.OperationRelease, simtest.LoseReply)
		cancel()
		<-s.Done()
		if got := closing.get(); len(got) != 1 || got[0].To != leaseapi.StateLost {
			t.Fatalf("close with an unconfirmed release: got %+v, want one change to lost", got)
		}
		if leaseapi.Kind(s.CloseErr()) != leaseapi.ErrAmbiguousOutcome {
			t.Fatalf("CloseErr: got %v, want ErrAmbiguousOutcome", s.CloseErr())
		}
	})
}

// TestFinalViewNeverChanges: the terminal view is published without a
// copy (publish), so nothing may write it afterwards. A reader goroutine
// reads every field of every view it sees while the lease is released,
// the actor exits and a Close follows (run it with -race), and the final
// view read after Done equals the one first seen Released.
func TestFinalViewNeverChanges(t *testing.T) {
	store, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	life, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, _ := start(t, simtest.NewFaulty(store), life, new(changes))
	var firstReleased supervisor.View
	stop, read := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(read)
		for {
			v := *s.View() // every field: a write after publish races this read
			if v.State == leaseapi.StateReleased && firstReleased.State == 0 {
				firstReleased = v
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	if err := s.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	<-s.Done()
	cancel() // the client's close after the actor's exit changes nothing
	close(stop)
	<-read
	if got := *s.View(); got.State != leaseapi.StateReleased || got != firstReleased && firstReleased.State != 0 {
		t.Fatalf("final view: got %+v, want the released view %+v", got, firstReleased)
	}
}

// countingClock counts its Now readings.
type countingClock struct {
	clock.Clock
	n atomic.Int64
}

func (c *countingClock) Now() time.Time {
	c.n.Add(1)
	return c.Clock.Now()
}

// TestReleaseReadsTheClockThrice: serving a release of a parked actor
// reads the clock three times — the request's instant, the call's send
// and its return, which is also the instant of the outcome event (the
// loop used to read it once more for that).
func TestReleaseReadsTheClockThrice(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, err := memory.New(memory.Options{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		g, err := store.TryAcquire(t.Context(), leaseapi.MustKey("sup", "clock"), "owner-1", p.TTL())
		if err != nil {
			t.Fatal(err)
		}
		clk := &countingClock{Clock: clock.New()}
		cfg := (&supervisor.Config{Backend: store, Clock: clk}).Defaults()
		now := time.Now()
		s := supervisor.Start(cfg, p, supervisor.Grant{Record: g, SentAt: now, RecvAt: now})
		simtest.Settle() // parked, its timer made
		clk.n.Store(0)
		if err := s.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		<-s.Done()
		if got := clk.n.Load(); got != 3 {
			t.Fatalf("clock readings for a release: got %d, want 3", got)
		}
	})
}
