//! How long one call waits: the one patience of every waiting call, the
//! lock-like kinds', the semaphores', the latch's, MultiLock's and RedLock's.
//!
//! Why one type: a `_for` call (a duration) is the `_until` call (a
//! deadline) from now, and that derivation has a trap: `Instant::now() +
//! wait` panics for a duration the clock cannot add (`Duration::MAX`, a
//! "wait forever" some callers pass). [`Patience::within`] derives it
//! once, waiting as long as it takes for such a duration; every `_for`
//! method goes through it.

use std::time::{Duration, Instant};

use crate::observe;

/// How long one call waits: at most until `deadline` (`None`: as long as
/// it takes), and whether it waits at all (`false`: one attempt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Patience {
    deadline: Option<Instant>,
    block: bool,
}

impl Patience {
    /// One attempt, no wait (`try_*`).
    pub(crate) fn once() -> Patience {
        Patience { deadline: Some(Instant::now()), block: false }
    }

    /// Until `deadline` at the latest (`*_until`).
    pub(crate) fn until(deadline: Instant) -> Patience {
        Patience { deadline: Some(deadline), block: true }
    }

    /// At most `wait` from now (`*_for`); as long as it takes when the
    /// clock cannot add `wait`.
    pub(crate) fn within(wait: Duration) -> Patience {
        match Instant::now().checked_add(wait) {
            Some(deadline) => Patience::until(deadline),
            None => Patience::forever(),
        }
    }

    /// As long as it takes (each sleep still bounded: the holder's lease,
    /// the watchdog timeout).
    pub(crate) fn forever() -> Patience {
        Patience { deadline: None, block: true }
    }

    /// The deadline, if any.
    pub(crate) fn deadline(self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the call waits at all.
    pub(crate) fn waits(self) -> bool {
        self.block
    }

    /// The acquire mode this patience is observed as.
    pub(crate) fn mode(self) -> observe::Mode {
        observe::Mode::of(self.deadline, self.block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_the_clock_cannot_add_waits_as_long_as_it_takes() {
        assert_eq!(Patience::within(Duration::MAX), Patience::forever());
        let p = Patience::within(Duration::from_secs(5));
        assert!(p.waits() && p.deadline().is_some_and(|d| d > Instant::now() + Duration::from_secs(4)));
        let once = Patience::once();
        assert!(!once.waits() && once.deadline().is_some());
        assert!(matches!(once.mode(), observe::Mode::Try));
        assert!(matches!(Patience::forever().mode(), observe::Mode::Blocking));
        assert!(matches!(p.mode(), observe::Mode::Timed));
    }
}
