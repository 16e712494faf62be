//! Unlock latches: how a release that must not run twice survives a lost
//! reply, for every kind whose release decrements a count.
//!
//! A release that only deletes the owner's last hold is safe to repeat: once
//! the field is gone a second run releases nothing. A release that
//! decrements (a nested hold, a read hold, a hand-off) is not: a reply lost
//! on the way back would, if simply resent, release twice. The plain lock's
//! nested release reads the owner's count instead, as a re-entry does
//! (`kinds/lock/release.rs`, ADR 54); every other such release carries a
//! latch, Redisson's `redisson_unlock_latch:{<name>}:<hex>`
//! key per owner: the script records its outcome there (with the request's
//! number, keyholder's addition), and the one retry, on a fresh connection,
//! returns that outcome instead of running again. A failure to connect means
//! the script never ran, so it is not retried. The retry is the client's
//! call policy: `Calls::run_latched` (`client/context.rs`) runs it, with a
//! [`Latch`] for the script.

pub(crate) use crate::client::Latch;
