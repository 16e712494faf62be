-- count_down.lua: count a count-down latch down by one, opening it at zero
-- (Redisson RCountDownLatch layout; Redisson's countDown script, except
-- that counting down an open latch changes nothing instead of creating
-- and deleting the key).
--
-- KEYS[1]  latch key: a STRING named by the latch name itself, holding
--          the count as a decimal integer; an absent key (or a count of 0
--          or less, which Java's trySetCount(0) leaves) is an open latch
-- KEYS[2]  channel "redisson_countdownlatch__channel__{<name>}" (always
--          with these braces, as Redisson builds it)
-- ARGV[1]  publish command: "publish" or "spublish"
--
-- Returns
--   string n >= 1   counted down: KEYS[1] decremented (DECR) to n, returned
--                   as a decimal STRING (exact over the 64-bit range)
--   0        counted down to zero: the latch opened; KEYS[1] deleted and
--            "0" published on KEYS[2] (Redisson's zero-count message)
--   -1       the latch was open already: nothing changed, nothing
--            published (Redisson's script would DECR the absent key to -1
--            and delete it: no net change either)
--
-- Errors (nothing is changed)
--   WRONGTYPE when KEYS[1] holds another type.
--   BADCOUNT when KEYS[1] is a string but not a decimal integer in the
--   signed 64-bit range (without leading zeros).
--
-- Prepended: lua/common/integer.lua

local value = redis.call('get', KEYS[1])
if value == false then
    return -1
end
if not integer(value) then
    return redis.error_reply('BADCOUNT latch ' .. KEYS[1] .. ' does not hold a count')
end
-- (Signs are exact in Lua numbers, even where the magnitude is not.)
if tonumber(value) <= 0 then
    return -1
end
local v = redis.call('decr', KEYS[1])
if v <= 0 then
    redis.call('del', KEYS[1])
    redis.call(ARGV[1], KEYS[2], '0')
    return 0
end
return redis.call('get', KEYS[1])
