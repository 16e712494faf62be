-- release.lua: give back one hold of a reentrant lock (Redisson RLock layout,
-- with Redisson 3.24+'s unlock latch for retried releases), and wake the
-- keyholder waiter whose turn it is.
--
-- KEYS[1]  lock key (HASH)
-- KEYS[2]  unlock channel "redisson_lock__channel:{<name>}"
-- KEYS[3]  optional claim marker (see acquire.lua)
-- KEYS[4]  waiter queue (see acquire.lua; required with KEYS[3])
-- KEYS[5]  optional unlock latch (keyholder's own key, see names.rs; requires
--          KEYS[3] and KEYS[4]): one key per owner and lock, reused by each
--          of its releases; a STRING "<request id>:<outcome>". Any other key at
--          its name is not a latch: it is never read as one nor overwritten,
--          and the release runs unlatched
-- ARGV[1]  unlock message published on the final release ("0": wake one waiter)
-- ARGV[2]  lease in milliseconds re-applied while holds remain
-- ARGV[3]  owner id "<client-uuid>:<thread-id>"
-- ARGV[4]  optional publish command, "publish" (default) or "spublish"
-- ARGV[5]  latch TTL in milliseconds (required with KEYS[5])
-- ARGV[6]  request id: a decimal number unique to this release (required
--          with a latch); a retry of the same release sends the same id
-- ARGV[7]  optional "1" on a retry
-- ARGV[8]  wake channel prefix (required with KEYS[3]): client <id>'s waiter
--          listens on "<prefix>:<id>"
-- ARGV[9]  claim window in milliseconds (required with KEYS[3]): the marker's
--          TTL
--
-- Returns
--   nil  the owner holds nothing here (never held, expired, or force-unlocked);
--        nothing was changed
--   0    one hold released, others remain; the key's PTTL was reset to ARGV[2]
--   1    last hold released: the key was deleted, and the queue's first
--        client whose waiter still listens was woken (see below); ARGV[1]
--        published on KEYS[2]
-- With a latch, "<request id>:<outcome>" is stored in KEYS[5] for ARGV[5] ms,
-- and a retry whose request id is stored there returns that outcome without
-- changing anything: a release whose reply was lost can be retried without
-- decrementing twice. (Redisson keys its latch by a random id per release and
-- deletes it afterwards; one reused key per owner needs no deletion.)
--
-- Waking: the queue's clients are taken from the front; each is removed, and
-- its wake channel is published its id; the first that a subscriber hears
-- (PUBLISH counts the receivers, so a client that died or stopped listening
-- counts 0) becomes the claimant: the marker names it for ARGV[9] ms. Then
-- "2" and ARGV[1] are published on KEYS[2], in that order: Redisson waiters
-- take "0" as their wake-up and ignore "2"; keyholder clients take a "0"
-- right after a "2" as already handled by the targeted wake.
--
-- Errors
--   WRONGTYPE when a key of another type sits at the lock's name (untouched).
local key, marker, queue, latch = KEYS[1], KEYS[3], KEYS[4], KEYS[5]
local publish = ARGV[4] or 'publish'
-- The latch's value, "" when it is absent, or nil when a key that is not a
-- latch sits at its name.
local function read_latch()
    local kind = redis.call('type', latch).ok
    if kind == 'none' then
        return ''
    end
    local value = kind == 'string' and redis.call('get', latch)
    if value and string.match(value, '^%d+:%d+$') then
        return value
    end
    return nil
end
local earlier = latch and read_latch()
if earlier == nil then
    latch = nil
elseif earlier and ARGV[7] == '1' then
    local id, outcome = string.match(earlier, '^(%d+):(%d+)$')
    if id == ARGV[6] then
        return tonumber(outcome)
    end
end

-- Wakes the first queued client that still listens; returns whether one was.
local function wake_next()
    if not queue or redis.call('type', queue).ok ~= 'zset' then
        return false
    end
    local kind = redis.call('type', marker).ok
    local markable = kind == 'none' or (kind == 'string' and redis.call('pttl', marker) > 0)
    while true do
        local head = redis.call('zrange', queue, 0, 0)[1]
        if not head then
            return false
        end
        redis.call('zrem', queue, head)
        if redis.call(publish, ARGV[8] .. ':' .. head, head) > 0 then
            if markable then
                redis.call('set', marker, head, 'px', ARGV[9])
            end
            return true
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
    if wake_next() then
        redis.call(publish, KEYS[2], '2')
    end
    redis.call(publish, KEYS[2], ARGV[1])
end
if latch then
    redis.call('set', latch, ARGV[6] .. ':' .. outcome, 'px', ARGV[5])
end
return outcome
