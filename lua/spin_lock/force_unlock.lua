-- spin_lock/force_unlock.lua: delete a spin lock whoever holds it
-- (administrative escape hatch), publishing nothing, as Redisson's
-- RedissonSpinLock.forceUnlock.
--
-- KEYS[1]  lock key (HASH)
-- ARGV[1]  none: the script takes no arguments (ARGV is ignored)
--
-- Returns
--   1  the lock existed and was deleted
--   0  there was no lock
--
-- Errors
--   WRONGTYPE when a key of another type sits at the lock's name, or a
--   read-write lock's hash (it has a "mode" field): keyholder never deletes
--   what it did not create.
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
return 1
