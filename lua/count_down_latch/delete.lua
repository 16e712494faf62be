-- delete.lua: delete a count-down latch, opening it without waking its
-- waiters as opened (Redisson RCountDownLatch's delete).
--
-- KEYS[1]  latch key (STRING, see count_down.lua)
-- KEYS[2]  channel "redisson_countdownlatch__channel__{<name>}"
-- ARGV[1]  publish command: "publish" or "spublish"
--
-- Returns
--   1  KEYS[1] existed and was deleted; "1" (Redisson's new-count message:
--      waiters read the count again, find the latch open, and return)
--      published on KEYS[2]
--   0  KEYS[1] did not exist: nothing changed
--
-- Errors (nothing is changed)
--   WRONGTYPE when KEYS[1] holds a type other than STRING (keyholder's
--   check; Redisson deletes whatever is there).
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
    return 0
end
if kind ~= 'string' then
    return redis.error_reply('WRONGTYPE latch ' .. KEYS[1] .. ' is a ' .. kind)
end
redis.call('del', KEYS[1])
redis.call(ARGV[1], KEYS[2], '1')
return 1
