-- renew.lua: extend the leases of held permits of a permit-expirable
-- semaphore (Redisson's updateLeaseTime, for several ids at once; the
-- watchdog's renewal of permits whose holder is alive).
--
-- KEYS[1]  semaphore key (STRING, see acquire.lua)
-- KEYS[2]  held permits "{<name>}:timeout" (ZSET, see acquire.lua)
-- KEYS[3]  channel "redisson_sc:{<name>}" (see acquire.lua)
-- ARGV[1]  new lease in milliseconds (>= 1), counted from the server's now
-- ARGV[2]  publish command: "publish" or "spublish"
-- ARGV[3..]  permit ids (16 raw bytes each), at least one
--
-- First, expired permits are reclaimed (see acquire.lua): an id whose lease
-- had run out is gone by then, and its permit is back in the pool.
--
-- Returns
--   array  one integer per id, in order: 1 renewed (its score set to now +
--          ARGV[1] with ZADD XX), 0 not held (never held, released, or
--          expired and reclaimed): the holder lost that permit
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

local failed = reclaim(now, ARGV[2], KEYS[3])
if failed then
    return failed
end

local expiry = now + tonumber(ARGV[1])
local renewed = {}
for i = 3, #ARGV do
    if redis.call('zscore', KEYS[2], ARGV[i]) then
        redis.call('zadd', KEYS[2], 'xx', expiry, ARGV[i])
        renewed[i - 2] = 1
    else
        renewed[i - 2] = 0
    end
end
return renewed
