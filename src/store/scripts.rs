//! What every kind's scripts share: the client's script settings (whether
//! writes ask the replicas for acknowledgement, which command publishes)
//! and the error for a reply outside a script's contract. Each kind keeps
//! its scripts and their typed replies in its own module
//! (`kinds/<kind>/scripts.rs`, sources under `lua/<kind>/`).

use redis::Value;

use crate::error::Error;

/// One client's script settings, shared by every kind.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scripts {
    /// Writing calls (acquire, release, renewal) ask for the replicas'
    /// acknowledgement.
    acks: bool,
    /// The command messages go out with: `PUBLISH`, or `SPUBLISH` on a
    /// Redis Cluster with shard channels.
    publish: &'static str,
}

/// The unlock message that wakes one waiter (Redisson's `UNLOCK_MESSAGE`).
pub(crate) const UNLOCK_MESSAGE: &str = "0";

/// The commands scripts publish with: to every subscriber, or (Redis
/// Cluster, Redis 7+) to the subscribers of the channel's shard, as
/// Redisson's `shardedSubscriptionMode` does.
const PUBLISH: &str = "publish";
const SPUBLISH: &str = "spublish";

impl Scripts {
    /// With `acks`, writes ask for the replicas' acknowledgement; with
    /// `sharded`, messages go out on shard channels.
    pub(crate) fn new(acks: bool, sharded: bool) -> Self {
        Scripts { acks, publish: if sharded { SPUBLISH } else { PUBLISH } }
    }

    /// Whether writing calls ask for the replicas' acknowledgement (pass it
    /// to `Call::invoke`).
    pub(crate) fn acks(&self) -> bool {
        self.acks
    }

    /// The publish command, as an argument for a script that publishes.
    pub(crate) fn publish(&self) -> &'static str {
        self.publish
    }

    /// True when messages go out on shard channels (`SPUBLISH`).
    pub(crate) fn sharded(&self) -> bool {
        self.publish == SPUBLISH
    }
}

/// A reply outside `script`'s contract.
pub(crate) fn unexpected(script: &'static str, reply: &Value) -> Error {
    Error::unexpected_reply(script, format!("{reply:?}"))
}
