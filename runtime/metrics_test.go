package runtime_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

// TestMetricsExactUnderConcurrency runs 64 goroutines of acquisitions,
// renewals (half of them failing), validations and releases on one client
// and checks that every counter equals the number of operations performed,
// per outcome.
func TestMetricsExactUnderConcurrency(t *testing.T) {
	const goroutines, rounds = 64, 25
	const n = goroutines * rounds
	store, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := simtest.NewFaulty(store)
	faults := make([]simtest.Fault, n/2)
	for i := range faults {
		faults[i] = simtest.FailBeforeSend
	}
	f.Inject(leaseapi.OperationRenew, faults...)
	c, err := runtime.NewClient(f, runtime.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	p := policy(t, leaseapi.PolicyOptions{TTL: time.Minute, OperationTimeout: 10 * time.Second})
	ctx := t.Context()

	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			k := leaseapi.MustKey("metrics", fmt.Sprint("g", g))
			for range rounds {
				if err := metricsRound(ctx, c, k, p); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	m := c.Metrics()
	ok, contended := leaseapi.OutcomeOf(nil), leaseapi.OutcomeOf(leaseapi.ErrContended)
	unavailable, invalid := leaseapi.OutcomeOf(leaseapi.ErrBackendUnavailable), leaseapi.OutcomeOf(leaseapi.ErrInvalidState)
	for _, w := range []struct {
		what      string
		got, want uint64
	}{
		{"acquisitions ok", m.Acquisition(ok).Count(), n},
		{"acquisitions contended", m.Acquisition(contended).Count(), n},
		{"backend acquire ok", m.BackendCall(leaseapi.OperationAcquire, ok).Count(), n},
		{"backend acquire contended", m.BackendCall(leaseapi.OperationAcquire, contended).Count(), n},
		{"backend renew ok", m.BackendCall(leaseapi.OperationRenew, ok).Count(), n / 2},
		{"backend renew unavailable", m.BackendCall(leaseapi.OperationRenew, unavailable).Count(), n / 2},
		{"backend validate ok", m.BackendCall(leaseapi.OperationValidate, ok).Count(), n},
		{"backend release ok", m.BackendCall(leaseapi.OperationRelease, ok).Count(), n},
		{"renewals ok", m.Renewal(ok), n / 2},
		{"renewals unavailable", m.Renewal(unavailable), n / 2},
		{"releases ok", m.Release(ok), n},
		{"releases invalid (answered without I/O)", m.Release(invalid), 0},
	} {
		if w.got != w.want {
			t.Errorf("%s: got %d, want %d", w.what, w.got, w.want)
		}
	}
	if len(m.Acquisitions) != 2 || len(m.Renewals) != 2 || len(m.Releases) != 1 {
		t.Errorf("series: got %d acquisition, %d renewal, %d release outcomes, want 2, 2, 1", len(m.Acquisitions), len(m.Renewals), len(m.Releases))
	}
	if len(m.BackendCalls) != 6 {
		t.Errorf("backend series: got %d, want 6: %+v", len(m.BackendCalls), m.BackendCalls)
	}
	if m.Waiting != 0 || m.Managed != 0 {
		t.Errorf("gauges: got waiting %d, managed %d, want 0, 0", m.Waiting, m.Managed)
	}
}

// metricsRound is one round of TestMetricsExactUnderConcurrency on a key
// only this goroutine uses: acquire (ok), acquire again (contended), renew
// (ok or an injected unavailability), validate (ok: it restores Active),
// release (ok), release again (nil, no I/O), renew after release
// (ErrInvalidState, no I/O).
func metricsRound(ctx context.Context, c *runtime.Client, k leaseapi.Key, p leaseapi.Policy) error {
	h, err := c.TryAcquire(ctx, k, p)
	if err != nil {
		return fmt.Errorf("TryAcquire: %w", err)
	}
	if _, err := c.TryAcquire(ctx, k, p); leaseapi.Kind(err) != leaseapi.ErrContended {
		return fmt.Errorf("second TryAcquire: got %v, want ErrContended", err)
	}
	if err := h.Renew(ctx); err != nil && leaseapi.Kind(err) != leaseapi.ErrBackendUnavailable {
		return fmt.Errorf("Renew: got %v, want nil or ErrBackendUnavailable", err)
	}
	if err := h.Validate(ctx); err != nil {
		return fmt.Errorf("Validate: %w", err)
	}
	if err := h.Release(ctx); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	if err := h.Release(ctx); err != nil {
		return fmt.Errorf("second Release: %w", err)
	}
	if err := h.Renew(ctx); leaseapi.Kind(err) != leaseapi.ErrInvalidState {
		return fmt.Errorf("Renew after Release: got %v, want ErrInvalidState", err)
	}
	<-h.Done()
	return nil
}

// TestMetricsAcquireWaitIsTimed: an Acquire that waits for a holder to
// release is counted once, with its whole wait, and its contended attempts
// are counted as backend calls.
func TestMetricsAcquireWaitIsTimed(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		p := policy(t, leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: time.Second, Retry: time.Second, Wait: 30 * time.Second, OperationTimeout: time.Second})
		k := testKey(t, "wait")
		h := mustAcquire(t, b.client, k, p)
		done := make(chan error, 1)
		go func() {
			h2, err := b.client.Acquire(context.Background(), k, p)
			if err == nil {
				err = h2.Release(context.Background())
			}
			done <- err
		}()
		simtest.Settle()
		if got := b.client.Metrics().Waiting; got != 1 {
			t.Fatalf("waiting: got %d, want 1", got)
		}
		simtest.Advance(2500 * time.Millisecond) // attempts at 0, 1s, 2s: contended
		if err := h.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		simtest.Settle() // the release notification wakes the waiter at once
		if err := <-done; err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		m := b.client.Metrics()
		ok, contended := leaseapi.OutcomeOf(nil), leaseapi.OutcomeOf(leaseapi.ErrContended)
		acq := m.Acquisition(ok)
		if acq.Count() != 2 || acq.Sum != 2500*time.Millisecond {
			t.Fatalf("acquisitions ok: got %d totalling %v, want 2 totalling 2.5s (the waiter's wait)", acq.Count(), acq.Sum)
		}
		if got := m.BackendCall(leaseapi.OperationAcquire, contended).Count(); got != 3 {
			t.Fatalf("contended attempts: got %d, want 3", got)
		}
		// The holder's grant took no simulated time, as did its call (one
		// observation for both); the waiter's granting call took none
		// either, though its acquisition took 2.5s.
		if call := m.BackendCall(leaseapi.OperationAcquire, ok); call.Count() != 2 || call.Sum != 0 {
			t.Fatalf("granting calls: got %d totalling %v, want 2 totalling 0", call.Count(), call.Sum)
		}
		if m.Waiting != 0 {
			t.Fatalf("waiting after: got %d, want 0", m.Waiting)
		}
	})
}

// TestMetricsOff: with NoMetrics only the gauges are reported.
func TestMetricsOff(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		o := runtimeOpts()
		o.NoMetrics = true
		b := setup(t, o)
		h := mustAcquire(t, b.client, testKey(t, "off"), basicPolicy(t))
		m := b.client.Metrics()
		if m.Held != 1 || len(m.Acquisitions) != 0 || len(m.BackendCalls) != 0 {
			t.Fatalf("metrics off: got held %d, %d acquisition and %d call series, want 1, 0, 0", m.Held, len(m.Acquisitions), len(m.BackendCalls))
		}
		if err := h.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// otherGrant is a backend whose grants name another owner, so the client
// gives each one back (releaseQuietly) instead of using it.
type otherGrant struct{ leaseapi.Backend }

func (o otherGrant) TryAcquire(ctx context.Context, key leaseapi.Key, owner string, ttl time.Duration) (leaseapi.Record, error) {
	rec, err := o.Backend.TryAcquire(ctx, key, owner, ttl)
	rec.Owner += "-other"
	return rec, err
}

// TestMetricsDiscardedGrantIsACallNotARelease: the release of a grant the
// client will not use is a backend release call, but not one of the
// Releases, which count what handles sent (and derive from the calls).
func TestMetricsDiscardedGrantIsACallNotARelease(t *testing.T) {
	store, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := runtime.NewClient(otherGrant{store}, runtime.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	k := leaseapi.MustKey("metrics", "discard")
	_, err = c.TryAcquire(t.Context(), k, basicPolicy(t))
	wantKind(t, "TryAcquire", err, leaseapi.ErrBackendUnavailable)
	m := c.Metrics()
	var calls uint64
	for _, h := range m.BackendCalls {
		if h.Operation == leaseapi.OperationRelease {
			calls += h.Count()
		}
	}
	if calls != 1 || len(m.Releases) != 0 {
		t.Fatalf("got %d release calls and releases %+v, want 1 call and no release", calls, m.Releases)
	}
	if got := m.BackendCall(leaseapi.OperationAcquire, leaseapi.OutcomeOf(nil)).Count(); got != 1 {
		t.Fatalf("acquire calls ok: got %d, want 1", got)
	}
}
