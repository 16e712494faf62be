//! The client's pub/sub connections: the subscriber and its reader thread,
//! the sentinel watch (through Sentinel), and the little RESP they speak on
//! their own sockets. The subscriber wakes `Waiters`, the watch reports
//! `Switches`; neither knows anything else of locks or primaries. The
//! operators' tool watches a lock's unlock channel on a connection of its
//! own (`watch.rs`).

mod resp;
pub(crate) mod router;
pub(crate) mod sentinel_watch;
pub(crate) mod subscriber;
pub(crate) mod target;
pub(crate) mod watch;
