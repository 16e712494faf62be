-- status.lua: count the available and the held permits of a
-- permit-expirable semaphore (Redisson's availablePermits, acquiredPermits
-- and getPermits in one call).
--
-- KEYS[1]  semaphore key (STRING, see acquire.lua)
-- KEYS[2]  held permits "{<name>}:timeout" (ZSET, see acquire.lua)
-- KEYS[3]  channel "redisson_sc:{<name>}" (see acquire.lua)
-- ARGV[1]  publish command: "publish" or "spublish"
--
-- First, expired permits are reclaimed (see acquire.lua).
--
-- Returns
--   {available, held}  KEYS[1]'s count (0 when absent) and the number of
--                      members of KEYS[2]; their sum is Redisson's permits
--
-- Errors (nothing is changed)
--   WRONGTYPE when KEYS[1] is not a STRING or KEYS[2] not a ZSET.
--   BADCOUNT when KEYS[1] is a string but not a decimal integer.
local function check()
    local kind = redis.call('type', KEYS[1]).ok
    if kind ~= 'none' and kind ~= 'string' then
        return redis.error_reply('WRONGTYPE semaphore ' .. KEYS[1] .. ' is a ' .. kind)
    end
    if kind == 'string' and string.match(redis.call('get', KEYS[1]), '^%-?%d+$') == nil then
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
    for i = 1, #expired, 1000 do
        redis.call('zrem', KEYS[2], unpack(expired, i, math.min(i + 999, #expired)))
    end
    local value = redis.call('incrby', KEYS[1], #expired)
    if value > 0 then
        redis.call(ARGV[1], KEYS[3], value)
    end
end

local value = redis.call('get', KEYS[1])
if value == false then
    value = 0
end
return {tonumber(value), redis.call('zcard', KEYS[2])}
