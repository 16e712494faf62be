-- drain.lua: take every available permit of a semaphore at once (Redisson
-- RSemaphore's drainPermits).
--
-- KEYS[1]  semaphore key (STRING, see try_acquire.lua)
-- ARGV[1]  unused (no arguments; documented for the header check)
--
-- Returns
--   string   the count before the call, as a decimal STRING (exact over the
--            64-bit range): KEYS[1] set to 0 with a plain SET as Redisson
--            does (a TTL is dropped)
--   0        KEYS[1] is absent, and stays absent. Nothing is published
--            (nobody can acquire)
--
-- Errors (nothing is changed)
--   WRONGTYPE when KEYS[1] holds another type.
--   BADCOUNT when KEYS[1] is a string but not a decimal integer in the
--   signed 64-bit range (without leading zeros).
--
-- Prepended: lua/common/integer.lua

local value = redis.call('get', KEYS[1])
if value == false then
    return 0
end
if not integer(value) then
    return redis.error_reply('BADCOUNT semaphore ' .. KEYS[1] .. ' does not hold a permit count')
end
redis.call('set', KEYS[1], 0)
return value
