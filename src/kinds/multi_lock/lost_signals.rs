//! The lost-hold signals of a hold made of several locks, read as one.
//!
//! A MultiLock or RedLock guard owns one guard per component, each
//! with its own lost signal. Merging them into one channel would need a
//! thread per guard; instead this selects over the components' channels
//! when asked, which costs nothing while nobody asks. A MultiLock is lost
//! with its first component; a RedLock only once so many components are
//! lost that fewer than a quorum remain, or its validity time runs out.

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select};

use crate::error::LostReason;

const YEAR: Duration = Duration::from_secs(86_400 * 365);

/// What [`LostSignals`] reports: which component was lost, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lost {
    /// The component whose loss lost the whole: its index among the
    /// guard's components. `None` when a RedLock's validity time ran out.
    pub component: Option<usize>,
    /// Why it was lost.
    pub reason: LostReason,
}

/// The lost-hold signals of a [`MultiLockGuard`](crate::MultiLockGuard)
/// or [`RedLockGuard`](crate::RedLockGuard), read as one. A receive
/// returns [`Lost`] once the hold as a whole is known lost: for a
/// MultiLock, at the first component lost; for a RedLock, at the loss that
/// leaves fewer than a quorum of components, or at the end of its validity
/// time. It reports once.
#[derive(Debug)]
pub struct LostSignals {
    receivers: Vec<(usize, Receiver<LostReason>)>,
    /// Component losses to swallow before the whole is lost.
    tolerate: usize,
    /// When the whole is lost whatever the components say.
    expires: Option<Instant>,
    reported: bool,
}

impl LostSignals {
    /// The whole is lost with its first component.
    pub(crate) fn of(signals: impl IntoIterator<Item = Receiver<LostReason>>) -> LostSignals {
        LostSignals::tolerating(signals, 0, None)
    }

    /// The whole is lost at the `tolerate + 1`-th component lost, or at
    /// `expires`.
    pub(crate) fn tolerating(
        signals: impl IntoIterator<Item = Receiver<LostReason>>,
        tolerate: usize,
        expires: Option<Instant>,
    ) -> LostSignals {
        let receivers = signals.into_iter().enumerate().collect();
        LostSignals { receivers, tolerate, expires, reported: false }
    }

    /// The loss of the whole, if it is known; never waits.
    pub fn try_recv(&mut self) -> Option<Lost> {
        self.recv_deadline(Instant::now())
    }

    /// The loss of the whole, waiting at most `wait` for it.
    pub fn recv_timeout(&mut self, wait: Duration) -> Option<Lost> {
        // A wait too long for the clock waits a year.
        let now = Instant::now();
        let deadline = now.checked_add(wait.min(YEAR)).unwrap_or(now);
        self.recv_deadline(deadline)
    }

    /// The loss of the whole, waiting until `deadline` at the latest.
    pub fn recv_deadline(&mut self, deadline: Instant) -> Option<Lost> {
        if self.reported {
            return None;
        }
        loop {
            let until = self.expires.map_or(deadline, |e| e.min(deadline));
            let lost = self.next_component(until);
            match lost {
                Some(lost) if self.tolerate == 0 => {
                    self.reported = true;
                    return Some(lost);
                }
                Some(_) => self.tolerate -= 1,
                None => {
                    if let Some(expires) = self.expires
                        && Instant::now() >= expires
                    {
                        self.reported = true;
                        return Some(Lost { component: None, reason: LostReason::LeaseExpired });
                    }
                    if Instant::now() >= deadline {
                        return None;
                    }
                    if self.receivers.is_empty() {
                        // Every component released or reported: nothing
                        // more can come but the expiry.
                        match self.expires {
                            Some(expires) if expires <= deadline => {
                                // A timer channel: woken at the expiry.
                                let _ = crossbeam_channel::at(expires).recv();
                            }
                            _ => return None,
                        }
                    }
                }
            }
        }
    }

    /// The next component lost before `until`.
    fn next_component(&mut self, until: Instant) -> Option<Lost> {
        loop {
            if self.receivers.is_empty() {
                return None;
            }
            let mut select = Select::new();
            for (_, receiver) in &self.receivers {
                select.recv(receiver);
            }
            let operation = if Instant::now() >= until {
                select.try_select().ok()?
            } else {
                select.select_deadline(until).ok()?
            };
            let slot = operation.index();
            let (index, receiver) = self.receivers.get(slot)?;
            let (index, received) = (*index, operation.recv(receiver));
            self.receivers.remove(slot);
            // A disconnected channel: that component was released and will
            // report nothing.
            if let Ok(reason) = received {
                return Some(Lost { component: Some(index), reason });
            }
        }
    }
}
