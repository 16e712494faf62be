-- renew.lua: the watchdog's batched lease renewal.
--
-- KEYS[1..n]    lock keys (HASH), one per held lock
-- ARGV[1]       lease in milliseconds to re-apply (the watchdog timeout)
-- ARGV[2..n+1]  owner id of KEYS[i] is ARGV[i+1]
--
-- Returns an array of n integers, in KEYS order:
--   1  the owner still holds KEYS[i]; its PTTL was reset to ARGV[1]
--   0  the owner no longer holds KEYS[i] (the hold is lost); the key was not touched
--
-- A key of another type at a lock's name reports 0 and is left untouched.
local renewed = {}
for i = 1, #KEYS do
    local key = KEYS[i]
    local held = 0
    if redis.call('type', key).ok == 'hash' and redis.call('hexists', key, ARGV[i + 1]) == 1 then
        redis.call('pexpire', key, ARGV[1])
        held = 1
    end
    renewed[i] = held
end
return renewed
