//! Lock names and the keys and channels derived from them.
//!
//! The lock key is the name itself, unprefixed, as in Redisson. Every derived
//! key or channel keeps the name inside `{...}` (or keeps the name's own braces)
//! so that all of them hash to the lock key's Redis Cluster slot.

use crate::error::{Error, Result};

/// The longest lock name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 1024;

/// Checks a lock name before any I/O: 1 to [`MAX_NAME_LEN`] bytes, no ASCII
/// control characters.
pub(crate) fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidArgument("lock name is empty".into()));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::InvalidArgument(format!(
            "lock name is {} bytes long; the limit is {MAX_NAME_LEN}",
            name.len()
        )));
    }
    if name.chars().any(|c| c.is_ascii_control()) {
        return Err(Error::InvalidArgument("lock name contains a control character".into()));
    }
    Ok(())
}

/// Redisson's `prefixName`: `<prefix>:{<name>}`, or `<prefix>:<name>` when the
/// name already contains `{`.
pub(crate) fn prefixed(prefix: &str, name: &str) -> String {
    if name.contains('{') { format!("{prefix}:{name}") } else { format!("{prefix}:{{{name}}}") }
}

/// The unlock channel of the lock `name`.
pub(crate) fn unlock_channel(name: &str) -> String {
    prefixed("redisson_lock__channel", name)
}

/// The fencing-token counter of the lock `name` (Redisson's RFencedLock key).
pub(crate) fn token_key(name: &str) -> String {
    prefixed("redisson_lock_token", name)
}

/// The next-in-line marker of the lock `name` (see `lua/acquire.lua`).
pub(crate) fn next_marker(name: &str) -> String {
    prefixed("keyholder_lock_next", name)
}

/// The unlock latch of the owner `(client, thread)` for the lock `name`:
/// Redisson's `redisson_unlock_latch:{<name>}:<32 hex>`, the hex being the
/// client's UUID with the thread id mixed in, so each owner has one key per
/// lock that its releases reuse.
pub(crate) fn unlock_latch(name: &str, client: u128, thread: u64) -> String {
    format!("{}:{:032x}", prefixed("redisson_unlock_latch", name), client ^ u128::from(thread))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn names_are_validated() {
        assert!(validate_name("orders:42").is_ok());
        assert!(validate_name("").unwrap_err().is_invalid());
        assert!(validate_name("a\nb").unwrap_err().is_invalid());
        assert!(validate_name(&"x".repeat(MAX_NAME_LEN)).is_ok());
        assert!(validate_name(&"x".repeat(MAX_NAME_LEN + 1)).unwrap_err().is_invalid());
        assert!(validate_name("ключ").is_ok());
    }
}
