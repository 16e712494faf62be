//! Local coordination, without I/O of its own: a client's state for one
//! lock (the FIFO gate of its threads, hand-off, wake-up slot, subscription)
//! and a thread's hold of a lock. Redis is reached only through the
//! `GateRedis` seam, so the gate is tested without it.

pub(crate) mod entry;
pub(crate) mod hold;
