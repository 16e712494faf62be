-- acquire.lua: take or re-enter a reentrant lock (Redisson RLock layout),
-- optionally minting a fencing token (Redisson RFencedLock layout) and
-- honouring keyholder's next-in-line marker.
--
-- KEYS[1]  lock key: a HASH named by the lock name itself
-- KEYS[2]  optional next-in-line marker "keyholder_lock_next:{<name>}": a
--          STRING holding the owner id of a waiter that has waited past its
--          client's overdue point (twice its fairness window); while it
--          exists, a free lock is only given to that owner
-- KEYS[3]  optional fencing-token counter "redisson_lock_token:{<name>}": a
--          STRING, no TTL, shared with Java's RFencedLock; incremented on
--          every acquisition made through this script with KEYS[3]
-- ARGV[1]  lease in milliseconds (the watchdog timeout, or a fixed lease)
-- ARGV[2]  owner id "<client-uuid>:<thread-id>"
-- ARGV[3]  optional "1" for a new hold: the caller has no live hold here, so
--          any count its owner id still has (a hold lost unnoticed, an acquire
--          whose reply was lost) is stale: the count is set to 1, not
--          incremented
-- ARGV[4]  optional "1" when the caller is overdue (see KEYS[2]):
--          if it does not get the lock, it becomes next in line (when nobody
--          else is) for ARGV[5] ms
-- ARGV[5]  marker TTL in milliseconds (required with ARGV[4] = "1"): how long
--          a waiter that stops retrying (it died) can hold up the others
--
-- Returns, without KEYS[3]
--   nil      acquired or re-entered: the owner's hold count was incremented
--            (set to 1 with ARGV[3]), the key's PTTL set to ARGV[1], and the
--            caller's marker removed
--   integer  not acquired; milliseconds worth waiting: the holder's PTTL
--            (-1 when a foreign writer left the key without a TTL), or, when
--            the lock is free but another owner is next in line, the
--            marker's PTTL
-- and with KEYS[3] the same as a pair: {-1, token} when acquired, token being
-- the counter's new value; {ms, -1} when not.
--
-- Errors
--   WRONGTYPE when a key of another type sits at the lock's name or the
--   counter's (nothing is changed).
local key, marker, counter, owner = KEYS[1], KEYS[2], KEYS[3], ARGV[2]

local function refuse(ms)
    if counter then
        return {ms, -1}
    end
    return ms
end

local free = redis.call('exists', key) == 0
local next_owner = free and marker and redis.call('get', marker)
if next_owner and next_owner ~= owner then
    return refuse(redis.call('pttl', marker))
end
if free or redis.call('hexists', key, owner) == 1 then
    local token = counter and redis.call('incr', counter)
    if ARGV[3] == '1' then
        redis.call('hset', key, owner, 1)
    else
        redis.call('hincrby', key, owner, 1)
    end
    redis.call('pexpire', key, ARGV[1])
    if next_owner then
        redis.call('del', marker)
    end
    if counter then
        return {-1, token}
    end
    return nil
end

local ttl = redis.call('pttl', key)
if marker and ARGV[4] == '1' then
    local next_owner = redis.call('get', marker)
    if not next_owner or next_owner == owner then
        redis.call('set', marker, owner, 'px', ARGV[5])
    end
end
return refuse(ttl)
