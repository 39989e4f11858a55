package supervisor_test

import (
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/simtest"
	"github.com/leasekit/lease/supervisor"
)

// steppingClock reads an instant that moves by step at every reading
// while steps > 0 (each reading uses one), and never otherwise; its
// timers are those of a mock clock that never moves, so a timer fires
// only if it was made for an instant already reached.
type steppingClock struct {
	*clock.Mock // the timers
	mu          sync.Mutex
	now         time.Time
	step        time.Duration
	steps       int
}

func (c *steppingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.steps > 0 {
		c.steps--
		c.now = c.now.Add(c.step)
	}
	return c.now
}

func (c *steppingClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *steppingClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

func (c *steppingClock) run(steps int) {
	c.mu.Lock()
	c.steps = steps
	c.mu.Unlock()
}

// TestDueRenewalSkipsTheTimer: a managed renewal that is due by the time
// the previous renewal is answered (the clock moved past RenewEvery
// meanwhile, as on a backend slower than RenewEvery) is made at once,
// without the timer: here the timers never fire, so a loop that waited
// for its timer would make no renewal after the first. Each renewal is
// still a compare-and-renew whose outcome the actor applies, and once the
// clock stops the next one waits for its due instant again.
func TestDueRenewalSkipsTheTimer(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		const every = 10 * time.Millisecond
		clk := &steppingClock{Mock: clock.NewMock(), step: every}
		clk.now = clk.Mock.Now()
		store, err := memory.New(memory.Options{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		calls := 0 // renewals, counted by OnCall on the actor
		cfg := (&supervisor.Config{Backend: store, Clock: clk, OnCall: func(c supervisor.Call) {
			if c.Kind == supervisor.CallRenew && c.Err == nil {
				calls++
			}
		}}).Defaults()
		p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: time.Second, RenewEvery: every, OperationTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		g, err := store.TryAcquire(t.Context(), leaseapi.MustKey("sup", "due"), "owner-1", p.TTL())
		if err != nil {
			t.Fatal(err)
		}
		s := supervisor.Start(cfg, p, supervisor.Grant{Record: g, SentAt: clk.Now(), RecvAt: clk.Now()})
		defer func() { _ = s.Release(t.Context()); <-s.Done() }()
		if _, err := s.StartManaged(t.Context()); err != nil {
			t.Fatal(err)
		}
		simtest.Settle() // the actor waits for a timer that will not fire
		first := s.View().Deadline
		// A renewal reads the clock four times (the event, the send, the
		// store, the reply): each renewal in this budget finds the next one
		// due when it is answered.
		const renewals = 5
		clk.run(4 * renewals)
		if err := s.Renew(t.Context()); err != nil {
			t.Fatal(err)
		}
		simtest.Settle() // the actor waits for its timer again
		if got := calls; got < renewals {
			t.Fatalf("got %d renewals, want at least %d", got, renewals)
		}
		v := s.View()
		if v.State != leaseapi.StateActive || !v.Deadline.After(first) {
			t.Fatalf("got state %v, deadline moved by %v; want Active with a later deadline", v.State, v.Deadline.Sub(first))
		}
	})
}
