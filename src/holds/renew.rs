//! How a kind renews its holds, and what it does when one is lost: the
//! seam between the watchdog and the kinds.
//!
//! A kind registers each watchdog-lease hold with a [`Renew`] (how to renew
//! holds of its layout in Redis) and, if anyone local needs telling, an
//! [`OnLost`] (whom to tell when the hold turns out lost). The watchdog knows nothing else of the
//! kind: every period it groups the registered holds by
//! [`Renew::batch_key`] and by node, and hands each group (at most
//! `watchdog::BATCH` holds) to one renewer's [`Renew::renew`]. Kinds that
//! share a layout share a batch key: the reentrant lock, the fair lock,
//! the write lock and the spin lock all keep `<name>` → `{owner: count}`
//! and renew with one script.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::Result;
use crate::holds::hold::Hold;

/// Renews one layout's holds in Redis.
pub(crate) trait Renew: Send + Sync + std::fmt::Debug {
    /// Holds whose renewers return the same key are renewed together, by
    /// any one of those renewers: they must be interchangeable.
    fn batch_key(&self) -> &'static str;

    /// Renews `holds` (at most `watchdog::BATCH`, all of this batch key, on
    /// one node when the client talks to several) to a lease of
    /// `lease_ms`, in as few calls as it can. Returns, per hold in order,
    /// whether it is still held (false: the hold is lost), and whether
    /// the replicas asked for acknowledged the renewal (true when none
    /// were asked for). A renewal is repeated after a failure, so it must
    /// be safe to repeat.
    fn renew(&self, holds: &[&Hold], lease_ms: u64) -> Result<(Vec<bool>, bool)>;

    /// Which of `holds` (all of this batch key, on one node when the
    /// client talks to several) still exist in Redis, changing nothing:
    /// per hold, false when it is certainly gone, true when it is held or
    /// the reply cannot tell. Checks holds whose lock may have been
    /// unlocked elsewhere (see `holds/foreign.rs`); a layout that cannot
    /// check takes every hold as held.
    fn check(&self, holds: &[&Hold]) -> Result<Vec<bool>> {
        Ok(vec![true; holds.len()])
    }
}

/// Whom to tell, locally, that a hold was lost (renewal refused, lease run
/// out): typically the kind's waiting threads of this client, which may
/// now take the lock. The hold itself is already marked lost, which tells
/// its guard's listeners.
pub(crate) trait OnLost: Send + Sync {
    fn hold_lost(&self, hold: &Hold);
}

/// One client's renewers, one per batch key, made on first use: a hold's
/// registration then costs a reference count, not an allocation.
#[derive(Default)]
pub(crate) struct Renewers {
    made: Mutex<Vec<Arc<dyn Renew>>>,
}

impl std::fmt::Debug for Renewers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.made.lock().iter().map(|r| r.batch_key())).finish()
    }
}

impl Renewers {
    /// The renewer of batch key `key`, made by `make` the first time.
    pub(crate) fn get(&self, key: &'static str, make: impl FnOnce() -> Arc<dyn Renew>) -> Arc<dyn Renew> {
        let mut made = self.made.lock();
        if let Some(renewer) = made.iter().find(|r| r.batch_key() == key) {
            return Arc::clone(renewer);
        }
        let renewer = make();
        made.push(Arc::clone(&renewer));
        renewer
    }
}
