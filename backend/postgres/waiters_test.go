package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/leaseapi"
)

// probe LISTENs on a Store's release channel from a connection of its own,
// so that a test can see which releases issued a NOTIFY.
type probe struct {
	conn    *pgx.Conn
	pool    *pgxpool.Pool
	channel string
}

func newProbe(t *testing.T, url string, pool *pgxpool.Pool, s *postgres.Store) *probe {
	t.Helper()
	_, _, channel := s.Statements()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := conn.Exec(t.Context(), "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return &probe{conn: conn, pool: pool, channel: channel}
}

// next returns the payloads of the notifications committed since the last
// call: it commits a sentinel NOTIFY from another session and reads up to
// it. Notifications reach a listener in commit order, so everything before
// the sentinel was committed before it, and nothing is waited for by time.
func (p *probe) next(t *testing.T) []string {
	t.Helper()
	const sentinel = "probe-sentinel"
	if _, err := p.pool.Exec(t.Context(), "SELECT pg_notify($1::text, $2::text)", p.channel, sentinel); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var got []string
	for {
		n, err := p.conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("waiting for the sentinel notification: %v", err)
		}
		if n.Payload == sentinel {
			return got
		}
		got = append(got, n.Payload)
	}
}

// twoClients migrates a fresh schema and returns a pool, a holder's Store
// and another client's on its tables, their options, and a probe of their
// release channel.
func twoClients(t *testing.T) (*pgxpool.Pool, *postgres.Store, *postgres.Store, postgres.Options, *probe) {
	t.Helper()
	url := dbURL(t)
	pool := newPool(t, url)
	holder, opts := newStore(t, url, pool)
	other, err := postgres.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	return pool, holder, other, opts, newProbe(t, url, pool, holder)
}

// holdMarked makes holder acquire k and waiter, which watches k until the
// test ends, make one contended attempt (that sets the waiter mark); it
// returns the holder's grant.
func holdMarked(t *testing.T, holder, waiter *postgres.Store, k leaseapi.Key) leaseapi.Record {
	t.Helper()
	_, stop := waiter.WatchRelease(k)
	t.Cleanup(stop)
	rec, err := holder.TryAcquire(t.Context(), k, "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waiter.TryAcquire(t.Context(), k, "waiter", time.Minute); !errors.Is(err, leaseapi.ErrContended) {
		t.Fatalf("contended attempt: got %v, want ErrContended", err)
	}
	return rec
}

// expect fails t unless exactly n notifications were committed since the
// probe's last read (see next).
func (p *probe) expect(t *testing.T, what string, n int) {
	t.Helper()
	if got := p.next(t); len(got) != n {
		t.Fatalf("%s: notifications %q, want %d", what, got, n)
	}
}

// waiting reads k's waiter mark.
func waiting(t *testing.T, pool *pgxpool.Pool, s *postgres.Store, k leaseapi.Key) bool {
	t.Helper()
	var w bool
	tbl := pgx.Identifier{postgres.SchemaOf(s), postgres.DefaultTable}.Sanitize()
	if err := pool.QueryRow(t.Context(), "SELECT waiting FROM "+tbl+" WHERE key = $1", k.String()).Scan(&w); err != nil {
		t.Fatal(err)
	}
	return w
}

// TestReleaseNotifiesOnlyWaiters: a release notifies only when a watching
// client's contended attempt set the key's waiter mark. An uncontended
// release, a release after a contended attempt of a client that does not
// watch, and the release of a waiter that was woken and granted issue no
// NOTIFY; the mark stays set after the release that notified, until the
// next grant of the released row clears it.
func TestReleaseNotifiesOnlyWaiters(t *testing.T) {
	t.Parallel()
	pool, holder, waiter, _, p := twoClients(t)
	ctx := t.Context()
	k := leaseapi.MustKey("waiters", "k")
	payload := postgres.KeyHash(k)

	hold := func() leaseapi.Record {
		t.Helper()
		rec, err := holder.TryAcquire(ctx, k, "holder", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	contend := func(s *postgres.Store) {
		t.Helper()
		if _, err := s.TryAcquire(ctx, k, "waiter", time.Minute); !errors.Is(err, leaseapi.ErrContended) {
			t.Fatalf("contended attempt: got %v, want ErrContended", err)
		}
	}
	release := func(s *postgres.Store, rec leaseapi.Record) {
		t.Helper()
		if err := s.Release(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	want := func(what string, n int) {
		t.Helper()
		got := p.next(t)
		if len(got) != n {
			t.Fatalf("%s: %d notifications %q, want %d", what, len(got), got, n)
		}
		for _, g := range got {
			if g != payload {
				t.Fatalf("%s: payload %q, want the key's hash %q", what, g, payload)
			}
		}
	}

	// No waiter at all.
	release(holder, hold())
	want("uncontended release", 0)

	// A contended attempt by a client that does not watch sets no mark.
	rec := hold()
	contend(waiter)
	if waiting(t, pool, holder, k) {
		t.Fatal("a contended attempt without a watch set the waiter mark")
	}
	release(holder, rec)
	want("release after an unwatched contended attempt", 0)

	// A watching client's contended attempt sets the mark; the release
	// notifies once and leaves it for the next grant to clear; repeated
	// attempts do not notify twice, nor does a repeated release.
	ch, stop := waiter.WatchRelease(k)
	defer stop()
	rec = hold()
	contend(waiter)
	contend(waiter)
	if !waiting(t, pool, holder, k) {
		t.Fatal("a watching client's contended attempt did not set the waiter mark")
	}
	release(holder, rec)
	want("release with a waiter", 1)
	if !waiting(t, pool, holder, k) {
		t.Fatal("the release that notified cleared the waiter mark before the next grant")
	}
	release(holder, rec)
	want("repeated release", 0)
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the release within 10s")
	}

	// The woken waiter is granted; its own release notifies nobody.
	got, err := waiter.TryAcquire(ctx, k, "waiter", time.Minute)
	if err != nil {
		t.Fatalf("the woken waiter's attempt: %v", err)
	}
	if waiting(t, pool, holder, k) {
		t.Fatal("the waiter's grant left the waiter mark set")
	}
	release(waiter, got)
	want("release by the granted waiter", 0)

	// A release that is not a release (stale) never notifies.
	rec = hold()
	contend(waiter)
	wantKind(t, "stale release", holder.Release(ctx, leaseapi.Record{Key: k, Owner: "other", Token: rec.Token, AcquiredAt: rec.AcquiredAt, ExpiresAt: rec.ExpiresAt}), leaseapi.ErrStaleOwner)
	want("stale release", 0)
	if !waiting(t, pool, holder, k) {
		t.Fatal("a stale release cleared the waiter mark")
	}
	release(holder, rec)
	want("release with a waiter", 1)

	// A watcher on the releasing Store itself is woken without a NOTIFY.
	own, stopOwn := holder.WatchRelease(k)
	defer stopOwn()
	release(holder, hold())
	select {
	case <-own:
	default:
		t.Fatal("the releasing Store's own watcher was not woken by the confirmed release")
	}
	want("release with a watcher on the same Store only", 0)
}

// TestWaiterMarkSurvivesGrantAfterExpiry: a grant made after the holder's
// lease expired (no release, so nobody was notified) keeps the mark that
// other waiters may still need; the next release notifies once, and the
// grant after that release clears the mark.
func TestWaiterMarkSurvivesGrantAfterExpiry(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	pool := newPool(t, url)
	s, _ := newStore(t, url, pool)
	p := newProbe(t, url, pool, s)
	ctx := t.Context()
	k := leaseapi.MustKey("waiters", "expiry")
	_, stop := s.WatchRelease(k)
	defer stop()
	old, err := s.TryAcquire(ctx, k, "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx, k, "waiter", time.Minute); !errors.Is(err, leaseapi.ErrContended) {
		t.Fatalf("contended attempt: got %v", err)
	}
	// Expire the holder's grant on the server (by its clock, not ours).
	tbl := pgx.Identifier{postgres.SchemaOf(s), postgres.DefaultTable}.Sanitize()
	if _, err := pool.Exec(ctx, "UPDATE "+tbl+" SET expires_at = clock_timestamp() - interval '1 second', acquired_at = clock_timestamp() - interval '2 seconds' WHERE key = $1", k.String()); err != nil {
		t.Fatal(err)
	}
	rec, err := s.TryAcquire(ctx, k, "waiter", time.Minute)
	if err != nil || rec.Token != old.Token+1 {
		t.Fatalf("grant after expiry: got %v, %v", rec, err)
	}
	if !waiting(t, pool, s, k) {
		t.Fatal("the grant after expiry cleared the waiter mark")
	}
	if err := s.Release(ctx, rec); err != nil {
		t.Fatal(err)
	}
	p.expect(t, "release after a grant after expiry", 1)
	rec, err = s.TryAcquire(ctx, k, "next", time.Minute)
	if err != nil {
		t.Fatalf("grant after the release: %v", err)
	}
	if waiting(t, pool, s, k) {
		t.Fatal("the grant after a notifying release left the waiter mark set")
	}
	if err := s.Release(ctx, rec); err != nil {
		t.Fatal(err)
	}
	p.expect(t, "release after the mark was cleared", 0)
}

// TestMarkedContenderTakesNoRowLock: once a watching contender's attempt
// has marked a live grant, its next attempts answer contended from their
// snapshot, without taking the row lock: here another transaction holds the
// row FOR UPDATE, and the attempt must not wait for it (it would otherwise
// block until its deadline). The release still notifies.
func TestMarkedContenderTakesNoRowLock(t *testing.T) {
	t.Parallel()
	pool, holder, waiter, _, p := twoClients(t)
	ctx := t.Context()
	k := leaseapi.MustKey("waiters", "nolock")
	rec := holdMarked(t, holder, waiter, k)
	if !waiting(t, pool, holder, k) {
		t.Fatal("the watching contender's attempt did not set the waiter mark")
	}
	tbl := pgx.Identifier{postgres.SchemaOf(holder), postgres.DefaultTable}.Sanitize()
	l := lockIn(t, pool, "SELECT 1 FROM "+tbl+" WHERE key = $1 FOR UPDATE", k.String())
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := waiter.TryAcquire(actx, k, "waiter", time.Minute)
	cancel()
	if !errors.Is(err, leaseapi.ErrContended) {
		t.Fatalf("attempt on a marked live grant while its row is locked: got %v, want ErrContended at once", err)
	}
	l.unlock()
	if err := holder.Release(ctx, rec); err != nil {
		t.Fatal(err)
	}
	p.expect(t, "release after the lock-free attempt", 1)
}

// TestHandoffLoserMarksWinnersGrant: the watching waiters woken by one
// release race for the key; a loser's attempt starts while the released
// row (still marked) is its snapshot, waits for the winner's row lock, and
// must then mark the winner's grant, so that the winner's release notifies
// the waiters left. Here the winner is a transaction of the test that
// takes the released row over as a grant does (clearing the mark) and
// commits once the loser's statement waits for its lock.
func TestHandoffLoserMarksWinnersGrant(t *testing.T) {
	t.Parallel()
	pool, holder, loser, opts, p := twoClients(t)
	ctx := t.Context()
	k := leaseapi.MustKey("waiters", "handoff")
	rec := holdMarked(t, holder, loser, k)
	if err := holder.Release(ctx, rec); err != nil {
		t.Fatal(err)
	}
	p.expect(t, "release with a waiter", 1)

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	tbl := pgx.Identifier{opts.Schema, postgres.DefaultTable}.Sanitize()
	winner := leaseapi.Record{Key: k, Owner: "winner"}
	var pid int32
	if err := tx.QueryRow(ctx, `UPDATE `+tbl+` SET owner = 'winner', token = token + 1,
	acquired_at = clock_timestamp(), expires_at = clock_timestamp() + interval '1 minute', waiting = false
WHERE key = $1 AND owner IS NULL
RETURNING token, acquired_at, expires_at, pg_backend_pid()`, k.String()).Scan(&winner.Token, &winner.AcquiredAt, &winner.ExpiresAt, &pid); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := loser.TryAcquire(ctx, k, "loser", time.Minute)
		errc <- err
	}()
	// Only the loser's statement can wait for this transaction's lock.
	(&lateEnv{direct: pool}).poll(t, errc, "the loser's statement to wait for the winner's row lock",
		`SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid)))`, pid)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, leaseapi.ErrContended) {
		t.Fatalf("the loser's attempt: got %v, want ErrContended", err)
	}
	if !waiting(t, pool, holder, k) {
		t.Fatal("the loser's attempt did not mark the winner's grant")
	}
	if err := holder.Release(ctx, winner); err != nil {
		t.Fatal(err)
	}
	p.expect(t, "the winner's release", 1)
}
