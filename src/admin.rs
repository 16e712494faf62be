//! Looking at locks from the outside, for operators: what sits at a lock's
//! name and who waits for it ([`Client::inspect`]), which locks exist
//! ([`Client::list_locks`]), and the unlock messages of one lock as they
//! come ([`Client::watch`]). The `keyholder` binary (`cli` feature) is built
//! on these; `Lock::force_unlock` is the fourth operation it offers.
//!
//! Every call goes where the client's locks go: the one server, the primary
//! Sentinel names, or on a Redis Cluster the primary that serves the name's
//! slot (a listing scans every primary). Nothing here writes to Redis.

use std::collections::BTreeMap;
use std::time::Duration;

use redis::{FromRedisValue, Value};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::names;
use crate::pubsub::target::Target;
use crate::pubsub::watch::{ChannelWatch, Push};
use crate::store::batch::Request;
use crate::store::lanes::Session;
use crate::store::routes::Routes;
use crate::store::slots::key_slot;

/// What sits at a lock's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// No key: nobody holds the lock.
    Free,
    /// A reentrant lock in Redisson's layout (a HASH from owner ids to hold
    /// counts), held. Every lock keyholder takes has it: plain, fenced,
    /// with a fixed lease, a run-once job's run; so do Redisson's `RLock`
    /// and `RFencedLock`.
    Reentrant,
    /// A STRING: a hand-rolled `SET key token NX PX` lock, which a client
    /// in migration mode counts as held (see
    /// [`ClientBuilder::migration_mode`](crate::ClientBuilder::migration_mode)).
    Legacy,
    /// A key that is no lock: another type, or a hash whose fields are not
    /// owner ids with hold counts (a Redisson read-write lock, say).
    Other,
}

impl LockKind {
    /// A short lower-case name, as the `keyholder` tool prints it:
    /// `free`, `reentrant`, `legacy`, `other`.
    pub fn as_str(&self) -> &'static str {
        match self {
            LockKind::Free => "free",
            LockKind::Reentrant => "reentrant",
            LockKind::Legacy => "legacy",
            LockKind::Other => "other",
        }
    }
}

impl std::fmt::Display for LockKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One owner of a reentrant lock: a field of the lock's hash.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The hash field as it is: `<client-id>:<thread-id>`.
    pub owner: String,
    /// The client's id (a keyholder [`Client::id`], or a Redisson
    /// instance's UUID).
    pub client_id: String,
    /// The thread's number within its client (keyholder's thread counter,
    /// or a Java thread id).
    pub thread_id: u64,
    /// How many times the owner holds the lock.
    pub count: u64,
}

/// What [`Client::inspect`] found about one lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name (its key).
    pub name: String,
    /// What sits at the name.
    pub kind: LockKind,
    /// The key's Redis type (`TYPE`): `none`, `hash`, `string`, ...
    pub redis_type: String,
    /// The owners and their hold counts ([`LockKind::Reentrant`] only;
    /// Redisson and keyholder locks have one owner at a time).
    pub holders: Vec<Holder>,
    /// A [`LockKind::Legacy`] lock's value: its holder's token.
    pub legacy_token: Option<String>,
    /// The key's remaining time to live (`PTTL`): the holder's lease;
    /// `None` when there is no key or it never expires.
    pub remaining_lease: Option<Duration>,
    /// The last fencing token minted for the name (Redisson's
    /// `redisson_lock_token:{name}` counter); `None` if no fenced handle
    /// ever took it, or the counter holds no number.
    pub fencing_token: Option<u64>,
    /// The lock's unlock channel.
    pub unlock_channel: String,
    /// Connections subscribed to the unlock channel on the node serving
    /// the lock (`PUBSUB NUMSUB`, or `PUBSUB SHARDNUMSUB` where unlock
    /// messages go out on shard channels): every waiting keyholder client
    /// and Redisson instance counts once, however many of its threads
    /// wait. A keyholder client that holds the lock listens too (for a
    /// foreign unlock), and one that just released still listens for a
    /// moment.
    pub subscribers: u64,
    /// The keyholder clients queued for the lock in arrival order
    /// (`keyholder_lock_queue:{name}`).
    pub queued_clients: Vec<String>,
    /// The client a release woke for its turn, while its claim lasts
    /// (`keyholder_lock_next:{name}`, 1 s); during a foreign turn, which
    /// keeps keyholder clients off the free lock for Redisson waiters,
    /// `~<server ms when the turn ends>:<client>`.
    pub next_claim: Option<String>,
    /// On a Redis Cluster, the primary that serves the name's slot
    /// (`host:port`).
    pub node: Option<String>,
}

impl LockInfo {
    /// True when someone holds the lock: a reentrant lock's owner, or a
    /// legacy string's holder.
    pub fn is_locked(&self) -> bool {
        matches!(self.kind, LockKind::Reentrant | LockKind::Legacy)
    }
}

/// One lock found by [`Client::list_locks`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListedLock {
    /// The lock's name (its key).
    pub name: String,
    /// [`LockKind::Reentrant`], or [`LockKind::Legacy`] for a string key
    /// with a TTL listed by a client in migration mode.
    pub kind: LockKind,
    /// The owners and their hold counts (reentrant locks).
    pub holders: Vec<Holder>,
    /// The key's remaining time to live; `None` when it never expires.
    pub remaining_lease: Option<Duration>,
    /// On a Redis Cluster, the primary the key was found on (`host:port`).
    pub node: Option<String>,
}

/// An unlock message received by an [`UnlockWatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnlockMessage {
    /// The channel it came on (the lock's unlock channel).
    pub channel: String,
    /// The message as sent (`0`, `1` or `2` from Redisson and keyholder).
    pub payload: String,
}

impl UnlockMessage {
    /// What the message means to waiters, in a few words.
    pub fn meaning(&self) -> &'static str {
        match self.payload.as_str() {
            "0" => "unlocked: one waiter may proceed",
            "1" => "unlocked: every waiter may proceed (a Redisson read-write lock)",
            "2" => "keyholder hand-over: the next keyholder client was woken",
            _ => "unknown message",
        }
    }
}

/// The unlock messages of one lock, on a pub/sub connection of its own;
/// from [`Client::watch`]. Dropping it closes the connection.
#[derive(Debug)]
pub struct UnlockWatch {
    conn: ChannelWatch,
    name: String,
    channel: String,
    node: String,
}

impl UnlockWatch {
    /// The next unlock message, waiting at most `wait`; `Ok(None)` when
    /// none came in time.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) when the
    /// connection failed or closed, or, on a Redis Cluster with shard
    /// channels, when the server dropped the subscription because the
    /// lock's slot moved to another node: watch again.
    pub fn next_message(&mut self, wait: Duration) -> Result<Option<UnlockMessage>> {
        match self.conn.next(wait) {
            Ok(None) => Ok(None),
            Ok(Some(Push::Message(payload))) => Ok(Some(UnlockMessage {
                channel: self.channel.clone(),
                payload: String::from_utf8_lossy(&payload).into_owned(),
            })),
            Ok(Some(Push::Dropped)) => Err(Error::redis(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                format!("the server dropped {}: lock '{}' moved to another node", self.channel, self.name),
            )))),
            Err(e) => Err(Error::redis(e)),
        }
    }

    /// The channel watched.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// The node subscribed on (`host:port`, or a socket path).
    pub fn node(&self) -> &str {
        &self.node
    }
}

/// The most hash fields a listed key may have to be looked at as a lock (a
/// lock has one owner; Redisson and keyholder never write more).
const MAX_LOCK_FIELDS: i64 = 8;

/// Keys asked for per `SCAN` call.
const SCAN_COUNT: u32 = 1000;

impl Client {
    /// What sits at lock `name` and who waits for it: the key's type and
    /// [`LockKind`], its holders and their hold counts, the remaining lease,
    /// the last fencing token, the subscribers of its unlock channel and
    /// the keyholder clients queued for it. One round trip of read-only
    /// commands (`TYPE`, `PTTL`, `HGETALL`, `GET`, `PUBSUB`, `ZRANGE`) on
    /// the node that serves the lock. Changes nothing.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// for a name [`Client::lock`] refuses, or a Redis or connection
    /// failure.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), keyholder::Error> {
    /// let client = keyholder::Client::open("redis://127.0.0.1:6379/")?;
    /// let info = client.inspect("orders:42")?;
    /// for holder in &info.holders {
    ///     println!("{} holds it {} time(s), {:?} left", holder.owner, holder.count, info.remaining_lease);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn inspect(&self, name: &str) -> Result<LockInfo> {
        let inner = self.inner();
        inner.check_running()?;
        inner.validate_name(name)?;
        let channel = names::unlock_channel(name);
        let numsub = if inner.scripts.sharded() { "SHARDNUMSUB" } else { "NUMSUB" };
        let commands = [
            redis::cmd("TYPE").arg(name).clone(),
            redis::cmd("PTTL").arg(name).clone(),
            redis::cmd("HGETALL").arg(name).clone(),
            redis::cmd("GET").arg(name).clone(),
            redis::cmd("GET").arg(names::token_key(name)).clone(),
            redis::cmd("PUBSUB").arg(numsub).arg(&channel).clone(),
            redis::cmd("ZRANGE").arg(names::queue_key(name)).arg(0).arg(-1).clone(),
            redis::cmd("GET").arg(names::next_marker(name)).clone(),
        ];
        let refs: Vec<&redis::Cmd> = commands.iter().collect();
        let values =
            inner.with_live_conn(name, |session| Ok(session.send(Request::commands(&refs))?.values))?;
        let mut values = values.into_iter();
        let mut next = || values.next().unwrap_or(Value::Nil);
        let redis_type: String = strict(next(), name)?;
        let pttl: i64 = strict(next(), name)?;
        let fields: Option<BTreeMap<String, String>> = lenient(next());
        let string: Option<String> = lenient(next());
        let token: Option<String> = lenient(next());
        let numsub: Vec<Value> = strict(next(), name)?;
        let queued: Option<Vec<String>> = lenient(next());
        let marker: Option<String> = lenient(next());
        let (kind, holders) = classify(&redis_type, fields.as_ref());
        Ok(LockInfo {
            name: name.to_owned(),
            kind,
            redis_type,
            holders,
            legacy_token: if kind == LockKind::Legacy { string } else { None },
            remaining_lease: lease(pttl),
            fencing_token: token.and_then(|token| token.parse().ok()),
            unlock_channel: channel,
            subscribers: numsub.into_iter().nth(1).and_then(lenient::<u64>).unwrap_or(0),
            queued_clients: queued.unwrap_or_default(),
            next_claim: marker,
            node: self.node_of(name),
        })
    }

    /// The locks whose names match `pattern` (a `SCAN ... MATCH` glob: `*`
    /// for all, `orders:*`), at most `limit` of them, sorted by name: every
    /// key that is a held reentrant lock (a hash of owner ids and hold
    /// counts) and, for a client in migration mode, every string key with a
    /// TTL (a hand-rolled lock). Keys derived from locks (fencing counters,
    /// keyholder's queues) are left out.
    ///
    /// Walks the keyspace with `SCAN` (never `KEYS`, which would block the
    /// server), on a Redis Cluster on every primary, and looks at the keys
    /// it finds in pipelined batches (`TYPE` and `HLEN`, then `HGETALL` and
    /// `PTTL` of the hashes with a few fields): many round trips on a big
    /// keyspace, each of them short. As with any `SCAN`, a lock taken or
    /// released meanwhile may or may not be listed. Changes nothing.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// for an empty pattern or a zero limit; a Redis or connection failure.
    pub fn list_locks(&self, pattern: &str, limit: usize) -> Result<Vec<ListedLock>> {
        let inner = self.inner();
        inner.check_running()?;
        if pattern.is_empty() {
            return Err(Error::invalid_argument("the pattern is empty: use * for every key"));
        }
        if limit == 0 {
            return Err(Error::invalid_argument("the limit is 0"));
        }
        let legacy = inner.config.migration_mode;
        let mut found = Vec::new();
        match inner.routes() {
            Routes::Primary(_) => {
                let mut session = inner.routes().session(pattern)?;
                scan_node(&mut session, None, pattern, limit, legacy, &mut found)?;
            }
            Routes::Cluster(cluster) => {
                let mut shards = cluster.shards();
                shards.sort_by(|a, b| a.addr.cmp(&b.addr));
                for shard in shards {
                    if found.len() >= limit {
                        break;
                    }
                    let node = format!("{}:{}", shard.addr.0, shard.addr.1);
                    let mut session = shard.session()?;
                    scan_node(&mut session, Some(node), pattern, limit, legacy, &mut found)?;
                }
            }
        }
        found.sort_by(|a, b| a.name.cmp(&b.name));
        found.truncate(limit);
        Ok(found)
    }

    /// Subscribes to lock `name`'s unlock channel on a pub/sub connection of
    /// its own, on the node that serves the lock (with `SSUBSCRIBE` on a
    /// Redis Cluster whose unlock messages go out on shard channels), and
    /// returns once the server confirmed: every unlock message published
    /// after that, by keyholder or Redisson, reaches
    /// [`UnlockWatch::next_message`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// for a name [`Client::lock`] refuses;
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) when the
    /// node cannot be reached or refuses the subscription.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// # fn main() -> Result<(), keyholder::Error> {
    /// let client = keyholder::Client::open("redis://127.0.0.1:6379/")?;
    /// let mut watch = client.watch("orders:42")?;
    /// while let Some(message) = watch.next_message(Duration::from_secs(60))? {
    ///     println!("{}: {}", message.payload, message.meaning());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn watch(&self, name: &str) -> Result<UnlockWatch> {
        let inner = self.inner();
        inner.check_running()?;
        inner.validate_name(name)?;
        let channel = names::unlock_channel(name);
        let info = match inner.routes() {
            Routes::Primary(lanes) => {
                lanes.connector().primary().locate().map_err(Error::connect)?.info().clone()
            }
            Routes::Cluster(cluster) => cluster.shard_of_slot(key_slot(channel.as_bytes()))?.info.clone(),
        };
        #[cfg(feature = "tls")]
        let tls = crate::tls::apply(info.clone(), &inner.config.tls)?.1;
        #[cfg(not(feature = "tls"))]
        let tls = None;
        let target = Target::from_info(&info, format!("keyholder:{}:watch", inner.id), tls)?;
        let config = &inner.config;
        let conn = ChannelWatch::open(
            &target,
            &channel,
            inner.scripts.sharded(),
            config.connect_timeout,
            config.command_timeout,
        )
        .map_err(Error::connect)?;
        Ok(UnlockWatch { conn, name: name.to_owned(), channel, node: target.describe() })
    }

    /// On a Redis Cluster, the primary that serves `name`'s slot now, as
    /// `host:port`, from the client's slot map (no I/O); `None` for a
    /// single server or Sentinel.
    pub fn node_of(&self, name: &str) -> Option<String> {
        self.inner().routes().node_of(name).map(|(host, port)| format!("{host}:{port}"))
    }
}

/// Scans one node's keys matching `pattern`, adding the locks among them
/// to `found` until it has `limit`.
fn scan_node(
    session: &mut Session<'_>,
    node: Option<String>,
    pattern: &str,
    limit: usize,
    legacy: bool,
    found: &mut Vec<ListedLock>,
) -> Result<()> {
    let mut cursor = String::from("0");
    loop {
        let scan =
            redis::cmd("SCAN").arg(&cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(SCAN_COUNT).clone();
        let (next, keys): (String, Vec<String>) = session.query(&scan)?.map_err(Error::redis)?;
        let keys: Vec<String> = keys.into_iter().filter(|key| !names::is_derived_key(key)).collect();
        look_at(session, &node, &keys, legacy, found)?;
        if next == "0" || found.len() >= limit {
            return Ok(());
        }
        cursor = next;
    }
}

/// Adds the locks among `keys` to `found`: two pipelined round trips.
fn look_at(
    session: &mut Session<'_>,
    node: &Option<String>,
    keys: &[String],
    legacy: bool,
    found: &mut Vec<ListedLock>,
) -> Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let kinds: Vec<redis::Cmd> = keys
        .iter()
        .flat_map(|key| [redis::cmd("TYPE").arg(key).clone(), redis::cmd("HLEN").arg(key).clone()])
        .collect();
    let values = send(session, &kinds)?;
    let mut candidates = Vec::new();
    for (key, pair) in keys.iter().zip(values.chunks(2)) {
        let redis_type: Option<String> = pair.first().cloned().and_then(lenient);
        let fields: Option<i64> = pair.get(1).cloned().and_then(lenient);
        match redis_type.as_deref() {
            Some("hash") if fields.is_some_and(|n| (1..=MAX_LOCK_FIELDS).contains(&n)) => {
                candidates.push((key, true))
            }
            Some("string") if legacy => candidates.push((key, false)),
            _ => {}
        }
    }
    if candidates.is_empty() {
        return Ok(());
    }
    let details: Vec<redis::Cmd> = candidates
        .iter()
        .flat_map(|(key, _)| [redis::cmd("HGETALL").arg(*key).clone(), redis::cmd("PTTL").arg(*key).clone()])
        .collect();
    let values = send(session, &details)?;
    for ((key, hash), pair) in candidates.into_iter().zip(values.chunks(2)) {
        let pttl: Option<i64> = pair.get(1).cloned().and_then(lenient);
        let (kind, holders) = if hash {
            let fields: Option<BTreeMap<String, String>> = pair.first().cloned().and_then(lenient);
            classify("hash", fields.as_ref())
        } else {
            (LockKind::Legacy, Vec::new())
        };
        let listed = match kind {
            LockKind::Reentrant => true,
            // A string without a TTL is no lock a client could wait for.
            LockKind::Legacy => pttl.is_some_and(|ms| ms > 0),
            LockKind::Free | LockKind::Other => false,
        };
        if listed {
            found.push(ListedLock {
                name: key.clone(),
                kind,
                holders,
                remaining_lease: pttl.and_then(lease),
                node: node.clone(),
            });
        }
    }
    Ok(())
}

/// Sends `commands` in one request; one reply each, error replies included.
fn send(session: &mut Session<'_>, commands: &[redis::Cmd]) -> Result<Vec<Value>> {
    let refs: Vec<&redis::Cmd> = commands.iter().collect();
    Ok(session.send(Request::commands(&refs))?.values)
}

/// The kind of a key of type `redis_type`, and its holders: a hash whose
/// every field is an owner id with a positive count is a reentrant lock.
fn classify(redis_type: &str, fields: Option<&BTreeMap<String, String>>) -> (LockKind, Vec<Holder>) {
    match redis_type {
        "none" => (LockKind::Free, Vec::new()),
        "string" => (LockKind::Legacy, Vec::new()),
        "hash" => {
            let holders: Option<Vec<Holder>> =
                fields.filter(|f| !f.is_empty()).and_then(|f| f.iter().map(|(k, v)| holder(k, v)).collect());
            match holders {
                Some(holders) => (LockKind::Reentrant, holders),
                None => (LockKind::Other, Vec::new()),
            }
        }
        _ => (LockKind::Other, Vec::new()),
    }
}

/// A hash field and value as an owner and its hold count:
/// `<client-id>:<thread-id>` → a positive count.
fn holder(owner: &str, count: &str) -> Option<Holder> {
    let (client_id, thread) = owner.rsplit_once(':')?;
    if client_id.is_empty() || thread.is_empty() || !thread.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let count: u64 = count.parse().ok().filter(|&n| n > 0)?;
    Some(Holder {
        owner: owner.to_owned(),
        client_id: client_id.to_owned(),
        thread_id: thread.parse().ok()?,
        count,
    })
}

/// A PTTL reply as a lease: `None` for no key (-2) or no expiry (-1).
fn lease(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

/// A reply that must decode: an error reply is the call's error.
fn strict<T: FromRedisValue>(value: Value, name: &str) -> Result<T> {
    let value = value.extract_error().map_err(|e| Error::from_redis(name, e))?;
    T::from_redis_value(value.clone()).map_err(|_| Error::unexpected_reply("inspect", format!("{value:?}")))
}

/// A reply that may be an error (`WRONGTYPE` for a key of another type) or
/// nil: `None` then.
fn lenient<T: FromRedisValue>(value: Value) -> Option<T> {
    match value.extract_error() {
        Ok(Value::Nil) | Err(_) => None,
        Ok(value) => T::from_redis_value(value).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn owner_fields_with_counts_are_holders() {
        let id = "8c1f0a4e-3b7d-4e8a-9c55-0d6e2f1a7b90";
        let (kind, holders) = classify("hash", Some(&fields(&[(&format!("{id}:7"), "2")])));
        assert_eq!(kind, LockKind::Reentrant);
        assert_eq!(holders.len(), 1);
        assert_eq!(holders[0].client_id, id);
        assert_eq!(holders[0].thread_id, 7);
        assert_eq!(holders[0].count, 2);
    }

    #[test]
    fn other_hashes_and_types_are_no_locks() {
        // Redisson's read-write lock keeps a "mode" field.
        assert_eq!(classify("hash", Some(&fields(&[("mode", "read")]))).0, LockKind::Other);
        assert_eq!(classify("hash", Some(&fields(&[("a:1", "x")]))).0, LockKind::Other);
        assert_eq!(classify("hash", Some(&fields(&[("a:1", "0")]))).0, LockKind::Other);
        assert_eq!(classify("hash", Some(&fields(&[("a:b", "1")]))).0, LockKind::Other);
        assert_eq!(classify("hash", Some(&fields(&[]))).0, LockKind::Other);
        assert_eq!(classify("hash", None).0, LockKind::Other);
        assert_eq!(classify("zset", None).0, LockKind::Other);
        assert_eq!(classify("string", None).0, LockKind::Legacy);
        assert_eq!(classify("none", None).0, LockKind::Free);
    }

    #[test]
    fn leases_are_positive_pttls() {
        assert_eq!(lease(1500), Some(Duration::from_millis(1500)));
        assert_eq!(lease(-1), None);
        assert_eq!(lease(-2), None);
    }

    #[test]
    fn unlock_messages_say_what_they_mean() {
        let message = |payload: &str| UnlockMessage { channel: "c".to_owned(), payload: payload.to_owned() };
        assert!(message("0").meaning().contains("one waiter"));
        assert!(message("1").meaning().contains("every waiter"));
        assert!(message("2").meaning().contains("keyholder"));
        assert_eq!(message("x").meaning(), "unknown message");
    }
}
