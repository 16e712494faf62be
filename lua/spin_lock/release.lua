-- spin_lock/release.lua: give back one hold of a spin lock (Redisson
-- RedissonSpinLock's unlock: the RLock release without any publish), with
-- keyholder's per-owner unlock latch for retried releases.
--
-- KEYS[1]  lock key (HASH)
-- KEYS[2]  optional unlock latch (keyholder's own key, the one release.lua
--          uses): a STRING "<request id>:<outcome>". Any other key at its
--          name is not a latch: never read as one nor overwritten, and the
--          release runs unlatched
-- ARGV[1]  lease in milliseconds re-applied while holds remain
-- ARGV[2]  owner id "<client-uuid>:<thread-id>"
-- ARGV[3]  latch TTL in milliseconds (required with KEYS[2])
-- ARGV[4]  request id: a decimal number unique to this release (required
--          with KEYS[2]); a retry of the same release sends the same id
-- ARGV[5]  optional "1" on a retry
--
-- Returns
--   nil  the owner holds nothing here (never held, expired, or
--        force-unlocked); nothing was changed
--   0    one hold released, others remain; the key's PTTL reset to ARGV[1]
--   1    last hold released: the key was deleted
-- Nothing is ever published: a spin lock's waiters retry on their own
-- (Redisson's spin unlock publishes nothing either, so RLock waiters on the
-- same name are not woken by it and wait out their sleep).
-- With a latch, "<request id>:<outcome>" is stored in KEYS[2] for ARGV[3]
-- ms, and a retry whose request id is stored there returns that outcome
-- without changing anything.
--
-- Errors
--   WRONGTYPE when a key of another type sits at the lock's name, or a
--   read-write lock's hash (it has a "mode" field): untouched.
--
-- Prepended: lua/common/latch.lua, lua/common/kinds.lua
local key, owner = KEYS[1], ARGV[2]
local latch, replay = latch_check(KEYS[2], ARGV[4], ARGV[5] == '1')
if replay then
    return replay
end
local kind = redis.call('type', key).ok
if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE the key at the lock name is a ' .. kind .. ', not a lock hash')
end
if kind == 'none' then
    return nil
end
local held = redis.call('hmget', key, owner, 'mode')
if held[2] then
    return redis.error_reply('WRONGTYPE ' .. key .. RWLOCK_HERE)
end
if not held[1] then
    return nil
end
local outcome = 1
if redis.call('hincrby', key, owner, -1) > 0 then
    redis.call('pexpire', key, ARGV[1])
    outcome = 0
else
    redis.call('del', key)
end
return latch_done(latch, ARGV[4], ARGV[3], outcome)
