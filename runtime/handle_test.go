package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

func TestAcquireRelease(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		p := basicPolicy(t)
		k := testKey(t, "a")
		h := mustAcquire(t, b.client, k, p)
		wantState(t, "fresh handle", h, leaseapi.StateActive)
		if h.Token() != 1 || h.Key() != k || h.Owner() == "" {
			t.Fatalf("handle: got token %d key %v owner %q", h.Token(), h.Key(), h.Owner())
		}
		_, err := b.client.TryAcquire(t.Context(), k, p)
		wantKind(t, "second TryAcquire", err, leaseapi.ErrContended)
		if err := h.Release(t.Context()); err != nil {
			t.Fatalf("Release: %v", err)
		}
		wantState(t, "released handle", h, leaseapi.StateReleased)
		if err := h.Release(t.Context()); err != nil {
			t.Fatalf("second Release: got %v, want nil (idempotent)", err)
		}
		<-h.Done()
		if err := h.Release(t.Context()); err != nil {
			t.Fatalf("Release after the supervisor exited: got %v, want nil", err)
		}
		wantKind(t, "Renew after release", h.Renew(t.Context()), leaseapi.ErrInvalidState)
		h2 := mustAcquire(t, b.client, k, p)
		if h2.Token() <= h.Token() {
			t.Fatalf("token after release: got %d, want > %d", h2.Token(), h.Token())
		}
		if h2.Owner() == h.Owner() {
			t.Fatal("two acquisitions shared an owner id")
		}
	})
}

func runtimeOpts() runtime.ClientOptions { return runtime.ClientOptions{} }

// TestDeadlineWithoutIO: Deadline is send time + TTL - margin, and State
// stops reporting Active at that instant, with the backend unreachable.
func TestDeadlineWithoutIO(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		p := basicPolicy(t)
		sent := time.Now()
		h := mustAcquire(t, b.client, testKey(t, "deadline"), p)
		if want := sent.Add(p.TTL() - p.SafetyMargin()); !h.Deadline().Equal(want) {
			t.Fatalf("Deadline: got %v, want %v", h.Deadline(), want)
		}
		b.faulty.SetMode(simtest.Blackhole)
		calls := b.faulty.Calls(leaseapi.OperationRenew) + b.faulty.Calls(leaseapi.OperationValidate)
		simtest.Advance(time.Until(h.Deadline()) - time.Nanosecond)
		wantState(t, "1ns before the deadline", h, leaseapi.StateActive)
		simtest.Advance(time.Nanosecond)
		wantState(t, "at the deadline", h, leaseapi.StateExpired)
		simtest.Settle()
		<-h.Done()
		if got := b.faulty.Calls(leaseapi.OperationRenew) + b.faulty.Calls(leaseapi.OperationValidate); got != calls {
			t.Fatalf("expiry made %d backend calls, want 0", got-calls)
		}
		wantKind(t, "Renew after expiry", h.Renew(t.Context()), leaseapi.ErrLost)
		wantKind(t, "Release after expiry", h.Release(t.Context()), leaseapi.ErrLost)
	})
}

// TestDeadlineAnchoredAtSend: a slow reply shortens the trust window; it
// never stretches it.
func TestDeadlineAnchoredAtSend(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		p := basicPolicy(t)
		b.faulty.SetDelay(1500 * time.Millisecond)
		sent := time.Now()
		h := mustAcquire(t, b.client, testKey(t, "slow"), p)
		if want := sent.Add(p.TTL() - p.SafetyMargin()); !h.Deadline().Equal(want) {
			t.Fatalf("Deadline after a slow acquire: got %v, want %v (send time based)", h.Deadline(), want)
		}
		renewSent := time.Now()
		if err := h.Renew(t.Context()); err != nil {
			t.Fatal(err)
		}
		if want := renewSent.Add(p.TTL() - p.SafetyMargin()); !h.Deadline().Equal(want) {
			t.Fatalf("Deadline after a slow renew: got %v, want %v", h.Deadline(), want)
		}
	})
}

func TestAmbiguousRenewThenRecover(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		p := basicPolicy(t)
		h := mustAcquire(t, b.client, testKey(t, "ambiguous"), p)
		before := h.Deadline()
		b.faulty.Inject(leaseapi.OperationRenew, simtest.LoseReply)
		wantKind(t, "Renew with a lost reply", h.Renew(t.Context()), leaseapi.ErrAmbiguousOutcome)
		wantState(t, "after an ambiguous renew", h, leaseapi.StateUncertain)
		if !h.Deadline().Equal(before) {
			t.Fatalf("ambiguous renew moved the deadline: got %v, want %v", h.Deadline(), before)
		}
		if err := h.Validate(t.Context()); err != nil {
			t.Fatalf("Validate: %v", err)
		}
		wantState(t, "after a confirming validate", h, leaseapi.StateActive)
		if !h.Deadline().Equal(before) {
			t.Fatal("Validate extended the deadline")
		}
		simtest.Advance(time.Second)
		b.faulty.Inject(leaseapi.OperationRenew, simtest.FailBeforeSend)
		wantKind(t, "Renew with the backend down", h.Renew(t.Context()), leaseapi.ErrBackendUnavailable)
		wantState(t, "after a failed renew", h, leaseapi.StateUncertain)
		if err := h.Renew(t.Context()); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		wantState(t, "after a successful renew", h, leaseapi.StateActive)
		if !h.Deadline().After(before) {
			t.Fatal("successful renew did not extend the deadline")
		}
	})
}

func TestStaleOwnerIsTerminal(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		p := basicPolicy(t)
		k := testKey(t, "stale")
		h := mustAcquire(t, b.client, k, p)
		b.faulty.Inject(leaseapi.OperationRenew, simtest.Stale)
		wantKind(t, "stale Renew", h.Renew(t.Context()), leaseapi.ErrStaleOwner)
		wantState(t, "after a stale renew", h, leaseapi.StateLost)
		<-h.Done()
		wantKind(t, "Renew after loss", h.Renew(t.Context()), leaseapi.ErrLost)
		wantKind(t, "Validate after loss", h.Validate(t.Context()), leaseapi.ErrLost)
		if _, err := h.StartManaged(t.Context()); !errors.Is(err, leaseapi.ErrLost) {
			t.Fatalf("StartManaged after loss: got %v, want ErrLost", err)
		}
	})
}

// TestRealStaleOwner: another owner takes the key after expiry on the
// backend; the old handle's renewal proves the loss.
func TestRealStaleOwner(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		p := basicPolicy(t)
		k := testKey(t, "replaced")
		h := mustAcquire(t, b.client, k, p)
		rec := h.Snapshot()
		simtest.Advance(p.TTL())
		if _, err := b.store.TryAcquire(t.Context(), k, "intruder-owner-id", p.TTL()); err != nil {
			t.Fatal(err)
		}
		if _, err := b.store.Validate(t.Context(), rec); !errors.Is(err, leaseapi.ErrStaleOwner) {
			t.Fatalf("old record: got %v, want ErrStaleOwner", err)
		}
		wantState(t, "handle past its deadline", h, leaseapi.StateExpired)
	})
}

func TestUncertainExpiresAtDeadline(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		p := basicPolicy(t)
		h := mustAcquire(t, b.client, testKey(t, "uncertain"), p)
		b.faulty.SetMode(simtest.Down)
		_ = h.Renew(t.Context())
		wantState(t, "backend down", h, leaseapi.StateUncertain)
		simtest.Advance(time.Until(h.Deadline()))
		wantState(t, "deadline passed", h, leaseapi.StateExpired)
		<-h.Done()
		if s := h.Status(); s.State != leaseapi.StateExpired || !errors.Is(s.Err, leaseapi.ErrLost) {
			t.Fatalf("Snapshot: got (%v, %v), want (expired, ErrLost)", s.State, s.Err)
		}
	})
}

func TestRenewUnreachableAfterDeadlineIsRefusedWithoutIO(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		p := basicPolicy(t)
		h := mustAcquire(t, b.client, testKey(t, "late"), p)
		// Block the actor in a hanging validate so the deadline passes while
		// it is busy; the renewal queued behind it must not be sent.
		b.faulty.SetMode(simtest.Blackhole)
		done := make(chan error, 1)
		go func() { done <- h.Validate(context.Background()) }()
		simtest.Settle()
		simtest.Advance(p.TTL())
		if err := <-done; err == nil {
			t.Fatal("hanging validate succeeded")
		}
		wantState(t, "after the deadline", h, leaseapi.StateExpired)
		calls := b.faulty.Calls(leaseapi.OperationRenew)
		wantKind(t, "Renew after the deadline", h.Renew(t.Context()), leaseapi.ErrLost)
		if b.faulty.Calls(leaseapi.OperationRenew) != calls {
			t.Fatal("a renewal was sent after the deadline")
		}
	})
}
