package postgres_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/leaseapi"
)

// TestOnlyGrantsWaitForTheFlush: a grant commits synchronously (its WAL is
// flushed before the reply), while an attempt that granted nothing commits
// without waiting for the flush, although it wrote WAL (the row lock of
// ON CONFLICT DO UPDATE, or the waiter mark of a watching client), and
// leaves the next statement on its connection synchronous again. After
// each call the test reads whether the server's WAL is flushed up to its
// insert position. It runs in every pgx exec mode: the first five
// executions of a prepared statement and every one in the simple protocol
// are planned with their parameters as constants, which must not fold the
// setting away. The test is not parallel, so that no other session of the
// test binary flushes or writes WAL meanwhile; the background processes
// may, rarely (the WAL writer when it is woken from hibernation), so each
// kind of call must show its behaviour in all but two of its repetitions.
func TestOnlyGrantsWaitForTheFlush(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) { onlyGrantsWaitForTheFlush(t, mode) })
	}
}

func onlyGrantsWaitForTheFlush(t *testing.T, mode pgx.QueryExecMode) {
	url := dbURL(t)
	pool := newPool(t, url, func(c *pgxpool.Config) {
		c.MaxConns = 1 // one session: the setting must not leak to the next statement
		c.ConnConfig.DefaultQueryExecMode = mode
	})
	s, opts := newStore(t, url, pool)
	w, err := postgres.New(pool, opts) // a watching client: its attempt sets the waiter mark
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	ctx := t.Context()
	flushed := func() bool {
		t.Helper()
		var ok bool
		if err := pool.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn() >= pg_current_wal_insert_lsn()").Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	contend := func(s *postgres.Store, k leaseapi.Key) (unflushed bool) {
		t.Helper()
		if _, err := s.TryAcquire(ctx, k, "other", time.Minute); !errors.Is(err, leaseapi.ErrContended) {
			t.Fatalf("contended attempt: got %v, want ErrContended", err)
		}
		return !flushed()
	}
	const reps, most = 20, 18
	grants, contended, marked := 0, 0, 0
	for i := range reps {
		k := leaseapi.MustKey("flush", fmt.Sprint(i))
		_, stop := w.WatchRelease(k)
		if _, err := s.TryAcquire(ctx, k, "holder", time.Minute); err != nil {
			t.Fatal(err)
		}
		if flushed() {
			grants++
		}
		if contend(s, k) {
			contended++
		}
		if contend(w, k) {
			marked++
		}
		stop()
	}
	t.Logf("of %d calls each: %d grants flushed; not flushed: %d contended attempts, %d marking ones", reps, grants, contended, marked)
	if grants < most {
		t.Errorf("only %d of %d grants had their WAL flushed when they returned: a grant must be durable before its reply", grants, reps)
	}
	if contended < most || marked < most {
		t.Errorf("%d and %d of %d contended and marking attempts returned with the WAL flushed: they should not wait for the flush", reps-contended, reps-marked, reps)
	}
}
