package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/leaseapi"
)

// rowOwner reads key's row directly (not through the store or the proxy):
// the owner ("" if released or absent) and the token (0 if absent).
func rowOwner(t *testing.T, pool *pgxpool.Pool, opts postgres.Options, key leaseapi.Key) (string, int64) {
	t.Helper()
	var (
		owner *string
		tok   int64
	)
	err := pool.QueryRow(context.Background(), "SELECT owner, token FROM "+pgx.Identifier{opts.Schema, postgres.DefaultTable}.Sanitize()+" WHERE key = $1", key.String()).Scan(&owner, &tok)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0
	}
	if err != nil {
		t.Fatalf("direct read: %v", err)
	}
	if owner == nil {
		return "", tok
	}
	return *owner, tok
}

func oneConn(c *pgxpool.Config) { c.MaxConns = 1 }

// TestFaultCutAfterRequest cuts the connection right after a mutation was
// sent: the caller must get ErrAmbiguousOutcome whether or not the server
// committed, and the backend must never show two holders.
func TestFaultCutAfterRequest(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	direct := newPool(t, url)
	px, purl := newProxy(t, url)
	s, opts := newStore(t, url, newPool(t, purl, oneConn))
	ctx := t.Context()

	// warm prepares the store's statements on its one (new) connection, so
	// that the next cut hits the statement itself, not its Parse.
	warms := 0
	warm := func() {
		t.Helper()
		var err error
		for range 5 { // the first call after a cut may still meet the dead connection
			warms++
			var rec leaseapi.Record
			if rec, err = s.TryAcquire(ctx, leaseapi.MustKey("cut", fmt.Sprint("warm", warms)), "warm-owner", time.Minute); err != nil {
				continue
			}
			if _, err = s.Renew(ctx, rec, time.Minute); err != nil {
				continue
			}
			if err = s.Release(ctx, rec); err == nil {
				return
			}
		}
		t.Fatalf("warm-up: %v", err)
	}

	committed := 0
	for i := range 6 {
		k := leaseapi.MustKey("cut", fmt.Sprint("k", i))
		owner := fmt.Sprint("owner-", i)
		warm()
		// Every cut picks its request by the owner id: pgxpool pings a
		// connection idle for over a second before it runs a statement.
		cut := px.CutAfterRequestContaining([]byte(owner))
		_, err := s.TryAcquire(ctx, k, owner, time.Minute)
		wantKind(t, "TryAcquire cut after send", err, leaseapi.ErrAmbiguousOutcome)
		waitCut(t, cut)
		got, _ := rowOwner(t, direct, opts, k)
		warm()
		rec, held, err := s.Inspect(ctx, k)
		if err != nil {
			t.Fatalf("Inspect after the cut: %v", err)
		}
		if got == owner {
			committed++
			if !held || rec.Owner != owner {
				t.Fatalf("committed acquisition: Inspect got (held %v, owner %q), want (true, %q)", held, rec.Owner, owner)
			}
			_, err := s.TryAcquire(ctx, k, "other-owner", time.Minute)
			wantKind(t, "TryAcquire by another owner after a committed ambiguous acquire", err, leaseapi.ErrContended)
			// The ambiguous holder adopts its grant and can release it.
			warm()
			cut := px.CutAfterRequestContaining([]byte(owner))
			wantKind(t, "Release cut after send", s.Release(ctx, rec), leaseapi.ErrAmbiguousOutcome)
			waitCut(t, cut)
			warm()
			if err := s.Release(ctx, rec); err != nil {
				t.Fatalf("Release retry after an ambiguous release: got %v, want nil", err)
			}
		} else if held {
			t.Fatalf("uncommitted acquisition: Inspect reports a holder")
		}
	}
	if px.Stats().Cuts == 0 {
		t.Fatal("the proxy cut nothing")
	}
	t.Logf("%d of 6 cut acquisitions had committed", committed)

	// A cut renewal is ambiguous too, and the grant is still consistent.
	k := leaseapi.MustKey("cut", "renew")
	warm()
	rec, err := s.TryAcquire(ctx, k, "renewer", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	warm()
	cut := px.CutAfterRequestContaining([]byte("renewer"))
	_, err = s.Renew(ctx, rec, 2*time.Minute)
	wantKind(t, "Renew cut after send", err, leaseapi.ErrAmbiguousOutcome)
	waitCut(t, cut)
	warm()
	if _, err := s.Validate(ctx, rec); err != nil {
		t.Fatalf("Validate after an ambiguous renew: got %v, want nil", err)
	}
}

// TestFaultBlackhole: with the network silently dropping everything, the
// caller's ctx deadline bounds every call.
func TestFaultBlackhole(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	px, purl := newProxy(t, url)
	// A connect timeout bounds connection attempts started during the
	// partition (pgx has none by default); see the package doc.
	var partitioned atomic.Bool
	s, _ := newStore(t, url, newPool(t, purl, partitionConnect(&partitioned)))
	k := leaseapi.MustKey("blackhole", "k")
	rec, err := s.TryAcquire(t.Context(), k, "owner", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	partitioned.Store(true)
	px.Blackhole()
	const bound = 300 * time.Millisecond
	for _, tc := range []struct {
		name string
		call func(ctx context.Context) error
		want []error
	}{
		{"Renew", func(ctx context.Context) error { _, err := s.Renew(ctx, rec, time.Minute); return err }, []error{leaseapi.ErrAmbiguousOutcome, leaseapi.ErrTimeout}},
		{"TryAcquire", func(ctx context.Context) error {
			_, err := s.TryAcquire(ctx, leaseapi.MustKey("blackhole", "other"), "owner", time.Minute)
			return err
		}, []error{leaseapi.ErrAmbiguousOutcome, leaseapi.ErrTimeout}},
		{"Validate", func(ctx context.Context) error { _, err := s.Validate(ctx, rec); return err }, []error{leaseapi.ErrTimeout, leaseapi.ErrBackendUnavailable}},
		{"Release", func(ctx context.Context) error { return s.Release(ctx, rec) }, []error{leaseapi.ErrAmbiguousOutcome, leaseapi.ErrTimeout}},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), bound)
		start := time.Now()
		err := tc.call(ctx)
		elapsed := time.Since(start)
		cancel()
		t.Logf("%s: %v after %v", tc.name, err, elapsed)
		if elapsed > bound+time.Second {
			t.Fatalf("%s under blackhole: took %v, want about %v", tc.name, elapsed, bound)
		}
		ok := false
		for _, w := range tc.want {
			ok = ok || leaseapi.Kind(err) == w
		}
		if !ok {
			t.Fatalf("%s under blackhole: got %v, want one of %v", tc.name, err, tc.want)
		}
	}
	// Heal: stale connections are reset, new ones pass.
	px.Pass()
	partitioned.Store(false)
	px.ResetAll()
	var last error
	for range 10 {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		start := time.Now()
		_, last = s.Validate(ctx, rec)
		cancel()
		t.Logf("recovery Validate: %v after %v", last, time.Since(start))
		if last == nil {
			break
		}
	}
	if last != nil {
		t.Fatalf("Validate after the partition healed: got %v, want nil", last)
	}
}

// TestFaultTerminateBackend kills every server session of the store (pool
// connections and the LISTEN connection) mid-run: calls fail classified,
// then recover; release notification resumes.
func TestFaultTerminateBackend(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	direct := newPool(t, url)
	app := fmt.Sprintf("lease-terminate-%d", time.Now().UnixNano())
	s, opts := newStore(t, url, newPool(t, url, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = app }))
	// other releases the watched key, so that the wake comes through the
	// server's NOTIFY (a release by s itself wakes s's watchers directly)
	// and proves that s's listener is LISTENing.
	other, err := postgres.New(direct, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	k := leaseapi.MustKey("terminate", "k")
	w := leaseapi.MustKey("terminate", "watched")
	rec, err := s.TryAcquire(ctx, k, "owner", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ch, stop := s.WatchRelease(w)
	defer stop()
	cycle := func() {
		t.Helper()
		for range 10 {
			r, err := other.TryAcquire(ctx, w, "holder-owner", time.Minute)
			if err == nil {
				// s's contended attempt marks the key as waited for.
				if _, err = s.TryAcquire(ctx, w, "watcher-owner", time.Minute); errors.Is(err, leaseapi.ErrContended) {
					err = nil
				}
				if rerr := other.Release(ctx, r); err == nil {
					err = rerr
				}
			}
			if err == nil {
				return
			}
		}
		t.Fatal("could not cycle the watched key")
	}
	waitWake := func(what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no release notification within 10s", what)
		}
	}
	cycle()
	waitWake("before terminate")
	// The listener may have hijacked the pool's only connection: make sure
	// the pool has one of its own again.
	if _, err := s.Validate(ctx, rec); err != nil {
		t.Fatal(err)
	}

	var killed int
	if err := direct.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed < 2 {
		t.Fatalf("terminated %d sessions, want the pool's and the listener's (>= 2)", killed)
	}
	var errs []error
	for range 10 {
		_, err := s.Validate(ctx, rec)
		if err == nil {
			break
		}
		errs = append(errs, err)
	}
	if _, err := s.Validate(ctx, rec); err != nil {
		t.Fatalf("Validate after terminate: still failing: %v (earlier: %v)", err, errs)
	}
	for _, err := range errs {
		wantKind(t, "Validate on a terminated session", err, leaseapi.ErrBackendUnavailable)
	}
	if _, err := s.Renew(ctx, rec, time.Minute); err != nil {
		t.Fatalf("Renew after terminate: %v", err)
	}
	// The listener reconnects; a release is delivered (by NOTIFY, or by the
	// sweep after reconnecting if it happened during the gap).
	cycle()
	waitWake("after terminate")
}

// TestFaultStatementTimeout: a server-side statement_timeout that cancels a
// blocked statement is classified (ambiguous for mutations).
func TestFaultStatementTimeout(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	direct := newPool(t, url)
	// Migrated and granted without the timeout (a loaded server can take
	// longer than it for the migration); the Store under test runs every
	// statement under it.
	plain, opts := newStore(t, url, direct)
	s, err := postgres.New(newPool(t, url, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["statement_timeout"] = "200ms" }), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	k := leaseapi.MustKey("stmt-timeout", "k")
	rec, err := plain.TryAcquire(ctx, k, "owner", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Another session locks the row: every mutation of it blocks.
	blocker, err := direct.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(context.Background())
	if _, err := blocker.Exec(ctx, "SELECT 1 FROM "+pgx.Identifier{opts.Schema, postgres.DefaultTable}.Sanitize()+" WHERE key = $1 FOR UPDATE", k.String()); err != nil {
		t.Fatal(err)
	}
	_, err = s.Renew(ctx, rec, time.Minute)
	wantKind(t, "Renew canceled by statement_timeout", err, leaseapi.ErrAmbiguousOutcome)
	_, err = s.TryAcquire(ctx, k, "other", time.Minute)
	wantKind(t, "TryAcquire canceled by statement_timeout", err, leaseapi.ErrAmbiguousOutcome)
	wantKind(t, "Release canceled by statement_timeout", s.Release(ctx, rec), leaseapi.ErrAmbiguousOutcome)
	res := s.RenewBatch(ctx, []leaseapi.RenewRequest{{Record: rec, TTL: time.Minute}})
	wantKind(t, "RenewBatch canceled by statement_timeout", res[0].Err, leaseapi.ErrAmbiguousOutcome)
	// The read path is not blocked by the row lock.
	if _, err := s.Validate(ctx, rec); err != nil {
		t.Fatalf("Validate during the lock: got %v, want nil", err)
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Renew(ctx, rec, time.Minute); err != nil {
		t.Fatalf("Renew after the lock: got %v, want nil", err)
	}
}
