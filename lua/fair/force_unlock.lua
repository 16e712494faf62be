-- fair/force_unlock.lua: delete a fair lock whoever holds it, and wake the
-- head waiter (Redisson's RFairLock.forceUnlock).
--
-- KEYS[1]  lock key (HASH)
-- KEYS[2]  waiter queue "redisson_lock_queue:{<name>}" (LIST)
-- KEYS[3]  waiter deadlines "redisson_lock_timeout:{<name>}" (ZSET)
-- KEYS[4]  wake channel prefix "redisson_lock__channel:{<name>}"
-- ARGV[1]  unlock message published to the head waiter ("0")
-- ARGV[2]  now: the caller's clock in epoch milliseconds
-- ARGV[3]  publish command, "publish" (default) or "spublish"
--
-- First the dead heads are dropped (see fair/acquire.lua).
--
-- Returns
--   1  the lock existed: it was deleted and ARGV[1] published on the head's
--      wake channel "<KEYS[4]>:<head>" (when the queue has a head)
--   0  there was no lock; nothing was published
--
-- Errors (nothing is changed)
--   WRONGTYPE when a key of another type sits at KEYS[1], KEYS[2] or KEYS[3],
--   or KEYS[1] is a read-write lock's hash (it has a "mode" field):
--   keyholder never deletes what it did not create.
--
-- Prepended: lua/common/kinds.lua, lua/common/fair.lua
local key, queue, timeouts, prefix = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = tonumber(ARGV[2])

local bad = check_fair_keys(key, {{key, 'hash'}, {queue, 'list'}, {timeouts, 'zset'}})
if bad then
    return bad
end

prune(queue, timeouts, now)

if redis.call('del', key) == 0 then
    return 0
end
local head = redis.call('lindex', queue, 0)
if head then
    redis.call(ARGV[3] or 'publish', prefix .. ':' .. head, ARGV[1])
end
return 1
