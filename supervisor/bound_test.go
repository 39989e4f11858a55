package supervisor_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/simtest"
	"github.com/leasekit/lease/supervisor"
)

// startWall starts a supervisor on the wall clock (WallClock set, as the
// runtime does without a Clock option), with the calls bounded by
// OperationTimeout through the shared contexts.
func startWall(t *testing.T, f *simtest.Faulty, life context.Context) (*supervisor.Supervisor, leaseapi.Policy) {
	t.Helper()
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: time.Second, OperationTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg := (&supervisor.Config{Backend: f, Clock: clock.New(), WallClock: true, Life: life}).Defaults()
	return startGranted(t, f, cfg, p, "wall"), p
}

// TestWallCallBoundedByOperationTimeout: on the wall clock a hung renewal
// ends within OperationTimeout (and at most 1/64 of it early), and the
// lease fails closed: Uncertain, no admission, deadline unmoved.
func TestWallCallBoundedByOperationTimeout(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, _ := memory.New(memory.Options{})
		f := simtest.NewFaulty(store)
		s, p := startWall(t, f, context.Background())
		deadline := s.View().Deadline
		f.Inject(leaseapi.OperationRenew, simtest.Hang)
		start := time.Now()
		err := s.Renew(t.Context())
		took := time.Since(start)
		if k := leaseapi.Kind(err); k != leaseapi.ErrTimeout && k != leaseapi.ErrAmbiguousOutcome {
			t.Fatalf("hung renew: got %v, want ErrTimeout or ErrAmbiguousOutcome", err)
		}
		if op := p.OperationTimeout(); took > op || took < op-op/64 {
			t.Fatalf("hung renew took %v, want within (%v - 1/64, %v]", took, op, op)
		}
		if v := s.View(); v.State != leaseapi.StateUncertain || !v.Deadline.Equal(deadline) {
			t.Fatalf("after the hung renew: got %v deadline %v, want Uncertain with deadline %v", v.State, v.Deadline, deadline)
		}
		if err := s.Release(t.Context()); err != nil {
			t.Fatalf("release: %v", err)
		}
		<-s.Done()
	})
}

// TestWallCloseEndsInFlightCall: the client's close cancels a call in
// flight at once (the shared context is a child of life), and the
// supervisor then releases and exits without waiting for the timeout.
func TestWallCloseEndsInFlightCall(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, _ := memory.New(memory.Options{})
		f := simtest.NewFaulty(store)
		life, cancel := context.WithCancel(context.Background())
		s, _ := startWall(t, f, life)
		f.Inject(leaseapi.OperationRenew, simtest.Hang)
		errc := make(chan error, 1)
		go func() { errc <- s.Renew(context.Background()) }()
		synctest.Wait() // the renewal hangs in the backend
		start := time.Now()
		cancel()
		<-s.Done()
		if took := time.Since(start); took != 0 {
			t.Fatalf("close with a call in flight took %v of the clock, want 0", took)
		}
		if err := <-errc; err == nil {
			t.Fatal("renew canceled by close: got nil, want an error")
		}
		if f.Applied(leaseapi.OperationRelease) != 1 || s.CloseErr() != nil {
			t.Fatalf("release on close: applied %d, CloseErr %v; want 1, nil", f.Applied(leaseapi.OperationRelease), s.CloseErr())
		}
	})
}

// TestWallRenewAllocs guards the cost of a renewal on the wall clock: the
// request, its reply and the published view, and no context of its own.
func TestWallRenewAllocs(t *testing.T) {
	store, _ := memory.New(memory.Options{})
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: time.Minute, SafetyMargin: time.Second, OperationTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg := (&supervisor.Config{Backend: store, Clock: clock.New(), WallClock: true}).Defaults()
	s := startGranted(t, store, cfg, p, "allocs")
	defer func() { _ = s.Release(context.Background()); <-s.Done() }()
	ctx := context.Background()
	n := testing.AllocsPerRun(200, func() {
		if err := s.Renew(ctx); err != nil {
			t.Fatal(err)
		}
	})
	// A slot change makes one context every few milliseconds: allow it.
	if n > 4 {
		t.Fatalf("allocations per renewal: got %v, want at most 4", n)
	}
	t.Logf("allocations per renewal: %v", n)
}
