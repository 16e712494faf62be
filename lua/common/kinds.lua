-- lua/common/kinds.lua: what a lock script answers when another kind's lock
-- sits at its name (the kinds share Redisson's hash layout; a read-write
-- lock's hash has a "mode" field, the others' do not): the tail of a
-- WRONGTYPE error, "WRONGTYPE <key>" .. tail. Prepended to the scripts whose
-- header names it (see docs/design.md, "Lua scripts"); defines two local
-- strings and no function, so it costs no closure. lua/lock/acquire.lua
-- and lua/lock/release.lua keep inline copies of the marked regions;
-- tests/suite/script_headers.rs checks that the copies are identical.

-- Said by the Lock, SpinLock and FairLock scripts of a read-write lock.
-- <common:rwlock_here>
local RWLOCK_HERE = ' holds another kind\'s lock: a read-write lock (a hash with a "mode" field)'
-- </common:rwlock_here>
-- Said by the read-write lock's scripts of the other kinds' locks.
local PLAIN_LOCK_HERE = ' holds another kind\'s lock: a lock hash without a "mode" field (a Lock, SpinLock or FairLock)'
