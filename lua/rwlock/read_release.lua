-- read_release.lua: give back one read hold of a read-write lock (Redisson
-- RedissonReadLock.unlockInnerAsync), with keyholder's unlock latch for
-- retried releases (the convention of lua/lock/release.lua).
--
-- KEYS[1]  lock key (HASH; see read_acquire.lua)
-- KEYS[2]  channel "redisson_rwlock:{<name>}"
-- KEYS[3]  this owner's timeout-key prefix
--          "{<name>}:<client-uuid>:<thread-id>:rwlock_timeout"
-- KEYS[4]  the lock's key prefix "{<name>}" (or "<name>" when the name has a
--          "{"): the timeout keys of read owner f are
--          "<KEYS[4]>:<f>:rwlock_timeout:<n>"
-- KEYS[5]  optional unlock latch (keyholder's own key, one per owner and
--          lock): a STRING "<request id>:<outcome>". Any other key at its
--          name is not a latch: it is never read as one nor overwritten
-- KEYS[6]  optional waiting writers (see write_acquire.lua): when it holds
--          live entries, the final release publishes "1" instead of ARGV[1]
-- ARGV[1]  unlock message published when the lock is freed ("0")
-- ARGV[2]  read owner id "<client-uuid>:<thread-id>"
-- ARGV[3]  optional publish command, "publish" (default) or "spublish"
-- ARGV[4]  latch TTL in milliseconds (required with KEYS[5])
-- ARGV[5]  request id: a decimal number unique to this release (required
--          with KEYS[5]); a retry of the same release sends the same id
-- ARGV[6]  optional "1" on a retry
--
-- Returns
--   nil  the owner holds no read hold here (never held, expired, or
--        force-unlocked); nothing was changed, except that, as in Redisson,
--        ARGV[1] is published when the lock does not exist at all
--   0    one read hold released and the lock is still held (by this
--        owner's other holds, other readers, or a writer); the lock's PTTL
--        is set to the longest remaining PTTL of the read holds' timeout
--        keys (when one is live; in mode "write" it is only ever raised, so
--        the writer's lease is not cut short)
--   1    the lock was freed: the key was deleted (no live read hold and no
--        writer left; timeout keys of dead readers, already expired, no
--        longer count) and the message published on KEYS[2]
-- With a latch, "<request id>:<outcome>" is stored in KEYS[5] for ARGV[4] ms,
-- and a retry whose request id is stored there returns that outcome without
-- changing anything.
--
-- Errors
--   WRONGTYPE when a key of another type sits at the lock's name, or a HASH
--   without a "mode" field (another kind's lock): untouched.
--
-- Prepended: lua/common/latch.lua, lua/common/kinds.lua
local key, channel, prefix, keyprefix, writers = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6]
local message, owner = ARGV[1], ARGV[2]
local publish = ARGV[3] or 'publish'

local latch, replay = latch_check(KEYS[5], ARGV[5], ARGV[6] == '1')
if replay then
    return replay
end

local kind = redis.call('type', key).ok
if kind == 'none' then
    redis.call(publish, channel, message)
    return nil
end
if kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE the key at the lock name is a ' .. kind .. ', not a lock hash')
end
local mode = redis.call('hget', key, 'mode')
if not mode then
    return redis.error_reply('WRONGTYPE ' .. key .. PLAIN_LOCK_HERE)
end
if redis.call('hexists', key, owner) == 0 then
    return nil
end

local function finish(outcome)
    return latch_done(latch, ARGV[5], ARGV[4], outcome)
end

local count = redis.call('hincrby', key, owner, -1)
if count <= 0 then
    redis.call('hdel', key, owner)
end
redis.call('del', prefix .. ':' .. (count + 1))

if redis.call('hlen', key) > 1 then
    local longest = -3
    for _, field in ipairs(redis.call('hkeys', key)) do
        local holds = tonumber(redis.call('hget', key, field))
        if holds then
            for n = holds, 1, -1 do
                local left = redis.call('pttl', keyprefix .. ':' .. field .. ':rwlock_timeout:' .. n)
                longest = math.max(longest, left)
            end
        end
    end
    if longest > 0 then
        -- A writer's lease (the lock's PTTL in mode "write") is never cut
        -- short by its own read holds' (Redisson would set it to longest).
        if mode ~= 'write' or redis.call('pttl', key) < longest then
            redis.call('pexpire', key, longest)
        end
        return finish(0)
    end
    if mode == 'write' then
        return finish(0)
    end
end

redis.call('del', key)
local waiting = false
if writers and redis.call('type', writers).ok == 'zset' then
    local now = redis.call('time')
    local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    waiting = redis.call('zcount', writers, '(' .. now_ms, '+inf') > 0
end
redis.call(publish, channel, waiting and '1' or message)
return finish(1)
