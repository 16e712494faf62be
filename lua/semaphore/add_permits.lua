-- add_permits.lua: change a semaphore's available permits by a delta
-- (Redisson RSemaphore's addPermits), exactly over the whole 64-bit range.
--
-- KEYS[1]  semaphore key (STRING, see try_acquire.lua)
-- KEYS[2]  channel "redisson_sc:{<name>}" (see release.lua)
-- ARGV[1]  delta: a decimal integer in the signed 64-bit range, not 0 (the
--          caller checks); negative takes permits away, and may leave the
--          count below 0 as in Java
-- ARGV[2]  publish command: "publish" or "spublish"
--
-- Returns
--   string   the new count as a decimal STRING (exact, where a Lua number
--            is not past 2^53): KEYS[1] (absent = 0) plus ARGV[1], computed
--            by INCRBY, the key's TTL then dropped (PERSIST), as Redisson's
--            plain SET drops it; the count published on KEYS[2]
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
local total = redis.call('get', KEYS[1])
redis.call(ARGV[2], KEYS[2], total)
return total
