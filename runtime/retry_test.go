package runtime_test

import (
	"math"
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

// hostileJitter breaks the RetrySource contract ([0, max)) on purpose.
type hostileJitter time.Duration

func (j hostileJitter) Jitter(time.Duration) time.Duration { return time.Duration(j) }

// contendedWait acquires k with a holder in the way and reports the
// error, the simulated time the Acquire took and its backend attempts.
func contendedWait(t *testing.T, o runtime.ClientOptions, p leaseapi.Policy) (error, time.Duration, int) {
	t.Helper()
	b := setup(t, o)
	k := testKey(t, "retry-bounds")
	if _, err := b.store.TryAcquire(t.Context(), k, "holder", time.Hour); err != nil {
		t.Fatal(err)
	}
	calls := b.faulty.Calls(leaseapi.OperationAcquire)
	start := time.Now()
	_, err := b.client.Acquire(t.Context(), k, p)
	return err, time.Since(start), b.faulty.Calls(leaseapi.OperationAcquire) - calls
}

// TestRetryNearMaxInt64WaitsOutWait is the regression test of the finding:
// Retry near math.MaxInt64 with Jitter 1s and Wait 1s overflowed the pause
// (10,000 back-to-back attempts in 29 ms, then ErrContended). The pause is
// bounded by the remaining Wait: one pause of exactly 1s, then ErrTimeout.
// (If NewPolicy bounds Retry, the input never reaches the runtime: a
// rejection matching ErrInvalidState passes too.)
func TestRetryNearMaxInt64WaitsOutWait(t *testing.T) {
	for _, retry := range []time.Duration{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 - time.Second, math.MaxInt64 / 2} {
		simtest.Simulate(t, func(t *testing.T) {
			p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 10 * time.Second, Retry: retry, Jitter: time.Second, Wait: time.Second})
			if err != nil {
				wantKind(t, "NewPolicy with Retry near MaxInt64", err, leaseapi.ErrInvalidState)
				return
			}
			err, took, attempts := contendedWait(t, runtimeOpts(), p)
			wantKind(t, "Acquire with Retry near MaxInt64", err, leaseapi.ErrTimeout)
			if took != time.Second || attempts != 2 {
				t.Fatalf("Retry %d: got %d attempts in %v, want 2 attempts in exactly Wait (1s)", retry, attempts, took)
			}
		})
	}
}

// TestRetryPauseSaturates shows the runtime bounds the pause on its own,
// whatever the policy and the RetrySource return: a jitter that would
// overflow Retry+Jitter, or a negative one, never makes a negative pause.
func TestRetryPauseSaturates(t *testing.T) {
	for _, tc := range []struct {
		name         string
		jitter       time.Duration
		wantTook     time.Duration
		wantAttempts int
	}{
		{"jitter at MaxInt64", math.MaxInt64, 3 * time.Second, 2},
		{"jitter MaxInt64-Retry+1", math.MaxInt64 - time.Second + 1, 3 * time.Second, 2},
		{"negative jitter", -math.MaxInt64, 3 * time.Second, 4}, // pauses of Retry (1s) each
		{"min int64 jitter", math.MinInt64, 3 * time.Second, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			simtest.Simulate(t, func(t *testing.T) {
				o := runtimeOpts()
				o.Retry = hostileJitter(tc.jitter)
				p := policy(t, leaseapi.PolicyOptions{TTL: 10 * time.Second, Retry: time.Second, Jitter: time.Second, Wait: 3 * time.Second})
				err, took, attempts := contendedWait(t, o, p)
				wantKind(t, tc.name, err, leaseapi.ErrTimeout)
				if took != tc.wantTook || attempts != tc.wantAttempts {
					t.Fatalf("%s: got %d attempts in %v, want %d in %v", tc.name, attempts, took, tc.wantAttempts, tc.wantTook)
				}
			})
		})
	}
}
