-- fair/acquire.lua: take, re-enter or queue for a fair lock (Redisson
-- RFairLock layout), optionally minting a fencing token (Redisson
-- RFencedLock's counter).
--
-- KEYS[1]  lock key: a HASH named by the lock name itself, as RLock's
-- KEYS[2]  waiter queue "redisson_lock_queue:{<name>}": a LIST of owner ids
--          in arrival order, no TTL
-- KEYS[3]  waiter deadlines "redisson_lock_timeout:{<name>}": a ZSET of the
--          queued owner ids scored by an absolute epoch-ms deadline, no TTL
-- KEYS[4]  wake channel prefix "redisson_lock__channel:{<name>}": the waiter
--          <owner id> listens on "<KEYS[4]>:<owner id>"
-- KEYS[5]  waiter grants (keyholder's own key,
--          "keyholder_fair_grants:{<name>}"): a HASH from a queued keyholder
--          owner id to "<lease ms> <slot ms> <server ms> <ticket>": how a
--          release may hand it the lock (see fair/release.lua); no TTL
--          (entries leave with their waiters)
-- KEYS[6]  optional fencing-token counter "redisson_lock_token:{<name>}"
--          (see lock/acquire.lua): every acquisition made with it mints a
--          token into it (lua/common/fencing.lua)
-- ARGV[1]  lease in milliseconds (the watchdog timeout, or a fixed lease)
-- ARGV[2]  owner id "<client-uuid>:<thread-id>"
-- ARGV[3]  wait slot in milliseconds (Redisson's fairLockWaitTimeout): how
--          long a queued waiter may go without retrying before it counts
--          as dead
-- ARGV[4]  now: the caller's clock in epoch milliseconds
-- ARGV[5]  "1" to queue when not acquired (a call that will wait); "0" to
--          never queue (a single attempt; Redisson's tryLock())
-- ARGV[6]  optional mode. "1" for a new hold: a count the owner id still
--          has is stale and is set to 1, not incremented. "0" for a
--          re-entry: only the owner's existing field is incremented, the
--          queue is neither read nor written. Absent: Redisson's rule
-- ARGV[7]  publish command, "publish" (default) or "spublish"
-- ARGV[8]  optional ticket (with ARGV[5] = "1"): a number unique to this
--          waiting call; when given, a refused caller's entry in KEYS[5] is
--          written (it accepts a lock handed over by a release), otherwise
--          removed
--
-- Every call but a re-entry first drops the dead heads: while the queue's
-- first owner id has a deadline <= ARGV[4] (or none at all), it is removed
-- from KEYS[2], KEYS[3] and KEYS[5]. If that left a free lock with a new
-- head other than ARGV[2], "0" is published on the head's wake channel.
--
-- The lock is taken when it is free and the queue is empty or ARGV[2] is its
-- head: ARGV[2] leaves the queue, every other deadline is lowered by ARGV[3]
-- (Redisson's drift fix: one slot was used), its entry in KEYS[5] goes,
-- the owner's count is set to 1 and the PTTL to ARGV[1]. A held lock is
-- re-entered by its owner (count incremented, PTTL set to ARGV[1]).
--
-- Otherwise, with ARGV[5] = "1", ARGV[2] is queued: a new waiter is appended
-- at the tail; a waiter already queued keeps its place. Either way its
-- deadline is re-armed, raised or lowered, to now + (position + 1) *
-- ARGV[3] (position 0 at the head): a live waiter that retries within
-- ARGV[3] ms is never dropped, however long the lock is held, and a dead
-- one is dropped about ARGV[3] ms after its last call, however long the
-- holder's lease. (Redisson's waiters run Redisson's script and keep its
-- rule: a new waiter's deadline is the tail's deadline, or now + the
-- lock's PTTL, plus its slot, and a retry leaves it as it is.)
--
-- Returns, without KEYS[6]
--   nil      acquired or re-entered
--   integer  not acquired; milliseconds worth waiting before trying again,
--            at least 1 and at most half of ARGV[3] when queued: the
--            holder's PTTL, or, when the lock is free but another waiter is
--            the head, the time until that head's deadline; -2 for a
--            re-entry (ARGV[6] = "0") that found no field of ARGV[2]
-- and with KEYS[6] the same as a pair: {-1, token} when acquired, token being
-- the minted token, the counter's new value, as a decimal STRING; {ms, -1}
-- when not.
--
-- Errors (nothing is changed)
--   WRONGTYPE when a key of another type sits at KEYS[1], KEYS[2], KEYS[3],
--   KEYS[5] or the counter, or KEYS[1] is a read-write lock's hash (it has
--   a "mode" field). BADCOUNTER when the counter holds anything but
--   a decimal integer from 0 to 2^63 - 2.
--
-- Prepended: lua/common/fencing.lua, lua/common/kinds.lua, lua/common/fair.lua
local key, queue, timeouts, prefix, grants, counter = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local lease, owner, slot, now = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local publish = ARGV[7] or 'publish'

local bad = check_fair_keys(key, {{key, 'hash'}, {queue, 'list'}, {timeouts, 'zset'}, {grants, 'hash'}})
if bad then
    return bad
end
if counter then
    local bad = check_counter(counter)
    if bad then
        return bad
    end
end

if ARGV[6] == '0' then
    if redis.call('hexists', key, owner) == 1 then
        redis.call('hincrby', key, owner, 1)
        if redis.call('pttl', key) < lease then
            redis.call('pexpire', key, lease)
        end
        return fenced_grant(counter)
    end
    return fenced_refusal(counter, -2)
end

-- Drops the dead heads; wakes the new head of a free lock.
local purged = prune(queue, timeouts, now, grants)
local free = redis.call('exists', key) == 0
local head = redis.call('lindex', queue, 0)
if purged and free and head and head ~= owner then
    redis.call(publish, prefix .. ':' .. head, '0')
end

if free and (not head or head == owner) then
    if head then
        redis.call('lpop', queue)
    end
    redis.call('zrem', timeouts, owner)
    redis.call('hdel', grants, owner)
    local waiting = redis.call('zrange', timeouts, 0, -1)
    for _, member in ipairs(waiting) do
        redis.call('zincrby', timeouts, -slot, member)
    end
    redis.call('hset', key, owner, 1)
    redis.call('pexpire', key, lease)
    return fenced_grant(counter)
end
if not free and redis.call('hexists', key, owner) == 1 then
    -- (A lock a release handed to a queued caller, among others.)
    redis.call('hdel', grants, owner)
    if ARGV[6] == '1' then
        redis.call('hset', key, owner, 1)
    else
        redis.call('hincrby', key, owner, 1)
    end
    redis.call('pexpire', key, lease)
    return fenced_grant(counter)
end

local pttl = redis.call('pttl', key)
if ARGV[5] ~= '1' then
    return fenced_refusal(counter, math.max(pttl, 1))
end

-- Queues the caller, or keeps its place, and re-arms its deadline at its
-- place: lowered as well as raised, so that a dead waiter's deadline
-- lapses a slot after its last call, not after the holder's lease.
local items = redis.call('lrange', queue, 0, -1)
local position = nil
for i, item in ipairs(items) do
    if item == owner then
        position = i - 1
        break
    end
end
if not position then
    -- (A deadline without a place, not Redisson's doing, is overwritten.)
    redis.call('rpush', queue, owner)
    position = #items
end
redis.call('zadd', timeouts, now + (position + 1) * slot, owner)
if ARGV[8] then
    local time = redis.call('time')
    local ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    redis.call('hset', grants, owner, ARGV[1] .. ' ' .. ARGV[3] .. ' ' .. ms .. ' ' .. ARGV[8])
else
    redis.call('hdel', grants, owner)
end

local wait
if free then
    wait = tonumber(redis.call('zscore', timeouts, head)) - now
elseif pttl >= 0 then
    wait = pttl
else
    wait = slot
end
return fenced_refusal(counter, math.max(1, math.min(wait, math.floor(slot / 2))))
