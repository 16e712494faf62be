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

-- True for a decimal integer as INCRBY takes it: "0", or no leading zero,
-- within the signed 64-bit range (compared as strings: a Lua number is a
-- double, exact only to 2^53).
local function integer(value)
    if value == '0' then
        return true
    end
    local digits = string.match(value, '^%-?([1-9]%d*)$')
    if not digits or #digits > 19 then
        return false
    end
    local limit = string.sub(value, 1, 1) == '-' and '9223372036854775808' or '9223372036854775807'
    return #digits < 19 or digits <= limit
end

-- INCRBY key by delta, exact; an OVERFLOW error reply (and nothing
-- written) when the sum would leave the 64-bit range, else nil.
local function add(key, delta, what)
    local reply = redis.pcall('incrby', key, delta)
    if type(reply) == 'table' and reply.err then
        if string.find(reply.err, 'overflow', 1, true) then
            return redis.error_reply('OVERFLOW ' .. what .. ' ' .. key .. ': adding ' .. delta
                .. ' would leave the 64-bit range')
        end
        return reply
    end
    return nil
end

local function check()
    local kind = redis.call('type', KEYS[1]).ok
    if kind ~= 'none' and kind ~= 'string' then
        return redis.error_reply('WRONGTYPE semaphore ' .. KEYS[1] .. ' is a ' .. kind)
    end
    if kind == 'string' and not integer(redis.call('get', KEYS[1])) then
        return redis.error_reply('BADCOUNT semaphore ' .. KEYS[1] .. ' does not hold a permit count')
    end
    kind = redis.call('type', KEYS[2]).ok
    if kind ~= 'none' and kind ~= 'zset' then
        return redis.error_reply('WRONGTYPE permit set ' .. KEYS[2] .. ' is a ' .. kind)
    end
end
local bad = check()
if bad then
    return bad
end

local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

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
