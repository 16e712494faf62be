-- lua/common/fencing.lua: the fencing-token counter
-- "redisson_lock_token:{<name>}" (Redisson RFencedLock's, a STRING holding
-- a decimal integer, no TTL): checked before a token is minted, and the
-- replies of an acquisition that mints one. Prepended to
-- the scripts whose header names it (see docs/design.md, "Lua scripts");
-- defines four local functions (the check, the mint, and the two reply
-- shapes of a fenced acquisition) and the value the check read.
-- lua/lock/acquire.lua keeps inline copies of the marked regions (its
-- common case builds no closure, ADR 39); tests/suite/script_headers.rs
-- checks that the copies are identical.

-- The counter's value as `check_counter` read it (false: absent), which
-- `mint` goes on from: nothing writes the counter between the two.
local checked_counter = false

-- An error reply when `counter` cannot give a next token: WRONGTYPE for a
-- key of another type, BADCOUNTER for anything but a decimal integer from
-- 0 to 2^63 - 2; else nil (an absent counter starts at 0). Leaves the
-- value in `checked_counter`.
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
        checked_counter = value
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

-- The next token, exact, as a decimal STRING, left in `counter`: the larger
-- of the counter plus one and the server's clock in microseconds (TIME), a
-- hybrid logical clock (docs/design.md, ADR 58). A counter lost with a
-- restart, a lossy failover or a DEL starts again from the clock, above
-- every token minted before as long as the clock of the server that mints
-- now is not behind the one that minted them by more than the loss took; a
-- clock stepped back on a server that kept its counter costs nothing (the
-- counter's +1 wins). One token a microsecond outruns any server's mints,
-- so the counter stays at the clock; microseconds stay below 2^53 (exact in
-- a double, a JSON number) until 2255. `check_counter` has passed: the
-- counter is absent or a decimal below 2^63 - 1, and `checked_counter`
-- holds its value. The clock is built as a string (the seconds, then the
-- microseconds padded to six digits): exact, and compared with the counter
-- as strings. Redisson's INCR on the same counter goes on from here.
local function mint(counter)
    -- <common:mint>
    local now = redis.call('time')
    local clock = now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
    local stored = checked_counter
    if not stored or #stored < #clock or (#stored == #clock and stored < clock) then
        redis.call('set', counter, clock)
        return clock
    end
    redis.call('incr', counter)
    return redis.call('get', counter)
    -- </common:mint>
end

-- The reply of an acquisition: nil; with a fencing counter, {-1, token},
-- a token minted (see `mint`) as a decimal STRING (exact over the whole
-- 64-bit range, where Lua's numbers are not).
local function fenced_grant(counter)
    if counter then
        return {-1, mint(counter)}
    end
    return nil
end
