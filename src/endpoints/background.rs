//! The client's background threads (the watchdog, the held locks'
//! listener, the pub/sub readers, the Sentinel watch): each named, and
//! stopped on shutdown within a bound, never waited for without one.

use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError};

/// A background thread, and a channel that disconnects when it exits.
pub(crate) struct Background {
    handle: JoinHandle<()>,
    exited: Receiver<()>,
}

impl Background {
    /// Starts `body` on a thread called `name`.
    pub(crate) fn spawn(name: String, body: impl FnOnce() + Send + 'static) -> std::io::Result<Background> {
        let (exiting, exited) = crossbeam_channel::bounded::<()>(0);
        let handle = std::thread::Builder::new().name(name).spawn(move || {
            let _exiting = exiting;
            body();
        })?;
        Ok(Background { handle, exited })
    }

    /// Joins the thread if it exits within `bound` (it was told to stop),
    /// and otherwise leaves it: shutdown must not hang on it. A thread
    /// stopping itself (the last handle dropped on it) is not joined.
    pub(crate) fn stop(self, bound: Duration) {
        if self.handle.thread().id() == std::thread::current().id() {
            return;
        }
        if let Err(RecvTimeoutError::Disconnected) = self.exited.recv_timeout(bound) {
            let _ = self.handle.join();
        }
    }
}
