//! Lock names and the keys and channels derived from them.
//!
//! The lock key is the name itself, unprefixed, as in Redisson. Every derived
//! key or channel keeps the name inside `{...}` (or keeps the name's own braces)
//! so that all of them hash to the lock key's Redis Cluster slot.
//!
//! Redisson's derived names (the unlock channel, the fencing-token counter)
//! follow its rule exactly, so Java and Rust meet on them; under that rule the
//! names `x` and `{x}` share them, and so does keyholder's listening
//! channel, which mirrors the unlock channel. keyholder's own keys (the
//! claim marker, the waiter queue and grants, the unlock latches, the
//! wake channels) are one-to-one with lock names instead, so
//! that no lock's key can stand in for another's. Names under the derived
//! keys' prefixes are reserved: a lock there could be overwritten, or mistaken
//! for another lock's state.

use std::sync::Arc;

use crate::error::{Error, Result};

/// The longest lock name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 1024;

/// Checks a lock name before any I/O: 1 to [`MAX_NAME_LEN`] bytes, no ASCII
/// control characters.
pub(crate) fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid_argument("lock name is empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::invalid_argument(format!(
            "lock name is {} bytes long; the limit is {MAX_NAME_LEN}",
            name.len()
        )));
    }
    if name.chars().any(|c| c.is_ascii_control()) {
        return Err(Error::invalid_argument("lock name contains a control character"));
    }
    if let Some(prefix) = RESERVED_PREFIXES.iter().find(|p| name.starts_with(*p)) {
        return Err(Error::invalid_argument(format!(
            "lock names starting with '{prefix}' are reserved for keys derived from other locks"
        )));
    }
    Ok(())
}

/// Checks, for a client of a Redis Cluster, that every key and channel
/// derived from `name` hashes to the lock key's slot, so that one script
/// call can touch them all. That holds for every name without braces, and
/// for every name with a hash tag (`{user}:1`); not for a name whose braces
/// make no tag (`a{b`, `x{}y`) or a stray `}` (`a}b`): the lock key is then
/// hashed whole (or by a different tag) while its derived keys are not
/// (Redisson's rule wraps the name in braces only when it has no `{`).
pub(crate) fn validate_cluster_name(name: &str) -> Result<()> {
    let tag = hash_tag(name.as_bytes());
    let derived = [unlock_channel(name), token_key(name), queue_key(name), unlock_latch(name, 0, 0)];
    if derived.iter().any(|key| hash_tag(key.as_bytes()) != tag) {
        return Err(Error::invalid_argument(format!(
            "lock name {name:?} has braces that make no hash tag: on a Redis Cluster its keys and \
             channels would fall in different slots (use no braces, or one {{tag}} with something inside)"
        )));
    }
    Ok(())
}

/// The part of a Redis key that Redis Cluster hashes: the text between its
/// first `{` and the first `}` after it, when that is not empty (the key's
/// *hash tag*); otherwise the whole key.
pub(crate) fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else { return key };
    match key[open + 1..].iter().position(|&b| b == b'}') {
        Some(0) | None => key,
        Some(len) => &key[open + 1..open + 1 + len],
    }
}

const TOKEN_PREFIX: &str = "redisson_lock_token";
const MARKER_PREFIX: &str = "keyholder_lock_next";
const QUEUE_PREFIX: &str = "keyholder_lock_queue";
const GRANTS_PREFIX: &str = "keyholder_lock_grants";
const LATCH_PREFIX: &str = "redisson_unlock_latch";
const WAKE_PREFIX: &str = "keyholder_lock__wake";
const UNLOCK_PREFIX: &str = "redisson_lock__channel";
const LISTENING_PREFIX: &str = "keyholder_lock__listening";

/// Name prefixes of the keys derived from lock names.
const RESERVED_PREFIXES: [&str; 10] = [
    "redisson_lock_token:",
    "keyholder_lock_next:",
    "keyholder_lock_queue:",
    "keyholder_lock_grants:",
    // Older keyholders' recent releasers.
    "keyholder_lock_recent:",
    "redisson_unlock_latch:",
    // The fair lock's queue, deadlines and grants.
    "redisson_lock_queue:",
    "redisson_lock_timeout:",
    "keyholder_fair_grants:",
    // The read-write lock's waiting writers.
    "keyholder_rwlock_writers:",
];

/// True for a key derived from some lock's name (a fencing counter, a
/// claim marker, a waiter queue, grants, an unlock latch): never a lock
/// itself.
pub(crate) fn is_derived_key(key: &str) -> bool {
    RESERVED_PREFIXES.iter().any(|prefix| key.starts_with(prefix))
}

/// A lock's name and every key and channel derived from it, as one client
/// uses them.
#[derive(Debug)]
pub(crate) struct LockKeys {
    pub(crate) name: Arc<str>,
    /// Redisson's unlock channel, shared with Java waiters.
    pub(crate) channel: Arc<str>,
    /// The claim marker (see `lua/lock/acquire.lua`).
    pub(crate) marker: Arc<str>,
    /// The waiter queue.
    pub(crate) queue: Arc<str>,
    /// The waiter grants.
    pub(crate) grants: Arc<str>,
    /// keyholder's listening channel (see [`listening_channel`]).
    pub(crate) listening: Arc<str>,
    /// The prefix of the lock's wake channels.
    pub(crate) wake_prefix: Arc<str>,
    /// This client's wake channel for the lock.
    pub(crate) wake_channel: Arc<str>,
}

impl LockKeys {
    /// The keys of lock `name` for the client `client_id`.
    pub(crate) fn new(name: &Arc<str>, client_id: &str) -> LockKeys {
        LockKeys {
            name: Arc::clone(name),
            channel: Arc::from(unlock_channel(name)),
            marker: Arc::from(next_marker(name)),
            queue: Arc::from(queue_key(name)),
            grants: Arc::from(grants_key(name)),
            listening: Arc::from(listening_channel(name)),
            wake_prefix: Arc::from(wake_prefix(name)),
            wake_channel: Arc::from(wake_channel(name, client_id)),
        }
    }
}

/// Redisson's hash-tag rule, the one place it is written: the name itself
/// when it contains `{` (it carries its own tag), else `{<name>}`.
fn tagged(name: &str) -> std::borrow::Cow<'_, str> {
    if name.contains('{') { name.into() } else { format!("{{{name}}}").into() }
}

/// Redisson's `prefixName`: `<prefix>:{<name>}`, or `<prefix>:<name>` when the
/// name already contains `{`.
pub(crate) fn prefixed(prefix: &str, name: &str) -> String {
    format!("{prefix}:{}", tagged(name))
}

/// Redisson's `suffixName`: `{<name>}:<suffix>`, or `<name>:<suffix>` when the
/// name already contains `{`.
pub(crate) fn suffixed(name: &str, suffix: &str) -> String {
    format!("{}:{suffix}", tagged(name))
}

// Every other kind's keys and channels, written here once for the kinds'
// script callers, the renewers and the operators' tools alike.

/// The fair lock's queue of owner ids (a LIST, Redisson's).
pub(crate) fn fair_queue(name: &str) -> String {
    prefixed("redisson_lock_queue", name)
}

/// The fair lock's waiters' deadlines (a ZSET, Redisson's).
pub(crate) fn fair_timeouts(name: &str) -> String {
    prefixed("redisson_lock_timeout", name)
}

/// keyholder's fair grants: whom a fair release may hand the lock to.
pub(crate) fn fair_grants(name: &str) -> String {
    own_key("keyholder_fair_grants", name)
}

/// The prefix of a fair waiter's grant channel, `<prefix>:<owner>`.
pub(crate) fn fair_grant_prefix(name: &str) -> String {
    own_key("keyholder_fair__grant", name)
}

/// The read-write lock's channel (Redisson's).
pub(crate) fn rw_channel(name: &str) -> String {
    prefixed("redisson_rwlock", name)
}

/// The base of a read-write lock's read holds' timeout keys (Redisson's).
pub(crate) fn rw_timeout_base(name: &str) -> String {
    tagged(name).into_owned()
}

/// keyholder's waiting writers of a read-write lock (a ZSET).
pub(crate) fn rw_writers(name: &str) -> String {
    own_key("keyholder_rwlock_writers", name)
}

/// Both semaphores' channel (Redisson's `redisson_sc`).
pub(crate) fn semaphore_channel(name: &str) -> String {
    prefixed("redisson_sc", name)
}

/// The permit-expirable semaphore's held permits (a ZSET, Redisson's).
pub(crate) fn permit_timeouts(name: &str) -> String {
    suffixed(name, "timeout")
}

/// The count-down latch's channel: Redisson wraps the name in braces
/// whatever it holds, so a hash-tagged name gets a second pair.
pub(crate) fn latch_channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

/// The unlock channel of the lock `name`.
pub(crate) fn unlock_channel(name: &str) -> String {
    prefixed(UNLOCK_PREFIX, name)
}

/// keyholder's listening channel of the lock `name`: every keyholder client
/// that listens on the lock's unlock channel listens on this one too,
/// subscribed and unsubscribed in the same command (see
/// [`listening_companion`]), and nobody publishes on it. So `PUBSUB NUMSUB`
/// of the two, in one call, tells how many others listen on the unlock
/// channel: Redisson waiters (see `lua/lock/release.lua`).
pub(crate) fn listening_channel(name: &str) -> String {
    prefixed(LISTENING_PREFIX, name)
}

/// The listening channel that goes with `channel` when `channel` is a
/// reentrant lock's unlock channel ([`unlock_channel`] of some name);
/// `None` for any other channel, a fair lock's per-waiter channel
/// (`<unlock channel>:<uuid>:<thread>`) among them.
pub(crate) fn listening_companion(channel: &str) -> Option<String> {
    let rest = channel.strip_prefix(UNLOCK_PREFIX)?.strip_prefix(':')?;
    // The common form, `{<name>}` of a name without `{`, first: on every
    // SUBSCRIBE of a waiter.
    let plain = rest.len() > 1 && rest.starts_with('{') && rest.ends_with('}') && !rest[1..].contains('{');
    if !plain {
        let mut tail = rest.rsplitn(3, ':');
        if let (Some(thread), Some(uuid), Some(_)) = (tail.next(), tail.next(), tail.next())
            && !thread.is_empty()
            && thread.bytes().all(|b| b.is_ascii_digit())
            && uuid::Uuid::try_parse(uuid).is_ok()
        {
            return None;
        }
    }
    let mut companion = String::with_capacity(LISTENING_PREFIX.len() + 1 + rest.len());
    companion.push_str(LISTENING_PREFIX);
    companion.push(':');
    companion.push_str(rest);
    Some(companion)
}

/// True for a listening channel ([`listening_channel`]).
pub(crate) fn is_listening_channel(channel: &str) -> bool {
    channel.strip_prefix(LISTENING_PREFIX).is_some_and(|rest| rest.starts_with(':'))
}

/// The fencing-token counter of the lock `name` (Redisson's RFencedLock key).
pub(crate) fn token_key(name: &str) -> String {
    prefixed(TOKEN_PREFIX, name)
}

/// A key of keyholder's own for the lock `name`, one-to-one with names:
/// `<prefix>:{<name>}`, or `<prefix>:tagged:<name>` when the name carries its
/// own hash tag. (Redisson's rule would give `x` and `{x}` the same key.) The
/// first `{` of either form opens the name's slot tag, as in the lock key.
pub(crate) fn own_key(prefix: &str, name: &str) -> String {
    match tagged(name) {
        std::borrow::Cow::Borrowed(own) => format!("{prefix}:tagged:{own}"),
        braced => format!("{prefix}:{braced}"),
    }
}

/// The claim marker of the lock `name`: the client whose turn it is (see
/// `lua/lock/acquire.lua`).
pub(crate) fn next_marker(name: &str) -> String {
    own_key(MARKER_PREFIX, name)
}

/// The queue of keyholder clients waiting for the lock `name`.
pub(crate) fn queue_key(name: &str) -> String {
    own_key(QUEUE_PREFIX, name)
}

/// The grants of the queued clients of the lock `name`: whom a release may
/// hand the lock to directly.
pub(crate) fn grants_key(name: &str) -> String {
    own_key(GRANTS_PREFIX, name)
}

/// The prefix of the lock `name`'s wake channels: client `<id>` listens on
/// `<prefix>:<id>` while one of its threads waits in Redis for the lock.
pub(crate) fn wake_prefix(name: &str) -> String {
    own_key(WAKE_PREFIX, name)
}

/// The channel on which `client_id` is woken when its turn for `name` comes.
pub(crate) fn wake_channel(name: &str, client_id: &str) -> String {
    format!("{}:{client_id}", wake_prefix(name))
}

/// The unlock latch of the owner `(client, thread)` for the lock `name`:
/// `redisson_unlock_latch:{<name>}:<32 hex>` as in Redisson, the hex being
/// the client's UUID with the thread id mixed in, so each owner has one key
/// per lock that its releases reuse.
pub(crate) fn unlock_latch(name: &str, client: u128, thread: u64) -> String {
    format!("{}:{:032x}", own_key(LATCH_PREFIX, name), client ^ u128::from(thread))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kinds_keys_follow_redissons_brace_rule_and_keyholders_own_are_one_to_one() {
        let layout = |name: &str| {
            [
                fair_queue(name),
                fair_timeouts(name),
                rw_channel(name),
                rw_timeout_base(name),
                semaphore_channel(name),
                permit_timeouts(name),
                fair_grants(name),
                fair_grant_prefix(name),
                rw_writers(name),
                latch_channel(name),
            ]
        };
        assert_eq!(
            layout("slots"),
            [
                "redisson_lock_queue:{slots}",
                "redisson_lock_timeout:{slots}",
                "redisson_rwlock:{slots}",
                "{slots}",
                "redisson_sc:{slots}",
                "{slots}:timeout",
                "keyholder_fair_grants:{slots}",
                "keyholder_fair__grant:{slots}",
                "keyholder_rwlock_writers:{slots}",
                "redisson_countdownlatch__channel__{slots}",
            ]
        );
        assert_eq!(
            layout("{user}:1"),
            [
                "redisson_lock_queue:{user}:1",
                "redisson_lock_timeout:{user}:1",
                "redisson_rwlock:{user}:1",
                "{user}:1",
                "redisson_sc:{user}:1",
                "{user}:1:timeout",
                "keyholder_fair_grants:tagged:{user}:1",
                "keyholder_fair__grant:tagged:{user}:1",
                "keyholder_rwlock_writers:tagged:{user}:1",
                "redisson_countdownlatch__channel__{{user}:1}",
            ]
        );
        // Redisson's rule gives `x` and `{x}` one key; keyholder's own keys differ.
        assert_eq!(semaphore_channel("x"), semaphore_channel("{x}"));
        assert_ne!(fair_grants("x"), fair_grants("{x}"));
    }

    #[test]
    fn channel_wraps_the_name_in_braces() {
        assert_eq!(unlock_channel("order:42"), "redisson_lock__channel:{order:42}");
    }

    #[test]
    fn channel_keeps_the_names_own_braces() {
        assert_eq!(unlock_channel("{user}:1"), "redisson_lock__channel:{user}:1");
    }

    #[test]
    fn token_key_shares_the_locks_slot() {
        assert_eq!(token_key("order:42"), "redisson_lock_token:{order:42}");
        assert_eq!(token_key("{user}:1"), "redisson_lock_token:{user}:1");
    }

    #[test]
    fn latch_keys_are_per_owner_and_slot_safe() {
        let a = unlock_latch("order:42", 0xabc0, 1);
        assert_eq!(a, "redisson_unlock_latch:{order:42}:0000000000000000000000000000abc1");
        assert_eq!(a, unlock_latch("order:42", 0xabc0, 1));
        assert_ne!(a, unlock_latch("order:42", 0xabc0, 2));
        assert_ne!(a, unlock_latch("order:42", 0xdef0, 1));
    }

    #[test]
    fn own_keys_are_one_to_one_with_names() {
        assert_eq!(next_marker("x"), "keyholder_lock_next:{x}");
        assert_eq!(next_marker("{x}"), "keyholder_lock_next:tagged:{x}");
        assert_ne!(unlock_latch("x", 1, 1), unlock_latch("{x}", 1, 1));
        assert_eq!(
            unlock_latch("{user}:1", 0xabc0, 1),
            "redisson_unlock_latch:tagged:{user}:1:0000000000000000000000000000abc1"
        );
    }

    #[test]
    fn derived_key_prefixes_are_reserved() {
        for name in [
            "keyholder_lock_next:{m}",
            "redisson_lock_token:{m}",
            "keyholder_lock_queue:{m}",
            "keyholder_lock_grants:{m}",
            "keyholder_lock_recent:{m}",
            "redisson_unlock_latch:{n}:00000000000000000000000000000001",
        ] {
            assert!(validate_name(name).unwrap_err().is_invalid(), "{name}");
        }
        assert!(validate_name("keyholder_lock_next").is_ok());
        assert!(validate_name("redisson_lock__channel:{x}").is_ok());
    }

    #[test]
    fn every_unlock_channel_and_no_fair_waiter_channel_has_a_listening_companion() {
        for name in ["orders", "a}b", "{user}:1", "orders{eu}", "{a}", "x:y:1"] {
            let companion = listening_companion(&unlock_channel(name));
            assert_eq!(companion.as_deref(), Some(listening_channel(name).as_str()), "{name}");
            assert!(is_listening_channel(&listening_channel(name)), "{name}");
            assert_eq!(
                hash_tag(listening_channel(name).as_bytes()),
                hash_tag(unlock_channel(name).as_bytes())
            );
        }
        let owner = "3c50053a-48a4-4d0e-9534-1f08d98ab38e:17";
        for name in ["orders", "{user}:1"] {
            assert_eq!(listening_companion(&format!("{}:{owner}", unlock_channel(name))), None, "{name}");
        }
        assert_eq!(listening_companion("keyholder_lock__wake:{orders}:x"), None);
        assert!(!is_listening_channel(&unlock_channel("orders")));
    }

    #[test]
    fn names_are_validated() {
        assert!(validate_name("orders:42").is_ok());
        assert!(validate_name("").unwrap_err().is_invalid());
        assert!(validate_name("a\nb").unwrap_err().is_invalid());
        assert!(validate_name(&"x".repeat(MAX_NAME_LEN)).is_ok());
        assert!(validate_name(&"x".repeat(MAX_NAME_LEN + 1)).unwrap_err().is_invalid());
        assert!(validate_name("ключ").is_ok());
    }
}
