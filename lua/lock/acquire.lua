-- acquire.lua: take or re-enter a reentrant lock (Redisson RLock layout),
-- optionally minting a fencing token (Redisson RFencedLock layout), and
-- queueing keyholder waiters in arrival order (see release.lua).
--
-- KEYS[1]  lock key: a HASH named by the lock name itself
-- KEYS[2]  optional claim marker (keyholder's own key, see names.rs): a
--          STRING with a TTL holding the client id that the last release
--          woke; while it exists, a free lock is only given to that client.
--          A key of another type, or a string without a TTL, is not a
--          marker: it is ignored and never overwritten. A marker
--          "~<server ms>:<client id>" is a foreign turn (see release.lua):
--          until that time no caller takes the free lock (Redisson waiters,
--          which never read it, do), then it names <client id> (possibly
--          empty: nobody)
-- KEYS[3]  optional waiter queue (keyholder's own key): a ZSET of the client
--          ids of keyholder waiters in arrival order, each scored by when it
--          joined (the server's clock in milliseconds, with the microseconds
--          as thousandths; a client queued at the front after losing a race
--          for its turn is scored 1 below the front's): how long the front
--          has waited decides whether a release barges (release.lua's
--          barging window). Scores of an older keyholder (0, 1, 2 ...) read
--          as waiting since long ago
-- KEYS[4]  waiter grants (keyholder's own key; required with KEYS[3]): a
--          HASH from a queued client id to "<owner id> <lease ms> <server
--          ms> <ticket>": the thread a release may hand the lock to
--          directly, its lease, the server's clock when it was last refused,
--          and the ticket of that thread's wait (ARGV[7]), which the grant's
--          message carries back; and the
--          fields of release.lua's foreign turns, which no client id can
--          be: "~turns", the count of the queue's turns since the last
--          foreign turn, which a refusal decrements (to -8 at most) when
--          the marker names the caller's client, no turn is running and the
--          lock is held (a Redisson waiter took the lock reserved for it);
--          "~seen", what the client a foreign turn's marker names saw of it
--          (1 per refusal of a free lock during the turn, 2 once it found
--          the lock held: used); "~idle", how many foreign turns in a row
--          went unused (to 6 at most; a used one resets it), counted when
--          that client takes the lock
-- KEYS[5]  optional fencing-token counter "redisson_lock_token:{<name>}": a
--          STRING holding a decimal integer, no TTL, shared with Java's
--          RFencedLock; every acquisition made with KEYS[5] mints a token
--          into it (the caller passes it for a new hold, and for a re-entry
--          of a hold that has no token yet): the larger of its value plus
--          one and the server's clock in microseconds (lua/common/fencing.lua)
-- ARGV[1]  lease in milliseconds (the watchdog timeout, or a fixed lease)
-- ARGV[2]  owner id "<client-uuid>:<thread-id>"
-- ARGV[3]  optional mode. "1" for a new hold: the caller has no live hold
--          here, so any count its owner id still has (a hold lost unnoticed,
--          an acquire whose reply was lost) is stale: the count is set to 1,
--          not incremented. "0" for a re-entry: it succeeds only while the
--          owner's field exists; a free lock is not taken (the caller's hold
--          vanished, and the caller must learn that and take a new hold).
--          Absent: Redisson's rule, take a free lock or increment the owner's
--          count
-- ARGV[4]  client id "<client-uuid>" (required with ARGV[5]); absent: the
--          part of ARGV[2] before its last ":", the id of the client that
--          made the owner id
-- ARGV[5]  optional "1" when the caller listens on its wake channel (see
--          release.lua): if it does not get the lock, its client joins the
--          queue (at the back; at the front when the marker names it, since
--          it was woken and lost the race to a client that ignores the
--          queue), and the TTLs of the queue and the grants are made to
--          outlast the caller's wait: when the queue's is shorter than the
--          wait, both are set to twice the wait (one PTTL per refusal, and
--          a refresh about once per wait)
-- ARGV[6]  slack in milliseconds added to the queue's TTL (with ARGV[5])
-- ARGV[7]  optional (with ARGV[5]): when the caller accepts the lock
--          handed to it by a release (see release.lua), the ticket of its
--          wait, a decimal number above 0 that the client never uses for
--          another wait: its entry in KEYS[4] is written with it; "0" or
--          absent: the entry is removed
-- ARGV[8]  optional "1": migration mode. A STRING at KEYS[1] is a lock
--          held by a hand-rolled `SET key token NX PX` holder: it is read
--          (TYPE, PTTL) and never modified, and the caller is refused with
--          its PTTL, without queueing. Absent or "0": such a key is a
--          WRONGTYPE error, as before
--
-- Returns, without KEYS[5]
--   nil      acquired or re-entered: a new hold's count set to 1, a
--            re-entry's incremented; the key's PTTL set to ARGV[1] (a
--            re-entry only ever lengthens it: a shorter lease never cuts the
--            outer hold short); with ARGV[5], the caller's client removed
--            from the queue and the grants; the marker, if it named the
--            caller's client, deleted
--   integer  not acquired; milliseconds worth waiting: the holder's PTTL
--            (-1 when a foreign writer left the key without a TTL), or, when
--            the lock is free but the marker names another client, the
--            marker's PTTL (during a foreign turn, the milliseconds left of
--            the turn, at least 1); -2 for a re-entry that found the lock
--            free
-- and with KEYS[5] the same as a pair: {-1, token} when acquired, token being
-- the minted token, the counter's new value, as a decimal STRING (exact over
-- the whole 64-bit range, where Lua's numbers are not); {ms, -1} when not.
--
-- Errors (nothing is changed)
--   WRONGTYPE when a key of another type sits at the lock's name (with
--   ARGV[8] = "1", a STRING is not one), or at the counter ("WRONGTYPE
--   fencing counter <key> ...").
--   LEGACYNOTTL with ARGV[8] = "1", when the STRING at the lock's name has no
--   TTL: a legacy holder that never expires ("LEGACYNOTTL <key> ...").
--   BADCOUNTER when the counter holds anything but a decimal integer from 0
--   to 2^63 - 2 (no next token exists).
--   WRONGTYPE also when the hash at the lock's name is another kind's lock:
--   a read-write lock's (it has a "mode" field, and its read holders'
--   fields look like owner ids). Nothing is taken, counted or queued for.
--
-- Nothing prepended: the common case above builds no closure (ADR 39), so
-- the parts it shares are inline copies, marked "<common:NAME>", of
-- lua/common/fencing.lua and lua/common/kinds.lua.
local key, marker, queue, grants, counter = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner = ARGV[2]
local lease = tonumber(ARGV[1])

-- The common case first, before any helper below is built: a new hold (or
-- a Redisson-rule acquisition) of a free lock that no marker reserves, with
-- no token to mint, no migration mode and no queue entry to clear. The
-- general path below does the same for it, in more calls; here one EXISTS
-- counts the lock and the marker.
if not counter and ARGV[3] ~= '0' and ARGV[5] ~= '1' and ARGV[8] ~= '1'
    and (marker and redis.call('exists', key, marker) or redis.call('exists', key)) == 0 then
    if ARGV[3] == '1' then
        redis.call('hset', key, owner, 1)
    else
        redis.call('hincrby', key, owner, 1)
    end
    redis.call('pexpire', key, lease)
    return nil
end

-- The other common case, a re-entry with no token to mint and no migration
-- mode: one HMGET reads the owner's field and tells a read-write lock's
-- hash (its "mode" field) apart. The general path below does the same in
-- more calls.
-- <common:rwlock_here> lua/common/kinds.lua's, inline (see the header)
local RWLOCK_HERE = ' holds another kind\'s lock: a read-write lock (a hash with a "mode" field)'
-- </common:rwlock_here>
if ARGV[3] == '0' and not counter and ARGV[8] ~= '1' then
    local held = redis.call('hmget', key, owner, 'mode')
    if held[2] then
        return redis.error_reply('WRONGTYPE ' .. key .. RWLOCK_HERE)
    end
    if held[1] then
        redis.call('hincrby', key, owner, 1)
        if redis.call('pttl', key) < lease then
            redis.call('pexpire', key, lease)
        end
        return nil
    end
    return redis.call('pttl', key)
end

local function refuse(ms)
    -- <common:fenced_refusal> lua/common/fencing.lua's, inline (see the header)
    if counter then
        return {ms, -1}
    end
    return ms
    -- </common:fenced_refusal>
end

-- Below, a keyholder key's type is read by the call that uses it: a call
-- made with redis.pcall answers a key of another type with an error reply
-- (a table with an "err" field), which leaves that key alone, as the
-- header says; an absent key reads as empty.

-- The caller's client (see ARGV[4]).
local client = ARGV[4] or string.match(owner, '^(.*):') or owner

-- The client the marker names, the milliseconds left of a foreign turn (0
-- when none), whether the marker is a foreign turn's, and its PTTL; false
-- when there is no marker; nil when a foreign key sits at its name.
local function read_marker()
    local left = redis.call('pttl', marker)
    if left == -2 then
        return false, 0, false, left
    end
    -- A marker is a STRING with a TTL: GET answers any other type with an
    -- error reply.
    local value = left > 0 and redis.pcall('get', marker)
    if type(value) ~= 'string' then
        return nil, 0, false, left
    end
    local ends, named = string.match(value, '^~(%d+):(.*)$')
    if not ends then
        return value, 0, false, left
    end
    local now = redis.call('time')
    local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    return named, math.max(0, tonumber(ends) - ms), true, left
end

-- The counter's value as the check below read it (see
-- lua/common/fencing.lua's `checked_counter`).
local checked_counter = false
if counter then
    -- <common:check_counter> lua/common/fencing.lua's, inline (see the header)
    local kind = redis.call('type', counter).ok
    if kind ~= 'none' then
        if kind ~= 'string' then
            return redis.error_reply('WRONGTYPE fencing counter ' .. counter .. ' is a ' .. kind)
        end
        local value = redis.call('get', counter)
        local digits = value == '0' or string.match(value, '^[1-9]%d*$') ~= nil
        if not digits or #value > 19 or (#value == 19 and value >= '9223372036854775807') then
            return redis.error_reply('BADCOUNTER fencing counter ' .. counter .. ' holds no next token')
        end
        checked_counter = value
    end
    -- </common:check_counter>
end

-- Migration mode: a hand-rolled holder's STRING is read, never written.
if ARGV[8] == '1' and redis.call('type', key).ok == 'string' then
    local ttl = redis.call('pttl', key)
    if ttl < 0 then
        return redis.error_reply('LEGACYNOTTL ' .. key .. ' is a string without a TTL')
    end
    -- A key in its last millisecond still holds: wait at least 1 ms.
    return refuse(math.max(ttl, 1))
end

-- Whether the lock is free and its PTTL (-2 when free), in one PTTL; when
-- it is held, the owner's field and another kind's lock at the name in one
-- HMGET: a read-write lock's hash (its "mode" field) is never taken (the
-- free lock needs no such check).
local ttl = redis.call('pttl', key)
local free, mine = ttl == -2, false
if not free then
    local held = redis.call('hmget', key, owner, 'mode')
    if held[2] then
        return redis.error_reply('WRONGTYPE ' .. key .. RWLOCK_HERE)
    end
    mine = held[1] ~= false
end

-- Mints the next token: exact, as the counter's string (see
-- lua/common/fencing.lua's `mint`).
local function mint()
    if counter then
        -- <common:mint> lua/common/fencing.lua's, inline (see the header)
        local now = redis.call('time')
        local clock = now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
        local stored = checked_counter
        if not stored or #stored < #clock or (#stored == #clock and stored < clock) then
            redis.call('set', counter, clock)
            return clock
        end
        redis.call('incr', counter)
        return redis.call('get', counter)
        -- </common:mint>
    end
end

local function acquired(token)
    if counter then
        return {-1, token}
    end
    return nil
end

if ARGV[3] == '0' then
    -- Re-entry: only onto the owner's own live field (whose PTTL, `ttl`,
    -- HINCRBY leaves as it is).
    if mine then
        local token = mint()
        redis.call('hincrby', key, owner, 1)
        if ttl < lease then
            redis.call('pexpire', key, lease)
        end
        return acquired(token)
    end
    return refuse(ttl)
end

-- Joins the queue (see ARGV[5]), records how the caller takes a grant, and
-- keeps both keys alive while waiters may sleep for `wait` ms.
local function enqueue(wait, front)
    if not queue or ARGV[5] ~= '1' then
        return
    end
    local now = redis.call('time')
    local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    -- The score is when the client joined (see KEYS[3]): microseconds apart
    -- are two arrivals apart, with no read of the queue's back.
    local score = tonumber(now[1]) * 1000 + tonumber(now[2]) / 1000
    if front then
        local edge = redis.pcall('zrange', queue, 0, 0, 'withscores')
        if edge.err then
            return
        end
        if edge[2] then
            score = tonumber(edge[2]) - 1
        end
    end
    -- NX: a client already queued keeps its place. The queue first, so that
    -- a key of another type at its name leaves both keys untouched.
    if type(redis.pcall('zadd', queue, 'nx', string.format('%.3f', score), client)) ~= 'number' then
        return
    end
    local written
    if ARGV[7] and ARGV[7] ~= '0' then
        written = redis.pcall('hset', grants, client, owner .. ' ' .. ARGV[1] .. ' ' .. ms .. ' ' .. ARGV[7])
    else
        written = redis.pcall('hdel', grants, client)
    end
    -- Both keys' TTLs are refreshed together, to twice what this wait needs,
    -- when the queue's would not last it (a queue the ZADD made has none).
    local ttl = math.max(wait, lease) + tonumber(ARGV[6])
    if redis.call('pttl', queue) < ttl then
        redis.call('pexpire', queue, 2 * ttl)
        if type(written) == 'number' then
            redis.call('pexpire', grants, 2 * ttl)
        end
    end
end

-- The marker matters to a free lock, and to where a refused waiter queues.
local claimant, turn_left, in_turn, marker_ttl = false, 0, false, -2
if marker and (free or ARGV[5] == '1') then
    claimant, turn_left, in_turn, marker_ttl = read_marker()
end
-- The grants, when the caller's client is the one a marker names and may
-- note what it saw of a foreign turn (see KEYS[4]).
local function noting()
    return claimant and claimant == client and queue and ARGV[5] == '1'
        and redis.call('type', grants).ok == 'hash'
end
if free and turn_left > 0 then
    -- A foreign turn: Redisson waiters only, for now. The named client's
    -- second refusal in it follows an unlock message: a Redisson waiter
    -- came and went.
    if in_turn and noting() then
        redis.call('hincrby', grants, '~seen', 1)
    end
    enqueue(turn_left, claimant == client)
    return refuse(turn_left)
end
if free and claimant and claimant ~= client then
    enqueue(marker_ttl, false)
    return refuse(marker_ttl)
end
if free or mine then
    local token = mint()
    if ARGV[3] == '1' then
        redis.call('hset', key, owner, 1)
    else
        redis.call('hincrby', key, owner, 1)
    end
    redis.call('pexpire', key, lease)
    if claimant and claimant == client then
        redis.call('del', marker)
        -- A foreign turn that no Redisson waiter was seen to use makes the
        -- next one come later (see release.lua); a used one resets that.
        if in_turn and noting() then
            local seen = tonumber(redis.call('hget', grants, '~seen') or '0') or 0
            if seen >= 2 then
                redis.call('hset', grants, '~idle', 0)
            elseif redis.call('hincrby', grants, '~idle', 1) > 6 then
                redis.call('hset', grants, '~idle', 6)
            end
            redis.call('hdel', grants, '~seen')
        end
    end
    -- Only a listening caller can have queued its client.
    if queue and ARGV[5] == '1' then
        redis.pcall('zrem', queue, client)
        redis.pcall('hdel', grants, client)
    end
    return acquired(token)
end

if noting() then
    -- A client that does not read the marker holds the lock: a foreign
    -- turn was used; and once the turn is over (or with a plain marker),
    -- that holder took the lock reserved for the caller's client, one more
    -- turn for a Redisson waiter (see release.lua), counted down to -8.
    if in_turn then
        redis.call('hset', grants, '~seen', 2)
    end
    if turn_left == 0 and redis.call('hincrby', grants, '~turns', -1) < -8 then
        redis.call('hset', grants, '~turns', -8)
    end
end
enqueue(ttl, claimant and claimant == client)
return refuse(ttl)
