-- read_is_locked.lua: whether a read-write lock is held for reading
-- (Redisson RedissonReadLock.isLockedAsync).
--
-- KEYS[1]  lock key (HASH; see read_acquire.lua)
-- ARGV[1]  unused (present so the call has the usual shape; may be omitted)
--
-- Returns
--   1  mode "read", or mode "write" with more fields than "mode" and the
--      writer's (the writer also holds read holds: a downgrade)
--   0  otherwise (free, held only for writing, or not a lock hash)
local key = KEYS[1]
if redis.call('type', key).ok ~= 'hash' then
    return 0
end
local mode = redis.call('hget', key, 'mode')
if mode == 'read' or (mode == 'write' and redis.call('hlen', key) > 2) then
    return 1
end
return 0
