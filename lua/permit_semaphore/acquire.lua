-- acquire.lua: take N permits of a permit-expirable semaphore, each under a
-- permit id of its own that expires at the end of a lease (Redisson
-- RPermitExpirableSemaphore layout; Redisson's tryAcquire script, with the
-- server's clock instead of the caller's and a check of the stored types).
--
-- KEYS[1]  semaphore key: a STRING named by the semaphore name itself,
--          holding the number of available permits (absent = 0)
-- KEYS[2]  held permits "{<name>}:timeout" ("<name>:timeout" when the name
--          has a '{'): a ZSET whose members are permit ids, 16 raw bytes
--          each (Java's 32 hex digits decoded), scored by their expiry in
--          epoch milliseconds; ARGV[3] marks a permit that never expires
-- KEYS[3]  channel "redisson_sc:{<name>}" ("redisson_sc:<name>" when the
--          name has a '{'), shared with Java waiters
-- ARGV[1]  permits wanted, N >= 1 (the caller checks); N ids follow
-- ARGV[2]  lease in milliseconds (>= 1), or "-1": the permits never expire
-- ARGV[3]  the never-expires score, "922337203685477" (Redisson's)
-- ARGV[4]  publish command: "publish" or "spublish"
-- ARGV[5..4+N]  the new permit ids, 16 raw bytes each, distinct
--
-- First, as every script on KEYS[2] does, expired permits (score <= the
-- server's now) are reclaimed: removed from KEYS[2], added back to KEYS[1],
-- and the new count published on KEYS[3] when it is above 0.
--
-- Returns
--   {1, 0}   acquired: KEYS[1] decremented by N, each id added to KEYS[2]
--            with score now + ARGV[2] (or ARGV[3]), and KEYS[2] given
--            KEYS[1]'s TTL when KEYS[1] has one (as Redisson does). A retry
--            whose ids are all held already is acquired too, without a
--            second decrement (the first call's reply was lost); their
--            expiry is set again
--   {0, ms}  not acquired: fewer than N available; ms >= 0 until the
--            nearest expiry of a held permit (a wait bound: that permit
--            will be reclaimed then); nothing changed but the reclaim
--   {0, -1}  not acquired, and no held permit has an expiry
--
-- Errors (nothing is changed)
--   WRONGTYPE when KEYS[1] is not a STRING or KEYS[2] not a ZSET.
--   BADCOUNT when KEYS[1] is a string but not a decimal integer in the
--   signed 64-bit range (without leading zeros).
--   OVERFLOW when giving the expired permits back would take KEYS[1]
--   past the signed 64-bit range.
--   BADIDS when some but not all of the ids are held already.
--
-- Prepended: lua/common/integer.lua, lua/common/add.lua, lua/common/clock.lua, lua/common/permits.lua

local never = ARGV[3]
local bad = check_permits()
if bad then
    return bad
end

local now = now_ms()

local n = tonumber(ARGV[1])
local expiry = never
if ARGV[2] ~= '-1' then
    expiry = now + tonumber(ARGV[2])
end

-- A retry of an acquire that already happened.
local held = 0
for i = 5, 4 + n do
    if redis.call('zscore', KEYS[2], ARGV[i]) then
        held = held + 1
    end
end
if held == n then
    for i = 5, 4 + n do
        redis.call('zadd', KEYS[2], expiry, ARGV[i])
    end
    return {1, 0}
end
if held > 0 then
    return redis.error_reply('BADIDS some of the new permit ids are held already')
end

local failed = reclaim(now, ARGV[4], KEYS[3])
if failed then
    return failed
end

local value = redis.call('get', KEYS[1])
-- Exact although Lua numbers are doubles: n is below 2^32, and a count
-- that rounds is above 2^53.
if value ~= false and tonumber(value) >= n then
    redis.call('decrby', KEYS[1], n)
    for i = 5, 4 + n do
        redis.call('zadd', KEYS[2], expiry, ARGV[i])
    end
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
        redis.call('pexpire', KEYS[2], ttl)
    end
    return {1, 0}
end

local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
if first[1] ~= nil and first[2] ~= never then
    return {0, math.max(tonumber(first[2]) - now, 0)}
end
return {0, -1}
