-- acquire.lua: take or re-enter a reentrant lock (Redisson RLock layout).
--
-- KEYS[1]  lock key: a HASH named by the lock name itself
-- ARGV[1]  lease in milliseconds (the watchdog timeout, or a fixed lease)
-- ARGV[2]  owner id "<client-uuid>:<thread-id>"
--
-- Returns
--   nil      acquired or re-entered: the owner's hold count was incremented
--            and the key's PTTL set to ARGV[1]
--   integer  the lock is held by another owner; the value is the key's PTTL in
--            milliseconds (-1 when a foreign writer left the key without a TTL)
--
-- Errors
--   WRONGTYPE when a key of another type sits at the lock's name (untouched).
local key = KEYS[1]
if redis.call('exists', key) == 0 or redis.call('hexists', key, ARGV[2]) == 1 then
    redis.call('hincrby', key, ARGV[2], 1)
    redis.call('pexpire', key, ARGV[1])
    return nil
end
return redis.call('pttl', key)
