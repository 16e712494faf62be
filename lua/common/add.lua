-- lua/common/add.lua: the semaphores' exact INCRBY. Prepended to the scripts
-- whose header names it (see docs/design.md, "Lua scripts"); defines one
-- local function.

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
