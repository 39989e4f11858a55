#!lua
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return '1 ' .. ARGV[2]
end
if not v then
  return '8 ' .. ARGV[2]
end
local i = string.find(v, '[:!]')
local j = string.find(ARGV[1], ':', 1, true)
if not i or not j or string.sub(v, i + 1) ~= string.sub(ARGV[1], j + 1) then
  return '3 ' .. ARGV[2]
end
redis.call('DEL', KEYS[1])
if string.byte(v, i) == 33 then
  local p, e = string.match(KEYS[1], '^(.*):{([^{}]*)}:lease$')
  redis.call('PUBLISH', p .. ':released', e)
end
return '1 ' .. ARGV[2]
