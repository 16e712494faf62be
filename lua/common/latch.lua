-- lua/common/latch.lua: the unlock latch, keyholder's form of Redisson
-- 3.24+'s "redisson_unlock_latch" (see lua/lock/release.lua's header): one
-- key per owner and lock, a STRING "<request id>:<outcome>" with a TTL,
-- that lets a release whose reply was lost be retried without giving back
-- a hold twice. Any other key at its name is not a latch: never read as one
-- nor overwritten, and the release runs unlatched. Prepended to the scripts
-- whose header names it (see docs/design.md, "Lua scripts"); defines two
-- local functions. lua/lock/release.lua keeps an inline copy of the
-- marked regions (its common case builds no closure, ADR 39);
-- tests/suite/script_headers.rs checks that the copies are identical.

-- The latch to record into (nil when there is none, or when a key that is
-- not a latch sits at its name) and, for a retry (`retry` true) of the
-- release whose request id is `request`, the outcome the latch stored for
-- it (else nil): the caller returns that outcome and changes nothing.
local function latch_check(latch, request, retry)
    local replay = nil
    if not latch then
        return nil, nil
    end
    -- <common:latch_check>
    -- One GET reads it: nothing there is an empty latch; an error reply
    -- (WRONGTYPE: a key of another type) is no latch.
    local earlier = redis.pcall('get', latch)
    if earlier == false then
        earlier = ''
    elseif type(earlier) ~= 'string' then
        earlier = nil
    end
    if not (earlier == '' or (earlier and string.match(earlier, '^%d+:%d+$'))) then
        latch = nil
    elseif earlier ~= '' and retry then
        local id, outcome = string.match(earlier, '^(%d+):(%d+)$')
        if id == request then
            replay = tonumber(outcome)
        end
    end
    -- </common:latch_check>
    return latch, replay
end

-- Records `outcome` for request id `request` in the latch, if any, for
-- `latch_ttl` ms, and returns it.
local function latch_done(latch, request, latch_ttl, outcome)
    -- <common:latch_done>
    if latch then
        redis.call('set', latch, request .. ':' .. outcome, 'px', latch_ttl)
    end
    return outcome
    -- </common:latch_done>
end
