//! The calling thread's live fair-lock holds, so that a thread that locks
//! again re-enters its hold (one more guard, a re-entry in Redis) instead of
//! queueing behind itself.
//!
//! Holds are per thread (the owner id is `<client>:<thread>`) and guards
//! cannot leave their thread, so a thread-local list is enough: no lock, and
//! nothing another thread could see half-done.

use std::cell::RefCell;
use std::sync::Arc;

use crate::holds::hold::Hold;

thread_local! {
    static HELD: RefCell<Vec<Arc<Hold>>> = const { RefCell::new(Vec::new()) };
}

/// The calling thread's live hold of lock `name` as `owner`, if any.
pub(super) fn of(owner: &str, name: &str) -> Option<Arc<Hold>> {
    HELD.try_with(|held| held.borrow().iter().find(|h| h.owner == owner && *h.name == *name).cloned())
        .ok()
        .flatten()
}

/// Records a new hold of the calling thread (replacing any older one of the
/// same owner and lock).
pub(super) fn insert(hold: Arc<Hold>) {
    let _ = HELD.try_with(|held| {
        let mut held = held.borrow_mut();
        held.retain(|h| !(h.owner == hold.owner && h.name == hold.name));
        held.push(hold);
    });
}

/// Forgets `hold` (its last guard is gone); a newer hold stays.
pub(super) fn remove(hold: &Hold) {
    // `try_with` (here and above): a guard dropped during thread teardown
    // must not panic.
    let _ = HELD.try_with(|held| held.borrow_mut().retain(|h| !(h.id == hold.id && h.owner == hold.owner)));
}

/// True when the calling thread holds a newer hold of `hold`'s lock.
pub(super) fn has_newer(hold: &Hold) -> bool {
    of(&hold.owner, &hold.name).is_some_and(|h| h.id != hold.id)
}
