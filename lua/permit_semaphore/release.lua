-- release.lua: give back permits of a permit-expirable semaphore by their
-- ids, all or none (Redisson RPermitExpirableSemaphore layout; Redisson's
-- release of a list of ids, made all-or-nothing before any write).
--
-- KEYS[1]  semaphore key (STRING, see acquire.lua)
-- KEYS[2]  held permits "{<name>}:timeout" (ZSET, see acquire.lua)
-- KEYS[3]  channel "redisson_sc:{<name>}" (see acquire.lua)
-- ARGV[1]  publish command: "publish" or "spublish"
-- ARGV[2..]  the permit ids to give back (16 raw bytes each), at least one,
--          distinct
--
-- Returns
--   integer n >= 0  every id was in KEYS[2]: all removed, KEYS[1]
--            incremented by their number, then the other expired permits
--            reclaimed (see acquire.lua), and the new count published on
--            KEYS[3]. n counts the ids that were still live (score > the
--            server's now); the others had expired (their holder lost them)
--            but were not reclaimed yet, so each permit returns exactly once
--   -1       some id is not in KEYS[2] (never held, released already, or
--            reclaimed after it expired): nothing changed, not even the
--            reclaim
--
-- Errors (nothing is changed)
--   WRONGTYPE when KEYS[1] is not a STRING or KEYS[2] not a ZSET.
--   BADCOUNT when KEYS[1] is a string but not a decimal integer in the
--   signed 64-bit range (without leading zeros).
--   OVERFLOW when giving the permits back (these and the expired ones)
--   would take KEYS[1] past the signed 64-bit range.
--
-- Prepended: lua/common/integer.lua, lua/common/add.lua, lua/common/clock.lua, lua/common/permits.lua

local bad = check_permits()
if bad then
    return bad
end

local now = now_ms()

local live = 0
for i = 2, #ARGV do
    local score = redis.call('zscore', KEYS[2], ARGV[i])
    if not score then
        return -1
    end
    if tonumber(score) > now then
        live = live + 1
    end
end

-- The ids given back and the other expired permits return together, the
-- count first, so that an overflow writes nothing.
local given = {}
for i = 2, #ARGV do
    given[ARGV[i]] = true
end
local expired = redis.call('zrangebyscore', KEYS[2], 0, now)
local others = {}
for _, member in ipairs(expired) do
    if not given[member] then
        others[#others + 1] = member
    end
end
local bad = add(KEYS[1], #ARGV - 1 + #others, 'semaphore')
if bad then
    return bad
end
for i = 2, #ARGV, 1000 do
    redis.call('zrem', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
for i = 1, #others, 1000 do
    redis.call('zrem', KEYS[2], unpack(others, i, math.min(i + 999, #others)))
end
redis.call(ARGV[1], KEYS[3], redis.call('get', KEYS[1]))
return live
