//! Who holds a lock: the owner id `<client-uuid>:<thread-id>`.
//!
//! Redisson identifies a holder by its client's UUID and the Java thread id.
//! Rust's `ThreadId::as_u64` is unstable and OS thread ids are reused, so each
//! thread takes a number from a process-wide counter the first time it touches
//! a lock. That counter is the crate's only global state: an identity source,
//! not client state.

use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_THREAD_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_ID: u64 = NEXT_THREAD_ID.fetch_add(1, Ordering::Relaxed);
}

/// The calling thread's keyholder thread id: unique within the process,
/// never reused, never 0.
pub(crate) fn current_thread_id() -> u64 {
    THREAD_ID.with(|id| *id)
}

/// A number from the thread-id sequence that no thread will ever have: the
/// owner id of a hold that belongs to no thread (one run of a run-once job),
/// so that no thread can re-enter it.
pub(crate) fn unique_owner_number() -> u64 {
    NEXT_THREAD_ID.fetch_add(1, Ordering::Relaxed)
}

/// The hash field that identifies `thread_id` of the client `client_id`.
pub(crate) fn owner_id(client_id: &str, thread_id: u64) -> String {
    format!("{client_id}:{thread_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_ids_are_stable_per_thread_and_distinct_across_threads() {
        let here = current_thread_id();
        assert_eq!(here, current_thread_id());
        let there = std::thread::spawn(current_thread_id).join().unwrap();
        assert_ne!(here, there);
        assert!(here > 0 && there > 0);
    }

    #[test]
    fn unique_owner_numbers_are_never_a_threads_id() {
        let here = current_thread_id();
        let (a, b) = (unique_owner_number(), unique_owner_number());
        assert!(a != b && a != here && b != here);
        let there = std::thread::spawn(current_thread_id).join().unwrap();
        assert!(there != a && there != b);
    }

    #[test]
    fn owner_id_is_uuid_colon_decimal() {
        let id = owner_id("8c1f0a4e-0000-4000-8000-000000000000", 57);
        assert_eq!(id, "8c1f0a4e-0000-4000-8000-000000000000:57");
    }
}
