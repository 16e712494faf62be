-- release.lua: give back one hold of a reentrant lock (Redisson RLock layout,
-- with Redisson 3.24+'s unlock latch for retried releases).
--
-- KEYS[1]  lock key (HASH)
-- KEYS[2]  unlock channel "redisson_lock__channel:{<name>}"
-- KEYS[3]  optional unlock latch (keyholder's own key, see names.rs): one
--          key per owner and lock, reused by each of its releases; a STRING
--          "<request id>:<outcome>". Any other key at its name is not a latch:
--          it is never read as one nor overwritten, and the release runs
--          unlatched
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
