-- read_renew.lua: the watchdog's renewal of read holds (Redisson 4.4+'s
-- renewal/ReadLockTask): for each lock, the hash and the timeout keys of
-- this client's read owners that still hold it.
--
-- KEYS[2i-1]  lock key (HASH; see read_acquire.lua) of the i-th lock
-- KEYS[2i]    its key prefix "{<name>}" (or "<name>" when the name has a
--             "{"): owner f's hold n has the timeout key
--             "<KEYS[2i]>:<f>:rwlock_timeout:<n>"
-- ARGV[1]     lease in milliseconds to re-apply (the watchdog timeout)
-- ARGV[2..]   per lock, in KEYS order: a count c, then c read owner ids
--             "<client-uuid>:<thread-id>" of this client to renew there
--
-- Returns an array with one integer per lock, in order:
--   1  at least one of the owners still holds a read hold: for each such
--      owner with count k, its timeout keys 1..k got PTTL ARGV[1], and the
--      lock's PTTL was set to ARGV[1]
--   0  none does (the holds are lost); nothing was touched
-- Owners absent from the hash are skipped, so a dead client's timeout keys
-- are never kept alive (the zombie-reader fix of Redisson 4.4). A key of
-- another type at a lock's name, or a HASH without a "mode" field (another
-- kind's lock, whose owner fields look like read holders'), reports 0 and
-- is left untouched.
local renewed = {}
local cursor = 2
for i = 1, #KEYS, 2 do
    local key, keyprefix = KEYS[i], KEYS[i + 1]
    local owners = tonumber(ARGV[cursor])
    cursor = cursor + 1
    local hash = redis.call('type', key).ok == 'hash' and redis.call('hexists', key, 'mode') == 1
    local alive = false
    for _ = 1, owners do
        local owner = ARGV[cursor]
        cursor = cursor + 1
        local holds = hash and tonumber(redis.call('hget', key, owner))
        if holds then
            alive = true
            for n = holds, 1, -1 do
                redis.call('pexpire', keyprefix .. ':' .. owner .. ':rwlock_timeout:' .. n, ARGV[1])
            end
        end
    end
    if alive then
        redis.call('pexpire', key, ARGV[1])
        renewed[#renewed + 1] = 1
    else
        renewed[#renewed + 1] = 0
    end
end
return renewed
