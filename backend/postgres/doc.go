// Package postgres is the PostgreSQL backend of lease, on
// github.com/jackc/pgx/v5's pgxpool: one SQL statement per operation, timed
// by the server's clock, with durable fencing tokens, embedded migrations,
// fencing inside the caller's transaction and LISTEN/NOTIFY release hand-off.
//
//	pool, _ := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	if err := postgres.Migrate(ctx, pool, postgres.Options{}); err != nil { ... }
//	store, err := postgres.New(pool, postgres.Options{})
//	defer store.Close()
//
// # Guarantees
//
// Every [leaseapi.Backend] operation changes rows in exactly one autocommit
// statement, so it is atomic without a client-side transaction:
//
//   - TryAcquire is an INSERT ... ON CONFLICT (key) DO UPDATE that only
//     takes over a row whose grant was released or has expired, and bumps
//     its token; a statement that returns no row means a live grant exists
//     (leaseapi.ErrContended, even for the same owner).
//   - Renew, Validate and Release compare key, owner and token in their one
//     statement. Release is one UPDATE that clears the owner if both
//     match (keeping the row, so the token is never reused) and, only if
//     the key is marked as waited for, issues pg_notify in the same
//     statement (see Release notification below). Releasing an already
//     released grant with no successor returns nil, a later grant or
//     another owner is leaseapi.ErrStaleOwner; when the UPDATE changed
//     nothing, a second, read-only statement tells the two apart.
//   - All timing comes from one reading of the server's clock per
//     statement (TryAcquire: statement_timestamp(), when the server
//     received the statement; Renew and RenewBatch: clock_timestamp(),
//     read before any row lock wait), so Record.ExpiresAt -
//     Record.AcquiredAt is exactly the TTL (to the microsecond: TTLs are
//     sent as bigint microseconds). Expiry is judged by the server's clock
//     only; the client never compares its clock with the server's. An
//     acquisition that had to wait for the row (a fenced transaction of
//     the previous holder holds it FOR SHARE) is timed from its
//     statement's start: the wait shortens the grant, never lengthens it.
//   - Tokens are per key, start at 1 and increase by one with every
//     acquisition. They are stored in a bigint column and are as durable as
//     the database's commits: they survive release, expiry, client and
//     server restarts. A failover to an asynchronous replica that lost
//     acknowledged commits can hand out a token again (the runtime reports
//     that as leaseapi.ErrFencingRegression); use synchronous replication
//     where fencing must survive failover. The bound is 2^63-1 acquisitions of one key; past it the
//     acquisition fails with leaseapi.ErrInvalidState rather than wrap.
//   - A grant commits as the server's synchronous_commit says (on, the
//     default: durable before the reply). An acquisition attempt that
//     granted nothing sets synchronous_commit to off for its own
//     transaction, in its statement: it may have written a row lock and
//     the waiter mark, nothing a crash could lose without harm (every
//     later synchronous commit flushes the WAL past it; a lost mark only
//     sends its waiter back to its retry interval), and waiting for their
//     flush would hold the row lock, and the holder's release behind it,
//     for one WAL flush per contended attempt.
//     TestOnlyGrantsWaitForTheFlush checks both sides.
//   - RenewBatch renews any number of grants in one UPDATE ... FROM
//     unnest(...) statement with per-element Renew semantics.
//   - TryAcquire, Renew and RenewBatch apply only within the time left
//     before their ctx deadline, counted from the server's receipt of the
//     statement (see the next section): a statement held back past it
//     changes nothing.
//
// Keys are stored as text ("namespace/name") and owners as text, with the
// "C" collation (bytewise comparison).
//
// # Late execution: the not-after bound
//
// A statement can wait at the server, typically for a row lock (a fenced
// transaction of the holder holds the lease row FOR SHARE, a slow
// transaction holds it FOR UPDATE), until after its caller has given up
// with leaseapi.ErrAmbiguousOutcome, and then commit. TryAcquire, Renew and
// RenewBatch therefore send, as one more parameter, the time left before
// their ctx deadline (microseconds, read just before the statement is
// sent; the runtime gives every backend call its policy's
// OperationTimeout). The statement applies only if
//
//	clock_timestamp() <= statement_timestamp() + budget
//
// holds while it holds the row lock. statement_timestamp() is when the
// server received the statement and clock_timestamp() is the server's
// clock now, so no clock synchronisation is involved. Where the check sits
// matters, because clock_timestamp() changes while the statement waits:
//
//   - TryAcquire: in the WHERE of ON CONFLICT DO UPDATE, which PostgreSQL
//     evaluates after it has locked the conflicting row (waiting for its
//     holder); and in the SELECT that feeds the INSERT, for a key that has
//     no row yet.
//   - Renew and RenewBatch: a plain UPDATE evaluates its WHERE before it
//     waits for a row lock and, if the blocking transaction only locked
//     the row without changing it, does not evaluate it again after the
//     wait. So these statements first lock their rows (SELECT ... FOR NO
//     KEY UPDATE in a CTE: the lock the UPDATE takes anyway) and evaluate the bound on the locked rows (for a
//     batch: once every row is locked), then update. A bound in the
//     UPDATE's own WHERE lets a late update through
//     (TestPlainUpdateChecksBeforeLockWait).
//
// A late statement changes nothing (no token, no expiry) and, if its
// caller still waits, fails with leaseapi.ErrBackendUnavailable ("not
// applied"): a definite answer, not an ambiguous one. An acquisition that
// granted nothing is reported late when its reply came after its budget
// (whatever refused it: not applied either way, and its caller's deadline
// has passed), else contended; the statement of a watching Store reads
// the same rule from the server's clock after its upsert. A renewal is still
// judged and timed as of its statement's start (its clock reading is taken
// before the lock wait; TestHeldBackWithinBudgetTimedFromStart), so the
// bound only ever removes late effects.
//
// What the bound does not cover:
//
//   - A call without a ctx deadline sends none (NULL).
//   - Time before the server receives the statement: network delay, a
//     statement queued in a socket buffer or in a pooler such as PgBouncer
//     get the full budget again after arrival. The bound covers waiting
//     inside the server only.
//   - The first acquisition of a key that has no row yet, if it waits for
//     another transaction's uncommitted insertion of the same key that then
//     aborts: its check ran before that wait. (If that transaction commits,
//     the acquisition takes the ON CONFLICT path and is checked there.)
//   - A statement that applied within its bound but whose reply was lost
//     is still leaseapi.ErrAmbiguousOutcome.
//   - Release, Validate, Inspect, Fence, AdvanceFence and FencedWrite send
//     no bound: Validate, Inspect and Fence read; a late Release clears only
//     the grant it names (owner and token compared with the row locked), so
//     it cannot remove a later holder; the fencing helpers run in the
//     caller's own transaction, which the caller commits.
//
// The tests force a late execution on a real server: another transaction
// holds the lease row FOR UPDATE, the Store's statement waits for it, and a
// fault proxy cuts the client off without the server noticing
// (faultproxy.Detach keeps the server's end of the connection open, and
// refuses the connection a cancel request would use), so the statement
// runs when the lock is released, after its budget, and the rows are
// unchanged (the conformance suite's LateExecutionIsNoop with this
// package's simtest.LateRig; without a deadline the same statement
// commits). TestLateStatusIsNotApplied checks the definite error a caller
// that still waits gets.
//
// # Schema and migrations
//
// [Options] names a schema (default "lease"), the lease table (default
// "leases") and the fence table (default "fences"). Each name must match
// [a-z_][a-z0-9_]{0,62}: anything else is rejected with
// leaseapi.ErrInvalidState instead of being quoted, because PostgreSQL
// silently truncates long names and mixed-case names are a trap. The
// validated names are then quoted with pgx.Identifier; no other text is ever
// spliced into SQL.
//
// [Migrate] applies the embedded, versioned files under migrations/ (see
// [Migrations]) in one transaction serialised by pg_advisory_xact_lock (one
// lock per schema), creating the schema if missing and recording each
// applied version in <schema>.lease_migrations. It is idempotent and safe to
// run from many processes at once; migrations never drop lease state (the
// only thing one drops is version 1's CHECK (token > 0), by version 4: the
// Store's statements never write a token it would refuse, and PostgreSQL
// compiled it again for every write of a lease row). A
// version recorded as applied whose table was dropped since is reported
// ("configuration: table dropped after migration"), not re-created: a new
// lease table would restart every key's tokens at 1.
//
// Teams that run their migrations with a tool get the same SQL, rendered
// for their Options, from [MigrationFS]: the [Goose] layout (NNNN_name.sql
// with -- +goose Up / Down sections), the [GolangMigrate] layout
// (NNNN_name.up.sql and NNNN_name.down.sql) and the [Plain] layout (one
// NNNN_name.sql of up statements per version, which atlas's versioned
// migrations read once "atlas migrate hash" has written the directory's
// atlas.sum; no atlas.sum is rendered). Version 1 also creates the schema.
// The down migrations refuse to drop the lease and fence tables (their
// rows are what fencing rests on); only the waiter mark's column is
// dropped. The tests apply the goose and golang-migrate layouts with the
// tools' own Go packages and run the conformance suite on the result.
//
// A Store checks its table once, lazily, before its first operation: it
// reads no row, only whether every column it uses exists, so a schema
// migrated by any tool passes. A missing schema or table fails with
// leaseapi.ErrBackendUnavailable, "configuration: schema missing: run
// postgres.Migrate"; a table from an older release (a column missing)
// "configuration: schema out of date: run postgres.Migrate". Until the
// check passes it is repeated by every operation, so running Migrate fixes
// a live Store without a restart.
//
// # Fencing inside your transaction
//
// A lease does not stop a paused holder from writing after its lease has
// expired. Two helpers make a write safe anyway, both run inside the
// caller's pgx.Tx so that the check and the write commit together or not at
// all:
//
//   - [Store.Fence] checks that a record is still the key's live grant and
//     locks the lease row FOR SHARE until the transaction ends: a
//     successor's acquisition (an UPDATE of that row) waits for the caller's
//     commit, so nothing can happen between the check and the commit. FOR
//     SHARE, not FOR UPDATE, so that concurrent fenced transactions of one
//     grant do not serialise on each other; the holder's own renewal waits
//     too, so keep fenced transactions short. It requires the protected
//     data to live in the same database as the lease table.
//   - [Store.AdvanceFence] is the classic "reject tokens lower than the last
//     one accepted" check on a per-resource high-water mark (the fence
//     table), advanced in the same transaction. It does not even need the
//     lease to be live, only monotonic tokens, and is what
//     examples/protectedwrite uses. [Store.FencedWrite] wraps begin, fence,
//     write and commit.
//
// # Failure handling
//
// Driver errors are classified once, by type and SQLSTATE, never by text
// (see classify in classify.go), and error strings never contain SQL, the
// DSN, keys or owner ids. The driver's error stays reachable for callers
// who ask: errors.As(err, &pgErr) finds the *pgconn.PgError (its Code,
// Message, Detail) behind any error of this package, also after the
// runtime passed it on, while err.Error() stays the redacted text.
//
//   - Configuration failures are told apart from outages in the message,
//     whose detail starts with "configuration:": authentication failed
//     (28P01, 28000), database does not exist (3D000), permission denied
//     (42501), schema missing (42P01, 3F: "run postgres.Migrate"), schema
//     out of date (42703: "run postgres.Migrate"). They are
//     leaseapi.ErrBackendUnavailable like every failure that applied
//     nothing; retrying them does not help, so surface them to an operator.
//   - Nothing sent (pool exhausted or unreachable, pgconn.SafeToRetry):
//     leaseapi.ErrBackendUnavailable, or the context's error
//     (leaseapi.ErrCanceled / leaseapi.ErrTimeout) when ctx ended. A ctx
//     that is already done before the call returns the context's error and
//     sends nothing.
//   - A mutation that may have committed (connection lost after sending,
//     ctx ending mid-statement, a FATAL such as pg_terminate_backend,
//     statement_timeout / query_canceled 57014):
//     leaseapi.ErrAmbiguousOutcome. The runtime then holds the handle
//     Uncertain; an ambiguous TryAcquire can be resolved with
//     [Store.Inspect] by owner id. 57014 is treated as ambiguous although
//     the server rolled the statement back, because it is indistinguishable
//     from the client-side cancel race.
//   - A statement that reached its rows past its not-after bound (see
//     above) changed nothing: leaseapi.ErrBackendUnavailable, "not
//     applied".
//   - A statement the server rejected with ERROR did not commit: 40001
//     serialization_failure and 40P01 deadlock_detected are
//     leaseapi.ErrBackendUnavailable ("not applied": safe to retry), the
//     rest of class 42 likewise ("schema mismatch"); class 22/23 (data,
//     constraint — e.g. the token bound) is leaseapi.ErrInvalidState.
//   - A failed read (Validate, Inspect, Fence) is
//     leaseapi.ErrBackendUnavailable, or the context's error.
//
// The Store never retries a mutation. Bound every call with a ctx deadline:
// a blackholed connection is otherwise only noticed by TCP.
//
// A call ends when its ctx does, without pgx's per-statement context
// watcher (which costs four allocations per statement): the ctx's
// deadline is the deadline of the connection's socket for the time of
// the call, and each distinct ctx.Done() channel is watched once for all
// the calls in flight under it, which it ends by moving their sockets'
// deadline to the past. Either way pgx closes the connection (it is never
// handed out again) and sends the server a cancel request, as its default
// context handler does; the result is classified as above (ambiguous for
// a mutation that was sent, the context's error for a read or a call that
// sent nothing). A call ends at its deadline even if its ctx reports done
// only later. A pool's own pgconn.Config.BuildContextWatcherHandler (a
// cancel request before closing, say) is not used for the Store's calls. Also set a
// connect timeout on the pool (connect_timeout in the URL, or
// ConnConfig.ConnectTimeout): pgx has none by default, so connection
// attempts started during a partition would otherwise hold pool slots
// until TCP gives up.
//
// # Release notification: only when someone waits
//
// PostgreSQL serialises the commits of all transactions that notified (a
// database-wide lock taken at commit), whether or not anyone listens; a
// pg_notify in every release would make uncontended releases queue behind
// each other. So a release notifies only when a waiter asked for it: the
// lease row carries a waiter mark (the column waiting, migration 3). A
// TryAcquire on a Store that has an open [Store.WatchRelease] registration
// of the key (a waiting Acquire registers it before its first attempt) sets
// the mark when it finds the key held, in its one statement, with the row
// locked, and only if it is not set yet (the losers of the race that
// follows a notifying release mark the winner's grant, although their
// snapshot shows the released row); an attempt whose snapshot shows
// the grant live and already marked answers contended without locking the
// row, so repeated waiting attempts do not queue the holder's release
// behind their commits. The release that finds the mark
// set notifies and leaves it; a release that finds it clear is the
// floor's plain UPDATE. The grant that takes over a released row clears
// the mark (the release before it notified; a mark is only set on a live
// grant); a grant that takes over an expired row leaves it (nobody was
// notified), so the next release notifies once more, at worst
// spuriously. The rule that follows is that a waiter whose last contended
// attempt set or found the mark is notified by the next release: no
// waiter loses its mark without a notification. Watchers on the releasing Store itself are woken directly
// once the release is confirmed, without a NOTIFY. A waiter that never
// made a contended attempt while watching (or whose attempt found no row
// yet for the key, a first insertion racing with its own) is not notified
// and learns of the release from its retry interval. A late acquisition
// (past its not-after bound) sets no mark either.
//
// Release notification uses one dedicated connection per Store, taken out
// of the pool (Acquire + Hijack) by the first [Store.WatchRelease] and held
// by one goroutine until [Store.Close]. It reconnects with bounded
// exponential backoff (50ms to 5s) and, after each (re)connect, wakes
// watchers of keys that are free by then, so a release during the gap costs
// at most a spurious wake. NOTIFY payloads are a hash of the key, never the
// key.
//
// # What this package does not do
//
//   - No acquisition order or fairness: waiters race on release.
//   - No expiry notification: a waiter learns of an expired grant from its
//     retry timer.
//   - No garbage collection of lease rows: every key ever acquired keeps one
//     small row (its token history); deleting rows would allow token reuse.
//     Delete a key's row only if nothing fenced with its tokens remains.
//   - No cross-database fencing: [Store.Fence] protects writes in the
//     database that holds the lease table; for anything else use the token
//     with [Store.AdvanceFence] or the resource's own check.
//   - It does not own the pool: the caller closes it, after Store.Close.
//   - No LISTEN through a transaction-pooling proxy: every operation works
//     in any pgx query exec mode (all parameters carry explicit types, so
//     PgBouncer in transaction mode is fine for them), but release
//     notification needs a session; behind such a proxy waiters fall back
//     to their retry interval.
//   - No statement timeout of its own: use ctx deadlines (and, if wanted,
//     a server-side statement_timeout in the pool's config).
package postgres
