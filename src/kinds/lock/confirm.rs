//! Confirming a hold that another connection's write made: a grant (another
//! client's release gave this thread the lock) or, later, an acquisition
//! whose reply arrived after the client moved to a new primary.
//!
//! With replica acknowledgement on, the write that made a grant is
//! acknowledged by the `WAIT` of the connection that made it, the
//! releaser's; the new holder never sees that answer. So it confirms the
//! hold itself (`lua/lock/confirm.lua`): a write behind the grant, with its
//! own `WAIT`. The replication stream is ordered, so an acknowledged
//! confirmation acknowledges the grant too; an unacknowledged one is what a
//! fresh acquisition without the replicas is, and is treated the same way
//! (a flag on the guard, or, when required, refused and given back).

use crate::client::Context;
use crate::error::Result;
use crate::kinds::lock::scripts::{self, Confirm};

/// Confirms that `owner` holds `name` (a lock of the hash layout) on the
/// current primary, with a write the replicas acknowledge when the client
/// asks for acknowledgements. Safe to repeat, so a dead connection is
/// retried on a new one.
pub(crate) fn hold(ctx: Context<'_>, name: &str, owner: &str) -> Result<Confirm> {
    ctx.calls().with_live_conn(name, |conn| scripts::confirm(ctx.calls().scripts(), conn, name, owner))
}

/// How a lock granted to `owner` by another connection's release stands:
/// without replica acknowledgement asked for, held as granted (no I/O);
/// with it, as [`hold`] finds.
pub(crate) fn grant(ctx: Context<'_>, name: &str, owner: &str) -> Result<Confirm> {
    if !ctx.calls().scripts().acks() {
        return Ok(Confirm::Held { replicated: None });
    }
    hold(ctx, name, owner)
}
