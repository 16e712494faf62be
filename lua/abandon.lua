-- abandon.lua: a waiter that gives up stops being next in line.
--
-- KEYS[1]  next-in-line marker "keyholder_lock_next:{<name>}" (see acquire.lua)
-- ARGV[1]  owner id of the waiter giving up
--
-- Returns
--   1  the marker named ARGV[1] and was deleted
--   0  the marker was absent or named another owner; nothing was changed
if redis.call('get', KEYS[1]) == ARGV[1] then
    redis.call('del', KEYS[1])
    return 1
end
return 0
