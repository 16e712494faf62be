//! The waiting layer: how threads of one client wait for a lock or a
//! permit without polling, on top of the pub/sub layer.
//!
//! - [`channel`]: the generic wait every kind can use. One per channel and
//!   client, shared by that client's waiting threads: one subscription,
//!   however many threads wait; a message (or a replaced pub/sub
//!   connection) wakes them to try again; each wait is bounded by the
//!   caller (the holder's lease, the deadline).
//! - [`entry`]: the reentrant lock's richer gate: a FIFO of the client's
//!   threads, hand-off between them, and the wake-up slot for turns granted
//!   by another client's release. It reaches Redis only through the
//!   `GateRedis` seam, so it is tested without it.
//! - [`owed`]: the wakes a barging release owes the queue's front client
//!   once its own client's head start ends, and the thread that pays them.
//! - [`patience`]: how long one call waits, `_for` derived from `_until`
//!   once for every kind.
//! - [`outage`]: what every waiting loop does when Redis is unreachable:
//!   keep waiting, on its own wake-up with a bounded back-off, until its
//!   deadline or the client's outage budget, then return the error.

pub(crate) mod channel;
pub(crate) mod entry;
pub(crate) mod outage;
pub(crate) mod owed;
pub(crate) mod patience;
