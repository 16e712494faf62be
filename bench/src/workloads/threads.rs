//! Helpers for the workloads' threads: joining a scoped thread's result and
//! waiting, bounded, for a condition.

use std::thread;
use std::time::{Duration, Instant};

use crate::error::{Res, err};

/// The result of a scoped bench thread; a panic is an error.
pub(crate) fn join<T>(handle: thread::ScopedJoinHandle<'_, Res<T>>) -> Res<T> {
    handle.join().map_err(|_| err("a bench thread panicked"))?
}

/// Polls `done` every 2 ms until it is true; an error after `limit`.
pub(crate) fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) -> Res<()> {
    let deadline = Instant::now() + limit;
    while !done() {
        if Instant::now() >= deadline {
            return Err(err(format!("timed out after {limit:?} waiting for {what}")));
        }
        thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}
