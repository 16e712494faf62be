//! A fresh hold, for every lock-like kind: what follows a successful
//! acquire script call, written once.
//!
//! An acquisition the replicas did not acknowledge is given back when the
//! client requires acknowledgements (a failover could lose it), and
//! otherwise flagged on the hold. The hold is then renewed by the watchdog
//! (for a watchdog lease) with its layout's renewer, and listened for: a
//! force unlock by another client, on the kinds that publish one, is heard
//! on the lock's channel; this client's own is found through the same
//! record.

use std::sync::Arc;

use crate::client::Context;
use crate::error::{Error, Result};
use crate::holds::hold::{Acquisition, Hold};
use crate::holds::renew::{OnLost, Renew};
use crate::lease::Lease;

/// A successful fresh acquire script call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Won {
    /// When the successful call was sent (for a grant, where its lease runs
    /// from).
    pub(crate) sent: std::time::Instant,
    /// The fencing token, for a fenced handle.
    pub(crate) token: Option<u64>,
    /// Whether the replicas asked for acknowledged it (`None`: none asked).
    pub(crate) replicated: Option<bool>,
}

/// Refuses an acquisition the replicas did not acknowledge when the client
/// requires them: `give_back` releases it (one attempt), and the error is
/// returned.
pub(crate) fn refuse_unreplicated(
    ctx: Context<'_>,
    name: &str,
    replicated: Option<bool>,
    give_back: impl FnOnce(),
) -> Result<()> {
    if replicated == Some(false) && ctx.config().replica_acks_required {
        // Not on the replicas: a failover could lose it. Give it back rather
        // than hand out a hold the caller refused.
        give_back();
        return Err(Error::replica_acks(name));
    }
    Ok(())
}

/// The new hold `acquisition` began, of the lock `name` (a kind's `noun`),
/// flagged when the replicas did not acknowledge it.
pub(crate) fn hold(
    ctx: Context<'_>,
    noun: &'static str,
    name: &Arc<str>,
    acquisition: Acquisition,
    replicated: Option<bool>,
) -> Arc<Hold> {
    let hold = Arc::new(Hold::new(ctx.holds().next_id(), Arc::clone(name), acquisition, ctx.id(), noun));
    if replicated == Some(false) {
        log::warn!("keyholder: {noun} '{name}' acquired, but not acknowledged by the replicas");
        hold.mark_unreplicated();
    }
    hold
}

/// How a new hold is kept.
pub(crate) struct Keeping {
    /// Renews the hold under a watchdog lease, and checks it after an
    /// unlock message.
    pub(crate) renew: Arc<dyn Renew>,
    /// Renews a watchdog-lease hold (the read side's own renewer differs
    /// from the check's).
    pub(crate) renew_watchdog: Option<Arc<dyn Renew>>,
    /// The lock's unlock channel, when its force unlock publishes there.
    pub(crate) channel: Option<Arc<str>>,
    /// Whom to tell locally when the hold is lost.
    pub(crate) on_lost: Option<Arc<dyn OnLost>>,
}

/// Registers a new hold: renewed by the watchdog under a watchdog lease,
/// checked when the client verifies its holds under a fixed one (both
/// verified at once when acquired across a failover), watched to its
/// deadline, listened for on its lock's channel (and found by this
/// client's force unlock).
pub(crate) fn keep(ctx: Context<'_>, hold: &Arc<Hold>, keeping: Keeping) {
    let Keeping { renew, renew_watchdog, channel, on_lost } = keeping;
    if hold.lease == Lease::Watchdog {
        let renewer = renew_watchdog.unwrap_or_else(|| Arc::clone(&renew));
        ctx.holds().register(Arc::clone(hold), on_lost.clone(), renewer);
    } else {
        ctx.holds().register_fixed(Arc::clone(hold), on_lost.clone(), Arc::clone(&renew));
    }
    ctx.holds().listen(hold, channel, on_lost, renew);
}
