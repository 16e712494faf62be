-- force_unlock.lua: delete a lock whoever holds it (administrative escape
-- hatch): the reentrant lock's, and the spin lock's (Redisson's
-- RedissonSpinLock.forceUnlock publishes nothing: no KEYS[2]).
--
-- KEYS[1]  lock key (HASH)
-- KEYS[2]  optional unlock channel "redisson_lock__channel:{<name>}"
-- ARGV[1]  unlock message to publish on KEYS[2] when a lock was deleted ("0":
--          wake one waiter); ignored without KEYS[2]
-- ARGV[2]  optional publish command, "publish" (default) or "spublish"
--
-- Returns
--   1  the lock existed: it was deleted and, with KEYS[2], ARGV[1] published
--   0  there was no lock; nothing was published
--
-- Errors
--   WRONGTYPE when a key of another type sits at the lock's name, or a
--   read-write lock's hash (it has a "mode" field; the read-write lock's own
--   force unlock deletes it): keyholder never deletes what it did not create.
--
-- Prepended: lua/common/kinds.lua, lua/common/force.lua
local key = KEYS[1]
local found = lock_hash(key)
if found ~= 'hash' then
    return found
end
if redis.call('hexists', key, 'mode') == 1 then
    return redis.error_reply('WRONGTYPE ' .. key .. RWLOCK_HERE)
end
redis.call('del', key)
if KEYS[2] then
    redis.call(ARGV[2] or 'publish', KEYS[2], ARGV[1])
end
return 1
