package valkey

import (
	"crypto/sha1"
	"encoding/hex"

	vk "github.com/valkey-io/valkey-go"
)

// The scripts. Each operation is exactly one of them, run by EVALSHA with
// an EVAL fallback on NOSCRIPT (vk.NewLuaScript, never the retryable
// variant: a mutation is never resent after its reply was lost).
//
// Conventions shared by every script:
//
//   - KEYS[1] is the lease hash {owner, token, acquired, expires}; KEYS[2]
//     is the token counter or (Guard) the cache key. All share one hash tag.
//   - Time is the server's TIME in microseconds since the epoch, read once
//     per script. Liveness is "expires > now", decided here, never by the
//     server's key expiry (PEXPIREAT only cleans up, strictly after expiry).
//   - Numbers are passed to redis.call and stored as strings formatted with
//     "%.0f": Lua's default number formatting uses 14 significant digits and
//     would corrupt microsecond timestamps.
//   - Every check precedes the first write, and no write can fail once the
//     checks passed, so a script that returns a server error wrote nothing.
//     The "#!lua" shebang makes the server check OOM, replica and cluster
//     slot constraints before the script runs instead of at its first write.
//   - The result is an array whose first element is a status code
//     (statusOK, statusContended, statusStale, statusGone, statusFree,
//     statusLate).
//   - Every script's last argument is the request id (reqid.go), and its
//     reply ends with it: wrap runs the script's body and appends
//     tonumber(ARGV[#ARGV]) to whatever array it returns. The replies
//     documented below are the body's, without the id.
//   - The scripts that grant or extend (acquire, renew, batched renew) take
//     a not-after bound as their last argument before the id: server time
//     in microseconds, "0" for none. When the server's TIME is past it, the
//     script writes nothing and returns {statusLate, now}; see notAfter in
//     clock.go. The bound is checked first, before any other read.
//
// Lua numbers are doubles: tokens and microsecond timestamps stay exact up
// to 2^53. Microsecond timestamps reach it in the year 2255; tokens are
// bounded by maxToken.
const (
	statusOK        = 1 // applied; further elements carry the record
	statusContended = 2 // a live grant exists
	statusStale     = 3 // rec is not the key's live (or latest) grant
	statusGone      = 4 // Release: rec's grant already ended, no later grant
	statusFree      = 5 // Inspect: no live grant; element 2 is the last token
	statusLate      = 6 // past the request's not-after bound, nothing written; element 2 is now
	statusBadToken  = 7 // Acquire: the counter cannot give an exact token; nothing granted
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

// wrap makes a script of a body that returns an array: the shebang line
// (with its flags), then the body as a function whose result gets the
// request id, the last argument, appended. A body's early returns and its
// final one are all covered; a runtime error in the body is a server error
// reply, which carries no id (see classify).
func wrap(shebang, body string) string {
	return shebang + "\nlocal function body()" + body + "end\nlocal r = body()\nr[#r+1] = tonumber(ARGV[#ARGV])\nreturn r\n"
}

// luaNow is the shared prologue: now in microseconds from the server clock.
const luaNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function s(n) return string.format('%.0f', n) end
`

// luaLate is the not-after check, on the argument named by its caller's
// local "na" (a number; 0 = no bound).
const luaLate = `
if na > 0 and now > na then
  return {6, now}
end
`

// srcAcquire: KEYS lease, token; ARGV owner, ttl (µs), not-after (µs), id.
// Returns {statusLate, now}, {statusContended}, {statusBadToken} (the
// counter is not an integer, is at its maximum or gave a token above
// maxToken: nothing granted) or {statusOK, token, acquired, expires}.
var srcAcquire = wrap("#!lua", luaNow+`
local na = tonumber(ARGV[3])
`+luaLate+`
local h = redis.call('HMGET', KEYS[1], 'owner', 'expires')
if h[1] and tonumber(h[2]) > now then
  return {2}
end
local tok = redis.pcall('INCR', KEYS[2])
if type(tok) ~= 'number' or tok > 9007199254740991 then
  return {7}
end
local exp = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', s(tok), 'acquired', s(now), 'expires', s(exp))
redis.call('PEXPIREAT', KEYS[1], s(math.floor(exp / 1000) + 1))
return {1, tok, now, exp}
`)

// srcRenew: KEYS lease; ARGV owner, token, ttl (µs), not-after (µs), id.
// Returns {statusLate, now}, {statusStale} or
// {statusOK, token, acquired, expires}.
var srcRenew = wrap("#!lua", luaNow+`
local na = tonumber(ARGV[4])
`+luaLate+`
local h = redis.call('HMGET', KEYS[1], 'owner', 'token', 'expires')
if not h[1] or h[1] ~= ARGV[1] or h[2] ~= ARGV[2] or tonumber(h[3]) <= now then
  return {3}
end
local exp = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'acquired', s(now), 'expires', s(exp))
redis.call('PEXPIREAT', KEYS[1], s(math.floor(exp / 1000) + 1))
return {1, tonumber(h[2]), now, exp}
`)

// srcRenewBatch: KEYS lease keys; ARGV owner, token, ttl (µs) per key,
// then one not-after (µs) for the whole batch, then the id.
// Returns {statusLate, now}, or status, acquired, expires per key (status
// statusOK or statusStale; times 0 when stale). All checks run before the
// first write.
var srcRenewBatch = wrap("#!lua", luaNow+`
local na = tonumber(ARGV[3*#KEYS+1])
`+luaLate+`
local live = {}
for i = 1, #KEYS do
  local h = redis.call('HMGET', KEYS[i], 'owner', 'token', 'expires')
  live[i] = h[1] and h[1] == ARGV[3*i-2] and h[2] == ARGV[3*i-1] and tonumber(h[3]) > now
end
local out = {}
for i = 1, #KEYS do
  if live[i] then
    local exp = now + tonumber(ARGV[3*i])
    redis.call('HSET', KEYS[i], 'acquired', s(now), 'expires', s(exp))
    redis.call('PEXPIREAT', KEYS[i], s(math.floor(exp / 1000) + 1))
    out[3*i-2] = 1; out[3*i-1] = now; out[3*i] = exp
  else
    out[3*i-2] = 3; out[3*i-1] = 0; out[3*i] = 0
  end
end
return out
`)

// srcValidate: KEYS lease; ARGV owner, token, id. Writes nothing.
// Returns {statusOK, acquired, expires} or {statusStale}.
var srcValidate = wrap("#!lua flags=no-writes", luaNow+`
local h = redis.call('HMGET', KEYS[1], 'owner', 'token', 'expires', 'acquired')
if not h[1] or h[1] ~= ARGV[1] or h[2] ~= ARGV[2] or tonumber(h[3]) <= now then
  return {3}
end
return {1, tonumber(h[4]), tonumber(h[3])}
`)

// srcRelease: KEYS lease, token; ARGV owner, token, channel, message, id.
// Returns {statusOK} (released and published), {statusGone} (already
// ended, no later grant: idempotent success) or {statusStale}.
//
// A lease hash that is missing was released or cleaned up after expiry;
// the counter then tells whether rec's grant was the latest one.
var srcRelease = wrap("#!lua", `
local h = redis.call('HMGET', KEYS[1], 'owner', 'token')
if not h[1] then
  if redis.call('GET', KEYS[2]) == ARGV[2] then
    return {4}
  end
  return {3}
end
if h[2] ~= ARGV[2] or h[1] ~= ARGV[1] then
  return {3}
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return {1}
`)

// srcInspect: KEYS lease, token; ARGV id. Writes nothing.
// Returns {statusOK, token, acquired, expires, owner} for a live grant,
// else {statusFree, lastToken} with lastToken the counter's text (exact
// whatever its value).
var srcInspect = wrap("#!lua flags=no-writes", luaNow+`
local h = redis.call('HMGET', KEYS[1], 'owner', 'token', 'acquired', 'expires')
if h[1] and tonumber(h[4]) > now then
  return {1, tonumber(h[2]), tonumber(h[3]), tonumber(h[4]), h[1]}
end
return {5, redis.call('GET', KEYS[2]) or '0'}
`)

// srcGuard: KEYS lease, cache; ARGV owner, token, value, px (ms, "0" for
// no expiry), id. Writes the cache key only if rec is the live grant.
// Returns {statusOK} or {statusStale}.
var srcGuard = wrap("#!lua", luaNow+`
local h = redis.call('HMGET', KEYS[1], 'owner', 'token', 'expires')
if not h[1] or h[1] ~= ARGV[1] or h[2] ~= ARGV[2] or tonumber(h[3]) <= now then
  return {3}
end
if ARGV[4] ~= '0' then
  redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
else
  redis.call('SET', KEYS[2], ARGV[3])
end
return {1}
`)

// The script objects are stateless apart from the SHA-1 they compute once,
// and safe for concurrent use.
var (
	scriptAcquire  = vk.NewLuaScript(srcAcquire)
	scriptRenew    = vk.NewLuaScript(srcRenew)
	scriptValidate = vk.NewLuaScript(srcValidate)
	scriptRelease  = vk.NewLuaScript(srcRelease)
	scriptInspect  = vk.NewLuaScript(srcInspect)
	scriptGuard    = vk.NewLuaScript(srcGuard)
)

// SHA-1 digests for the paths that build EVALSHA by hand (the pipelined
// batch and the acquire followed by WAIT on one connection).
var (
	shaAcquire = sha1hex(srcAcquire)
	shaRenew   = sha1hex(srcRenew)
	// shaRenewBatch is the batched renewal's; the batch has no vk.Lua of
	// its own since it is always pipelined.
	shaRenewBatch = sha1hex(srcRenewBatch)
)

func sha1hex(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}
