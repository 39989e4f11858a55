package valkey_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/internal/backendtest/storetest"
	"github.com/leasekit/lease/internal/testserver"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// TestRuntimeHandoff: a waiter in Client.Acquire, in another client and
// process-like Store, holds the lease within a few milliseconds of the
// holder's release, although its retry interval is 1s.
func TestRuntimeHandoff(t *testing.T) {
	addr := serverAddr(t)
	prefix := uniquePrefix()
	sa := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	sb := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	warmWatch(t, sb, sa)
	// Every hand-off well under the 1s retry interval (the release woke
	// the waiter), and the median under 100ms.
	storetest.NewHandoff(t, sa, sb).CheckHandoff(t, leaseapi.MustKey("ns", "runtime-handoff"), 500*time.Millisecond)
}

// TestRuntimeRenewalFailsClosedDuringPause: with the server paused, managed
// renewal gets no reply within OperationTimeout and the handle stops
// admitting (Uncertain) before its local deadline.
func TestRuntimeRenewalFailsClosedDuringPause(t *testing.T) {
	srv := privateServer(t, testserver.RedisOptions{})
	s := newStore(t, newClient(t, srv.Addr()), valkey.Options{})
	c := storetest.NewClient(t, s, runtime.ClientOptions{})
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{
		TTL: time.Second, SafetyMargin: 100 * time.Millisecond,
		RenewEvery: 150 * time.Millisecond, OperationTimeout: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Acquire(t.Context(), leaseapi.MustKey("ns", "runtime-pause"), p)
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.StartManaged(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Stop(context.Background()) }()
	if _, err := srv.Do("CLIENT", "PAUSE", "1500", "WRITE"); err != nil {
		t.Fatal(err)
	}
	deadline := h.Deadline()
	for h.State() == leaseapi.StateActive {
		if time.Now().After(deadline) {
			t.Fatal("still active at the local deadline")
		}
		time.Sleep(5 * time.Millisecond) // polling an atomic view, not ordering goroutines
	}
	if now := time.Now(); !now.Before(deadline) {
		t.Fatalf("left Active at %v, after the deadline %v", now, deadline)
	}
	if st := h.State(); st != leaseapi.StateUncertain && st != leaseapi.StateExpired {
		t.Fatalf("state during the pause: got %v, want uncertain (or expired)", st)
	}
	t.Logf("left Active %v before the local deadline; state %v", time.Until(deadline), h.State())
	// CLIENT UNPAUSE is a write-free command, allowed during a WRITE pause.
	if _, err := srv.Do("CLIENT", "UNPAUSE"); err != nil {
		t.Fatal(err)
	}
}

// TestRuntimeReplyLost: through the runtime, an acquisition whose reply is
// lost is resolved by Inspect (the grant is adopted, never left to a second
// holder), and a renewal whose reply is lost makes the handle Uncertain
// until a later renewal succeeds.
func TestRuntimeReplyLost(t *testing.T) {
	addr := serverAddr(t)
	p, s, direct := proxied(t, addr)
	c := storetest.NewClient(t, s, runtime.ClientOptions{})
	pol, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 5 * time.Second, OperationTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	k := leaseapi.MustKey("ns", "runtime-cut")
	healthy(t, s, k)
	done := p.CutAfterRequestContaining([]byte(k.String())) // not a ping
	h, err := c.TryAcquire(t.Context(), k, pol)
	<-done
	if err != nil {
		t.Fatalf("TryAcquire with its reply lost: got %v, want the grant adopted through Inspect", err)
	}
	rec, held, err := direct.Inspect(t.Context(), k)
	if err != nil || !held || rec.Owner != h.Owner() || rec.Token != h.Token() {
		t.Fatalf("server state: got (owner %q token %d held %v, %v), want the handle's grant", rec.Owner, rec.Token, held, err)
	}
	if _, err := direct.TryAcquire(t.Context(), k, ownerB, time.Second); leaseapi.Kind(err) != leaseapi.ErrContended {
		t.Fatalf("second acquirer: got %v, want ErrContended", err)
	}

	healthy(t, s, k)
	done = p.CutAfterRequestContaining([]byte(h.Owner()))
	err = h.Renew(t.Context())
	<-done
	wantKind(t, "Renew with its reply lost", err, leaseapi.ErrAmbiguousOutcome)
	if st := h.State(); st != leaseapi.StateUncertain {
		t.Fatalf("state after an ambiguous renewal: got %v, want uncertain", st)
	}
	eventually(t, "Renew after the cut", func() error { return h.Renew(t.Context()) })
	if st := h.State(); st != leaseapi.StateActive {
		t.Fatalf("state after a successful renewal: got %v, want active", st)
	}
	if err := h.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}
