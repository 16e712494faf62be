//! Which kind of lock holds a name for the calling thread, among the kinds
//! that share Redisson's RLock hash: [`Lock`](crate::Lock),
//! [`SpinLock`](crate::SpinLock) and [`FairLock`](crate::FairLock).
//!
//! Their hashes are the same in Redis (Redisson's RLock, RSpinLock and
//! RFairLock all keep `<client>:<thread>` → count at the name), so between
//! different owners they exclude each other as one lock, and no script can
//! tell them apart. One owner is another matter: a thread that holds `k`
//! as one kind and takes it as another would find its own field there, and
//! the second kind's new hold would reset the count and its release delete
//! the first kind's hold. Only the client knows which kind took the hold,
//! so the check is here, before any I/O: a thread's second kind on a name
//! it holds is refused with `WrongType`.
//!
//! Holds are per thread and guards never leave their thread, so the record
//! is thread-local. Entries are weak: a hold lives in its guards, and a
//! finished or dropped hold no longer counts; dead entries are swept as the
//! map grows, so a thread that uses many names keeps it small.

use foldhash::{HashMap, HashMapExt};
use std::cell::RefCell;
use std::sync::{Arc, Weak};

use crate::error::{Error, Result};
use crate::holds::hold::Hold;

/// A kind of lock that keeps Redisson's RLock hash at its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HashKind {
    Lock,
    SpinLock,
    FairLock,
}

impl HashKind {
    fn label(self) -> &'static str {
        match self {
            HashKind::Lock => "a Lock",
            HashKind::SpinLock => "a SpinLock",
            HashKind::FairLock => "a FairLock",
        }
    }
}

struct Noted {
    kind: HashKind,
    hold: Weak<Hold>,
}

struct Record {
    map: HashMap<(u128, Arc<str>), Noted>,
    /// Drop dead entries when the map grows past this.
    sweep_at: usize,
}

const MIN_SWEEP_AT: usize = 64;

thread_local! {
    static RECORD: RefCell<Record> =
        RefCell::new(Record { map: HashMap::new(), sweep_at: MIN_SWEEP_AT });
}

/// Refuses, before any I/O, a new hold of `name` as `kind` through client
/// `client` while the calling thread holds it as another kind.
pub(crate) fn check(client: u128, name: &Arc<str>, kind: HashKind) -> Result<()> {
    let other = RECORD
        .try_with(|record| {
            let record = record.borrow();
            let noted = record.map.get(&(client, Arc::clone(name)))?;
            let live = noted.hold.upgrade().is_some_and(|h| !h.is_finished());
            (live && noted.kind != kind).then_some(noted.kind)
        })
        .ok()
        .flatten();
    match other {
        Some(other) => Err(Error::held_as_other_kind(name, kind.label(), other.label())),
        None => Ok(()),
    }
}

/// Records `hold`, new, as the calling thread's hold of its name as `kind`.
pub(crate) fn note(client: u128, kind: HashKind, hold: &Arc<Hold>) {
    let _ = RECORD.try_with(|record| {
        let mut record = record.borrow_mut();
        record.map.insert((client, Arc::clone(&hold.name)), Noted { kind, hold: Arc::downgrade(hold) });
        if record.map.len() > record.sweep_at {
            record.map.retain(|_, n| n.hold.upgrade().is_some_and(|h| !h.is_finished()));
            // Sweep again only after as many new entries: amortised O(1).
            record.sweep_at = (record.map.len() * 2).max(MIN_SWEEP_AT);
        }
    });
}
