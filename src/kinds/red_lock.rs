//! RedLock: one lock over N independent Redis masters, held by a quorum
//! (Redisson's deprecated `RedissonRedLock`, and the algorithm of the
//! Redis documentation's "Distributed locks with Redis").
//!
//! A RedLock has no Redis data of its own: on each master it takes the
//! reentrant lock of the same name ([`Lock`], so each master's data is
//! RLock's and a Java `RedissonRedLock` over the same masters contends
//! with it), and it counts as held when a quorum (N/2 + 1) of masters gave
//! it theirs within the validity time:
//!
//! ```text
//! validity = lease − elapsed − drift,   drift = lease × 0.01 + 2 ms
//! ```
//!
//! where `elapsed` runs from the start of the attempt to the last
//! master's answer (and, fenced, the token round). Masters are asked one
//! after another, in an order every process agrees on (by deployment, as a
//! MultiLock's), each bounded by its client's timeouts; a master that fails
//! or is unreachable counts as a refusal and does not abort the attempt. A
//! failed attempt releases what it took on every master (an acquire whose
//! reply was lost is given back by the component lock itself). Waiting is
//! per master as a [`Lock`] waits, on its unlock channel, for a share of
//! the time left (Redisson's `remaining / N`): no polling.
//!
//! Why sequential: a component lock's owner is the calling thread
//! (`<client-uuid>:<thread-id>`, as Java's), so its guard cannot be taken
//! on other threads; asking the masters in parallel would need owners that
//! are not threads. And it would not pay with local masters: the
//! benchmark's best case of parallel asking (raw scripts, a thread per
//! master) is slower than asking one after another on a 2-core machine,
//! where a round trip costs less than the wake-ups (`docs/performance.md`).
//!
//! What RedLock does not guarantee is in `docs/redlock.md`: it assumes
//! bounded process pauses, network delays and clock drift, which Martin
//! Kleppmann's critique shows real systems do not give; use fencing tokens
//! ([`RedLock::fenced`]) for anything that must not be written twice.
//!
//! [`Lock`]: crate::Lock

mod fencing;
mod guard;

pub use guard::RedLockGuard;

use std::time::{Duration, Instant};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::kinds::lock::{Lock, LockGuard};
use crate::kinds::multi_lock::node;
use crate::lease::Lease;
use crate::names;
use crate::wait::patience::Patience;

/// How long a round of [`RedLock::lock`] waits per master, at most
/// (Redisson's `RedissonMultiLock.lock()` waits `1500 ms × N` per try,
/// and RedLock gives each master a share of it).
const ROUND_PER_MASTER: Duration = Duration::from_millis(1_500);

/// A lock over N independent Redis masters, held by a quorum of them.
///
/// Deprecated by Redisson in favour of one Redis with replica
/// acknowledgement and fencing tokens; offered for deployments that
/// already run N independent masters. Read `docs/redlock.md` before using
/// it: its safety rests on timing assumptions.
///
/// ```no_run
/// # fn main() -> Result<(), keyholder::Error> {
/// use std::time::Duration;
/// let masters: Vec<keyholder::Client> = (1..=5)
///     .map(|i| keyholder::Client::open(format!("redis://10.0.0.{i}:6379/")))
///     .collect::<Result<_, _>>()?;
/// let lock = keyholder::RedLock::new(&masters, "payments:settle")?.fenced();
/// if let Some(guard) = lock.try_lock_for(Duration::from_secs(2))? {
///     let token = guard.fencing_token().expect("fenced");
///     // ... write to storage that refuses tokens below the highest seen ...
///     # let _ = token;
///     guard.unlock()?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedLock {
    name: String,
    /// One lock per master, in asking order (by deployment).
    locks: Vec<Lock>,
    lease: Lease,
    fenced: bool,
}

impl RedLock {
    /// A RedLock named `name` over `masters`, one client per independent
    /// Redis master. No I/O.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument),
    /// before any I/O, for no masters, for the same client twice, for two
    /// clients of the same deployment (the same URL's address and
    /// database: its vote would count twice), or for a name
    /// [`Client::lock`] refuses.
    pub fn new(masters: &[Client], name: &str) -> Result<RedLock> {
        if masters.is_empty() {
            return Err(Error::invalid_argument("a RedLock needs at least one master"));
        }
        let mut keyed: Vec<(String, &Client)> = masters.iter().map(|c| (node::identity(c), c)).collect();
        keyed.sort_by(|(a, _), (b, _)| a.cmp(b));
        let mut ids: Vec<&str> = masters.iter().map(Client::id).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return Err(Error::invalid_argument("the same client is twice among a RedLock's masters"));
        }
        if let Some(pair) = keyed.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(Error::invalid_argument(format!(
                "two of a RedLock's masters are the same deployment ({}): its vote would count twice",
                pair[0].0
            )));
        }
        // A master that is down costs its turn, not a wait for it to come
        // back (Redlock asks the next master as soon as possible), so the
        // components do not ride out outages.
        let locks = keyed
            .into_iter()
            .map(|(_, client)| client.lock(name).map(|lock| lock.failing_fast()))
            .collect::<Result<Vec<_>>>()?;
        Ok(RedLock { name: name.to_owned(), locks, lease: Lease::Watchdog, fenced: false })
    }

    /// A handle to the same RedLock whose acquisitions use `lease` on every
    /// master: [`Lease::Watchdog`] (the default) renews each master's lock
    /// while held; a fixed lease is the RedLock algorithm's lease, whose
    /// validity time ends the hold. No I/O.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for
    /// a fixed lease outside 1 ms to 30 days.
    pub fn with_lease(&self, lease: Lease) -> Result<RedLock> {
        let locks = self.locks.iter().map(|l| l.with_lease(lease)).collect::<Result<Vec<_>>>()?;
        Ok(RedLock { locks, lease, ..self.clone() })
    }

    /// A handle to the same RedLock whose acquisitions mint fencing tokens:
    /// one per master, from its `redisson_lock_token:{<name>}` counter, and
    /// a combined token strictly larger for each successive holder (see
    /// [`RedLockGuard::fencing_token`] and `docs/redlock.md`). No I/O.
    pub fn fenced(&self) -> RedLock {
        RedLock { locks: self.locks.iter().map(Lock::fenced).collect(), fenced: true, ..self.clone() }
    }

    /// The lock name, the key on every master.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The per-master locks, in the order the masters are asked (sorted by
    /// deployment); a [`RedLockGuard`]'s master indexes refer to it. Their
    /// waiting calls return a master's outage error at once rather than
    /// ride it out (see
    /// [`ClientBuilder::outage_budget`](crate::ClientBuilder::outage_budget)).
    pub fn locks(&self) -> &[Lock] {
        &self.locks
    }

    /// How many masters must grant the lock: N/2 + 1.
    pub fn quorum(&self) -> usize {
        self.locks.len() / 2 + 1
    }

    /// The lease policy of this handle's acquisitions.
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// True for handles made by [`fenced`](RedLock::fenced).
    pub fn is_fenced(&self) -> bool {
        self.fenced
    }

    /// Acquires the RedLock, waiting as long as it takes: rounds of up to
    /// 1.5 s per master, each ending with what it took released when it
    /// fails.
    ///
    /// # Errors
    ///
    /// As [`try_lock_until`](RedLock::try_lock_until).
    pub fn lock(&self) -> Result<RedLockGuard> {
        let round = ROUND_PER_MASTER.saturating_mul(u32::try_from(self.locks.len()).unwrap_or(u32::MAX));
        loop {
            let deadline = Instant::now().checked_add(round).unwrap_or_else(Instant::now);
            if let Some(guard) = self.try_lock_until(deadline)? {
                return Ok(guard);
            }
        }
    }

    /// One attempt on each master, never waiting for a held lock:
    /// `Ok(None)` when no quorum granted it in its validity time (what was
    /// taken is released).
    ///
    /// # Errors
    ///
    /// As [`try_lock_until`](RedLock::try_lock_until).
    pub fn try_lock(&self) -> Result<Option<RedLockGuard>> {
        self.attempt(Instant::now())
    }

    /// Acquires the RedLock, waiting at most `wait` in all.
    ///
    /// # Errors
    ///
    /// As [`try_lock_until`](RedLock::try_lock_until).
    pub fn try_lock_for(&self, wait: Duration) -> Result<Option<RedLockGuard>> {
        match Patience::within(wait).deadline() {
            Some(deadline) => self.try_lock_until(deadline),
            None => self.lock().map(Some),
        }
    }

    /// Acquires the RedLock, waiting until `deadline` at the latest;
    /// `Ok(None)` if no quorum was had by then. Each attempt asks every
    /// master, waiting for a held one at most its share of the time left;
    /// a failed attempt releases what it took and the next begins, while
    /// time remains.
    ///
    /// # Errors
    ///
    /// When fewer than a quorum of masters answered an attempt at all
    /// (failed, unreachable), the last master's error
    /// ([`ErrorKind::Connection`](crate::ErrorKind::Connection), ...): no
    /// quorum can be had, and waiting would not help.
    /// [`ErrorKind::WrongType`](crate::ErrorKind::WrongType) or
    /// [`ErrorKind::BadFencingCounter`](crate::ErrorKind::BadFencingCounter)
    /// when a quorum is out of reach because masters hold foreign keys.
    pub fn try_lock_until(&self, deadline: Instant) -> Result<Option<RedLockGuard>> {
        loop {
            if let Some(guard) = self.attempt(deadline)? {
                return Ok(Some(guard));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
        }
    }

    /// One attempt: every master asked once (a held one waited on for its
    /// share of the time left before `deadline`).
    fn attempt(&self, deadline: Instant) -> Result<Option<RedLockGuard>> {
        let start = Instant::now();
        let masters = self.locks.len();
        let quorum = self.quorum();
        let share = deadline.saturating_duration_since(start) / u32::try_from(masters).unwrap_or(u32::MAX);
        let mut held: Vec<(usize, LockGuard)> = Vec::with_capacity(masters);
        let (mut refused, mut failed): (usize, Vec<Error>) = (0, Vec::new());
        for (index, lock) in self.locks.iter().enumerate() {
            if refused + failed.len() > masters - quorum {
                // No quorum is possible any more.
                break;
            }
            let until = (Instant::now() + share).min(deadline);
            match lock.try_lock_until(until) {
                Ok(Some(guard)) => held.push((index, guard)),
                Ok(None) => refused += 1,
                Err(e) => {
                    log::debug!("keyholder: RedLock '{}': master {index} failed: {e}", self.name);
                    failed.push(e);
                }
            }
        }
        if held.len() >= quorum {
            let token = if self.fenced { self.combine_tokens(&held)? } else { None };
            if let Some(valid_until) = self.valid_until(start, &held)
                && (!self.fenced || token.is_some())
            {
                return Ok(Some(RedLockGuard::new(held, masters, quorum, valid_until, token)));
            }
        }
        release_all(&self.name, held);
        if masters - failed.len() < quorum
            && let Some(e) = failed.pop()
        {
            // Fewer than a quorum answered: no waiting can help.
            return Err(e);
        }
        Ok(None)
    }

    /// The end of the validity time of an acquisition begun at `start`, if
    /// some is left: lease − elapsed − drift, with the shortest lease among
    /// the masters held (each client has its own watchdog timeout).
    fn valid_until(&self, start: Instant, held: &[(usize, LockGuard)]) -> Option<Instant> {
        let lease = held
            .iter()
            .map(|(index, _)| match self.lease {
                Lease::Fixed(lease) => lease,
                _ => self.locks[*index].client().watchdog_timeout(),
            })
            .min()?;
        let drift = lease / 100 + Duration::from_millis(2);
        let valid_until = start.checked_add(lease)?.checked_sub(drift)?;
        (Instant::now() < valid_until).then_some(valid_until)
    }

    /// The combined fencing token of the masters held, once a quorum of
    /// them has raised its counter to it (see `red_lock/fencing.rs`);
    /// `None` when fewer than a quorum confirmed.
    fn combine_tokens(&self, held: &[(usize, LockGuard)]) -> Result<Option<u64>> {
        let Some(combined) = held.iter().filter_map(|(_, g)| g.fencing_token()).max() else {
            return Ok(None);
        };
        let counter = names::token_key(&self.name);
        let mut confirmed = 0;
        let mut last_error = None;
        for (index, guard) in held {
            let calls = self.locks[*index].client().context().calls();
            let raised = calls.with_live_conn(&self.name, |conn| {
                fencing::raise(calls.scripts(), conn, &self.name, &counter, guard.owner_id(), combined)
            });
            match raised {
                Ok(true) => confirmed += 1,
                Ok(false) => {}
                Err(e) => last_error = Some(e),
            }
        }
        if confirmed >= self.quorum() {
            return Ok(Some(combined));
        }
        match last_error {
            Some(e) if e.is_wrong_type() || e.is_bad_fencing_counter() => Err(e),
            _ => Ok(None),
        }
    }
}

/// Releases an attempt's locks, last taken first, logging failures (a
/// lock whose release failed expires with its lease).
fn release_all(name: &str, held: Vec<(usize, LockGuard)>) {
    for (index, guard) in held.into_iter().rev() {
        if let Err(e) = guard.unlock() {
            log::debug!("keyholder: RedLock '{name}': releasing master {index} failed: {e}");
        }
    }
}
