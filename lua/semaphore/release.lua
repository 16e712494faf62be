-- release.lua: give N permits back to a semaphore and wake its waiters
-- (Redisson RSemaphore layout; Redisson's release script, plus a check of
-- the stored value and of overflow).
--
-- KEYS[1]  semaphore key (STRING, see try_acquire.lua)
-- KEYS[2]  channel "redisson_sc:{<name>}" ("redisson_sc:<name>" when the
--          name has a '{'), shared with Java waiters
-- ARGV[1]  permits given back: a decimal integer >= 1 (the caller checks)
-- ARGV[2]  publish command: "publish" or "spublish" (Redis Cluster shard
--          channels)
--
-- Returns
--   string   the new number of available permits as a decimal STRING
--            (exact over the 64-bit range): KEYS[1] incremented by ARGV[1]
--            (INCRBY: an absent key starts from 0, a TTL is kept), and that
--            number published on KEYS[2] (a Java waiter wakes at most that
--            many local waiters)
--
-- Errors (nothing is changed)
--   WRONGTYPE when KEYS[1] holds another type.
--   BADCOUNT when KEYS[1] is a string but not a decimal integer in the
--   signed 64-bit range (without leading zeros).
--   OVERFLOW when the sum would leave the signed 64-bit range.

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

local value = redis.call('get', KEYS[1])
if value and not integer(value) then
    return redis.error_reply('BADCOUNT semaphore ' .. KEYS[1] .. ' does not hold a permit count')
end
local bad = add(KEYS[1], ARGV[1], 'semaphore')
if bad then
    return bad
end
local total = redis.call('get', KEYS[1])
redis.call(ARGV[2], KEYS[2], total)
return total
