-- lua/common/permits.lua: the permit-expirable semaphore's prelude, on its
-- keys KEYS[1] (the count, a STRING) and KEYS[2] (the held permits, a ZSET
-- scored by expiry). Needs lua/common/integer.lua and lua/common/add.lua
-- before it. Prepended to the scripts whose header names it (see
-- docs/design.md, "Lua scripts"); defines two local functions.

-- An error reply when KEYS[1] is not a permit count (WRONGTYPE, BADCOUNT)
-- or KEYS[2] not a ZSET (WRONGTYPE); else nil.
local function check_permits()
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
    return nil
end

-- Gives the permits that expired by `now` (server ms) back to the count,
-- the count first, so that an overflow writes nothing; publishes the new
-- count on `channel` with `publish` when permits are then available. An
-- error reply when it cannot (OVERFLOW), else nil.
local function reclaim(now, publish, channel)
    local expired = redis.call('zrangebyscore', KEYS[2], 0, now)
    if #expired == 0 then
        return nil
    end
    local bad = add(KEYS[1], #expired, 'semaphore')
    if bad then
        return bad
    end
    for i = 1, #expired, 1000 do
        redis.call('zrem', KEYS[2], unpack(expired, i, math.min(i + 999, #expired)))
    end
    local value = redis.call('get', KEYS[1])
    if value ~= '0' and string.sub(value, 1, 1) ~= '-' then
        redis.call(publish, channel, value)
    end
    return nil
end
