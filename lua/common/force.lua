-- lua/common/force.lua: what a force unlock finds at a lock's name. Prepended
-- to the force unlocks whose header names it (see docs/design.md, "Lua
-- scripts"); defines one local function.

-- 'hash' when a hash sits at key; 0 (the force unlock's reply) when nothing
-- does; a WRONGTYPE error reply (nothing deleted) for a key of another type.
local function lock_hash(key)
    local kind = redis.call('type', key).ok
    if kind == 'none' then
        return 0
    end
    if kind ~= 'hash' then
        return redis.error_reply('WRONGTYPE the key at the lock name is a ' .. kind .. ', not a lock hash')
    end
    return 'hash'
end
