-- lua/common/clock.lua: the server's clock. Prepended to the scripts whose
-- header names it (see docs/design.md, "Lua scripts"); defines one local
-- function.

-- The server's clock in milliseconds (TIME; Redis 5+ replicates a script's
-- effects, not the script, so reading the clock is allowed).
local function now_ms()
    -- <common:now_ms>
    local now = redis.call('time')
    return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    -- </common:now_ms>
end
