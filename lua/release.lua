-- release.lua: give back one hold of a reentrant lock (Redisson RLock layout).
--
-- KEYS[1]  lock key (HASH)
-- KEYS[2]  unlock channel "redisson_lock__channel:{<name>}"
-- ARGV[1]  unlock message published on the final release ("0": wake one waiter)
-- ARGV[2]  lease in milliseconds re-applied while holds remain
-- ARGV[3]  owner id "<client-uuid>:<thread-id>"
--
-- Returns
--   nil  the owner holds nothing here (never held, expired, or force-unlocked);
--        nothing was changed
--   0    one hold released, others remain; the key's PTTL was reset to ARGV[2]
--   1    last hold released: the key was deleted and ARGV[1] published on KEYS[2]
--
-- Errors
--   WRONGTYPE when a key of another type sits at the lock's name (untouched).
local key = KEYS[1]
if redis.call('hexists', key, ARGV[3]) == 0 then
    return nil
end
local remaining = redis.call('hincrby', key, ARGV[3], -1)
if remaining > 0 then
    redis.call('pexpire', key, ARGV[2])
    return 0
end
redis.call('del', key)
redis.call('publish', KEYS[2], ARGV[1])
return 1
