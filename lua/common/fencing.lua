-- lua/common/fencing.lua: the fencing-token counter
-- "redisson_lock_token:{<name>}" (Redisson RFencedLock's, a STRING holding
-- a decimal integer, no TTL) checked before a token is minted. Prepended to
-- the scripts whose header names it (see docs/design.md, "Lua scripts");
-- defines one local function. lua/lock/acquire.lua keeps an inline copy of
-- the marked region (its common case builds no closure, ADR 39);
-- tests/script_headers.rs checks that the copies are identical.

-- An error reply when `counter` cannot give a next token: WRONGTYPE for a
-- key of another type, BADCOUNTER for anything but a decimal integer from
-- 0 to 2^63 - 2; else nil (an absent counter starts at 0).
local function check_counter(counter)
    -- <common:check_counter>
    local kind = redis.call('type', counter).ok
    if kind ~= 'none' then
        if kind ~= 'string' then
            return redis.error_reply('WRONGTYPE fencing counter ' .. counter .. ' is a ' .. kind)
        end
        local value = redis.call('get', counter)
        local digits = value == '0' or string.match(value, '^[1-9]%d*$') ~= nil
        if not digits or #value > 19 or (#value == 19 and value >= '9223372036854775807') then
            return redis.error_reply('BADCOUNTER fencing counter ' .. counter .. ' holds no next token')
        end
    end
    -- </common:check_counter>
    return nil
end
