-- try_acquire.lua: take N permits of a semaphore, only if N are available
-- (Redisson RSemaphore layout; Redisson's tryAcquire script, plus a check of
-- the stored value).
--
-- KEYS[1]  semaphore key: a STRING named by the semaphore name itself,
--          holding the number of available permits as a decimal integer
--          (an absent key counts as 0 permits; Redisson lets the value go
--          negative through addPermits with a negative delta)
-- ARGV[1]  permits wanted: a decimal integer >= 1 (the caller checks; Java
--          answers 0 permits with true without calling Redis)
--
-- Returns
--   1  acquired: KEYS[1] decremented by ARGV[1] (DECRBY: its TTL, if any,
--      is kept)
--   0  not acquired: fewer than ARGV[1] permits available (or no key);
--      nothing changed. The caller waits for a message on the channel
--      "redisson_sc:{<name>}" (see release.lua)
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
-- Exact although Lua numbers are doubles: ARGV[1] is below 2^32, and a
-- count that rounds is above 2^53.
if tonumber(value) >= tonumber(ARGV[1]) then
    redis.call('decrby', KEYS[1], ARGV[1])
    return 1
end
return 0
