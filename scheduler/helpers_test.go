package scheduler_test

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/internal/backendtest"
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
// store, its own client and scheduler, its own clock, and its events.
type server struct {
	name   string
	faulty *simtest.Faulty
	client *runtime.Client
	sched  *scheduler.Scheduler
	clk    clock.Clock
	events backendtest.Log[scheduler.Event]
}

func (s *server) record(e scheduler.Event) { s.events.Add(e) }

func (s *server) count(o scheduler.Outcome) int {
	return s.events.Count(func(e scheduler.Event) bool { return e.Outcome == o })
}

func (s *server) eventList() []scheduler.Event { return s.events.All() }

// newServer builds a server on store with a clock offset. The client is
// closed at cleanup (after the scheduler's Stop, registered later).
func newServer(t *testing.T, store *memory.Store, name string, offset time.Duration) *server {
	t.Helper()
	srv := &server{name: name, clk: offsetClock{clock.New(), offset}}
	srv.client, srv.faulty = backendtest.FaultyClient(t, store, runtime.ClientOptions{Clock: srv.clk})
	s, err := scheduler.New(srv.client, scheduler.Options{Clock: srv.clk, OnEvent: srv.record})
	if err != nil {
		t.Fatal(err)
	}
	srv.sched = s
	return srv
}

// jobPolicy: TTL 10s, margin 2s, renew every 3s, retry 1s, wait 5s.
func jobPolicy(t *testing.T) leaseapi.Policy {
	return backendtest.Policy(t, leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: 2 * time.Second, RenewEvery: 3 * time.Second, Retry: time.Second, Wait: 5 * time.Second, OperationTimeout: time.Second})
}
