package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease/internal/watchhub"
	"github.com/leasekit/lease/leaseapi"
)

// Default identifiers used when the corresponding [Options] field is empty.
const (
	DefaultSchema     = "lease"
	DefaultTable      = "leases"
	DefaultFenceTable = "fences"
)

// identRE is the only identifier shape accepted for schema and table names:
// lower-case, unquoted-safe and at most 63 bytes (PostgreSQL truncates longer
// names silently, which would make two configurations collide).
var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Options configures a [Store] and [Migrate]. The zero value is valid and
// names lease.leases and lease.fences. A Store and the Migrate call that
// prepared its tables must use the same Options.
type Options struct {
	// Schema holds the tables; default [DefaultSchema]. It must match
	// [a-z_][a-z0-9_]{0,62}; anything else is rejected with
	// leaseapi.ErrInvalidState rather than quoted.
	Schema string
	// Table is the lease table; default [DefaultTable]. Same rule as
	// Schema, and it must not be lease_migrations (the version table
	// [Migrate] keeps in the schema).
	Table string
	// FenceTable is the protected-resource table used by
	// [Store.AdvanceFence] and [Store.FencedWrite]; default
	// [DefaultFenceTable]. Same rules as Table; it must differ from Table.
	FenceTable string
}

// names is the validated, quoted form of Options.
type names struct {
	schema, table, fences string // raw validated names
	qTable, qFences       string // schema-qualified, quoted
	qSchema               string
}

func (o Options) names() (names, error) {
	n := names{schema: o.Schema, table: o.Table, fences: o.FenceTable}
	if n.schema == "" {
		n.schema = DefaultSchema
	}
	if n.table == "" {
		n.table = DefaultTable
	}
	if n.fences == "" {
		n.fences = DefaultFenceTable
	}
	for _, s := range []string{n.schema, n.table, n.fences} {
		if !identRE.MatchString(s) {
			return names{}, leaseapi.NewError("options", leaseapi.ErrInvalidState, "identifier must match [a-z_][a-z0-9_]{0,62}")
		}
	}
	if n.table == n.fences || n.table == versionTable || n.fences == versionTable {
		return names{}, leaseapi.NewError("options", leaseapi.ErrInvalidState, "table names must be distinct")
	}
	n.qSchema = pgx.Identifier{n.schema}.Sanitize()
	n.qTable = pgx.Identifier{n.schema, n.table}.Sanitize()
	n.qFences = pgx.Identifier{n.schema, n.fences}.Sanitize()
	return n, nil
}

// channel is the NOTIFY channel of one lease table: a fixed prefix and a hash
// of the qualified table name, so that it fits PostgreSQL's 63-byte limit.
func (n names) channel() string {
	h := sha256.Sum256([]byte(n.schema + "." + n.table))
	return "lease_release_" + hex.EncodeToString(h[:12])
}

// Store is the PostgreSQL backend. It implements [leaseapi.Backend],
// [leaseapi.Inspector], [leaseapi.ReleaseWatcher] and
// [leaseapi.BatchRenewer] and claims them ([Store.Capabilities]), plus the
// fencing helpers [Store.Fence],
// [Store.AdvanceFence] and [Store.FencedWrite].
//
// A Store is safe for concurrent use. It borrows the pool (the caller closes
// it, after Store.Close). Its only background resource is the LISTEN
// connection started by the first [Store.WatchRelease]; [Store.Close] gives
// it back. A Store on which WatchRelease was never called needs no Close.
//
// Make Stores with [New]. A zero Store (or a nil *Store) is not usable, and
// never panics: every method returns leaseapi.ErrInvalidState, and
// WatchRelease returns a channel that never receives.
type Store struct {
	pool    *pgxpool.Pool
	n       names
	channel string
	q       statements

	// channelArg is channel as a statement argument, boxed once.
	channelArg any

	// schemaOK is set once the lease table was seen to have the latest
	// migration's shape (checkSchema); until then every operation checks
	// first. It is never cleared: a table dropped later is reported by
	// the operations' own statements ("schema missing").
	schemaOK atomic.Bool

	// watches holds the WatchRelease registrations by payload hash, each
	// carrying its key's text (kept in memory only, for the sweep after
	// (re)connecting). Its listener is the LISTEN goroutine (listen),
	// started by the first WatchRelease and stopped by Close.
	watches *watchhub.Hub[string, string]

	// calls ends the Store's calls when their ctx does, in place of
	// pgx's per-statement context watcher (calls.go).
	calls *calls
}

// The capabilities the Store implements and claims ([Store.Capabilities]).
var (
	_ leaseapi.Capable        = (*Store)(nil)
	_ leaseapi.Backend        = (*Store)(nil)
	_ leaseapi.Inspector      = (*Store)(nil)
	_ leaseapi.ReleaseWatcher = (*Store)(nil)
	_ leaseapi.BatchRenewer   = (*Store)(nil)
)

// statements holds the SQL of every operation, built once in New from the
// validated, quoted identifiers.
type statements struct {
	acquire, acquireMark, renew, validate, release, released, inspect, renewBatch, fence, advance, sweep, check string
}

// grant is the upsert at the heart of both acquire statements. It takes
// over only a released or expired row, bumping its token, and is timed by
// statement_timestamp(): the server's clock when it received the
// statement, one reading, so expires_at - acquired_at is exactly the TTL,
// and an acquisition that had to wait for the row lock is timed from
// before the wait. No row means contended, or late.
//
// Not-after ($4, see inTime): ON CONFLICT DO UPDATE locks the conflicting
// row first (waiting for a transaction that holds it) and only then
// evaluates its WHERE, so the bound there is checked with the lock held;
// the SELECT's WHERE checks it on the path that inserts a new row.
//
// The waiter mark: taking over a released row clears it, because the
// release that ended the previous grant found it set and notified (a mark
// is only ever set on a live grant, see acquireMark); taking over an
// expired row keeps it, because nobody was notified.
//
// It returns the token and acquired_at only: expires_at is acquired_at
// plus the TTL's microseconds, exactly, and the client adds them itself
// (grantExpiry), which saves decoding a column.
//
// try is one more condition of the SELECT that feeds the upsert: false
// skips the attempt (no insertion, no conflict, no row lock). refused is
// the value of the ON CONFLICT WHERE when it refuses the locked row (held,
// or late), evaluated then only (a CASE): false, or an expression that is
// false and does something for a refused attempt (see acquire).
func grant(t, try, refused string) string {
	return fmt.Sprintf(`
	INSERT INTO %[1]s AS l (key, owner, token, acquired_at, expires_at)
	SELECT $1::text, $2::text, 1, statement_timestamp(), statement_timestamp() + $3::bigint * interval '1 microsecond'
	WHERE %[2]s AND %[3]s
	ON CONFLICT (key) DO UPDATE
	SET owner = excluded.owner, token = l.token + 1, acquired_at = excluded.acquired_at, expires_at = excluded.expires_at,
		waiting = l.waiting AND l.owner IS NOT NULL
	WHERE CASE WHEN (l.owner IS NULL OR l.expires_at <= excluded.acquired_at) AND %[2]s THEN true ELSE %[4]s END
	RETURNING l.token, l.acquired_at
`, t, inTime("$4"), try, refused)
}

func buildStatements(n names) statements {
	t, f := n.qTable, n.qFences
	return statements{
		// acquire is the bare upsert of an attempt that sets no waiter
		// mark (see grant): no row means not granted, and the client
		// tells late from contended by the time the reply took
		// (tryAcquire). An attempt refused on a locked row sets
		// synchronous_commit to off for its own transaction, as
		// notGranted does for acquireMark; an attempt that locked nothing
		// writes nothing and has no commit to flush. Wrapping the upsert
		// to return a row either way, with the late flag, as acquireMark
		// does, cost the server about 26,000 instructions per attempt
		// (a CTE scan, a join and a VALUES scan to initialise).
		acquire: grant(t, "true", "set_config('synchronous_commit', 'off', true) IS NULL"),

		// acquireMark is acquire for a Store that watches the key ($5,
		// see waitMark): a contended attempt sets waiting, so that the
		// release notifies. mark reads ins first (NOT EXISTS), so it runs
		// after the upsert, which has locked the row (ON CONFLICT DO
		// UPDATE keeps the lock even when its WHERE is false); it writes
		// unless the row is a live grant already marked, and not past the
		// bound (a late statement changes nothing, the mark included).
		// That condition, not "NOT waiting", is what lets the losers of a
		// hand-off mark the winner's grant: woken by the same release,
		// their snapshot shows the released row, whose mark is still set
		// (the winner's grant clears it). An UPDATE skips a row whose
		// snapshot version fails its WHERE without looking at the newest
		// one; with this condition the released version passes, so the
		// UPDATE, finding the row changed, evaluates it again on the
		// winner's grant (the version ins locked) and marks it unless
		// another loser did. A key with
		// no row yet that is contended (a concurrent first insertion) gets
		// no mark: its waiter falls back to its retry interval once.
		//
		// A waiter's repeated attempts while the key stays held would
		// each lock the row (a transaction id, a WAL record and a flushed
		// commit) and queue the holder's release behind that commit. So
		// when the statement's snapshot shows a live grant that is
		// already marked, the upsert is not even tried and mark finds
		// nothing to do (it reads the same snapshot): the answer is
		// contended, read-only. That is correct as of the snapshot, and
		// the mark it found is one the release of that grant will honour
		// (a mark is cleared only by a grant after a notifying release),
		// or was honoured after this Store registered its watch.
		acquireMark: fmt.Sprintf(`WITH ins AS (%[1]s),
mark AS (
	UPDATE %[2]s AS l SET waiting = true
	WHERE l.key = $1::text AND NOT (l.waiting AND l.owner IS NOT NULL)
		AND NOT EXISTS (SELECT 1 FROM ins) AND %[3]s
	RETURNING 1
)
SELECT ins.token, ins.acquired_at, %[4]s
FROM (VALUES (1)) AS one (x) LEFT JOIN ins ON true`, grant(t, fmt.Sprintf(`NOT EXISTS (
		SELECT 1 FROM %[1]s AS w
		WHERE w.key = $1::text AND w.waiting AND w.owner IS NOT NULL AND w.expires_at > statement_timestamp())`, t), "false"), t, inTime("$4"), notGranted("$4")),

		// A plain UPDATE checks its WHERE before it waits for a row lock,
		// and does not check it again after the wait unless the row was
		// changed meanwhile; so cur locks the row first (FOR NO KEY
		// UPDATE, the lock the UPDATE takes anyway), and gate evaluates
		// the not-after bound ($5) on cur's row, which exists only once
		// the lock is held. now is read by cur before the lock wait, so a
		// renewal is judged and timed as of its statement's start, never
		// later. No row from u means stale, or late (the last column).
		renew: fmt.Sprintf(`WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
cur AS MATERIALIZED (
	SELECT now.t FROM %[1]s AS l, now
	WHERE l.key = $1::text AND l.owner = $2::text AND l.token = $3::bigint
	FOR NO KEY UPDATE OF l
),
gate AS MATERIALIZED (
	SELECT cur.t, %[2]s AS ok FROM cur
),
u AS (
	UPDATE %[1]s AS l SET acquired_at = gate.t, expires_at = gate.t + $4::bigint * interval '1 microsecond'
	FROM gate
	WHERE gate.ok AND l.key = $1::text AND l.owner = $2::text AND l.token = $3::bigint AND l.expires_at > gate.t
	RETURNING l.acquired_at, l.expires_at
)
SELECT u.acquired_at, u.expires_at, coalesce((SELECT NOT ok FROM gate), false)
FROM (VALUES (1)) AS one (x) LEFT JOIN u ON true`, t, inTime("$5")),

		// validate returns one row: the live grant's times, or NULLs.
		validate: fmt.Sprintf(`SELECT l.acquired_at, l.expires_at FROM (VALUES (1)) AS one (x)
LEFT JOIN %[1]s AS l ON l.key = $1::text AND l.owner = $2::text AND l.token = $3::bigint AND l.expires_at > clock_timestamp()`, t),

		// One UPDATE comparing owner and token. If the row is locked, it
		// waits, and if the row was changed meanwhile (a waiter's mark),
		// evaluates its WHERE and SET again on the newest version, so the
		// SET of waiting reads the mark as the release finds it. It
		// notifies (delivered at commit) only if the mark is set: a
		// transaction that notified serialises its commit with every
		// other notifying transaction of the database, so an uncontended
		// release must not. The mark stays (waiting is set to itself; the
		// next grant of the released row clears it, see grant). The
		// notification is in SET, not in RETURNING, so that the release
		// returns no row, as the floor's (a row costs the server its
		// projection and the client its copy); SET is evaluated once per
		// version tried, so a release whose first version was marked but
		// whose newest one no longer matches (a successor took the row
		// over meanwhile) can notify spuriously, which only makes a
		// waiter try once more, and a notification is sent once per
		// transaction whatever the count. The payload is computed by the
		// server, and only then (payloadSQL). No row updated means
		// already released, or stale: released tells which.
		release: fmt.Sprintf(`UPDATE %[1]s AS l SET owner = NULL, expires_at = l.acquired_at,
	waiting = CASE WHEN l.waiting THEN pg_notify($4::text, %[2]s) IS NOT NULL OR l.waiting ELSE false END
WHERE l.key = $1::text AND l.owner = $2::text AND l.token = $3::bigint`, t, payloadSQL("$1")),

		// released reads whether the key's row is the released grant of
		// token $2 (the idempotent release), after release changed nothing.
		released: fmt.Sprintf(`SELECT count(*) FROM %[1]s WHERE key = $1::text AND token = $2::bigint AND owner IS NULL`, t),

		inspect: fmt.Sprintf(`SELECT coalesce(owner, ''), token, acquired_at, expires_at,
	owner IS NOT NULL AND expires_at > clock_timestamp()
FROM %[1]s WHERE key = $1::text`, t),

		// One statement for the whole batch; idx maps rows back to requests.
		// Callers never put one key twice in a batch. As in renew, cur
		// locks the rows first; gate, an aggregate over cur, evaluates the
		// not-after bound ($6) once every lock is held, and always yields
		// one row, so the result has at least one: (ok, NULL...) when no
		// element was renewed.
		renewBatch: fmt.Sprintf(`WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
req AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::int[]) AS r(key, owner, token, ttl_us, idx)
),
cur AS MATERIALIZED (
	SELECT now.t FROM %[1]s AS l, req, now
	WHERE l.key = req.key AND l.owner = req.owner AND l.token = req.token
	FOR NO KEY UPDATE OF l
),
gate AS MATERIALIZED (
	SELECT max(cur.t) AS t, %[2]s AS ok FROM cur
),
u AS (
	UPDATE %[1]s AS l SET acquired_at = gate.t, expires_at = gate.t + req.ttl_us * interval '1 microsecond'
	FROM gate, req
	WHERE gate.ok AND l.key = req.key AND l.owner = req.owner AND l.token = req.token AND l.expires_at > gate.t
	RETURNING req.idx, l.acquired_at, l.expires_at
)
SELECT gate.ok, u.idx, u.acquired_at, u.expires_at FROM gate LEFT JOIN u ON true`, t, inTime("$6")),

		// Every column the statements use, no row read.
		check: fmt.Sprintf(`SELECT count(*) FROM (SELECT key, owner, token, acquired_at, expires_at, waiting FROM %[1]s LIMIT 0) AS l`, t),

		sweep: fmt.Sprintf(`SELECT key FROM %[1]s
WHERE key = ANY($1::text[]) AND (owner IS NULL OR expires_at <= clock_timestamp())`, t),

		// FOR SHARE: concurrent fenced transactions of one grant do not
		// block each other, but every mutation of the lease row (renew,
		// release, a successor's acquisition) waits for the caller's commit.
		fence: fmt.Sprintf(`SELECT 1 FROM %[1]s
WHERE key = $1::text AND owner = $2::text AND token = $3::bigint AND expires_at > clock_timestamp()
FOR SHARE`, t),

		// The conflicting row stays locked until the caller's transaction
		// ends, so concurrent writers of one resource are serialised.
		advance: fmt.Sprintf(`INSERT INTO %[1]s AS f (resource, token, updated_at)
VALUES ($1::text, $2::bigint, clock_timestamp())
ON CONFLICT (resource) DO UPDATE SET token = excluded.token, updated_at = excluded.updated_at
WHERE f.token <= excluded.token
RETURNING f.token`, f),
	}
}

// inTime is the not-after condition on the parameter p (bigint µs, NULL for
// no bound): true while the server's clock is at most p after the instant
// it received the statement. Its value changes as the statement runs
// (clock_timestamp() is read each time it is evaluated), so where it is
// evaluated matters: after the row lock is held.
func inTime(p string) string {
	return fmt.Sprintf("(%[1]s::bigint IS NULL OR clock_timestamp() <= statement_timestamp() + %[1]s::bigint * interval '1 microsecond')", p)
}

// notGranted is the last column of acquireMark, the late flag,
// for the upsert ins and the not-after parameter p. For a grant it is
// false, and nothing else is evaluated: the grant commits as the server's
// synchronous_commit says (on by default: durable before the reply). For
// an attempt that granted nothing it is whether the statement ran past
// its bound, and it first sets synchronous_commit to off for the
// statement's own transaction (set_config(..., true): it ends with it),
// so that the commit of an attempt that changed no grant does not wait
// for the WAL flush. Such an attempt wrote at most a row lock and the
// waiter mark: a crash may lose them, which loses no grant, no token and
// no release (every later synchronous commit flushes the WAL past them),
// only a mark, whose waiter then falls back to its retry interval. The
// contended attempts of a hand-off wait for the winner's row lock and
// then take it in turn, each for its own commit: with the flush, the
// holder's next release queues behind one WAL flush per loser.
//
// set_config has a WHEN of its own: in an AND or OR, the planner would drop
// it whenever the bound folds to a constant (a NULL parameter in a custom
// plan, the first five executions of a prepared statement, or a literal in
// the simple protocol), as a constant false AND anything is false.
func notGranted(p string) string {
	return fmt.Sprintf(`CASE WHEN ins.token IS NOT NULL THEN false
	WHEN set_config('synchronous_commit', 'off', true) IS NULL THEN NULL
	ELSE NOT %s END`, inTime(p))
}

// budget is the not-after parameter of a mutation about to be sent under
// ctx: the µs left before ctx's deadline, stored in dst (the call's own
// slot), or nil (NULL, no bound) when ctx has none.
func budget(ctx context.Context, dst *notAfter) *notAfter {
	dl, ok := ctx.Deadline()
	if !ok {
		return nil
	}
	*dst = notAfter(time.Until(dl).Microseconds())
	return dst
}

// notAfter is the not-after parameter (µs). pgx encodes a *notAfter
// through its Int64Value, without boxing the number (an int64 argument
// costs an allocation per statement), and a nil one as NULL.
type notAfter int64

// Int64Value implements pgtype.Int64Valuer.
func (b *notAfter) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*b), Valid: true}, nil
}

// New returns a Store on pool with the tables named by o. It does no I/O:
// an unreachable pool is reported by the first operation as
// leaseapi.ErrBackendUnavailable, and missing or old tables (Migrate not
// run) the same way, before any statement runs on them, with the detail
// "configuration: schema missing: run postgres.Migrate" or
// "configuration: schema out of date: run postgres.Migrate" (see the
// package doc). A nil pool or an invalid name is leaseapi.ErrInvalidState.
func New(pool *pgxpool.Pool, o Options) (*Store, error) {
	if pool == nil {
		return nil, leaseapi.NewError("new store", leaseapi.ErrInvalidState, "nil pool")
	}
	n, err := o.names()
	if err != nil {
		return nil, leaseapi.Wrap(err, "new store")
	}
	s := &Store{
		pool:    pool,
		n:       n,
		channel: n.channel(),
		q:       buildStatements(n).mutated(),
	}
	s.channelArg = s.channel
	s.calls = newCalls()
	s.watches = watchhub.New[string, string](s.listen)
	return s, nil
}

// waitMark is the acquire statement's waiter-mark parameter: whether a
// [Store.WatchRelease] registration of key is open on this Store, i.e.
// whether a contended attempt should ask the holder's release to notify.
// The runtime registers its watch before a waiting Acquire's first
// attempt.
func (s *Store) waitMark(key leaseapi.Key) bool {
	return s.watches.Len() > 0 && s.watches.Has(keyHash(key))
}

// keyHash is the NOTIFY payload for key: a hash, so the key itself never
// travels in a notification.
func keyHash(k leaseapi.Key) string { return keyHashString(k.String()) }

// payloadSQL is keyHash computed by the server from the key text p: the
// first 16 bytes of the SHA-256 of its UTF-8 bytes, in hex.
// TestReleaseNotifiesOnlyWaiters checks that the two agree.
func payloadSQL(p string) string {
	return fmt.Sprintf("encode(substr(sha256(convert_to(%s::text, 'UTF8')), 1, 16), 'hex')", p)
}

func keyHashString(k string) string {
	h := sha256.Sum256([]byte(k))
	return hex.EncodeToString(h[:16])
}

// storable reports whether tok fits the bigint column. Tokens are bounded by
// 2^63-1: the backend never grants a larger one, so a record carrying one
// cannot be current.
func storable(tok leaseapi.Token) bool { return uint64(tok) <= math.MaxInt64 }

// Capabilities implements [leaseapi.Capable]: Inspect, WatchRelease,
// RenewBatch, and Adopt (a grant read back by Inspect is a committed row).
// Adopt relies on the server's durability settings: with synchronous
// standbys, a commit whose wait for the standby was cut short is visible
// on the primary before any standby has it, the shape for which Valkey's
// WaitReplicas withdraws the claim; the Store does not detect that
// configuration. Never NeverBlocks: every call is a round trip. A Store
// that [New] did not make claims nothing.
func (s *Store) Capabilities() leaseapi.Capabilities {
	if s.ready("capabilities") != nil {
		return leaseapi.Capabilities{}
	}
	return leaseapi.Capabilities{Inspect: true, Adopt: true, WatchRelease: true, RenewBatch: true}
}

// ready refuses a Store that [New] did not make (the zero Store, a nil
// *Store) with leaseapi.ErrInvalidState, before anything else is looked at.
func (s *Store) ready(op string) error {
	if s == nil || s.pool == nil {
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "store not made by postgres.New")
	}
	return nil
}

// conn takes a connection from the pool and starts a call on it under
// ctx (calls.go): its statements run on cl.conn under cl.ctxFor(), their
// failures go through cl.failed, and cl.release gives the connection
// back. Nothing has been sent when it fails, so the error is classified
// as a failed read.
func (s *Store) conn(ctx context.Context, op string) (*call, error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, leaseapi.Wrap(classify(err, false), op)
	}
	if !s.schemaOK.Load() {
		if err := s.checkSchema(ctx, c); err != nil {
			c.Release()
			return nil, leaseapi.Wrap(err, op)
		}
	}
	cl, err := s.calls.begin(ctx, c)
	if err != nil {
		c.Release()
		return nil, leaseapi.Wrap(classify(err, false), op)
	}
	return cl, nil
}

// checkSchema reads nothing but the lease table's shape, once per Store
// (until it first succeeds): a missing schema or table reports
// "configuration: schema missing: run postgres.Migrate", a table without
// the latest migration's column "configuration: schema out of date: run
// postgres.Migrate", before any operation runs on it. It looks at the
// table itself, not at a version table, so a schema migrated by goose,
// golang-migrate or atlas ([MigrationFS]) passes as well as one migrated
// by [Migrate].
func (s *Store) checkSchema(ctx context.Context, c *pgxpool.Conn) error {
	var n int64
	if err := c.QueryRow(ctx, s.q.check).Scan(&n); err != nil {
		return classify(err, false)
	}
	s.schemaOK.Store(true)
	return nil
}

// TryAcquire implements [leaseapi.Backend] with one upsert statement timed
// by the server's clock_timestamp(). It returns leaseapi.ErrContended when a
// live grant exists, leaseapi.ErrInvalidState for bad input,
// leaseapi.ErrBackendUnavailable when nothing was sent or the server
// refused the statement, and leaseapi.ErrAmbiguousOutcome when the reply was
// lost: the grant may exist (resolve with [Store.Inspect] by owner id).
func (s *Store) TryAcquire(ctx context.Context, key leaseapi.Key, owner string, ttl time.Duration) (leaseapi.Record, error) {
	return s.tryAcquire(ctx, key, owner, ttl, budget)
}

// tryAcquire is TryAcquire with the not-after parameter taken from
// bound(ctx) when the statement is about to be sent (the tests pass their
// own).
func (s *Store) tryAcquire(ctx context.Context, key leaseapi.Key, owner string, ttl time.Duration, bound func(context.Context, *notAfter) *notAfter) (leaseapi.Record, error) {
	const op = "try acquire"
	if err := s.ready(op); err != nil {
		return leaseapi.Record{}, err
	}
	if err := leaseapi.CheckAcquire(ctx, op, key, owner, ttl); err != nil {
		return leaseapi.Record{}, err
	}
	cl, err := s.conn(ctx, op)
	if err != nil {
		return leaseapi.Record{}, err
	}
	defer cl.release()
	var r struct { // one allocation for all the scan targets
		tok  pgtype.Int8
		acq  pgtype.Timestamptz
		late bool
	}
	b := bound(ctx, &cl.budget)
	if s.waitMark(key) {
		err = cl.conn.QueryRow(cl.ctxFor(), s.q.acquireMark, key.String(), owner, ttl.Microseconds(), b).Scan(&r.tok, &r.acq, &r.late)
	} else {
		sent := time.Now()
		err = cl.conn.QueryRow(cl.ctxFor(), s.q.acquire, key.String(), owner, ttl.Microseconds(), b).Scan(&r.tok, &r.acq)
		if errors.Is(err, pgx.ErrNoRows) {
			err, r.late = nil, lateReply(b, time.Since(sent))
		}
	}
	if err != nil {
		return leaseapi.Record{}, leaseapi.Wrap(classify(cl.failed(err), true), op)
	}
	return acquireResult(op, key, owner, r.tok, r.acq, grantExpiry(r.acq, ttl), r.late)
}

// lateReply tells, for an acquire statement that granted nothing and
// whose reply came took after it was sent with the not-after parameter
// b, whether it may have been refused for being late rather than for a
// live grant. The server received the statement after it was sent and
// checked its bound before it replied, so a reply within b means the
// bound held: contended. A reply after b is reported late: not applied
// either way, and its caller's deadline has passed (the server's own
// rule for acquireMark, whose late flag is read after the upsert, is the
// same). Only a step of the server's clock could make the two disagree,
// and then between two answers that both mean "not applied".
func lateReply(b *notAfter, took time.Duration) bool {
	return b != nil && took >= time.Duration(*b)*time.Microsecond
}

// grantExpiry is the expires_at the grant statement stored: acquired_at
// plus the TTL's microseconds (the statement's $3), computed exactly.
func grantExpiry(acq pgtype.Timestamptz, ttl time.Duration) pgtype.Timestamptz {
	if finite(acq) {
		acq.Time = acq.Time.Add(time.Duration(ttl.Microseconds()) * time.Microsecond)
	}
	return acq
}

// acquireResult interprets the acquire statement's row.
func acquireResult(op string, key leaseapi.Key, owner string, tok pgtype.Int8, acq, exp pgtype.Timestamptz, late bool) (leaseapi.Record, error) {
	switch {
	case tok.Valid && finite(acq) && finite(exp):
		return leaseapi.Record{Key: key, Owner: owner, Token: leaseapi.Token(tok.Int64), AcquiredAt: acq.Time, ExpiresAt: exp.Time}, nil
	case tok.Valid:
		return leaseapi.Record{}, leaseapi.NewError(op, leaseapi.ErrAmbiguousOutcome, "unexpected reply")
	case late:
		return leaseapi.Record{}, leaseapi.LateError(op)
	}
	return leaseapi.Record{}, leaseapi.NewError(op, leaseapi.ErrContended, "")
}

// Renew implements [leaseapi.Backend] with one UPDATE comparing key, owner
// and token. A lost reply is leaseapi.ErrAmbiguousOutcome.
func (s *Store) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	return s.renew(ctx, rec, ttl, budget)
}

// renew is Renew with the not-after parameter from bound, as tryAcquire.
func (s *Store) renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration, bound func(context.Context, *notAfter) *notAfter) (leaseapi.Record, error) {
	const op = "renew"
	if err := s.ready(op); err != nil {
		return leaseapi.Record{}, err
	}
	if err := leaseapi.CheckRenew(ctx, op, rec, ttl); err != nil {
		return leaseapi.Record{}, err
	}
	if !storable(rec.Token) {
		return leaseapi.Record{}, leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
	}
	cl, err := s.conn(ctx, op)
	if err != nil {
		return leaseapi.Record{}, err
	}
	defer cl.release()
	var r struct { // one allocation for all the scan targets
		acq, exp pgtype.Timestamptz
		late     bool
	}
	err = cl.conn.QueryRow(cl.ctxFor(), s.q.renew, rec.Key.String(), rec.Owner, int64(rec.Token), ttl.Microseconds(), bound(ctx, &cl.budget)).Scan(&r.acq, &r.exp, &r.late)
	if err != nil {
		return leaseapi.Record{}, leaseapi.Wrap(classify(cl.failed(err), true), op)
	}
	return renewResult(op, rec, r.acq, r.exp, r.late)
}

// finite reports whether t is a non-NULL, finite timestamp. The statements'
// nullable columns are scanned into pgtype values, not pointers, to save an
// allocation per column.
func finite(t pgtype.Timestamptz) bool { return t.Valid && t.InfinityModifier == pgtype.Finite }

// renewResult interprets the renew statement's row.
func renewResult(op string, rec leaseapi.Record, acq, exp pgtype.Timestamptz, late bool) (leaseapi.Record, error) {
	switch {
	case finite(acq) && finite(exp):
		rec.AcquiredAt, rec.ExpiresAt = acq.Time, exp.Time
		return rec, nil
	case late:
		return leaseapi.Record{}, leaseapi.LateError(op)
	}
	return leaseapi.Record{}, leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
}

// Validate implements [leaseapi.Backend] with one read: the row's times if
// rec is the key's live grant, else leaseapi.ErrStaleOwner. It changes nothing;
// a failure is leaseapi.ErrBackendUnavailable (or the context's error).
func (s *Store) Validate(ctx context.Context, rec leaseapi.Record) (leaseapi.Record, error) {
	const op = "validate"
	if err := s.ready(op); err != nil {
		return leaseapi.Record{}, err
	}
	if err := leaseapi.CheckRecord(ctx, op, rec); err != nil {
		return leaseapi.Record{}, err
	}
	if !storable(rec.Token) {
		return leaseapi.Record{}, leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
	}
	cl, err := s.conn(ctx, op)
	if err != nil {
		return leaseapi.Record{}, err
	}
	defer cl.release()
	var acq, exp pgtype.Timestamptz
	if err := cl.conn.QueryRow(cl.ctxFor(), s.q.validate, rec.Key.String(), rec.Owner, int64(rec.Token)).Scan(&acq, &exp); err != nil {
		return leaseapi.Record{}, leaseapi.Wrap(classify(cl.failed(err), false), op)
	}
	if !finite(acq) || !finite(exp) {
		return leaseapi.Record{}, leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
	}
	rec.AcquiredAt, rec.ExpiresAt = acq.Time, exp.Time
	return rec, nil
}

// Release implements [leaseapi.Backend] with one UPDATE that clears the
// owner if owner and token match (keeping the row and its token) and, in
// the same statement, issues pg_notify for the
// [Store.WatchRelease] watchers of other Stores if one of them marked the
// key as waited for (see the package doc). Watchers on this Store are woken
// directly once the release is confirmed. It is idempotent (an UPDATE that
// changed nothing is followed by one read that tells an already released
// grant from a stale one); a later grant or another owner is
// leaseapi.ErrStaleOwner; a lost reply is leaseapi.ErrAmbiguousOutcome.
func (s *Store) Release(ctx context.Context, rec leaseapi.Record) error {
	const op = "release"
	if err := s.ready(op); err != nil {
		return err
	}
	if err := leaseapi.CheckRecord(ctx, op, rec); err != nil {
		return err
	}
	if !storable(rec.Token) {
		return leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
	}
	cl, err := s.conn(ctx, op)
	if err != nil {
		return err
	}
	defer cl.release()
	key := rec.Key.String()
	ct, err := cl.conn.Exec(cl.ctxFor(), s.q.release, key, rec.Owner, int64(rec.Token), s.channelArg)
	if err != nil {
		return leaseapi.Wrap(classify(cl.failed(err), true), op)
	}
	if ct.RowsAffected() == 1 { // released now: this Store's own watchers need no NOTIFY
		if s.watches.Len() > 0 {
			s.watches.Notify(keyHashString(key))
		}
		return nil
	}
	// Nothing changed: already released (idempotent), or stale. The
	// answer is read after the UPDATE, so it holds at that later instant,
	// at which the UPDATE would not have matched either (a token only
	// grows).
	var n int64
	if err := cl.conn.QueryRow(cl.ctxFor(), s.q.released, key, int64(rec.Token)).Scan(&n); err != nil {
		return leaseapi.Wrap(classify(cl.failed(err), false), op)
	}
	if n == 0 {
		return leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
	}
	return nil
}

// Inspect implements [leaseapi.Inspector] with one read. For a key that is
// not held, rec carries only the key and its latest token (0 if never
// acquired).
func (s *Store) Inspect(ctx context.Context, key leaseapi.Key) (leaseapi.Record, bool, error) {
	const op = "inspect"
	if err := s.ready(op); err != nil {
		return leaseapi.Record{}, false, err
	}
	if err := leaseapi.CheckKey(ctx, op, key); err != nil {
		return leaseapi.Record{}, false, err
	}
	cl, err := s.conn(ctx, op)
	if err != nil {
		return leaseapi.Record{}, false, err
	}
	defer cl.release()
	var (
		tok  int64
		live bool
	)
	rec := leaseapi.Record{Key: key}
	err = cl.conn.QueryRow(cl.ctxFor(), s.q.inspect, key.String()).Scan(&rec.Owner, &tok, &rec.AcquiredAt, &rec.ExpiresAt, &live)
	if errors.Is(err, pgx.ErrNoRows) {
		return leaseapi.Record{Key: key}, false, nil
	}
	if err != nil {
		return leaseapi.Record{}, false, leaseapi.Wrap(classify(cl.failed(err), false), op)
	}
	rec.Token = leaseapi.Token(tok)
	if !live {
		return leaseapi.Record{Key: key, Token: rec.Token}, false, nil
	}
	return rec, true, nil
}

// RenewBatch implements [leaseapi.BatchRenewer]: all valid requests are
// renewed by one UPDATE ... FROM unnest(...) statement (a batch that names
// one key more than once takes one statement per repetition, in order, so
// each element keeps Renew's semantics). Invalid elements fail alone with
// leaseapi.ErrInvalidState and are not sent. If a statement fails, every
// element it carried gets the same classified error (ambiguous once sent).
func (s *Store) RenewBatch(ctx context.Context, reqs []leaseapi.RenewRequest) []leaseapi.RenewResult {
	return s.renewBatch(ctx, reqs, budget)
}

// renewBatch is RenewBatch with the not-after parameter from bound, as
// tryAcquire.
func (s *Store) renewBatch(ctx context.Context, reqs []leaseapi.RenewRequest, bound func(context.Context, *notAfter) *notAfter) []leaseapi.RenewResult {
	const op = "renew batch"
	out, valid := leaseapi.CheckRenewBatch(ctx, op, reqs)
	if err := s.ready(op); err != nil {
		for _, i := range valid {
			out[i].Err = err
		}
		return out
	}
	// Refuse unstorable tokens, and split repeated keys into later rounds.
	var rounds [][]int
	seen := make(map[leaseapi.Key]int, len(reqs)) // key -> rounds it appears in
	for _, i := range valid {
		r := reqs[i]
		if !storable(r.Record.Token) {
			out[i].Err = leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
			continue
		}
		round := seen[r.Record.Key]
		seen[r.Record.Key] = round + 1
		if round == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[round] = append(rounds[round], i)
	}
	for _, idx := range rounds {
		s.renewRound(ctx, op, reqs, idx, out, bound)
	}
	return out
}

// renewRound renews reqs[idx...] (distinct keys) in one statement.
func (s *Store) renewRound(ctx context.Context, op string, reqs []leaseapi.RenewRequest, idx []int, out []leaseapi.RenewResult, bound func(context.Context, *notAfter) *notAfter) {
	fail := func(err error) {
		for _, i := range idx {
			out[i].Err = err
		}
	}
	if err := leaseapi.CheckContext(ctx, op); err != nil {
		fail(err)
		return
	}
	keys := make([]string, len(idx))
	owners := make([]string, len(idx))
	toks := make([]int64, len(idx))
	ttls := make([]int64, len(idx))
	pos := make([]int32, len(idx))
	for j, i := range idx {
		r := reqs[i]
		keys[j], owners[j], toks[j], ttls[j], pos[j] = r.Record.Key.String(), r.Record.Owner, int64(r.Record.Token), r.TTL.Microseconds(), int32(j)
	}
	cl, err := s.conn(ctx, op)
	if err != nil {
		fail(err)
		return
	}
	defer cl.release()
	rows, err := cl.conn.Query(cl.ctxFor(), s.q.renewBatch, keys, owners, toks, ttls, pos, bound(ctx, &cl.budget))
	if err != nil {
		fail(leaseapi.Wrap(classify(cl.failed(err), true), op))
		return
	}
	done := make([]bool, len(idx))
	var (
		seen, inTime, ok bool
		j                pgtype.Int4
		acq, exp         pgtype.Timestamptz
	)
	_, err = pgx.ForEachRow(rows, []any{&ok, &j, &acq, &exp}, func() error {
		if seen && ok != inTime {
			return errors.New("unexpected row") // gate has one row: ok is the same on every row
		}
		seen, inTime = true, ok
		if !j.Valid {
			return nil // nothing renewed
		}
		if j.Int32 < 0 || int(j.Int32) >= len(idx) || done[j.Int32] || !finite(acq) || !finite(exp) {
			return errors.New("unexpected row")
		}
		i := idx[j.Int32]
		rec := reqs[i].Record
		rec.AcquiredAt, rec.ExpiresAt = acq.Time, exp.Time
		out[i].Record, done[j.Int32] = rec, true
		return nil
	})
	if err == nil && !seen {
		err = errors.New("no row")
	}
	if err != nil {
		fail(leaseapi.Wrap(classify(cl.failed(err), true), op))
		for _, i := range idx {
			out[i].Record = leaseapi.Record{}
		}
		return
	}
	for jj, i := range idx {
		switch {
		case done[jj]:
		case !inTime:
			out[i].Err = leaseapi.LateError(op)
		default:
			out[i].Err = leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
		}
	}
}
