-- lua/common/integer.lua: the exact-count check of the semaphores and the
-- count-down latch. Prepended to the scripts whose header names it (see
-- docs/design.md, "Lua scripts"); defines one local function.

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
