-- red_lock/raise_token.lua: the second round of a fenced RedLock
-- acquisition, on each master whose lock it took. The combined token is the
-- largest per-master token minted in the first round; this raises the
-- master's fencing counter to at least that value, but only while the
-- caller still holds the lock there. So once a quorum of masters has
-- answered 1, any later holder's acquisition on any quorum (which shares a
-- master with this one) mints a token above the combined token, and the
-- largest of its tokens is larger still: combined tokens are strictly
-- increasing across successive RedLock holders. Java's RFencedLock sharing
-- the counter sees its sequence jump forward, never back.
--
-- KEYS[1]  lock key (HASH), as acquire.lua
-- KEYS[2]  fencing-token counter "redisson_lock_token:{<name>}" (STRING, a
--          decimal integer, no TTL; Redisson's RFencedLock counter)
-- ARGV[1]  owner id "<client-uuid>:<thread-id>"
-- ARGV[2]  the combined token: a decimal integer from 1 to 2^63 - 1
--
-- Returns
--   1  the owner holds the lock: the counter is now at least ARGV[2] (set to
--      ARGV[2] if it was lower or absent, otherwise untouched)
--   0  the owner no longer holds the lock here; nothing was changed
--
-- Errors (nothing is changed)
--   WRONGTYPE when a key of another type sits at the lock's name (or a
--   read-write lock's hash, with its "mode" field) or at the counter
--   ("WRONGTYPE fencing counter <key> ...").
--   BADCOUNTER when the counter holds anything but a decimal integer from 0
--   to 2^63 - 1, or ARGV[2] is not one.
--
-- Prepended: lua/common/kinds.lua
local key, counter, owner, floor = KEYS[1], KEYS[2], ARGV[1], ARGV[2]

-- True for a decimal integer from 0 to 2^63 - 1 without leading zeros;
-- compared as strings so all 64 bits are exact (Lua numbers are doubles).
local function decimal(value)
    if value ~= '0' and not string.match(value, '^[1-9]%d*$') then
        return false
    end
    return #value < 19 or (#value == 19 and value <= '9223372036854775807')
end

local function less(a, b)
    if #a ~= #b then
        return #a < #b
    end
    return a < b
end

if not decimal(floor) then
    return redis.error_reply('BADCOUNTER combined token ' .. floor .. ' is not a 63-bit decimal integer')
end
local kind = redis.call('type', key).ok
if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE the key at the lock name is a ' .. kind .. ', not a lock hash')
end
local counter_kind = redis.call('type', counter).ok
if counter_kind ~= 'none' and counter_kind ~= 'string' then
    return redis.error_reply('WRONGTYPE fencing counter ' .. counter .. ' is a ' .. counter_kind)
end
local current = counter_kind == 'string' and redis.call('get', counter) or '0'
if not decimal(current) then
    return redis.error_reply('BADCOUNTER fencing counter ' .. counter .. ' holds no token')
end
if kind == 'none' then
    return 0
end
local held = redis.call('hmget', key, owner, 'mode')
if held[2] then
    return redis.error_reply('WRONGTYPE ' .. key .. RWLOCK_HERE)
end
if not held[1] then
    return 0
end
if less(current, floor) then
    redis.call('set', counter, floor)
end
return 1
