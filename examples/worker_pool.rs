//! A handler locks, a pool thread releases: holds owned by a token.
//!
//! The shape of hand-rolled `SET order:<id> <token> NX PX 30000` code: a
//! request handler takes the order's lock, hands the work to a worker pool,
//! and the worker that finishes releases it. A thread-owned guard cannot
//! move, so the handler takes a token-owned one (`lock_owned`), whose guard
//! is `Send`: it travels with the job over a channel, the watchdog renews
//! the lock while the job waits and runs, and the worker's `unlock` frees
//! it. The worker's nested step re-enters the lock with the guard's token.
//! One order's jobs never overlap; the run checks it and prints
//! `orders: <n> jobs, never two at once on one order`.
//!
//! ```text
//! cargo run --example worker_pool                  # private redis-server
//! cargo run --example worker_pool -- --jobs 40 --workers 4
//! ```
//!
//! Without `REDIS_URL` it starts its own `redis-server` on a free loopback
//! port, as the other examples do.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use keyholder::{Client, OwnedLockGuard};
use keyholder_testkit::server::url_from_env_or_start;
use parking_lot::Mutex;

/// The work a job does inside its order's lock.
const WORK: Duration = Duration::from_millis(5);
/// How long a handler waits for an order's lock.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// How many orders the jobs are spread over.
const ORDERS: usize = 3;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// A job for the pool: the order, and the lock's guard that travels with it.
struct Job {
    order: usize,
    guard: OwnedLockGuard,
}

fn main() -> ExitCode {
    let (mut jobs, mut workers) = (24usize, 3usize);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next().map(|v| v.parse())) {
            ("--jobs", Some(Ok(n))) => jobs = n,
            ("--workers", Some(Ok(n))) if n > 0 => workers = n,
            _ => {
                eprintln!("usage: worker_pool [--jobs N] [--workers N]");
                return ExitCode::from(2);
            }
        }
    }
    match run(jobs, workers) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("worker_pool: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(jobs: usize, workers: usize) -> Result<(), Error> {
    // Stopped (when private) at the end of this function.
    let (url, _private) = url_from_env_or_start()?;
    let client = Client::open(url.as_str())?;
    // Per order: jobs inside its section now, and the most at once.
    let inside = Arc::new(Mutex::new(HashMap::<usize, (u32, u32)>::new()));

    let (queue, taken) = crossbeam_channel::bounded::<Job>(workers);
    let pool: Vec<_> = (0..workers)
        .map(|_| {
            let (taken, inside, client) = (taken.clone(), Arc::clone(&inside), client.clone());
            std::thread::spawn(move || -> Result<(), Error> {
                for job in taken {
                    work(&client, job, &inside)?;
                }
                Ok(())
            })
        })
        .collect();
    drop(taken);

    // The "handler": locks on its own thread, hands the guard to the pool.
    for n in 0..jobs {
        let order = n % ORDERS;
        let lock = client.lock(&format!("orders:{order}"))?;
        let guard = lock.try_lock_owned_for(LOCK_WAIT)?.ok_or("an order stayed locked")?;
        queue.send(Job { order, guard })?;
    }
    drop(queue);
    for worker in pool {
        worker.join().map_err(|_| "a worker panicked")??;
    }

    let most = inside.lock().values().map(|&(_, most)| most).max().unwrap_or(0);
    if most > 1 {
        return Err(format!("{most} jobs ran at once on one order").into());
    }
    println!("orders: {jobs} jobs, never two at once on one order");
    Ok(())
}

/// One job on a pool thread: the work, a nested step that re-enters the
/// lock with the token, and the release, here, not where it was taken.
fn work(client: &Client, job: Job, inside: &Mutex<HashMap<usize, (u32, u32)>>) -> Result<(), Error> {
    {
        let mut inside = inside.lock();
        let (now, most) = inside.entry(job.order).or_default();
        *now += 1;
        *most = (*most).max(*now);
    }
    std::thread::sleep(WORK);
    let lock = client.lock(job.guard.name())?;
    let nested = lock.try_lock_with(&job.guard.token())?.ok_or("the token did not re-enter")?;
    nested.unlock()?;
    inside.lock().entry(job.order).or_default().0 -= 1;
    job.guard.unlock()?;
    Ok(())
}
