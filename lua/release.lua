-- release.lua: give back one hold of a reentrant lock (Redisson RLock layout,
-- with Redisson 3.24+'s unlock latch for retried releases).
--
-- KEYS[1]  lock key (HASH)
-- KEYS[2]  unlock channel "redisson_lock__channel:{<name>}"
-- KEYS[3]  optional unlock latch "redisson_unlock_latch:{<name>}:<32 hex>": one
--          key per owner and lock, reused by each of its releases
-- ARGV[1]  unlock message published on the final release ("0": wake one waiter)
-- ARGV[2]  lease in milliseconds re-applied while holds remain
-- ARGV[3]  owner id "<client-uuid>:<thread-id>"
-- ARGV[4]  optional publish command, "publish" (default) or "spublish"
-- ARGV[5]  latch TTL in milliseconds (required with KEYS[3])
-- ARGV[6]  request id: a decimal number unique to this release (required
--          with KEYS[3]); a retry of the same release sends the same id
-- ARGV[7]  optional "1" on a retry
--
-- Returns
--   nil  the owner holds nothing here (never held, expired, or force-unlocked);
--        nothing was changed
--   0    one hold released, others remain; the key's PTTL was reset to ARGV[2]
--   1    last hold released: the key was deleted and ARGV[1] published on KEYS[2]
-- With a latch, "<request id>:<outcome>" is stored in KEYS[3] for ARGV[5] ms,
-- and a retry whose request id is stored there returns that outcome without
-- changing anything: a release whose reply was lost can be retried without
-- decrementing twice. (Redisson keys its latch by a random id per release and
-- deletes it afterwards; one reused key per owner needs no deletion.)
--
-- Errors
--   WRONGTYPE when a key of another type sits at the lock's name (untouched).
local key, latch = KEYS[1], KEYS[3]
if latch and ARGV[7] == '1' then
    local earlier = redis.call('get', latch)
    if earlier then
        local id, outcome = string.match(earlier, '^(%d+):(%d+)$')
        if id == ARGV[6] then
            return tonumber(outcome)
        end
    end
end
if redis.call('hexists', key, ARGV[3]) == 0 then
    return nil
end
local outcome = 1
if redis.call('hincrby', key, ARGV[3], -1) > 0 then
    redis.call('pexpire', key, ARGV[2])
    outcome = 0
else
    redis.call('del', key)
    redis.call(ARGV[4] or 'publish', KEYS[2], ARGV[1])
end
if latch then
    redis.call('set', latch, ARGV[6] .. ':' .. outcome, 'px', ARGV[5])
end
return outcome
