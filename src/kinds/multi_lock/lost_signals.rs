//! The lost-hold signals of a hold made of several locks, read as one.
//!
//! A MultiLock or RedLock guard owns one [`LockGuard`] per component, each
//! with its own lost signal. Merging them into one channel would need a
//! thread per guard; instead this selects over the components' channels
//! when asked, which costs nothing while nobody asks.

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select};

use crate::error::LostReason;
use crate::kinds::lock::LockGuard;

const YEAR: Duration = Duration::from_secs(86_400 * 365);

/// The components' lost-hold signals of a
/// [`MultiLockGuard`](crate::MultiLockGuard) or
/// `RedLockGuard`, read as one: each receive reports
/// the next component known lost, as its index in the guard's components and
/// the [`LostReason`]. Each component is reported at most once.
#[derive(Debug)]
pub struct LostSignals {
    receivers: Vec<(usize, Receiver<LostReason>)>,
}

impl LostSignals {
    pub(crate) fn of<'a>(guards: impl IntoIterator<Item = &'a LockGuard>) -> LostSignals {
        LostSignals { receivers: guards.into_iter().map(LockGuard::lost_signal).enumerate().collect() }
    }

    /// The next component known lost, without waiting; `None` if no loss
    /// is known (yet).
    pub fn try_recv(&mut self) -> Option<(usize, LostReason)> {
        self.recv_deadline(Instant::now())
    }

    /// The next component known lost, waiting at most `wait`.
    pub fn recv_timeout(&mut self, wait: Duration) -> Option<(usize, LostReason)> {
        // A wait too long for the clock waits a year at a time.
        let now = Instant::now();
        let deadline = now.checked_add(wait.min(YEAR)).unwrap_or(now);
        self.recv_deadline(deadline)
    }

    /// The next component known lost, waiting until `deadline` at the
    /// latest.
    pub fn recv_deadline(&mut self, deadline: Instant) -> Option<(usize, LostReason)> {
        loop {
            if self.receivers.is_empty() {
                return None;
            }
            let mut select = Select::new();
            for (_, receiver) in &self.receivers {
                select.recv(receiver);
            }
            let operation = if Instant::now() >= deadline {
                select.try_select().ok()?
            } else {
                select.select_deadline(deadline).ok()?
            };
            let slot = operation.index();
            let (index, receiver) = self.receivers.get(slot)?;
            let (index, received) = (*index, operation.recv(receiver));
            match received {
                Ok(reason) => {
                    self.receivers.remove(slot);
                    return Some((index, reason));
                }
                // That component was released (or its client dropped the
                // sender): it will report nothing.
                Err(_) => {
                    self.receivers.remove(slot);
                }
            }
        }
    }
}
