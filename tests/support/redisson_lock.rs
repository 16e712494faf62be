//! A stand-in for a Java Redisson client's reentrant lock (`RLock`), for
//! tests: written from SPEC section 2 and Redisson's `RedissonLock`, on plain
//! redis connections, with no keyholder code. Its acquire is Redisson's
//! `tryLockInnerAsync` (take a free lock or re-enter, else reply the PTTL),
//! its release Redisson's `unlockInnerAsync` without the latch (DEL and
//! PUBLISH `0` on the last hold), and its waiting loop is `lock()`'s: try,
//! subscribe the unlock channel, then loop { try again; wait for an unlock
//! message or the holder's PTTL }, and unsubscribe once acquired. A `0` or
//! `1` wakes the waiter (Redisson's semaphore: one arriving while it is not
//! yet waiting still counts); anything else (keyholder's `2`) is ignored, as
//! Redisson's `LockPubSub` does. Names without braces only.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufReader, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Redisson's acquire: nil when acquired or re-entered, else the PTTL.
pub const ACQUIRE: &str = r"
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
";

/// Redisson's release: nil (not the owner), 0 (holds remain), 1 (released).
pub const RELEASE: &str = r"
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 0
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return 1
";

/// Redisson `RFencedLock`'s acquire (`RedissonFencedLock.tryLockInnerAsync`),
/// KEYS = [name, token counter `redisson_lock_token:{<name>}`], ARGV =
/// [lease ms, owner id]: `{-1, token}` when acquired or re-entered (a
/// re-entry mints a token too), the counter `INCR`ed; else `{pttl, -1}`.
pub const FENCED_ACQUIRE: &str = r"
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
    local token = redis.call('incr', KEYS[2])
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {-1, token}
end
return {redis.call('pttl', KEYS[1]), -1}
";

/// Redisson's watchdog lease, in milliseconds.
pub const LEASE_MS: i64 = 30_000;

/// One process of a Redisson client: a command connection, and a pub/sub
/// connection read by its own thread (Redisson's netty event loop) that
/// releases a semaphore per unlock message (Redisson's `RedissonLockEntry`
/// latch); one thread of the process locks at a time.
pub struct RedissonClient {
    cmd: redis::Connection,
    /// The pub/sub connection's write side.
    sub: TcpStream,
    entry: Arc<Entry>,
    reader: Option<JoinHandle<()>>,
    id: String,
    acquire: redis::Script,
    release: redis::Script,
}

/// The waiting entry of the process's one lock name.
#[derive(Default)]
struct Entry {
    state: Mutex<EntryState>,
    changed: Condvar,
}

#[derive(Default)]
struct EntryState {
    /// A lock() is waiting: unlock messages release permits.
    active: bool,
    /// Subscriptions confirmed by Redis since the entry began.
    confirmed: bool,
    permits: u32,
}

impl RedissonClient {
    /// A client of the server at `url` (`redis://host:port/`, no password),
    /// with client id `id` (a UUID, as Redisson's).
    pub fn connect(url: &str, id: &str) -> RedissonClient {
        let client = redis::Client::open(url).unwrap();
        let cmd = client.get_connection_with_timeout(Duration::from_secs(2)).unwrap();
        cmd.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let addr = url.trim_start_matches("redis://").trim_end_matches('/');
        let sub = TcpStream::connect(addr).unwrap();
        sub.set_nodelay(true).unwrap();
        let entry = Arc::new(Entry::default());
        let reader = {
            let stream = sub.try_clone().unwrap();
            let entry = Arc::clone(&entry);
            std::thread::spawn(move || read_messages(stream, &entry))
        };
        RedissonClient {
            cmd,
            sub,
            entry,
            reader: Some(reader),
            id: id.to_owned(),
            acquire: redis::Script::new(ACQUIRE),
            release: redis::Script::new(RELEASE),
        }
    }

    /// The owner id of thread `thread`.
    pub fn owner(&self, thread: u64) -> String {
        format!("{}:{thread}", self.id)
    }

    /// One acquire attempt: `None` when acquired, else the PTTL.
    pub fn try_acquire(&mut self, name: &str, thread: u64) -> Option<i64> {
        let owner = self.owner(thread);
        self.acquire.key(name).arg(LEASE_MS).arg(owner).invoke(&mut self.cmd).unwrap()
    }

    /// One attempt of Redisson `RFencedLock`'s acquire ([`FENCED_ACQUIRE`]):
    /// `Ok(token)` when acquired or re-entered, else `Err(pttl)`.
    pub fn try_acquire_fenced(&mut self, name: &str, thread: u64) -> Result<u64, i64> {
        let owner = self.owner(thread);
        let counter = format!("redisson_lock_token:{{{name}}}");
        let (ttl, token): (i64, i64) = redis::Script::new(FENCED_ACQUIRE)
            .key(name)
            .key(counter)
            .arg(LEASE_MS)
            .arg(owner)
            .invoke(&mut self.cmd)
            .unwrap();
        if ttl == -1 { Ok(token.unsigned_abs()) } else { Err(ttl) }
    }

    /// Redisson's `lock()`: try; subscribe (waiting for Redis to confirm);
    /// then loop { try; wait for a permit or the holder's PTTL }; and
    /// unsubscribe once held (without waiting, as Redisson's asynchronous
    /// unsubscribe). Gives up (false) at `deadline`, which bounds the
    /// test's loops.
    pub fn lock(&mut self, name: &str, thread: u64, deadline: Instant) -> bool {
        if self.try_acquire(name, thread).is_none() {
            return true;
        }
        let channel = format!("redisson_lock__channel:{{{name}}}");
        *self.entry.state.lock().unwrap() = EntryState { active: true, confirmed: false, permits: 0 };
        self.sub.write_all(&redis::cmd("SUBSCRIBE").arg(&channel).get_packed_command()).unwrap();
        {
            let state = self.entry.state.lock().unwrap();
            let (state, _) = self
                .entry
                .changed
                .wait_timeout_while(state, Duration::from_secs(5), |s| !s.confirmed)
                .unwrap();
            assert!(state.confirmed, "redisson stand-in: SUBSCRIBE not confirmed");
        }
        let acquired = loop {
            let Some(ttl) = self.try_acquire(name, thread) else {
                break true;
            };
            let now = Instant::now();
            if now >= deadline {
                break false;
            }
            let wait = if ttl >= 0 { Duration::from_millis(ttl.unsigned_abs()) } else { deadline - now };
            let state = self.entry.state.lock().unwrap();
            let (mut state, _) = self
                .entry
                .changed
                .wait_timeout_while(state, wait.min(deadline - now), |s| s.permits == 0)
                .unwrap();
            state.permits = state.permits.saturating_sub(1);
        };
        self.entry.state.lock().unwrap().active = false;
        self.sub.write_all(&redis::cmd("UNSUBSCRIBE").arg(&channel).get_packed_command()).unwrap();
        acquired
    }

    /// Redisson's unlock of thread `thread`'s hold: nil, 0 or 1 as the script.
    pub fn unlock(&mut self, name: &str, thread: u64) -> Option<i64> {
        let channel = format!("redisson_lock__channel:{{{name}}}");
        let owner = self.owner(thread);
        self.release.key(name).key(channel).arg("0").arg(LEASE_MS).arg(owner).invoke(&mut self.cmd).unwrap()
    }
}

impl Drop for RedissonClient {
    fn drop(&mut self) {
        let _ = self.sub.shutdown(Shutdown::Both);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// The pub/sub reader: a `0` releases one permit, a `1` one too (one thread
/// waits per process here), while a lock() waits; other payloads are not
/// Redisson's and are ignored. Ends when the socket is shut down.
fn read_messages(stream: TcpStream, entry: &Entry) {
    let mut reader = BufReader::new(stream);
    let mut parser = redis::Parser::new();
    while let Ok(value) = parser.parse_value(&mut reader) {
        let redis::Value::Array(items) = value else { continue };
        let text = |v: &redis::Value| match v {
            redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            _ => String::new(),
        };
        let kind = items.first().map(text).unwrap_or_default();
        let mut state = entry.state.lock().unwrap();
        match kind.as_str() {
            "subscribe" => state.confirmed = true,
            "message" if state.active => {
                let payload = items.get(2).map(text).unwrap_or_default();
                if payload == "0" || payload == "1" {
                    state.permits += 1;
                }
            }
            _ => continue,
        }
        entry.changed.notify_all();
    }
}
