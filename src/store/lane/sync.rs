//! The lane's synchronisation primitives: `parking_lot`'s lock and
//! condition variable and `std`'s atomics and `Arc`, or, in the `loom`
//! model's build (`cfg(all(test, loom))`), loom's, behind the same
//! `parking_lot`-shaped API.
//!
//! Why: a model checker explores the interleavings of the hand-over of the
//! reading only if every lock, wake-up and atomic the lane uses is one it
//! controls. In every other build these are plain re-exports: nothing
//! stands between the lane and `parking_lot`.
//!
//! Under loom a wait never times out (loom does not model time): the model
//! runs calls whose deadline is out of reach.

#[cfg(not(all(test, loom)))]
pub(crate) use parking_lot::{Condvar, Mutex};
#[cfg(not(all(test, loom)))]
pub(crate) use std::sync::Arc;
#[cfg(not(all(test, loom)))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};

#[cfg(all(test, loom))]
pub(crate) use loom::sync::Arc;
#[cfg(all(test, loom))]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
#[cfg(all(test, loom))]
pub(crate) use modelled::{Condvar, Mutex};

/// loom's `std`-shaped lock and condition variable, shaped as
/// `parking_lot`'s: `lock()` without poisoning, and a wait that takes the
/// guard by reference.
#[cfg(all(test, loom))]
mod modelled {
    use std::ops::{Deref, DerefMut};
    use std::sync::PoisonError;
    use std::time::Instant;

    #[derive(Debug)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    /// The guard, put down for the length of a wait (loom's wait takes it
    /// by value).
    pub(crate) struct MutexGuard<'a, T>(Option<loom::sync::MutexGuard<'a, T>>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Mutex<T> {
            Mutex(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            MutexGuard(Some(self.0.lock().unwrap_or_else(PoisonError::into_inner)))
        }
    }

    impl<T> Deref for MutexGuard<'_, T> {
        type Target = T;

        fn deref(&self) -> &T {
            match &self.0 {
                Some(guard) => guard,
                None => unreachable!("a guard is put down only inside a wait"),
            }
        }
    }

    impl<T> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            match &mut self.0 {
                Some(guard) => guard,
                None => unreachable!("a guard is put down only inside a wait"),
            }
        }
    }

    #[derive(Debug)]
    pub(crate) struct Condvar(loom::sync::Condvar);

    /// Whether a wait ended at its deadline: never, under loom.
    pub(crate) struct WaitTimeoutResult;

    impl WaitTimeoutResult {
        pub(crate) fn timed_out(&self) -> bool {
            false
        }
    }

    impl Condvar {
        pub(crate) fn new() -> Condvar {
            Condvar(loom::sync::Condvar::new())
        }

        pub(crate) fn notify_one(&self) {
            self.0.notify_one();
        }

        /// Waits for a notification; the deadline is not modelled.
        pub(crate) fn wait_until<T>(
            &self,
            guard: &mut MutexGuard<'_, T>,
            _deadline: Instant,
        ) -> WaitTimeoutResult {
            if let Some(held) = guard.0.take() {
                guard.0 = Some(self.0.wait(held).unwrap_or_else(PoisonError::into_inner));
            }
            WaitTimeoutResult
        }
    }
}
