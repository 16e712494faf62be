-- write_withdraw.lua: a keyholder writer stops waiting (its deadline passed,
-- or it gave up): its entry leaves the waiting writers, and if that was the
-- last live entry the readers it held back are woken. (Redisson has no such
-- script: its writers never hold readers back.)
--
-- KEYS[1]  lock key (HASH; see read_acquire.lua)
-- KEYS[2]  waiting writers (see write_acquire.lua)
-- KEYS[3]  channel "redisson_rwlock:{<name>}"
-- ARGV[1]  write owner id "<client-uuid>:<thread-id>:write"
-- ARGV[2]  optional publish command, "publish" (default) or "spublish"
--
-- Returns
--   1  the entry was removed, no live entry remains and the lock is not held
--      for writing (free, or in mode "read"): "1" (wake all) was published
--      on KEYS[3] so that held-back readers try again
--   0  otherwise (no such entry, other writers still wait, or a writer
--      holds the lock and will publish on release); nothing published
-- Stale entries are removed on the way. A key of another type at KEYS[2] is
-- left untouched (0).
local key, writers, channel = KEYS[1], KEYS[2], KEYS[3]
if redis.call('type', writers).ok ~= 'zset' then
    return 0
end
if redis.call('zrem', writers, ARGV[1]) == 0 then
    return 0
end
local now = redis.call('time')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('zremrangebyscore', writers, '-inf', now_ms)
if redis.call('zcard', writers) > 0 then
    return 0
end
local kind = redis.call('type', key).ok
if kind == 'hash' and redis.call('hget', key, 'mode') ~= 'read' then
    return 0
end
if kind ~= 'none' and kind ~= 'hash' then
    return 0
end
redis.call(ARGV[2] or 'publish', channel, '1')
return 1
