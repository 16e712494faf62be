-- lua/common/add.lua: the semaphores' exact INCRBY. Prepended to the scripts
-- whose header names it, after lua/common/integer.lua (see docs/design.md,
-- "Lua scripts"); defines two local functions.

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

-- add(), to a permit count that must be one: a BADCOUNT error reply (and
-- nothing written) when key holds a string that is not a count.
local function add_permits(key, delta)
    local value = redis.call('get', key)
    if value and not integer(value) then
        return redis.error_reply('BADCOUNT semaphore ' .. key .. ' does not hold a permit count')
    end
    return add(key, delta, 'semaphore')
end
