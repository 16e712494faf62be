//! The client's pub/sub connections: the subscriber and its reader thread,
//! and the sentinel watch (through Sentinel), on keyholder's own sockets,
//! setup, writer and reader (`net/`), with what Redis pushes read in
//! redis-rs's terms (`push.rs`). The subscriber wakes `Waiters`, the watch
//! reports `Switches`; neither knows anything else of locks or primaries.
//! The operators' watch (`admin/watch.rs`) listens through the subscriber
//! too, as an observer handed every message.

pub(crate) mod push;
pub(crate) mod router;
pub(crate) mod sentinel_watch;
pub(crate) mod subscriber;
pub(crate) mod target;
pub(crate) mod tracking;
