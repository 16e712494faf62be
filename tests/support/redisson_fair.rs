//! A stand-in for a Java Redisson client's fair lock, for tests: Lua written
//! from the reference's description of RedissonFairLock's
//! `tryLockInnerAsync` (the `EVAL_LONG` variant) and `unlockInnerAsync`
//! (without the latch), run on a raw connection. Names without braces only.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use redis::Value;

/// Redisson's fair acquire (`EVAL_LONG`): nil when acquired, else a wait.
pub const ACQUIRE: &str = r"
local key, queue, timeouts = KEYS[1], KEYS[2], KEYS[3]
local lease, owner, wait, now = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
while true do
    local head = redis.call('lindex', queue, 0)
    if head == false then break end
    local t = redis.call('zscore', timeouts, head)
    if t == false or tonumber(t) > now then break end
    redis.call('zrem', timeouts, head)
    redis.call('lpop', queue)
end
if redis.call('exists', key) == 0 and
   (redis.call('exists', queue) == 0 or redis.call('lindex', queue, 0) == owner) then
    redis.call('lpop', queue)
    redis.call('zrem', timeouts, owner)
    for _, m in ipairs(redis.call('zrange', timeouts, 0, -1)) do
        redis.call('zincrby', timeouts, -wait, m)
    end
    redis.call('hset', key, owner, 1)
    redis.call('pexpire', key, lease)
    return nil
end
if redis.call('hexists', key, owner) == 1 then
    redis.call('hincrby', key, owner, 1)
    redis.call('pexpire', key, lease)
    return nil
end
if redis.call('zscore', timeouts, owner) ~= false then
    return math.max(0, redis.call('pttl', key))
end
local tail = redis.call('lindex', queue, -1)
local ttl
if tail ~= false and tail ~= owner and redis.call('zscore', timeouts, tail) ~= false then
    ttl = tonumber(redis.call('zscore', timeouts, tail)) - now
else
    ttl = redis.call('pttl', key)
end
if redis.call('zadd', timeouts, ttl + wait + now, owner) == 1 then
    redis.call('rpush', queue, owner)
end
return ttl
";

/// Redisson's fair unlock: nil (not owner), 0 (nested), 1 (released).
pub const UNLOCK: &str = r"
local key, queue, timeouts, channel = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
while true do
    local head = redis.call('lindex', queue, 0)
    if head == false then break end
    local t = redis.call('zscore', timeouts, head)
    if t == false or tonumber(t) > tonumber(ARGV[4]) then break end
    redis.call('zrem', timeouts, head)
    redis.call('lpop', queue)
end
if redis.call('exists', key) == 0 then
    local head = redis.call('lindex', queue, 0)
    if head ~= false then redis.call(ARGV[5], channel .. ':' .. head, ARGV[1]) end
    return 1
end
if redis.call('hexists', key, ARGV[3]) == 0 then return nil end
if redis.call('hincrby', key, ARGV[3], -1) > 0 then
    redis.call('pexpire', key, ARGV[2])
    return 0
end
redis.call('del', key)
local head = redis.call('lindex', queue, 0)
if head ~= false then redis.call(ARGV[5], channel .. ':' .. head, ARGV[1]) end
return 1
";

/// One Redisson acquire attempt of `owner` on `name`.
pub fn acquire(
    con: &mut redis::Connection,
    lease: i64,
    slot: i64,
    name: &str,
    owner: &str,
    now: i64,
) -> Value {
    redis::Script::new(ACQUIRE)
        .key(name)
        .key(format!("redisson_lock_queue:{{{name}}}"))
        .key(format!("redisson_lock_timeout:{{{name}}}"))
        .arg(lease)
        .arg(owner)
        .arg(slot)
        .arg(now)
        .invoke(con)
        .unwrap()
}

/// One Redisson unlock of `owner` on `name`.
pub fn release(con: &mut redis::Connection, lease: i64, name: &str, owner: &str, now: i64) -> Value {
    redis::Script::new(UNLOCK)
        .key(name)
        .key(format!("redisson_lock_queue:{{{name}}}"))
        .key(format!("redisson_lock_timeout:{{{name}}}"))
        .key(format!("redisson_lock__channel:{{{name}}}"))
        .arg("0")
        .arg(lease)
        .arg(owner)
        .arg(now)
        .arg("publish")
        .invoke(con)
        .unwrap()
}
