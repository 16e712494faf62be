-- release.lua: give back one hold of a reentrant lock (Redisson RLock layout,
-- with Redisson 3.24+'s unlock latch for retried releases), and pass the
-- lock on to the keyholder waiter whose turn it is.
--
-- KEYS[1]  lock key (HASH)
-- KEYS[2]  unlock channel "redisson_lock__channel:{<name>}"
-- KEYS[3]  optional claim marker (see acquire.lua)
-- KEYS[4]  waiter queue (see acquire.lua; required with KEYS[3])
-- KEYS[5]  waiter grants (see acquire.lua; required with KEYS[3])
-- KEYS[6]  keyholder's listening channel "keyholder_lock__listening:{<name>}"
--          (see names.rs; required with KEYS[3]): every keyholder client
--          that listens on KEYS[2] listens on it too, subscribed and
--          unsubscribed in the same command, and nobody publishes there: its
--          listeners, less KEYS[2]'s, are the others (Redisson waiters)
-- KEYS[7]  optional unlock latch (keyholder's own key, see names.rs; requires
--          KEYS[3..6]): one key per owner and lock, reused by each of its
--          releases; a STRING "<request id>:<outcome>". Any other key at its
--          name is not a latch: it is never read as one nor overwritten, and
--          the release runs unlatched
-- ARGV[1]  lease in milliseconds re-applied while holds remain
-- ARGV[2]  owner id "<client-uuid>:<thread-id>"
-- ARGV[3]  for how many more milliseconds the releasing client listens on
--          KEYS[2] itself, "0" when it does not (required with KEYS[3]): a
--          release with nobody queued passes the lock on as below only when
--          the releasing client listens (it may take turns with Redisson
--          waiters), and otherwise publishes "0" alone
-- ARGV[4]  what only passing the lock on reads, in one argument (required
--          with KEYS[3]): "<claim> <turn> <window> <head start> <client>
--          <prefix>", separated by single spaces: <claim> the claim window
--          in milliseconds, the marker's TTL; <turn> the foreign turn in
--          milliseconds, "0": no foreign turns (see "Foreign turns" below);
--          <window> the barging window in milliseconds, "0": a release
--          always passes the lock on as below (see "Barging" below);
--          <head start> the releasing client's head start in milliseconds
--          when it barges; <client> the releasing client's id (no spaces);
--          <prefix> the wake channel prefix, the rest of the argument:
--          client <id>'s waiter listens on "<prefix>:<id>"
-- ARGV[5]  optional publish command, "publish" (default) or "spublish"
--          (Redis Cluster shard channels: listeners are then counted with
--          PUBSUB SHARDNUMSUB, on this node); required with KEYS[7]. Without
--          KEYS[3], ARGV[3] and ARGV[4] are not read (any placeholder)
-- ARGV[6]  latch TTL in milliseconds (required with KEYS[7])
-- ARGV[7]  request id: a decimal number unique to this release (required
--          with KEYS[7]); a retry of the same release sends the same id
-- ARGV[8]  optional "1" on a retry
--
-- The unlock message published on KEYS[2] is always Redisson's "0" (wake
-- one waiter).
--
-- Returns
--   nil  the owner holds nothing here (never held, expired, or force-unlocked);
--        nothing was changed
--   0    one hold released, others remain; the key's PTTL was reset to ARGV[1]
--   1    last hold released, and the lock passed on as below
--   a bulk string: last hold released, barging (see "Barging" below): the
--        queue's front client, owed a wake by the releasing client
-- With a latch, "<request id>:<outcome>" is stored in KEYS[7] for ARGV[6] ms,
-- and a retry whose request id is stored there returns that outcome without
-- changing anything: a release whose reply was lost can be retried without
-- decrementing twice. (Redisson keys its latch by a random id per release and
-- deletes it afterwards; one reused key per owner needs no deletion.)
--
-- Passing the lock on. The key is deleted. The queue's clients are then
-- taken from the front, each removed from KEYS[4] and KEYS[5], until one
-- whose waiter still listens on its wake channel "<prefix>:<client>" hears
-- the message published there (PUBLISH counts the receivers: a client that
-- died or stopped listening counts 0). That client is served in one of two
-- ways:
--   granted  when KEYS[5] has an entry for it and nobody but keyholder
--            clients listens on KEYS[2] (PUBSUB NUMSUB of KEYS[2] less that
--            of KEYS[6], in one call, is 0: no Redisson waiter to be fair
--            to; or, they listening, on the queue's turn when foreign turns
--            rotate, see below): the lock is given to the entry's owner id
--            with count 1 and the entry's lease, counted from the same
--            reading of the server's clock as <ms since ...> below
--            (PEXPIREAT), and the wake message is
--            "<owner id>/<ticket> <ms since the entry was written>" (the
--            entry's ticket: the grantee's client tells this grant from one
--            made during an earlier wait of the same thread, whose message
--            may still be on its way; an entry without a ticket, written by
--            an older keyholder, gets "<owner id> <ms ...>"); nothing is
--            published on KEYS[2];
--   woken    otherwise: the wake message is empty, the marker names the
--            client for <claim> ms, and "2" then "0" are published on
--            KEYS[2]: Redisson waiters take "0" as their wake-up and ignore
--            "2", keyholder clients take a "0" right after a "2" as already
--            handled.
-- With no such client, "0" alone is published on KEYS[2].
--
-- Barging. With <window> above 0, nobody but keyholder clients listening
-- on KEYS[2] (counted as above), no marker at KEYS[3] (nor another key;
-- a marker in its last millisecond counts as gone), and the queue's front
-- client queued less than <window> ms ago (its score, see acquire.lua), the
-- lock is not passed on: the key is deleted, the front client is left
-- queued, in its place and with its grant, and the marker names the
-- releasing client (<client>) for <head start> ms, or what is left of the
-- window if less (at least 1): the releasing client, any of its threads,
-- may take the lock back first. Nobody is woken: the front client's id is
-- returned instead (a bulk string; a latch records 1), and the releasing
-- client owes it a wake, an empty message on its wake channel
-- "<prefix>:<front>", once the marker ends, unless one of its threads took
-- the lock back meanwhile (should nobody hear that message, "0" on KEYS[2]
-- wakes every keyholder waiter); a client that dies meanwhile leaves the
-- queue to the lease of the hold it gave back, as if it had died holding
-- it. Nothing is published on KEYS[2]. When the front client is the
-- releasing client itself, the release does not barge: passing the lock on
-- serves it. Once the front client has waited <window> ms, releases pass
-- the lock on as above again: a client waits about <window> ms and a hold
-- more, at most, before the lock is handed to it.
--
-- Foreign turns. When others than keyholder clients listen on KEYS[2]
-- (Redisson waiters: the count above is above 0) and <turn> is above 0, the
-- release alternates between the queue and them, so that they are not
-- starved by grants and woken keyholder clients: after every
-- max(1, floor(K / F)) * 2^I releases that served the queue (K: the queued
-- clients and the releasing client, F: the foreign listeners, I: the field
-- "~idle" of KEYS[5], how many foreign turns in a row no Redisson waiter
-- was seen to use, see acquire.lua; counted in the field "~turns" of
-- KEYS[5], which no client id can be), a release
-- gives a foreign turn instead: the first queued client that still listens
-- is woken with an empty message as above, but the marker is
-- "~<server ms when the turn ends>:<client>" for <claim> ms: until the turn
-- ends (<turn> ms from now) no keyholder client takes the free lock, then
-- only that client does (see acquire.lua); "2" then "0" are published
-- on KEYS[2], which wakes the Redisson waiters alone. With nobody to wake,
-- the marker is "~<ms>:" for <turn> ms, and "0" alone is published.
-- A Redisson waiter that takes the lock reserved for a client after its
-- turn has one more turn: acquire.lua counts "~turns" down then, so the
-- queue's turns make up for it before the next foreign turn.
--
-- Errors
--   WRONGTYPE when a key of another type sits at the lock's name, or a
--   read-write lock's hash (it has a "mode" field): untouched.
--
-- Nothing prepended: the common case builds one closure only (ADR 39), so
-- the parts it shares are inline copies, marked "<common:NAME>", of
-- lua/common/latch.lua, lua/common/kinds.lua and lua/common/clock.lua.
local key, channel, marker, queue, grants, listening, latch =
    KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local owner = ARGV[2]
local publish = ARGV[5] or 'publish'
local request, retry, latch_ttl = ARGV[7], ARGV[8] == '1', ARGV[6]

if latch then
    -- The latch's value: "" when it is absent; a key that is not a latch
    -- unlatches the release; a retry of a recorded release replays it.
    local replay = nil
    -- <common:latch_check> lua/common/latch.lua's, inline (see the header)
    -- One GET reads it: nothing there is an empty latch; an error reply
    -- (WRONGTYPE: a key of another type) is no latch.
    local earlier = redis.pcall('get', latch)
    if earlier == false then
        earlier = ''
    elseif type(earlier) ~= 'string' then
        earlier = nil
    end
    if not (earlier == '' or (earlier and string.match(earlier, '^%d+:%d+$'))) then
        latch = nil
    elseif earlier ~= '' and retry then
        local id, outcome = string.match(earlier, '^(%d+):(%d+)$')
        if id == request then
            replay = tonumber(outcome)
        end
    end
    -- </common:latch_check>
    if replay then
        return replay
    end
end

-- Records the outcome in the latch, if any, and returns it.
local function done(outcome)
    -- <common:latch_done> lua/common/latch.lua's, inline (see the header)
    if latch then
        redis.call('set', latch, request .. ':' .. outcome, 'px', latch_ttl)
    end
    return outcome
    -- </common:latch_done>
end

-- The owner's field and a read-write lock's "mode", in one call.
local held = redis.call('hmget', key, owner, 'mode')
if held[2] then
    -- <common:rwlock_here> lua/common/kinds.lua's, inline (see the header)
    local RWLOCK_HERE = ' holds another kind\'s lock: a read-write lock (a hash with a "mode" field)'
    -- </common:rwlock_here>
    return redis.error_reply('WRONGTYPE ' .. key .. RWLOCK_HERE)
end
if not held[1] then
    return nil
end
-- A count of 1 is the last hold: deleted without counting it down first
-- (one call fewer; the same outcome). Anything else is counted down, and
-- a count that is no integer is an error there, untouched.
local count = tonumber(held[1])
if not count or count > 1 then
    if redis.call('hincrby', key, owner, -1) > 0 then
        redis.call('pexpire', key, ARGV[1])
        return done(0)
    end
end
redis.call('del', key)

-- The common case ends here, before the helpers below are built: nobody
-- queued (no queue key) and a releasing client that does not listen.
if not queue or (ARGV[3] == '0' and redis.call('exists', queue) == 0) then
    redis.call(publish, channel, '0')
    return done(1)
end

-- Passing the lock on: KEYS[3..6] are all there. Its settings, one
-- argument (see ARGV[4]); the numbers stay strings until used.
local claim_ms, turn_ms, window, head_start, client, wake_prefix =
    string.match(ARGV[4], '^(%d+) (%d+) (%d+) (%d+) (%S+) (.*)$')
turn_ms, window = tonumber(turn_ms) or 0, tonumber(window) or 0

-- The server's clock in milliseconds.
local function read_clock()
    -- <common:now_ms> lua/common/clock.lua's, inline (see the header)
    local now = redis.call('time')
    return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    -- </common:now_ms>
end

-- The same, read once, when first needed: a release that serves nobody
-- reads no clock.
local clock = false
local function now_ms()
    clock = clock or read_clock()
    return clock
end

-- Below, a keyholder key's type is read by the call that uses it: a call
-- made with redis.pcall answers a key of another type with an error reply
-- (a table with an "err" field), which leaves that key alone, as the
-- header says; an absent key reads as empty.

-- How many listen on the unlock channel besides keyholder clients (all of
-- which listen on KEYS[6] too): Redisson waiters.
local function count_others()
    local numsub = publish == 'spublish' and 'shardnumsub' or 'numsub'
    local counts = redis.call('pubsub', numsub, channel, listening)
    return tonumber(counts[2]) - tonumber(counts[4])
end

-- How many clients are queued (0 when KEYS[4] is no sorted set).
local function count_queued()
    local queued = redis.pcall('zcard', queue)
    return type(queued) == 'number' and queued or 0
end

-- Whether the marker's name is free to be set: nothing there, or a marker
-- (a STRING with a TTL; STRLEN answers any other type with an error reply).
local function markable()
    local left = redis.call('pttl', marker)
    return left == -2 or (left > 0 and type(redis.pcall('strlen', marker)) == 'number')
end

-- Whether the foreign waiters take turns with the queue, and whether this
-- release is their turn (see the header).
local function foreign_turn(others)
    if others <= 0 or turn_ms <= 0 then
        return false, false
    end
    -- "~idle" and "~turns" in one call (a hash, or nothing there).
    local fields = redis.pcall('hmget', grants, '~idle', '~turns')
    if fields.err or not markable() then
        return false, false
    end
    local idle = tonumber(fields[1] or '0') or 0
    local due = math.max(1, math.floor((count_queued() + 1) / others)) * 2 ^ math.min(math.max(idle, 0), 6)
    local served = tonumber(fields[2] or '0') or 0
    local foreign = served >= due
    if foreign then
        redis.call('hdel', grants, '~turns')
        redis.call('hset', grants, '~seen', 0)
    else
        redis.call('hincrby', grants, '~turns', 1)
    end
    if redis.call('pttl', grants) < 0 then
        redis.call('pexpire', grants, claim_ms)
    end
    return true, foreign
end

-- Serves the first queued client that still listens; returns how: 'granted',
-- 'woken', or nil when nobody was.
local function pass_on(others, foreign)
    while true do
        -- ZPOPMIN: the front, taken off the queue in one call (nothing when
        -- it is empty, or no sorted set).
        local popped = redis.pcall('zpopmin', queue)
        local head = type(popped) == 'table' and popped[1]
        if not head then
            return nil
        end
        local entry = redis.pcall('hget', grants, head)
        if type(entry) == 'string' then
            redis.call('hdel', grants, head)
        else
            entry = false
        end
        local grantee, lease, since, ticket = false, nil, nil, nil
        if entry and others <= 0 and not foreign then
            grantee, lease, since, ticket = string.match(entry, '^(%S+) (%d+) (%d+) ?(%d*)$')
        end
        local message = ''
        if grantee then
            local to = ticket ~= '' and grantee .. '/' .. ticket or grantee
            message = to .. ' ' .. math.max(0, now_ms() - tonumber(since))
        end
        if redis.call(publish, wake_prefix .. ':' .. head, message) > 0 then
            if grantee then
                redis.call('hset', key, grantee, 1)
                -- The lease runs from the clock reading the message's
                -- milliseconds are measured to, not from the script's start
                -- (PEXPIRE's base, which may be earlier by however long the
                -- server was descheduled meanwhile): the grantee counts its
                -- lease from no later than this.
                redis.call('pexpireat', key, string.format('%d', now_ms() + tonumber(lease)))
                return 'granted'
            end
            if foreign then
                redis.call('set', marker, '~' .. (now_ms() + turn_ms) .. ':' .. head, 'px', claim_ms)
            elseif markable() then
                redis.call('set', marker, head, 'px', claim_ms)
            end
            return 'woken'
        end
    end
end

-- Barging (see the header): the releasing client may take the lock back
-- while the front client has waited less than the window; the front
-- client keeps its place, unwoken. Returns the front client's id, owed a
-- wake by the releasing client; false when the release does not barge
-- (the releasing client at the front among the reasons).
local function barge(others)
    if window <= 0 or others > 0 then
        return false
    end
    -- No live marker (one in its last millisecond is as good as gone), nor
    -- a key that is not a marker, at its name.
    local left = redis.call('pttl', marker)
    if left > 0 or left == -1 or (left == 0 and redis.call('type', marker).ok ~= 'string') then
        return false
    end
    local front = redis.pcall('zrange', queue, 0, 0, 'withscores')
    local waited = type(front) == 'table' and front[2] and now_ms() - tonumber(front[2])
    if not waited or waited >= window then
        return false
    end
    -- The releasing client at the front: passing the lock on serves it.
    local head = front[1]
    if head == client then
        return false
    end
    local start = math.min(tonumber(head_start) or 1, math.floor(window - waited))
    redis.call('set', marker, client, 'px', math.max(1, start))
    return head
end

local others = count_others()
local front = barge(others)
if front then
    done(1)
    return front
end
local rotating, foreign = foreign_turn(others)
-- Taking turns, the queue's turn is its own: a grant, as with no foreign
-- waiter.
local served = pass_on(rotating and 0 or others, foreign)
if foreign and not served then
    -- Nobody queued: the turn still keeps keyholder clients off the free
    -- lock while it lasts.
    redis.call('set', marker, '~' .. (now_ms() + turn_ms) .. ':', 'px', turn_ms)
end
if served == 'woken' then
    redis.call(publish, channel, '2')
end
if served ~= 'granted' then
    redis.call(publish, channel, '0')
end
return done(1)
