-- write_acquire.lua: take or re-enter the write hold of a read-write lock
-- (Redisson RedissonWriteLock.tryLockInnerAsync), optionally minting a
-- fencing token (the RFencedLock counter), refusing a read-to-write upgrade,
-- and registering the caller as a waiting writer so that new keyholder
-- readers let it in first.
--
-- KEYS[1]  lock key (HASH; see read_acquire.lua)
-- KEYS[2]  optional waiting writers (keyholder's own key): a ZSET of the
--          write owner ids of keyholder writers waiting for this lock, scored
--          by the server time (ms) after which the entry is stale. New
--          keyholder read holds are refused while it has live entries
--          (read_acquire.lua). A key of another type is ignored, never written
-- KEYS[3]  optional fencing-token counter "redisson_lock_token:{<name>}": a
--          STRING holding a decimal integer, no TTL, shared with Java's
--          RFencedLock and keyholder's fenced Lock; every acquisition made
--          with KEYS[3] mints a token into it (lua/common/fencing.lua;
--          requires KEYS[2])
-- ARGV[1]  lease in milliseconds (the watchdog timeout, or a fixed lease)
-- ARGV[2]  write owner id "<client-uuid>:<thread-id>:write"
-- ARGV[3]  optional read owner id of the same thread "<client-uuid>:<thread-id>"
--          ("" for none): if that owner holds a read hold while the lock is
--          in mode "read", the call is refused with -3 (an upgrade, which
--          Redisson never grants: waiting would never end)
-- ARGV[4]  optional "1": on refusal, record the caller in KEYS[2] as a
--          waiting writer, stale after min(PTTL, ARGV[5]) + ARGV[6] ms (the
--          longest the caller sleeps before it tries again, plus slack)
-- ARGV[5]  the caller's remaining wait in milliseconds (with ARGV[4])
-- ARGV[6]  slack in milliseconds (with ARGV[4])
--
-- Returns, without KEYS[3]
--   nil      acquired: on a free lock, mode "write" and the owner's count 1,
--            PTTL ARGV[1]; a re-entry (mode "write", the owner's field
--            present) increments the count and adds ARGV[1] to the PTTL, as
--            Redisson does. The caller's entry in KEYS[2] is removed
--   integer  not acquired, the lock unchanged: the lock's PTTL (-1 when a
--            foreign writer left it without a TTL); -3 for a refused upgrade
--            (nothing changed, not recorded as waiting)
-- and with KEYS[3] the same as a pair: {-1, token} when acquired, token being
-- the minted token, the counter's new value, as a decimal STRING (exact over
-- the whole 64-bit range); {ms, -1} when not.
--
-- Errors (nothing is changed)
--   WRONGTYPE when a key of another type sits at the lock's name, or at the
--   counter ("WRONGTYPE fencing counter <key> ...").
--   BADCOUNTER when the counter holds anything but a decimal integer from 0
--   to 2^63 - 2 (no next token exists).
--   WRONGTYPE also when the HASH at the name has no "mode" field: another
--   kind's lock (a Lock, SpinLock or FairLock, whose owner fields look like
--   read holders'). Redisson's script would add "mode" to it; keyholder
--   never writes into another kind's lock.
--
-- Prepended: lua/common/fencing.lua, lua/common/kinds.lua
local key, writers, counter = KEYS[1], KEYS[2], KEYS[3]
local lease, owner, reader = tonumber(ARGV[1]), ARGV[2], ARGV[3]

local kind = redis.call('type', key).ok
if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE the key at the lock name is a ' .. kind .. ', not a lock hash')
end
if counter then
    local bad = check_counter(counter)
    if bad then
        return bad
    end
end

local writers_ok = writers and (function()
    local wkind = redis.call('type', writers).ok
    return wkind == 'none' or wkind == 'zset'
end)()

-- Mints the next token: exact, as the counter's string.
local function acquired()
    if writers_ok then
        redis.call('zrem', writers, owner)
    end
    return fenced_grant(counter)
end

local mode = kind == 'hash' and redis.call('hget', key, 'mode')
if kind == 'hash' and not mode then
    return redis.error_reply('WRONGTYPE ' .. key .. PLAIN_LOCK_HERE)
end
if kind == 'none' then
    redis.call('hset', key, 'mode', 'write', owner, 1)
    redis.call('pexpire', key, lease)
    return acquired()
end
if mode == 'write' and redis.call('hexists', key, owner) == 1 then
    redis.call('hincrby', key, owner, 1)
    local ttl = redis.call('pttl', key)
    redis.call('pexpire', key, math.max(ttl, 0) + lease)
    return acquired()
end
if mode == 'read' and reader and reader ~= '' and redis.call('hexists', key, reader) == 1 then
    if writers_ok then
        redis.call('zrem', writers, owner)
    end
    return fenced_refusal(counter, -3)
end

local ttl = redis.call('pttl', key)
if writers_ok and ARGV[4] == '1' then
    local now = redis.call('time')
    local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    local wait = tonumber(ARGV[5])
    if ttl > 0 and ttl < wait then
        wait = ttl
    end
    local stale = now_ms + wait + tonumber(ARGV[6])
    redis.call('zadd', writers, stale, owner)
    if redis.call('pttl', writers) < stale - now_ms then
        redis.call('pexpire', writers, stale - now_ms)
    end
end
return fenced_refusal(counter, ttl)
