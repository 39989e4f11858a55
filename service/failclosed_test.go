package service_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/backendtest"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/service"
	"github.com/leasekit/lease/simtest"
)

// TestZeroValues: a Singleton not built by New (the zero value, a nil
// pointer) answers ErrInvalidState from Start, Serve and Stop and never
// panics, now or later on another goroutine (the finding: Start returned
// nil and its goroutine then crashed the process).
func TestZeroValues(t *testing.T) {
	ctx := context.Background()
	for name, s := range map[string]*service.Singleton{"zero": {}, "nil": nil} {
		backendtest.WantKind(t, name+" Start", s.Start(ctx), leaseapi.ErrInvalidState)
		backendtest.WantKind(t, name+" Serve", s.Serve(ctx), leaseapi.ErrInvalidState)
		backendtest.WantKind(t, name+" Stop", s.Stop(ctx), leaseapi.ErrInvalidState)
		if _, ok := s.Leading(); ok {
			t.Errorf("%s Singleton leads", name)
		}
	}
}

// TestFailuresReportedWhileWaiting: with Policy.Wait > 0, a backend that
// fails every attempt (down, or misconfigured: a wrong password, a missing
// schema, all ErrBackendUnavailable) is reported once per campaign instead
// of hiding behind an exhausted Wait; a follower of a healthy leader
// reports nothing.
func TestFailuresReportedWhileWaiting(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store := backendtest.MemoryStore(t)
		c, f := backendtest.FaultyClient(t, store, runtime.ClientOptions{})
		var errs atomic.Int32
		s, err := service.New(c, service.Options{
			Key: leaderKey, Policy: electionPolicy(t), Backoff: 10 * time.Second, Run: waitDone, // Wait 30s
			OnError: func(err error) {
				errs.Add(1)
				if k := leaseapi.Kind(err); k != leaseapi.ErrBackendUnavailable {
					t.Errorf("reported %v, want ErrBackendUnavailable", err)
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		f.SetMode(simtest.Down)
		backendtest.Start(t, s)
		simtest.Advance(time.Minute + time.Second)
		// Campaigns at 0, 10s, ..., 60s, each one attempt, each reported.
		if n := errs.Load(); n != 7 {
			t.Fatalf("%d failures reported in a minute, want 7 (one per Backoff)", n)
		}
		f.SetMode(simtest.Pass)
		simtest.Advance(10 * time.Second)
		if _, ok := s.Leading(); !ok {
			t.Fatal("not leading after the backend came back")
		}

		// A follower of that leader waits, and reports nothing.
		c2, _ := backendtest.FaultyClient(t, store, runtime.ClientOptions{})
		var followerErrs atomic.Int32
		follower, err := service.New(c2, service.Options{Key: leaderKey, Policy: electionPolicy(t), Run: waitDone,
			OnError: func(error) { followerErrs.Add(1) }})
		if err != nil {
			t.Fatal(err)
		}
		backendtest.Start(t, follower)
		simtest.Advance(2 * time.Minute)
		if n := followerErrs.Load(); n != 0 {
			t.Fatalf("follower of a healthy leader reported %d errors", n)
		}
		if _, ok := follower.Leading(); ok {
			t.Fatal("the follower leads too")
		}
	})
}

// TestStopReportsAFailedRelease: when the release at the end of the term
// that Stop ended fails, definitely (ErrBackendUnavailable: the lease is
// still held) or ambiguously (ErrAmbiguousOutcome: it may be), Stop says
// so instead of nil (the finding: Stop's doc promised "the lease has been
// released" and it could not know). A later Stop says it again; OnError
// hears it too.
func TestStopReportsAFailedRelease(t *testing.T) {
	for _, tc := range []struct {
		fault simtest.Fault
		want  error
	}{
		{simtest.FailBeforeSend, leaseapi.ErrBackendUnavailable},
		{simtest.LoseReply, leaseapi.ErrAmbiguousOutcome},
	} {
		t.Run(tc.want.Error(), func(t *testing.T) {
			simtest.Simulate(t, func(t *testing.T) {
				c, f := newClient(t)
				var reported atomic.Int32
				s, err := service.New(c, service.Options{Key: leaderKey, Policy: electionPolicy(t),
					OnError: func(err error) {
						if leaseapi.Kind(err) == tc.want {
							reported.Add(1)
						}
					},
					Run: func(ctx context.Context, _ *runtime.Handle) error {
						<-ctx.Done()
						f.Inject(leaseapi.OperationRelease, tc.fault)
						return nil
					}})
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Start(t.Context()); err != nil {
					t.Fatal(err)
				}
				simtest.Advance(time.Second)
				if _, ok := s.Leading(); !ok {
					t.Fatal("not leading")
				}
				backendtest.WantKind(t, "Stop after a failed release", s.Stop(t.Context()), tc.want)
				backendtest.WantKind(t, "second Stop", s.Stop(t.Context()), tc.want)
				if reported.Load() != 1 {
					t.Fatalf("OnError heard the release failure %d times, want 1", reported.Load())
				}
			})
		})
	}
}

// TestStopAfterACleanReleaseIsNil: the counterpart: a release that
// succeeds makes Stop return nil, and the key is free at once.
func TestStopAfterACleanReleaseIsNil(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		c, _ := newClient(t)
		s, err := service.New(c, service.Options{Key: leaderKey, Policy: electionPolicy(t), Run: waitDone})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		simtest.Advance(time.Second)
		if err := s.Stop(t.Context()); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		// The supervisor exits just after the release's reply (see
		// Client.Held): let it, then nothing may be held.
		simtest.Settle()
		if c.Held() != 0 {
			t.Fatalf("%d leases held after Stop", c.Held())
		}
	})
}

// TestServeReportsItsOwnRelease: Serve returns the failed release of the
// term its ctx ended, and a later Serve whose release succeeds does not
// return that stale error.
func TestServeReportsItsOwnRelease(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		c, f := newClient(t)
		var failRelease atomic.Bool
		s, err := service.New(c, service.Options{Key: leaderKey, Policy: electionPolicy(t),
			Run: func(ctx context.Context, _ *runtime.Handle) error {
				<-ctx.Done()
				if failRelease.Load() {
					f.Inject(leaseapi.OperationRelease, simtest.FailBeforeSend)
				}
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		serve := func() error {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			return s.Serve(ctx)
		}
		failRelease.Store(true)
		backendtest.WantKind(t, "Serve with a failed release", serve(), leaseapi.ErrBackendUnavailable)
		simtest.Advance(10 * time.Second) // the unreleased lease runs out
		failRelease.Store(false)
		backendtest.WantKind(t, "Serve with a clean release", serve(), leaseapi.ErrTimeout)
		if err := s.Stop(t.Context()); err != nil {
			t.Fatalf("Stop after a clean Serve: %v", err)
		}
	})
}
