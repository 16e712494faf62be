//! The contended hand-off, as each side sees it: client A's thread holds a
//! lock; client B's thread (a second client, as a second process would
//! have) asks for it, is refused, subscribes to the unlock channel, is
//! refused again and sleeps; A releases, the release hands the lock to B,
//! and B holds, then releases.
//!
//! Each cycle starts from the same settled state: A holds, its hold
//! listened for (older than `LISTEN_AFTER`), B's channel from the last
//! cycle lingered out, the server quiet. And the release must come while B
//! sleeps, or the cycle is another one (B would find the lock free, or be
//! woken before it slept). No signal says that a thread sleeps inside the
//! library, so A looks: B's thread is in the `futex` system call
//! (`/proc/self/task/<tid>/syscall`; under valgrind a thread that merely
//! waits for its turn to run is in `read`) and Redis has run nothing new,
//! at two looks 10 ms apart. A bounded poll, because nothing else can tell.
//!
//! Counted per cycle: the releaser's instructions in its release call
//! (path `handoff-release`), or the waiter's in its whole `try_lock_for` call,
//! from its first refused attempt to holding (`handoff-wait`), one process
//! each; and the commands of the whole cycle from the settled state to the
//! next, both clients' (the same for both sides): B's attempts and
//! subscription, A's release and hand-off, B's release, the channels
//! lingering out.

use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, bounded};
use keyholder::{Client, Lock};

use crate::commands;
use crate::error::{Res, err};
use crate::measured::{measured_release, measured_wait, one_lane};
use crate::tally::{Outcome, Tally};

/// Cycles of the warm-up, and cycles that count: fewer than the other
/// paths' operations, since each cycle waits for three settled states
/// (about half a second under callgrind).
const WARM: usize = 4;
const MEASURED: usize = 16;

/// Looks for a sleeping waiter, 10 ms apart.
const LOOK: Duration = Duration::from_millis(10);
/// At most this many looks (10 s) before the cycle is declared stuck.
const LOOKS: usize = 1_000;

/// `futex`, the system call a sleeping thread is in.
#[cfg(target_arch = "x86_64")]
const FUTEX: &str = "202";
#[cfg(target_arch = "aarch64")]
const FUTEX: &str = "98";
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const FUTEX: &str = "futex number unknown on this architecture";

/// What B's thread is told to do next.
enum Order {
    /// Ask for the lock and hold it.
    Wait,
    /// Release the lock it holds.
    Release,
}

/// Runs the cycles. Both sides' workers run the same cycles: which side
/// is counted is callgrind's measured function (the parent's choice).
pub(crate) fn run(url: &str) -> Res<Outcome> {
    let (a, b) = (one_lane(Client::builder(url)).build()?, one_lane(Client::builder(url)).build()?);
    let (lock_a, lock_b) = (a.lock("counts:handoff")?, b.lock("counts:handoff")?);
    let (orders, order_rx) = bounded::<Order>(0);
    let (done_tx, done) = bounded::<Res<()>>(0);
    let (tid_tx, tid_rx) = bounded::<String>(1);
    std::thread::scope(|scope| {
        scope.spawn(move || waiter(&lock_b, &order_rx, &done_tx, &tid_tx));
        // Dropping the orders' sender (returning) ends B's loop.
        holder(url, &lock_a, orders, &done, &tid_rx)
    })
}

/// B's thread: its id first, then each order in turn, each answered.
fn waiter(lock: &Lock, orders: &Receiver<Order>, done: &Sender<Res<()>>, tid: &Sender<String>) {
    let _ = tid.send(thread_id().unwrap_or_default());
    let mut held = None;
    while let Ok(order) = orders.recv() {
        let result = match order {
            Order::Wait => match measured_wait(lock) {
                Ok(Some(guard)) => {
                    held = Some(guard);
                    Ok(())
                }
                Ok(None) => Err(err("the waiter was not handed the lock within its bound")),
                Err(e) => Err(e.into()),
            },
            Order::Release => match held.take() {
                Some(guard) => guard.unlock().map_err(Into::into),
                None => Err(err("the waiter holds nothing to release")),
            },
        };
        if done.send(result).is_err() {
            return;
        }
    }
}

/// A's thread: the cycles, each one window.
fn holder(
    url: &str,
    lock: &Lock,
    orders: Sender<Order>,
    done: &Receiver<Res<()>>,
    tid: &Receiver<String>,
) -> Res<Outcome> {
    let tid = tid.recv_timeout(Duration::from_secs(10))?;
    if tid.is_empty() {
        return Err(err("the waiter thread's id could not be read"));
    }
    let syscall = format!("/proc/self/task/{tid}/syscall");
    let mut tally = Tally::new(url, WARM)?;
    let mut guard = lock.lock()?;
    for _ in 0..WARM + MEASURED {
        commands::until_quiet(&mut tally.stats, lock.channel(), true)?;
        tally.start()?;
        orders.send(Order::Wait)?;
        until_asleep(&mut tally.stats, &syscall)?;
        measured_release(guard)?;
        done.recv()??;
        orders.send(Order::Release)?;
        done.recv()??;
        // B's channel lingers out; A's is subscribed again by its next hold.
        commands::until_quiet(&mut tally.stats, lock.channel(), false)?;
        guard = lock.lock()?;
        // A's new hold, listened for once old enough, is the next cycle's
        // settled state; its commands are this cycle's.
        commands::until_quiet(&mut tally.stats, lock.channel(), true)?;
        tally.end()?;
    }
    guard.unlock()?;
    tally.outcome()
}

/// Until the waiter sleeps: in `futex` with Redis idle, at two looks in a
/// row.
fn until_asleep(stats: &mut redis::Connection, syscall: &str) -> Res<()> {
    let mut last: Option<(String, u64)> = None;
    for _ in 0..LOOKS {
        std::thread::sleep(LOOK);
        let text = std::fs::read_to_string(syscall)?;
        let call = text.split_whitespace().next().unwrap_or("").to_owned();
        let ran: u64 = commands::calls(stats)?.values().sum();
        let now = (call, ran);
        if now.0 == FUTEX && last.as_ref() == Some(&now) {
            return Ok(());
        }
        last = Some(now);
    }
    Err(err("the waiter did not fall asleep within 10 s"))
}

/// The calling thread's id (`/proc/thread-self` links to `<pid>/task/<tid>`).
fn thread_id() -> Res<String> {
    let link = std::fs::read_link("/proc/thread-self")?;
    link.file_name()
        .map(|tid| tid.to_string_lossy().into_owned())
        .ok_or_else(|| err(format!("/proc/thread-self links to {link:?}")))
}
