package simtest

import (
	"context"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
)

// ledgerChain builds client → ledger → deferred → faulty → ledger → store.
func ledgerChain(t *testing.T) (*Ledger, *Deferred, *Faulty, leaseapi.Backend, *memory.Store) {
	t.Helper()
	store, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := NewLedger()
	f := NewFaulty(l.Server(store))
	d := NewDeferred(f)
	return l, d, f, l.Client("c", d), store
}

func opCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// TestLedgerMatchesAmbiguity: C4 tells a lost reply (committed) from a
// hung call (not committed) and a deferred execution (committed later),
// and C6 passes only when both kinds and a fresh acquire happened.
func TestLedgerMatchesAmbiguity(t *testing.T) {
	Simulate(t, func(t *testing.T) {
		l, d, f, b, _ := ledgerChain(t)
		k := leaseapi.MustKey("ledger", "k")
		ctx, cancel := opCtx(time.Second)
		rec, err := b.TryAcquire(ctx, k, "owner-1", 10*time.Second)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if got := l.CheckFaultRun(nil); len(got) != 2 {
			t.Fatalf("C6 on a run without ambiguity: got %v, want two thin-run violations", got)
		}
		f.Inject(leaseapi.OperationRenew, LoseReply)
		ctx, cancel = opCtx(time.Second)
		_, err = b.Renew(ctx, rec, 10*time.Second)
		cancel()
		if leaseapi.Kind(err) != leaseapi.ErrAmbiguousOutcome {
			t.Fatalf("lost reply: got %v", err)
		}
		f.Inject(leaseapi.OperationRenew, Hang)
		ctx, cancel = opCtx(time.Second)
		_, err = b.Renew(ctx, rec, 10*time.Second)
		cancel()
		if leaseapi.Kind(err) != leaseapi.ErrAmbiguousOutcome {
			t.Fatalf("hang: got %v", err)
		}
		c, n, vs := l.CheckAmbiguity()
		if c != 1 || n != 1 || len(vs) != 0 {
			t.Fatalf("C4: got committed %d, not committed %d, %v; want 1, 1, none", c, n, vs)
		}
		// A deferred release: ambiguous now, committed once it ran.
		d.DeferApply(leaseapi.OperationRelease, 2*time.Second)
		ctx, cancel = opCtx(time.Second)
		err = b.Release(ctx, rec)
		cancel()
		if leaseapi.Kind(err) != leaseapi.ErrAmbiguousOutcome {
			t.Fatalf("deferred release: got %v", err)
		}
		if c, n, _ := l.CheckAmbiguity(); c != 1 || n != 2 {
			t.Fatalf("C4 before the late execution: got %d committed, %d not, want 1, 2", c, n)
		}
		if err := d.Drain(context.Background()); err != nil {
			t.Fatal(err)
		}
		late := d.Late()
		if len(late) != 1 || late[0].Err != nil || late[0].AppliedAt.Sub(late[0].SentAt) != 2*time.Second {
			t.Fatalf("late executions: %+v", late)
		}
		if c, n, _ := l.CheckAmbiguity(); c != 2 || n != 1 {
			t.Fatalf("C4 after the late execution: got %d committed, %d not, want 2, 1", c, n)
		}
		if got := l.CheckFaultRun(nil); len(got) != 0 {
			t.Fatalf("C6: got %v, want clean", got)
		}
		if got := l.CheckFaultRun(leaseapi.NewError("acquire", leaseapi.ErrTimeout, "")); len(got) != 1 || got[0].Rule != "no-recovery" {
			t.Fatalf("C6 without recovery: got %v", got)
		}
	})
}

// lyingBackend claims success for every renewal without doing anything:
// C4 must call it fabricated.
type lyingBackend struct{ leaseapi.Backend }

func (lyingBackend) Renew(_ context.Context, rec leaseapi.Record, _ time.Duration) (leaseapi.Record, error) {
	return rec, nil
}

// TestLedgerCatches proves C4's and C2's other rules can fail.
func TestLedgerCatches(t *testing.T) {
	Simulate(t, func(t *testing.T) {
		store, _ := memory.New(memory.Options{})
		l := NewLedger()
		b := l.Client("liar", lyingBackend{l.Server(store)})
		k := leaseapi.MustKey("ledger", "liar")
		rec, err := b.TryAcquire(context.Background(), k, "owner-1", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Renew(context.Background(), rec, time.Second); err != nil {
			t.Fatal(err)
		}
		_, _, vs := l.CheckAmbiguity()
		if len(vs) != 1 || vs[0].Rule != "fabricated" {
			t.Fatalf("C4 on a fabricated renewal: got %v", vs)
		}
		h := NewHistory()
		h.Grant(k, "owner-1", rec.Token, time.Now())
		h.Grant(k, "owner-2", rec.Token+1, time.Now())
		vs = l.CheckGrants(h)
		if len(vs) != 1 || vs[0].Rule != "blind-grant" {
			t.Fatalf("C2 on a grant the backend never made: got %v", vs)
		}
		// The trust bound: the committed acquisition's send + TTL - margin.
		p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: time.Second, SafetyMargin: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		bound, ok := l.TrustBound("owner-1", rec.Token, p)
		if sent, _ := l.AcquireSentAt("owner-1"); !ok || !bound.Equal(sent.Add(900*time.Millisecond)) {
			t.Fatalf("TrustBound: got %v (ok %v), want send + 900ms", bound, ok)
		}
		if _, ok := l.TrustBound("owner-2", rec.Token+1, p); ok {
			t.Fatal("TrustBound of a grant never committed: ok")
		}
	})
}

// TestDeferredDelayReply: a slow reply within the timeout is delivered;
// one past it is lost although the call was applied.
func TestDeferredDelayReply(t *testing.T) {
	Simulate(t, func(t *testing.T) {
		l, d, _, b, store := ledgerChain(t)
		k := leaseapi.MustKey("deferred", "k")
		d.DelayReply(leaseapi.OperationAcquire, 300*time.Millisecond)
		ctx, cancel := opCtx(500 * time.Millisecond)
		start := time.Now()
		rec, err := b.TryAcquire(ctx, k, "owner-1", time.Second)
		cancel()
		if err != nil || time.Since(start) != 300*time.Millisecond {
			t.Fatalf("slow reply: got %v after %v", err, time.Since(start))
		}
		_ = store.Release(context.Background(), rec)
		d.DelayReply(leaseapi.OperationAcquire, time.Hour)
		ctx, cancel = opCtx(500 * time.Millisecond)
		_, err = b.TryAcquire(ctx, k, "owner-2", time.Second)
		cancel()
		if leaseapi.Kind(err) != leaseapi.ErrAmbiguousOutcome {
			t.Fatalf("reply later than the timeout: got %v", err)
		}
		if _, held, _ := store.Inspect(context.Background(), k); !held {
			t.Fatal("the call whose reply was late was not applied")
		}
		if c, n, vs := l.CheckAmbiguity(); c != 1 || n != 0 || len(vs) != 0 {
			t.Fatalf("C4: got %d committed, %d not, %v", c, n, vs)
		}
	})
}
