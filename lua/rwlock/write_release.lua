-- write_release.lua: give back one write hold of a read-write lock (Redisson
-- RedissonWriteLock.unlockInnerAsync), with keyholder's unlock latch for
-- retried releases (the convention of lua/release.lua).
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
local key, channel, latch = KEYS[1], KEYS[2], KEYS[3]
local message, owner = ARGV[1], ARGV[3]
local publish = ARGV[4] or 'publish'

-- The latch's value, "" when it is absent, or nil when a key that is not a
-- latch sits at its name.
local function read_latch()
    local kind = redis.call('type', latch).ok
    if kind == 'none' then
        return ''
    end
    local value = kind == 'string' and redis.call('get', latch)
    if value and string.match(value, '^%d+:%d+$') then
        return value
    end
    return nil
end
local earlier = latch and read_latch()
if earlier == nil then
    latch = nil
elseif earlier and ARGV[7] == '1' then
    local id, outcome = string.match(earlier, '^(%d+):(%d+)$')
    if id == ARGV[6] then
        return tonumber(outcome)
    end
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
    return redis.error_reply('WRONGTYPE ' .. key .. ' holds another kind\'s lock: a lock hash without a "mode" field (a Lock, SpinLock or FairLock)')
end
if mode ~= 'write' or redis.call('hexists', key, owner) == 0 then
    return nil
end

local function finish(outcome)
    if latch then
        redis.call('set', latch, ARGV[6] .. ':' .. outcome, 'px', ARGV[5])
    end
    return outcome
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
