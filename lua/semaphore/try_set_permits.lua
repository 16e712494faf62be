-- try_set_permits.lua: give a semaphore its initial number of permits, only
-- if it has none set yet (Redisson's trySetPermits; the same script serves
-- RPermitExpirableSemaphore, which never passes ARGV[3]).
--
-- KEYS[1]  semaphore key (STRING, see try_acquire.lua)
-- KEYS[2]  channel "redisson_sc:{<name>}" (see release.lua)
-- ARGV[1]  permits: a decimal integer >= 1 (the caller checks)
-- ARGV[2]  publish command: "publish" or "spublish"
-- ARGV[3]  optional time to live in milliseconds (>= 1): the key is set
--          with PX (Redisson's trySetPermits(permits, timeToLive))
--
-- Returns
--   1  set: KEYS[1] = ARGV[1] (with ARGV[3], a PTTL of ARGV[3]), and ARGV[1]
--      published on KEYS[2]
--   0  KEYS[1] already exists (of any type): nothing changed
local value = redis.call('exists', KEYS[1])
if value == 1 then
    return 0
end
if ARGV[3] then
    redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[3])
else
    redis.call('set', KEYS[1], ARGV[1])
end
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1
