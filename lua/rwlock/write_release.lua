-- write_release.lua: give back one write hold of a read-write lock (Redisson
-- RedissonWriteLock.unlockInnerAsync), with keyholder's unlock latch for
-- retried releases (the convention of lua/lock/release.lua).
--
-- KEYS[1]  lock key (HASH; see read_acquire.lua)
-- KEYS[2]  channel "redisson_rwlock:{<name>}"
-- KEYS[3]  optional unlock latch (keyholder's own key, one per owner and
--          lock): a STRING "<request id>:<outcome>". Any other key at its
--          name is not a latch: it is never read as one nor overwritten
-- ARGV[1]  unlock message published when the lock is freed ("1": wake all)
-- ARGV[2]  lease in milliseconds re-applied while write holds remain
-- ARGV[3]  write owner id "<client-uuid>:<thread-id>:write"
-- ARGV[4]  optional publish command, "publish" (default) or "spublish"
-- ARGV[5]  latch TTL in milliseconds (required with KEYS[3])
-- ARGV[6]  request id: a decimal number unique to this release (required
--          with KEYS[3]); a retry of the same release sends the same id
-- ARGV[7]  optional "1" on a retry
--
-- Returns
--   nil  the owner holds no write hold here (never held, expired,
--        force-unlocked, or the lock is in mode "read"); nothing was
--        changed, except that, as in Redisson, ARGV[1] is published when the
--        lock does not exist at all
--   0    one write hold released, others remain; the PTTL reset to ARGV[2]
--   1    the last write hold released: if the same thread still has read
--        holds (a downgrade), mode becomes "read" and nothing is published;
--        otherwise the key is deleted and ARGV[1] published on KEYS[2]
-- With a latch, "<request id>:<outcome>" is stored in KEYS[3] for ARGV[5] ms,
-- and a retry whose request id is stored there returns that outcome without
-- changing anything.
--
-- Errors
--   WRONGTYPE when a key of another type sits at the lock's name, or a HASH
--   without a "mode" field (another kind's lock): untouched.
--
-- Prepended: lua/common/latch.lua, lua/common/kinds.lua
local key, channel = KEYS[1], KEYS[2]
local message, owner = ARGV[1], ARGV[3]
local publish = ARGV[4] or 'publish'

local latch, replay = latch_check(KEYS[3], ARGV[6], ARGV[7] == '1')
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
if mode ~= 'write' or redis.call('hexists', key, owner) == 0 then
    return nil
end

local function finish(outcome)
    return latch_done(latch, ARGV[6], ARGV[5], outcome)
end

if redis.call('hincrby', key, owner, -1) > 0 then
    redis.call('pexpire', key, ARGV[2])
    return finish(0)
end
redis.call('hdel', key, owner)
if redis.call('hlen', key) == 1 then
    redis.call('del', key)
    redis.call(publish, channel, message)
else
    redis.call('hset', key, 'mode', 'read')
end
return finish(1)
