-- handoff.lua: give back the last hold of a reentrant lock and, in the same
-- step, give the lock to another thread of the same client that waits for it:
-- one round trip instead of a release and an acquire, and no unlock message,
-- since the lock never becomes free.
--
-- KEYS[1]  lock key (HASH)
-- KEYS[2]  unlock channel "redisson_lock__channel:{<name>}"
-- KEYS[3]  claim marker (see acquire.lua: only a STRING with a TTL is a
--          marker; anything else there is ignored and left alone)
-- KEYS[4]  optional latch of ARGV[3] (see release.lua: anything but a latch
--          at its name is left alone, and the hand-off runs unlatched)
-- ARGV[1]  unlock message published when the lock is released instead ("0")
-- ARGV[2]  lease in milliseconds for the new owner
-- ARGV[3]  owner id giving the lock back
-- ARGV[4]  owner id receiving it
-- ARGV[5]  publish command, "publish" or "spublish"
-- ARGV[6]  latch TTL in milliseconds (required with KEYS[4])
-- ARGV[7]  request id, as for release.lua (required with KEYS[4])
-- ARGV[8]  optional "1" on a retry
-- ARGV[9]  client id of both owners "<client-uuid>"
--
-- Returns
--   nil  ARGV[3] holds nothing here; nothing was changed
--   0    ARGV[3] still holds other holds: one was released, the key's PTTL
--        reset to ARGV[2], nothing handed over
--   1    released, not handed over, because the marker names another client
--        (woken by an earlier release): the key was deleted and ARGV[1]
--        published on KEYS[2]
--   2    handed over: ARGV[3]'s field removed, ARGV[4]'s count set to 1 (the
--        receiver has no live hold here, so any count it had is stale), the
--        key's PTTL set to ARGV[2], and a marker naming ARGV[9] removed
-- With a latch, "<request id>:<outcome>" is stored in KEYS[4] for ARGV[6] ms,
-- and a retry with the same request id returns that outcome without changing
-- anything.
--
-- Errors
--   WRONGTYPE when a key of another type sits at the lock's name, or a
--   read-write lock's hash (it has a "mode" field): untouched.
local key, from, to, latch = KEYS[1], ARGV[3], ARGV[4], KEYS[4]
-- As in release.lua: the latch's value, "" when absent, nil when not a latch.
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
elseif earlier and ARGV[8] == '1' then
    local id, outcome = string.match(earlier, '^(%d+):(%d+)$')
    if id == ARGV[7] then
        return tonumber(outcome)
    end
end
local held = redis.call('hmget', key, from, 'mode')
if held[2] then
    return redis.error_reply('WRONGTYPE ' .. key .. ' holds another kind\'s lock: a read-write lock (a hash with a "mode" field)')
end
if not held[1] then
    return nil
end
local outcome
if redis.call('hincrby', key, from, -1) > 0 then
    redis.call('pexpire', key, ARGV[2])
    outcome = 0
else
    local next_owner = redis.call('type', KEYS[3]).ok == 'string'
        and redis.call('pttl', KEYS[3]) > 0 and redis.call('get', KEYS[3])
    if next_owner and next_owner ~= ARGV[9] then
        redis.call('del', key)
        redis.call(ARGV[5], KEYS[2], ARGV[1])
        outcome = 1
    else
        if next_owner then
            redis.call('del', KEYS[3])
        end
        redis.call('hdel', key, from)
        redis.call('hset', key, to, 1)
        redis.call('pexpire', key, ARGV[2])
        outcome = 2
    end
end
if latch then
    redis.call('set', latch, ARGV[7] .. ':' .. outcome, 'px', ARGV[6])
end
return outcome
