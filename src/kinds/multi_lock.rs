//! MultiLock: all of several locks, or none (Redisson's `RedissonMultiLock`).
//!
//! A MultiLock has no Redis data of its own: it composes handles of one
//! lock kind (by default [`Lock`](crate::Lock)s; any [`Handle`], as Redisson's takes any
//! `RLock`), which may belong to different clients (servers, Sentinel
//! deployments, cluster shards), and takes each with its own protocol, so a
//! Java `RedissonMultiLock` over the same names contends correctly with it.
//!
//! Why it is built this way:
//! - **Order.** The locks are taken in one order every process agrees on,
//!   sorted by (deployment, name) (see `multi_lock/node.rs`), not in the order
//!   given: two MultiLocks over overlapping sets then cannot deadlock, since
//!   neither can hold a lock the other needs while waiting for one it holds
//!   ahead of it. (Redisson takes them in list order.)
//! - **All or none.** A component not acquired in time, or failing, makes
//!   the whole attempt fail: the components already taken are released
//!   before the call returns.
//! - **Bounded.** The deadline of `try_lock_for`/`try_lock_until` is the
//!   whole call's: each component waits until it at most (and makes one
//!   attempt when it has passed). `lock` runs rounds of `1.5 s` per lock
//!   (Redisson's `waitTime`), each ending with everything released when it
//!   fails, so even processes that name a server two ways (and so order
//!   differently) cannot deadlock for longer than a round.
//! - **No polling.** Each component waits as its kind does (a [`Lock`](crate::Lock) on
//!   its own unlock channel).

mod guard;
pub(crate) mod lost_signals;
pub(crate) mod node;

pub use guard::MultiLockGuard;
pub use lost_signals::{Lost, LostSignals};

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::kinds::family::{Guard, Handle, Kind};
use crate::kinds::lock::{Lock, Reentrant};
use crate::wait::patience::Patience;

/// A round of [`MultiLock::lock`] lasts this long per lock (Redisson's
/// `RedissonMultiLock.lock()` waits `locks × 1500 ms` per try).
const ROUND_PER_LOCK: Duration = Duration::from_millis(1_500);

/// All of several locks, or none.
///
/// Made of handles of one kind ([`Lock`](crate::Lock)s by default; [`FairLock`]s,
/// [`SpinLock`]s, [`ReadLock`]s or [`WriteLock`]s as well), of one client
/// or of several (other servers,
/// other shards of a cluster); acquired in a consistent order, all of them
/// or none, and released together when the [`MultiLockGuard`] is dropped.
/// Reentrant as its components are: a thread that holds the MultiLock (or
/// some of its locks) re-enters those.
///
/// ```no_run
/// # fn main() -> Result<(), keyholder::Error> {
/// use std::time::Duration;
/// let a = keyholder::Client::open("redis://10.0.0.1:6379/")?;
/// let b = keyholder::Client::open("redis://10.0.0.2:6379/")?;
/// let both = keyholder::MultiLock::new(vec![a.lock("account:1")?, b.lock("account:2")?])?;
/// if let Some(guard) = both.try_lock_for(Duration::from_secs(2))? {
///     // ... move money between the two accounts ...
///     guard.unlock()?;
/// }
/// # Ok(()) }
/// ```
///
/// [`FairLock`]: crate::FairLock
/// [`SpinLock`]: crate::SpinLock
/// [`ReadLock`]: crate::ReadLock
/// [`WriteLock`]: crate::WriteLock
#[derive(Clone)]
pub struct MultiLock<K: Kind = Reentrant> {
    /// In acquisition order.
    locks: Vec<Handle<K>>,
}

impl<K: Kind> std::fmt::Debug for MultiLock<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiLock").field("locks", &self.locks).finish()
    }
}

impl MultiLock {
    /// A MultiLock over `locks`, reentrant [`Lock`](crate::Lock)s. No I/O.
    /// [`of`](MultiLock::of) takes handles of any kind.
    ///
    /// # Errors
    ///
    /// As [`of`](MultiLock::of).
    pub fn new(locks: impl IntoIterator<Item = Lock>) -> Result<MultiLock> {
        MultiLock::of(locks)
    }
}

impl<K: Kind> MultiLock<K> {
    /// A MultiLock over `locks`, handles of one kind (fair locks, spin
    /// locks, read or write sides of read-write locks, or reentrant locks as
    /// with [`new`](MultiLock::new)). No I/O.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), keyholder::Error> {
    /// let client = keyholder::Client::open("redis://127.0.0.1:6379/")?;
    /// let readers = keyholder::MultiLock::of([
    ///     client.read_write_lock("catalog")?.read(),
    ///     client.read_write_lock("prices")?.read(),
    /// ])?;
    /// let _both = readers.lock()?;
    /// # Ok(()) }
    /// ```
    ///
    /// The locks may come from several clients. They are acquired sorted by
    /// (deployment, name), whatever the order given: see
    /// [`locks`](MultiLock::locks).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for
    /// no locks at all, or for the same lock twice: the same name on the
    /// same deployment, through one client or two (two clients are two
    /// owners, so the second could never be taken while the first is held).
    pub fn of(locks: impl IntoIterator<Item = Handle<K>>) -> Result<Self> {
        let mut keyed: Vec<(String, Handle<K>)> =
            locks.into_iter().map(|lock| (node::identity(lock.client()), lock)).collect();
        if keyed.is_empty() {
            return Err(Error::invalid_argument("a MultiLock needs at least one lock"));
        }
        keyed.sort_by(|(a, x), (b, y)| (a.as_str(), x.name()).cmp(&(b.as_str(), y.name())));
        if let Some(pair) = keyed.windows(2).find(|w| w[0].0 == w[1].0 && w[0].1.name() == w[1].1.name()) {
            return Err(Error::invalid_argument(format!(
                "lock '{}' of {} is twice in one MultiLock",
                pair[0].1.name(),
                pair[0].0
            )));
        }
        Ok(MultiLock { locks: keyed.into_iter().map(|(_, lock)| lock).collect() })
    }

    /// The locks, in the order they are acquired (sorted by deployment,
    /// then name).
    pub fn locks(&self) -> &[Handle<K>] {
        &self.locks
    }

    /// Acquires every lock, waiting as long as it takes.
    ///
    /// Runs rounds of `1.5 s` per lock: a round that does not get them all
    /// releases what it took and the next begins at once (no sleep: each
    /// component waits for its unlock message). An outage is ridden out as
    /// by [`Lock::lock`](crate::Lock::lock), across rounds, within the longest outage budget of
    /// the components' clients.
    ///
    /// # Errors
    ///
    /// The first error a component's acquisition returns (see
    /// [`Lock::lock`](crate::Lock::lock)); what was taken is released first.
    pub fn lock(&self) -> Result<MultiLockGuard<K>> {
        let round = ROUND_PER_LOCK.saturating_mul(u32::try_from(self.locks.len()).unwrap_or(u32::MAX));
        // A component rides out an outage until the round's end at most
        // (`wait/outage.rs`). One still riding it then goes on in the next
        // round; one that gave up before (its client's outage budget was
        // spent) ends the call, as does the longest budget of the
        // components' clients since the first such round began.
        let budget = self.locks.iter().map(|l| l.client().context().config().outage_budget).max();
        let mut outage_since: Option<Instant> = None;
        loop {
            let started = Instant::now();
            let deadline = started.checked_add(round).unwrap_or(started);
            match self.try_lock_until(deadline) {
                Ok(Some(guard)) => return Ok(guard),
                Ok(None) => outage_since = None,
                Err(e) if e.is_outage() && Instant::now() >= deadline => {
                    let since = *outage_since.get_or_insert(started);
                    if budget.is_none_or(|b| since.elapsed() >= b) {
                        return Err(e);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One attempt at each lock, never waiting: `Ok(None)` if any of them is
    /// held elsewhere (what was taken is released).
    ///
    /// # Errors
    ///
    /// As [`lock`](MultiLock::lock).
    pub fn try_lock(&self) -> Result<Option<MultiLockGuard<K>>> {
        self.try_lock_until(Instant::now())
    }

    /// Acquires every lock, waiting at most `wait` for the whole; `Ok(None)`
    /// when they were not all acquired in time (what was taken is released).
    ///
    /// # Errors
    ///
    /// As [`lock`](MultiLock::lock).
    pub fn try_lock_for(&self, wait: Duration) -> Result<Option<MultiLockGuard<K>>> {
        match Patience::within(wait).deadline() {
            Some(deadline) => self.try_lock_until(deadline),
            None => self.lock().map(Some),
        }
    }

    /// Acquires every lock, waiting until `deadline` at the latest;
    /// `Ok(None)` when they were not all acquired by then. Each lock gets
    /// at least one attempt, so a call whose deadline has passed still tries
    /// each (while the earlier ones succeed).
    ///
    /// # Errors
    ///
    /// As [`lock`](MultiLock::lock).
    pub fn try_lock_until(&self, deadline: Instant) -> Result<Option<MultiLockGuard<K>>> {
        let mut guards = Vec::with_capacity(self.locks.len());
        for lock in &self.locks {
            match lock.try_lock_until(deadline) {
                Ok(Some(guard)) => guards.push(guard),
                // Dropping `guards` releases what was taken, last first.
                Ok(None) => {
                    release_all(guards);
                    return Ok(None);
                }
                Err(e) => {
                    release_all(guards);
                    return Err(e);
                }
            }
        }
        Ok(Some(MultiLockGuard::new(guards)))
    }

    /// True if this thread holds every lock, as Redis sees it (one
    /// `HMGET` per lock).
    ///
    /// # Errors
    ///
    /// As [`Handle::is_held_by_current_thread`].
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        for lock in &self.locks {
            if !lock.is_held_by_current_thread()? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Releases guards last-taken first, logging (not returning) failures: the
/// caller reports why it gave up, and a lock whose release failed expires
/// with its lease.
fn release_all<K: Kind>(guards: Vec<Guard<K>>) {
    for guard in guards.into_iter().rev() {
        let name = guard.name().to_owned();
        if let Err(e) = guard.unlock() {
            log::warn!("keyholder: releasing lock '{name}' of a failed MultiLock attempt failed: {e}");
        }
    }
}
