//! Unlock latches: how a release that must not run twice survives a lost
//! reply, for every kind whose release decrements a count.
//!
//! A release that only deletes the owner's last hold is safe to repeat: once
//! the field is gone a second run releases nothing. A release that
//! decrements (a nested hold, a read hold, a hand-off) is not: a reply lost
//! on the way back would, if simply resent, release twice. So such a
//! release carries a latch, Redisson's `redisson_unlock_latch:{<name>}:<hex>`
//! key per owner: the script records its outcome there (with the request's
//! number, keyholder's addition), and the one retry, on a fresh connection,
//! returns that outcome instead of running again. A failure to connect means
//! the script never ran, so it is not retried.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::client::Inner;
use crate::error::Result;
use crate::names;
use crate::store::lanes::Session;

/// An unlock latch: the outcome of a release request, kept for its retry.
/// A script that takes one checks it first (see `lua/lock/release.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Latch<'a> {
    /// The owner's latch key for the lock.
    pub(crate) key: &'a str,
    pub(crate) ttl_ms: u64,
    /// Unique per release request; a retry sends the same.
    pub(crate) request: u64,
    pub(crate) retry: bool,
}

/// Runs `script`, a latched release of `thread`'s hold on the lock `name`
/// through `inner`; with `retry`, once more on a fresh connection if the
/// first reply was lost: the latch makes the retry return the first outcome
/// rather than release a second hold.
pub(crate) fn run_latched<T>(
    inner: &Inner,
    name: &str,
    thread: u64,
    retry: bool,
    script: impl Fn(&mut Session<'_>, Latch<'_>) -> Result<T>,
) -> Result<T> {
    let key = names::unlock_latch(name, inner.uuid.as_u128(), thread);
    let request = inner.next_request.fetch_add(1, Ordering::Relaxed);
    let ttl_ms = crate::lease::millis_ceil(latch_ttl(inner));
    let latch = Latch { key: &key, ttl_ms, request, retry: false };
    match inner.with_conn(name, |conn| script(conn, latch)) {
        Err(e) if retry && e.is_transport() => {
            inner.with_conn(name, |conn| script(conn, Latch { retry: true, ..latch }))
        }
        outcome => outcome,
    }
}

/// How long an unlock latch must outlive its first use: a command timeout
/// for the lost reply, then a connect and a command timeout for the retry,
/// and a second of slack.
fn latch_ttl(inner: &Inner) -> Duration {
    inner.config.command_timeout * 2 + inner.config.connect_timeout + Duration::from_secs(1)
}
