-- fair/dequeue.lua: a waiter of a fair lock gives up (its deadline passed):
-- it leaves the queue (Redisson's acquireFailed), and passes on a wake-up it
-- may have been sent meanwhile.
--
-- KEYS[1]  lock key (HASH)
-- KEYS[2]  waiter queue "redisson_lock_queue:{<name>}" (LIST)
-- KEYS[3]  waiter deadlines "redisson_lock_timeout:{<name>}" (ZSET)
-- KEYS[4]  wake channel prefix "redisson_lock__channel:{<name>}"
-- ARGV[1]  owner id of the waiter giving up "<client-uuid>:<thread-id>"
-- ARGV[2]  wait slot in milliseconds (see fair/acquire.lua)
-- ARGV[3]  publish command, "publish" (default) or "spublish"
--
-- As Redisson's: every waiter queued after ARGV[1] has its deadline lowered
-- by ARGV[2] (one slot fewer to wait for), then ARGV[1] is removed from
-- KEYS[3] and KEYS[2]. keyholder's addition: when ARGV[1] was the head and
-- the lock is free, "0" is published on the new head's wake channel
-- "<KEYS[4]>:<head>", so that a wake-up sent to the leaver is not lost.
--
-- Returns
--   1  ARGV[1] was queued and is no longer
--   0  it was not queued; nothing was changed
--
-- Errors (nothing is changed)
--   WRONGTYPE when a key of another type sits at KEYS[1], KEYS[2] or KEYS[3].
local key, queue, timeouts, prefix = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, slot = ARGV[1], tonumber(ARGV[2])

for _, pair in ipairs({{key, 'hash'}, {queue, 'list'}, {timeouts, 'zset'}}) do
    local kind = redis.call('type', pair[1]).ok
    if kind ~= 'none' and kind ~= pair[2] then
        return redis.error_reply('WRONGTYPE ' .. pair[1] .. ' is a ' .. kind .. ', not a ' .. pair[2])
    end
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
if not position then
    return removed
end
redis.call('lrem', queue, 0, owner)
if position == 1 and items[2] and redis.call('exists', key) == 0 then
    redis.call(ARGV[3] or 'publish', prefix .. ':' .. items[2], '0')
end
return 1
