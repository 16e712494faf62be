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
-- KEYS[5]  optional listening channel (see release.lua; requires KEYS[4]),
--          to count the Redisson waiters listening
-- KEYS[6]  optional waiter grants (see acquire.lua): when its field "~idle"
--          is 6, the foreign turns of release.lua went unused six times in
--          a row (a listener that does not lock, such as a monitoring
--          SUBSCRIBE), and the hand-off does not step aside for it
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
--   3    not handed over, nothing changed: with KEYS[5], others than
--        keyholder clients listen on KEYS[2] (PUBSUB NUMSUB of KEYS[2] less
--        that of KEYS[5]; see release.lua), and, with KEYS[6], not six unused
--        foreign turns in a row: Redisson waiters, with whom the lock is
--        shared through release.lua's foreign turns, which the caller runs
--        instead
-- With a latch, "<request id>:<outcome>" is stored in KEYS[4] for ARGV[6] ms,
-- and a retry with the same request id returns that outcome without changing
-- anything.
--
-- Errors
--   WRONGTYPE when a key of another type sits at the lock's name, or a
--   read-write lock's hash (it has a "mode" field): untouched.
--
-- Prepended: lua/common/latch.lua, lua/common/kinds.lua
local key, from, to = KEYS[1], ARGV[3], ARGV[4]
local latch, replay = latch_check(KEYS[4], ARGV[7], ARGV[8] == '1')
if replay then
    return replay
end
local held = redis.call('hmget', key, from, 'mode')
if held[2] then
    return redis.error_reply('WRONGTYPE ' .. key .. RWLOCK_HERE)
end
if not held[1] then
    return nil
end
-- A last hold (the count HMGET read), with Redisson waiters listening:
-- release.lua's turn.
local listening = KEYS[5]
local last = held[1] == '1'
if listening and last then
    local numsub = ARGV[5] == 'spublish' and 'shardnumsub' or 'numsub'
    local counts = redis.call('pubsub', numsub, KEYS[2], listening)
    local others = tonumber(counts[2]) - tonumber(counts[4])
    local grants = KEYS[6]
    local idle = others > 0 and grants and redis.pcall('hget', grants, '~idle')
    if type(idle) == 'string' and tonumber(idle) == 6 then
        others = 0
    end
    if others > 0 then
        return 3
    end
end
-- A count of 1 is the last hold: not counted down first (one call fewer;
-- the field goes either way).
local outcome
if not last and redis.call('hincrby', key, from, -1) > 0 then
    redis.call('pexpire', key, ARGV[2])
    outcome = 0
else
    -- A marker is a STRING with a TTL (GET answers another type with an
    -- error reply).
    local next_owner = redis.call('pttl', KEYS[3]) > 0 and redis.pcall('get', KEYS[3])
    if type(next_owner) ~= 'string' then
        next_owner = false
    end
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
return latch_done(latch, ARGV[7], ARGV[6], outcome)
