#!lua
local v = redis.call('GET', KEYS[1])
if v then
  local i = string.find(v, '[:!]')
  if i and string.byte(v, i) ~= 33 then
    redis.call('SETRANGE', KEYS[1], i - 1, '!')
  end
  return '2 ' .. ARGV[4]
end
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local na = ARGV[3] + 0
if na > 0 and now > na then
  return '6 ' .. ARGV[#ARGV] .. string.format(' %d', now)
end
local e = now + ARGV[2] - 1
local es = string.format('%d', (e - e % 1000) / 1000)
local tok = redis.pcall('INCR', KEYS[2])
if type(tok) ~= 'number' or tok > 9007199254740991 then
  return '7 ' .. ARGV[4]
end
local ts = string.format('%d', tok)
redis.call('SET', KEYS[1], ARGV[2] .. ':' .. ts .. ':' .. ARGV[1], 'PXAT', es)
return '1 ' .. ARGV[4] .. ' ' .. ts .. ' ' .. es
