package service_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/backendtest"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/service"
	"github.com/leasekit/lease/simtest"
)

func newClient(t *testing.T) (*runtime.Client, *simtest.Faulty) {
	t.Helper()
	return backendtest.FaultyClient(t, backendtest.MemoryStore(t), runtime.ClientOptions{})
}

func waitDone(ctx context.Context, _ *runtime.Handle) error {
	<-ctx.Done()
	return nil
}

func TestBadInput(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		c, _ := newClient(t)
		p := electionPolicy(t)
		good := service.Options{Key: leaderKey, Policy: p, Run: waitDone}
		with := func(f func(*service.Options)) service.Options { o := good; f(&o); return o }
		_, err := service.New(nil, good)
		backendtest.WantKind(t, "New(nil client)", err, leaseapi.ErrInvalidState)
		for _, tc := range []struct {
			name string
			o    service.Options
		}{
			{"zero key", with(func(o *service.Options) { o.Key = leaseapi.Key{} })},
			{"zero policy", with(func(o *service.Options) { o.Policy = leaseapi.Policy{} })},
			{"nil run", with(func(o *service.Options) { o.Run = nil })},
			{"negative backoff", with(func(o *service.Options) { o.Backoff = -time.Second })},
		} {
			_, err := service.New(c, tc.o)
			backendtest.WantKind(t, "New with "+tc.name, err, leaseapi.ErrInvalidState)
		}
		s, err := service.New(c, good)
		if err != nil {
			t.Fatal(err)
		}
		s2, _ := service.New(c, good)
		backendtest.CheckStartStop(t, s, s2, backendtest.StartStopHooks[*service.Singleton]{
			BeforeStart: func(s *service.Singleton) {
				backendtest.WantKind(t, "Serve(nil)", s.Serve(nil), leaseapi.ErrInvalidState) //nolint:staticcheck
			},
			WhileStarted: func(s *service.Singleton) {
				backendtest.WantKind(t, "Serve while started", s.Serve(t.Context()), leaseapi.ErrInvalidState)
			},
			AfterStop: func(s *service.Singleton) {
				backendtest.WantKind(t, "Serve after Stop", s.Serve(t.Context()), leaseapi.ErrInvalidState)
			},
		})
	})
}

// TestStartLeadsStopReleases: Start returns at once; the candidate leads,
// renewal keeps the lease for long; Stop cancels Run, waits for it and
// releases (the key is free at once), calling OnStoppedLeading.
func TestStartLeadsStopReleases(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		c, _ := newClient(t)
		p := electionPolicy(t)
		var started, stopped atomic.Int32
		var token atomic.Uint64
		var runReturned atomic.Bool
		s, err := service.New(c, service.Options{
			Key: leaderKey, Policy: p,
			OnStartedLeading: func(tk leaseapi.Token) { started.Add(1); token.Store(uint64(tk)) },
			OnStoppedLeading: func() {
				if !runReturned.Load() {
					t.Error("OnStoppedLeading before Run returned")
				}
				stopped.Add(1)
			},
			Run: func(ctx context.Context, h *runtime.Handle) error {
				<-ctx.Done()
				runReturned.Store(true)
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		simtest.Advance(time.Hour)
		if tk, ok := s.Leading(); !ok || started.Load() != 1 || uint64(tk) != token.Load() {
			t.Fatalf("leading %v %v, started %d", tk, ok, started.Load())
		}
		if err := s.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, ok := s.Leading(); ok || stopped.Load() != 1 || !runReturned.Load() {
			t.Fatalf("after Stop: leading %v, stopped %d, run returned %v", ok, stopped.Load(), runReturned.Load())
		}
		h, err := c.TryAcquire(t.Context(), leaderKey, p)
		if err != nil {
			t.Fatalf("lease not released by Stop: %v", err)
		}
		if h.Token() != leaseapi.Token(token.Load())+1 {
			t.Fatalf("token %d after a term with token %d", h.Token(), token.Load())
		}
		_ = h.Release(t.Context())
	})
}

// TestServe: Serve blocks until ctx is done, then returns ErrCanceled with
// the lease released; it can be served again; Stop ends a Serve with nil.
func TestServe(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		c, _ := newClient(t)
		p := electionPolicy(t)
		s, err := service.New(c, service.Options{Key: leaderKey, Policy: p, Run: waitDone})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		served := make(chan error, 1)
		go func() { served <- s.Serve(ctx) }()
		simtest.Advance(time.Minute)
		select {
		case err := <-served:
			t.Fatalf("Serve returned early: %v", err)
		default:
		}
		if _, ok := s.Leading(); !ok {
			t.Fatal("not leading under Serve")
		}
		backendtest.WantKind(t, "Start while serving", s.Start(t.Context()), leaseapi.ErrInvalidState)
		cancel()
		err = <-served
		backendtest.WantKind(t, "Serve after cancel", err, leaseapi.ErrCanceled)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Serve: %v does not match context.Canceled", err)
		}
		h, err := c.TryAcquire(t.Context(), leaderKey, p)
		if err != nil {
			t.Fatalf("lease not released when Serve returned: %v", err)
		}
		_ = h.Release(t.Context())

		// Served again (a supervisor restart), then ended by Stop.
		go func() { served <- s.Serve(t.Context()) }()
		simtest.Advance(time.Minute)
		if _, ok := s.Leading(); !ok {
			t.Fatal("not leading under the second Serve")
		}
		if err := s.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := <-served; err != nil {
			t.Fatalf("Serve ended by Stop: %v", err)
		}
	})
}

// TestPanicAndEarlyReturnStepDown: a Run that panics, then one that
// returns early, each end the term (reported through OnError, lease
// released); the candidate campaigns again after Backoff.
func TestPanicAndEarlyReturnStepDown(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		c, _ := newClient(t)
		p := electionPolicy(t)
		var terms atomic.Int32
		var starts []time.Time
		var errs []error
		sentinel := errors.New("done early")
		s, err := service.New(c, service.Options{
			Key: leaderKey, Policy: p, Backoff: 5 * time.Second,
			OnError: func(err error) { errs = append(errs, err) },
			Run: func(ctx context.Context, h *runtime.Handle) error {
				starts = append(starts, time.Now())
				switch terms.Add(1) {
				case 1:
					panic("boom")
				case 2:
					return sentinel
				}
				return waitDone(ctx, h)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		simtest.Advance(time.Minute)
		if err := s.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if len(starts) != 3 || starts[1].Sub(starts[0]) != 5*time.Second || starts[2].Sub(starts[1]) != 5*time.Second {
			t.Fatalf("term starts %v, want three, Backoff apart", starts)
		}
		var pe *service.PanicError
		if len(errs) != 2 || !errors.As(errs[0], &pe) || pe.Value != "boom" || !errors.Is(errs[1], sentinel) {
			t.Fatalf("reported errors %v", errs)
		}
		backendtest.WantKind(t, "panic error", errs[0], leaseapi.ErrInvalidState)
		if strings.Contains(errs[0].Error(), "boom") {
			t.Fatal("panic value in error text")
		}
	})
}

// TestCampaignFailuresAreReportedAndRetried: while the backend is down a
// candidate reports each failed campaign and retries every Backoff; it
// leads as soon as the backend is back. (With Wait > 0, Acquire reports an
// exhausted Wait as ErrTimeout whatever the attempts failed with, and that
// is not reported: see the package doc.)
func TestCampaignFailuresAreReportedAndRetried(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		c, f := newClient(t)
		p := backendtest.Policy(t, leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: 2 * time.Second, Retry: time.Second})
		var errs atomic.Int32
		s, err := service.New(c, service.Options{
			Key: leaderKey, Policy: p, Backoff: 10 * time.Second, Run: waitDone,
			OnError: func(err error) {
				errs.Add(1)
				if k := leaseapi.Kind(err); k != leaseapi.ErrBackendUnavailable {
					t.Errorf("reported %v", err)
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		f.SetMode(simtest.Down)
		if err := s.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer s.Stop(context.Background()) //nolint:errcheck
		simtest.Advance(time.Minute + time.Second)
		// Campaigns at 0, 10s, ..., 60s, each reported.
		if n := errs.Load(); n != 7 {
			t.Fatalf("%d failures reported in a minute, want 7 (one per Backoff)", n)
		}
		f.SetMode(simtest.Pass)
		simtest.Advance(10 * time.Second)
		if _, ok := s.Leading(); !ok {
			t.Fatal("not leading after the backend came back")
		}
	})
}

// TestStopTimesOut: a Run that ignores its ctx makes Stop return
// ErrTimeout; a later Stop waits again.
func TestStopTimesOut(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		c, _ := newClient(t)
		release := make(chan struct{})
		s, err := service.New(c, service.Options{Key: leaderKey, Policy: electionPolicy(t),
			Run: func(context.Context, *runtime.Handle) error { <-release; return nil }})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		simtest.Advance(time.Second)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		backendtest.WantKind(t, "Stop with a stubborn Run", s.Stop(ctx), leaseapi.ErrTimeout)
		close(release)
		if err := s.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}
