-- dequeue.lua: a keyholder client whose waiter gives up leaves the queue, and
-- passes on whatever turn it was given meanwhile.
--
-- KEYS[1]  waiter queue (see acquire.lua)
-- KEYS[2]  waiter grants (see acquire.lua)
-- KEYS[3]  claim marker (see acquire.lua); a key of another type there is not
--          a marker and is left alone
-- KEYS[4]  lock key (HASH)
-- KEYS[5]  unlock channel "redisson_lock__channel:{<name>}"
-- ARGV[1]  client id "<client-uuid>"
-- ARGV[2]  owner id of the waiter giving up "<client-uuid>:<thread-id>"
-- ARGV[3]  unlock message ("0")
-- ARGV[4]  publish command, "publish" or "spublish"
--
-- Returns
--   2  a release had just handed the lock to ARGV[2] (see release.lua): the
--      lock was deleted and ARGV[3] published on KEYS[5]
--   1  the marker named ARGV[1] (or a foreign turn's marker "~<ms>:<ARGV[1]>",
--      see release.lua): it was deleted, and, the lock being free,
--      ARGV[3] was published on KEYS[5] so that the other waiters try
--   0  neither; in every case ARGV[1] is no longer queued
-- A read-write lock's hash at KEYS[4] (it has a "mode" field) is never a
-- grant: it is left alone.
-- Each key's type is read by the call that uses it: redis.pcall answers a
-- key of another type with an error reply, and that key is left alone.
redis.pcall('zrem', KEYS[1], ARGV[1])
redis.pcall('hdel', KEYS[2], ARGV[1])
-- The waiter has no hold of its own (it was still waiting): a field of its
-- owner id can only be a grant it will never take.
local granted = redis.pcall('hmget', KEYS[4], ARGV[2], 'mode')
if not granted.err and granted[1] and not granted[2] then
    redis.call('del', KEYS[4])
    redis.call(ARGV[4], KEYS[5], ARGV[3])
    return 2
end
-- A foreign turn's marker "~<ms>:<client>" names its client too.
local named = redis.pcall('get', KEYS[3])
if type(named) == 'string' and (named == ARGV[1] or string.match(named, '^~%d+:(.*)$') == ARGV[1]) then
    redis.call('del', KEYS[3])
    if redis.call('exists', KEYS[4]) == 0 then
        redis.call(ARGV[4], KEYS[5], ARGV[3])
    end
    return 1
end
return 0
