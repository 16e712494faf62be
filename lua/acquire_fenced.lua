-- acquire_fenced.lua: take a reentrant lock and mint a fencing token in the
-- same atomic step (Redisson RFencedLock layout).
--
-- KEYS[1]  lock key: a HASH named by the lock name itself
-- KEYS[2]  token counter "redisson_lock_token:{<name>}": a STRING, no TTL,
--          shared with Java's RFencedLock
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner id "<client-uuid>:<thread-id>"
--
-- Returns a two-element array
--   {-1, token}  acquired (or re-entered): the counter was incremented and
--                token is its new value; the hold count and PTTL are set as
--                by acquire.lua
--   {pttl, -1}   held by another owner; pttl as acquire.lua returns it
--
-- Errors
--   WRONGTYPE when a key of another type sits at the lock's name or the
--   counter's (nothing is changed).
local key = KEYS[1]
if redis.call('exists', key) == 0 or redis.call('hexists', key, ARGV[2]) == 1 then
    local token = redis.call('incr', KEYS[2])
    redis.call('hincrby', key, ARGV[2], 1)
    redis.call('pexpire', key, ARGV[1])
    return {-1, token}
end
return {redis.call('pttl', key), -1}
