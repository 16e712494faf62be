//! A grant: a lock handed to this client by another client's release, as
//! its wake message carries it, and where the granted lease runs from on
//! this client's clock (never later than where the server started it).

use std::time::{Duration, Instant};

/// A lock handed to this client by another client's release (see
/// `lua/lock/release.lua`), not yet taken by its thread.
#[derive(Debug, Clone)]
pub(crate) struct Grant {
    /// The owner id the lock was given to.
    pub(crate) owner: String,
    /// Server time from the grantee's last refused attempt to the grant.
    pub(crate) elapsed: Duration,
    /// When the client heard of it.
    pub(crate) received: Instant,
}

/// How much `elapsed` may overstate the time from the grantee's last
/// refused attempt to the grant: it is the difference of two readings of the
/// server's clock cut to whole milliseconds (`TIME`), each up to a
/// millisecond short. The granted lease itself runs from the later reading
/// (`PEXPIREAT`, see `lua/lock/release.lua`), and the key is gone only once
/// the server's clock, in whole milliseconds, is past that reading plus the
/// lease.
pub(crate) const GRANT_CLOCK_SLACK: Duration = Duration::from_millis(1);

impl Grant {
    /// Where the granted hold's lease runs from, on this client's clock:
    /// the grant came `elapsed` (server time) after the grantee's last
    /// refused attempt reached Redis, which was after `queued_at`, that
    /// attempt's send time; and before the grant was heard. `elapsed` is
    /// taken [`GRANT_CLOCK_SLACK`] short, since whole milliseconds can
    /// overstate it. So this instant is never later than the moment the
    /// server started the lease, however late the message arrived.
    pub(crate) fn granted_at(&self, queued_at: Instant) -> Instant {
        let elapsed = self.elapsed.saturating_sub(GRANT_CLOCK_SLACK);
        queued_at + elapsed.min(self.received.saturating_duration_since(queued_at))
    }
}

/// A wake message that hands the lock over: `"<owner id> <elapsed ms>"` (see
/// `lua/lock/release.lua`); an empty one only wakes.
pub(super) fn parse_grant(payload: &str) -> Option<Grant> {
    let (owner, elapsed) = payload.split_once(' ')?;
    Some(Grant {
        owner: owner.to_owned(),
        elapsed: Duration::from_millis(elapsed.parse().ok()?),
        received: Instant::now(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_carry_the_owner_and_the_server_time_since_its_last_refusal() {
        let grant = parse_grant("8c1f0a4e-0000-4000-8000-000000000000:7 25").unwrap();
        assert_eq!(grant.owner, "8c1f0a4e-0000-4000-8000-000000000000:7");
        assert_eq!(grant.elapsed, Duration::from_millis(25));
        assert!(parse_grant("").is_none(), "an empty message only wakes");
        assert!(parse_grant("owner:1 soon").is_none());
    }

    #[test]
    fn a_granted_lease_runs_from_no_later_than_the_grant() {
        let queued_at = Instant::now();
        let received = queued_at + Duration::from_millis(40);
        let grant = |ms| Grant { owner: "c:1/1".into(), elapsed: Duration::from_millis(ms), received };
        // Whole milliseconds overstate `elapsed` by up to one: taken off.
        assert_eq!(grant(30).granted_at(queued_at), queued_at + Duration::from_millis(29));
        assert_eq!(grant(5_000).granted_at(queued_at), received);
        assert_eq!(grant(1).granted_at(queued_at), queued_at);
        assert_eq!(grant(0).granted_at(queued_at), queued_at);
    }
}
