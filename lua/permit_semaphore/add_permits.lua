-- add_permits.lua: change a permit-expirable semaphore's available permits
-- by a delta (Redisson RPermitExpirableSemaphore's addPermits).
--
-- KEYS[1]  semaphore key (STRING, see acquire.lua)
-- KEYS[2]  channel "redisson_sc:{<name>}" (see acquire.lua)
-- ARGV[1]  delta: a decimal integer, not 0 (the caller checks)
-- ARGV[2]  publish command: "publish" or "spublish"
--
-- Returns
--   integer  the new count: KEYS[1] (absent = 0) plus ARGV[1], written with
--            a plain SET as Redisson does (a TTL is dropped); ARGV[1] is
--            published on KEYS[2] when it is above 0 (Redisson publishes
--            the delta here, where RSemaphore publishes the new count)
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
if tonumber(ARGV[1]) > 0 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
end
return total
