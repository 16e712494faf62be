//! A client's local state for one lock name: the gate and the wake-up slot.
//!
//! **The gate.** Threads of one client that want the same lock queue here, in
//! FIFO order, before they talk to Redis. Only the thread at the gate runs the
//! acquire script or waits for an unlock message, so
//!
//! * a release hands the lock straight to the next local thread: one acquire
//!   and one release script per acquisition, no failed retries;
//! * the releasing thread cannot barge ahead of its own client's waiters;
//! * however many threads wait, an unlock message wakes one thread per client.
//!
//! The gate is advisory: Redis stays the only authority on who holds the lock.
//! A gate whose holder's lease has run out (a leaked guard, a lost hold) is
//! taken over by the next waiter, so a stuck local thread can never block the
//! others longer than its lease.
//!
//! **The wake-up slot** is a sticky permit: an unlock message that arrives
//! before the waiting thread parks is kept, never lost.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};

use crate::error::{Error, LostReason, Result};
use crate::hold::Hold;

pub(crate) struct Entry {
    pub(crate) name: Arc<str>,
    pub(crate) channel: String,
    state: Mutex<State>,
    woken: Condvar,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry").field("name", &self.name).finish_non_exhaustive()
    }
}

/// Who is at the gate.
enum Gate {
    Free,
    /// A thread is running the acquire script or waiting in Redis.
    Acquiring(u64),
    /// A thread holds the lock.
    Held(Arc<Hold>),
}

struct Queued {
    thread: u64,
    wake: Sender<()>,
}

struct State {
    gate: Gate,
    queue: VecDeque<Queued>,
    /// An unlock message arrived and was not yet consumed.
    wake_pending: bool,
    shutdown: bool,
}

/// How a wait for an unlock message ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    Notified,
    TimedOut,
}

impl Entry {
    pub(crate) fn new(name: Arc<str>, channel: String) -> Self {
        Entry {
            name,
            channel,
            state: Mutex::new(State {
                gate: Gate::Free,
                queue: VecDeque::new(),
                wake_pending: false,
                shutdown: false,
            }),
            woken: Condvar::new(),
        }
    }

    /// The live hold of `thread`, for re-entry.
    pub(crate) fn hold_of(&self, thread: u64) -> Option<Arc<Hold>> {
        match &self.state.lock().gate {
            Gate::Held(hold) if hold.thread == thread && !hold.is_lost() => Some(Arc::clone(hold)),
            _ => None,
        }
    }

    /// Enters the gate as `thread`. Without `block`, returns `Ok(false)` at
    /// once if another local thread is there; with it, queues until the gate
    /// is handed over or `deadline` passes.
    pub(crate) fn enter_gate(&self, thread: u64, deadline: Option<Instant>, block: bool) -> Result<bool> {
        let wake: Receiver<()> = {
            let mut st = self.state.lock();
            if st.shutdown {
                return Err(Error::Shutdown);
            }
            if st.queue.is_empty() && st.try_take(thread) {
                return Ok(true);
            }
            if !block {
                return Ok(false);
            }
            let (tx, rx) = crossbeam_channel::bounded(1);
            st.queue.push_back(Queued { thread, wake: tx });
            rx
        };
        loop {
            let holder_deadline = self.holder_deadline();
            let until = match (deadline, holder_deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // A message, a timeout and a disconnect all mean "look again".
            let _ = match until {
                Some(until) => wake.recv_deadline(until).map_err(drop),
                None => wake.recv().map_err(drop),
            };
            let mut st = self.state.lock();
            if matches!(st.gate, Gate::Acquiring(t) if t == thread) {
                return Ok(true);
            }
            let at_front = st.queue.front().is_some_and(|q| q.thread == thread);
            if at_front && st.try_take(thread) {
                st.queue.pop_front();
                return Ok(true);
            }
            if st.shutdown || deadline.is_some_and(|d| Instant::now() >= d) {
                st.queue.retain(|q| q.thread != thread);
                return if st.shutdown { Err(Error::Shutdown) } else { Ok(false) };
            }
        }
    }

    fn holder_deadline(&self) -> Option<Instant> {
        match &self.state.lock().gate {
            Gate::Held(hold) => Some(hold.deadline()),
            _ => None,
        }
    }

    /// Leaves the gate after a failed or abandoned acquisition.
    pub(crate) fn leave_gate(&self, thread: u64) {
        let mut st = self.state.lock();
        if matches!(st.gate, Gate::Acquiring(t) if t == thread) {
            st.hand_off();
        }
    }

    /// Records that the thread at the gate now holds the lock.
    pub(crate) fn set_held(&self, hold: Arc<Hold>) {
        self.state.lock().gate = Gate::Held(hold);
    }

    /// Hands the gate on after the hold `hold_id` ended; a no-op if the gate
    /// has moved on already (taken over after the hold was lost).
    pub(crate) fn release_gate(&self, hold_id: u64) {
        let mut st = self.state.lock();
        if matches!(&st.gate, Gate::Held(h) if h.id == hold_id) {
            st.hand_off();
        }
    }

    /// True when no thread is at or queued for the gate.
    pub(crate) fn is_idle(&self) -> bool {
        let st = self.state.lock();
        matches!(st.gate, Gate::Free) && st.queue.is_empty()
    }

    /// Forgets unlock messages that arrived before the caller's next attempt.
    pub(crate) fn clear_wake(&self) {
        self.state.lock().wake_pending = false;
    }

    /// Waits for an unlock message until `until`.
    pub(crate) fn wait_wake(&self, until: Instant) -> Result<Wake> {
        let mut st = self.state.lock();
        loop {
            if st.shutdown {
                return Err(Error::Shutdown);
            }
            if st.wake_pending {
                st.wake_pending = false;
                return Ok(Wake::Notified);
            }
            if self.woken.wait_until(&mut st, until).timed_out() {
                return Ok(if std::mem::take(&mut st.wake_pending) {
                    Wake::Notified
                } else {
                    Wake::TimedOut
                });
            }
        }
    }

    /// An unlock message (or a reconnect) arrived: wake the waiting thread.
    pub(crate) fn notify(&self) {
        let mut st = self.state.lock();
        st.wake_pending = true;
        self.woken.notify_all();
    }

    /// Wakes everyone with `Error::Shutdown`.
    pub(crate) fn shut_down(&self) {
        let mut st = self.state.lock();
        st.shutdown = true;
        for queued in &st.queue {
            let _ = queued.wake.try_send(());
        }
        self.woken.notify_all();
    }
}

impl State {
    /// Takes the gate if it is free, or if its holder's hold has run out.
    fn try_take(&mut self, thread: u64) -> bool {
        let takeable = match &self.gate {
            Gate::Free => true,
            Gate::Acquiring(_) => false,
            Gate::Held(hold) => {
                if hold.is_lost() {
                    hold.mark_lost(LostReason::LeaseExpired);
                    true
                } else {
                    false
                }
            }
        };
        if takeable {
            self.gate = Gate::Acquiring(thread);
        }
        takeable
    }

    /// Frees the gate and hands it to the first queued thread.
    fn hand_off(&mut self) {
        self.gate = Gate::Free;
        if let Some(next) = self.queue.pop_front() {
            self.gate = Gate::Acquiring(next.thread);
            let _ = next.wake.try_send(());
        }
    }
}
