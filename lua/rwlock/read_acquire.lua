-- read_acquire.lua: take or re-enter a read hold of a read-write lock
-- (Redisson RReadWriteLock layout, RedissonReadLock.tryLockInnerAsync), with
-- keyholder's writer preference: a new read hold is refused while a
-- keyholder writer waits (see write_acquire.lua).
--
-- KEYS[1]  lock key: a HASH named by the lock name itself; field "mode" is
--          "read" or "write", read holders "<client-uuid>:<thread-id>" and
--          the write holder "<client-uuid>:<thread-id>:write" map to their
--          hold counts
-- KEYS[2]  this owner's timeout-key prefix
--          "{<name>}:<client-uuid>:<thread-id>:rwlock_timeout" (or
--          "<name>:..." when the name has a "{"): hold n of this owner has
--          the STRING "<KEYS[2]>:<n>" = "1" whose PTTL is that hold's lease
-- KEYS[3]  optional waiting writers (keyholder's own key): a ZSET of the
--          write owner ids of keyholder writers waiting for this lock,
--          scored by the server time (ms) after which the entry is stale.
--          A key of another type is ignored and never written
-- ARGV[1]  lease in milliseconds (the watchdog timeout, or a fixed lease)
-- ARGV[2]  read owner id "<client-uuid>:<thread-id>"
-- ARGV[3]  write owner id of the same thread "<client-uuid>:<thread-id>:write"
--
-- Returns
--   nil      acquired or re-entered: the owner's count incremented (set to 1
--            on a free lock, with mode "read"), "<KEYS[2]>:<count>" set to
--            "1" with PTTL ARGV[1], and the lock's PTTL raised to ARGV[1] if
--            it was lower (it is never cut short). Allowed when the lock is
--            free, in mode "read", or in mode "write" held by this thread's
--            write owner ARGV[3] (a downgrade, or a read inside a write)
--   integer  not acquired, nothing changed; milliseconds worth waiting: the
--            lock's PTTL (-1 when a foreign writer left it without a TTL),
--            or, when the caller would get a new read hold but a keyholder
--            writer waits (KEYS[3] holds live entries), the time until the
--            last waiting writer's entry goes stale (at least 1). Entries
--            already stale are removed first. A re-entry (the owner already
--            has a read hold) and the lock's own writer are never held back
--
-- Errors (nothing is changed)
--   WRONGTYPE when a key of another type sits at the lock's name.
--   WRONGTYPE also when the HASH at the name has no "mode" field: another
--   kind's lock (a Lock, SpinLock or FairLock, whose owner fields look like
--   read holders'). Redisson's script would add "mode" to it; keyholder
--   never writes into another kind's lock.
--
-- Prepended: lua/common/kinds.lua
local key, prefix, writers = KEYS[1], KEYS[2], KEYS[3]
local lease, owner, writer = tonumber(ARGV[1]), ARGV[2], ARGV[3]

local kind = redis.call('type', key).ok
if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE the key at the lock name is a ' .. kind .. ', not a lock hash')
end
local mode = kind == 'hash' and redis.call('hget', key, 'mode')
if kind == 'hash' and not mode then
    return redis.error_reply('WRONGTYPE ' .. key .. PLAIN_LOCK_HERE)
end

-- Writer preference: how long a new read hold must wait for the waiting
-- writers, or nil when none waits.
local function writers_wait()
    if not writers or redis.call('type', writers).ok ~= 'zset' then
        return nil
    end
    local now = redis.call('time')
    local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    redis.call('zremrangebyscore', writers, '-inf', now_ms)
    local last = redis.call('zrange', writers, -1, -1, 'withscores')
    if not last[2] then
        return nil
    end
    return math.max(1, tonumber(last[2]) - now_ms)
end

local writer_holds = mode == 'write' and redis.call('hexists', key, writer) == 1
if not (mode == false or mode == 'read' or writer_holds) then
    return redis.call('pttl', key)
end
if not writer_holds and redis.call('hexists', key, owner) == 0 then
    local wait = writers_wait()
    if wait then
        return wait
    end
end

local count = redis.call('hincrby', key, owner, 1)
if not mode then
    redis.call('hset', key, 'mode', 'read')
end
local timeout = prefix .. ':' .. count
redis.call('set', timeout, 1, 'px', lease)
if redis.call('pttl', key) < lease then
    redis.call('pexpire', key, lease)
end
return nil
