-- fair/release.lua: give back one hold of a fair lock (Redisson RFairLock
-- layout) and wake the head waiter only, on its own channel; latched for
-- retried releases as release.lua is.
--
-- KEYS[1]  lock key (HASH)
-- KEYS[2]  waiter queue "redisson_lock_queue:{<name>}" (LIST)
-- KEYS[3]  waiter deadlines "redisson_lock_timeout:{<name>}" (ZSET)
-- KEYS[4]  wake channel prefix "redisson_lock__channel:{<name>}"
-- KEYS[5]  waiter grants (keyholder's own key, see fair/acquire.lua)
-- KEYS[6]  optional unlock latch (see lock/release.lua): a STRING "<request
--          id>:<outcome>"; any other key at its name is not a latch and the
--          release runs unlatched
-- ARGV[1]  unlock message published to the head waiter ("0")
-- ARGV[2]  lease in milliseconds re-applied while holds remain
-- ARGV[3]  owner id "<client-uuid>:<thread-id>"
-- ARGV[4]  now: the caller's clock in epoch milliseconds
-- ARGV[5]  publish command, "publish" (default) or "spublish"
-- ARGV[6]  latch TTL in milliseconds (required with KEYS[6])
-- ARGV[7]  request id: a decimal number unique to this release (required
--          with KEYS[6]); a retry of the same release sends the same id
-- ARGV[8]  "1" on a retry, else "0"
-- ARGV[9]  grant channel prefix "keyholder_fair__grant:{<name>}": the
--          keyholder waiter <owner id> also listens on "<ARGV[9]>:<owner id>"
--
-- First the dead heads are dropped (see fair/acquire.lua). "Waking the head"
-- below means, when the queue has a head, and nothing otherwise:
--   granting  when the head has an entry "<lease> <slot> <ms> <ticket>" in
--             KEYS[5] (a keyholder waiter) and a listener hears
--             "<head>/<ticket> <server ms since <ms>>" published on
--             "<ARGV[9]>:<head>": the head is given the lock as its own
--             acquire would take it (it leaves the queue and KEYS[5], every
--             other deadline is lowered by its slot, its count is set to 1
--             and it expires its lease after the clock reading that
--             <server ms since <ms>> is measured to: PEXPIREAT);
--   waking    otherwise: publishing ARGV[1] on "<KEYS[4]>:<head>".
-- No other waiter is woken.
--
-- Returns
--   nil  the lock is held, but not by ARGV[3]; nothing was changed
--   0    one hold released, others remain; the key's PTTL was reset to ARGV[2]
--   1    last hold released: the key was deleted and the head woken
--   2    there was no lock (the hold expired or was force-unlocked): the head
--        was woken, as Redisson does (its unlock reports success here)
-- With a latch, outcomes 0 and 1 are stored as "<request id>:<outcome>" in
-- KEYS[6] for ARGV[6] ms, and a retry whose request id is stored there
-- returns that outcome without changing anything.
--
-- Errors (nothing is changed)
--   WRONGTYPE when a key of another type sits at KEYS[1], KEYS[2], KEYS[3]
--   or KEYS[5], or KEYS[1] is a read-write lock's hash (it has a "mode"
--   field).
--
-- Prepended: lua/common/latch.lua, lua/common/kinds.lua, lua/common/fair.lua
local key, queue, timeouts, prefix, grants, latch = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local owner, now = ARGV[3], tonumber(ARGV[4])
local publish = ARGV[5] or 'publish'

local bad = check_fair_keys(key, {{key, 'hash'}, {queue, 'list'}, {timeouts, 'zset'}, {grants, 'hash'}})
if bad then
    return bad
end

local replay
latch, replay = latch_check(latch, ARGV[7], ARGV[8] == '1')
if replay then
    return replay
end

prune(queue, timeouts, now, grants)

-- Hands the free lock to the head if it is a keyholder waiter that still
-- listens; true if it did.
local function grant(head)
    local entry = redis.call('hget', grants, head)
    local lease, slot, since, ticket
    if entry then
        lease, slot, since, ticket = string.match(entry, '^(%d+) (%d+) (%d+) (%d+)$')
    end
    if not ticket then
        return false
    end
    local time = redis.call('time')
    local ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    local message = head .. '/' .. ticket .. ' ' .. math.max(0, ms - tonumber(since))
    if redis.call(publish, ARGV[9] .. ':' .. head, message) == 0 then
        return false
    end
    redis.call('lpop', queue)
    redis.call('zrem', timeouts, head)
    redis.call('hdel', grants, head)
    for _, member in ipairs(redis.call('zrange', timeouts, 0, -1)) do
        redis.call('zincrby', timeouts, -tonumber(slot), member)
    end
    redis.call('hset', key, head, 1)
    -- From `ms`, the reading the message's milliseconds are measured to
    -- (see lock/release.lua): the grantee's lease never starts later.
    redis.call('pexpireat', key, string.format('%d', ms + tonumber(lease)))
    return true
end

local function wake_head()
    local head = redis.call('lindex', queue, 0)
    if head and not grant(head) then
        redis.call(publish, prefix .. ':' .. head, ARGV[1])
    end
end

if redis.call('exists', key) == 0 then
    wake_head()
    return 2
end
if redis.call('hexists', key, owner) == 0 then
    return nil
end
local outcome = 1
if redis.call('hincrby', key, owner, -1) > 0 then
    redis.call('pexpire', key, ARGV[2])
    outcome = 0
else
    redis.call('del', key)
    wake_head()
end
return latch_done(latch, ARGV[7], ARGV[6], outcome)
