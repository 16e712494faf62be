//! What a kind of lock is to the family: the sealed core it implements,
//! the public markers, and what one acquire call hands the core.

use std::time::Instant;

use crate::client::Context;
use crate::lease::Lease;
use crate::observe;

pub(crate) mod sealed {
    //! The per-kind core: what a kind writes, and nobody outside the crate
    //! can implement.

    use std::sync::Arc;

    use super::Call;
    use crate::client::{Client, Context};
    use crate::error::Result;
    use crate::holds::hold::Hold;
    use crate::holds::renew::OnLost;

    /// What one kind of lock is: how it acquires and releases in Redis.
    pub(crate) trait Core: Clone + Send + Sync + 'static {
        /// The kind in words, for logs and errors ("fair lock").
        const NOUN: &'static str;
        /// The public names of the handle and the guard, for `Debug`.
        const HANDLE: &'static str;
        const GUARD: &'static str;
        /// What a guard keeps besides its hold to release it (the lock's
        /// entry, the keys its release script needs). `Send + Sync`, so
        /// that a token's guard is, for every kind, generic code included.
        type Keep: Send + Sync;

        /// The client the handle acquires through.
        fn client(&self) -> &Client;
        /// The lock name (also its Redis key).
        fn name(&self) -> &Arc<str>;
        /// Re-enters the calling thread's live hold or takes a new one:
        /// `None` when the deadline passed first.
        fn acquire(&self, call: Call<'_>) -> Result<Option<(Arc<Hold>, Self::Keep)>>;
        /// Releases one guard's share of `hold`.
        fn release(ctx: Context<'_>, keep: &Self::Keep, hold: &Arc<Hold>) -> Result<()>;
        /// Whom to tell locally when a hold is lost (the lock's gate).
        fn on_lost(_keep: &Self::Keep) -> Option<Arc<dyn OnLost>> {
            None
        }
        /// True if any owner holds the lock (in this kind's sense).
        fn is_locked(&self) -> Result<bool>;
        /// How many times the calling thread holds the lock, in Redis.
        fn hold_count(&self) -> Result<u32>;
        /// Deletes the lock whoever holds it; whether there was one.
        fn force_unlock(&self) -> Result<bool>;
        /// A string key at the name counts as a legacy holder.
        fn legacy(&self) -> bool {
            false
        }
        /// The kind's own fields, for the handle's `Debug`.
        fn debug_fields(&self, _f: &mut std::fmt::DebugStruct<'_, '_>) {}
    }

    /// A kind whose holds can be owned by an [`OwnerToken`](crate::OwnerToken).
    pub(crate) trait Tokens: Core {
        /// Takes on the live hold of `owner` (a token's owner id) found in
        /// Redis, renewing its lease to `lease_ms` once: a guard of one of
        /// its counts; `NotOwner` when the token holds nothing there.
        fn resume(
            &self,
            ctx: Context<'_>,
            owner: &str,
            lease: crate::lease::Lease,
            lease_ms: u64,
        ) -> Result<(Arc<Hold>, Self::Keep)>;
    }

    /// A reentrant kind that has a non-reentrant twin
    /// ([`NonReentrant`](crate::kind::NonReentrant)): the same layout and
    /// scripts, a second hold refused.
    pub(crate) trait Reenters: Core {
        /// The twin's `NOUN`, `HANDLE` and `GUARD`.
        const ONCE: [&'static str; 3];
        /// The live hold of `thread` (a thread id) at this client, which a
        /// second acquire would re-enter.
        fn live_hold(&self, ctx: Context<'_>, thread: u64) -> Option<Arc<Hold>>;
    }

    /// A kind whose fresh acquisitions can mint fencing tokens.
    pub(crate) trait Fences: Core {
        /// The same handle, minting tokens.
        fn fence(&self) -> Self;
        fn is_fenced(&self) -> bool;
    }
}

/// A kind of lock: the parameter of [`Handle`](crate::Handle) and [`Guard`](crate::Guard).
///
/// Sealed: the kinds are keyholder's ([`Lock`](crate::Lock),
/// [`FairLock`](crate::FairLock), [`SpinLock`](crate::SpinLock),
/// [`ReadLock`](crate::ReadLock), [`WriteLock`](crate::WriteLock),
/// [`NonReentrantLock`](crate::NonReentrantLock),
/// [`NonReentrantFairLock`](crate::NonReentrantFairLock)), named in
/// [`kind`](crate::kind).
#[allow(private_bounds)]
pub trait Kind: sealed::Core {}

/// A kind whose handles can mint fencing tokens
/// ([`Handle::fenced`](crate::Handle::fenced)): the reentrant and fair locks and the write side
/// of a read-write lock, which share Redisson's counter
/// `redisson_lock_token:{<name>}`.
#[allow(private_bounds)]
pub trait Fenced: Kind + sealed::Fences {}

/// A kind whose holds can be owned by an [`OwnerToken`](crate::OwnerToken)
/// instead of a thread ([`Handle::lock_owned`](crate::Handle::lock_owned),
/// [`Handle::lock_with`](crate::Handle::lock_with),
/// [`Handle::resume`](crate::Handle::resume)): every lock-like kind, the
/// reentrant, spin and fair locks and both sides of a read-write lock.
#[allow(private_bounds)]
pub trait TokenOwned: Kind + sealed::Tokens {}

/// Who an acquire call acquires for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquirer {
    /// The calling thread.
    Thread,
    /// A token keyholder just minted: it holds nothing anywhere yet.
    MintedToken,
    /// A token the caller presented: it may hold the lock already,
    /// here or in another process.
    PresentedToken,
}

/// What one acquire call asked for, as a kind's core receives it.
pub(crate) struct Call<'a> {
    pub(crate) ctx: Context<'a>,
    /// Wait at most until then (`None`: as long as it takes).
    pub(crate) deadline: Option<Instant>,
    /// Wait at all (`false`: one attempt).
    pub(crate) block: bool,
    pub(crate) obs: &'a observe::Acquire<'a>,
    pub(crate) lease: Lease,
    /// The lease in milliseconds (the watchdog timeout for a watchdog lease).
    pub(crate) lease_ms: u64,
    /// The thread's id, or a token's local id (`OwnerToken::local_id`).
    pub(crate) thread: u64,
    /// `<client-uuid>:<thread-id>`, or the token's `<uuid>:<number>`.
    pub(crate) owner: String,
    pub(crate) acquirer: Acquirer,
}
