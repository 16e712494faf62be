//! The hold and renewal layer: what a client knows of the locks and permits
//! its threads hold, and the watchdog thread that keeps them alive.
//!
//! - [`hold`]: one hold: owner, lease, local deadline, guards, fencing
//!   token, and the lost signal (the first reason wins).
//! - [`renew`]: the [`renew::Renew`] trait: how a kind renews its holds in
//!   Redis. A kind registers each hold with its renewer; the watchdog
//!   batches holds that share a renewer and a node into one call.
//! - [`hash_kinds`]: which kind (Lock, SpinLock, FairLock: one hash layout
//!   in Redis) holds a name for the calling thread, so that one owner never
//!   takes a name as two kinds.
//! - [`watchdog`]: the registry and the thread: renews every third of the
//!   watchdog timeout and verifies every hold after a reconnect.
//! - [`deadlines`]: the thread that marks a hold lost the moment its lease
//!   runs out unrenewed, with no I/O, so a renewal stuck on a hung server
//!   never delays the news.
//! - [`foreign`]: arms a removal alarm on the key of each held lock (and
//!   listens on its unlock channel), and checks a hold as soon as its key
//!   is invalidated or its channel has a message: a holder hears of a
//!   force unlock, a `DEL` or an expiry elsewhere within about a round
//!   trip, not at its next renewal.
//!
//! Apart from `hash_kinds`, nothing here knows which kind of lock a hold
//! belongs to.

pub(crate) mod deadlines;
pub(crate) mod foreign;
pub(crate) mod hash_kinds;
pub(crate) mod hold;
pub(crate) mod renew;
pub(crate) mod watchdog;
