package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/internal/backendtest/storetest"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// TestTokenBound: a key whose token reached 2^63-1 is never wrapped or
// reused; its next acquisition fails with ErrInvalidState and changes
// nothing.
func TestTokenBound(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	pool := newPool(t, url)
	s, opts := newStore(t, url, pool)
	ctx := t.Context()
	k := leaseapi.MustKey("bound", "k")
	rec, err := s.TryAcquire(ctx, k, "owner", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE "+pgx.Identifier{opts.Schema, postgres.DefaultTable}.Sanitize()+" SET token = $1, owner = NULL WHERE key = $2", int64(math.MaxInt64), k.String()); err != nil {
		t.Fatal(err)
	}
	_, err = s.TryAcquire(ctx, k, "next", time.Minute)
	wantKind(t, "TryAcquire past the token bound", err, leaseapi.ErrInvalidState)
	got, held, err := s.Inspect(ctx, k)
	if err != nil || held || got.Token != math.MaxInt64 {
		t.Fatalf("Inspect at the bound: got (token %d, held %v, %v), want (%d, false, nil)", got.Token, held, err, int64(math.MaxInt64))
	}
	// Records with tokens the column cannot hold are never current.
	huge := rec
	huge.Token = math.MaxInt64 + 1
	_, err = s.Validate(ctx, huge)
	wantKind(t, "Validate with a token beyond 2^63-1", err, leaseapi.ErrStaleOwner)
	wantKind(t, "Release with a token beyond 2^63-1", s.Release(ctx, huge), leaseapi.ErrStaleOwner)
}

// TestRenewBatchRepeatedKey: a batch that names a key twice keeps Renew's
// per-element semantics, in order; a large batch renews every element.
func TestRenewBatchRepeatedKey(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	s, _ := newStore(t, url, newPool(t, url))
	ctx := t.Context()
	a, err := s.TryAcquire(ctx, leaseapi.MustKey("batch", "a"), "owner", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	released, err := s.TryAcquire(ctx, leaseapi.MustKey("batch", "released"), "owner", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, released); err != nil {
		t.Fatal(err)
	}
	res := s.RenewBatch(ctx, []leaseapi.RenewRequest{
		{Record: a, TTL: time.Minute},
		{Record: released, TTL: time.Minute},
		{Record: a, TTL: 2 * time.Minute},
		{Record: a, TTL: 0},
	})
	if res[0].Err != nil || res[2].Err != nil {
		t.Fatalf("repeated key: got (%v, %v), want both renewed", res[0].Err, res[2].Err)
	}
	if got := res[2].Record.GrantedTTL(); got != 2*time.Minute {
		t.Fatalf("second renewal of the key: granted %v, want 2m", got)
	}
	wantKind(t, "released element", res[1].Err, leaseapi.ErrStaleOwner)
	wantKind(t, "zero ttl element", res[3].Err, leaseapi.ErrInvalidState)

	var reqs []leaseapi.RenewRequest
	for i := range 500 {
		r, err := s.TryAcquire(ctx, leaseapi.MustKey("batch", fmt.Sprint("many/", i)), "owner", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, leaseapi.RenewRequest{Record: r, TTL: time.Hour})
	}
	for i, r := range s.RenewBatch(ctx, reqs) {
		if r.Err != nil || r.Record.Token != reqs[i].Record.Token || r.Record.GrantedTTL() != time.Hour {
			t.Fatalf("element %d: got (%v, token %d, ttl %v)", i, r.Err, r.Record.Token, r.Record.GrantedTTL())
		}
	}
	ctx2, cancel := context.WithCancel(ctx)
	cancel()
	for _, r := range s.RenewBatch(ctx2, reqs[:3]) {
		wantKind(t, "RenewBatch with a canceled context", r.Err, leaseapi.ErrCanceled)
	}
}

// TestRuntimeHandoff: a waiter in runtime.Client.Acquire, on another pool
// and Store (another process, in effect), holds the lease well under 100ms
// after the holder's release, although its retry interval is 1s.
func TestRuntimeHandoff(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	sa, opts := newStore(t, url, newPool(t, url))
	sb, err := postgres.New(newPool(t, url), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	ctx := t.Context()

	// Warm sb's listener: one wake proves it is LISTENing. sb's contended
	// attempt marks the key as waited for, so that sa's release notifies.
	warm := leaseapi.MustKey("handoff", "warm")
	ch, stop := sb.WatchRelease(warm)
	rec, err := sa.TryAcquire(ctx, warm, "warm", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.TryAcquire(ctx, warm, "warm-waiter", time.Minute); !errors.Is(err, leaseapi.ErrContended) {
		t.Fatalf("the watcher's attempt: got %v, want ErrContended", err)
	}
	if err := sa.Release(ctx, rec); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("listener not ready within 10s")
	}
	stop()

	storetest.NewHandoff(t, sa, sb).CheckHandoff(t, leaseapi.MustKey("handoff", "k"), 0)
}

// TestRuntimeFailsClosedDuringBlackhole: with the network to the server
// silently dropping everything, managed renewal gets no reply within
// OperationTimeout; the handle stops admitting no later than its local
// deadline and reports the loss, and once the partition heals another
// client takes over with a higher token.
func TestRuntimeFailsClosedDuringBlackhole(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	px, purl := newProxy(t, url)
	var partitioned atomic.Bool
	s, opts := newStore(t, url, newPool(t, purl, partitionConnect(&partitioned)))
	ctx := t.Context()
	c := storetest.NewClient(t, s, runtime.ClientOptions{})
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{
		TTL: time.Second, SafetyMargin: 100 * time.Millisecond,
		RenewEvery: 200 * time.Millisecond, OperationTimeout: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	k := leaseapi.MustKey("runtime", "blackhole")
	h, err := c.Acquire(ctx, k, p)
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.StartManaged(ctx)
	if err != nil {
		t.Fatal(err)
	}
	partitioned.Store(true)
	px.Blackhole()
	cut := time.Now()
	var loss runtime.Loss
	select {
	case loss = <-m.Loss():
	case <-time.After(5 * time.Second):
		t.Fatal("no loss reported within 5s of the partition")
	}
	if h.State() == leaseapi.StateActive {
		t.Fatalf("handle still Active after the loss (%v)", loss.State)
	}
	if since := time.Since(cut); since > p.TTL()+500*time.Millisecond {
		t.Fatalf("loss reported %v after the partition, want within the TTL", since)
	}
	if !h.Deadline().Before(cut.Add(p.TTL())) {
		t.Fatalf("deadline %v not before partition + TTL", h.Deadline())
	}
	t.Logf("loss after %v: %v (%v)", time.Since(cut), loss.State, loss.Err)

	px.Pass()
	partitioned.Store(false)
	px.ResetAll()
	other, err := postgres.New(newPool(t, url), opts)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		rec, err := other.TryAcquire(ctx, k, "successor", time.Minute)
		if err == nil {
			if rec.Token <= h.Token() {
				t.Fatalf("successor token %d, want > %d", rec.Token, h.Token())
			}
			break
		}
		if !errors.Is(err, leaseapi.ErrContended) || time.Now().After(deadline) {
			t.Fatalf("successor: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the old grant's TTL runs out on the server
	}
}

// TestRuntimeCutRenewIsUncertain: a renewal whose reply is lost leaves the
// handle Uncertain (no admission) while the grant stays with it; the next
// renewal that gets through makes it Active again, and nobody else can
// acquire meanwhile.
func TestRuntimeCutRenewIsUncertain(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	px, purl := newProxy(t, url)
	s, opts := newStore(t, url, newPool(t, purl, oneConn))
	ctx := t.Context()
	c := storetest.NewClient(t, s, runtime.ClientOptions{})
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	k := leaseapi.MustKey("runtime", "cut-renew")
	h, err := c.TryAcquire(ctx, k, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Renew(ctx); err != nil { // prepares the renewal statement
		t.Fatal(err)
	}
	cut := px.CutAfterRequestContaining([]byte(h.Owner())) // not a pgxpool ping
	err = h.Renew(ctx)
	wantKind(t, "Renew with its reply lost", err, leaseapi.ErrAmbiguousOutcome)
	waitCut(t, cut)
	if st := h.State(); st != leaseapi.StateUncertain {
		t.Fatalf("state after an ambiguous renewal: got %v, want %v", st, leaseapi.StateUncertain)
	}
	other, err := postgres.New(newPool(t, url), opts)
	if err != nil {
		t.Fatal(err)
	}
	_, err = other.TryAcquire(ctx, k, "someone-else", time.Minute)
	wantKind(t, "TryAcquire of the uncertain grant by another owner", err, leaseapi.ErrContended)
	var last error
	for range 5 { // the first call may still meet the reset connection
		if last = h.Renew(ctx); last == nil {
			break
		}
	}
	if last != nil {
		t.Fatalf("Renew after the cut: %v", last)
	}
	if st := h.State(); st != leaseapi.StateActive {
		t.Fatalf("state after a successful renewal: got %v, want %v", st, leaseapi.StateActive)
	}
}

// TestZeroStore: a Store that New did not make (the zero value, a nil
// pointer) answers every method with ErrInvalidState and never panics;
// WatchRelease gives a channel that never receives.
func TestZeroStore(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	k := leaseapi.MustKey("zero", "k")
	rec := leaseapi.Record{Key: k, Owner: "owner", Token: 1, AcquiredAt: time.Unix(1, 0), ExpiresAt: time.Unix(2, 0)}
	for name, s := range map[string]*postgres.Store{"zero": {}, "nil": nil} {
		t.Run(name, func(t *testing.T) {
			_, err := s.TryAcquire(ctx, k, "owner", time.Minute)
			wantKind(t, "TryAcquire", err, leaseapi.ErrInvalidState)
			_, err = s.Renew(ctx, rec, time.Minute)
			wantKind(t, "Renew", err, leaseapi.ErrInvalidState)
			_, err = s.Validate(ctx, rec)
			wantKind(t, "Validate", err, leaseapi.ErrInvalidState)
			wantKind(t, "Release", s.Release(ctx, rec), leaseapi.ErrInvalidState)
			_, _, err = s.Inspect(ctx, k)
			wantKind(t, "Inspect", err, leaseapi.ErrInvalidState)
			res := s.RenewBatch(ctx, []leaseapi.RenewRequest{{Record: rec, TTL: time.Minute}})
			wantKind(t, "RenewBatch", res[0].Err, leaseapi.ErrInvalidState)
			wantKind(t, "Fence", s.Fence(ctx, nil, rec), leaseapi.ErrInvalidState)
			wantKind(t, "AdvanceFence", s.AdvanceFence(ctx, nil, "r", 1), leaseapi.ErrInvalidState)
			wantKind(t, "FencedWrite", s.FencedWrite(ctx, nil, "r", 1, nil, nil), leaseapi.ErrInvalidState)
			ch, stop := s.WatchRelease(k)
			stop()
			stop()
			select {
			case <-ch:
				t.Fatal("WatchRelease of a zero Store received")
			default:
			}
			wantKind(t, "Close", s.Close(), leaseapi.ErrInvalidState)
		})
	}
}
