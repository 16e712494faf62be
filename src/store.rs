//! The Redis layer: where the primary is (a URL's server, or the master
//! Sentinel names), the command connections (opening, timeouts,
//! generations, the access check), the few connections shared by every
//! thread through batched pipelines (lanes), one script call (EVALSHA with
//! EVAL after NOSCRIPT), and the bundled scripts with their typed replies.
//! Nothing here knows about gates or guards.

pub(crate) mod batch;
pub(crate) mod cluster;
pub(crate) mod connection;
pub(crate) mod eval;
pub(crate) mod lane;
pub(crate) mod lanes;
pub(crate) mod pool;
pub(crate) mod primary;
pub(crate) mod routes;
pub(crate) mod scripts;
pub(crate) mod sentinel;
pub(crate) mod slots;
pub(crate) mod wire;
