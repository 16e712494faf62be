-- force_unlock.lua: delete a read-write lock held in one mode, whoever holds
-- it (Redisson RedissonReadLock / RedissonWriteLock.forceUnlockAsync).
--
-- KEYS[1]  lock key (HASH; see read_acquire.lua)
-- KEYS[2]  channel "redisson_rwlock:{<name>}"
-- ARGV[1]  the mode to force: "read" (the read lock's force unlock) or
--          "write" (the write lock's)
-- ARGV[2]  message to publish when the lock was deleted: "0" for read, as
--          Redisson's read lock does, "1" (wake all) for write
-- ARGV[3]  optional publish command, "publish" (default) or "spublish"
--
-- Returns
--   1  the lock was in mode ARGV[1]: it was deleted and ARGV[2] published
--   0  it was not (free, or in the other mode): nothing changed
-- The read holds' timeout keys are left to expire with their leases, as in
-- Redisson (they count for nothing once the hash is gone).
--
-- Errors
--   WRONGTYPE when a key of another type sits at the lock's name, or a HASH
--   without a "mode" field (another kind's lock, which its own force unlock
--   deletes): untouched.
--
-- Prepended: lua/common/kinds.lua, lua/common/force.lua
local key = KEYS[1]
local found = lock_hash(key)
if found ~= 'hash' then
    return found
end
local mode = redis.call('hget', key, 'mode')
if not mode then
    return redis.error_reply('WRONGTYPE ' .. key .. PLAIN_LOCK_HERE)
end
if mode ~= ARGV[1] then
    return 0
end
redis.call('del', key)
redis.call(ARGV[3] or 'publish', KEYS[2], ARGV[2])
return 1
