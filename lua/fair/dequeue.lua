-- fair/dequeue.lua: a waiter of a fair lock gives up (its deadline passed):
-- it leaves the queue (Redisson's acquireFailed), and passes on a wake-up it
-- may have been sent meanwhile.
--
-- KEYS[1]  lock key (HASH)
-- KEYS[2]  waiter queue "redisson_lock_queue:{<name>}" (LIST)
-- KEYS[3]  waiter deadlines "redisson_lock_timeout:{<name>}" (ZSET)
-- KEYS[4]  wake channel prefix "redisson_lock__channel:{<name>}"
-- KEYS[5]  waiter grants (keyholder's own key, see fair/acquire.lua)
-- ARGV[1]  owner id of the waiter giving up "<client-uuid>:<thread-id>"
-- ARGV[2]  wait slot in milliseconds (see fair/acquire.lua)
-- ARGV[3]  publish command, "publish" (default) or "spublish"
--
-- As Redisson's: every waiter queued after ARGV[1] has its deadline lowered
-- by ARGV[2] (one slot fewer to wait for), then ARGV[1] is removed from
-- KEYS[3] and KEYS[2]. keyholder's additions: its entry in KEYS[5] goes; a
-- lock a release handed it meanwhile (a field of ARGV[1] in KEYS[1]: the
-- waiter has no hold of its own) is deleted; and when that freed the lock,
-- or ARGV[1] was the head of a free lock, "0" is published on the new
-- head's wake channel "<KEYS[4]>:<head>", so that no turn is lost.
--
-- Returns
--   2  a release had handed the lock to ARGV[1]: it was given back
--   1  ARGV[1] was queued and is no longer
--   0  neither; nothing was changed
--
-- Errors (nothing is changed)
--   WRONGTYPE when a key of another type sits at KEYS[1], KEYS[2], KEYS[3]
--   or KEYS[5], or KEYS[1] is a read-write lock's hash (it has a "mode"
--   field).
--
-- Prepended: lua/common/kinds.lua, lua/common/fair.lua
local key, queue, timeouts, prefix, grants = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner, slot = ARGV[1], tonumber(ARGV[2])
local publish = ARGV[3] or 'publish'

local bad = check_fair_keys(key, {{key, 'hash'}, {queue, 'list'}, {timeouts, 'zset'}, {grants, 'hash'}})
if bad then
    return bad
end

local items = redis.call('lrange', queue, 0, -1)
local position = nil
for i, item in ipairs(items) do
    if position then
        redis.call('zincrby', timeouts, -slot, item)
    elseif item == owner then
        position = i
    end
end
local removed = redis.call('zrem', timeouts, owner)
redis.call('hdel', grants, owner)
if position then
    redis.call('lrem', queue, 0, owner)
    removed = 1
end
local handed = redis.call('hexists', key, owner) == 1
if handed then
    redis.call('del', key)
end
local head = redis.call('lindex', queue, 0)
if head and (handed or position == 1) and redis.call('exists', key) == 0 then
    redis.call(publish, prefix .. ':' .. head, '0')
end
if handed then
    return 2
end
return removed
