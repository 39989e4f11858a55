package valkey

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
)

// The scripts. Each operation is exactly one of them, run as a function
// of the Store's library by FCALL, or by EVALSHA with an EVAL fallback on
// NOSCRIPT where the server cannot run the function (functions.go; never
// the retryable variant: a mutation is never resent after its reply was
// lost).
//
// The lease key is one string (see "Key layout" in the package doc):
//
//	TTL M TOKEN:OWNER        e.g. "30000000:17:worker-1"
//
// the granted TTL in µs (digits), one mark byte (':', or '!' once a
// watching contender asked to be told of the release), then the grant's
// "token:owner". The key's own expiry (PXAT) is the grant's expiry E, so
// the key exists exactly while the grant is live, and the grant's acquired
// time is E - TTL. Nothing in the value needs formatting a number but the
// token: the TTL is the caller's own text.
//
// Conventions shared by every script:
//
//   - KEYS[1] is the lease key (srcReleaseEnded's only key is the token
//     counter); KEYS[2] is the token counter or (Guard) the cache key. All
//     share one hash tag.
//   - Liveness is the lease key's existence. E is a whole millisecond
//     (now + TTL rounded up by less than 1ms; the acquired time E - TTL is
//     rounded up alike) and the key expires at PXAT E-1: the server drops a
//     key once its clock's millisecond is past that, that is, from instant
//     E on. So a grant is live exactly while server time < E, as ExpiresAt
//     says, with no reading of TIME. Only the scripts that grant or extend
//     read TIME, once, in microseconds.
//   - A caller names its grant by the value it expects, "TTL:TOKEN:OWNER"
//     (for a renewal, with the new TTL). The common case, an unmarked grant
//     whose TTL is unchanged, is one string comparison, as the floor's. In
//     any other case the script compares the "token:owner" after the mark
//     with the one after the first ':' of the expected value: the TTL and
//     the token are digits, so the first ':' or '!' ends them and no two
//     (token, owner) pairs compare equal.
//   - Numbers are turned into text with "%d", exact for any integer a
//     double holds exactly, and cheaper on the server than Lua's own
//     "%.14g" conversion (concatenation). Numbers are never passed to
//     redis.call as numbers (servers format those differently).
//   - Every check precedes the first write, and no write can fail once the
//     checks passed, so a script that returns a server error wrote nothing.
//     (The one exception: INCR of a counter that is not an integer or at
//     its maximum fails; acquire calls it with pcall and refuses.) The
//     "#!lua" shebang makes the server check OOM, replica and cluster slot
//     constraints before the script runs instead of at its first write.
//   - The reply is one line of text, "S ID" or "S ID PAYLOAD": a status
//     digit (statusOK, statusContended, statusStale, statusGone,
//     statusFree, statusLate, statusBadToken, statusNoGrant), the request id (reqid.go:
//     every script's last argument, echoed) and the operation's fields.
//     The batched renewal's too, with one status byte per key. A table
//     reply costs the server about as much as a redis.call.
//   - The scripts that grant or extend (acquire, renew, batched renew) take
//     a not-after bound as their last argument before the id: server time
//     in microseconds, "0" for none. When the server's TIME is past it, the
//     script writes nothing and returns "6 ID NOW"; see notAfter in
//     clock.go. The bound is checked after the reads and before any write.
//
// Lua numbers are doubles: microsecond timestamps stay exact up to 2^53
// (the year 2255); tokens are bounded by maxToken.
const (
	statusOK        = 1 // applied; further elements carry the record
	statusContended = 2 // a live grant exists
	statusStale     = 3 // rec is not the key's live (or latest) grant
	statusGone      = 4 // Release: rec's grant already ended, no later grant
	statusFree      = 5 // Inspect: no live grant; element 2 is the last token
	statusLate      = 6 // past the request's not-after bound, nothing written; element 2 is now
	statusBadToken  = 7 // Acquire: the counter cannot give an exact token; nothing granted
	statusNoGrant   = 8 // Release: no live grant, nothing written; ask the counter (srcReleaseEnded)
)

// maxToken is the largest token the scripts issue: 2^53 - 1, the largest
// integer below which every integer is exact in a Lua number (a double).
// INCR's reply becomes a Lua number, so a larger counter would hand out
// rounded, repeated tokens: the acquire script refuses instead
// (statusBadToken, nothing granted; the counter has moved past it already,
// which never lowers a token). Counting from 1 at a million acquisitions a
// second, it is reached after 285 years; it is reached at once only if an
// operator seeds the counter that high.
const maxToken = 1<<53 - 1

// luaTime reads the server's TIME and applies the not-after bound in
// ARGV[$NA] (placeholders, $NA and $TTL, the callers replace): a script run past it
// writes nothing and answers "6 ID NOW". Then es is the grant's new
// expiry minus 1ms (the PXAT value), as text, for the TTL in ARGV[$TTL]:
// ceil((now + TTL) / 1000) - 1, which for an integer is
// floor((now + TTL - 1) / 1000). The arithmetic is exact (integers below
// 2^53) and uses operators rather than math.ceil and tonumber, each a
// function call: with a bound to check, as every runtime call has, this
// saves about 2k of the acquisition's 62k instructions (callgrind).
const luaTime = `local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local na = ARGV[$NA] + 0
if na > 0 and now > na then
  return '6 ' .. ARGV[#ARGV] .. string.format(' %d', now)
end
local e = now + ARGV[$TTL] - 1
local es = string.format('%d', (e - e % 1000) / 1000)
`

// luaSame checks that the value in $V (not nil) is the grant the expected
// value in ARGV[$X] names, whatever its mark and TTL, else runs $FAIL; it
// leaves i, the position of the value's mark byte. For the uncommon case
// only: the callers first compare $V with ARGV[$X].
const luaSame = `local i = string.find($V, '[:!]')
local j = string.find(ARGV[$X], ':', 1, true)
if not i or not j or string.sub($V, i + 1) ~= string.sub(ARGV[$X], j + 1) then
  $FAIL
end
`

// fill replaces placeholders in a script fragment: old, new, old, new...
func fill(src string, oldnew ...string) string { return strings.NewReplacer(oldnew...).Replace(src) }

// srcAcquire: KEYS lease, token; ARGV owner, ttl (µs), not-after (µs),
// id. Returns "6 ID NOW" (late), "2 ID" (contended), "7 ID" (the counter
// is not an integer, is at its maximum or gave a token above maxToken:
// nothing granted) or "1 ID TOKEN ES" (ES: the expiry in ms, minus 1).
//
// srcAcquireWatching is the same for a Store that waits for a release
// notification of the key (KEYS lease, token, wait; ARGV owner, ttl,
// not-after, the Store's id, id): its contended attempt marks the live
// grant (the mark byte, SETRANGE of one byte, once per grant), so that
// its release publishes a notification, and queues the Store in the
// key's wait set (ZADD NX: a Store already queued keeps its place), with
// the server's TIME in µs as its score, so that releases wake the queued
// Stores in the order they first found the key held. An unmarked release
// publishes nothing. Its grant takes the Store out of the wait set and,
// if other Stores are still queued, is marked from the start: they sleep
// until they are woken, so none of them would mark it. Two scripts rather
// than a "watching" argument: an argument costs the server about as much
// on every attempt as the test (about 2k instructions of 27k for a
// contended attempt, callgrind), and srcAcquire stays the floor's shape.
//
// srcAcquireMarking is srcAcquire for a watching Store whose
// subscription is not confirmed (not yet, or no longer): it marks the
// grant as srcAcquireWatching does but queues nothing, since the Store
// could not hear its turn and would swallow it; the release of a grant
// marked with nobody queued is broadcast, which the Store hears once it
// is subscribed again (or it retries on its timer).
//
// The contended check comes before TIME and the not-after bound: a
// contended attempt writes nothing but the mark and the queue entry, so
// it needs neither.
var (
	srcAcquire = "#!lua\n" + `if redis.call('EXISTS', KEYS[1]) == 1 then
  return '2 ' .. ARGV[4]
end
` + fill(luaGrant, "$ID", "4", "$M", "':'")
	srcAcquireMarking = "#!lua\n" + `local v = redis.call('GET', KEYS[1])
if v then
` + luaMark + `  return '2 ' .. ARGV[4]
end
` + fill(luaGrant, "$ID", "4", "$M", "':'")
	srcAcquireWatching = fill(luaWatching, "$QUEUE", `local t = redis.call('TIME')
  redis.call('ZADD', KEYS[3], 'NX', string.format('%d', t[1] * 1000000 + t[2]), ARGV[4])`) + fill(luaGrant, "$ID", "5", "$M", "m")
	srcAcquireTurn = fill(luaWatching, "$QUEUE", `redis.call('ZADD', KEYS[3], 'LT', '0', ARGV[4])`) + fill(luaGrant, "$ID", "5", "$M", "m")
)

// luaWatching is srcAcquireWatching and srcAcquireTurn but for the
// statement $QUEUE that queues the Store.
//
// srcAcquireTurn is the attempt of a Store that a release woke in its
// turn (popped from the wait set): if it finds the key held (another
// attempt took the key first: a waiter whose retry timer fired, or a
// newcomer), it queues at the front, score 0 (ZADD LT: added, or moved
// forward if an attempt of its own queued it meanwhile), so that its turn
// is the next release rather than the end of the queue. A Store that was
// woken and has gone costs the next release (one retry interval of the
// others), as any stale entry does.
const luaWatching = "#!lua\n" + `local v = redis.call('GET', KEYS[1])
if v then
` + luaMark + `  $QUEUE
  return '2 ' .. ARGV[5]
end
local m = ':'
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('ZREM', KEYS[3], ARGV[4])
  if redis.call('EXISTS', KEYS[3]) == 1 then
    m = '!'
  end
end
`

// luaMark marks the live grant v of KEYS[1] (the mark byte, SETRANGE of
// one byte, once per grant), so that its release publishes a notification.
const luaMark = `  local i = string.find(v, '[:!]')
  if i and string.byte(v, i) ~= 33 then
    redis.call('SETRANGE', KEYS[1], i - 1, '!')
  end
`

// srcPassTurn: KEYS lease, wait; ARGV the channel prefix "P:released:",
// E (the message), id. The turn of a Store that a release woke for a key
// it no longer watches (its waiters gave up while the key was held; see
// "Release notification" in the package doc), passed on as the release
// would have given it had the Store not been queued: if the key is free,
// the wait set's oldest entry is popped and "P:released:ID" gets E; if a
// grant is live (taken meanwhile) and Stores are still queued, it is
// marked, so that its release wakes the next one. Returns "1 ID" (passed,
// or nobody queued) or "2 ID" (held).
var srcPassTurn = "#!lua\n" + `local v = redis.call('GET', KEYS[1])
if v then
  if redis.call('EXISTS', KEYS[2]) == 1 then
` + luaMark + `  end
  return '2 ' .. ARGV[3]
end
local w = redis.call('ZPOPMIN', KEYS[2])
if w[1] then
  redis.call('PUBLISH', ARGV[1] .. w[1], ARGV[2])
end
return '1 ' .. ARGV[3]
`

// luaGrant is the acquire scripts' grant of a free key: the id in
// ARGV[$ID], the value's mark byte in the expression $M.
var luaGrant = fill(luaTime, "$NA", "3", "$TTL", "2") + `local tok = redis.pcall('INCR', KEYS[2])
if type(tok) ~= 'number' or tok > 9007199254740991 then
  return '7 ' .. ARGV[$ID]
end
local ts = string.format('%d', tok)
redis.call('SET', KEYS[1], ARGV[2] .. $M .. ts .. ':' .. ARGV[1], 'PXAT', es)
return '1 ' .. ARGV[$ID] .. ' ' .. ts .. ' ' .. es
`

// srcRenew: KEYS lease; ARGV expected value (with the new TTL), ttl (µs),
// not-after (µs), id. Returns "6 ID NOW" (late), "3 ID" (stale) or
// "1 ID ES". An unmarked grant renewed for the same TTL only gets a new
// expiry (PEXPIREAT); otherwise the value is rewritten with the new TTL,
// keeping its mark.
var srcRenew = "#!lua\n" + `local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] then
  if not v then
    return '3 ' .. ARGV[4]
  end
` + fill(luaSame, "$V", "v", "$X", "1", "$FAIL", "return '3 ' .. ARGV[4]") + fill(luaTime, "$NA", "3", "$TTL", "2") + `  redis.call('SET', KEYS[1], ARGV[2] .. string.sub(v, i), 'PXAT', es)
  return '1 ' .. ARGV[4] .. ' ' .. es
end
` + fill(luaTime, "$NA", "3", "$TTL", "2") + `redis.call('PEXPIREAT', KEYS[1], es)
return '1 ' .. ARGV[4] .. ' ' .. es
`

// srcRenewBatch: KEYS lease keys; ARGV the expected value per key, then
// one ttl (µs) and one not-after (µs) for the whole batch, then the id.
// Returns "6 ID NOW" (late) or "1 ID ES STATUSES": ES the expiry (in ms,
// minus 1) of every key renewed, all renewed for the one TTL from one
// TIME reading, and one status byte per key, '1' (renewed) or '3'
// (stale). One MGET reads every key before the first write. Only for a
// standalone server (the keys live on different slots).
//
// The TTL is the batch's, so that the expiry is computed and formatted
// once; the client sends renewals of other TTLs in calls of their own.
// The reply is one line like every other script's: an array of two
// elements per key cost the server a table entry, a number conversion and
// a RESP element per key, and the client a reply element per key.
var srcRenewBatch = "#!lua\n" + `local n = #KEYS
local vs = redis.call('MGET', unpack(KEYS))
local st = {}
for k = 1, n do
  local v = vs[k]
  if v == ARGV[k] then
    st[k] = '1'
  elseif not v then
    st[k] = '3'
  else
    st[k] = '2'
` + fill(luaSame, "$V", "v", "$X", "k", "$FAIL", "st[k] = '3'") + `  end
end
` + fill(luaTime, "$NA", "n+2", "$TTL", "n+1") + `for k = 1, n do
  local s = st[k]
  if s == '1' then
    redis.call('PEXPIREAT', KEYS[k], es)
  elseif s == '2' then
    local v = vs[k]
    redis.call('SET', KEYS[k], ARGV[n+1] .. string.sub(v, (string.find(v, '[:!]'))), 'PXAT', es)
    st[k] = '1'
  end
end
return '1 ' .. ARGV[n+3] .. ' ' .. es .. ' ' .. table.concat(st)
`

// srcValidate: KEYS lease; ARGV expected value, id. Writes nothing.
// Returns "1 ID EXPIRY VALUE" (EXPIRY: the key's PEXPIRETIME, the grant's
// expiry in ms minus 1; VALUE: the lease value) or "3 ID" (stale).
var srcValidate = `#!lua flags=no-writes
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] then
  if not v then
    return '3 ' .. ARGV[2]
  end
` + fill(luaSame, "$V", "v", "$X", "1", "$FAIL", "return '3 ' .. ARGV[2]") + `end
return '1 ' .. ARGV[2] .. ' ' .. redis.call('PEXPIRETIME', KEYS[1]) .. ' ' .. v
`

// srcRelease: KEYS lease; ARGV expected value, id. Returns "1 ID"
// (released, and published if a watcher marked the grant), "8 ID" (no
// live grant: nothing written; srcReleaseEnded tells the rest) or "3 ID"
// (stale: another grant is live).
//
// The notification goes only out when the grant is marked, with the
// message E, cut from the lease key's name "P:{E}:lease": to the channel
// "P:released:ID" of the Store ID first in the key's wait set "P:{E}:wait"
// (popped from it: ZPOPMIN), or, when no Store is queued (the mark was
// made by a Store of an older version of this package, which queues
// nothing), to every Store's channel "P:released". The wait set is not a
// declared key: declaring it would cost every release about 2k
// instructions, and only a marked release touches it; it shares the lease
// key's hash tag, so it lives on the script's slot.
//
// The token counter is not a key of this script: a declared key costs
// the server about 2k instructions per call (callgrind: 31.3k -> 29.3k
// per release, the floor's 25.5k), and only a grant that already ended
// needs it, so that case takes a second call.
var srcRelease = `#!lua
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return '1 ' .. ARGV[2]
end
if not v then
  return '8 ' .. ARGV[2]
end
` + fill(luaSame, "$V", "v", "$X", "1", "$FAIL", "return '3 ' .. ARGV[2]") + `redis.call('DEL', KEYS[1])
if string.byte(v, i) == 33 then
  local p, e = string.match(KEYS[1], '^(.*):{([^{}]*)}:lease$')
  local w = redis.call('ZPOPMIN', p .. ':{' .. e .. '}:wait')
  if w[1] then
    redis.call('PUBLISH', p .. ':released:' .. w[1], e)
  else
    redis.call('PUBLISH', p .. ':released', e)
  end
end
return '1 ' .. ARGV[2]
`

// srcReleaseEnded: KEYS token; ARGV token, id. Writes nothing. For a
// release whose lease key was missing (srcRelease's "8"): the grant was
// released or expired, and the counter tells whether it was the latest
// one. Returns "4 ID" (it was: idempotent success) or "3 ID" (a later
// grant exists: stale). The counter never goes down, so a "4" read after
// the lease key was found missing means no later grant existed then
// either.
var srcReleaseEnded = `#!lua flags=no-writes
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return '4 ' .. ARGV[2]
end
return '3 ' .. ARGV[2]
`

// srcInspect: KEYS lease, token; ARGV id. Writes nothing.
// Returns "1 ID EXPIRY VALUE" for a live grant (as Validate's), else
// "5 ID LAST" with LAST the counter's text (exact whatever its value).
var srcInspect = `#!lua flags=no-writes
local v = redis.call('GET', KEYS[1])
if v then
  return '1 ' .. ARGV[1] .. ' ' .. redis.call('PEXPIRETIME', KEYS[1]) .. ' ' .. v
end
return '5 ' .. ARGV[1] .. ' ' .. (redis.call('GET', KEYS[2]) or '0')
`

// srcGuard: KEYS lease, cache; ARGV expected value, value, px (ms, "0"
// for no expiry), id. Writes the cache key only if rec is the live grant.
// Returns "1 ID" or "3 ID" (stale).
var srcGuard = `#!lua
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] then
  if not v then
    return '3 ' .. ARGV[4]
  end
` + fill(luaSame, "$V", "v", "$X", "1", "$FAIL", "return '3 ' .. ARGV[4]") + `end
if ARGV[3] ~= '0' then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
else
  redis.call('SET', KEYS[2], ARGV[2])
end
return '1 ' .. ARGV[4]
`

func sha1hex(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}
