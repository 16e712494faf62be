-- status.lua: count the available and the held permits of a
-- permit-expirable semaphore (Redisson's availablePermits, acquiredPermits
-- and getPermits in one call).
--
-- KEYS[1]  semaphore key (STRING, see acquire.lua)
-- KEYS[2]  held permits "{<name>}:timeout" (ZSET, see acquire.lua)
-- KEYS[3]  channel "redisson_sc:{<name>}" (see acquire.lua)
-- ARGV[1]  publish command: "publish" or "spublish"
--
-- First, expired permits are reclaimed (see acquire.lua).
--
-- Returns
--   {available, held}  KEYS[1]'s count as a decimal STRING ("0" when
--                      absent; exact over the 64-bit range) and the number
--                      of members of KEYS[2] (an integer); their sum is
--                      Redisson's permits
--
-- Errors (nothing is changed)
--   WRONGTYPE when KEYS[1] is not a STRING or KEYS[2] not a ZSET.
--   BADCOUNT when KEYS[1] is a string but not a decimal integer in the
--   signed 64-bit range (without leading zeros).
--   OVERFLOW when giving the expired permits back would take KEYS[1]
--   past the signed 64-bit range.
--
-- Prepended: lua/common/integer.lua, lua/common/add.lua, lua/common/clock.lua, lua/common/permits.lua

local bad = check_permits()
if bad then
    return bad
end

local now = now_ms()

local failed = reclaim(now, ARGV[1], KEYS[3])
if failed then
    return failed
end

local value = redis.call('get', KEYS[1])
if value == false then
    value = '0'
end
return {value, redis.call('zcard', KEYS[2])}
