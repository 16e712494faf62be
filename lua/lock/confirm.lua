-- confirm.lua: confirm that an owner holds a lock of the hash layout (the
-- reentrant and the fair lock), with a write that the replicas must receive
-- after every earlier write of the lock, so that a WAIT behind this call
-- acknowledges those too: the grant or hand-off that gave the owner the lock
-- (made by another connection, whose WAIT the owner never sees), or an
-- acquisition whose reply came back after the client moved to a new primary.
--
-- KEYS[1]  lock key (HASH: owner id -> hold count)
-- ARGV[1]  owner id "<client-uuid>:<thread-id>"
--
-- Returns
--   1  the owner holds the lock: its count was rewritten unchanged (HINCRBY
--      by 0: a write, but neither the count nor the key's TTL changes)
--   0  the owner holds nothing here (or a key of another type, or another
--      kind's lock, a read-write lock's hash with its "mode" field, sits at
--      the name); nothing was written
local key, owner = KEYS[1], ARGV[1]
if redis.call('type', key).ok ~= 'hash' or redis.call('hexists', key, 'mode') == 1
    or redis.call('hexists', key, owner) == 0 then
    return 0
end
redis.call('hincrby', key, owner, 0)
return 1
