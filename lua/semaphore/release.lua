-- release.lua: give N permits back to a semaphore and wake its waiters
-- (Redisson RSemaphore layout; Redisson's release script, plus a check of
-- the stored value).
--
-- KEYS[1]  semaphore key (STRING, see try_acquire.lua)
-- KEYS[2]  channel "redisson_sc:{<name>}" ("redisson_sc:<name>" when the
--          name has a '{'), shared with Java waiters
-- ARGV[1]  permits given back: a decimal integer >= 1 (the caller checks)
-- ARGV[2]  publish command: "publish" or "spublish" (Redis Cluster shard
--          channels)
--
-- Returns
--   integer  the new number of available permits: KEYS[1] incremented by
--            ARGV[1] (INCRBY: an absent key starts from 0, a TTL is kept),
--            and that number published on KEYS[2] as a decimal string (a
--            Java waiter wakes at most that many local waiters)
--
-- Errors (nothing is changed)
--   WRONGTYPE when KEYS[1] holds another type.
--   BADCOUNT when KEYS[1] is a string but not a decimal integer.
local value = redis.call('get', KEYS[1])
if value ~= false and string.match(value, '^%-?%d+$') == nil then
    return redis.error_reply('BADCOUNT semaphore ' .. KEYS[1] .. ' does not hold a permit count')
end
local total = redis.call('incrby', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], total)
return total
