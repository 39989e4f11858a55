package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/leaseapi"
)

// The Store ends its calls when their ctx does without pgx's context
// watcher (calls.go). These tests hold a renewal on a row lock, mid-
// statement on the server, and end its ctx in each way it can end.

// callEnv is a Store on a pool of n connections, leases held by "holder"
// on keys of their own, and a direct pool to lock their rows.
type callEnv struct {
	direct *pgxpool.Pool
	pool   *pgxpool.Pool
	store  *postgres.Store
	table  string
	recs   []leaseapi.Record
}

func newCallEnv(t *testing.T, n int) *callEnv {
	t.Helper()
	url := dbURL(t)
	e := &callEnv{direct: newPool(t, url)}
	e.pool = newPool(t, url, func(c *pgxpool.Config) { c.MaxConns = int32(n) })
	var opts postgres.Options
	e.store, opts = newStore(t, url, e.pool)
	e.table = pgx.Identifier{opts.Schema, postgres.DefaultTable}.Sanitize()
	for i := range n {
		rec, err := e.store.TryAcquire(t.Context(), leaseapi.MustKey("calls", fmt.Sprint("k", i)), "holder", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.Renew(t.Context(), rec, time.Minute); err != nil { // prepares the statement
			t.Fatal(err)
		}
		e.recs = append(e.recs, rec)
	}
	return e
}

// renewHeld starts a Renew of e.recs[i] under ctx with its row locked, and
// waits until the statement waits for the lock on the server. It returns
// the call's result and the lock.
func (e *callEnv) renewHeld(t *testing.T, ctx context.Context, i int) (<-chan error, lock) {
	t.Helper()
	l := lockIn(t, e.direct, "SELECT 1 FROM "+e.table+" WHERE key = $1 FOR UPDATE", e.recs[i].Key.String())
	errc := make(chan error, 1)
	go func() {
		_, err := e.store.Renew(ctx, e.recs[i], 2*time.Minute)
		errc <- err
	}()
	le := &lateEnv{direct: e.direct}
	le.poll(t, errc, "the renewal to wait for the row lock",
		`SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid)))`, l.pid)
	return errc, l
}

// ended waits for a call's result, at most 5s: the call must end promptly
// once its ctx did.
func ended(t *testing.T, what string, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: the call did not end within 5s of its ctx", what)
		return nil
	}
}

// stillWorks checks that the pool serves again and that a connection
// whose statement was cut short is not handed out again: with a pool of
// one, a server process other than pid serves (pid 0 skips that check).
// Whether the cut statement applied is not checked: it was sent, so it is
// ambiguous (a statement canceled without a deadline may commit before
// the cancel request arrives, and one with a deadline is late only past
// its bound counted from the server's receipt, see late_test.go).
func (e *callEnv) stillWorks(t *testing.T, i int, pid int32) {
	t.Helper()
	if _, err := e.store.Validate(t.Context(), e.recs[i]); err != nil {
		t.Fatalf("Validate after the ended call: %v", err)
	}
	if pid != 0 {
		if got := backendPID(t, e.pool); got == pid {
			t.Fatalf("the connection of the ended call (server process %d) was used again", pid)
		}
	}
}

// TestCallCanceledMidStatement: a ctx without a deadline, canceled while
// its renewal waits on the server, ends the call at once: ambiguous (it
// was sent), and the connection is replaced.
func TestCallCanceledMidStatement(t *testing.T) {
	t.Parallel()
	e := newCallEnv(t, 1)
	pid := backendPID(t, e.pool)
	ctx, cancel := context.WithCancel(t.Context())
	errc, l := e.renewHeld(t, ctx, 0)
	cancel()
	err := ended(t, "canceled renewal", errc)
	wantKind(t, "Renew canceled mid-statement", err, leaseapi.ErrAmbiguousOutcome)
	l.unlock()
	e.stillWorks(t, 0, pid)
}

// TestCallDeadlineMidStatement: a renewal still waiting on the server at
// its ctx's deadline ends then, ambiguous.
func TestCallDeadlineMidStatement(t *testing.T) {
	t.Parallel()
	e := newCallEnv(t, 1)
	pid := backendPID(t, e.pool)
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	dl, _ := ctx.Deadline()
	errc, l := e.renewHeld(t, ctx, 0)
	err := ended(t, "renewal past its deadline", errc)
	if late := time.Since(dl); late < 0 {
		t.Fatalf("the renewal ended %v before its deadline", -late)
	}
	wantKind(t, "Renew at its deadline mid-statement", err, leaseapi.ErrAmbiguousOutcome)
	l.unlock()
	e.stillWorks(t, 0, pid)
}

// deadlineOnly is a ctx whose deadline passes before it is done (its Done
// closes only when the test ends), as the runtime's calls' contexts may be
// (internal/callctx.Exact ends up to one slot after its deadline).
type deadlineOnly struct {
	context.Context
	dl time.Time
}

func (c deadlineOnly) Deadline() (time.Time, bool) { return c.dl, true }

// TestCallEndsAtTheDeadlineNotAtDone: the call ends at its ctx's deadline
// even if the ctx is not done yet, ambiguous for a mutation sent before
// it, and a call whose deadline passed before sending sends nothing.
func TestCallEndsAtTheDeadlineNotAtDone(t *testing.T) {
	t.Parallel()
	e := newCallEnv(t, 1)
	pid := backendPID(t, e.pool)
	ctx := deadlineOnly{t.Context(), time.Now().Add(1500 * time.Millisecond)}
	errc, l := e.renewHeld(t, ctx, 0)
	err := ended(t, "renewal past its deadline, ctx not done", errc)
	wantKind(t, "Renew at its deadline, ctx not done", err, leaseapi.ErrAmbiguousOutcome)
	l.unlock()
	e.stillWorks(t, 0, pid)

	past := deadlineOnly{t.Context(), time.Now().Add(-time.Millisecond)}
	_, err = e.store.Validate(past, e.recs[0])
	wantKind(t, "Validate with its deadline passed, ctx not done", err, leaseapi.ErrTimeout)
	_, err = e.store.Renew(past, e.recs[0], time.Minute)
	wantKind(t, "Renew with its deadline passed, ctx not done", err, leaseapi.ErrTimeout)
}

// TestCallsSharingACtxAllEnd: the calls in flight under one ctx (the
// runtime shares one among the calls of a time slot) all end when it is
// canceled, and later calls under it send nothing.
func TestCallsSharingACtxAllEnd(t *testing.T) {
	t.Parallel()
	const n = 3
	e := newCallEnv(t, n)
	ctx, cancel := context.WithCancel(t.Context())
	var (
		errcs [n]<-chan error
		locks [n]lock
	)
	for i := range n {
		errcs[i], locks[i] = e.renewHeld(t, ctx, i)
	}
	cancel()
	for i := range n {
		wantKind(t, fmt.Sprint("Renew ", i, " under the canceled shared ctx"), ended(t, "shared ctx", errcs[i]), leaseapi.ErrAmbiguousOutcome)
	}
	_, err := e.store.Validate(ctx, e.recs[0])
	wantKind(t, "Validate under the canceled ctx", err, leaseapi.ErrCanceled)
	for i := range n {
		locks[i].unlock()
		e.stillWorks(t, i, 0)
	}
}

// TestCallClearsTheSocketDeadline: once a call under a ctx with a
// deadline returned, its connection carries no deadline: a statement
// after that deadline, on the same connection under a ctx without one,
// runs.
func TestCallClearsTheSocketDeadline(t *testing.T) {
	t.Parallel()
	e := newCallEnv(t, 1)
	pid := backendPID(t, e.pool)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := e.store.Validate(ctx, e.recs[0]); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	if got := backendPID(t, e.pool); got != pid {
		t.Fatalf("the connection was replaced (server process %d, was %d)", got, pid)
	}
	if _, err := e.store.Validate(context.Background(), e.recs[0]); err != nil {
		t.Fatalf("Validate without a deadline after the last one passed: %v", err)
	}
}

// TestCallWatchesAreBounded: contexts that never end (each watched once,
// for the calls under it) do not pile up: at most a fixed number of
// watches without a call in flight is kept.
func TestCallWatchesAreBounded(t *testing.T) {
	t.Parallel()
	e := newCallEnv(t, 1)
	for range 3 * postgres.MaxIdleWatches {
		ctx, cancel := context.WithCancel(context.Background())
		if _, err := e.store.Validate(ctx, e.recs[0]); err != nil {
			t.Fatal(err)
		}
		defer cancel() // after the loop: each ctx is alive until then
	}
	if got := postgres.Watches(e.store); got > postgres.MaxIdleWatches {
		t.Fatalf("%d contexts watched after their calls returned, want at most %d", got, postgres.MaxIdleWatches)
	}
}
