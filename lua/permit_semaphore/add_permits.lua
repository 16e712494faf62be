-- add_permits.lua: change a permit-expirable semaphore's available permits
-- by a delta (Redisson RPermitExpirableSemaphore's addPermits), exactly
-- over the whole 64-bit range.
--
-- KEYS[1]  semaphore key (STRING, see acquire.lua)
-- KEYS[2]  channel "redisson_sc:{<name>}" (see acquire.lua)
-- ARGV[1]  delta: a decimal integer in the signed 64-bit range, not 0 (the
--          caller checks)
-- ARGV[2]  publish command: "publish" or "spublish"
--
-- Returns
--   string   the new count as a decimal STRING (exact, where a Lua number
--            is not past 2^53): KEYS[1] (absent = 0) plus ARGV[1], computed
--            by INCRBY, the key's TTL then dropped (PERSIST), as Redisson's
--            plain SET drops it; ARGV[1] is published on KEYS[2] when it is
--            above 0 (Redisson publishes the delta here, where RSemaphore
--            publishes the new count)
--
-- Errors (nothing is changed)
--   WRONGTYPE when KEYS[1] holds another type.
--   BADCOUNT when KEYS[1] is a string but not a decimal integer in the
--   signed 64-bit range (without leading zeros).
--   OVERFLOW when the sum would leave the signed 64-bit range.
--
-- Prepended: lua/common/integer.lua, lua/common/add.lua

local bad = add_permits(KEYS[1], ARGV[1])
if bad then
    return bad
end
redis.call('persist', KEYS[1])
if string.sub(ARGV[1], 1, 1) ~= '-' then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
end
return redis.call('get', KEYS[1])
