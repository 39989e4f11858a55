package valkey

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/internal/watchhub"
	"github.com/leasekit/lease/leaseapi"
)

// Client is the valkey-go client a [Store] runs on: a standalone, sentinel
// or cluster client from valkey-go's NewClient. The Store does not own it
// and never closes it.
type Client = vk.Client

// DefaultPrefix is the key prefix used when [Options.Prefix] is empty.
const DefaultPrefix = "lease"

// MaxPrefixBytes bounds [Options.Prefix].
const MaxPrefixBytes = 64

// DefaultWaitTimeout is the WAIT timeout used when [Options.WaitReplicas] is
// set and [Options.WaitTimeout] is zero.
const DefaultWaitTimeout = 100 * time.Millisecond

// MaxCacheNameBytes bounds the name given to [Store.CacheKey].
const MaxCacheNameBytes = 256

// Options configures a [Store]. The zero value is valid. It is a plain
// value: New copies it.
type Options struct {
	// Prefix starts every key and the release channel of this Store, so
	// stores with different prefixes never see each other's leases. Empty
	// means [DefaultPrefix]. At most [MaxPrefixBytes] printable ASCII bytes
	// (0x21-0x7e) without '{' or '}', which would break the hash tag, and
	// without the glob metacharacters '*', '?', '[', ']' and '\\', so that
	// the ACL key pattern "~PREFIX:*" and "SCAN MATCH PREFIX:*" cover this
	// Store's keys and no others.
	Prefix string

	// WaitReplicas, when > 0, makes TryAcquire wait (WAIT) until that many
	// replicas acknowledged the acquisition, so that its fencing token
	// survives a failover to one of them. An acquisition that fewer replicas
	// acknowledge within WaitTimeout is released (best effort) and fails
	// with [leaseapi.ErrBackendUnavailable]. See "Durability of fencing
	// tokens" in the package doc. Zero (the default) does not wait;
	// negative is rejected.
	//
	// The script and its WAIT are pipelined on one dedicated connection
	// from valkey-go's blocking pool (ClientOption.BlockingPoolSize bounds
	// how many acquisitions wait at once), since WAIT counts the writes of
	// its own connection.
	WaitReplicas int

	// WaitTimeout bounds the WAIT. Zero means [DefaultWaitTimeout];
	// otherwise at least 1ms (WAIT counts whole milliseconds) and at most
	// [leaseapi.MaxOperationTimeout]. It is also capped by half the time left
	// on the call's context, so that the release that follows a failed WAIT
	// still has time to run.
	WaitTimeout time.Duration
}

// Store is the Valkey/Redis backend. It implements [leaseapi.Backend],
// [leaseapi.Inspector], [leaseapi.ReleaseWatcher] and
// [leaseapi.BatchRenewer] and claims them ([Store.Capabilities]), and
// publishes guarded cache values ([Store.Guard]).
//
// A Store is safe for concurrent use. Its only background resource is the
// release subscription, started by the first [Store.WatchRelease] and
// stopped by [Store.Close]; a Store on which WatchRelease is never called
// starts no goroutine.
//
// Every operation is one round trip that waits for the server's reply and
// is bounded by its ctx alone (give it a deadline). A nil ctx, a zero key
// or record, an invalid owner id or TTL is [leaseapi.ErrInvalidState]
// before any I/O; a ctx already done is [leaseapi.ErrCanceled] or
// [leaseapi.ErrTimeout] before any I/O; a failed call is
// [leaseapi.ErrBackendUnavailable] or, for a mutation that may have run,
// [leaseapi.ErrAmbiguousOutcome] (see "Failure handling" in the package
// doc). No operation is retried. The Backend methods keep working after
// [Store.Close], which only stops release notifications.
//
// A Store not made by [New] (the zero value, or a nil *Store) does no I/O:
// every method returns [leaseapi.ErrInvalidState] (RenewBatch for every
// element), it claims no capability, WatchRelease's channel never receives and
// Close does nothing.
type Store struct {
	client  vk.Client
	prefix  string
	channel string // "P:released": the releases no queued Store was told of
	// id names the Store in the wait sets of the keys it waits for; own
	// is its channel "P:released:ID", on which the release of such a key
	// wakes it (see "Release notification" in the package doc).
	id, own      string
	waitReplicas int
	waitTimeout  time.Duration

	// clock estimates the server's clock from the replies, for the
	// not-after bound of each mutation (clock.go).
	clock *clockEstimate

	// fns is what the Store knows of its function library on the
	// server (functions.go).
	fns functionState

	// watches holds the WatchRelease registrations by key ident; its
	// listener is the subscriber goroutine (subscribe), started by the
	// first WatchRelease and stopped by Close.
	watches *watchhub.Hub[string, struct{}]
	// listening is true while the subscription to the Store's own channel
	// is confirmed: set by the subscriber's confirmation hook, cleared by
	// the subscriber when the subscription ends. Only then does a
	// watching attempt queue the Store.
	listening atomic.Bool

	// turnsMu guards turns: the idents of the keys whose release woke this
	// Store in its turn (a message on its own channel while it watched the
	// key), each until its next watching attempt on the key, which then
	// queues at the front if it finds the key held (srcAcquireTurn). Set
	// by the subscriber's message callback, taken by TryAcquire.
	turnsMu sync.Mutex
	turns   map[string]struct{}
	// passes, also guarded by turnsMu, holds the idents of the keys whose
	// turn came while the Store did not watch them, until the passer
	// (pass.go) passes it on; passWake (buffer 1) wakes the passer.
	passes   map[string]struct{}
	passWake chan struct{}
	// passHook, when set (by tests, before the first WatchRelease), runs
	// on the passer before each pass, with the passer's ctx.
	passHook func(ctx context.Context, ident string)
}

// giveTurn records that a release woke the Store in its turn for ident.
func (s *Store) giveTurn(ident string) {
	s.turnsMu.Lock()
	if s.turns == nil {
		s.turns = make(map[string]struct{})
	}
	s.turns[ident] = struct{}{}
	s.turnsMu.Unlock()
}

// takeTurn reports whether a release woke the Store in its turn for ident
// since its last watching attempt on it, and forgets it.
func (s *Store) takeTurn(ident string) bool {
	s.turnsMu.Lock()
	defer s.turnsMu.Unlock()
	_, ok := s.turns[ident]
	if ok {
		delete(s.turns, ident)
	}
	return ok
}

// New returns a Store on client. It validates o and does no I/O: an
// unreachable server surfaces as [leaseapi.ErrBackendUnavailable] on the
// first operation. A nil client or invalid options are
// [leaseapi.ErrInvalidState].
func New(client vk.Client, o Options) (*Store, error) {
	const op = "valkey new"
	if client == nil {
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "nil client")
	}
	prefix := o.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !validPrefix(prefix) {
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "invalid prefix")
	}
	if o.WaitReplicas < 0 {
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "negative wait replicas")
	}
	wt := o.WaitTimeout
	if wt == 0 {
		wt = DefaultWaitTimeout
	}
	if wt < time.Millisecond || wt > leaseapi.MaxOperationTimeout {
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "wait timeout out of range")
	}
	s := &Store{
		client:       client,
		prefix:       prefix,
		channel:      prefix + ":released",
		id:           storeID(),
		waitReplicas: o.WaitReplicas,
		waitTimeout:  wt,
		clock:        newClockEstimate(),
		passWake:     make(chan struct{}, 1),
	}
	s.own = s.channel + ":" + s.id
	s.watches = watchhub.New[string, struct{}](s.subscribe)
	return s, nil
}

// storeID returns a fresh random Store id: 16 hex digits (64 bits, so
// that no two Stores of a fleet share one).
func storeID() string {
	return strconv.FormatUint(rand.Uint64()|1<<63, 16)
}

// errZeroStore is the answer of every method of a Store not made by New.
func errZeroStore(op string) error {
	return leaseapi.NewError(op, leaseapi.ErrInvalidState, "store not made by valkey.New")
}

// zero reports a Store not made by New (the zero value or nil).
func (s *Store) zero() bool { return s == nil || s.client == nil }

// prefixForbidden are the printable bytes a prefix may not hold: the hash
// tag's braces and the glob metacharacters of ACL key patterns and SCAN
// MATCH.
const prefixForbidden = "{}*?[]\\"

func validPrefix(p string) bool {
	if p == "" || len(p) > MaxPrefixBytes {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x21 || c > 0x7e || strings.IndexByte(prefixForbidden, c) >= 0 {
			return false
		}
	}
	return true
}

// escape makes a key's text safe inside the hash tag: '%', '{', '}' and ':'
// become %25, %7B, %7D and %3A. The mapping is injective, and the escaped
// text holds no brace, so a key's own braces can never end the tag early
// (the colon is escaped too, so that the text reads the same in every
// place it appears: key names, release messages, the audit).
func escape(s string) string {
	if plain(s) == len(s) {
		return s
	}
	return string(appendEscaped(make([]byte, 0, len(s)+8), s))
}

// appendEscaped appends escape(s) to b: the bytes up to the first one that
// needs escaping in one copy, then byte by byte. (strings.ContainsAny to
// test for those bytes cost about 380 instructions a call, 2.3k of the
// 25k a TryAcquire+Release costs the client; callgrind.)
func appendEscaped(b []byte, s string) []byte {
	i := plain(s)
	b = append(b, s[:i]...)
	for ; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b = append(b, "%25"...)
		case '{':
			b = append(b, "%7B"...)
		case '}':
			b = append(b, "%7D"...)
		case ':':
			b = append(b, "%3A"...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// plain returns the length of s's longest prefix that needs no escaping.
func plain(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '%' || c == '{' || c == '}' || c == ':' {
			return i
		}
	}
	return len(s)
}

// ident is the text inside a key's hash tag; it is also the payload of the
// key's release notification.
func ident(k leaseapi.Key) string { return escape(k.Namespace()) + "/" + escape(k.Name()) }

// tag returns "prefix:{escaped-key}", the start shared by every server key
// of k: the prefix first (so ACL key patterns and SCAN MATCH on "prefix:*"
// cover every key of the Store), then the hash tag. The prefix holds no
// brace and the escaped key no brace or colon, so the tag is the whole
// escaped key and no two (prefix, key) pairs share a start.
func (s *Store) tag(k leaseapi.Key) string {
	return s.prefix + ":{" + ident(k) + "}"
}

// Keys returns the names of k's two server keys: the lease key (deleted
// on release, expired by the server at the grant's expiry) and the token
// counter (never deleted or expired). See "Key layout" in the package
// doc. They are exposed for operators' tooling; do not write them. The
// zero key (or a zero Store) returns two empty strings.
func (s *Store) Keys(k leaseapi.Key) (lease, token string) {
	if s.zero() {
		return "", ""
	}
	lease, token, _ = s.names(k)
	return lease, token
}

// names returns k's lease and token keys and its ident, all three slices of
// one string (one allocation for a key of ordinary length).
func (s *Store) names(k leaseapi.Key) (lease, token, id string) {
	if k.IsZero() {
		return "", "", ""
	}
	var buf [textBuf]byte
	var t callText
	b := t.key(buf[:0], s.prefix, k, leaseSuffix)
	b = t.key(b, s.prefix, k, tokenSuffix)
	t.done(b)
	lease = t.field(0)
	return lease, t.field(1), s.identOf(lease)
}

// identOf returns the ident of the key whose lease key name (from
// names or callText.key) is lease: the text inside its hash tag.
func (s *Store) identOf(lease string) string {
	return lease[len(s.prefix)+2 : len(lease)-len(leaseSuffix)]
}

// waitKeyOf returns the wait set's name for the lease key named lease: the
// same prefix and hash tag. Only a queuing attempt needs it, so the plain
// acquisition does not build it.
func waitKeyOf(lease string) string {
	return lease[:len(lease)-len(leaseSuffix)] + waitSuffix
}

// CacheKey returns the server key under which [Store.Guard] publishes the
// cache value called name for lease k. It shares k's hash tag, so it lives
// in the lease's cluster slot, and it can never name the lease's own keys.
// name must be 1 to [MaxCacheNameBytes] bytes of valid UTF-8 without
// control bytes; otherwise, or for the zero key, the error is
// [leaseapi.ErrInvalidState].
func (s *Store) CacheKey(k leaseapi.Key, name string) (string, error) {
	const op = "cache key"
	if s.zero() {
		return "", errZeroStore(op)
	}
	if err := k.Check(); err != nil {
		return "", leaseapi.Wrap(err, op)
	}
	if name == "" || len(name) > MaxCacheNameBytes || !leaseapi.CleanText(name) {
		return "", leaseapi.NewError(op, leaseapi.ErrInvalidState, "invalid cache name")
	}
	return s.tag(k) + ":cache:" + name, nil
}

func micros(ttl time.Duration) string { return strconv.FormatInt(ttl.Microseconds(), 10) }

func tokenArg(t leaseapi.Token) string { return strconv.FormatUint(uint64(t), 10) }

// expiryMicros turns a key's PEXPIRETIME (ms, the grant's expiry minus 1ms;
// see scripts.go) into the grant's expiry in µs.
func expiryMicros(pexpiretime int64) int64 { return (pexpiretime + 1) * 1000 }

// grant returns the record of key and owner with token tok, acquired at
// a and expiring at e (µs), if those are a grant's.
func grant(key leaseapi.Key, owner string, tok, a, e int64) (leaseapi.Record, bool) {
	if tok <= 0 || tok > maxToken || e <= a || a <= 0 {
		return leaseapi.Record{}, false
	}
	return leaseapi.Record{
		Key:        key,
		Owner:      owner,
		Token:      leaseapi.Token(tok),
		AcquiredAt: time.UnixMicro(a),
		ExpiresAt:  time.UnixMicro(e),
	}, true
}

// parseValue splits a lease value (scripts.go) into its TTL (µs), token
// and owner.
func parseValue(v string) (ttl, token int64, owner string, ok bool) {
	i := strings.IndexAny(v, ":!")
	if i <= 0 {
		return 0, 0, "", false
	}
	ttl, ok1 := parseInt(v[:i])
	tokText, owner, ok2 := strings.Cut(v[i+1:], ":")
	token, ok3 := parseInt(tokText)
	if !ok1 || !ok2 || !ok3 || ttl <= 0 {
		return 0, 0, "", false
	}
	return ttl, token, owner, true
}

// parseInt is strconv.ParseInt for the decimal fields of a reply.
func parseInt(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// lateTime returns the server time of a late reply's payload.
func lateTime(status int, payload string) (int64, bool) {
	if status != statusLate {
		return 0, false
	}
	return parseInt(payload)
}

// lateResult is the answer to a statusLate reply of a mutation: the
// definite "not applied" (leaseapi.LateError) with the server time it
// carries, or a protocol error if it carries none.
func lateResult(status int, payload, op string) (leaseapi.Record, int64, error) {
	now, ok := lateTime(status, payload)
	if !ok {
		return leaseapi.Record{}, 0, protocolError(op, true)
	}
	return leaseapi.Record{}, now, leaseapi.LateError(op)
}

// acquireResult interprets the acquire script's reply (status and
// payload, after line) to an acquisition of key by owner for ttl. It also
// returns the server time the reply carries, if any, for the clock
// estimate: the grant's acquired time (the script's TIME rounded up by
// less than 1ms, which only makes the not-after bound more lenient; see
// clock.go) or the late reply's now.
func acquireResult(status int, payload string, key leaseapi.Key, owner string, ttl time.Duration, op string) (leaseapi.Record, int64, error) {
	switch status {
	case statusLate:
		return lateResult(status, payload, op)
	case statusContended:
		return leaseapi.Record{}, 0, leaseapi.NewError(op, leaseapi.ErrContended, "")
	case statusBadToken:
		return leaseapi.Record{}, 0, leaseapi.NewError(op, leaseapi.ErrInvalidState, "token counter exhausted or corrupt: nothing granted")
	case statusOK:
		tokText, esText, _ := strings.Cut(payload, " ")
		tok, ok1 := parseInt(tokText)
		es, ok2 := parseInt(esText)
		if ok1 && ok2 {
			e := expiryMicros(es)
			a := e - ttl.Microseconds()
			if rec, ok := grant(key, owner, tok, a, e); ok {
				return rec, a, nil
			}
		}
	}
	return leaseapi.Record{}, 0, protocolError(op, true)
}

// renewResult interprets the renew script's reply to a renewal of rec for
// ttl, and returns the server time it carries, as acquireResult does.
func renewResult(status int, payload string, rec leaseapi.Record, ttl time.Duration, op string) (leaseapi.Record, int64, error) {
	switch status {
	case statusLate:
		return lateResult(status, payload, op)
	case statusStale:
		return leaseapi.Record{}, 0, leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
	case statusOK:
		if es, ok := parseInt(payload); ok {
			e := expiryMicros(es)
			a := e - ttl.Microseconds()
			if got, ok := grant(rec.Key, rec.Owner, int64(rec.Token), a, e); ok {
				return got, a, nil
			}
		}
	}
	return leaseapi.Record{}, 0, protocolError(op, true)
}

// Capabilities implements [leaseapi.Capable]: Inspect, WatchRelease and
// RenewBatch; and Adopt only without [Options.WaitReplicas]: with it, a
// grant read back from the primary is no proof that any replica has it, so
// the runtime must not adopt an acquisition whose reply was lost; it fails
// with ErrAmbiguousOutcome and the grant, if any, expires at its TTL. Never
// NeverBlocks: every call is a round trip. A Store that [New] did not make
// claims nothing.
func (s *Store) Capabilities() leaseapi.Capabilities {
	if s.zero() {
		return leaseapi.Capabilities{}
	}
	return leaseapi.Capabilities{Inspect: true, Adopt: s.waitReplicas == 0, WatchRelease: true, RenewBatch: true}
}

// TryAcquire implements [leaseapi.Backend]: one script grants key to owner
// for ttl (server time) unless a live grant exists ([leaseapi.ErrContended],
// also for the same owner). With [Options.WaitReplicas] it then waits for
// replica acknowledgements; see [Options.WaitReplicas]. A lost reply is
// [leaseapi.ErrAmbiguousOutcome]: the grant may exist (use
// [Store.Inspect] to find it by owner id). Never retried.
//
// The request carries a not-after bound derived from ctx's deadline (see
// "Late execution" in the package doc): a script that the server runs
// past it writes nothing and the call, if still waiting, gets
// [leaseapi.ErrBackendUnavailable]. An attempt that finds the key held while
// this Store watches it ([Store.WatchRelease]) marks the grant and queues
// the Store in the key's wait set, so that a release wakes it in its turn;
// those are its only writes (see "Release notification" in the package
// doc).
func (s *Store) TryAcquire(ctx context.Context, key leaseapi.Key, owner string, ttl time.Duration) (leaseapi.Record, error) {
	const op = "try acquire"
	if s.zero() {
		return leaseapi.Record{}, errZeroStore(op)
	}
	if err := leaseapi.CheckAcquire(ctx, op, key, owner, ttl); err != nil {
		return leaseapi.Record{}, err
	}
	na, sent := s.clock.boundMicros(ctx)
	var buf [textBuf]byte
	var t callText
	b := buf[:0]
	b = t.key(b, s.prefix, key, leaseSuffix)
	b = t.key(b, s.prefix, key, tokenSuffix)
	b = t.int(b, ttl.Microseconds())
	b = t.int(b, na)
	b = t.id(b)
	t.done(b)
	lk, tk, ttlText, naText, ida := t.field(0), t.field(1), t.field(2), t.field(3), t.field(4)
	var res vk.ValkeyResult
	var waitRes vk.ValkeyResult
	f, queue := fnAcquire, false
	if ident := s.identOf(lk); s.watches.Has(ident) {
		// Queue only while the subscription is confirmed: a Store that
		// cannot hear its turn would swallow it (see "Release
		// notification" in the package doc).
		turn := s.takeTurn(ident)
		f, queue = fnMarking, s.listening.Load()
		switch {
		case queue && turn:
			f = fnTurn
		case queue:
			f = fnWatching
		}
	}
	switch {
	case queue && s.waitReplicas > 0:
		res, waitRes = s.execWithWait(ctx, f.sha, f.src, []string{lk, tk, waitKeyOf(lk)}, []string{owner, ttlText, naText, s.id, ida})
	case queue:
		res = s.run(ctx, f, []string{lk, tk, waitKeyOf(lk)}, []string{owner, ttlText, naText, s.id, ida})
	case s.waitReplicas > 0:
		res, waitRes = s.execWithWait(ctx, f.sha, f.src, []string{lk, tk}, []string{owner, ttlText, naText, ida})
	default:
		res = s.run(ctx, f, []string{lk, tk}, []string{owner, ttlText, naText, ida})
	}
	status, payload, err := line(res, ida, op, true)
	if err != nil {
		return leaseapi.Record{}, err
	}
	rec, now, err := acquireResult(status, payload, key, owner, ttl, op)
	if now > 0 {
		s.clock.observe(now, sent)
	}
	if err != nil {
		return leaseapi.Record{}, err
	}
	if s.waitReplicas > 0 {
		if n, err := waitRes.AsInt64(); err != nil || n < int64(s.waitReplicas) {
			// Fail closed: the grant is not durable enough. Release it so
			// nobody waits a TTL for it; if that fails too it expires.
			_ = s.Release(ctx, rec)
			return leaseapi.Record{}, leaseapi.NewError(op, leaseapi.ErrBackendUnavailable, "too few replicas acknowledged")
		}
	}
	return rec, nil
}

// execWithWait runs the acquire script (sha, src) and WAIT on one dedicated
// connection in one round trip (WAIT counts the writes of its own
// connection), with the EVALSHA-then-EVAL fallback done by hand.
func (s *Store) execWithWait(ctx context.Context, sha, src string, keys, args []string) (script, wait vk.ValkeyResult) {
	err := s.client.Dedicated(func(c vk.DedicatedClient) error {
		// Each WAIT gets at most half of the time left when it is sent, so
		// the NOSCRIPT fallback's second round trip cannot overrun the
		// call's context (the first WAIT already used part of it).
		waitCmd := func() vk.Completed {
			wt := s.waitTimeout
			if dl, ok := ctx.Deadline(); ok {
				wt = min(wt, time.Until(dl)/2)
			}
			return c.B().Wait().Numreplicas(int64(s.waitReplicas)).Timeout(max(wt.Milliseconds(), 1)).Build()
		}
		r := c.DoMulti(ctx,
			c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(),
			waitCmd())
		if ve, ok := vk.IsValkeyErr(r[0].Error()); ok && ve.IsNoScript() {
			r = c.DoMulti(ctx,
				c.B().Eval().Script(src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(),
				waitCmd())
		}
		script, wait = r[0], r[1]
		return nil
	})
	if err != nil {
		script = vk.NewErrorResult(err)
	}
	return script, wait
}

// Renew implements [leaseapi.Backend]: one script extends rec's grant to
// server-now + ttl if rec (owner and token) is the key's live grant, else
// [leaseapi.ErrStaleOwner]. A lost reply is [leaseapi.ErrAmbiguousOutcome].
// Never retried. Like TryAcquire, it carries a not-after bound from ctx's
// deadline; past it the script writes nothing
// ([leaseapi.ErrBackendUnavailable]).
func (s *Store) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	const op = "renew"
	if s.zero() {
		return leaseapi.Record{}, errZeroStore(op)
	}
	if err := leaseapi.CheckRenew(ctx, op, rec, ttl); err != nil {
		return leaseapi.Record{}, err
	}
	na, sent := s.clock.boundMicros(ctx)
	var buf [textBuf]byte
	var t callText
	b := buf[:0]
	b = t.key(b, s.prefix, rec.Key, leaseSuffix)
	b = t.value(b, rec, ttl)
	b = t.int(b, na)
	b = t.id(b)
	t.done(b)
	val := t.field(1)
	ida := t.field(3)
	res := s.run(ctx, fnRenew, []string{t.field(0)}, []string{val, val[:ttlLen(ttl)], t.field(2), ida})
	return s.decodeRenew(res, ida, rec, ttl, op, sent)
}

// decodeRenew decodes a renew script's reply to request id, sent at local
// instant sent, learning the server's time from it.
func (s *Store) decodeRenew(res vk.ValkeyResult, ida string, rec leaseapi.Record, ttl time.Duration, op string, sent int64) (leaseapi.Record, error) {
	status, payload, err := line(res, ida, op, true)
	if err != nil {
		return leaseapi.Record{}, err
	}
	got, now, err := renewResult(status, payload, rec, ttl, op)
	if now > 0 {
		s.clock.observe(now, sent)
	}
	return got, err
}

// Validate implements [leaseapi.Backend]: the stored record (rec with the
// server's acquired and expiry times) if rec is the key's live grant by
// server time, else [leaseapi.ErrStaleOwner]. It writes nothing; a failed
// call is [leaseapi.ErrBackendUnavailable]. It is sent to the primary (not
// to a replica, which could lag behind a release).
func (s *Store) Validate(ctx context.Context, rec leaseapi.Record) (leaseapi.Record, error) {
	const op = "validate"
	if s.zero() {
		return leaseapi.Record{}, errZeroStore(op)
	}
	if err := leaseapi.CheckRecord(ctx, op, rec); err != nil {
		return leaseapi.Record{}, err
	}
	var buf [textBuf]byte
	var t callText
	b := buf[:0]
	b = t.key(b, s.prefix, rec.Key, leaseSuffix)
	b = t.value(b, rec, rec.GrantedTTL())
	b = t.id(b)
	t.done(b)
	ida := t.field(2)
	status, payload, err := line(s.run(ctx, fnValidate, []string{t.field(0)}, []string{t.field(1), ida}), ida, op, false)
	if err != nil {
		return leaseapi.Record{}, err
	}
	switch status {
	case statusOK:
		got, ok := liveGrant(payload, rec.Key)
		if !ok || got.Owner != rec.Owner || got.Token != rec.Token {
			return leaseapi.Record{}, protocolError(op, false)
		}
		return got, nil
	case statusStale:
		return leaseapi.Record{}, leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
	}
	return leaseapi.Record{}, protocolError(op, false)
}

// liveGrant decodes "EXPIRY VALUE", the payload of Validate's and
// Inspect's replies for a live grant, into its record.
func liveGrant(payload string, key leaseapi.Key) (leaseapi.Record, bool) {
	pet, v, ok := strings.Cut(payload, " ")
	if !ok {
		return leaseapi.Record{}, false
	}
	ms, ok := parseInt(pet)
	if !ok {
		return leaseapi.Record{}, false
	}
	ttl, tok, owner, ok := parseValue(v)
	if !ok {
		return leaseapi.Record{}, false
	}
	e := expiryMicros(ms)
	return grant(key, owner, tok, e-ttl, e)
}

// Release implements [leaseapi.Backend]: one script deletes rec's grant if
// rec (owner and token) is the key's latest grant and publishes a release
// notification. Idempotent: a grant that already ended (released or
// expired) with no later grant returns nil. A later grant, or another
// owner's live grant, is [leaseapi.ErrStaleOwner]. The token counter is
// never touched. A lost reply is [leaseapi.ErrAmbiguousOutcome]; retrying a
// Release is safe.
//
// A grant whose lease key is gone (it ended) takes a second round trip: a
// read-only script asks the token counter whether a later grant exists.
// The first script wrote nothing then, so a failure of the second is
// [leaseapi.ErrBackendUnavailable], never ambiguous.
func (s *Store) Release(ctx context.Context, rec leaseapi.Record) error {
	const op = "release"
	if s.zero() {
		return errZeroStore(op)
	}
	if err := leaseapi.CheckRecord(ctx, op, rec); err != nil {
		return err
	}
	var buf [textBuf]byte
	var t callText
	b := buf[:0]
	b = t.key(b, s.prefix, rec.Key, leaseSuffix)
	b = t.value(b, rec, rec.GrantedTTL())
	b = t.id(b)
	t.done(b)
	lk, ida := t.field(0), t.field(2)
	status, _, err := line(s.run(ctx, fnRelease, []string{lk},
		[]string{t.field(1), ida}), ida, op, true)
	if err != nil {
		return err
	}
	switch status {
	case statusOK:
		// Deliver to this Store's own watchers at once; other Stores and
		// processes learn it from the published message.
		s.watches.Notify(s.identOf(lk))
		return nil
	case statusNoGrant:
		return s.releaseEnded(ctx, rec, op)
	case statusStale:
		return leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
	}
	return protocolError(op, true)
}

// releaseEnded answers the Release of rec once the release script found
// no live grant: nil if rec's token is still the counter's (no later grant
// exists), else [leaseapi.ErrStaleOwner]. It is a read: a failed call is
// [leaseapi.ErrBackendUnavailable].
func (s *Store) releaseEnded(ctx context.Context, rec leaseapi.Record, op string) error {
	var buf [textBuf]byte
	var t callText
	b := buf[:0]
	b = t.key(b, s.prefix, rec.Key, tokenSuffix)
	b = t.end(strconv.AppendUint(b, uint64(rec.Token), 10))
	b = t.id(b)
	t.done(b)
	ida := t.field(2)
	status, _, err := line(s.run(ctx, fnEnded, []string{t.field(0)},
		[]string{t.field(1), ida}), ida, op, false)
	if err != nil {
		return err
	}
	switch status {
	case statusGone:
		return nil
	case statusStale:
		return leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
	}
	return protocolError(op, false)
}

// Inspect implements [leaseapi.Inspector]: the key's live grant (held ==
// true), or only its latest token (held == false; 0 for a key never
// acquired), by server time. It writes nothing; a failed call is
// [leaseapi.ErrBackendUnavailable].
func (s *Store) Inspect(ctx context.Context, key leaseapi.Key) (leaseapi.Record, bool, error) {
	const op = "inspect"
	if s.zero() {
		return leaseapi.Record{}, false, errZeroStore(op)
	}
	if err := leaseapi.CheckKey(ctx, op, key); err != nil {
		return leaseapi.Record{}, false, err
	}
	var buf [textBuf]byte
	var t callText
	b := buf[:0]
	b = t.key(b, s.prefix, key, leaseSuffix)
	b = t.key(b, s.prefix, key, tokenSuffix)
	b = t.id(b)
	t.done(b)
	ida := t.field(2)
	status, payload, err := line(s.run(ctx, fnInspect, []string{t.field(0), t.field(1)}, []string{ida}), ida, op, false)
	if err != nil {
		return leaseapi.Record{}, false, err
	}
	switch status {
	case statusFree:
		tok, err := strconv.ParseUint(payload, 10, 64)
		if err != nil {
			return leaseapi.Record{}, false, protocolError(op, false)
		}
		return leaseapi.Record{Key: key, Token: leaseapi.Token(tok)}, false, nil
	case statusOK:
		rec, ok := liveGrant(payload, key)
		if !ok {
			return leaseapi.Record{}, false, protocolError(op, false)
		}
		return rec, true, nil
	}
	return leaseapi.Record{}, false, protocolError(op, false)
}

// Guard publishes value under cacheKey only if rec (owner and token) is
// still the key's live grant by server time, in one script: the check and
// the write are atomic, so a holder whose lease was lost or taken over can
// never overwrite the cache a newer holder publishes. cacheKey must come
// from [Store.CacheKey] for rec's key (same hash slot, never the lease's own
// keys). ttl > 0 expires the value after ttl (millisecond resolution);
// zero keeps it without expiry.
//
// Guard returns nil when the value was written, [leaseapi.ErrStaleOwner]
// (nothing written) when rec is no longer current,
// [leaseapi.ErrInvalidState] for bad input, and for a failed call
// [leaseapi.ErrBackendUnavailable] (nothing sent) or
// [leaseapi.ErrAmbiguousOutcome] (the value may have been written). It is
// not retried.
func (s *Store) Guard(ctx context.Context, rec leaseapi.Record, cacheKey, value string, ttl time.Duration) error {
	const op = "guard"
	if s.zero() {
		return errZeroStore(op)
	}
	if err := leaseapi.CheckRecord(ctx, op, rec); err != nil {
		return err
	}
	if ttl < 0 || ttl > 0 && ttl < time.Millisecond {
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "ttl out of range")
	}
	var buf [textBuf]byte
	var t callText
	b := buf[:0]
	b = t.key(b, s.prefix, rec.Key, leaseSuffix)
	b = t.value(b, rec, rec.GrantedTTL())
	b = t.int(b, ttl.Milliseconds())
	b = t.id(b)
	t.done(b)
	lk, ida := t.field(0), t.field(3)
	// The cache key must start with the lease key's "prefix:{E}" (its name
	// without "}:lease" plus the brace) and ":cache:".
	tag := lk[:len(lk)-len(leaseSuffix)+1]
	const cache = ":cache:"
	rest, ok1 := strings.CutPrefix(cacheKey, tag)
	name, ok2 := strings.CutPrefix(rest, cache)
	if !ok1 || !ok2 || name == "" || len(name) > MaxCacheNameBytes {
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "cache key not made by CacheKey for this lease")
	}
	status, _, err := line(s.run(ctx, fnGuard, []string{lk, cacheKey},
		[]string{t.field(1), value, t.field(2), ida}), ida, op, true)
	if err != nil {
		return err
	}
	switch status {
	case statusOK:
		return nil
	case statusStale:
		return leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
	}
	return protocolError(op, true)
}
