//! The Redisson 4 row: what a Java service using Redisson's `RLock` asks of
//! Redis, on the wire (read from /work/shared/reference/redisson-wire.md,
//! sections 1.3, 1.5 and 2; not Redisson's code):
//!
//! * acquire: `tryLockInner` by EVALSHA (`exists`/`hexists` → `hincrby` +
//!   `pexpire` → nil, else `pttl`), lease 30 s, owner `<client uuid>:<thread
//!   id>`;
//! * refused: `tryLock(wait)`'s loop. Subscribe to `redisson_lock__channel:
//!   {<name>}`, one reference-counted subscription per lock per client shared
//!   by its threads, then loop { try again; if refused, wait on the client's
//!   per-lock semaphore at most the returned PTTL }; unsubscribe when the last
//!   waiting thread of the client is done. A `0` on the channel releases one
//!   permit, a `1` as many as threads wait (`LockPubSub`); other payloads are
//!   ignored; a permit released while nobody waits still counts;
//! * release: the 3.24+ unlock script with the unlock latch (`get` latch →
//!   `hexists` → `hincrby -1` → `pexpire` + `set` latch 0, or `del` +
//!   `publish 0` + `set` latch 1), then the `DEL` of the latch that Redisson
//!   sends after it without waiting for its reply (here: written at once, its
//!   reply read before the connection's next command).
//!
//! One command connection per thread (what Redisson's pool effectively gives
//! a thread), and per client one pub/sub connection, opened with the client
//! as Redisson's `subscriptionConnectionMinimumIdleSize` of 1 does. Not
//! modelled: the watchdog (its first renewal comes 10 s after an acquisition,
//! one EVAL per client for all its locks: none in a bench window), and the
//! `WAIT` Redisson adds only with replicas. On a Redis Cluster the release
//! publishes with `SPUBLISH`, as Redisson's default sharded mode does, but
//! waiting (`SSUBSCRIBE` per node) is not modelled: a refused acquisition
//! there is an error.

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redis::Value;

use super::{ACQUIRE_LIMIT, LEASE_MS, LockImpl, Session};
use crate::env::{Conns, Env, channel_of};
use crate::error::{Res, err};

/// Commands Redisson's two scripts run inside EVALSHA, for the round trips
/// counted from `INFO commandstats` (W1, W7, `--no-audit`). Its unlock
/// script's `del` of the lock goes with its `publish` (or `spublish`), and
/// the client sends a `DEL` of the latch itself: `del-publish-spublish`
/// counts the `del` calls beyond those as top-level (`Delta::top_level`).
/// The audited windows (W2, W6) count top-level commands exactly.
pub(crate) const SCRIPT_COMMANDS: &[&str] = &[
    "exists",
    "hexists",
    "hincrby",
    "pexpire",
    "pttl",
    "get",
    "set",
    "publish",
    "spublish",
    "del-publish-spublish",
];

/// The unlock latch's TTL, ms: Redisson's `(timeout + retryDelay) ×
/// retryAttempts` with its defaults, `(3000 + 1000..2000) × 4`, at its top.
const LATCH_TTL_MS: u64 = 20_000;

/// Redisson's `UNLOCK_MESSAGE`.
const UNLOCK_MESSAGE: &str = "0";

/// How long a subscription may take to be confirmed: Redisson's
/// `subscriptionTimeout`.
const SUBSCRIPTION_TIMEOUT: Duration = Duration::from_millis(7_500);

/// Redisson's unlock latch key of lock `name` for one unlock call.
pub(crate) fn latch_of(name: &str, request_id: &str) -> String {
    if name.contains('{') {
        format!("redisson_unlock_latch:{name}:{request_id}")
    } else {
        format!("redisson_unlock_latch:{{{name}}}:{request_id}")
    }
}

/// Redisson clients: session `i` is thread `i` of client `i % clients`.
pub(crate) struct Redisson<'e> {
    env: &'e Env,
    clients: Vec<Arc<Client>>,
}

impl<'e> Redisson<'e> {
    /// `clients` clients, each with its id and (on one server) its pub/sub
    /// connection.
    pub(crate) fn new(env: &'e Env, clients: usize) -> Res<Redisson<'e>> {
        let clients =
            (0..clients.max(1)).map(|_| Client::new(env).map(Arc::new)).collect::<Res<Vec<Arc<Client>>>>()?;
        Ok(Redisson { env, clients })
    }
}

impl<'e> LockImpl for Redisson<'e> {
    type Session = RedissonSession<'e>;

    fn session(&self, index: usize) -> Res<Self::Session> {
        let client = self
            .clients
            .get(index % self.clients.len())
            .cloned()
            .ok_or_else(|| err("Redisson 4: no client"))?;
        Ok(RedissonSession {
            env: self.env,
            owner: format!("{}:{index}", client.id),
            client,
            con: self.env.conns()?,
            latch_pending: None,
            depth: HashMap::new(),
        })
    }

    /// The acquire script's one `exists`; the release runs none.
    fn attempt_command(&self) -> &'static str {
        "exists"
    }

    fn script_commands(&self) -> &'static [&'static str] {
        SCRIPT_COMMANDS
    }
}

/// One Redisson client: its id, and its pub/sub connection (none on a
/// cluster).
struct Client {
    id: String,
    pubsub: Option<PubSub>,
}

impl Client {
    fn new(env: &Env) -> Res<Client> {
        let pubsub = match env.shards {
            Some(_) => None,
            None => Some(PubSub::open(&env.raw)?),
        };
        Ok(Client { id: uuid::Uuid::new_v4().to_string(), pubsub })
    }
}

/// A client's pub/sub connection: the write side (SUBSCRIBE, UNSUBSCRIBE),
/// its subscribed locks' entries, and the thread that reads it (Redisson's
/// event loop).
struct PubSub {
    writer: Mutex<TcpStream>,
    entries: Arc<Mutex<HashMap<String, Subscribed>>>,
    reader: Option<JoinHandle<()>>,
}

/// A subscribed lock: how many of the client's threads use the
/// subscription, and its entry.
struct Subscribed {
    users: usize,
    entry: Arc<Entry>,
}

/// Redisson's `RedissonLockEntry`: a semaphore (its `latch`) that unlock
/// messages release.
#[derive(Default)]
struct Entry {
    state: Mutex<EntryState>,
    changed: Condvar,
}

#[derive(Default)]
struct EntryState {
    /// Redis confirmed the SUBSCRIBE.
    confirmed: bool,
    permits: u64,
    /// Threads blocked on the semaphore now (its queue length).
    waiting: u64,
}

/// What an unlock message does to a lock entry's semaphore, as Redisson's
/// `LockPubSub.onMessage`: `0` releases one permit, `1` as many as threads
/// wait, anything else nothing. Returns the permits released.
fn on_message(state: &mut EntryState, payload: &[u8]) -> u64 {
    let released = match payload {
        b"0" => 1,
        b"1" => state.waiting,
        _ => 0,
    };
    state.permits += released;
    released
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl PubSub {
    /// Connects to the one server (sending AUTH when its URL has a
    /// password), and starts the reader.
    fn open(raw: &redis::Client) -> Res<PubSub> {
        let info = raw.get_connection_info();
        let redis::ConnectionAddr::Tcp(host, port) = info.addr() else {
            return Err(err("Redisson 4: only a plain TCP server is modelled"));
        };
        let stream = TcpStream::connect((host.as_str(), *port))?;
        stream.set_nodelay(true)?;
        let settings = info.redis_settings();
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            auth.arg(password);
            (&stream).write_all(&auth.get_packed_command())?;
            stream.set_read_timeout(Some(Duration::from_secs(10)))?;
            let reply = redis::Parser::new().parse_value(&stream)?;
            if !matches!(reply, Value::Okay | Value::SimpleString(_)) {
                return Err(err(format!("Redisson 4: AUTH replied {reply:?}")));
            }
            stream.set_read_timeout(None)?;
        }
        let entries: Arc<Mutex<HashMap<String, Subscribed>>> = Arc::default();
        let reader = {
            let stream = stream.try_clone()?;
            let entries = Arc::clone(&entries);
            std::thread::Builder::new()
                .name("redisson-pubsub".to_owned())
                .spawn(move || read_messages(stream, &entries))?
        };
        Ok(PubSub { writer: Mutex::new(stream), entries, reader: Some(reader) })
    }

    /// The entry of `channel`, subscribing when this is the client's first
    /// thread to wait on it; waits for Redis to confirm, until `deadline`.
    fn subscribe(&self, channel: &str, deadline: Instant) -> Res<Arc<Entry>> {
        let entry = {
            // The map's lock serialises a channel's SUBSCRIBE and UNSUBSCRIBE,
            // as Redisson's per-channel semaphore does.
            let mut entries = locked(&self.entries);
            match entries.get_mut(channel) {
                Some(subscribed) => {
                    subscribed.users += 1;
                    Arc::clone(&subscribed.entry)
                }
                None => {
                    let entry = Arc::new(Entry::default());
                    entries.insert(channel.to_owned(), Subscribed { users: 1, entry: Arc::clone(&entry) });
                    let sent = locked(&self.writer)
                        .write_all(&redis::cmd("SUBSCRIBE").arg(channel).get_packed_command());
                    if let Err(e) = sent {
                        entries.remove(channel);
                        return Err(e.into());
                    }
                    entry
                }
            }
        };
        let limit = deadline.saturating_duration_since(Instant::now()).min(SUBSCRIPTION_TIMEOUT);
        let state = locked(&entry.state);
        let (state, _) = entry
            .changed
            .wait_timeout_while(state, limit, |s| !s.confirmed)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let confirmed = state.confirmed;
        drop(state);
        if !confirmed {
            self.unsubscribe(channel);
            return Err(err(format!("Redisson 4: SUBSCRIBE {channel} not confirmed within {limit:?}")));
        }
        Ok(entry)
    }

    /// One thread done with `channel`: the last one unsubscribes (without
    /// waiting for Redis, as Redisson's asynchronous unsubscribe).
    fn unsubscribe(&self, channel: &str) {
        let mut entries = locked(&self.entries);
        let Some(subscribed) = entries.get_mut(channel) else { return };
        subscribed.users -= 1;
        if subscribed.users == 0 {
            entries.remove(channel);
            // A failed write shows as the next SUBSCRIBE's failure.
            let _ =
                locked(&self.writer).write_all(&redis::cmd("UNSUBSCRIBE").arg(channel).get_packed_command());
        }
    }
}

impl Drop for PubSub {
    fn drop(&mut self) {
        let _ = locked(&self.writer).shutdown(Shutdown::Both);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// The reader of a client's pub/sub connection: confirmations mark their
/// entry, unlock messages release its permits. Ends when the socket closes.
fn read_messages(stream: TcpStream, entries: &Mutex<HashMap<String, Subscribed>>) {
    let mut reader = BufReader::new(stream);
    let mut parser = redis::Parser::new();
    while let Ok(value) = parser.parse_value(&mut reader) {
        let Value::Array(items) = value else { continue };
        let bytes = |i: usize| match items.get(i) {
            Some(Value::BulkString(b)) => b.as_slice(),
            _ => &[],
        };
        let (kind, channel) = (bytes(0), String::from_utf8_lossy(bytes(1)));
        let Some(entry) = locked(entries).get(channel.as_ref()).map(|s| Arc::clone(&s.entry)) else {
            continue;
        };
        let mut state = locked(&entry.state);
        match kind {
            b"subscribe" => {
                state.confirmed = true;
                entry.changed.notify_all();
            }
            b"message" => match on_message(&mut state, bytes(2)) {
                0 => {}
                1 => entry.changed.notify_one(),
                _ => entry.changed.notify_all(),
            },
            _ => {}
        }
    }
}

/// A thread's use of a client's subscription to a lock's channel, given up
/// on drop (on every path, as Redisson's `finally`).
struct Subscription<'c> {
    pubsub: &'c PubSub,
    channel: String,
    entry: Arc<Entry>,
}

impl Subscription<'_> {
    /// Takes a permit, waiting at most `limit` (`Semaphore.tryAcquire`).
    fn wait_permit(&self, limit: Duration) {
        let mut state = locked(&self.entry.state);
        state.waiting += 1;
        let (mut state, _) = self
            .entry
            .changed
            .wait_timeout_while(state, limit, |s| s.permits == 0)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.waiting -= 1;
        state.permits = state.permits.saturating_sub(1);
    }
}

impl Drop for Subscription<'_> {
    fn drop(&mut self) {
        self.pubsub.unsubscribe(&self.channel);
    }
}

/// One Java thread of a Redisson client: its owner id and command
/// connection, the latch `DEL` whose reply is still to be read, and the hold
/// count of each lock it holds.
pub(crate) struct RedissonSession<'e> {
    env: &'e Env,
    client: Arc<Client>,
    con: Conns<'e>,
    owner: String,
    /// The latch key of the last release, whose `DEL` was sent unanswered.
    latch_pending: Option<String>,
    depth: HashMap<String, u32>,
}

impl RedissonSession<'_> {
    /// Reads the reply of the last release's latch `DEL`, before anything
    /// else is sent on its connection.
    fn settle_latch(&mut self) -> Res<()> {
        if let Some(latch) = self.latch_pending.take() {
            match self.con.for_key(&latch)?.recv_response()? {
                Value::Int(_) => {}
                other => return Err(err(format!("Redisson 4: latch DEL replied {other:?}"))),
            }
        }
        Ok(())
    }

    /// One `tryLockInner`: `None` when taken or re-entered, else the PTTL.
    fn try_acquire(&mut self, name: &str) -> Res<Option<i64>> {
        self.settle_latch()?;
        // Redisson's acquire is the minimal floor's script, byte for byte in
        // semantics (SPEC section 2 is Redisson's).
        let reply: Value = self
            .env
            .scripts
            .minimal_acquire
            .key(name)
            .arg(LEASE_MS)
            .arg(&self.owner)
            .invoke(self.con.for_key(name)?)?;
        match reply {
            Value::Nil => {
                *self.depth.entry(name.to_owned()).or_insert(0) += 1;
                Ok(None)
            }
            Value::Int(pttl) => Ok(Some(pttl)),
            other => Err(err(format!("Redisson 4: acquire replied {other:?}"))),
        }
    }
}

impl Drop for RedissonSession<'_> {
    /// Reads the last latch `DEL`'s reply: the server has run it before a
    /// contended worker's thread ends, and so before its window's counters
    /// are read.
    fn drop(&mut self) {
        let _ = self.settle_latch();
    }
}

impl Session for RedissonSession<'_> {
    /// The lock's name.
    type Held = String;

    /// `tryLock(ACQUIRE_LIMIT, -1)`: try; subscribe; loop { try; wait for a
    /// permit at most min(PTTL, time left) }.
    fn acquire(&mut self, name: &str) -> Res<String> {
        let deadline = Instant::now() + ACQUIRE_LIMIT;
        if self.try_acquire(name)?.is_none() {
            return Ok(name.to_owned());
        }
        let client = Arc::clone(&self.client);
        let Some(pubsub) = client.pubsub.as_ref() else {
            return Err(err(format!("Redisson 4: {name} is held, and waiting is not modelled on a cluster")));
        };
        let channel = channel_of(name);
        let entry = pubsub.subscribe(&channel, deadline)?;
        let subscription = Subscription { pubsub, channel, entry };
        loop {
            let Some(pttl) = self.try_acquire(name)? else {
                drop(subscription);
                return Ok(name.to_owned());
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(err(format!("Redisson 4: {name} not acquired within {ACQUIRE_LIMIT:?}")));
            }
            let wait = match u64::try_from(pttl) {
                Ok(ms) => Duration::from_millis(ms).min(left),
                Err(_) => left,
            };
            subscription.wait_permit(wait);
        }
    }

    fn release(&mut self, name: String) -> Res<()> {
        self.settle_latch()?;
        let Some(depth) = self.depth.get_mut(&name) else {
            return Err(err(format!("Redisson 4: {name} released but not held")));
        };
        *depth -= 1;
        let expected = if *depth == 0 {
            self.depth.remove(&name);
            1
        } else {
            0
        };
        // A request id per unlock call: 16 random bytes in hex.
        let latch = latch_of(&name, &uuid::Uuid::new_v4().simple().to_string());
        let publish = if self.env.shards.is_some() { "SPUBLISH" } else { "PUBLISH" };
        let con = self.con.for_key(&name)?;
        let reply: Value = self
            .env
            .scripts
            .redisson_unlock
            .key(&name)
            .key(channel_of(&name))
            .key(&latch)
            .arg(UNLOCK_MESSAGE)
            .arg(LEASE_MS)
            .arg(&self.owner)
            .arg(publish)
            .arg(LATCH_TTL_MS)
            .invoke(con)?;
        match reply {
            Value::Int(n) if n == expected => {}
            other => {
                return Err(err(format!("Redisson 4: unlock replied {other:?}, expected {expected}")));
            }
        }
        // Redisson then deletes the latch and does not wait for the reply.
        con.send_packed_command(&redis::cmd("DEL").arg(&latch).get_packed_command())?;
        self.latch_pending = Some(latch);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use keyholder_testkit::server::RedisServer;
    use redis::Value;

    use super::{EntryState, latch_of, on_message};
    use crate::env::{MINIMAL_ACQUIRE_LUA, REDISSON_UNLOCK_LUA, channel_of, connect, raw_client};

    fn test_connection(url: &str) -> redis::Connection {
        connect(&raw_client(url).unwrap()).unwrap()
    }

    #[test]
    fn latch_names_follow_redissons_brace_rule() {
        assert_eq!(latch_of("order:42", "ab"), "redisson_unlock_latch:{order:42}:ab");
        assert_eq!(latch_of("{user}:1", "ab"), "redisson_unlock_latch:{user}:1:ab");
    }

    /// `0` releases one permit, `1` one per waiting thread, anything else
    /// none; permits released with nobody waiting are kept.
    #[test]
    fn unlock_messages_release_permits_as_lockpubsub() {
        let mut state = EntryState::default();
        assert_eq!(on_message(&mut state, b"0"), 1);
        assert_eq!(on_message(&mut state, b"0"), 1);
        assert_eq!(state.permits, 2, "kept with nobody waiting");
        assert_eq!(on_message(&mut state, b"1"), 0, "nobody waits");
        state.waiting = 3;
        assert_eq!(on_message(&mut state, b"1"), 3);
        assert_eq!(on_message(&mut state, b"2"), 0, "keyholder's own message");
        assert_eq!(on_message(&mut state, b""), 0);
        assert_eq!(state.permits, 5);
    }

    /// The unlock script keeps Redisson 4's replies and latch: nil for a
    /// non-owner (no latch), 0 with the lease re-applied and latch 0 while
    /// held, 1 with the key deleted, `0` published and latch 1 at the last
    /// release; a repeated call with the same latch replies its value.
    #[test]
    fn the_unlock_script_keeps_redisson_4s_latch() {
        let server = RedisServer::start();
        let mut con = test_connection(&server.url());
        let mut listener = test_connection(&server.url());
        let (acquire, unlock) =
            (redis::Script::new(MINIMAL_ACQUIRE_LUA), redis::Script::new(REDISSON_UNLOCK_LUA));
        let (name, channel) = ("bench:redisson", channel_of("bench:redisson"));
        let mut pubsub = listener.as_pubsub();
        pubsub.subscribe(&channel).unwrap();
        pubsub.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        let take = |con: &mut redis::Connection, owner: &str| -> Value {
            acquire.key(name).arg(30_000).arg(owner).invoke(con).unwrap()
        };
        let give = |con: &mut redis::Connection, owner: &str, latch: &str| -> Value {
            unlock
                .key(name)
                .key(&channel)
                .key(latch)
                .arg("0")
                .arg(30_000)
                .arg(owner)
                .arg("PUBLISH")
                .arg(20_000)
                .invoke(con)
                .unwrap()
        };
        let (l1, l2, l3) = (latch_of(name, "01"), latch_of(name, "02"), latch_of(name, "03"));
        assert_eq!(take(&mut con, "a:1"), Value::Nil);
        assert_eq!(take(&mut con, "a:1"), Value::Nil, "re-entered");
        assert_eq!(give(&mut con, "b:1", &l1), Value::Nil, "not the owner");
        let exists: i64 = redis::cmd("EXISTS").arg(&l1).query(&mut con).unwrap();
        assert_eq!(exists, 0, "no latch for a non-owner");
        redis::cmd("PEXPIRE").arg(name).arg(1_000).query::<i64>(&mut con).unwrap();
        assert_eq!(give(&mut con, "a:1", &l2), Value::Int(0), "still held once");
        let pttl: i64 = redis::cmd("PTTL").arg(name).query(&mut con).unwrap();
        assert!(pttl > 1_000, "lease re-applied: {pttl}");
        assert_eq!(give(&mut con, "a:1", &l2), Value::Int(0), "the latch replies again");
        let count: i64 = redis::cmd("HGET").arg(name).arg("a:1").query(&mut con).unwrap();
        assert_eq!(count, 1, "a retried call changed nothing");
        assert_eq!(give(&mut con, "a:1", &l3), Value::Int(1), "freed");
        let exists: i64 = redis::cmd("EXISTS").arg(name).query(&mut con).unwrap();
        assert_eq!(exists, 0);
        let latch: String = redis::cmd("GET").arg(&l3).query(&mut con).unwrap();
        assert_eq!(latch, "1");
        let latch_ttl: i64 = redis::cmd("PTTL").arg(&l3).query(&mut con).unwrap();
        assert!(latch_ttl > 0 && latch_ttl <= 20_000, "{latch_ttl}");
        assert_eq!(give(&mut con, "a:1", &l3), Value::Int(1), "the latch replies again");
        let message = pubsub.get_message().unwrap();
        assert_eq!(message.get_channel_name(), channel);
        assert_eq!(message.get_payload::<String>().unwrap(), "0");
    }
}
