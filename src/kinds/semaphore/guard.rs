//! The semaphore's guard: permits given back on drop.

use std::sync::Arc;

use crate::client::Inner;
use crate::error::Result;
use crate::kinds::semaphore::{handover, scripts};

/// Permits taken from a [`Semaphore`](crate::Semaphore), given back when
/// dropped (one script call, bounded by the client's timeouts; an error is
/// logged, never a panic). [`release`](SemaphorePermits::release) does the
/// same and returns the outcome.
///
/// Permits belong to no thread, so the guard may move between threads.
/// Write `let _permits = sem.acquire(1)?;`, not `let _ = ...`, which would
/// give them back at once.
#[must_use = "if unused the permits are given back at once"]
#[clippy::has_significant_drop]
pub struct SemaphorePermits {
    client: Arc<Inner>,
    name: Arc<str>,
    channel: Arc<str>,
    permits: u32,
    done: bool,
}

impl std::fmt::Debug for SemaphorePermits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemaphorePermits").field("name", &self.name).field("permits", &self.permits).finish()
    }
}

impl SemaphorePermits {
    pub(crate) fn new(client: Arc<Inner>, name: Arc<str>, channel: Arc<str>, permits: u32) -> Self {
        SemaphorePermits { client, name, channel, permits, done: false }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many permits this guard holds.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Gives the permits back now, like dropping the guard, and returns the
    /// semaphore's new count.
    ///
    /// # Errors
    ///
    /// A Redis or connection failure: the permits may then not have been
    /// given back (a plain semaphore has no expiry; see
    /// [`Semaphore::release`](crate::Semaphore::release) to give them back by hand).
    pub fn release(mut self) -> Result<i64> {
        self.done = true;
        self.give_back()
    }

    /// One release script; a release that others heard is noted for this
    /// thread's next acquire (`handover.rs`).
    fn give_back(&self) -> Result<i64> {
        let ctx = self.client.context();
        let released = scripts::release(ctx.calls(), &self.name, &self.channel, self.permits)?;
        handover::released(ctx, &self.name, &self.channel, released);
        Ok(released.count)
    }

    /// Keeps the permits taken: the guard is consumed without giving them
    /// back (as `tokio`'s `SemaphorePermit::forget`). Returns how many.
    pub fn forget(mut self) -> u32 {
        self.done = true;
        self.permits
    }
}

impl Drop for SemaphorePermits {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Err(e) = self.give_back() {
            log::warn!(
                "keyholder: giving back {} permits of semaphore '{}' on drop failed: {e}",
                self.permits,
                self.name
            );
        }
    }
}
