-- job_finish.lua: end a run-once job's hold (see src/kinds/job.rs): keep the lock
-- for the rest of its minimum hold time, or release it.
--
-- KEYS[1]  lock key: a HASH holding the run's own owner id (one per run, so
--          nothing re-enters it, not even the same thread's next run)
-- KEYS[2]  unlock channel "redisson_lock__channel:{<name>}"
-- ARGV[1]  the run's owner id "<client-uuid>:<number>"
-- ARGV[2]  milliseconds to keep the lock: what is left of the job's minimum
--          hold time ("0": release it now)
-- ARGV[3]  unlock message to publish on a release ("0": wake one waiter)
-- ARGV[4]  optional publish command, "publish" (default) or "spublish"
--
-- Returns
--   0  the run no longer holds the lock (it expired, was force-unlocked, or
--      is another key's now, a read-write lock's hash included): nothing
--      was changed
--   1  kept: the key's PTTL set to ARGV[2] when that shortens it (never
--      lengthened), nothing published; it expires by itself
--   2  released: the key deleted and ARGV[3] published on KEYS[2]
local key = KEYS[1]
if redis.call('type', key).ok ~= 'hash' then
    return 0
end
local held = redis.call('hmget', key, ARGV[1], 'mode')
if not held[1] or held[2] then
    return 0
end
local keep = tonumber(ARGV[2])
if keep > 0 then
    local ttl = redis.call('pttl', key)
    if ttl < 0 or ttl > keep then
        redis.call('pexpire', key, keep)
    end
    return 1
end
redis.call('del', key)
redis.call(ARGV[4] or 'publish', KEYS[2], ARGV[3])
return 2
