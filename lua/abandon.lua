-- abandon.lua: a waiter that gives up stops being next in line.
--
-- KEYS[1]  next-in-line marker (see acquire.lua); a key of another type there
--          is not a marker and is left alone
-- ARGV[1]  owner id of the waiter giving up
--
-- Returns
--   1  the marker named ARGV[1] and was deleted
--   0  the marker was absent or named another owner (or was no marker);
--      nothing was changed
if redis.call('type', KEYS[1]).ok == 'string' and redis.call('get', KEYS[1]) == ARGV[1] then
    redis.call('del', KEYS[1])
    return 1
end
return 0
