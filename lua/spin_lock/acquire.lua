-- spin_lock/acquire.lua: take or re-enter a spin lock (Redisson
-- RedissonSpinLock: the RLock hash layout, and no pub/sub at all). A refused
-- caller retries after a backoff; nobody is woken and nothing is queued.
--
-- KEYS[1]  lock key: a HASH named by the lock name itself; field = owner id,
--          value = reentrant hold count; the key's PTTL is the lease
-- ARGV[1]  lease in milliseconds (the watchdog timeout, or a fixed lease)
-- ARGV[2]  owner id "<client-uuid>:<thread-id>"
-- ARGV[3]  optional mode. "1" for a new hold: the caller holds nothing
--          here, so any count its owner id still has (a hold lost
--          unnoticed, an acquire whose reply was lost) is stale: the count
--          is set to 1, not incremented. "0" for a re-entry: it succeeds
--          only while the owner's field exists; a free lock is not taken.
--          Absent: Redisson's rule, take a free lock or increment the
--          owner's count
--
-- Returns
--   nil      acquired or re-entered: a new hold's count set to 1 (ARGV[3]
--            "1"), a re-entry's incremented; the key's PTTL set to ARGV[1]
--            (a re-entry with ARGV[3] "0" only ever lengthens it)
--   integer  not acquired: the holder's PTTL in milliseconds (-1 when a
--            foreign writer left the key without a TTL); -2 for a re-entry
--            (ARGV[3] "0") that found the lock free
-- Nothing is ever published.
--
-- Errors (nothing is changed)
--   WRONGTYPE when a key of another type sits at the lock's name, or a
--   read-write lock's hash (it has a "mode" field, and its read holders'
--   fields look like owner ids).
--
-- Prepended: lua/common/kinds.lua
local key, owner, mode = KEYS[1], ARGV[2], ARGV[3]
local lease = tonumber(ARGV[1])
local kind = redis.call('type', key).ok
if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE the key at the lock name is a ' .. kind .. ', not a lock hash')
end
local held = false
if kind == 'hash' then
    local got = redis.call('hmget', key, owner, 'mode')
    if got[2] then
        return redis.error_reply('WRONGTYPE ' .. key .. RWLOCK_HERE)
    end
    held = got[1] ~= false
end

if mode == '0' then
    if not held then
        return redis.call('pttl', key)
    end
    redis.call('hincrby', key, owner, 1)
    if redis.call('pttl', key) < lease then
        redis.call('pexpire', key, lease)
    end
    return nil
end

if kind == 'none' or held then
    if mode == '1' then
        redis.call('hset', key, owner, 1)
    else
        redis.call('hincrby', key, owner, 1)
    end
    redis.call('pexpire', key, lease)
    return nil
end
return redis.call('pttl', key)
