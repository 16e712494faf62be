//! The lock kinds beyond RLock, one folder per kind.

pub(crate) mod lost_signals;
pub(crate) mod multi_lock;
pub(crate) mod node;
