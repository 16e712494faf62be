//! The calling thread's own read-write holds, by client, lock and mode.
//!
//! A read-write hold belongs to a thread (its owner id names the thread),
//! and its guards never leave that thread, so the bookkeeping that makes
//! re-entry and the upgrade check work without I/O is thread-local: each
//! thread knows which holds it has, whatever handle it took them through.
//! Entries are weak: a hold lives in its guards (and the watchdog), and a
//! finished hold's entry is removed by its release.

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use crate::holds::hold::Hold;

struct Local {
    client: u128,
    name: Arc<str>,
    write: bool,
    hold: Weak<Hold>,
}

thread_local! {
    static HOLDS: RefCell<Vec<Local>> = const { RefCell::new(Vec::new()) };
}

/// The calling thread's live hold of `name` in that mode on `client`.
pub(crate) fn current(client: u128, name: &str, write: bool) -> Option<Arc<Hold>> {
    HOLDS
        .try_with(|holds| {
            holds
                .borrow()
                .iter()
                .find(|l| l.client == client && l.write == write && &*l.name == name)
                .and_then(|l| l.hold.upgrade())
                .filter(|h| !h.is_finished())
        })
        .ok()
        .flatten()
}

/// Records `hold` as the calling thread's hold of its lock in that mode,
/// replacing any earlier one.
pub(crate) fn set(client: u128, write: bool, hold: &Arc<Hold>) {
    let _ = HOLDS.try_with(|holds| {
        let mut holds = holds.borrow_mut();
        holds.retain(|l| {
            l.hold.strong_count() > 0 && !(l.client == client && l.write == write && l.name == hold.name)
        });
        holds.push(Local { client, name: Arc::clone(&hold.name), write, hold: Arc::downgrade(hold) });
    });
}

/// Forgets the hold `id` (its last guard was released).
pub(crate) fn remove(id: u64) {
    // A guard dropped during thread teardown may find the storage gone:
    // there is nothing left to forget then.
    let _ = HOLDS.try_with(|holds| {
        holds.borrow_mut().retain(|l| l.hold.upgrade().is_some_and(|h| h.id != id));
    });
}
