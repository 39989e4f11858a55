// Package valkey is the Valkey and Redis backend of lease, built on
// valkey-go. It needs Valkey 7.2+ or Redis 7.0+ (script shebangs, TIME in
// effect-replicated scripts, PEXPIRETIME, SET ... PXAT), standalone, behind
// Sentinel or as a Cluster. This package's tests run on Redis 7.0.15; the
// layout before the single-string lease value (a hash per lease) also
// passed them on Valkey 8.0.1, checked outside the project. The current
// layout and the function library (FCALL, FUNCTION LOAD, which Valkey 7.2
// and 8 have as Redis 7.0 does) use only commands Valkey 7.2 and 8 have,
// but have not been run on Valkey.
//
//	client, err := vk.NewClient(vk.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
//	...
//	store, err := valkey.New(client, valkey.Options{Prefix: "myapp"})
//	...
//	defer store.Close() // stops the release subscription, if any
//
// (vk is github.com/valkey-io/valkey-go.) The [Store] implements
// leaseapi.Backend, Inspector, ReleaseWatcher and BatchRenewer; hand it to
// lease.NewClient.
//
// # Guarantees
//
//   - One round trip, one script per operation. TryAcquire, Renew,
//     Validate, Release, Inspect and Guard are each one Lua script, run as a
//     function of the Store's library with FCALL. Where the server cannot
//     run the function (it lost its functions, or the ACL user may not call
//     or load them) the server's error reply proves that nothing ran, and
//     the same script is sent with EVALSHA (EVAL after NOSCRIPT, which
//     proves the same); the library is loaded lazily, see "Functions"
//     below. The one exception is the Release of a grant that already ended
//     (its lease key is gone): a second, read-only script then asks the
//     token counter whether a later grant exists. Scripts run atomically on the server, so check and change are
//     one step. Nothing that changes state is ever resent after a failure.
//   - Server time. The acquire and renew scripts read the server's TIME
//     once, in microseconds. A grant's ExpiresAt is that reading + TTL (TTL
//     truncated to the microsecond) rounded up to a whole millisecond, and
//     its AcquiredAt is ExpiresAt - TTL (the reading rounded up by less
//     than 1ms), so ExpiresAt - AcquiredAt is the granted TTL exactly. The
//     lease key expires on the server exactly at ExpiresAt (PXAT of the
//     millisecond before: the server drops a key once its millisecond
//     clock is past that), so liveness is the key's existence, decided by
//     the server's clock with no TIME reading in Validate, Release, Inspect
//     or Guard. The server's clock is the authority: run it slewed (NTP or
//     chrony without steps), since a forward step shortens every lease at
//     once (the policy's SafetyMargin absorbs clock rate differences, not
//     steps).
//   - Fencing tokens strictly increase per key across release, expiry and
//     client reconnects: the counter key is incremented by every
//     acquisition and is never deleted, expired or decremented by this
//     package. Tokens are exact up to 2^53 - 1 (Lua numbers are doubles);
//     an acquisition that would need a larger one fails closed. How the
//     counter survives server restarts and failovers is the next section
//     but one.
//   - Compare-and-act: Renew, Validate, Release and Guard compare owner AND
//     token inside the script. Release is idempotent for the key's latest
//     grant and refuses ([leaseapi.ErrStaleOwner]) once a later grant exists.
//     TryAcquire by the holder itself is [leaseapi.ErrContended].
//   - Reads go to the primary: Validate and Inspect use FCALL and EVALSHA
//     (not FCALL_RO or EVALSHA_RO), so a lagging replica can never confirm
//     a released lease.
//
// # Key layout
//
// A lease key "ns/name" under prefix P owns these server keys, all starting
// with "P:" and sharing the hash tag {E}, where E is "ns/name" with '%',
// '{', '}' and ':' escaped as %25, %7B, %7D and %3A (so a key's own braces
// cannot end the tag early, and no two (prefix, key) pairs share a name):
//
//	P:{E}:lease         string "TTL:TOKEN:OWNER" (TTL in µs; the first ':'
//	                    becomes '!' once a waiting contender asked to be
//	                    told of the release); its expiry is the grant's:
//	                    PXAT ExpiresAt - 1ms. Deleted by Release.
//	P:{E}:token         string: the last token issued; never expires
//	P:{E}:wait          sorted set: the ids of the Stores waiting for a
//	                    release of the key, scored by the server time (µs)
//	                    they were first queued at; exists only while one is
//	                    queued (see "Release notification")
//	P:{E}:cache:NAME    Guard's cache values ([Store.CacheKey])
//
// A grant's AcquiredAt is its lease key's PEXPIRETIME + 1ms - TTL; an
// operator reads a lease with GET and PEXPIRETIME.
//
// Every key of a Store starts with its prefix and a colon, so an ACL user
// limited to the Store's keys and channel ("~P:*" and "&P:*") and to the
// commands the Store and its scripts run (+evalsha +eval +subscribe +ping
// +time +get +mget +set +setrange +exists +incr +del +publish +pexpireat
// +pexpiretime +zadd +zrem +zpopmin, plus +wait for [Options.WaitReplicas],
// and +fcall +function|load to run the scripts as functions) can run it,
// and "SCAN MATCH P:*" lists its keys (both tested; without +fcall and
// +function|load the Store runs its scripts by EVALSHA).
//
// # Functions
//
// The scripts are the functions of one library, named "lease_" and 16 hex
// digits of a digest of their sources (FUNCTION LIST shows it), so that
// Stores of different versions of this package call their own code on one
// server. FCALL saves the server 2-6k of the 25-60k instructions of
// EVALSHA per call (TestScriptCostParts). A Store loads the library
// (FUNCTION LOAD REPLACE; on a Cluster on every node) the first time an
// FCALL is refused, which a server that lost its functions (a restart
// without persistence, FUNCTION FLUSH, a Cluster node added later) also
// causes; that call, and the others refused meanwhile, run by EVALSHA, at
// the cost of up to two more round trips within their contexts. If every
// node refuses the load (an ACL user without +function|load, a server
// without functions), the Store uses EVALSHA alone for a minute, then
// tries FCALL again. The library stays on the server (it is saved with the
// data and replicated); a library of an older version of this package can
// be removed with FUNCTION DELETE once no Store of that version runs. The
// acquisition with [Options.WaitReplicas] always uses EVALSHA. The hash
// tag is the escaped lease key alone: the leases of different prefixes with
// the same key share a cluster slot, never a key.
//
// Every script touches keys of one tag only, so every operation works on a
// Valkey/Redis Cluster without CROSSSLOT errors (the script shebang also
// makes the server enforce it). Nothing lists keys: there is no KEYS or
// SCAN anywhere. [Store.Keys] returns the two names for operators' tools.
//
// Release notification wakes one waiting Store per release, the one that
// has waited longest. A TryAcquire made while its Store watches the key
// (WatchRelease; the runtime's waiting Acquire watches before its first
// attempt) and found the key held sets the mark byte of the lease value and
// queues the Store's id (random, 64 bits, one per Store) in the key's wait
// set, unless it is queued already; it queues only while the Store's
// subscription is confirmed, since a Store that cannot hear its turn would
// swallow it (unsubscribed, it only marks: TestDeafStoreDoesNotQueue). The
// release of a marked grant pops the wait set's oldest entry and PUBLISHes
// E on that Store's own channel "P:released:ID"; only that Store wakes its
// watchers of the key and sends an attempt, where every waiting Store used
// to (a herd of one winner and a loser per other waiting Store). A grant
// made by a watching Store's attempt takes that Store out of the wait set
// and is marked from the start while other Stores remain queued (they
// sleep, so none of them would mark it). An unmarked release touches
// neither and publishes nothing: it is as cheap as it was before the wait
// set. A release that finds the grant marked but nobody queued (the mark of
// a Store of an older version of this package, which queues nothing)
// PUBLISHes E on "P:released", which every Store subscribes to as well and
// answers by waking all its watchers of the key, as older versions do.
//
// The order is FIFO among Stores: a queued Store is woken before every
// Store queued after it, so a waiter's turn comes after at most one release
// per Store ahead of it. A Store woken in its turn whose attempt finds the
// key taken (by a waiter whose retry timer fired, or by a TryAcquire that
// does not wait) queues again at the front, so the next release is its turn
// again (TestWokenStoreKeepsItsTurn). Several waiters on one key in one
// Store share its entry and are woken together.
//
// A queued Store whose waiters stopped waiting while it stays alive (their
// Acquire ended by ctx or MaxWait while the key was held) stays queued, and
// passes on the turn a release gives it for a key it no longer watches: on
// a goroutine of its own (the subscriber never waits on the network), one
// script (srcPassTurn) pops the next entry and PUBLISHes E on that Store's
// channel if the key is free, or, if it was taken meanwhile and Stores are
// still queued, marks the grant so that its release wakes the next. The
// Store behind a withdrawn one is thus woken by the same release, one
// round trip later, not by its retry timer
// (TestWithdrawnStoresPassTheTurn). A Store that watches the key again
// before its pass runs keeps the turn instead: its new watch's attempt
// follows the release (TestRewatchBeforeThePass). Passing at the turn was
// chosen over leaving the queue when the last watch stops (ZREM): it
// costs nothing on any path but the withdrawn Store's turn (no work in
// stop, no bookkeeping of the keys a Store is queued for), and it has no
// window in which a release pops an entry whose ZREM is in flight, nor a
// ZREM that removes the entry a new watch's attempt just made.
//
// A Store that cannot pass its turn (closed, its process died, the pass
// failed or was dropped by Close: TestCloseDropsThePass) costs the next
// queued Store its retry interval once (TestStaleHeadCostsOneRetry), as
// does a turn delivered to a watch that stops before its attempt
// (TestTurnToAStoppingWatch). Entries
// of a Store that got the key without being woken are removed by its
// grant; those of Stores gone for good are removed by the releases that
// pop them, one per release, and otherwise stay (about 30 bytes each, in
// a key that exists only while someone is queued).
//
// Mixed versions. Stores of the previous version of this package (which
// mark but do not queue, and whose release publishes E on "P:released")
// share a server and prefix with these safely: a notification never
// grants anything, and every acquisition is the same compare-and-set.
// Their liveness: a new Store waiting is woken by old releases (on
// "P:released") and by new ones (its turn); an old Store waiting is woken
// by old releases, and by a new release only when no new Store is queued;
// otherwise it acquires on its retry timer (TestMixedVersions).
//
// Each Store holds at most one SUBSCRIBE (to "P:released" and its own
// channel), started lazily by the first WatchRelease, and fans messages
// out to per-key watchers; releases through the same Store are also
// delivered to its own watchers at once, without the round trip. Classic
// PUBLISH was chosen over SPUBLISH: in a Cluster it is forwarded to every
// node, so one subscription on any node sees every release, whereas
// sharded pub/sub would need a subscription per slot owner and per watched
// key. The cost is that each release is broadcast over the cluster bus; at
// lease release rates that is negligible. The payload names the key (as
// the key names in the keyspace do): use ACLs if that matters.
//
// # Upgrading from the hash layout
//
// Earlier versions of this package kept a lease as a hash under
// "{P:E}:lease" and its counter under "{P:E}:token". Both names changed, so
// an upgrade must not mix the two:
//
//   - Old and new Stores on one prefix do not see each other's leases: stop
//     every old Store (and let its leases end) before a new one starts.
//   - The new counters start empty, so tokens would start again at 1, below
//     the tokens the protected resources have seen. Before the first new
//     Store starts, copy each old counter to its new name: for every key
//     "{P:E}:token" (SCAN MATCH "{P:*}:token"), SET "P:{E}:token" to its
//     value (or to any higher one). The old keys can then be deleted.
//
// # Guarded cache publication
//
// [Store.Guard] writes a value under a key made by [Store.CacheKey] only if
// the given record (owner and token) is still the lease's live grant, by
// server time, in one script. A holder that lost its lease (expired,
// released, taken over: [leaseapi.ErrStaleOwner]) writes nothing, so a
// paused or partitioned former holder cannot overwrite what its successor
// published. The cache key shares the lease's hash tag, so it lives on the
// lease's cluster slot; readers GET it directly.
//
// # Durability of fencing tokens
//
// The token counter is an ordinary string key: it is exactly as durable as
// the server's dataset, and a token that the server forgets can be issued
// again, which breaks fencing (two grants with the same token, or a new
// holder whose token is lower than one a resource has already accepted).
//
//   - No persistence (save "" and appendonly no): a restart forgets every
//     counter; tokens start again at 1. Do not use this for fencing.
//   - RDB snapshots only: a restart goes back to the last snapshot, losing
//     the tokens issued since.
//   - AOF with appendfsync everysec (the usual setting): a clean shutdown
//     keeps everything; a crash of the server or machine loses up to about
//     a second (two in the worst case) of acquisitions.
//   - AOF with appendfsync always: every acknowledged acquisition is on disk
//     before its reply is sent; tokens never go backwards across restarts of
//     that server (tested: kill -9 and restart).
//   - Replication is asynchronous. A failover (Sentinel or Cluster)
//     promotes a replica that may lack the latest acquisitions: tokens the
//     old primary issued can be issued again, and a lease granted or renewed
//     just before the failover may be missing, so a second holder can get it
//     while the first still believes it holds it. Set
//     [Options.WaitReplicas] to N so that TryAcquire returns only after N
//     replicas acknowledged the acquisition (WAIT on the same connection);
//     the token then survives the failover to any of those replicas (the
//     usual choice of Sentinel and Cluster, which promote the most
//     up-to-date replica, but WAIT does not make the store strongly
//     consistent). An acquisition acknowledged by fewer replicas within
//     [Options.WaitTimeout] is released again (best effort) and fails with
//     [leaseapi.ErrBackendUnavailable], never with ErrAmbiguousOutcome: the
//     runtime answers an ambiguous acquisition by adopting the grant if it
//     finds it, and a grant that is not durable must not be adopted. Renew
//     and Release do not wait, so a lease itself (as opposed to its token)
//     is not failover-safe: protect the resource with the token.
//   - Eviction: with maxmemory, use maxmemory-policy noeviction. An allkeys-*
//     policy can evict token counters (tokens restart); a volatile-* policy
//     can evict live lease keys (a second holder). Under noeviction, a
//     server out of memory refuses every mutation script before it runs
//     (tested): TryAcquire, Renew (so leases run out: fail closed), Release
//     and Guard are [leaseapi.ErrBackendUnavailable] and write nothing;
//     Validate and Inspect still answer.
//   - FLUSHALL, FLUSHDB or deleting the keys by hand resets tokens.
//
// # Late execution: the not-after bound
//
// A mutation can reach the server and wait there (a CLIENT PAUSE, a long
// script of another client, a loaded server) until after its caller has
// given up with [leaseapi.ErrAmbiguousOutcome]. TryAcquire, Renew and
// RenewBatch therefore carry a not-after bound: the call's ctx deadline
// (the runtime gives every backend call its policy's OperationTimeout),
// translated into server time. The script compares it with its TIME
// reading after its reads and before any write; past it, the script
// writes nothing, not even the token counter, and answers "late" with the
// server's time. A caller still waiting gets [leaseapi.ErrBackendUnavailable]
// ("not applied"): a definite answer, not an ambiguous one. (An
// acquisition that finds the key held answers "contended" without checking
// the bound: it writes nothing but, for a watching Store, the release mark
// and the Store's wait-set entry, which are harmless late or not.)
//
// The translation needs no synchronised clocks, only clocks that run at
// the same rate. Every reply to an acquisition or renewal carries the
// server's TIME reading S; for a request sent at local monotonic instant s,
// the server's clock at a later local instant t is at most S + (t - s). A
// request sent at t with budget = deadline - t carries
//
//	notAfter = S + (t - s) + budget + 1ms + (t - s)/1000
//
// from the Store's latest observation only (an older one has drifted
// more): the 1ms covers rounding to microseconds, the last term a rate
// difference of up to 1000 ppm (NTP slews at most 500 ppm). So a request
// that runs before its caller's deadline is never refused, and one that
// runs later than that by more than the observation's own delay (at most
// its round trip) plus the slack writes nothing. Observations are kept
// race-free (an atomic pointer; a reply to an older request never replaces
// that of a newer one). The batched renewal sends one bound per pipelined
// call, and the acquisition with [Options.WaitReplicas] sends it with its
// hand-built EVALSHA like the others (a late acquisition there burns no
// token; its WAIT still runs, as it is pipelined with the script).
//
// What the bound does not cover:
//
//   - A call without a ctx deadline sends no bound.
//   - A Store's first mutations, before any reply to an acquisition or
//     renewal, send no bound: bootstrapping with an extra TIME round trip
//     did not seem worth it, since an unbounded late execution is no worse
//     than before the bound existed (a late renewal only delays the next
//     holder; a late acquisition leaves an orphan grant, never handed to
//     anyone, that expires at its TTL).
//   - A script that runs within the overshoot above (the observation's
//     delay plus the slack) after its caller's deadline still applies,
//     with the same harmless effects.
//   - A forward step of the server's clock, or a rate difference beyond
//     1000 ppm that has built up since the last observation, makes prompt
//     requests look late: they fail closed, with the definite error above,
//     and that reply corrects the estimate for the next request. A backward
//     step makes the bound lenient until the next reply.
//   - Release, Validate, Inspect and Guard carry no bound. Validate and
//     Inspect write nothing. A late Release deletes only the grant it names
//     (owner and token compared in the script), so it cannot remove a later
//     holder. A late Guard writes only if its grant is still live when it
//     runs, which is what Guard promises at any time.
//
// The tests force a late execution on a real server: the server holds
// writes back (CLIENT PAUSE WRITE), and a fault proxy cuts the client off
// without the server noticing (faultproxy.Detach keeps the server's end of
// the connection open), so the server runs the queued script after the
// deadline and the lease key and token counter are unchanged
// (TestLateExecutionIsNoop; without a deadline the same script applies).
// TestLateStatusIsNotApplied makes the estimate too low, as a clock step
// would, and checks the definite error, that nothing was written, and the
// recovery; TestNotAfter and TestNotAfterIsAnUpperBound check the
// arithmetic, TestLateReplies the classification.
//
// # Failure handling
//
// Errors are classified once, by type (never by message text), and carry
// no key, owner, address or server text in their message. The driver's
// error is attached to every classified failure, so errors.As reaches a
// *vk.ValkeyError or a *net.OpError for a caller who asks (through the
// runtime's errors too):
//
//   - a context already done before the call: [leaseapi.ErrCanceled] or
//     [leaseapi.ErrTimeout], nothing sent;
//   - a failed dial, no node known for the slot: nothing was sent,
//     [leaseapi.ErrBackendUnavailable];
//   - a refusal that is a configuration failure (a server error reply with
//     the code NOAUTH or WRONGPASS, or NOPERM: the ACL user may not run
//     EVALSHA or touch the Store's keys; a refused FCALL is not reported,
//     see "Functions"): [leaseapi.ErrBackendUnavailable]
//     with a detail that starts with "configuration:", which no retry
//     fixes (Redis 7.0 refuses a command the script itself may not run,
//     such as TIME, with no error code: that reads as any other refusal);
//   - a closed valkey-go client (vk.ErrClosing): valkey-go v1.0.79
//     answers ErrClosing both to a call made after Close (refused unsent)
//     and to a command already written when Close was called that the
//     server then left unanswered for a second (Close's escape timer); the
//     two cannot be told apart. A read is [leaseapi.ErrBackendUnavailable]
//     ("client closed"); a mutation is [leaseapi.ErrAmbiguousOutcome]
//     ("client closed: the command may have been sent"), because a write
//     that may have run is never reported as not applied. Close the client
//     only after the Store's calls (and the lease Client using it) have
//     returned;
//   - an acquisition whose token the scripts cannot represent exactly
//     (the counter at or above 2^53 - 1, or not an integer):
//     [leaseapi.ErrInvalidState], nothing granted (the counter may have
//     moved, which never lowers a token);
//   - a mutation that the server ran past its not-after bound (see above):
//     it wrote nothing, [leaseapi.ErrBackendUnavailable], "not applied";
//   - an error reply from the server (LOADING, BUSY, OOM, READONLY, MOVED
//     after valkey-go's own redirection, CLUSTERDOWN...): the script did not
//     run or wrote nothing (every script checks before its first write, and
//     the shebang makes the server refuse OOM, replica and slot violations
//     before the script starts), [leaseapi.ErrBackendUnavailable];
//   - anything else once the call started (the context ended, the
//     connection was reset, an I/O timeout): for a mutation (TryAcquire,
//     Renew, Release, Guard, RenewBatch) [leaseapi.ErrAmbiguousOutcome],
//     since it may have run; for a read (Validate, Inspect)
//     [leaseapi.ErrBackendUnavailable]. valkey-go does not report whether a
//     command reached the wire, so a connection that breaks during its
//     set-up is also reported as ambiguous for a mutation: a conservative
//     answer, it costs at most a TTL of waiting, never safety;
//   - a reply that is not the answer to this request (see below): for a
//     mutation [leaseapi.ErrAmbiguousOutcome], for a read
//     [leaseapi.ErrBackendUnavailable], "reply to another request".
//
// Every script call carries a random request id as its last argument, and
// the script echoes it as the last element of its reply. A reply with
// another id, or none, is never decoded: valkey-go has been seen to hand a
// call the reply of another one on a pipelined connection reset while it
// also carried the release subscription, and decoding that reply could
// grant a lease that another key or owner holds, or report "not applied"
// for a mutation that ran. An error reply carries no id and cannot be
// checked this way; it is trusted as described above.
//
// Every call is bounded by its context: give each one a deadline (the
// runtime's OperationTimeout does). One case overruns it: a call that has
// to reconnect and whose dial uses up its whole budget starts the new
// connection's handshake with an expired context, and valkey-go then
// closes that connection with a PING it waits up to one second for, so
// the call returns up to a second after its deadline
// (TestFaultSlowDialIsBounded). The lease it serves is not extended by
// that: admission ends at the deadline without I/O. valkey-go detects a
// connection whose replies stopped after ClientOption.ConnWriteTimeout
// (default about 10s); until then calls on it time out by their
// contexts. Set it to a few times your operation timeout for faster
// recovery after a partition.
//
// Release notifications arrive on a connection of their own, taken from
// valkey-go's blocking pool by the first WatchRelease and given back by
// Close; the scripts never share a connection with the subscription.
// Release notification is best effort: a watch may miss a release while
// the subscription is down (its waiter retries after its retry interval);
// when the subscription drops or is confirmed again after a reconnection,
// every watch is woken once, since it may have missed one. Expiry is not
// notified.
//
// # What this package does not do
//
//   - It is not Redlock: one primary (per shard) is the authority, with the
//     durability above. There is no quorum over independent servers.
//   - It does not retry, reconnect or close the client: valkey-go
//     reconnects by itself; the caller owns the client and closes it after
//     [Store.Close].
//   - It never deletes token counters, so each distinct lease key ever
//     acquired keeps one small key (about 60 bytes plus the key) forever;
//     a program that acquires unboundedly many distinct keys grows
//     accordingly, as with the memory backend.
//   - Once a grant has expired unreleased, its lease key is gone, so
//     Release of that grant's token returns nil whoever the owner (only the
//     counter remains, and it proves no later grant exists; nothing is
//     changed). For live grants another owner's Release is
//     [leaseapi.ErrStaleOwner], as with the memory backend.
//   - No SPUBLISH, no client-side caching.
//   - It never deletes a function library, its own or an older version's.
package valkey
