//! Run-once jobs: a scheduled job that must run on one node at a time.
//!
//! Scheduled jobs ("every night at 02:00, on every node") are the commonest
//! reason to reach for a distributed lock, and they want different things
//! from it than request handling does. These are ShedLock's semantics, which
//! users know:
//!
//! - **Skip, never wait.** A held lock means another node is running (or has
//!   just run) this tick: waiting would only run the job twice.
//! - **At most.** The lock is held with a fixed lease of `at_most`, with no
//!   watchdog: if the node hangs or dies mid-job, the lock frees itself then.
//! - **At least.** A job that finishes early keeps the lock until `at_least`
//!   after its start, by shortening the key's expiry instead of deleting it,
//!   so that a node whose clock runs late (or whose scheduler fires late)
//!   finds it held and skips the tick the other node already ran.
//!
//! Each run holds the lock under an owner id of its own,
//! `<client-uuid>:<number>`, a number from the thread-id sequence that no
//! thread ever gets. So nothing re-enters a job's lock: not the same thread's
//! next tick during the `at_least` window (a reentrant thread-owned hold
//! would let it run again), and not a [`Lock`](crate::Lock) on the same name.
//! The acquire is `acquire.lua` (a new hold, with the client's claim marker
//! honoured and, in migration mode, a legacy holder's string key read as
//! held); the end is `job_finish.lua`, owner-checked and atomic.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::error::{Error, LostReason, Result};
use crate::kinds::lock::scripts::{self, Acquire, AcquireArgs, JobFinish, Turns};
use crate::lease::{MAX_LEASE, MIN_LEASE, for_people};
use crate::names::LockKeys;
use crate::owner;

/// The default of [`Job::at_most`]: 30 s, the same bound as a lock whose
/// holder dies (Redisson's watchdog timeout).
pub const DEFAULT_JOB_AT_MOST: Duration = Duration::from_secs(30);

impl Client {
    /// A run-once job named `name`: its lock's Redis key is `name` itself.
    /// Configure it with [`at_most`](Job::at_most) and
    /// [`at_least`](Job::at_least), then call [`run`](Job::run) on every
    /// tick of the schedule, on every node. No I/O.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for
    /// a name a lock could not have (see [`Client::lock`]).
    pub fn job(&self, name: &str) -> Result<Job> {
        let ctx = self.context();
        ctx.validate_name(name)?;
        let name: Arc<str> = Arc::from(name);
        let keys = Arc::new(LockKeys::new(&name, self.id()));
        Ok(Job {
            client: self.clone(),
            keys,
            at_most: DEFAULT_JOB_AT_MOST,
            at_least: Duration::ZERO,
            migration: ctx.config().migration_mode,
            fencing_token: None,
        })
    }
}

/// A scheduled job that runs on one node at a time (ShedLock's semantics).
///
/// [`run`](Job::run) runs the closure only if the job's lock is free, and
/// never waits for it: a held lock means another node has this tick. The
/// lock is held for [`at_most`](Job::at_most) at the longest, even if the
/// node hangs, and for [`at_least`](Job::at_least) at the shortest, even if
/// the job finishes early, so that nodes whose clocks are a little apart do
/// not run the same tick twice. Set `at_least` to more than the clock skew
/// between nodes and less than the schedule's period; set `at_most` to more
/// than the job's longest run.
///
/// A builder with consuming setters and documented defaults; the settings are
/// checked when it runs, before any I/O. Cheap to clone; keep one and call
/// `run` on every tick.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use keyholder::JobOutcome;
///
/// # fn main() -> Result<(), keyholder::Error> {
/// let client = keyholder::Client::open("redis://127.0.0.1:6379/")?;
/// let job = client
///     .job("jobs:nightly-report")?
///     .at_most(Duration::from_secs(600))
///     .at_least(Duration::from_secs(30));
/// // On every node, on every tick of the schedule:
/// match job.run(|| 42)? {
///     JobOutcome::Ran(rows) => println!("ran: {rows} rows"),
///     JobOutcome::Skipped => println!("another node has this tick"),
///     JobOutcome::Lost { output, reason } => println!("ran ({output}), but the lock was lost: {reason}"),
///     _ => {}
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a job does nothing until run() is called"]
pub struct Job {
    client: Client,
    keys: Arc<LockKeys>,
    at_most: Duration,
    at_least: Duration,
    migration: bool,
    /// The fencing token its runs report ([`Job::fencing_token`]).
    fencing_token: Option<u64>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("name", &self.keys.name)
            .field("at_most", &self.at_most)
            .field("at_least", &self.at_least)
            .field("migration", &self.migration)
            .field("fencing_token", &self.fencing_token)
            .finish_non_exhaustive()
    }
}

/// What one [`Job::run`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
#[must_use = "a job may have been skipped or have lost its lock"]
pub enum JobOutcome<T> {
    /// The job ran, holding the lock throughout; the closure's output.
    Ran(T),
    /// The lock was held (another node runs or has just run this tick, or a
    /// legacy holder in migration mode): the closure was not called.
    Skipped,
    /// The job ran, but its lock did not last until it ended: the job took
    /// longer than `at_most` ([`LostReason::LeaseExpired`]), or the lock
    /// was gone when it ended ([`LostReason::ReleaseFoundGone`]: it expired
    /// by Redis's clock, was force-unlocked, or Redis lost it). Another node
    /// may have run the job meanwhile.
    Lost {
        /// The closure's output.
        output: T,
        /// How the loss was found.
        reason: LostReason,
    },
}

impl<T> JobOutcome<T> {
    /// True when the closure was called ([`Ran`](JobOutcome::Ran) or
    /// [`Lost`](JobOutcome::Lost)).
    pub fn ran(&self) -> bool {
        !self.is_skipped()
    }

    /// True for [`Skipped`](JobOutcome::Skipped).
    pub fn is_skipped(&self) -> bool {
        matches!(self, JobOutcome::Skipped)
    }

    /// True for [`Lost`](JobOutcome::Lost).
    pub fn is_lost(&self) -> bool {
        matches!(self, JobOutcome::Lost { .. })
    }

    /// The closure's output, if it was called.
    pub fn output(self) -> Option<T> {
        match self {
            JobOutcome::Ran(output) | JobOutcome::Lost { output, .. } => Some(output),
            JobOutcome::Skipped => None,
        }
    }
}

/// What the closure of [`Job::run_with`] is told about its run.
#[derive(Debug, Clone, Copy)]
pub struct JobRun {
    started: Instant,
    deadline: Instant,
    fencing_token: Option<u64>,
}

impl JobRun {
    /// When the acquire was sent: `at_most` and `at_least` run from here.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// When the lock expires at the latest (`started + at_most`, on this
    /// node's clock, which never runs behind Redis's view of the lease). Work
    /// past it is no longer protected.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The time left before [`deadline`](JobRun::deadline); zero once passed.
    /// A long job checks it between steps and stops when it runs short.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// The fencing token the job was given ([`Job::fencing_token`]; the
    /// election's term for a job of a [`Leadership`](crate::Leadership)):
    /// stamp the job's writes with it, so that a storage that refuses lower
    /// tokens refuses a deposed leader's late run. `None` when none was
    /// given.
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }

    /// True once the deadline has passed: the lock may be another node's.
    pub fn is_expired(&self) -> bool {
        Instant::now() >= self.deadline
    }
}

impl Job {
    /// The job's name (also its lock's Redis key).
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// The longest the lock is held: its fixed lease, with no renewal. A
    /// node that hangs or dies mid-job frees the lock after it; a job that
    /// runs longer is reported [`Lost`](JobOutcome::Lost). Rounded up to
    /// whole milliseconds.
    ///
    /// Defaults to [`DEFAULT_JOB_AT_MOST`] (30 s). 1 ms to 30 days, and at
    /// least `at_least` (checked by [`run`](Job::run)).
    pub fn at_most(mut self, at_most: Duration) -> Self {
        self.at_most = at_most;
        self
    }

    /// The shortest the lock is held, counted from the start of the run: a
    /// job that ends sooner leaves the lock to expire `at_least` after its
    /// start instead of releasing it, so nodes whose clocks or schedulers run
    /// late skip this tick rather than run it again.
    ///
    /// Defaults to zero (released as soon as the job ends). At most
    /// `at_most` (checked by [`run`](Job::run)).
    pub fn at_least(mut self, at_least: Duration) -> Self {
        self.at_least = at_least;
        self
    }

    /// This job with `token` as the fencing token of its runs, which the
    /// closure reads from [`JobRun::fencing_token`]: typically the term of
    /// the election this node leads
    /// ([`Leadership::job`](crate::Leadership::job) sets it). The job's own
    /// lock mints none (its runs are not fenced among themselves); the
    /// token is the caller's, passed through unchanged. No I/O.
    pub fn fencing_token(mut self, token: u64) -> Self {
        self.fencing_token = Some(token);
        self
    }

    /// This job with migration mode on or off, whatever the client's
    /// setting: on, a string key at the name (a hand-rolled `SET NX` lock of
    /// code not yet migrated) means skip. See
    /// [`ClientBuilder::migration_mode`](crate::ClientBuilder::migration_mode).
    pub fn migration_mode(mut self, on: bool) -> Self {
        self.migration = on;
        self
    }

    /// Runs `job` if the lock is free, never waiting for it (see [`Job`]).
    ///
    /// If `job` panics, the lock is kept or released as if it had returned,
    /// and the panic goes on.
    ///
    /// # Errors
    ///
    /// Before any I/O, [`ErrorKind::InvalidArgument`] for `at_most` outside
    /// 1 ms to 30 days or `at_least` above `at_most`. From the acquire, the
    /// closure not called: a Redis or connection failure,
    /// [`ErrorKind::WrongType`] when a key of another type sits at the name,
    /// [`ErrorKind::LegacyLockWithoutTtl`] in migration mode, or
    /// [`ErrorKind::Shutdown`]. Once the closure has run, its output is
    /// always returned: a failure to end the hold is logged, and the lock
    /// then expires at `at_most`.
    ///
    /// [`ErrorKind::InvalidArgument`]: crate::ErrorKind::InvalidArgument
    /// [`ErrorKind::WrongType`]: crate::ErrorKind::WrongType
    /// [`ErrorKind::LegacyLockWithoutTtl`]: crate::ErrorKind::LegacyLockWithoutTtl
    /// [`ErrorKind::Shutdown`]: crate::ErrorKind::Shutdown
    pub fn run<T>(&self, job: impl FnOnce() -> T) -> Result<JobOutcome<T>> {
        self.run_with(|_| job())
    }

    /// As [`run`](Job::run), with the closure told its run's deadline, so a
    /// long job can stop before its lock runs out.
    ///
    /// # Errors
    ///
    /// As [`run`](Job::run).
    pub fn run_with<T>(&self, job: impl FnOnce(&JobRun) -> T) -> Result<JobOutcome<T>> {
        crate::observe::job(
            &self.keys.name,
            || self.run_observed(job),
            |outcome| match outcome {
                JobOutcome::Ran(_) => crate::observe::JobOutcome::Ran,
                JobOutcome::Skipped => crate::observe::JobOutcome::Skipped,
                JobOutcome::Lost { .. } => crate::observe::JobOutcome::Lost,
            },
        )
    }

    /// [`run_with`](Job::run_with) inside its `keyholder.job` span.
    fn run_observed<T>(&self, job: impl FnOnce(&JobRun) -> T) -> Result<JobOutcome<T>> {
        self.validate()?;
        let ctx = self.client.context();
        ctx.check_running()?;
        let calls = ctx.calls();
        let owner = owner::owner_id(ctx.id(), owner::unique_owner_number());
        let at_most_ms = crate::lease::millis_ceil(self.at_most);
        let started = Instant::now();
        let args = AcquireArgs {
            name: &self.keys.name,
            turns: self.turns(),
            token_key: None,
            lease_ms: at_most_ms,
            owner: &owner,
            fresh: true,
            enqueue: false,
            grant_ticket: None,
            legacy: self.migration,
        };
        // A new hold's acquire sets the count to 1: safe to repeat.
        match calls.with_live_conn(&self.keys.name, |conn| scripts::acquire(calls.scripts(), conn, &args)) {
            Ok(Acquire::Acquired { replicated: Some(false), .. }) if calls.acks_required() => {
                // Not on the replicas: a failover could lose it. Give it back.
                let _ = self.finish(&owner, Duration::ZERO);
                return Err(Error::replica_acks(&self.keys.name));
            }
            Ok(Acquire::Acquired { .. }) => {}
            Ok(Acquire::Held { .. } | Acquire::Free) => return Ok(JobOutcome::Skipped),
            Err(e) => {
                if e.is_transport() {
                    // The acquire may have run with its reply lost: end what
                    // it may have taken rather than leave it for `at_most`.
                    let _ = self.finish(&owner, Duration::ZERO);
                }
                return Err(e);
            }
        }
        let deadline = started + Duration::from_millis(at_most_ms);
        let run = JobRun { started, deadline, fencing_token: self.fencing_token };
        let output = catch_unwind(AssertUnwindSafe(|| job(&run)));
        let ended = Instant::now();
        let keep = (started + self.at_least).saturating_duration_since(ended);
        let finished = self.finish(&owner, keep);
        let output = match output {
            Ok(output) => output,
            Err(panic) => resume_unwind(panic),
        };
        if ended >= run.deadline {
            return Ok(JobOutcome::Lost { output, reason: LostReason::LeaseExpired });
        }
        match finished {
            Ok(JobFinish::NotOwner) => Ok(JobOutcome::Lost { output, reason: LostReason::ReleaseFoundGone }),
            Ok(JobFinish::Kept | JobFinish::Released) => Ok(JobOutcome::Ran(output)),
            Err(e) => {
                log::warn!(
                    "keyholder: job '{}' ran, but its lock could not be ended ({e}); it expires within {:?}",
                    self.keys.name,
                    self.at_most
                );
                Ok(JobOutcome::Ran(output))
            }
        }
    }

    /// Checks the settings before any I/O.
    fn validate(&self) -> Result<()> {
        if self.at_most < MIN_LEASE || self.at_most > MAX_LEASE {
            return Err(Error::invalid_argument(format!(
                "job '{}': at_most {} is outside {} ..= {}",
                self.keys.name,
                for_people(self.at_most),
                for_people(MIN_LEASE),
                for_people(MAX_LEASE)
            )));
        }
        if self.at_least > self.at_most {
            return Err(Error::invalid_argument(format!(
                "job '{}': at_least {} is longer than at_most {}",
                self.keys.name,
                for_people(self.at_least),
                for_people(self.at_most)
            )));
        }
        Ok(())
    }

    /// Keeps the run's hold for `keep` more, or releases it now.
    fn finish(&self, owner: &str, keep: Duration) -> Result<JobFinish> {
        let calls = self.client.context().calls();
        // Owner-checked and idempotent (shortening, or deleting our own
        // field's key): safe to repeat on a new connection.
        calls.with_live_conn(&self.keys.name, |conn| {
            scripts::job_finish(calls.scripts(), conn, &self.keys.name, &self.keys.channel, owner, keep)
        })
    }

    fn turns(&self) -> Turns<'_> {
        Turns::of(&self.keys, self.client.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_predicates() {
        let ran: JobOutcome<u8> = JobOutcome::Ran(1);
        assert!(ran.ran() && !ran.is_skipped() && !ran.is_lost());
        assert_eq!(ran.output(), Some(1));
        let skipped: JobOutcome<u8> = JobOutcome::Skipped;
        assert!(!skipped.ran() && skipped.is_skipped());
        assert_eq!(skipped.output(), None);
        let lost = JobOutcome::Lost { output: 2u8, reason: LostReason::LeaseExpired };
        assert!(lost.ran() && lost.is_lost());
        assert_eq!(lost.output(), Some(2));
    }

    #[test]
    fn a_run_past_its_deadline_is_expired() {
        let now = Instant::now();
        let run = JobRun { started: now, deadline: now, fencing_token: None };
        assert!(run.is_expired());
        assert_eq!(run.remaining(), Duration::ZERO);
        let run = JobRun { started: now, deadline: now + Duration::from_secs(60), fencing_token: None };
        assert!(!run.is_expired() && run.remaining() > Duration::from_secs(50));
    }
}
