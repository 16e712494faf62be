-- try_set_count.lua: close a count-down latch with a count, only if it is
-- open (Redisson RCountDownLatch's trySetCount).
--
-- KEYS[1]  latch key (STRING, see count_down.lua)
-- KEYS[2]  channel "redisson_countdownlatch__channel__{<name>}"
-- ARGV[1]  count: a decimal integer >= 1 (the caller checks)
-- ARGV[2]  publish command: "publish" or "spublish"
--
-- Returns
--   1  set: KEYS[1] = ARGV[1], and "1" (Redisson's new-count message)
--      published on KEYS[2]
--   0  KEYS[1] exists (the latch is counting, or another type sits there):
--      nothing changed
if redis.call('exists', KEYS[1]) == 1 then
    return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], '1')
return 1
