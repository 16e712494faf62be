//! Releasing a hold: the last guard's release, a nested one, or a hand-off.
//!
//! A release of a thread's last hold runs `release.lua` unlatched: once the
//! owner's field is gone a retry releases nothing, so a lost reply is simply
//! retried. A nested release (other holds remain) and a hand-off
//! (`handoff.lua`, the lock passed straight to a queued thread of this
//! client) carry an unlock latch, so their retry returns the first outcome
//! instead of releasing twice. Whatever Redis answers, the client's local
//! state is cleared: renewal stops and the gate passes on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Inner;
use crate::error::{Error, LostReason, Result};
use crate::holds::hold::{Acquisition, Hold};
use crate::holds::renew::Renew;
use crate::kinds::latch::Latch;
use crate::kinds::lock::renewal::HashRenewal;
use crate::kinds::lock::scripts::{self, Handoff, HandoffArgs, Release, ReleaseArgs, Turns};
use crate::lease::Lease;
use crate::observe;
use crate::store::lanes::Session;
use crate::wait::entry::{Entry, Successor};

impl Inner {
    /// Releases one of several holds of `thread` (owner id `owner`) on
    /// `entry`'s lock, latched and retried once.
    fn release_nested(&self, entry: &Entry, thread: u64, owner: &str, lease_ms: u64) -> Result<Release> {
        self.run_latched(&entry.keys.name, thread, true, |conn, latch| {
            let outcome = scripts::release(
                &self.scripts,
                conn,
                &self.release_args(entry, owner, lease_ms, Some(latch)),
            )?;
            self.check_replicated(&entry.keys.name, conn.replicated()).map(|()| outcome)
        })
    }

    /// Releases the last hold of `owner` on `entry`'s lock. This needs no
    /// latch: once the owner's field is gone a retry releases nothing, so it
    /// is retried once, unlatched, if the first reply was lost. Returns the
    /// outcome and whether it is the retry's (whose `NotOwner` most likely
    /// means the first attempt released the lock).
    fn release_last(&self, entry: &Entry, owner: &str, lease_ms: u64) -> (Result<Release>, bool) {
        let args = self.release_args(entry, owner, lease_ms, None);
        let release = |conn: &mut Session<'_>| {
            let outcome = scripts::release(&self.scripts, conn, &args)?;
            self.check_replicated(&entry.keys.name, conn.replicated()).map(|()| outcome)
        };
        match self.with_conn(&entry.keys.name, release) {
            Err(e) if e.is_transport() => (self.with_conn(&entry.keys.name, release), true),
            outcome => (outcome, false),
        }
    }

    /// One unlatched release attempt, to give back what an acquire whose
    /// reply was lost may have taken.
    pub(crate) fn release_orphan(&self, entry: &Entry, owner: &str, lease_ms: u64) -> Result<Release> {
        let args = self.release_args(entry, owner, lease_ms, None);
        self.with_live_conn(&entry.keys.name, |conn| scripts::release(&self.scripts, conn, &args))
    }

    /// What `release.lua` needs to release one hold of `owner` on `entry`'s
    /// lock.
    fn release_args<'a>(
        &'a self,
        entry: &'a Entry,
        owner: &'a str,
        lease_ms: u64,
        latch: Option<Latch<'a>>,
    ) -> ReleaseArgs<'a> {
        ReleaseArgs {
            name: &entry.keys.name,
            channel: &entry.keys.channel,
            turns: Turns::of(&entry.keys, &self.id),
            lease_ms,
            owner,
            latch,
            listening: self.subscribers.listening_for(&entry.keys.channel),
        }
    }

    /// A release's replica acknowledgement (`None`: none asked for): an error
    /// when the client requires it, a warning otherwise. The release itself
    /// happened on the primary either way.
    fn check_replicated(&self, name: &str, replicated: Option<bool>) -> Result<()> {
        if replicated != Some(false) {
            return Ok(());
        }
        if self.config.replica_acks_required {
            return Err(Error::replica_acks(name));
        }
        log::warn!("keyholder: lock '{name}' released, but not acknowledged by the replicas");
        Ok(())
    }

    /// Releases one guard's share of `hold`, in a `keyholder.release` span.
    pub(crate) fn release(&self, entry: &Arc<Entry>, hold: &Arc<Hold>) -> Result<()> {
        observe::release(&hold.name, || self.release_guard(entry, hold))
    }

    /// Releases one guard's share of `hold`.
    fn release_guard(&self, entry: &Arc<Entry>, hold: &Arc<Hold>) -> Result<()> {
        if let Some(reason) = hold.lost_reason()
            && entry.has_newer_hold(hold.thread, hold.id)
        {
            // The thread locked again after this hold was lost. Its owner id
            // is the same, and the count in Redis is the new hold's (a new
            // hold resets it), so this release must not touch Redis.
            if hold.drop_guard() == 0 {
                self.finish(entry, hold);
            }
            return Err(Error::lock_lost(&hold.name, reason));
        }
        if hold.guards() == 1 {
            hold.start_release();
        }
        if hold.guards() == 1
            && hold.token().is_none()
            && let Some(successor) = entry.reserve_successor(hold.id, self.config.fairness_window)
        {
            return self.hand_over(entry, hold, successor);
        }
        let sent = Instant::now();
        let (outcome, retried) = if hold.guards() > 1 {
            (self.release_nested(entry, hold.thread, &hold.owner, hold.lease_ms), false)
        } else {
            self.release_last(entry, &hold.owner, hold.lease_ms)
        };
        let guards_left = hold.drop_guard();
        match outcome {
            Ok(Release::StillHeld) => {
                hold.set_deadline(sent + Duration::from_millis(hold.lease_ms));
                if guards_left == 0 {
                    // Redis counts more holds than this client has guards (an
                    // acquire whose reply was lost): stop renewing so the
                    // orphaned count expires with the lease.
                    self.finish(entry, hold);
                }
                Ok(())
            }
            Ok(Release::Released) => {
                if guards_left > 0 {
                    hold.mark_lost(LostReason::ReleaseFoundGone);
                }
                self.finish(entry, hold);
                Ok(())
            }
            // The first attempt's reply was lost, and it did release.
            Ok(Release::NotOwner) if retried && hold.lost_reason().is_none() => {
                self.finish(entry, hold);
                Ok(())
            }
            Ok(Release::NotOwner) => {
                let error = Self::not_owner(hold);
                if guards_left == 0 {
                    self.finish(entry, hold);
                }
                Err(error)
            }
            Err(e) => {
                if guards_left == 0 {
                    // Clear local state whatever Redis did: the lock, if
                    // still there, expires with its lease.
                    self.finish(entry, hold);
                }
                Err(e)
            }
        }
    }

    /// Releases the last guard of `hold` by handing the lock to `successor`,
    /// a queued thread of this client, in one script call. If another
    /// client was woken for its turn the script releases instead, and the
    /// successor contends in Redis like any waiter.
    fn hand_over(&self, entry: &Arc<Entry>, hold: &Arc<Hold>, successor: Successor) -> Result<()> {
        let sent = Instant::now();
        let outcome = self.run_latched(&entry.keys.name, hold.thread, true, |conn, latch| {
            let args = HandoffArgs {
                name: &entry.keys.name,
                channel: &entry.keys.channel,
                turns: Turns::of(&entry.keys, &self.id),
                lease_ms: successor.lease_ms,
                from: &hold.owner,
                to: &successor.owner,
                latch,
                listening: self.subscribers.listening_for(&entry.keys.channel),
            };
            let outcome = scripts::handoff(&self.scripts, conn, &args)?;
            Ok((outcome, conn.replicated()))
        });
        hold.drop_guard();
        let name = &entry.keys.name;
        let result = match outcome {
            Ok((Handoff::HandedOver, Some(false))) if self.config.replica_acks_required => {
                // Not on the replicas, and the successor must not be handed
                // a hold its client refuses. It takes the gate instead and
                // acquires afresh (the script finds its owner's count and
                // sets it to 1): that acquisition's own WAIT decides, and an
                // unacknowledged one is given back, as any.
                entry.finish_handoff(None);
                Err(Error::replica_acks(name))
            }
            Ok((Handoff::HandedOver, replicated)) => {
                let Successor { thread, owner, lease, lease_ms, .. } = successor;
                let acquisition = Acquisition { owner, thread, lease, lease_ms, token: None, sent };
                let handed = Arc::new(Hold::new(self.next_hold_id(), Arc::clone(name), acquisition));
                if replicated == Some(false) {
                    // The hand-off is the new hold's acquisition: its
                    // acknowledgement is the hold's.
                    log::warn!("keyholder: lock '{name}' handed over, but not acknowledged by the replicas");
                    handed.mark_unreplicated();
                }
                let renewal = HashRenewal::of(self);
                if lease == Lease::Watchdog {
                    self.watchdog.register(
                        Arc::clone(&handed),
                        Some(Arc::clone(entry) as _),
                        Arc::clone(&renewal),
                    );
                }
                self.listen_for_unlocks(&handed, entry, renewal);
                entry.finish_handoff(Some(handed));
                Ok(())
            }
            Ok((Handoff::Released | Handoff::StillHeld, replicated)) => {
                entry.finish_handoff(None);
                self.check_replicated(name, replicated)
            }
            Ok((Handoff::Declined, _)) => {
                // Redisson waiters listen: the lock goes through release.lua,
                // which gives them their turns, and then the successor
                // contends in Redis. Not before: while this hold lives, the
                // successor must not act on the gate (it gives back a grant
                // that arrived late for this hold's owner, see `Lock::contend`).
                let released = match self.release_last(entry, &hold.owner, hold.lease_ms) {
                    (Ok(Release::Released | Release::StillHeld), _) => Ok(()),
                    (Ok(Release::NotOwner), true) if hold.lost_reason().is_none() => Ok(()),
                    (Ok(Release::NotOwner), _) => Err(Self::not_owner(hold)),
                    (Err(e), _) => Err(e),
                };
                entry.finish_handoff(None);
                released
            }
            Ok((Handoff::NotOwner, _)) => {
                entry.finish_handoff(None);
                Err(Self::not_owner(hold))
            }
            Err(e) => {
                entry.finish_handoff(None);
                Err(e)
            }
        };
        self.finish(entry, hold);
        result
    }

    /// Listens for unlocks of `hold`, a new hold of `entry`'s lock, on its
    /// unlock channel (see `holds/foreign.rs`), checked with `renewal` (the
    /// hash layout's); a loss found there wakes the lock's local waiters.
    pub(crate) fn listen_for_unlocks(&self, hold: &Arc<Hold>, entry: &Arc<Entry>, renewal: Arc<dyn Renew>) {
        let channel = Some(Arc::clone(&entry.keys.channel));
        self.foreign.add(hold, channel, Some(Arc::clone(entry) as _), renewal);
    }

    /// The error for a release that found `hold` gone; records the loss.
    fn not_owner(hold: &Hold) -> Error {
        let known = hold.lost_reason();
        hold.mark_lost(LostReason::ReleaseFoundGone);
        match known {
            Some(reason) => Error::lock_lost(&hold.name, reason),
            None => Error::not_owner(&hold.name),
        }
    }

    /// Ends a hold locally: no more renewal, the gate passes on.
    fn finish(&self, entry: &Entry, hold: &Arc<Hold>) {
        if hold.finish() {
            observe::hold_ended(&hold.name, hold.acquired_at());
            self.forget_hold(hold.id);
            entry.release_gate(hold.id);
        }
    }
}
