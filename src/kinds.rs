//! One module per kind of lock: its handle, its guard, and the typed
//! contracts of its Lua scripts (the scripts themselves live under
//! `lua/<kind>/`). A kind builds on the layers below: it calls its scripts
//! through the client's connections (`store`), waits through `wait`, and
//! registers its holds with the watchdog through `holds::renew::Renew`.
//! Kinds do not import one another, except where one is made of another
//! (a run-once job is a reentrant lock's hold), or shares its layout (the
//! hash renewer of `lock::renewal`). `latch` is what every kind whose
//! release decrements a count shares: the unlock latch and its one retry.

pub(crate) mod job;
pub(crate) mod latch;
pub(crate) mod lock;
pub(crate) mod multi_lock;
pub(crate) mod red_lock;
pub(crate) mod spin_lock;
