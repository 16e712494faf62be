//! One module per kind of lock: its core (the lock-like kinds, under the
//! generic handle and guard of `family`) or its handle and guard (the
//! semaphores and the latch, which keep their own vocabulary), and the typed
//! contracts of its Lua scripts (the scripts themselves live under
//! `lua/<kind>/`). A kind builds on the layers below: it calls its scripts
//! through the client's connections (`store`), waits through `wait`, and
//! registers its holds with the watchdog through `holds::renew::Renew`.
//! Kinds do not import one another, except where one is made of another
//! (a run-once job is a reentrant lock's hold; a MultiLock or RedLock is
//! made of other kinds' handles), or shares its layout (the hash renewer of
//! `lock::renewal`); every lock-like kind imports `family`. `latch` is what every kind whose
//! release decrements a count shares: the unlock latch and its one retry.
//! The semaphores and the count-down latch share `semaphore::wait` (their
//! side of `family::contend`, the one waiting loop of every kind) and
//! `semaphore::scripts::eval`; the permit-expirable semaphore also shares the
//! semaphore's count and channel.

pub(crate) mod count_down_latch;
pub(crate) mod fair;
pub(crate) mod family;
pub(crate) mod job;
pub(crate) mod latch;
pub(crate) mod lock;
pub(crate) mod multi_lock;
pub(crate) mod non_reentrant;
pub(crate) mod permit_semaphore;
pub(crate) mod red_lock;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
pub(crate) mod spin_lock;
