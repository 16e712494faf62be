//! The Redis layer: where the primary is (a URL's server, or the master
//! Sentinel names), the command connections (pool, timeouts, generations,
//! the access check), one script call (EVALSHA with EVAL after NOSCRIPT),
//! and the bundled scripts with their typed replies. Nothing here knows about
//! threads, gates or guards.

pub(crate) mod connection;
pub(crate) mod eval;
pub(crate) mod primary;
pub(crate) mod scripts;
pub(crate) mod sentinel;
