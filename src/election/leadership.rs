//! [`Leadership`]: a won campaign, the token-owned fenced guard of the
//! election's lock under another name, so that what a leader may do
//! (read its term, hear of its loss, resign) is all it shows.

use crossbeam_channel::Receiver;

use super::Leader;
use crate::client::Client;
use crate::error::{Error, LostReason, Result};
use crate::kinds::lock::OwnedLockGuard;

/// This process leads an election while it holds this: from
/// [`Election::campaign`](crate::Election::campaign). `Send`: any thread
/// may resign. Dropping it resigns.
///
/// A leadership lasts while the election's watchdog renews its hold
/// (every third of the election's lease); it ends when it is resigned or
/// dropped, when this client shuts down (renewal stops; the hold expires
/// within a lease), or when the hold is lost behind its back (deleted,
/// expired during a pause longer than the lease, refused a renewal):
/// [`lost_signal`](Leadership::lost_signal) says so at once. Stamp writes
/// made as leader with [`term`](Leadership::term), and have the storage
/// refuse a term lower than the highest it has seen: a deposed leader that
/// has not heard yet is then refused.
#[derive(Debug)]
pub struct Leadership {
    guard: OwnedLockGuard,
    term: u64,
    /// Keeps the campaigning client, whose watchdog renews the hold,
    /// running while the leadership lives.
    campaigner: Client,
}

impl Leadership {
    pub(crate) fn new(campaigner: Client, guard: OwnedLockGuard) -> Result<Leadership> {
        // A fenced handle's fresh hold always has a token.
        let term = guard.fencing_token().ok_or_else(|| {
            Error::invalid_argument(format!("the hold of election '{}' has no fencing token", guard.name()))
        })?;
        Ok(Leadership { guard, term, campaigner })
    }

    /// This leadership's term: its hold's fencing token, strictly greater
    /// than every earlier term of the election (and than every fencing
    /// token minted for its lock).
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// The leader's owner id in Redis, `<client-uuid>:<number>`: what
    /// [`Election::leader`](crate::Election::leader) reports as the owner.
    pub fn owner_id(&self) -> &str {
        self.guard.owner_id()
    }

    /// This leader as [`Election::leader`](crate::Election::leader) and
    /// observers report it.
    pub fn leader(&self) -> Leader {
        Leader { owner: self.owner_id().to_owned(), term: self.term }
    }

    /// A channel that receives the [`LostReason`] once, the moment this
    /// process learns it no longer leads: a renewal refused (the hold was
    /// deleted, or expired), or the lease's end passed without a renewal
    /// (Redis unreachable). The watchdog renews every third of the lease,
    /// so a hold deleted behind the leader's back is told within a third of
    /// the lease plus a round trip. Nothing is sent while it leads, or
    /// after it resigned.
    pub fn lost_signal(&self) -> Receiver<LostReason> {
        self.guard.lost_signal()
    }

    /// True if the loss of this leadership is known. No I/O.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// The run-once job `name` ([`Client::job`]) whose runs carry this
    /// leadership's term as their fencing token
    /// ([`JobRun::fencing_token`](crate::JobRun::fencing_token)): a leader
    /// that runs the schedule stamps each run's writes with its term, and a
    /// run of a deposed leader is refused by a storage that checks it. The
    /// job keeps its own lock and its `at_least` (a new leader taking over
    /// mid-tick skips a tick the old one ran). Check
    /// [`lost_signal`](Leadership::lost_signal) between runs. No I/O.
    ///
    /// # Errors
    ///
    /// As [`Client::job`].
    pub fn job(&self, name: &str) -> Result<crate::Job> {
        Ok(self.campaigner.job(name)?.fencing_token(self.term))
    }

    /// Resigns: releases the hold (one round trip), which publishes on the
    /// lock's unlock channel, so a standby takes over at once.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::LockLost`](crate::ErrorKind::LockLost) if leadership
    /// had been lost already; a Redis failure, in which case the hold, if
    /// still there, expires within the election's lease.
    pub fn resign(self) -> Result<()> {
        self.guard.unlock()
    }
}
