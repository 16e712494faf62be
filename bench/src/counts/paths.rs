//! The hot paths, as the worker process runs them: each path calls one
//! `#[inline(never)]` function per operation (its *measured function*),
//! which the parent names to callgrind (`--toggle-collect`, so only the
//! instructions inside it count, in the thread that calls it, and
//! `--dump-after`, so each call's count lands in a file of its own). Around
//! each call the worker reads `INFO commandstats`, outside the measured
//! function, so the server's count of the call's commands is exact too.
//!
//! What keeps a count the same from call to call: one thread per client,
//! so no lane is ever handed between threads, and one lane per client
//! ([`one_lane`]); the default 30 s watchdog lease, so no renewal runs
//! during a call (the renewal path has its own short lease, and measures
//! the renewal instead); the first [`WARM`] calls are left out (the first
//! loads the scripts, EVAL after NOSCRIPT, and callgrind's first pass over
//! new code is slow enough for a hold to be listened for, see `stretch`).

use keyholder::{Client, Lock};

use crate::commands;
use crate::error::{Res, err};
use crate::measured::{
    ACQUIRE, PAIR, RELEASE, WAIT, measured_acquire, measured_pair, measured_release, one_lane,
};
use crate::renewal::renewal;
use crate::tally::{Outcome, Tally};

/// Calls of a measured function before those that count.
const WARM: usize = 10;
/// Calls that count (which of them, and what figure: `Tally::outcome`,
/// `callgrind::Measured`).
const MEASURED: usize = 30;

/// One measured path.
pub(crate) struct Path {
    /// Its name in the table and the baseline.
    pub(crate) name: &'static str,
    /// What one operation is, for the table.
    pub(crate) about: &'static str,
    /// The function callgrind counts in, by its full name (`--dump-after`
    /// takes no wildcards).
    pub(crate) toggle: &'static str,
    /// The worker's side.
    run: fn(&str, &str) -> Res<Outcome>,
}

/// The watchdog's round: every hold renewed, in batches of 100 keys.
const RENEW_ALL: &str = "keyholder::holds::watchdog::renew_all";

/// Every path, in the table's order.
pub(crate) const PATHS: &[Path] = &[
    Path { name: "pair", about: "uncontended acquire+release", toggle: PAIR, run: pair },
    Path { name: "acquire", about: "uncontended acquire (a new hold)", toggle: ACQUIRE, run: acquire },
    Path { name: "release-last", about: "release of the last hold", toggle: RELEASE, run: release_last },
    Path {
        name: "reentry",
        about: "re-entry: a second acquire by the holder",
        toggle: ACQUIRE,
        run: reentry,
    },
    Path {
        name: "release-nested",
        about: "release of a nested hold (count 2 to 1)",
        toggle: RELEASE,
        run: release_nested,
    },
    Path {
        name: "renewal-100",
        about: "one watchdog round renewing 100 holds",
        toggle: RENEW_ALL,
        run: renewal,
    },
    Path {
        name: "handoff-release",
        about: "contended hand-off, the holder's release (commands: the cycle's)",
        toggle: RELEASE,
        run: handoff_release,
    },
    Path {
        name: "handoff-wait",
        about: "contended hand-off, the waiter's call (commands: the cycle's)",
        toggle: WAIT,
        run: handoff_wait,
    },
];

/// The path called `name`.
pub(crate) fn path(name: &str) -> Res<&'static Path> {
    PATHS.iter().find(|p| p.name == name).ok_or_else(|| err(format!("no path {name:?}")))
}

impl Path {
    /// Runs the worker's side against the server at `url`; `dir` is where
    /// callgrind writes its dumps.
    pub(crate) fn work(&self, url: &str, dir: &str) -> Res<Outcome> {
        (self.run)(url, dir)
    }
}

/// A client with the defaults (30 s watchdog lease) but one command
/// connection (see [`one_lane`]), and a lock of it.
fn client_and_lock(url: &str, name: &str) -> Res<(Client, Lock)> {
    let client = one_lane(Client::builder(url)).build()?;
    let lock = client.lock(name)?;
    Ok((client, lock))
}

/// Runs `op` (which opens and closes the window around the measured call)
/// [`WARM`] times, waits for the server to settle with nothing listening
/// on `lock`'s channel (the warm-up's first calls are slow enough under
/// callgrind for a hold to be listened for), then runs it [`MEASURED`]
/// times.
fn stretch(url: &str, lock: &Lock, mut op: impl FnMut(&mut Tally) -> Res<()>) -> Res<Outcome> {
    let mut tally = Tally::new(url, WARM)?;
    for _ in 0..WARM {
        op(&mut tally)?;
    }
    commands::until_quiet(&mut tally.stats, lock.channel(), false)?;
    for _ in 0..MEASURED {
        op(&mut tally)?;
    }
    tally.outcome()
}

// ---- The single-thread paths --------------------------------------------
//
// Every hold lives for one window here, a few milliseconds under
// callgrind: younger than `LISTEN_AFTER`, so never listened for, as in a
// busy loop (W1, and W5's depth-3 re-entry). An old hold is listened for,
// and its key armed for removal alarms: a re-entry or nested release then
// writes an armed key, and the client's background thread answers the
// invalidation with a check and a re-arm (HSTRLEN, PTTL), asynchronously;
// not measured here.

fn pair(url: &str, _dir: &str) -> Res<Outcome> {
    let (_client, lock) = client_and_lock(url, "counts:pair")?;
    stretch(url, &lock, |tally| {
        tally.start()?;
        measured_pair(&lock)?;
        tally.end()
    })
}

fn acquire(url: &str, _dir: &str) -> Res<Outcome> {
    let (_client, lock) = client_and_lock(url, "counts:acquire")?;
    stretch(url, &lock, |tally| {
        tally.start()?;
        let guard = measured_acquire(&lock)?;
        tally.end()?;
        Ok(guard.unlock()?)
    })
}

fn release_last(url: &str, _dir: &str) -> Res<Outcome> {
    let (_client, lock) = client_and_lock(url, "counts:release-last")?;
    stretch(url, &lock, |tally| {
        let guard = lock.lock()?;
        tally.start()?;
        measured_release(guard)?;
        tally.end()
    })
}

fn reentry(url: &str, _dir: &str) -> Res<Outcome> {
    let (_client, lock) = client_and_lock(url, "counts:reentry")?;
    stretch(url, &lock, |tally| {
        let outer = lock.lock()?;
        tally.start()?;
        let guard = measured_acquire(&lock)?;
        tally.end()?;
        guard.unlock()?;
        Ok(outer.unlock()?)
    })
}

fn release_nested(url: &str, _dir: &str) -> Res<Outcome> {
    let (_client, lock) = client_and_lock(url, "counts:release-nested")?;
    stretch(url, &lock, |tally| {
        let outer = lock.lock()?;
        let guard = lock.lock()?;
        tally.start()?;
        measured_release(guard)?;
        tally.end()?;
        Ok(outer.unlock()?)
    })
}

// ---- The contended hand-off ----------------------------------------------

fn handoff_release(url: &str, _dir: &str) -> Res<Outcome> {
    crate::handoff::run(url)
}

fn handoff_wait(url: &str, _dir: &str) -> Res<Outcome> {
    crate::handoff::run(url)
}
