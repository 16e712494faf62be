-- lua/common/fair.lua: what the fair lock's scripts (Redisson RFairLock
-- layout: the lock HASH, the queue LIST "redisson_lock_queue:{<name>}", the
-- timeouts ZSET "redisson_lock_timeout:{<name>}") check and prune alike.
-- Needs lua/common/kinds.lua before it. Prepended to the scripts whose
-- header names it (see docs/design.md, "Lua scripts"); defines two local
-- functions.

-- An error reply (WRONGTYPE, nothing changed) when a key of `typed`
-- ({{key, type}, ...}, absent keys pass) holds another type, or when `key`
-- is a read-write lock's hash (it has a "mode" field): another kind's lock
-- is never taken, released, handed on or deleted here. Else nil.
local function check_fair_keys(key, typed)
    for _, pair in ipairs(typed) do
        local kind = redis.call('type', pair[1]).ok
        if kind ~= 'none' and kind ~= pair[2] then
            return redis.error_reply('WRONGTYPE ' .. pair[1] .. ' is a ' .. kind .. ', not a ' .. pair[2])
        end
    end
    if redis.call('hexists', key, 'mode') == 1 then
        return redis.error_reply('WRONGTYPE ' .. key .. RWLOCK_HERE)
    end
    return nil
end

-- Drops the dead heads of `queue` (Redisson's rule: a head whose timeout in
-- `timeouts` is missing or not after `now`, server ms), with their entries
-- in `timeouts` and, when given, in `grants`; true when any was dropped.
local function prune(queue, timeouts, now, grants)
    local dropped = false
    while true do
        local head = redis.call('lindex', queue, 0)
        if not head then
            return dropped
        end
        local deadline = redis.call('zscore', timeouts, head)
        if deadline and tonumber(deadline) > now then
            return dropped
        end
        redis.call('lpop', queue)
        redis.call('zrem', timeouts, head)
        if grants then
            redis.call('hdel', grants, head)
        end
        dropped = true
    end
end
