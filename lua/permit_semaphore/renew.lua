-- renew.lua: extend the leases of held permits of a permit-expirable
-- semaphore (Redisson's updateLeaseTime, for several ids at once; the
-- watchdog's renewal of permits whose holder is alive).
--
-- KEYS[1]  semaphore key (STRING, see acquire.lua)
-- KEYS[2]  held permits "{<name>}:timeout" (ZSET, see acquire.lua)
-- KEYS[3]  channel "redisson_sc:{<name>}" (see acquire.lua)
-- ARGV[1]  new lease in milliseconds (>= 1), counted from the server's now
-- ARGV[2]  publish command: "publish" or "spublish"
-- ARGV[3..]  permit ids (16 raw bytes each), at least one
--
-- First, expired permits are reclaimed (see acquire.lua): an id whose lease
-- had run out is gone by then, and its permit is back in the pool.
--
-- Returns
--   array  one integer per id, in order: 1 renewed (its score set to now +
--          ARGV[1] with ZADD XX), 0 not held (never held, released, or
--          expired and reclaimed): the holder lost that permit
--
-- Errors (nothing is changed)
--   WRONGTYPE when KEYS[1] is not a STRING or KEYS[2] not a ZSET.
--   BADCOUNT when KEYS[1] is a string but not a decimal integer in the
--   signed 64-bit range (without leading zeros).
--   OVERFLOW when giving the expired permits back would take KEYS[1]
--   past the signed 64-bit range.

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

local expired = redis.call('zrangebyscore', KEYS[2], 0, now)
if #expired > 0 then
    -- The count first, so that an overflow writes nothing.
    local bad = add(KEYS[1], #expired, 'semaphore')
    if bad then
        return bad
    end
    for i = 1, #expired, 1000 do
        redis.call('zrem', KEYS[2], unpack(expired, i, math.min(i + 999, #expired)))
    end
    local value = redis.call('get', KEYS[1])
    if value ~= '0' and string.sub(value, 1, 1) ~= '-' then
        redis.call(ARGV[2], KEYS[3], value)
    end
end

local expiry = now + tonumber(ARGV[1])
local renewed = {}
for i = 3, #ARGV do
    if redis.call('zscore', KEYS[2], ARGV[i]) then
        redis.call('zadd', KEYS[2], 'xx', expiry, ARGV[i])
        renewed[i - 2] = 1
    else
        renewed[i - 2] = 0
    end
end
return renewed
