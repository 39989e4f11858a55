package scheduler_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/scheduler"
	"github.com/leasekit/lease/simtest"
)

// offsetClock is a server clock that reads Offset ahead of the (simulated)
// real clock; durations and timers are unaffected.
type offsetClock struct {
	clock.Clock
	offset time.Duration
}

func (c offsetClock) Now() time.Time                  { return c.Clock.Now().Add(c.offset) }
func (c offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c offsetClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// server is one simulated server: its own fault wrapper over the shared
// store, its own client and scheduler, its own clock.
type server struct {
	name   string
	faulty *simtest.Faulty
	client *runtime.Client
	sched  *scheduler.Scheduler
	clk    clock.Clock

	mu     sync.Mutex
	events []scheduler.Event
}

func (s *server) record(e scheduler.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
}

func (s *server) count(o scheduler.Outcome) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.events {
		if e.Outcome == o {
			n++
		}
	}
	return n
}

func (s *server) eventList() []scheduler.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]scheduler.Event(nil), s.events...)
}

// newServer builds a server on store with a clock offset. The client is
// closed at cleanup (after the scheduler's Stop, registered later).
func newServer(t *testing.T, store *memory.Store, name string, offset time.Duration) *server {
	t.Helper()
	srv := &server{name: name, faulty: simtest.NewFaulty(store), clk: offsetClock{clock.New(), offset}}
	c, err := runtime.NewClient(srv.faulty, runtime.ClientOptions{Clock: srv.clk})
	if err != nil {
		t.Fatal(err)
	}
	srv.client = c
	t.Cleanup(func() {
		srv.faulty.SetMode(simtest.Pass)
		if err := c.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	s, err := scheduler.New(c, scheduler.Options{Clock: srv.clk, OnEvent: srv.record})
	if err != nil {
		t.Fatal(err)
	}
	srv.sched = s
	return srv
}

func newStore(t *testing.T) *memory.Store {
	t.Helper()
	s, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func start(t *testing.T, s *scheduler.Scheduler) {
	t.Helper()
	if err := s.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
}

func policy(t *testing.T, o leaseapi.PolicyOptions) leaseapi.Policy {
	t.Helper()
	p, err := leaseapi.NewPolicy(o)
	if err != nil {
		t.Fatalf("NewPolicy: %v", err)
	}
	return p
}

// jobPolicy: TTL 10s, margin 2s, renew every 3s, retry 1s, wait 5s.
func jobPolicy(t *testing.T) leaseapi.Policy {
	return policy(t, leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: 2 * time.Second, RenewEvery: 3 * time.Second, Retry: time.Second, Wait: 5 * time.Second, OperationTimeout: time.Second})
}

func wantKind(t *testing.T, what string, err, want error) {
	t.Helper()
	if got := leaseapi.Kind(err); got != want || !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want an error matching exactly %v", what, err, want)
	}
}

// pause waits d on the (simulated) clock or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
