-- fenced_store.lua: a resource that checks fencing tokens. Test scaffolding,
-- and the pattern docs/guarantees.md recommends for a real resource: every
-- read and every write carries the caller's fencing token, and the resource
-- refuses any token lower than the highest it has seen.
--
-- KEYS[1]  the protected value (STRING)
-- KEYS[2]  the highest fencing token seen so far (STRING)
-- KEYS[3]  how many requests were refused (STRING counter)
-- KEYS[4]  a log of accepted writes, "<token>:<value>" (LIST)
-- ARGV[1]  "read" or "write"
-- ARGV[2]  the caller's fencing token (a positive integer below 2^53:
--          Lua numbers are doubles)
-- ARGV[3]  the value to write (for "write")
--
-- Returns
--   {1, value}    accepted; KEYS[2] raised to ARGV[2]; a read returns the
--                 value (nil when there is none), a write the value written
--   {0, highest}  refused: ARGV[2] is lower than the highest token seen;
--                 nothing changed but KEYS[3]
local token = tonumber(ARGV[2])
local highest = tonumber(redis.call('get', KEYS[2]) or '0')
if token < highest then
    redis.call('incr', KEYS[3])
    return {0, highest}
end
if token > highest then
    redis.call('set', KEYS[2], ARGV[2])
end
if ARGV[1] == 'write' then
    redis.call('set', KEYS[1], ARGV[3])
    redis.call('rpush', KEYS[4], ARGV[2] .. ':' .. ARGV[3])
    return {1, ARGV[3]}
end
return {1, redis.call('get', KEYS[1])}
