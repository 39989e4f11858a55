package postgres_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/leaseapi"
)

// The acquisitions and releases of older Stores, verbatim: the statements
// the old Stores of a rolling upgrade still run. %[1]s is the lease table,
// %[2]s the not-after check on $4.
//
// Before migration 3 (commit 42293f6^), no waiter mark: every release
// notifies, no acquisition marks.
//
// With migration 3, before the mark moved from the release to the next
// grant (commit 3d36218^): a contended attempt marks the key (if $5), a
// grant never touches the mark, the release locks the row, clears the mark
// and notifies if it was set.
//
// Both releases answer 0 released, 1 already released, 2 stale.
const (
	v2Acquire = `WITH now AS (SELECT clock_timestamp() AS t),
ins AS (
	INSERT INTO %[1]s AS l (key, owner, token, acquired_at, expires_at)
	SELECT $1::text, $2::text, 1, now.t, now.t + $3::bigint * interval '1 microsecond' FROM now
	WHERE %[2]s
	ON CONFLICT (key) DO UPDATE
	SET owner = excluded.owner, token = l.token + 1, acquired_at = excluded.acquired_at, expires_at = excluded.expires_at
	WHERE (l.owner IS NULL OR l.expires_at <= excluded.acquired_at) AND %[2]s
	RETURNING l.token, l.acquired_at, l.expires_at
)
SELECT ins.token, ins.acquired_at, ins.expires_at, NOT %[2]s
FROM (VALUES (1)) AS one (x) LEFT JOIN ins ON true`

	v2Release = `WITH cur AS (
	SELECT key, owner, token FROM %[1]s WHERE key = $1::text FOR UPDATE
), r AS (
	UPDATE %[1]s AS l SET owner = NULL, expires_at = l.acquired_at
	FROM cur WHERE l.key = cur.key AND cur.owner = $2::text AND cur.token = $3::bigint
	RETURNING 1
), n AS (
	SELECT pg_notify($4::text, $5::text) FROM r
)
SELECT CASE
	WHEN (SELECT count(*) FROM n) > 0 THEN 0
	WHEN EXISTS (SELECT 1 FROM cur WHERE cur.token = $3::bigint AND cur.owner IS NULL) THEN 1
	ELSE 2 END`

	v3Acquire = `WITH now AS (SELECT clock_timestamp() AS t),
ins AS (
	INSERT INTO %[1]s AS l (key, owner, token, acquired_at, expires_at)
	SELECT $1::text, $2::text, 1, now.t, now.t + $3::bigint * interval '1 microsecond' FROM now
	WHERE %[2]s
	ON CONFLICT (key) DO UPDATE
	SET owner = excluded.owner, token = l.token + 1, acquired_at = excluded.acquired_at, expires_at = excluded.expires_at
	WHERE (l.owner IS NULL OR l.expires_at <= excluded.acquired_at) AND %[2]s
	RETURNING l.token, l.acquired_at, l.expires_at
),
mark AS (
	UPDATE %[1]s AS l SET waiting = true
	WHERE $5::boolean AND l.key = $1::text AND NOT l.waiting
		AND NOT EXISTS (SELECT 1 FROM ins) AND %[2]s
	RETURNING 1
)
SELECT ins.token, ins.acquired_at, ins.expires_at, NOT %[2]s
FROM (VALUES (1)) AS one (x) LEFT JOIN ins ON true`

	v3Release = `WITH cur AS (
	SELECT key, owner, token, waiting FROM %[1]s WHERE key = $1::text FOR UPDATE
), r AS (
	UPDATE %[1]s AS l SET owner = NULL, expires_at = l.acquired_at, waiting = false
	FROM cur WHERE l.key = cur.key AND cur.owner = $2::text AND cur.token = $3::bigint
	RETURNING cur.waiting
), n AS (
	SELECT pg_notify($4::text, $5::text) FROM r WHERE r.waiting
)
SELECT CASE
	WHEN (SELECT count(*) FROM n) > 0 THEN 0
	WHEN EXISTS (SELECT 1 FROM r) THEN 0
	WHEN EXISTS (SELECT 1 FROM cur WHERE cur.token = $3::bigint AND cur.owner IS NULL) THEN 1
	ELSE 2 END`

	oldInTime = "($4::bigint IS NULL OR clock_timestamp() <= statement_timestamp() + $4::bigint * interval '1 microsecond')"
)

// oldStore is an old Store of a rolling upgrade, reduced to what changed:
// its acquisition and its release.
type oldStore struct {
	pool             *pgxpool.Pool
	acquire, release string
	channel          string
	// mark is the acquisition's $5 (a Store with a WatchRelease open on
	// the key: its contended attempts set the mark); nil for a statement
	// that has no $5.
	mark *bool
}

func newOldStore(pool *pgxpool.Pool, s *postgres.Store, acquire, release string, mark *bool) *oldStore {
	tbl := pgx.Identifier{postgres.SchemaOf(s), postgres.DefaultTable}.Sanitize()
	_, _, channel := s.Statements()
	return &oldStore{
		pool:    pool,
		acquire: fmt.Sprintf(acquire, tbl, oldInTime),
		release: fmt.Sprintf(release, tbl),
		channel: channel,
		mark:    mark,
	}
}

func (p *oldStore) TryAcquire(t *testing.T, k leaseapi.Key, owner string) (leaseapi.Record, error) {
	t.Helper()
	var tok *int64
	var acq, exp *time.Time
	var late bool
	args := []any{k.String(), owner, time.Minute.Microseconds(), nil}
	if p.mark != nil {
		args = append(args, *p.mark)
	}
	if err := p.pool.QueryRow(t.Context(), p.acquire, args...).Scan(&tok, &acq, &exp, &late); err != nil {
		t.Fatalf("old acquire: %v", err)
	}
	if late {
		t.Fatal("old acquire: late without a bound")
	}
	if tok == nil {
		return leaseapi.Record{}, leaseapi.NewError("acquire", leaseapi.ErrContended, "")
	}
	return leaseapi.Record{Key: k, Owner: owner, Token: leaseapi.Token(*tok), AcquiredAt: *acq, ExpiresAt: *exp}, nil
}

func (p *oldStore) Release(t *testing.T, rec leaseapi.Record) error {
	t.Helper()
	var outcome int32
	if err := p.pool.QueryRow(t.Context(), p.release, rec.Key.String(), rec.Owner, int64(rec.Token), p.channel, postgres.KeyHash(rec.Key)).Scan(&outcome); err != nil {
		t.Fatalf("old release: %v", err)
	}
	if outcome == 2 {
		return leaseapi.NewError("release", leaseapi.ErrStaleOwner, "")
	}
	return nil
}

// upgradeStore is one Store of any version, as the upgrade test drives it.
type upgradeStore struct {
	name     string
	watching bool // its contended attempts set the waiter mark
	acquire  func(k leaseapi.Key, owner string) (leaseapi.Record, error)
	release  func(rec leaseapi.Record) error
}

// TestRollingUpgradeSharesTable backs the CHANGELOG's claim that old and
// new Stores can share a table during a rolling upgrade. Five Stores share
// one table and one key: the current Store and the one of migration 3
// before the mark moved to the next grant (v3: its acquisition and
// release, verbatim), each once with a release watch open (its contended
// attempts set the waiter mark) and once without, and the Store of before
// migration 3 (v2: nothing marks, every release notifies). A seeded random
// sequence of grants, contended attempts, releases (by any version, of
// any version's grant), stale releases and expiries (set on the server)
// checks after every step:
//
//   - fencing: a grant is refused (ErrContended) while another is live and
//     otherwise carries the previous token + 1, whoever made either; a
//     stale release is refused and changes nothing;
//   - release notification: a release that follows a watching contended
//     attempt since the last notification notifies, whichever versions
//     set the mark, granted or released (no waiter loses its mark without
//     a notification); any other notification is at most the one spurious
//     notify of a release, never one from a grant or a stale release.
func TestRollingUpgradeSharesTable(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	pool := newPool(t, url)
	cur, opts := newStore(t, url, pool)
	curWatching, err := postgres.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = curWatching.Close() })
	probe := newProbe(t, url, pool, cur)
	ctx := t.Context()
	tbl := pgx.Identifier{opts.Schema, postgres.DefaultTable}.Sanitize()

	current := func(name string, s *postgres.Store, watching bool) upgradeStore {
		return upgradeStore{name: name, watching: watching,
			acquire: func(k leaseapi.Key, owner string) (leaseapi.Record, error) {
				return s.TryAcquire(ctx, k, owner, time.Minute)
			},
			release: func(rec leaseapi.Record) error { return s.Release(ctx, rec) },
		}
	}
	old := func(name, acquire, release string, mark *bool) upgradeStore {
		p := newOldStore(pool, cur, acquire, release, mark)
		return upgradeStore{name: name, watching: mark != nil && *mark,
			acquire: func(k leaseapi.Key, owner string) (leaseapi.Record, error) { return p.TryAcquire(t, k, owner) },
			release: func(rec leaseapi.Record) error { return p.Release(t, rec) },
		}
	}
	yes, no := true, false
	stores := []upgradeStore{
		current("current", cur, false),
		current("current watching", curWatching, true),
		old("v3", v3Acquire, v3Release, &no),
		old("v3 watching", v3Acquire, v3Release, &yes),
		// Before migration 3 nothing marks, watching or not.
		old("v2", v2Acquire, v2Release, nil),
	}

	// What the CHANGELOG tells upgraders from before migration 3: their
	// old Stores' waiters mark nothing, so a new Store's release does not
	// wake them (they wait out their retry interval).
	{
		k := leaseapi.MustKey("upgrade", "v2-waiter")
		rec, err := stores[0].acquire(k, "holder")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stores[4].acquire(k, "v2-waiter"); !errors.Is(err, leaseapi.ErrContended) {
			t.Fatalf("v2 contended attempt: %v", err)
		}
		if err := stores[0].release(rec); err != nil {
			t.Fatal(err)
		}
		if got := probe.next(t); len(got) != 0 {
			t.Fatalf("a new Store's release after a v2 waiter's attempt notified %q", got)
		}
	}

	for _, seed := range []uint64{1, 2, 3, 4, 5, 6} {
		rng := rand.New(rand.NewPCG(seed, 0))
		k := leaseapi.MustKey("upgrade", fmt.Sprint("seed-", seed))
		_, stop := curWatching.WatchRelease(k)
		var (
			live      *leaseapi.Record // the grant the server holds, if any
			last      leaseapi.Record  // the latest grant, live or not
			released  bool             // last was released (not just expired)
			pending   bool             // a watching contended attempt since the last notification
			kinds     = map[string]int{}
			spurious  int
			notifying int
		)
		notified := func(step string, release bool) {
			t.Helper()
			got := probe.next(t)
			if len(got) > 1 || (len(got) == 1 && !release) {
				t.Fatalf("seed %d, %s: notifications %q", seed, step, got)
			}
			if len(got) == 1 {
				if got[0] != postgres.KeyHash(k) {
					t.Fatalf("seed %d, %s: payload %q, want the key's hash", seed, step, got[0])
				}
				if !pending {
					spurious++
				}
				notifying++
				pending = false
			} else if release && pending {
				t.Fatalf("seed %d, %s: a watching contender marked the key since the last notification, and the release notified nobody", seed, step)
			}
		}
		for i := range 300 {
			s := stores[rng.IntN(len(stores))]
			// While the key is held, contended attempts are as likely
			// as all the rest, so that marks meet every way of ending
			// a grant; a free key is mostly acquired.
			op := []int{0, 0, 0, 0, 1, 2, 3, 4}[rng.IntN(8)]
			if live == nil && (op == 1 || op == 2) {
				op = 0
			}
			var step string
			switch op {
			case 0: // an attempt: a grant if the key is free, else contended
				owner := fmt.Sprintf("owner-%d-%d", seed, i)
				step = fmt.Sprintf("step %d: %s acquires", i, s.name)
				rec, err := s.acquire(k, owner)
				if live != nil {
					if !errors.Is(err, leaseapi.ErrContended) {
						t.Fatalf("seed %d, %s while %q holds token %d: %v, want ErrContended", seed, step, live.Owner, live.Token, err)
					}
					if s.watching {
						pending = true
					}
					kinds["contended "+s.name]++
					notified(step, false)
					continue
				}
				if err != nil {
					t.Fatalf("seed %d, %s on a free key: %v", seed, step, err)
				}
				if last.Token != 0 && rec.Token != last.Token+1 {
					t.Fatalf("seed %d, %s: token %d after %d", seed, step, rec.Token, last.Token)
				}
				live, last, released = &rec, rec, false
				kinds["grant "+s.name]++
				notified(step, false)
			case 1: // the holder's release, through any version
				step = fmt.Sprintf("step %d: %s releases token %d", i, s.name, live.Token)
				if err := s.release(*live); err != nil {
					t.Fatalf("seed %d, %s: %v", seed, step, err)
				}
				live, released = nil, true
				kinds["release "+s.name]++
				notified(step, true)
			case 2: // a stale release: the live grant with another owner
				step = fmt.Sprintf("step %d: %s releases a stale record", i, s.name)
				stale := *live
				stale.Owner = "someone-else"
				if err := s.release(stale); !errors.Is(err, leaseapi.ErrStaleOwner) {
					t.Fatalf("seed %d, %s: %v, want ErrStaleOwner", seed, step, err)
				}
				notified(step, false)
			case 3: // the latest grant's release, live, expired or repeated
				if last.Token == 0 {
					continue
				}
				step = fmt.Sprintf("step %d: %s releases token %d (released %v, live %v)", i, s.name, last.Token, released, live != nil)
				if err := s.release(last); err != nil {
					t.Fatalf("seed %d, %s: %v", seed, step, err)
				}
				if released { // idempotent: nothing changes, nobody is notified
					notified(step, false)
					break
				}
				live, released = nil, true // a release of the grant, expired or not
				kinds["release "+s.name]++
				notified(step, true)
			case 4: // the live grant expires (on the server's clock); nobody is notified
				if live == nil {
					continue
				}
				step = fmt.Sprintf("step %d: token %d expires", i, live.Token)
				if _, err := pool.Exec(ctx, "UPDATE "+tbl+" SET acquired_at = clock_timestamp() - interval '2 minutes', expires_at = clock_timestamp() - interval '1 minute' WHERE key = $1", k.String()); err != nil {
					t.Fatal(err)
				}
				live = nil
				kinds["expiry"]++
				notified(step, false)
			}
			// Whoever holds the key on the server is the grant the model
			// holds, with its token.
			var owner *string
			var tok int64
			var held bool
			if err := pool.QueryRow(ctx, "SELECT owner, token, owner IS NOT NULL AND expires_at > clock_timestamp() FROM "+tbl+" WHERE key = $1", k.String()).Scan(&owner, &tok, &held); err != nil {
				t.Fatalf("seed %d, %s: read the row: %v", seed, step, err)
			}
			if held != (live != nil) || tok != int64(last.Token) || (live != nil && *owner != live.Owner) {
				t.Fatalf("seed %d, %s: row held %v by %v token %d, want %+v (latest token %d)", seed, step, held, owner, tok, live, last.Token)
			}
		}
		t.Logf("seed %d: %v; %d notifying releases, %d of them spurious", seed, kinds, notifying, spurious)
		for _, s := range stores {
			if kinds["grant "+s.name] == 0 || kinds["release "+s.name] == 0 {
				t.Errorf("seed %d: %s never granted or released: the sequence is too short", seed, s.name)
			}
		}
		if live != nil {
			if err := cur.Release(ctx, *live); err != nil {
				t.Fatal(err)
			}
			_ = probe.next(t)
		}
		stop()
	}
}
