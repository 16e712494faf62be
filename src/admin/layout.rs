//! Telling keyholder's kinds apart by what they leave in Redis: the value at
//! the name, and the companion keys and channels each kind keeps beside it.
//!
//! Two layouts share a HASH at the name: Redisson's lock hash (owner id →
//! hold count), which the reentrant lock, the spin lock, a run-once job's
//! run and the fair lock all write, and the read-write lock's (a `mode`
//! field beside its holders). The fair lock is told from the others by its
//! queue (`redisson_lock_queue:{name}`, `redisson_lock_timeout:{name}`):
//! one held with nobody queued is byte for byte a reentrant lock, and the
//! spin lock always is. Three kinds keep a STRING holding a number at the
//! name: the semaphore, the permit-expirable semaphore (its held permits
//! in `{name}:timeout`) and the count-down latch; a hand-rolled `SET NX`
//! lock is a string too. What tells them apart is written down in
//! [`classify`]; where Redis cannot tell, the kind says so
//! ([`LockKind::SemaphoreOrLatch`]).
//!
//! Everything here is pure: the admin calls fetch the replies, this module
//! reads them, and its unit tests cover every rule. What waits and what is
//! held beside a name (queues, permits) is read by `queues.rs`.

use std::collections::BTreeMap;
use std::str::FromStr;

use crate::error::Error;
use crate::names;

/// What sits at a name: which of keyholder's (and Redisson's) kinds, if
/// any, told from the key's type, its value and its companion keys and
/// channels (see docs/operations.md, "How kinds are told apart").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// No key, and nothing queued or waiting for one: nobody holds it.
    Free,
    /// A reentrant lock in Redisson's layout (a HASH from owner ids to hold
    /// counts). Every lock keyholder takes has it: plain, fenced, with a
    /// fixed lease, a run-once job's run; so do Redisson's `RLock` and
    /// `RFencedLock`. A spin lock has exactly this layout and shows as
    /// one; so does a fair lock held while nobody queues for it.
    Reentrant,
    /// A fair lock: the reentrant lock's hash (or none, between a release
    /// and the head's acquisition) with a waiter queue beside it
    /// (`redisson_lock_queue:{name}`, `redisson_lock_timeout:{name}`).
    Fair,
    /// A read-write lock: a HASH with a `mode` field (`read` or `write`)
    /// beside its holders.
    ReadWrite,
    /// A semaphore (`Client::semaphore`, Redisson's `RSemaphore`): a STRING
    /// holding the available permits, told from a latch by a client waiting
    /// on its channel (`redisson_sc:{name}`); or no key (0 permits) with a
    /// client waiting.
    Semaphore,
    /// A permit-expirable semaphore: the available permits at the name and
    /// its held permits, with their expiries, in `{name}:timeout`.
    PermitExpirableSemaphore,
    /// A count-down latch: a STRING holding the count, told from a
    /// semaphore by a client waiting on its channel
    /// (`redisson_countdownlatch__channel__{name}`).
    CountDownLatch,
    /// A STRING holding a number, with no TTL, that nobody waits on: a
    /// semaphore's available permits or a latch's count (or a
    /// permit-expirable semaphore with no permit out). Redis keeps nothing
    /// else that would tell which.
    SemaphoreOrLatch,
    /// A STRING that is no number, or a number with a TTL that nobody
    /// waits on: a hand-rolled `SET key token NX PX` lock, which a client
    /// in migration mode counts as held (see
    /// [`ClientBuilder::migration_mode`](crate::ClientBuilder::migration_mode)).
    Legacy,
    /// A key that is no lock: another type, or a hash whose fields are not
    /// owner ids with hold counts.
    Other,
}

impl LockKind {
    /// A short lower-case name, as the `keyholder` tool prints it:
    /// `free`, `reentrant`, `fair`, `read-write`, `semaphore`,
    /// `permit-expirable-semaphore`, `count-down-latch`,
    /// `semaphore-or-latch`, `legacy`, `other`.
    pub fn as_str(&self) -> &'static str {
        match self {
            LockKind::Free => "free",
            LockKind::Reentrant => "reentrant",
            LockKind::Fair => "fair",
            LockKind::ReadWrite => "read-write",
            LockKind::Semaphore => "semaphore",
            LockKind::PermitExpirableSemaphore => "permit-expirable-semaphore",
            LockKind::CountDownLatch => "count-down-latch",
            LockKind::SemaphoreOrLatch => "semaphore-or-latch",
            LockKind::Legacy => "legacy",
            LockKind::Other => "other",
        }
    }

    /// Every kind, in the order of [`LockKind::as_str`]'s list.
    pub const ALL: &'static [LockKind] = &[
        LockKind::Free,
        LockKind::Reentrant,
        LockKind::Fair,
        LockKind::ReadWrite,
        LockKind::Semaphore,
        LockKind::PermitExpirableSemaphore,
        LockKind::CountDownLatch,
        LockKind::SemaphoreOrLatch,
        LockKind::Legacy,
        LockKind::Other,
    ];

    /// True for the kinds that are locks someone can hold (and an operator
    /// can force-unlock): reentrant, fair and read-write.
    pub fn is_lock(&self) -> bool {
        matches!(self, LockKind::Reentrant | LockKind::Fair | LockKind::ReadWrite)
    }

    /// True for the kinds that keep a number at the name: the semaphores
    /// and the latch.
    pub fn is_counter(&self) -> bool {
        matches!(
            self,
            LockKind::Semaphore
                | LockKind::PermitExpirableSemaphore
                | LockKind::CountDownLatch
                | LockKind::SemaphoreOrLatch
        )
    }
}

impl std::fmt::Display for LockKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LockKind {
    type Err = Error;

    /// Parses [`LockKind::as_str`]'s names.
    fn from_str(text: &str) -> Result<LockKind, Error> {
        LockKind::ALL.iter().copied().find(|kind| kind.as_str() == text).ok_or_else(|| {
            let names: Vec<&str> = LockKind::ALL.iter().map(LockKind::as_str).collect();
            Error::invalid_argument(format!("no lock kind is called {text:?} (one of {})", names.join(", ")))
        })
    }
}

/// A read-write lock's mode (its hash's `mode` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReadWriteMode {
    /// Held by readers.
    Read,
    /// Held by a writer (who may hold read holds too, after a downgrade).
    Write,
}

impl ReadWriteMode {
    /// `read` or `write`, as in Redis.
    pub fn as_str(&self) -> &'static str {
        match self {
            ReadWriteMode::Read => "read",
            ReadWriteMode::Write => "write",
        }
    }
}

impl std::fmt::Display for ReadWriteMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One owner of a lock: a field of the lock's hash.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The hash field as it is: `<client-id>:<thread-id>`, or
    /// `<client-id>:<thread-id>:write` for a read-write lock's writer.
    pub owner: String,
    /// The client's id (a keyholder [`Client::id`](crate::Client::id), or
    /// a Redisson instance's UUID).
    pub client_id: String,
    /// The thread's number within its client (keyholder's thread counter,
    /// or a Java thread id).
    pub thread_id: u64,
    /// How many times the owner holds the lock.
    pub count: u64,
    /// A read-write lock's write hold; false for its read holds and for
    /// every other kind.
    pub write: bool,
}

/// Every key and channel a name's kinds may keep beside it.
#[derive(Debug, Clone)]
pub(crate) struct Companions {
    /// The reentrant and fair lock's unlock channel.
    pub(crate) lock_channel: String,
    /// The read-write lock's channel.
    pub(crate) rw_channel: String,
    /// Both semaphores' channel.
    pub(crate) semaphore_channel: String,
    /// The latch's channel.
    pub(crate) latch_channel: String,
    /// Redisson's fencing counter.
    pub(crate) token: String,
    /// keyholder's queue of waiting clients (reentrant lock).
    pub(crate) queue: String,
    /// keyholder's claim marker (reentrant lock).
    pub(crate) marker: String,
    /// The fair lock's queue (a LIST of owner ids).
    pub(crate) fair_queue: String,
    /// The fair lock's deadlines (a ZSET).
    pub(crate) fair_timeouts: String,
    /// keyholder's fair grants (a HASH by owner id).
    pub(crate) fair_grants: String,
    /// The permit-expirable semaphore's held permits (a ZSET).
    pub(crate) permits: String,
    /// keyholder's waiting writers of a read-write lock (a ZSET).
    pub(crate) writers: String,
}

impl Companions {
    pub(crate) fn of(name: &str) -> Companions {
        Companions {
            lock_channel: names::unlock_channel(name),
            rw_channel: names::rw_channel(name),
            semaphore_channel: names::semaphore_channel(name),
            latch_channel: names::latch_channel(name),
            token: names::token_key(name),
            queue: names::queue_key(name),
            marker: names::next_marker(name),
            fair_queue: names::fair_queue(name),
            fair_timeouts: names::fair_timeouts(name),
            fair_grants: names::fair_grants(name),
            permits: names::permit_timeouts(name),
            writers: names::rw_writers(name),
        }
    }

    /// The channel the kind publishes on: what `watch` listens to.
    pub(crate) fn channel_of(&self, kind: LockKind) -> &str {
        match kind {
            LockKind::ReadWrite => &self.rw_channel,
            LockKind::Semaphore | LockKind::PermitExpirableSemaphore | LockKind::SemaphoreOrLatch => {
                &self.semaphore_channel
            }
            LockKind::CountDownLatch => &self.latch_channel,
            _ => &self.lock_channel,
        }
    }
}

/// Connections subscribed to each of a name's channels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Listeners {
    pub(crate) lock: u64,
    pub(crate) rw: u64,
    pub(crate) semaphore: u64,
    pub(crate) latch: u64,
}

/// What was read at a name and beside it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Observed {
    /// `TYPE`.
    pub(crate) redis_type: String,
    /// `PTTL` (-2 no key, -1 no expiry).
    pub(crate) pttl: i64,
    /// `HGETALL` of a hash.
    pub(crate) fields: Option<BTreeMap<String, String>>,
    /// `GET` of a string.
    pub(crate) value: Option<String>,
    pub(crate) listeners: Listeners,
    /// The fair queue or its deadlines hold someone.
    pub(crate) fair_queued: bool,
    /// The permit-expirable semaphore's held permits exist.
    pub(crate) permits_held: bool,
    /// keyholder writers wait for a read-write lock.
    pub(crate) writers_waiting: bool,
}

/// What [`classify`] made of a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Classified {
    pub(crate) kind: LockKind,
    pub(crate) holders: Vec<Holder>,
    pub(crate) mode: Option<ReadWriteMode>,
    /// The number at the name (permits, a latch's count).
    pub(crate) count: Option<i64>,
}

impl Classified {
    fn kind(kind: LockKind) -> Classified {
        Classified { kind, holders: Vec::new(), mode: None, count: None }
    }
}

/// The kind at a name, from what was read. The rules, in order:
///
/// - **no key**: a fair lock if its queue holds someone (the head's turn,
///   between a release and its acquisition); a read-write lock if keyholder
///   writers wait for it; a semaphore (0 permits: its key is absent until
///   set) if a client waits on its channel; otherwise free.
/// - **a hash** with a `mode` field: a read-write lock, its fields the read
///   holds (`<client>:<thread>` → count) and the write hold (`...:write`).
///   Otherwise, every field an owner id with a positive count: a fair lock
///   when its queue holds someone, else a reentrant lock (or a spin lock,
///   or a fair lock nobody queues for: one layout). Anything else: other.
/// - **a string**: a permit-expirable semaphore when its held-permits set
///   exists; else, holding a decimal number, a semaphore or a latch when a
///   client waits on that kind's channel, either of them
///   ([`LockKind::SemaphoreOrLatch`]) when the key has no TTL, and a legacy
///   lock whose token is a number when it has one (a semaphore given a TTL
///   with nobody waiting is taken for one); holding anything else, a legacy
///   lock.
/// - any other type: other.
pub(crate) fn classify(seen: &Observed) -> Classified {
    let listeners = seen.listeners;
    match seen.redis_type.as_str() {
        "none" => {
            let kind = if seen.fair_queued {
                LockKind::Fair
            } else if seen.writers_waiting {
                LockKind::ReadWrite
            } else if seen.permits_held {
                LockKind::PermitExpirableSemaphore
            } else if listeners.semaphore > 0 {
                LockKind::Semaphore
            } else {
                LockKind::Free
            };
            let mut classified = Classified::kind(kind);
            if kind.is_counter() {
                classified.count = Some(0);
            }
            classified
        }
        "hash" => classify_hash(seen),
        "string" => {
            let count = seen.value.as_deref().and_then(|v| v.trim().parse::<i64>().ok());
            let kind = match count {
                _ if seen.permits_held => LockKind::PermitExpirableSemaphore,
                Some(_) if listeners.semaphore > 0 => LockKind::Semaphore,
                Some(_) if listeners.latch > 0 => LockKind::CountDownLatch,
                Some(_) if seen.pttl == -1 => LockKind::SemaphoreOrLatch,
                _ => LockKind::Legacy,
            };
            Classified { count: if kind.is_counter() { count } else { None }, ..Classified::kind(kind) }
        }
        _ => Classified::kind(LockKind::Other),
    }
}

fn classify_hash(seen: &Observed) -> Classified {
    let Some(fields) = seen.fields.as_ref().filter(|f| !f.is_empty()) else {
        return Classified::kind(LockKind::Other);
    };
    if let Some(mode) = fields.get("mode") {
        let mode = match mode.as_str() {
            "read" => Some(ReadWriteMode::Read),
            "write" => Some(ReadWriteMode::Write),
            _ => None,
        };
        let holders = fields.iter().filter(|(field, _)| *field != "mode").filter_map(|(k, v)| holder(k, v));
        return Classified { kind: LockKind::ReadWrite, holders: holders.collect(), mode, count: None };
    }
    let holders: Option<Vec<Holder>> =
        fields.iter().map(|(k, v)| holder(k, v).filter(|holder| !holder.write)).collect();
    match holders {
        Some(holders) => {
            let kind = if seen.fair_queued { LockKind::Fair } else { LockKind::Reentrant };
            Classified { holders, ..Classified::kind(kind) }
        }
        None => Classified::kind(LockKind::Other),
    }
}

/// A hash field and value as an owner and its hold count:
/// `<client-id>:<thread-id>` (or `...:write`) → a positive count.
pub(crate) fn holder(owner: &str, count: &str) -> Option<Holder> {
    let (base, write) = match owner.strip_suffix(":write") {
        Some(base) => (base, true),
        None => (owner, false),
    };
    let (client_id, thread_id) = split_owner(base)?;
    let count: u64 = count.parse().ok().filter(|&n| n > 0)?;
    Some(Holder { owner: owner.to_owned(), client_id, thread_id, count, write })
}

/// `<client-id>:<thread-id>` as its two parts.
fn split_owner(owner: &str) -> Option<(String, u64)> {
    let (client_id, thread) = owner.rsplit_once(':')?;
    if client_id.is_empty() || thread.is_empty() || !thread.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((client_id.to_owned(), thread.parse().ok()?))
}

/// A read-write lock's read hold timeout key,
/// `{<name>}:<owner>:rwlock_timeout:<n>`: internal, never a lock.
pub(crate) fn is_rwlock_timeout_key(key: &str) -> bool {
    key.rsplit_once(":rwlock_timeout:")
        .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// True for a key that some kind keeps beside a name (a fencing counter,
/// a queue, a marker, grants, an unlock latch, a read hold's timeout):
/// never listed as a lock.
pub(crate) fn is_internal_key(key: &str) -> bool {
    names::is_derived_key(key) || is_rwlock_timeout_key(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "8c1f0a4e-3b7d-4e8a-9c55-0d6e2f1a7b90";

    fn hash(pairs: &[(&str, &str)]) -> Observed {
        let fields = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Observed { redis_type: "hash".into(), pttl: 30_000, fields: Some(fields), ..Observed::default() }
    }

    fn string(value: &str, pttl: i64) -> Observed {
        Observed { redis_type: "string".into(), pttl, value: Some(value.into()), ..Observed::default() }
    }

    #[test]
    fn owner_fields_with_counts_are_a_reentrant_locks_holders() {
        let seen = classify(&hash(&[(&format!("{ID}:7"), "2")]));
        assert_eq!(seen.kind, LockKind::Reentrant);
        assert_eq!(seen.holders.len(), 1);
        assert_eq!((seen.holders[0].client_id.as_str(), seen.holders[0].thread_id), (ID, 7));
        assert_eq!((seen.holders[0].count, seen.holders[0].write), (2, false));
    }

    #[test]
    fn a_lock_hash_with_a_queue_beside_it_is_a_fair_lock() {
        let mut seen = hash(&[(&format!("{ID}:7"), "1")]);
        seen.fair_queued = true;
        assert_eq!(classify(&seen).kind, LockKind::Fair);
        let free = Observed { redis_type: "none".into(), pttl: -2, fair_queued: true, ..Observed::default() };
        assert_eq!(classify(&free).kind, LockKind::Fair, "between a release and the head's turn");
    }

    #[test]
    fn a_mode_field_makes_a_read_write_lock_with_readers_and_writer() {
        let seen = classify(&hash(&[
            ("mode", "write"),
            (&format!("{ID}:7:write"), "1"),
            (&format!("{ID}:7"), "2"),
            (&format!("{ID}:9"), "1"),
        ]));
        assert_eq!((seen.kind, seen.mode), (LockKind::ReadWrite, Some(ReadWriteMode::Write)));
        let writers: Vec<_> = seen.holders.iter().filter(|h| h.write).collect();
        assert_eq!(writers.len(), 1);
        assert_eq!((writers[0].client_id.as_str(), writers[0].thread_id), (ID, 7));
        assert_eq!(seen.holders.iter().filter(|h| !h.write).map(|h| h.count).sum::<u64>(), 3);
        let reading = classify(&hash(&[("mode", "read"), (&format!("{ID}:3"), "4")]));
        assert_eq!(reading.mode, Some(ReadWriteMode::Read));
        assert_eq!(reading.holders[0].count, 4);
    }

    #[test]
    fn other_hashes_and_types_are_no_locks() {
        for fields in [&[("a:1", "x")][..], &[("a:1", "0")], &[("a:b", "1")], &[], &[("x:1:write", "1")]] {
            assert_eq!(classify(&hash(fields)).kind, LockKind::Other, "{fields:?}");
        }
        let zset = Observed { redis_type: "zset".into(), ..Observed::default() };
        assert_eq!(classify(&zset).kind, LockKind::Other);
        let none = Observed { redis_type: "none".into(), pttl: -2, ..Observed::default() };
        assert_eq!(classify(&none).kind, LockKind::Free);
    }

    #[test]
    fn strings_are_semaphores_latches_or_legacy_locks_by_their_companions() {
        assert_eq!(classify(&string("token-1", 5_000)).kind, LockKind::Legacy);
        assert_eq!(classify(&string("token-1", -1)).kind, LockKind::Legacy);
        let ambiguous = classify(&string("3", -1));
        assert_eq!((ambiguous.kind, ambiguous.count), (LockKind::SemaphoreOrLatch, Some(3)));
        assert_eq!(classify(&string("1", 5_000)).kind, LockKind::Legacy, "a numeric token with a TTL");
        let mut waited = string("2", -1);
        waited.listeners.semaphore = 1;
        assert_eq!(classify(&waited).kind, LockKind::Semaphore);
        waited.listeners = Listeners { latch: 2, ..Listeners::default() };
        assert_eq!(classify(&waited).kind, LockKind::CountDownLatch);
        let mut permits = string("1", -1);
        permits.permits_held = true;
        let seen = classify(&permits);
        assert_eq!((seen.kind, seen.count), (LockKind::PermitExpirableSemaphore, Some(1)));
        let legacy = classify(&string("t", 100));
        assert_eq!(legacy.count, None);
    }

    #[test]
    fn no_key_with_a_waiting_client_is_an_empty_semaphore() {
        let mut seen = Observed { redis_type: "none".into(), pttl: -2, ..Observed::default() };
        seen.listeners.semaphore = 1;
        let classified = classify(&seen);
        assert_eq!((classified.kind, classified.count), (LockKind::Semaphore, Some(0)));
        seen.listeners.semaphore = 0;
        seen.writers_waiting = true;
        assert_eq!(classify(&seen).kind, LockKind::ReadWrite);
    }

    #[test]
    fn internal_keys_are_told_by_their_names() {
        assert!(is_internal_key(&format!("{{k:rw}}:{ID}:1:rwlock_timeout:1")));
        assert!(is_internal_key(&format!("{{user}}:1:{ID}:3:rwlock_timeout:12")));
        assert!(is_internal_key("redisson_lock_queue:{printer}"));
        assert!(is_internal_key("redisson_lock_timeout:{printer}"));
        assert!(is_internal_key("keyholder_rwlock_writers:{catalog}"));
        assert!(is_internal_key("redisson_lock_token:{x}"));
        assert!(!is_internal_key("orders:42"));
        assert!(!is_internal_key("rwlock_timeout:x"));
        assert!(!is_internal_key("a:rwlock_timeout:"));
    }

    #[test]
    fn kinds_have_names_that_parse_back() {
        for &kind in LockKind::ALL {
            assert_eq!(kind.as_str().parse::<LockKind>().unwrap(), kind);
        }
        assert!("lock".parse::<LockKind>().unwrap_err().is_invalid());
        assert!(LockKind::Fair.is_lock() && !LockKind::Semaphore.is_lock());
    }
}
