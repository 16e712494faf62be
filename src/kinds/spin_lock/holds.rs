//! The spin-lock holds of the current thread.
//!
//! A spin lock's owner is a thread of a client, as RLock's is, and its
//! guards never leave that thread; so the thread's live holds are kept in a
//! thread-local map, keyed by client and lock name, rather than in shared
//! state behind a lock. A re-entry finds its hold there; a release finds
//! whether a newer hold of the same owner has replaced its own (a hold lost
//! and taken again), in which case it must not touch Redis, whose count is
//! the newer hold's.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use crate::holds::hold::Hold;

/// The thread's latest hold per (client UUID, lock name).
type Holds = HashMap<(u128, Arc<str>), Arc<Hold>>;

thread_local! {
    static HOLDS: RefCell<Holds> = RefCell::new(HashMap::new());
}

/// The current thread's latest hold of `name` through client `client`.
pub(crate) fn current(client: u128, name: &Arc<str>) -> Option<Arc<Hold>> {
    HOLDS.try_with(|holds| holds.borrow().get(&(client, Arc::clone(name))).cloned()).ok().flatten()
}

/// Records `hold` as the current thread's latest hold of its lock.
pub(crate) fn set(client: u128, hold: &Arc<Hold>) {
    let _ = HOLDS.try_with(|holds| {
        holds.borrow_mut().insert((client, Arc::clone(&hold.name)), Arc::clone(hold));
    });
}

/// Forgets `hold`, unless a newer hold has replaced it.
pub(crate) fn forget(client: u128, hold: &Hold) {
    let _ = HOLDS.try_with(|holds| {
        let mut holds = holds.borrow_mut();
        let key = (client, Arc::clone(&hold.name));
        if holds.get(&key).is_some_and(|h| h.id == hold.id) {
            holds.remove(&key);
        }
    });
}
