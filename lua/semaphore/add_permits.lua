-- add_permits.lua: change a semaphore's available permits by a delta
-- (Redisson RSemaphore's addPermits).
--
-- KEYS[1]  semaphore key (STRING, see try_acquire.lua)
-- KEYS[2]  channel "redisson_sc:{<name>}" (see release.lua)
-- ARGV[1]  delta: a decimal integer, not 0 (the caller checks); negative
--          takes permits away, and may leave the count below 0 as in Java
-- ARGV[2]  publish command: "publish" or "spublish"
--
-- Returns
--   integer  the new count: KEYS[1] (absent = 0) plus ARGV[1], written with
--            a plain SET as Redisson does (so a TTL the key had is dropped),
--            and published on KEYS[2]
--
-- Errors (nothing is changed)
--   WRONGTYPE when KEYS[1] holds another type.
--   BADCOUNT when KEYS[1] is a string but not a decimal integer.
local value = redis.call('get', KEYS[1])
if value == false then
    value = '0'
end
if string.match(value, '^%-?%d+$') == nil then
    return redis.error_reply('BADCOUNT semaphore ' .. KEYS[1] .. ' does not hold a permit count')
end
local total = tonumber(value) + tonumber(ARGV[1])
redis.call('set', KEYS[1], total)
redis.call(ARGV[2], KEYS[2], total)
return total
