package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/leaseapi"
)

func TestAdvanceFence(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	pool := newPool(t, url)
	s, _ := newStore(t, url, pool)
	ctx := t.Context()
	advance := func(resource string, tok leaseapi.Token) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if err := s.AdvanceFence(ctx, tx, resource, tok); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	for i, tc := range []struct {
		resource string
		token    leaseapi.Token
		want     error
	}{
		{"r", 5, nil},
		{"r", 3, leaseapi.ErrStaleOwner},
		{"r", 5, nil}, // equal is accepted: the same holder writes again
		{"r", 6, nil},
		{"r", 5, leaseapi.ErrStaleOwner},
		{"other", 1, nil}, // per resource
		{"", 1, leaseapi.ErrInvalidState},
		{"r", 0, leaseapi.ErrInvalidState},
		{"bad\x00name", 1, leaseapi.ErrInvalidState},
		{strings.Repeat("x", postgres.MaxResourceBytes+1), 1, leaseapi.ErrInvalidState},
		{"r", 1 << 63, leaseapi.ErrInvalidState},
	} {
		err := advance(tc.resource, tc.token)
		if tc.want == nil && err != nil || tc.want != nil && leaseapi.Kind(err) != tc.want {
			t.Fatalf("case %d (token %d): got %v, want %v", i, tc.token, err, tc.want)
		}
	}
	noop := func(context.Context, pgx.Tx) error { return nil }
	wantKind(t, "FencedWrite on a nil pool", s.FencedWrite(ctx, (*pgxpool.Pool)(nil), "r", 9, nil, noop), leaseapi.ErrInvalidState)
	wantKind(t, "FencedWrite on a nil conn", s.FencedWrite(ctx, (*pgx.Conn)(nil), "r", 9, nil, noop), leaseapi.ErrInvalidState)
	wantKind(t, "FencedWrite without a write", s.FencedWrite(ctx, pool, "r", 9, nil, nil), leaseapi.ErrInvalidState)
	wantKind(t, "AdvanceFence with a nil tx", s.AdvanceFence(ctx, nil, "r", 9), leaseapi.ErrInvalidState)
	wantErr := errors.New("write failed")
	err := s.FencedWrite(ctx, pool, "r", 9, nil, func(context.Context, pgx.Tx) error { return wantErr })
	if !errors.Is(err, wantErr) {
		t.Fatalf("FencedWrite with a failing write: got %v, want the write's own error", err)
	}
	if err := advance("r", 7); err != nil {
		t.Fatalf("the failed write's mark was rolled back: got %v, want nil", err)
	}
	// A rolled-back advance leaves no mark.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AdvanceFence(ctx, tx, "r", 100); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := advance("r", 7); err != nil {
		t.Fatalf("advance after a rolled-back higher mark: got %v, want nil", err)
	}
}

// TestFenceHoldsOffSuccessor: while a holder's fenced transaction is open,
// a successor's acquisition of the expired grant waits for its commit.
func TestFenceHoldsOffSuccessor(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	app := fmt.Sprintf("lease-fence-%d", time.Now().UnixNano())
	pool := newPool(t, url, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = app })
	direct := newPool(t, url)
	s, opts := newStore(t, url, pool)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{opts.Schema, "data"}.Sanitize()+" (v text)"); err != nil {
		t.Fatal(err)
	}
	k := leaseapi.MustKey("fence", "k")
	// Long enough that the grant is still live at the Fence under load; the
	// test then waits for its expiry on the server's clock.
	const ttl = time.Second
	rec, tx := grantAndBegin(t, s, pool, k, ttl)
	if err := s.Fence(ctx, tx, rec); err != nil {
		t.Fatalf("Fence of the live grant: got %v, want nil", err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{opts.Schema, "data"}.Sanitize()+" VALUES ('holder')"); err != nil {
		t.Fatal(err)
	}
	waitExpired(t, direct, rec)

	type result struct {
		rec leaseapi.Record
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := s.TryAcquire(ctx, k, "successor", time.Minute)
		done <- result{r, err}
	}()
	// Wait until the successor's statement waits on the row lock.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		if err := direct.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 1 {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("successor acquired while the fenced transaction was open: %v", r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the successor never waited on the fenced row")
		}
		time.Sleep(5 * time.Millisecond) // polling the server's view
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit of the fenced write: %v", err)
	}
	r := <-done
	if r.err != nil || r.rec.Token <= rec.Token {
		t.Fatalf("successor after the commit: got (token %d, %v), want a higher token than %d", r.rec.Token, r.err, rec.Token)
	}
	// Now the old grant fails the fence.
	tx2, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback(context.Background())
	wantKind(t, "Fence of a replaced grant", s.Fence(ctx, tx2, rec), leaseapi.ErrStaleOwner)
	wantKind(t, "Fence of a zero record", s.Fence(ctx, tx2, leaseapi.Record{}), leaseapi.ErrInvalidState)
	wantKind(t, "Fence with a nil tx", s.Fence(ctx, nil, rec), leaseapi.ErrInvalidState)
}

// TestFenceContention: 8 workers contend for one key and write to one
// resource only through FencedWrite (Fence + AdvanceFence). Some pause past
// their TTL before writing. The committed history must never show a token
// lower than one committed before it, and every paused write must be
// refused.
func TestFenceContention(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	pool := newPool(t, url, func(c *pgxpool.Config) { c.MaxConns = 16 })
	s, opts := newStore(t, url, pool)
	ctx := t.Context()
	hist := pgx.Identifier{opts.Schema, "history"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+hist+" (id bigserial PRIMARY KEY, token bigint NOT NULL, worker int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	k := leaseapi.MustKey("fence", "contended")
	const (
		workers = 8
		rounds  = 6
		ttl     = 150 * time.Millisecond
	)
	var (
		accepted, paused, refusedPaused atomic.Int64
		wg                              sync.WaitGroup
		failure                         = make(chan error, workers)
	)
	for w := range workers {
		wg.Go(func() {
			owner := fmt.Sprint("worker-", w)
			for round := 0; round < rounds; {
				rec, err := s.TryAcquire(ctx, k, owner, ttl)
				if errors.Is(err, leaseapi.ErrContended) {
					ch, stop := s.WatchRelease(k)
					select {
					case <-ch:
					case <-time.After(ttl): // expiry is not notified
					case <-ctx.Done():
					}
					stop()
					continue
				}
				if err != nil {
					failure <- fmt.Errorf("worker %d: TryAcquire: %w", w, err)
					return
				}
				round++
				pause := (w+round)%4 == 0
				if pause {
					paused.Add(1)
					time.Sleep(ttl + 50*time.Millisecond) // a stalled holder: let the TTL pass
				}
				err = s.FencedWrite(ctx, pool, "the-resource", rec.Token, &rec, func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "INSERT INTO "+hist+" (token, worker) VALUES ($1, $2)", int64(rec.Token), w)
					return err
				})
				switch {
				case err == nil:
					if pause {
						failure <- fmt.Errorf("worker %d: a write after the TTL passed was accepted", w)
						return
					}
					accepted.Add(1)
				case errors.Is(err, leaseapi.ErrStaleOwner):
					if pause {
						refusedPaused.Add(1)
					}
				default:
					failure <- fmt.Errorf("worker %d: FencedWrite: %w", w, err)
					return
				}
				if err := s.Release(ctx, rec); err != nil && !errors.Is(err, leaseapi.ErrStaleOwner) {
					failure <- fmt.Errorf("worker %d: Release: %w", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(failure)
	for err := range failure {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, "SELECT token FROM "+hist+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	toks, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(toks); i++ {
		if toks[i] < toks[i-1] {
			t.Fatalf("history %v: write %d has token %d after %d: a stale write was accepted", toks, i, toks[i], toks[i-1])
		}
	}
	if int64(len(toks)) != accepted.Load() {
		t.Fatalf("history has %d writes, want the %d accepted", len(toks), accepted.Load())
	}
	if paused.Load() == 0 || refusedPaused.Load() != paused.Load() {
		t.Fatalf("paused writes: %d refused of %d, want all (and some)", refusedPaused.Load(), paused.Load())
	}
	t.Logf("%d writes accepted in token order, %d stale writes refused", len(toks), refusedPaused.Load())
}

// TestFenceJudgesByTheClock: a transaction that began while the grant was
// live, and fences after it expired, is refused. The check reads
// clock_timestamp(), not now() (the transaction's start, which would pass
// a grant that expired while the transaction was open: the mutant
// pg-now, which TestMutantsAreCaught in safety requires this test to
// catch).
func TestFenceJudgesByTheClock(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	pool := newPool(t, url)
	s, _ := newStore(t, url, pool)
	ctx := t.Context()
	k := leaseapi.MustKey("fence", "clock")
	const ttl = 200 * time.Millisecond
	rec, tx := grantAndBegin(t, s, pool, k, ttl)
	var live bool // fixes the transaction's start while the grant is live
	if err := tx.QueryRow(ctx, `SELECT now() < $1::timestamptz`, rec.ExpiresAt).Scan(&live); err != nil {
		t.Fatal(err)
	}
	if !live {
		t.Fatal("the transaction began after the grant expired: the test proves nothing")
	}
	waitExpired(t, pool, rec) // outside tx
	wantKind(t, "Fence, in a transaction begun before the expiry, after it", s.Fence(ctx, tx, rec), leaseapi.ErrStaleOwner)
}

// grantAndBegin grants k to "holder" for ttl and begins a transaction on
// pool, rolled back when t ends: the start of the fence tests.
// waitExpired polls the server's clock until rec's grant has expired.
func waitExpired(t *testing.T, pool *pgxpool.Pool, rec leaseapi.Record) {
	t.Helper()
	limit := time.Now().Add(10 * time.Second)
	for {
		var expired bool
		if err := pool.QueryRow(t.Context(), `SELECT clock_timestamp() > $1::timestamptz`, rec.ExpiresAt).Scan(&expired); err != nil {
			t.Fatal(err)
		}
		if expired {
			return
		}
		if time.Now().After(limit) {
			t.Fatal("the grant never expired on the server's clock")
		}
		time.Sleep(10 * time.Millisecond) // polling the server's clock
	}
}

func grantAndBegin(t *testing.T, s *postgres.Store, pool *pgxpool.Pool, k leaseapi.Key, ttl time.Duration) (leaseapi.Record, pgx.Tx) {
	t.Helper()
	rec, err := s.TryAcquire(t.Context(), k, "holder", ttl)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return rec, tx
}
