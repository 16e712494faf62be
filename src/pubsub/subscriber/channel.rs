//! One subscribed channel of the pub/sub connection: which lock names
//! listen on it and how many waiters each has, whether the client's holds
//! listen too, and what its messages mean (Redisson's `0`/`1`, keyholder's
//! `2` pairing, a wake channel's turn, another kind's payload).

use std::sync::{Arc, Weak};
use std::time::Instant;

use super::Waiters;

/// One subscribed channel. Several lock names can share an unlock channel
/// (Redisson names `x` and `{x}` alike), so a message wakes the waiters of
/// every name listening on it.
pub(super) struct Channel {
    pub(super) kind: Kind,
    pub(super) listeners: Vec<Listener>,
    /// The client holds the lock: its [`Holders`] listen too.
    pub(super) held: bool,
    /// When the last waiter left, for a lingering channel.
    pub(super) idle_since: Option<Instant>,
    /// A `2` arrived: the `0` that follows it was published by a keyholder
    /// release that woke the next waiter itself (see `lua/lock/release.lua`).
    pub(super) paired: bool,
}

/// What a channel carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Redisson's unlock channel: `0`, `1`, and keyholder's `2`.
    Unlock,
    /// This client's wake channel for one lock: its turn has come.
    Wake,
    /// Another kind's channel: every message goes to the waiters, who
    /// read its payload.
    Any,
    /// Subscribed for a held lock alone, no waiter yet: the first waiter
    /// sets the kind.
    Held,
}

/// The waiters of one lock name on a channel.
pub(super) struct Listener {
    pub(super) name: Arc<str>,
    /// Whom to wake; weak, so a lingering channel keeps no lock state.
    pub(super) waiters: Weak<dyn Waiters>,
    pub(super) refs: u32,
}

impl Channel {
    pub(super) fn refs(&self) -> u32 {
        self.listeners.iter().map(|l| l.refs).sum()
    }

    /// Waiters or holders listen on it: it stays subscribed.
    pub(super) fn in_use(&self) -> bool {
        self.held || self.refs() > 0
    }

    pub(super) fn waiters(&self) -> impl Iterator<Item = Arc<dyn Waiters>> + '_ {
        self.listeners.iter().filter_map(|l| l.waiters.upgrade())
    }

    /// Whether a message with `payload` wakes this channel's waiters.
    ///
    /// A wake channel's message is this client's turn; any message on
    /// another kind's channel goes to its waiters (who read it). On an
    /// unlock channel
    /// `0` wakes one waiting thread and `1` all of them; behind the gate at
    /// most one thread of this client waits per lock, so both wake that
    /// thread, unless the `0` follows a `2`: a keyholder release sends that
    /// pair after waking the next queued client itself. Other payloads are
    /// not unlocks. An unlock channel does not say which of the names
    /// sharing it was unlocked: each name's waiter retries.
    pub(super) fn wakes(&mut self, payload: &str) -> bool {
        match self.kind {
            Kind::Unlock => {}
            Kind::Held => return false,
            Kind::Wake | Kind::Any => return true,
        }
        match payload {
            "2" => {
                self.paired = true;
                false
            }
            "0" => !std::mem::take(&mut self.paired),
            "1" => {
                self.paired = false;
                true
            }
            _ => false,
        }
    }
}
