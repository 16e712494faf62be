//! What waits beside a name, and what is held there: a fair lock's queue
//! with each waiter's deadline, a read-write lock's waiting keyholder
//! writers, a permit-expirable semaphore's held permits with their expiries;
//! read from the sorted sets and lists the kinds keep (their scores are
//! epoch milliseconds) and measured against the server's clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One entry of a queue beside a lock: a fair lock's waiter, or a
/// read-write lock's waiting keyholder writer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// The waiter's owner id, as queued: `<client-id>:<thread-id>` (a
    /// writer's ends in `:write`).
    pub owner: String,
    /// A fair waiter's deadline (after which it counts as dead and is
    /// dropped when it reaches the head; its own client's clock), or when
    /// a waiting writer's entry goes stale (the server's clock). `None`
    /// when the queue has none for it.
    pub deadline: Option<SystemTime>,
    /// The time from the server's clock to `deadline`, zero once passed.
    pub remaining: Option<Duration>,
    /// A fair waiter with a keyholder grant entry (a keyholder thread, to
    /// whom a release hands the lock directly); false for a Java waiter,
    /// and for a fenced keyholder waiter (which is woken, never handed the
    /// lock, so it has no entry). Always true for a waiting writer (only
    /// keyholder writers queue).
    pub keyholder: bool,
}

/// One permit held from a permit-expirable semaphore.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldPermit {
    /// The permit's id: 32 lowercase hex digits, as Java and
    /// [`PermitId`](crate::PermitId) show it.
    pub id: String,
    /// When it expires and is reclaimed (epoch ms, as scored); `None` for a
    /// permit that never expires (a Redisson permit taken without a lease).
    pub expires: Option<SystemTime>,
    /// The time from the server's clock to `expires`, zero once passed.
    pub remaining: Option<Duration>,
}

/// Redisson's score of a permit that never expires (`nonExpirableTimeout`).
const NEVER_EXPIRES: f64 = 922_337_203_685_477.0;

/// A time in epoch milliseconds (a score).
pub(crate) fn epoch_ms(ms: f64) -> Option<SystemTime> {
    if !ms.is_finite() || ms < 0.0 {
        return None;
    }
    UNIX_EPOCH.checked_add(Duration::from_millis(ms as u64))
}

/// From `now` to `at`, zero once passed.
pub(crate) fn until(now: Option<SystemTime>, at: Option<SystemTime>) -> Option<Duration> {
    let (now, at) = (now?, at?);
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The fair queue in order, each waiter with its deadline.
pub(crate) fn fair_waiters(
    queue: Vec<String>,
    deadlines: &[(String, f64)],
    keyholder: &[String],
    now: Option<SystemTime>,
) -> Vec<Waiter> {
    queue
        .into_iter()
        .map(|owner| {
            let deadline =
                deadlines.iter().find(|(member, _)| *member == owner).and_then(|(_, score)| epoch_ms(*score));
            Waiter { keyholder: keyholder.contains(&owner), remaining: until(now, deadline), deadline, owner }
        })
        .collect()
}

/// keyholder's waiting writers, in the order they go stale.
pub(crate) fn waiting_writers(entries: Vec<(String, f64)>, now: Option<SystemTime>) -> Vec<Waiter> {
    entries
        .into_iter()
        .map(|(owner, score)| {
            let deadline = epoch_ms(score);
            Waiter { owner, remaining: until(now, deadline), deadline, keyholder: true }
        })
        .collect()
}

/// The held permits: ids as hex, never-expiring scores as `None`.
pub(crate) fn held_permits(entries: Vec<(Vec<u8>, f64)>, now: Option<SystemTime>) -> Vec<HeldPermit> {
    entries
        .into_iter()
        .map(|(id, score)| {
            let expires = if score >= NEVER_EXPIRES { None } else { epoch_ms(score) };
            HeldPermit { id: permit_id(&id), remaining: until(now, expires), expires }
        })
        .collect()
}

/// A permit id as Java shows it: 16 raw bytes as 32 hex digits; anything
/// else as text.
fn permit_id(bytes: &[u8]) -> String {
    if bytes.len() == 16 {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    } else {
        String::from_utf8_lossy(bytes).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_keep_their_order_and_deadlines() {
        let now = epoch_ms(1_000_000.0);
        let waiters = fair_waiters(
            vec!["b:1".into(), "a:2".into()],
            &[("a:2".into(), 1_005_000.0), ("b:1".into(), 999_000.0)],
            &["a:2".into()],
            now,
        );
        assert_eq!(waiters[0].owner, "b:1");
        assert_eq!(waiters[0].remaining, Some(Duration::ZERO), "passed");
        assert!(!waiters[0].keyholder);
        assert_eq!(waiters[1].remaining, Some(Duration::from_secs(5)));
        assert!(waiters[1].keyholder);
        let permits = held_permits(vec![(vec![0xab; 16], 1_002_000.0), (b"x".to_vec(), NEVER_EXPIRES)], now);
        assert_eq!(permits[0].id, "ab".repeat(16));
        assert_eq!(permits[0].remaining, Some(Duration::from_secs(2)));
        assert_eq!((permits[1].expires, permits[1].remaining), (None, None));
    }
}
