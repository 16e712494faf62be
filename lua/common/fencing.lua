-- lua/common/fencing.lua: the fencing-token counter
-- "redisson_lock_token:{<name>}" (Redisson RFencedLock's, a STRING holding
-- a decimal integer, no TTL): checked before a token is minted, and the
-- replies of an acquisition that mints one. Prepended to
-- the scripts whose header names it (see docs/design.md, "Lua scripts");
-- defines three local functions: the check, and the two reply shapes of a
-- fenced acquisition. lua/lock/acquire.lua keeps inline copies of the
-- marked regions (its common case builds no closure, ADR 39);
-- tests/suite/script_headers.rs checks that the copies are identical.

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

-- The reply of a refused acquisition: `ms`, the milliseconds worth
-- waiting (or a negative code); with a fencing counter, {ms, -1}.
local function fenced_refusal(counter, ms)
    -- <common:fenced_refusal>
    if counter then
        return {ms, -1}
    end
    return ms
    -- </common:fenced_refusal>
end

-- The reply of an acquisition: nil; with a fencing counter, {-1, token},
-- the counter incremented and its new value as a decimal STRING (exact
-- over the whole 64-bit range, where Lua's numbers are not).
local function fenced_grant(counter)
    if counter then
        redis.call('incr', counter)
        return {-1, redis.call('get', counter)}
    end
    return nil
end
