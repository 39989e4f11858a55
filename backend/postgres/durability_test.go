package postgres_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease/leaseapi"
)

// TestOnlyGrantsWaitForTheFlush: a grant commits synchronously (its WAL is
// flushed before the reply), while an attempt that granted nothing commits
// without waiting for the flush, although it wrote WAL (the row lock of
// ON CONFLICT DO UPDATE), and leaves the next statement on its connection
// synchronous again. After each call the test reads whether the server's
// WAL is flushed up to its insert position. The test is not parallel, so
// that no other session of the test binary flushes or writes WAL
// meanwhile; the background processes may, rarely, so each kind of call is
// repeated and must show its behaviour in most of the repetitions (a
// grant: flushed; a contended attempt: not flushed).
func TestOnlyGrantsWaitForTheFlush(t *testing.T) {
	url := dbURL(t)
	pool := newPool(t, url, func(c *pgxpool.Config) { c.MaxConns = 1 }) // one session: set_config must not leak
	s, _ := newStore(t, url, pool)
	ctx := t.Context()
	flushed := func() bool {
		t.Helper()
		var ok bool
		if err := pool.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn() >= pg_current_wal_insert_lsn()").Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	const reps, most = 20, 15
	grants, contended := 0, 0
	for i := range reps {
		k := leaseapi.MustKey("flush", fmt.Sprint(i))
		if _, err := s.TryAcquire(ctx, k, "holder", time.Minute); err != nil {
			t.Fatal(err)
		}
		if flushed() {
			grants++
		}
		if _, err := s.TryAcquire(ctx, k, "other", time.Minute); !errors.Is(err, leaseapi.ErrContended) {
			t.Fatalf("contended attempt: got %v, want ErrContended", err)
		}
		if !flushed() {
			contended++
		}
	}
	t.Logf("of %d calls each: %d grants flushed, %d contended attempts not flushed", reps, grants, contended)
	if grants < most {
		t.Errorf("only %d of %d grants had their WAL flushed when they returned: a grant must be durable before its reply", grants, reps)
	}
	if contended < most {
		t.Errorf("%d of %d contended attempts returned with the WAL flushed: they should not wait for the flush", reps-contended, reps)
	}
}
