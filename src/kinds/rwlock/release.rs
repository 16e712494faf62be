//! Releasing a read or write hold: its mode's script with an unlock latch,
//! and once more with the same request id if the first reply was lost (the
//! latch makes the retry return the first outcome rather than release
//! twice). What the answer means for the hold is the family's
//! (`kinds/family/release.rs`).

use std::sync::Arc;

use crate::client::Context;
use crate::error::Result;
use crate::holds::hold::Hold;
use crate::kinds::family::reentry;
use crate::kinds::family::release as released;
use crate::kinds::rwlock::scripts::{self, Release, RwKeys};

/// Runs one release of `hold`, latched, retried once if the reply was lost.
fn release_in_redis(ctx: Context<'_>, keys: &RwKeys, hold: &Hold, write: bool) -> Result<Release> {
    let owner = reader_of(hold, write);
    ctx.calls().run_latched(&keys.name, hold.thread, true, |conn, latch| {
        if write {
            scripts::write_release(ctx.calls().scripts(), conn, keys, owner, hold.lease_ms, latch)
        } else {
            scripts::read_release(ctx.calls().scripts(), conn, keys, owner, latch)
        }
    })
}

/// The read owner id of a hold (a write hold's owner ends in `:write`).
fn reader_of(hold: &Hold, write: bool) -> &str {
    if write { hold.owner.strip_suffix(":write").unwrap_or(&hold.owner) } else { &hold.owner }
}

/// Releases one guard's share of `hold`, a hold of the side `noun`
/// (`write`: the write side).
pub(crate) fn release(
    ctx: Context<'_>,
    keys: &RwKeys,
    hold: &Arc<Hold>,
    write: bool,
    noun: &'static str,
) -> Result<()> {
    // The write script re-applies the lease.
    released::release_registered(ctx, noun, hold, write, |_| {
        (release_in_redis(ctx, keys, hold, write), false)
    })
}

/// Ends a hold locally: no more renewal, no more re-entry.
pub(crate) fn finish(ctx: Context<'_>, hold: &Hold) {
    released::end(ctx, hold, || reentry::forget(hold.id));
}
