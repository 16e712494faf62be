-- renew.lua: the watchdog's batched lease renewal.
--
-- KEYS[1..n]    lock keys (HASH), one per held lock
-- ARGV[1]       lease in milliseconds to re-apply (the watchdog timeout)
-- ARGV[2..n+1]  owner id of KEYS[i] is ARGV[i+1]
--
-- Or, with no KEYS (a Redis Cluster node's locks, whose keys span many
-- slots: a script's declared keys must share one), ARGV[2i] is the i-th
-- lock key and ARGV[2i+1] its owner id. The caller sends such a call only
-- to the node that serves every one of those keys; a key the node does not
-- serve fails the whole call (renewals before it stand: renewing is safe
-- to repeat), and the caller renews those locks one slot at a time.
--
-- Returns an array of n integers, in order:
--   1  the owner still holds the i-th lock; its PTTL was reset to ARGV[1]
--   0  the owner no longer holds it (the hold is lost); the key was not touched
--
-- A key of another type at a lock's name reports 0 and is left untouched;
-- so does a read-write lock's hash (it has a "mode" field: its read
-- holders' fields look like owner ids), except for a write owner id
-- "<client-uuid>:<thread-id>:write", whose write holds this script renews
-- too (no lock's owner id ends in ":write": a thread id is a number).
local renewed = {}
local declared = #KEYS > 0
local count = declared and #KEYS or (#ARGV - 1) / 2
for i = 1, count do
    local key, owner
    if declared then
        key, owner = KEYS[i], ARGV[i + 1]
    else
        key, owner = ARGV[2 * i], ARGV[2 * i + 1]
    end
    local held = 0
    if redis.call('type', key).ok == 'hash' then
        local got = redis.call('hmget', key, owner, 'mode')
        if got[1] and (not got[2] or string.sub(owner, -6) == ':write') then
            redis.call('pexpire', key, ARGV[1])
            held = 1
        end
    end
    renewed[i] = held
end
return renewed
