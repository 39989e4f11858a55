package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/internal/faultproxy"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/simtest"
)

// lateEnv is the set-up of the late-execution tests: a fresh schema, a
// direct pool to read the truth and to hold rows locked, and a Store whose
// one-connection pool reaches the server through a fault proxy. The
// server process of that one connection (pid) is the one the tests watch:
// by its process id, never by a name another session could share.
type lateEnv struct {
	direct *pgxpool.Pool
	opts   postgres.Options
	table  string
	proxy  *faultproxy.Proxy
	store  *postgres.Store
	pid    int32           // the server process of store's one connection
	other  *postgres.Store // direct, same schema: sets up the leases
}

func newLateEnv(t *testing.T) *lateEnv {
	t.Helper()
	url := dbURL(t)
	direct := newPool(t, url)
	_, opts := newStore(t, url, direct)
	return lateEnvOn(t, url, direct, opts)
}

// lateEnvOn is newLateEnv on the migrated tables of opts, direct being a
// pool on url.
func lateEnvOn(t *testing.T, url string, direct *pgxpool.Pool, opts postgres.Options) *lateEnv {
	t.Helper()
	e := &lateEnv{direct: direct, opts: opts}
	var purl string
	e.proxy, purl = newProxy(t, url)
	pool := newPool(t, purl, func(c *pgxpool.Config) { c.MaxConns = 1 })
	var err error
	if e.store, err = postgres.New(pool, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.store.Close() })
	if e.other, err = postgres.New(e.direct, e.opts); err != nil {
		t.Fatal(err)
	}
	e.table = pgx.Identifier{e.opts.Schema, postgres.DefaultTable}.Sanitize()
	// Warm: prepare every statement on the proxied connection, so that the
	// held-back request is the statement itself.
	warm := leaseapi.MustKey("late", "warm")
	rec, err := e.store.TryAcquire(t.Context(), warm, "warm-owner", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err = e.store.Renew(t.Context(), rec, time.Minute); err != nil {
		t.Fatal(err)
	}
	if r := e.store.RenewBatch(t.Context(), []leaseapi.RenewRequest{{Record: rec, TTL: time.Minute}}); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	if err := e.store.Release(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	e.pid = backendPID(t, pool)
	return e
}

// backendPID is the server process of pool's one connection.
func backendPID(t *testing.T, pool *pgxpool.Pool) int32 {
	t.Helper()
	var pid int32
	if err := pool.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// state is the rows of keys as the server holds them.
func (e *lateEnv) state(t *testing.T, keys ...leaseapi.Key) string {
	t.Helper()
	var b strings.Builder
	for _, k := range keys {
		var row string
		err := e.direct.QueryRow(t.Context(), "SELECT l::text FROM "+e.table+" AS l WHERE key = $1", k.String()).Scan(&row)
		if errors.Is(err, pgx.ErrNoRows) {
			row = "(none)"
		} else if err != nil {
			t.Fatal(err)
		}
		b.WriteString(row + "\n")
	}
	return b.String()
}

// poll runs cond (one query on the direct pool) until it is true, for at
// most 10s. If the call under test returns meanwhile (errc receives), it
// fails with the call's error: the call was not held back.
func (e *lateEnv) poll(t *testing.T, errc <-chan error, what, cond string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ok bool
		if err := e.direct.QueryRow(t.Context(), cond, args...).Scan(&ok); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case err := <-errc:
			t.Fatalf("%s: the call returned first: %v", what, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 10s", what)
		}
		time.Sleep(5 * time.Millisecond) // pacing the poll of the server's state
	}
}

// lock is a row lock held by a transaction of the direct pool.
type lock struct {
	unlock func() // ends the transaction; idempotent
	pid    int32  // the holding transaction's server process
}

// lockRow holds k's row FOR UPDATE in a transaction of its own until
// unlock (also at the end of the test).
func (e *lateEnv) lockRow(t *testing.T, k leaseapi.Key) lock {
	t.Helper()
	return lockIn(t, e.direct, "SELECT 1 FROM "+e.table+" WHERE key = $1 FOR UPDATE", k.String())
}

// lockIn runs sql in a new transaction of pool, which it keeps open until
// unlock (also at the end of the test).
func lockIn(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) lock {
	t.Helper()
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	l := lock{unlock: func() { _ = tx.Rollback(context.Background()) }}
	t.Cleanup(l.unlock)
	if _, err := tx.Exec(t.Context(), sql, args...); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&l.pid); err != nil {
		t.Fatal(err)
	}
	return l
}

// waitLocked waits until server process pid waits for the lock l holds:
// its statement has arrived and is held back. errc is the call's result,
// watched so that a call that returns instead fails at once with its
// error.
func (e *lateEnv) waitLocked(t *testing.T, pid int32, l lock, errc <-chan error) {
	t.Helper()
	e.poll(t, errc, "the statement to wait for the row lock",
		`SELECT $2::int = ANY (pg_blocking_pids($1::int))`, pid, l.pid)
}

// waitPast waits until the server's clock is more than d after the start
// of process pid's current statement (query_start, which is the
// statement_timestamp() the statement sees).
func (e *lateEnv) waitPast(t *testing.T, pid int32, d time.Duration) {
	t.Helper()
	e.poll(t, nil, "the server's clock to pass the statement's bound",
		`SELECT coalesce(bool_and(clock_timestamp() > query_start + $2::bigint * interval '1 microsecond'), false)
FROM pg_stat_activity WHERE pid = $1 AND state = 'active'`, pid, d.Microseconds())
}

// lateCases are the statements that grant or extend. setup prepares the
// keys: released rows for an acquisition, rows held by "holder" for a
// renewal. The first key's row is the one held locked.
var lateCases = []struct {
	name  string
	keys  int
	setup func(t *testing.T, e *lateEnv, keys []leaseapi.Key) []leaseapi.Record
	call  func(ctx context.Context, s mutator, keys []leaseapi.Key, recs []leaseapi.Record) error
}{
	{"TryAcquire", 1,
		func(t *testing.T, e *lateEnv, keys []leaseapi.Key) []leaseapi.Record {
			rec := e.hold(t, keys[0])
			if err := e.other.Release(t.Context(), rec); err != nil {
				t.Fatal(err)
			}
			return nil
		},
		func(ctx context.Context, s mutator, keys []leaseapi.Key, _ []leaseapi.Record) error {
			_, err := s.TryAcquire(ctx, keys[0], "late-owner", time.Hour)
			return err
		}},
	{"Renew", 1,
		func(t *testing.T, e *lateEnv, keys []leaseapi.Key) []leaseapi.Record {
			return []leaseapi.Record{e.hold(t, keys[0])}
		},
		func(ctx context.Context, s mutator, _ []leaseapi.Key, recs []leaseapi.Record) error {
			_, err := s.Renew(ctx, recs[0], time.Hour)
			return err
		}},
	{"RenewBatch", 2, // the second row is not locked: it must not be renewed either
		func(t *testing.T, e *lateEnv, keys []leaseapi.Key) []leaseapi.Record {
			return []leaseapi.Record{e.hold(t, keys[0]), e.hold(t, keys[1])}
		},
		func(ctx context.Context, s mutator, _ []leaseapi.Key, recs []leaseapi.Record) error {
			var errs []error
			for _, r := range s.RenewBatch(ctx, []leaseapi.RenewRequest{{Record: recs[0], TTL: time.Hour}, {Record: recs[1], TTL: time.Hour}}) {
				errs = append(errs, r.Err)
			}
			if errs[0] != nil && leaseapi.Kind(errs[0]) != leaseapi.Kind(errs[1]) {
				return fmt.Errorf("elements failed differently: %v, %v", errs[0], errs[1])
			}
			return errs[0]
		}},
}

// mutator is what the cases call: a Store, or a view with a fixed budget.
type mutator interface {
	TryAcquire(ctx context.Context, key leaseapi.Key, owner string, ttl time.Duration) (leaseapi.Record, error)
	Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error)
	RenewBatch(ctx context.Context, reqs []leaseapi.RenewRequest) []leaseapi.RenewResult
}

// hold grants k to "holder" for a minute, directly.
func (e *lateEnv) hold(t *testing.T, k leaseapi.Key) leaseapi.Record {
	t.Helper()
	rec, err := e.other.TryAcquire(t.Context(), k, "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func lateKeys(prefix string, n int) []leaseapi.Key {
	keys := make([]leaseapi.Key, n)
	for i := range keys {
		keys[i] = leaseapi.MustKey("late", fmt.Sprintf("%s-%d", prefix, i))
	}
	return keys
}

// lateRig is the conformance suite's LateRig on PostgreSQL (scenario 7
// with the not-after bound): another transaction holds the key's row FOR
// UPDATE, the held-back statement (sent by a Store whose one connection
// goes through a fault proxy) waits for it at the server, the proxy
// detaches the connection (the client sees it reset, the server keeps it:
// no cancel request, no end of stream), and the statement runs when the
// lock is released, after its bound.
func lateRig(t *testing.T, url string, direct *pgxpool.Pool, b leaseapi.Backend) *simtest.LateRig {
	t.Helper()
	s, ok := b.(*postgres.Store)
	if !ok {
		t.Fatalf("lateRig: %T is not a *postgres.Store", b)
	}
	e := lateEnvOn(t, url, direct, postgres.Options{Schema: postgres.SchemaOf(s)})
	var (
		l       lock
		dropped int64
	)
	return &simtest.LateRig{
		Backend: e.store,
		Direct:  s,
		Hold:    func(t *testing.T, k leaseapi.Key) { l = e.lockRow(t, k) },
		WaitHeld: func(t *testing.T, errc <-chan error) {
			e.waitLocked(t, e.pid, l, errc)
		},
		Cut: func(*testing.T) { e.proxy.Detach() },
		WaitPast: func(t *testing.T, _ time.Time, budget time.Duration) {
			e.waitPast(t, e.pid, budget+5*time.Millisecond)
		},
		Release: func(t *testing.T) {
			dropped = e.proxy.Stats().Dropped
			l.unlock()
			waitProxy(t, e.proxy, "the held-back statement's late reply", func(s faultproxy.Stats) bool { return s.Dropped > dropped })
		},
	}
}

// TestLateStatusIsNotApplied: a statement that reaches its row past its
// bound while its caller still waits (here the budget is fixed at 100ms
// and the ctx has no deadline) changes nothing and fails with a definite
// ErrBackendUnavailable, not ErrAmbiguousOutcome, ErrContended or
// ErrStaleOwner. The same statement with time to spare applies.
func TestLateStatusIsNotApplied(t *testing.T) {
	t.Parallel()
	for _, tc := range lateCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newLateEnv(t)
			keys := lateKeys("status-"+tc.name, tc.keys)
			recs := tc.setup(t, e, keys)
			before := e.state(t, keys...)
			l := e.lockRow(t, keys[0])
			errc := make(chan error, 1)
			// 100ms, not less: TryAcquire also checks the bound before the
			// lock wait (on its insert path), and that check must pass.
			go func() { errc <- tc.call(t.Context(), postgres.WithBudget(e.store, 100*time.Millisecond), keys, recs) }()
			e.waitLocked(t, e.pid, l, errc)
			e.waitPast(t, e.pid, 105*time.Millisecond)
			l.unlock()
			err := <-errc
			wantKind(t, "late "+tc.name, err, leaseapi.ErrBackendUnavailable)
			if !strings.Contains(err.Error(), "not applied") {
				t.Errorf("error %q does not say it was not applied", err)
			}
			for _, secret := range []string{"holder", "late-owner", keys[0].String(), e.opts.Schema} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q reveals %q", err, secret)
				}
			}
			if after := e.state(t, keys...); after != before {
				t.Fatalf("the late %s changed the rows:\nbefore %s\nafter  %s", tc.name, before, after)
			}
			if err := tc.call(t.Context(), postgres.WithBudget(e.store, time.Minute), keys, recs); err != nil {
				t.Fatalf("%s with a minute's budget: %v", tc.name, err)
			}
			if after := e.state(t, keys...); after == before {
				t.Fatalf("%s with a minute's budget did not apply", tc.name)
			}
		})
	}
}

// TestBoundOnThePromptPath: with ctx deadlines (each statement carries a
// bound) and without, prompt mutations apply as before, and contended or
// stale ones keep their kinds.
func TestBoundOnThePromptPath(t *testing.T) {
	t.Parallel()
	s := freshStore(t)
	for _, deadline := range []bool{true, false} {
		ctx, cancel := context.WithCancel(t.Context())
		if deadline {
			ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
		}
		k := leaseapi.MustKey("prompt", fmt.Sprint(deadline))
		rec, err := s.TryAcquire(ctx, k, "a", time.Minute)
		if err != nil {
			t.Fatalf("TryAcquire (deadline %v): %v", deadline, err)
		}
		_, err = s.TryAcquire(ctx, k, "b", time.Minute)
		wantKind(t, "contended TryAcquire", err, leaseapi.ErrContended)
		got, err := s.Renew(ctx, rec, 2*time.Minute)
		if err != nil || !got.ExpiresAt.After(rec.ExpiresAt) {
			t.Fatalf("Renew (deadline %v): %v", deadline, err)
		}
		r := s.RenewBatch(ctx, []leaseapi.RenewRequest{{Record: rec, TTL: time.Minute}, {Record: leaseapi.Record{Key: k, Owner: "b", Token: rec.Token}, TTL: time.Minute}})
		if r[0].Err != nil {
			t.Fatalf("RenewBatch (deadline %v): %v", deadline, r[0].Err)
		}
		wantKind(t, "RenewBatch of another owner", r[1].Err, leaseapi.ErrStaleOwner)
		_, err = s.Renew(ctx, leaseapi.Record{Key: k, Owner: "b", Token: rec.Token}, time.Minute)
		wantKind(t, "Renew of another owner", err, leaseapi.ErrStaleOwner)
		cancel()
	}
}

// TestLateResults: the interpretation of the statements' last column.
func TestLateResults(t *testing.T) {
	t.Parallel()
	k := leaseapi.MustKey("late", "secret-key")
	now := pgtype.Timestamptz{Time: time.Now(), Valid: true}
	tok := pgtype.Int8{Int64: 3, Valid: true}
	var noTok pgtype.Int8
	var null pgtype.Timestamptz
	_, err := postgres.AcquireResult("try acquire", k, "owner-x", noTok, null, null, true)
	wantKind(t, "late acquisition", err, leaseapi.ErrBackendUnavailable)
	_, err = postgres.AcquireResult("try acquire", k, "owner-x", noTok, null, null, false)
	wantKind(t, "contended acquisition", err, leaseapi.ErrContended)
	if rec, err := postgres.AcquireResult("try acquire", k, "owner-x", tok, now, now, true); err != nil || rec.Token != 3 {
		t.Fatalf("granted acquisition (late flag set after it ran): got %v, %v", rec, err)
	}
	_, err = postgres.AcquireResult("try acquire", k, "owner-x", tok, null, now, false)
	wantKind(t, "a token without times", err, leaseapi.ErrAmbiguousOutcome)
	rec := leaseapi.Record{Key: k, Owner: "owner-x", Token: 3}
	_, err = postgres.RenewResult("renew", rec, null, null, true)
	wantKind(t, "late renewal", err, leaseapi.ErrBackendUnavailable)
	if !strings.HasPrefix(err.Error(), "lease: renew: ") || !strings.Contains(err.Error(), "not applied") {
		t.Errorf("late renewal: %q, want the operation name and \"not applied\"", err)
	}
	_, err = postgres.RenewResult("renew", rec, null, null, false)
	wantKind(t, "stale renewal", err, leaseapi.ErrStaleOwner)
}

func waitProxy(t *testing.T, p *faultproxy.Proxy, what string, cond func(faultproxy.Stats) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := p.WaitFor(ctx, cond); err != nil {
		t.Fatalf("waiting for %s: %v (stats %+v)", what, err, p.Stats())
	}
}

// TestHeldBackWithinBudgetTimedFromStart: a statement that waits for a row
// lock but reaches it within its budget applies, judged and timed as of its
// start: its grant starts before the lock was released, so the wait never
// lengthens it.
func TestHeldBackWithinBudgetTimedFromStart(t *testing.T) {
	t.Parallel()
	for _, tc := range lateCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newLateEnv(t)
			keys := lateKeys("start-"+tc.name, tc.keys)
			recs := tc.setup(t, e, keys)
			l := e.lockRow(t, keys[0])
			type result struct {
				rec leaseapi.Record
				err error
			}
			done := make(chan result, 1)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			go func() {
				var r result
				switch tc.name {
				case "TryAcquire":
					r.rec, r.err = e.store.TryAcquire(ctx, keys[0], "late-owner", time.Hour)
				case "Renew":
					r.rec, r.err = e.store.Renew(ctx, recs[0], time.Hour)
				default:
					res := e.store.RenewBatch(ctx, []leaseapi.RenewRequest{{Record: recs[0], TTL: time.Hour}, {Record: recs[1], TTL: time.Hour}})
					r.rec, r.err = res[0].Record, errors.Join(res[0].Err, res[1].Err)
				}
				done <- r
			}()
			e.waitLocked(t, e.pid, l, nil)
			var released time.Time
			if err := e.direct.QueryRow(t.Context(), "SELECT clock_timestamp()").Scan(&released); err != nil {
				t.Fatal(err)
			}
			l.unlock()
			r := <-done
			if r.err != nil {
				t.Fatalf("%s held back within its budget: %v", tc.name, r.err)
			}
			if !r.rec.AcquiredAt.Before(released) || r.rec.ExpiresAt.Sub(r.rec.AcquiredAt) != time.Hour {
				t.Fatalf("%s: granted %v for %v; want from before the lock was released (%v), for 1h",
					tc.name, r.rec.AcquiredAt, r.rec.ExpiresAt.Sub(r.rec.AcquiredAt), released)
			}
		})
	}
}

// TestPlainUpdateChecksBeforeLockWait pins down the PostgreSQL behaviour
// that shapes the renew statements: a plain UPDATE evaluates its WHERE
// (clock_timestamp() included) before it waits for a row lock, and does not
// evaluate it again when the lock holder only locked the row. A bound
// placed there lets a late update through, which is why Renew and
// RenewBatch lock their rows first and check the bound afterwards.
func TestPlainUpdateChecksBeforeLockWait(t *testing.T) {
	t.Parallel()
	e := newLateEnv(t)
	tbl := pgx.Identifier{e.opts.Schema, "plain"}.Sanitize()
	if _, err := e.direct.Exec(t.Context(), "CREATE TABLE "+tbl+" (id int PRIMARY KEY, v int); INSERT INTO "+tbl+" VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}
	l := lockIn(t, e.direct, "SELECT 1 FROM "+tbl+" WHERE id = 1 FOR UPDATE")
	pool := newPool(t, dbURL(t), func(c *pgxpool.Config) { c.MaxConns = 1 })
	pid := backendPID(t, pool)
	done := make(chan error, 1)
	go func() {
		_, err := pool.Exec(t.Context(), "UPDATE "+tbl+" SET v = v + 1 WHERE id = 1 AND clock_timestamp() <= statement_timestamp() + interval '200 milliseconds'")
		done <- err
	}()
	e.waitLocked(t, pid, l, done)
	e.waitPast(t, pid, 250*time.Millisecond)
	l.unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var v int
	if err := e.direct.QueryRow(t.Context(), "SELECT v FROM "+tbl+" WHERE id = 1").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != 1 {
		t.Fatalf("v = %d: the plain UPDATE re-checked its WHERE after the lock wait; the renew statements' lock-first shape may no longer be needed", v)
	}
}
