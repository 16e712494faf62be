-- release.lua: give N permits back to a semaphore and wake its waiters
-- (Redisson RSemaphore layout; Redisson's release script, plus a check of
-- the stored value and of overflow).
--
-- KEYS[1]  semaphore key (STRING, see try_acquire.lua)
-- KEYS[2]  channel "redisson_sc:{<name>}" ("redisson_sc:<name>" when the
--          name has a '{'), shared with Java waiters
-- ARGV[1]  permits given back: a decimal integer >= 1 (the caller checks)
-- ARGV[2]  publish command: "publish" or "spublish" (Redis Cluster shard
--          channels)
--
-- Returns
--   {count, listeners}
--            count: the new number of available permits as a decimal
--            STRING (exact over the 64-bit range): KEYS[1] incremented by
--            ARGV[1] (INCRBY: an absent key starts from 0, a TTL is kept),
--            and that number published on KEYS[2] (a Java waiter wakes at
--            most that many local waiters); listeners: the number of
--            connections the message reached (PUBLISH's reply), which
--            tells the releasing client whether anyone waits (ADR 49)
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
local total = redis.call('get', KEYS[1])
local listeners = redis.call(ARGV[2], KEYS[2], total)
return {total, listeners}
