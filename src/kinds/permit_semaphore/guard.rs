//! The permit-expirable semaphore's guard: permits with ids and a lease,
//! given back on drop, and a loss signal.

use std::sync::Arc;

use super::layout::{Keys, PermitId};
use super::scripts::{self, Released};
use crate::client::Inner;
use crate::error::{Error, LostReason, Result};
use crate::holds::hold::Hold;
use crate::lease::Lease;

/// Permits taken from a
/// [`PermitExpirableSemaphore`](crate::PermitExpirableSemaphore), given
/// back when dropped (one script call, bounded by the client's timeouts;
/// an error is logged, never a panic). [`release`](ExpirablePermits::release)
/// does the same and returns the outcome.
///
/// With [`Lease::Watchdog`] the client's watchdog renews the permits while
/// the guard lives, so they expire only if this process dies (or stops
/// renewing for a whole watchdog timeout); with [`Lease::Fixed`] they
/// expire at the end of the lease, guard or not. Permits that expired and
/// were reclaimed are lost: [`is_lost`](ExpirablePermits::is_lost) and
/// [`lost_signal`](ExpirablePermits::lost_signal) say so. The guard may
/// move between threads. As with [`LockGuard`](crate::LockGuard), renewal
/// runs while some handle of the client is alive.
#[must_use = "if unused the permits are given back at once"]
#[clippy::has_significant_drop]
pub struct ExpirablePermits {
    client: Arc<Inner>,
    keys: Arc<Keys>,
    ids: Vec<PermitId>,
    hold: Arc<Hold>,
    done: bool,
}

impl std::fmt::Debug for ExpirablePermits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExpirablePermits")
            .field("name", &self.keys.name)
            .field("ids", &self.ids)
            .field("lease", &self.hold.lease)
            .field("lost", &self.lost_reason())
            .finish()
    }
}

impl ExpirablePermits {
    pub(crate) fn new(client: Arc<Inner>, keys: Arc<Keys>, ids: Vec<PermitId>, hold: Arc<Hold>) -> Self {
        ExpirablePermits { client, keys, ids, hold, done: false }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// The ids of the permits held, one per permit, as stored in
    /// `{<name>}:timeout` (display them for Java's 32-hex-digit form).
    pub fn ids(&self) -> &[PermitId] {
        &self.ids
    }

    /// How many permits this guard holds.
    pub fn permits(&self) -> usize {
        self.ids.len()
    }

    /// The lease the permits were taken with.
    pub fn lease(&self) -> Lease {
        self.hold.lease
    }

    /// True if the permits are known lost: a renewal found them reclaimed,
    /// or their lease deadline passed on the local clock without a
    /// successful renewal. No I/O. `false` means no loss is known.
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// False once a write of these permits (their acquisition, a renewal)
    /// was not acknowledged by the replicas the client asks for
    /// ([`ClientBuilder::replica_acks`](crate::ClientBuilder::replica_acks)):
    /// a failover could then lose them. Always true when the client asks
    /// for none. No I/O.
    pub fn is_replicated(&self) -> bool {
        self.hold.is_replicated()
    }

    /// Why the permits are known lost, if they are. No I/O.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.hold.lost_reason()
    }

    /// A channel that receives the [`LostReason`] once, the moment this
    /// client learns the permits are lost (at once if it knows already);
    /// nothing while they are held, nor after a normal release. For a fixed
    /// lease the watchdog thread watches the deadline from this call on.
    pub fn lost_signal(&self) -> crossbeam_channel::Receiver<LostReason> {
        let signal = self.hold.lost_signal();
        if self.hold.lease != Lease::Watchdog && !self.hold.is_finished() {
            self.client.context().holds().watch(Arc::clone(&self.hold), None);
        }
        signal
    }

    /// Gives the permits back now, like dropping the guard, and returns the
    /// outcome.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::LockLost`](crate::ErrorKind::LockLost) when the permits
    /// had expired: reclaimed already (Redis untouched), or expired but not
    /// yet reclaimed (given back now, each exactly once). A Redis or
    /// connection failure otherwise: the permits then expire with their
    /// lease.
    pub fn release(mut self) -> Result<()> {
        self.done = true;
        self.give_back()
    }

    fn give_back(&self) -> Result<()> {
        self.client.context().holds().deregister(self.hold.id);
        self.hold.start_release();
        let outcome = scripts::release(self.client.context().calls(), &self.keys, &self.ids);
        self.hold.finish();
        let reason = match outcome? {
            Released::Held { live } if live == self.ids.len() => return Ok(()),
            Released::Held { .. } => LostReason::LeaseExpired,
            Released::NotHeld => self.hold.lost_reason().unwrap_or(LostReason::ReleaseFoundGone),
        };
        self.hold.mark_lost(reason);
        Err(Error::lock_lost(&self.keys.name, reason))
    }
}

impl Drop for ExpirablePermits {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Err(e) = self.give_back() {
            log::warn!(
                "keyholder: giving back permits of semaphore '{}' on drop failed: {e}",
                self.keys.name
            );
        }
    }
}
