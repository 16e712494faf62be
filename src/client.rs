//! The client: a connection pool, a pub/sub connection, a watchdog, and an id.
//!
//! `Client` is a cheap handle (`Arc`) shared by locks and guards. The shared
//! state, `Inner`, also belongs to the two background threads; they hold it
//! weakly or through pieces, so they never keep a client alive on their own.
//! When the last `Client`, `Lock` or `LockGuard` goes away (or on
//! [`Client::shutdown`]) the threads stop. Shutting down releases nothing: a
//! live guard still releases its own lock when dropped.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use crate::config::{ClientBuilder, Config};
use crate::connection::{self, Conn, Connector, Pool};
use crate::entry::{Entry, Successor};
use crate::error::{Error, LostReason, Result};
use crate::hold::{Acquisition, Hold};
use crate::lease::Lease;
use crate::lock::Lock;
use crate::names;
use crate::scripts::{Handoff, HandoffArgs, Latch, Release, ReleaseArgs, Scripts};
use crate::subscriber::{Subscriber, Target};
use crate::watchdog::{self, Registry};

/// A keyholder client: the entry point for locks.
///
/// Cheap to clone and safe to share across threads; all clones share one
/// client id, one connection pool, one pub/sub connection and one watchdog
/// thread. Two `Client`s built separately are two owners to each other, like
/// two Redisson instances.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> Result<(), keyholder::Error> {
/// let client = keyholder::Client::open("redis://127.0.0.1:6379/")?;
/// let lock = client.lock("orders:42")?;
/// let guard = lock.lock()?;
/// // ... guarded work ...
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    handle: Arc<Handle>,
}

/// The local state of the locks a client has used.
struct Entries {
    map: HashMap<Arc<str>, Arc<Entry>>,
    /// Drop idle entries when the map grows past this.
    sweep_at: usize,
}

/// Idle entries a client keeps before it sweeps.
const MIN_SWEEP_AT: usize = 1024;

/// Shuts the client down when the last handle goes.
struct Handle {
    inner: Arc<Inner>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.inner.shut_down();
    }
}

pub(crate) struct Inner {
    uuid: uuid::Uuid,
    /// The client id: `uuid` as a string.
    pub(crate) id: String,
    pub(crate) config: Config,
    pool: Pool,
    pub(crate) scripts: Scripts,
    entries: Mutex<Entries>,
    /// Numbers release requests, for their latches.
    next_request: AtomicU64,
    pub(crate) subscriber: Arc<Subscriber>,
    pub(crate) watchdog: Registry,
    next_hold_id: AtomicU64,
    shutdown: AtomicBool,
    /// Dropped on shutdown: its disconnection stops the background threads.
    stop: Mutex<Option<Sender<()>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.inner().id)
            .field("watchdog_timeout", &self.inner().config.watchdog_timeout)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A builder for a client of the Redis server at `url`
    /// (`redis://[[user]:password@]host[:port][/db]`). No I/O happens until
    /// [`ClientBuilder::build`].
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(url)
    }

    /// A client with default settings; shorthand for
    /// `Client::builder(url).build()`.
    ///
    /// # Errors
    ///
    /// As [`ClientBuilder::build`].
    pub fn open(url: impl Into<String>) -> Result<Client> {
        Client::builder(url).build()
    }

    pub(crate) fn start(config: Config) -> Result<Client> {
        let redis_client = redis::Client::open(config.url.as_str())
            .map_err(|e| Error::InvalidConfig(format!("bad redis url: {e}")))?;
        let target = Target::from_info(redis_client.get_connection_info())?;
        let info = redis_client
            .get_connection_info()
            .clone()
            .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
        let redis_client =
            redis::Client::open(info).map_err(|e| Error::InvalidConfig(format!("bad redis url: {e}")))?;
        let connector = Connector::new(redis_client, config.connect_timeout, config.command_timeout);
        let pool = connection::build_pool(connector, config.pool_max_size, config.connect_timeout)?;
        let subscriber = Arc::new(Subscriber::new(target, config.connect_timeout, config.command_timeout));
        let uuid = uuid::Uuid::new_v4();
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let (kick_tx, kick_rx) = crossbeam_channel::bounded::<()>(1);
        let inner = Arc::new(Inner {
            uuid,
            id: uuid.to_string(),
            config,
            pool,
            scripts: Scripts::new(),
            entries: Mutex::new(Entries { map: HashMap::new(), sweep_at: MIN_SWEEP_AT }),
            next_request: AtomicU64::new(1),
            subscriber: Arc::clone(&subscriber),
            watchdog: Registry::new(kick_tx),
            next_hold_id: AtomicU64::new(1),
            shutdown: AtomicBool::new(false),
            stop: Mutex::new(Some(stop_tx)),
            threads: Mutex::new(Vec::new()),
        });
        let short_id: String = inner.id.chars().take(8).collect();
        let subscriber_stop = stop_rx.clone();
        let reader = std::thread::Builder::new()
            .name(format!("keyholder-pubsub-{short_id}"))
            .spawn(move || subscriber.run(subscriber_stop))
            .map_err(|e| Error::InvalidConfig(format!("cannot start the pub/sub thread: {e}")))?;
        inner.threads.lock().push(reader);
        let weak = Arc::downgrade(&inner);
        let period = inner.config.renewal_period();
        let renewer = std::thread::Builder::new()
            .name(format!("keyholder-watchdog-{short_id}"))
            .spawn(move || watchdog::run(weak, period, stop_rx, kick_rx));
        match renewer {
            Ok(handle) => inner.threads.lock().push(handle),
            Err(e) => {
                inner.shut_down();
                return Err(Error::InvalidConfig(format!("cannot start the watchdog thread: {e}")));
            }
        }
        Ok(Client { handle: Arc::new(Handle { inner }) })
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.handle.inner
    }

    /// A lock handle for `name` with the default [`Lease::Watchdog`]. No I/O.
    ///
    /// The Redis key is `name` itself, as in Redisson, so a Java service
    /// calling `getLock(name)` contends for the same lock.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty name, a name longer than
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes, or one with control
    /// characters.
    pub fn lock(&self, name: &str) -> Result<Lock> {
        self.lock_with_lease(name, Lease::Watchdog)
    }

    /// A lock handle for `name` whose acquisitions use `lease`. No I/O.
    ///
    /// # Errors
    ///
    /// As [`lock`](Client::lock), and [`Error::InvalidArgument`] for a fixed
    /// lease outside 1 ms to 30 days.
    pub fn lock_with_lease(&self, name: &str, lease: Lease) -> Result<Lock> {
        names::validate_name(name)?;
        lease.validate()?;
        Ok(Lock::new(self.clone(), name, lease))
    }

    /// This client's id: a v4 UUID made when it was built, the first half of
    /// every owner id it writes.
    pub fn id(&self) -> &str {
        &self.inner().id
    }

    /// The watchdog timeout this client was built with.
    pub fn watchdog_timeout(&self) -> Duration {
        self.inner().config.watchdog_timeout
    }

    /// The number of locks this client's watchdog is renewing.
    pub fn watched_locks(&self) -> usize {
        self.inner().watchdog.len()
    }

    /// The number of unlock channels this client is subscribed to (one per
    /// lock name that has a waiting thread).
    pub fn subscribed_channels(&self) -> usize {
        self.inner().subscriber.channel_count()
    }

    /// Stops the client's background threads and refuses new acquisitions
    /// ([`Error::Shutdown`]); threads waiting for a lock return that error.
    /// Releases nothing: live guards keep their locks, now without renewal,
    /// and still release them when dropped. Dropping the last handle does
    /// the same. Idempotent.
    pub fn shutdown(&self) {
        self.inner().shut_down();
    }

    /// True once the client was shut down.
    pub fn is_shutdown(&self) -> bool {
        self.inner().shutdown.load(Ordering::Acquire)
    }
}

impl Inner {
    /// A pooled connection, waiting at most the connect timeout.
    pub(crate) fn connection(&self) -> Result<r2d2::PooledConnection<Connector>> {
        Ok(self.pool.get()?)
    }

    /// Runs `f` on a pooled connection.
    pub(crate) fn with_conn<T>(&self, f: impl FnOnce(&mut Conn) -> Result<T>) -> Result<T> {
        let mut conn = self.connection()?;
        f(&mut conn)
    }

    pub(crate) fn check_running(&self) -> Result<()> {
        if self.shutdown.load(Ordering::Acquire) { Err(Error::Shutdown) } else { Ok(()) }
    }

    pub(crate) fn next_hold_id(&self) -> u64 {
        self.next_hold_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The local state of lock `name`, created on first use and kept while
    /// the client has few: a lock taken again and again reuses its entry.
    /// Past [`Entries::sweep_at`] entries, idle ones are dropped.
    pub(crate) fn entry(&self, name: &Arc<str>, channel: &Arc<str>, marker: &Arc<str>) -> Arc<Entry> {
        let mut entries = self.entries.lock();
        if let Some(entry) = entries.map.get(name) {
            return Arc::clone(entry);
        }
        let entry = Arc::new(Entry::new(
            Arc::clone(name),
            Arc::clone(channel),
            Arc::clone(marker),
            self.config.fairness_window,
        ));
        if self.shutdown.load(Ordering::Acquire) {
            entry.shut_down();
        }
        entries.map.insert(Arc::clone(name), Arc::clone(&entry));
        if entries.map.len() > entries.sweep_at {
            // Every other reference (a hold, a subscription, a thread at the
            // gate) is made from one that exists, or from the map under this
            // lock: one reference means only the map holds it.
            entries.map.retain(|_, e| Arc::strong_count(e) > 1 || !e.is_idle());
            // Sweep again only after as many new entries: amortised O(1).
            entries.sweep_at = (entries.map.len() * 2).max(MIN_SWEEP_AT);
        }
        entry
    }

    /// Runs a latched release script (`release.lua`, `handoff.lua`) of
    /// `thread` on `entry`'s lock; with `retry`, once more on a fresh
    /// connection if the first reply was lost: the latch makes the retry
    /// return the first outcome rather than release a second hold. A pool
    /// error means the script never ran, so it is not retried.
    fn run_latched<T>(
        &self,
        entry: &Entry,
        thread: u64,
        retry: bool,
        script: impl Fn(&mut Conn, Latch<'_>) -> Result<T>,
    ) -> Result<T> {
        let key = names::unlock_latch(&entry.name, self.uuid.as_u128(), thread);
        let request = self.next_request.fetch_add(1, Ordering::Relaxed);
        let ttl_ms = crate::lease::millis_ceil(self.latch_ttl());
        let latch = Latch { key: &key, ttl_ms, request, retry: false };
        match self.with_conn(|conn| script(conn, latch)) {
            Err(Error::Redis(e)) if retry && connection::is_transport_error(&e) => {
                self.with_conn(|conn| script(conn, Latch { retry: true, ..latch }))
            }
            outcome => outcome,
        }
    }

    /// Releases one of several holds of `thread` (owner id `owner`) on
    /// `entry`'s lock, latched and retried once.
    fn release_nested(&self, entry: &Entry, thread: u64, owner: &str, lease_ms: u64) -> Result<Release> {
        self.run_latched(entry, thread, true, |conn, latch| {
            let args = ReleaseArgs {
                name: &entry.name,
                channel: &entry.channel,
                lease_ms,
                owner,
                latch: Some(latch),
            };
            self.scripts.release(conn, &args)
        })
    }

    /// Releases the last hold of `owner` on `entry`'s lock. This needs no
    /// latch: once the owner's field is gone a retry releases nothing, so it
    /// is retried once, unlatched, if the first reply was lost. Returns the
    /// outcome and whether it is the retry's (whose `NotOwner` most likely
    /// means the first attempt released the lock).
    fn release_last(&self, entry: &Entry, owner: &str, lease_ms: u64) -> (Result<Release>, bool) {
        let args = ReleaseArgs { name: &entry.name, channel: &entry.channel, lease_ms, owner, latch: None };
        match self.with_conn(|conn| self.scripts.release(conn, &args)) {
            Err(Error::Redis(e)) if connection::is_transport_error(&e) => {
                (self.with_conn(|conn| self.scripts.release(conn, &args)), true)
            }
            outcome => (outcome, false),
        }
    }

    /// One unlatched release attempt, to give back what an acquire whose
    /// reply was lost may have taken.
    pub(crate) fn release_orphan(&self, entry: &Entry, owner: &str, lease_ms: u64) -> Result<Release> {
        let args = ReleaseArgs { name: &entry.name, channel: &entry.channel, lease_ms, owner, latch: None };
        self.with_conn(|conn| self.scripts.release(conn, &args))
    }

    /// How long an unlock latch must outlive its first use: a command
    /// timeout for the lost reply, then a connect and a command timeout for
    /// the retry, and a second of slack.
    fn latch_ttl(&self) -> Duration {
        self.config.command_timeout * 2 + self.config.connect_timeout + Duration::from_secs(1)
    }

    /// Releases one guard's share of `hold`.
    pub(crate) fn release(&self, hold: &Arc<Hold>) -> Result<()> {
        if let Some(reason) = hold.lost_reason()
            && hold.entry.has_newer_hold(hold.thread, hold.id)
        {
            // The thread locked again after this hold was lost. Its owner id
            // is the same, and the count in Redis is the new hold's (a new
            // hold resets it), so this release must not touch Redis.
            if hold.drop_guard() == 0 {
                self.finish(hold, false);
            }
            return Err(Error::LockLost { name: hold.entry.name.to_string(), reason });
        }
        if hold.guards() == 1 {
            hold.start_release();
        }
        if hold.guards() == 1
            && hold.token.is_none()
            && let Some(successor) = hold.entry.reserve_successor(hold.id, self.config.fairness_window)
        {
            return self.hand_over(hold, successor);
        }
        let sent = Instant::now();
        let (outcome, retried) = if hold.guards() > 1 {
            (self.release_nested(&hold.entry, hold.thread, &hold.owner, hold.lease_ms), false)
        } else {
            self.release_last(&hold.entry, &hold.owner, hold.lease_ms)
        };
        let guards_left = hold.drop_guard();
        match outcome {
            Ok(Release::StillHeld) => {
                hold.set_deadline(sent + Duration::from_millis(hold.lease_ms));
                if guards_left == 0 {
                    // Redis counts more holds than this client has guards (an
                    // acquire whose reply was lost): stop renewing so the
                    // orphaned count expires with the lease.
                    self.finish(hold, false);
                }
                Ok(())
            }
            Ok(Release::Released) => {
                if guards_left > 0 {
                    hold.mark_lost(LostReason::ReleaseFoundGone);
                }
                self.finish(hold, true);
                Ok(())
            }
            // The first attempt's reply was lost, and it did release.
            Ok(Release::NotOwner) if retried && hold.lost_reason().is_none() => {
                self.finish(hold, true);
                Ok(())
            }
            Ok(Release::NotOwner) => {
                let error = Self::not_owner(hold);
                if guards_left == 0 {
                    self.finish(hold, false);
                }
                Err(error)
            }
            Err(e) => {
                if guards_left == 0 {
                    // Clear local state whatever Redis did: the lock, if
                    // still there, expires with its lease.
                    self.finish(hold, false);
                }
                Err(e)
            }
        }
    }

    /// Releases the last guard of `hold` by handing the lock to `successor`,
    /// a queued thread of this client, in one script call. If another
    /// client's waiter is next in line the script releases instead, and the
    /// successor contends in Redis like any waiter.
    fn hand_over(&self, hold: &Arc<Hold>, successor: Successor) -> Result<()> {
        let entry = &hold.entry;
        let sent = Instant::now();
        let outcome = self.run_latched(entry, hold.thread, true, |conn, latch| {
            let args = HandoffArgs {
                name: &entry.name,
                channel: &entry.channel,
                marker: &entry.marker,
                lease_ms: successor.lease_ms,
                from: &hold.owner,
                to: &successor.owner,
                latch,
            };
            self.scripts.handoff(conn, &args)
        });
        hold.drop_guard();
        let result = match outcome {
            Ok(Handoff::HandedOver) => {
                let Successor { thread, owner, lease, lease_ms, .. } = successor;
                let acquisition = Acquisition { owner, thread, lease, lease_ms, token: None, sent };
                let handed = Arc::new(Hold::new(self.next_hold_id(), Arc::clone(entry), acquisition));
                if lease == Lease::Watchdog {
                    self.watchdog.register(Arc::clone(&handed));
                }
                entry.finish_handoff(Some(handed), false);
                Ok(())
            }
            Ok(Handoff::Released) => {
                entry.finish_handoff(None, true);
                Ok(())
            }
            Ok(Handoff::StillHeld) => {
                entry.finish_handoff(None, false);
                Ok(())
            }
            Ok(Handoff::NotOwner) => {
                entry.finish_handoff(None, false);
                Err(Self::not_owner(hold))
            }
            Err(e) => {
                entry.finish_handoff(None, false);
                Err(e)
            }
        };
        self.finish(hold, false);
        result
    }

    /// The error for a release that found `hold` gone; records the loss.
    fn not_owner(hold: &Hold) -> Error {
        let known = hold.lost_reason();
        hold.mark_lost(LostReason::ReleaseFoundGone);
        let name = hold.entry.name.to_string();
        match known {
            Some(reason) => Error::LockLost { name, reason },
            None => Error::NotOwner { name },
        }
    }

    /// Ends a hold locally: no more renewal, the gate passes on.
    /// `published`: the release published an unlock message.
    fn finish(&self, hold: &Arc<Hold>, published: bool) {
        if hold.finish() {
            self.watchdog.deregister(hold.id);
            hold.entry.release_gate(hold.id, published);
        }
    }

    pub(crate) fn shut_down(&self) {
        if self.shutdown.swap(true, Ordering::AcqRel) {
            return;
        }
        self.stop.lock().take();
        self.subscriber.shut_down();
        let entries: Vec<Arc<Entry>> = self.entries.lock().map.values().cloned().collect();
        for entry in entries {
            entry.shut_down();
        }
        let threads: Vec<JoinHandle<()>> = std::mem::take(&mut *self.threads.lock());
        let me = std::thread::current().id();
        for thread in threads {
            if thread.thread().id() != me {
                let _ = thread.join();
            }
        }
    }
}
