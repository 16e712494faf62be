-- force_unlock.lua: delete a lock whoever holds it (administrative escape hatch).
--
-- KEYS[1]  lock key (HASH)
-- KEYS[2]  unlock channel "redisson_lock__channel:{<name>}"
-- ARGV[1]  unlock message to publish when a lock was deleted ("0": wake one waiter)
-- ARGV[2]  optional publish command, "publish" (default) or "spublish"
--
-- Returns
--   1  the lock existed: it was deleted and ARGV[1] published on KEYS[2]
--   0  there was no lock; nothing was published
--
-- Errors
--   WRONGTYPE when a key of another type sits at the lock's name, or a
--   read-write lock's hash (it has a "mode" field; the read-write lock's own
--   force unlock deletes it): keyholder never deletes what it did not create.
--
-- Prepended: lua/common/kinds.lua
local key = KEYS[1]
local kind = redis.call('type', key).ok
if kind == 'none' then
    return 0
end
if kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE the key at the lock name is a ' .. kind .. ', not a lock hash')
end
if redis.call('hexists', key, 'mode') == 1 then
    return redis.error_reply('WRONGTYPE ' .. key .. RWLOCK_HERE)
end
redis.call('del', key)
redis.call(ARGV[2] or 'publish', KEYS[2], ARGV[1])
return 1
