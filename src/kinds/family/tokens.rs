//! Token-owned holds, for every lock-like kind that has them: the steps a
//! token's hold takes that a thread's does not, written once.
//!
//! A token is not a thread: its hold is not in the thread's registry
//! (`reentry.rs`), since its guard may be released on any thread, and not
//! in the thread-local record of the hash kinds. So a token presented with
//! no live hold in reach may hold the lock all the same (a hold taken,
//! resumed or re-entered elsewhere, in this process or another): one
//! re-entry in Redis ([`join`]) adds a count to its field if it is there,
//! as a hold of its own whose guard releases that count. [`resume`] takes
//! on the token's hold without adding a count: one renewal of its field,
//! which refuses a token that holds nothing. The reentrant lock keeps its
//! token holds at its gate as well (`kinds/lock.rs`); the other kinds use
//! these two steps alone.

use std::sync::Arc;
use std::time::Instant;

use crate::client::Context;
use crate::error::{Error, Result};
use crate::holds::hold::{Acquisition, Hold};
use crate::kinds::family::fresh::{self, Keeping};
use crate::kinds::family::reentry::Reentry;
use crate::kinds::lock::scripts;
use crate::lease::Lease;
use crate::owner::OwnerToken;
use crate::store::lanes::Session;

/// The hold a token's acquire call is about: the lock, the field in its
/// hash (the token's owner id, or the write side's `<token>:write`), and
/// the token's local id standing for the thread.
pub(crate) struct TokenHold<'a> {
    pub(crate) noun: &'static str,
    pub(crate) name: &'a Arc<str>,
    pub(crate) field: String,
    pub(crate) thread: u64,
    pub(crate) lease: Lease,
    pub(crate) lease_ms: u64,
}

impl<'a> TokenHold<'a> {
    /// The hold of the token whose owner id is `owner` on the lock `name`
    /// as `noun`, its field that id (a write hold replaces it).
    pub(crate) fn of(
        noun: &'static str,
        name: &'a Arc<str>,
        owner: &str,
        lease: Lease,
        lease_ms: u64,
    ) -> Self {
        let thread = OwnerToken::of_owner(owner).local_id();
        TokenHold { noun, name, field: owner.to_owned(), thread, lease, lease_ms }
    }

    /// The new hold, made and kept (renewed, listened for) as `keeping` says.
    fn adopt(
        self,
        ctx: Context<'_>,
        sent: Instant,
        token: Option<u64>,
        replicated: Option<bool>,
        keeping: Keeping,
    ) -> Arc<Hold> {
        let TokenHold { noun, name, field, thread, lease, lease_ms } = self;
        let acquisition = Acquisition { owner: field, thread, lease, lease_ms, token, sent };
        let hold = fresh::hold(ctx, noun, name, acquisition, replicated);
        fresh::keep(ctx, &hold, keeping);
        hold
    }
}

/// Adds a count to the token's hold in Redis, if it has one: `attempt` is
/// the kind's re-entry script call (sent once: it increments a count);
/// `None` when the token holds nothing there (the caller then takes a new
/// hold). The hold has no fencing token of its own: it has one where it
/// was taken, and a newer one would fence that holder out while it holds.
pub(crate) fn join(
    ctx: Context<'_>,
    held: TokenHold<'_>,
    attempt: impl FnOnce() -> Result<Reentry>,
    keeping: impl FnOnce() -> Keeping,
) -> Result<Option<Arc<Hold>>> {
    let sent = Instant::now();
    match attempt()? {
        Reentry::Acquired { replicated, .. } => Ok(Some(held.adopt(ctx, sent, None, replicated, keeping()))),
        Reentry::Gone => Ok(None),
    }
}

/// Takes on the token's hold of a lock on Redisson's RLock hash (any kind
/// whose holder is one field with a count and the key's PTTL as lease):
/// one `renew.lua`, which renews the lease to `lease_ms` if, and only if,
/// the field is there; `NotOwner` otherwise.
pub(crate) fn resume(ctx: Context<'_>, held: TokenHold<'_>, keeping: Keeping) -> Result<Arc<Hold>> {
    let (name, field, lease_ms) = (Arc::clone(held.name), held.field.clone(), held.lease_ms);
    let pair = [(&*name, field.as_str())];
    resume_by(ctx, held, keeping, |conn| {
        let renewed = scripts::renew(ctx.calls().scripts(), conn, &pair, lease_ms, true)?;
        Ok(renewed.first() == Some(&true))
    })
}

/// Takes on the token's hold with `renew`, the kind's renewal of it (one
/// script call that renews only a field that is there, and says whether it
/// was); `NotOwner` when it was not.
pub(crate) fn resume_by(
    ctx: Context<'_>,
    held: TokenHold<'_>,
    keeping: Keeping,
    renew: impl Fn(&mut Session<'_>) -> Result<bool>,
) -> Result<Arc<Hold>> {
    let sent = Instant::now();
    let (renewed, replicated) = ctx.calls().with_live_conn(held.name, |conn| {
        let renewed = renew(conn)?;
        Ok((renewed, conn.replicated()))
    })?;
    if !renewed {
        return Err(Error::not_owner(held.name));
    }
    Ok(held.adopt(ctx, sent, None, replicated, keeping))
}
