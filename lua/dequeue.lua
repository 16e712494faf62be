-- dequeue.lua: a keyholder client whose waiter gives up leaves the queue, and
-- passes on the turn it was woken for.
--
-- KEYS[1]  waiter queue (see acquire.lua)
-- KEYS[2]  claim marker (see acquire.lua); a key of another type there is not
--          a marker and is left alone
-- KEYS[3]  lock key (HASH)
-- KEYS[4]  unlock channel "redisson_lock__channel:{<name>}"
-- ARGV[1]  client id "<client-uuid>"
-- ARGV[2]  unlock message ("0")
-- ARGV[3]  publish command, "publish" or "spublish"
--
-- Returns
--   1  the marker named ARGV[1]: it was deleted, and, the lock being free,
--      ARGV[2] was published on KEYS[4] so that the other waiters try
--   0  otherwise; ARGV[1] is no longer queued either way
if redis.call('type', KEYS[1]).ok == 'zset' then
    redis.call('zrem', KEYS[1], ARGV[1])
end
if redis.call('type', KEYS[2]).ok == 'string' and redis.call('get', KEYS[2]) == ARGV[1] then
    redis.call('del', KEYS[2])
    if redis.call('exists', KEYS[3]) == 0 then
        redis.call(ARGV[3], KEYS[4], ARGV[2])
    end
    return 1
end
return 0
