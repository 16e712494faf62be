//! The client: shared command connections, a pub/sub connection, a
//! watchdog, and an id. It only assembles them: the connections are made
//! and checked by `endpoints/wiring.rs`, which this module hands itself
//! back to through `Wired` once it exists.
//!
//! `Client` is a cheap handle (`Arc`) shared by locks and guards. The shared
//! state, `Inner`, also belongs to the two background threads; they hold it
//! weakly or through pieces, so they never keep a client alive on their own.
//! When the last `Client` or `Lock` goes away (or on [`Client::shutdown`])
//! the threads stop. Guards hold only `Inner`: a guard, leaked or not, never
//! keeps the threads running, but a live guard still releases its own lock
//! when dropped.

mod context;

pub(crate) use context::{Calls, Context, Holds, Latch, Repeat};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use crate::config::{ClientBuilder, Config};
use crate::endpoints::{
    Background, BackgroundSignals, Connections, Wired, cluster_connections, primary_connections,
};
use crate::error::{Error, Result};
use crate::holds::deadlines;
use crate::holds::foreign::{self, ForeignUnlocks, HeldLocks};
use crate::holds::renew::Renewers;
use crate::holds::watchdog::{self, Registry, Renewals, Signals};
use crate::names::LockKeys;
use crate::pubsub::router::Subscribers;
use crate::pubsub::sentinel_watch::SentinelWatch;
use crate::pubsub::target::Target;
use crate::store::lanes::Session;
use crate::store::routes::Routes;
use crate::store::scripts::Scripts;
use crate::store::slots::Addr;
use crate::wait::channel::ChannelWaits;
use crate::wait::entry::Entry;
use crate::wait::outage::{self, Outage, OutageClock};
use crate::wait::owed::{self, Owed, OwedWakes, PayWakes};

/// A keyholder client: the entry point for locks.
///
/// Cheap to clone and safe to share across threads; all clones share one
/// client id, its command connections, one pub/sub connection and one
/// watchdog thread. Two `Client`s built separately are two owners to each
/// other, like two Redisson instances.
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
    map: foldhash::HashMap<Arc<str>, Arc<Entry>>,
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
    /// Itself, for the renewers and waits that must not keep it alive.
    this: Weak<Inner>,
    /// The channel waits in use, by channel (see `wait/channel.rs`).
    pub(crate) waits: ChannelWaits,
    pub(crate) uuid: uuid::Uuid,
    /// The client id: `uuid` as a string.
    pub(crate) id: String,
    pub(crate) config: Config,
    /// The command connections, shared by every thread (on a cluster, per
    /// node); closed on shutdown, after which each call opens its own.
    pub(crate) routes: Routes,
    pub(crate) scripts: Scripts,
    entries: Mutex<Entries>,
    /// Numbers release requests, for their latches.
    pub(crate) next_request: AtomicU64,
    /// The pub/sub connection (on a cluster, one per node in use).
    pub(crate) subscribers: Subscribers,
    /// Through Sentinel: the `+switch-master` subscription.
    sentinel_watch: Mutex<Option<Arc<SentinelWatch>>>,
    pub(crate) watchdog: Registry,
    /// The holds listened for on their locks' unlock channels.
    pub(crate) foreign: Arc<ForeignUnlocks>,
    /// How each kind's holds are renewed, one renewer per layout.
    pub(crate) renewers: Renewers,
    next_hold_id: AtomicU64,
    shutdown: AtomicBool,
    /// Dropped on shutdown: its disconnection stops the background threads.
    stop: Mutex<Option<Sender<()>>>,
    threads: Mutex<Vec<Background>>,
    /// Asks the watchdog to verify every hold now.
    verify: Sender<()>,
    /// When the outage its waiters are riding out began (see
    /// `wait/outage.rs`).
    outages: OutageClock,
    /// The wakes its barging releases owe (see `wait/owed.rs`).
    pub(crate) owed: OwedWakes,
    /// Clients with these settings but another watchdog timeout, by that
    /// timeout (the elections' campaigning clients, `election.rs`); shut
    /// down with this one.
    companions: Mutex<HashMap<Duration, Client>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.inner().id)
            .field("watchdog_timeout", &self.inner().config.watchdog_timeout)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// Validates the settings, opens the first command connection (at most
    /// the connect timeout and a command timeout) and starts the client's
    /// pub/sub and watchdog threads.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidConfig`] for a malformed URL, a setting out of
    /// range or unusable TLS settings, before any I/O, or a database index
    /// the server does not have;
    /// [`ErrorKind::AccessDenied`] when the server refuses the credentials
    /// (or their absence); [`ErrorKind::Tls`] when a TLS handshake is
    /// refused, by the server (a client certificate missing or not trusted)
    /// or by this client (a server certificate it does not trust);
    /// [`ErrorKind::Connection`] when Redis cannot be reached within the
    /// connect timeout; [`ErrorKind::Spawn`] when a background thread cannot
    /// be started.
    ///
    /// [`ErrorKind::InvalidConfig`]: crate::ErrorKind::InvalidConfig
    /// [`ErrorKind::AccessDenied`]: crate::ErrorKind::AccessDenied
    /// [`ErrorKind::Tls`]: crate::ErrorKind::Tls
    /// [`ErrorKind::Connection`]: crate::ErrorKind::Connection
    /// [`ErrorKind::Spawn`]: crate::ErrorKind::Spawn
    pub fn build(self) -> Result<Client> {
        Client::start(self.into_config()?)
    }
}

impl Client {
    /// A builder for a client of the Redis server at `url`
    /// (`redis://[[user]:password@]host[:port][/db]`, with the `tls` feature
    /// `rediss://` of the same form, or `redis+unix:///path/to/redis.sock`).
    /// No I/O happens until [`ClientBuilder::build`].
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(url)
    }

    /// A builder for a client that finds its Redis primary through Redis
    /// Sentinel and follows it across failovers.
    ///
    /// `sentinels` are the sentinels' URLs, `redis://[[user]:password@]host:port`
    /// (the credentials are the sentinels' own); `master_name` is the name
    /// they monitor the primary under (`sentinel monitor <name> ...`). The
    /// primary's own credentials and database are set with
    /// [`node_username`](ClientBuilder::node_username),
    /// [`node_password`](ClientBuilder::node_password) and
    /// [`node_database`](ClientBuilder::node_database).
    ///
    /// [`build`](ClientBuilder::build) asks the sentinels in turn for the
    /// primary and checks with `ROLE` that it is one. The client then
    /// listens for `+switch-master` on one sentinel, and asks again whenever
    /// a connection to the primary is refused or a write is refused with
    /// `READONLY`. When the primary moves, the client retires every
    /// connection to the old one, moves its pub/sub connection, wakes every
    /// waiting thread and re-verifies every hold on the new primary: a hold
    /// that did not survive the failover is reported lost
    /// ([`LockGuard::lost_signal`](crate::LockGuard::lost_signal)) at that
    /// moment. See docs/guarantees.md for what survives a failover.
    /// No I/O happens until [`ClientBuilder::build`], which fails with
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) for a
    /// master name no sentinel knows,
    /// [`ErrorKind::AccessDenied`](crate::ErrorKind::AccessDenied) when the
    /// sentinels or the primary refuse the credentials, and
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) when no
    /// sentinel answers. With the `tls` feature,
    /// `node_tls(true)` speaks TLS to the primary; the sentinels are
    /// reached without TLS.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), keyholder::Error> {
    /// let client = keyholder::Client::builder_sentinel(
    ///     ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    ///     "orders-primary",
    /// )
    /// .node_password("secret")
    /// .build()?;
    /// let _guard = client.lock("orders:42")?.lock()?;
    /// # Ok(()) }
    /// ```
    pub fn builder_sentinel<S: Into<String>>(
        sentinels: impl IntoIterator<Item = S>,
        master_name: impl Into<String>,
    ) -> ClientBuilder {
        ClientBuilder::new_sentinel(sentinels.into_iter().map(Into::into).collect(), master_name.into())
    }

    /// A builder for a client of a Redis Cluster, reached through `seeds`:
    /// the URLs of one or more of its nodes,
    /// `redis://[[user]:password@]host:port` (with the `tls` feature,
    /// `rediss://`). Every node is reached with the first seed's
    /// credentials and TLS setting, as cluster nodes share them.
    ///
    /// [`build`](ClientBuilder::build) reads the slot map (`CLUSTER SLOTS`)
    /// from the first seed that answers and checks access on one primary.
    /// Every call about a lock then goes to the primary that serves the
    /// lock's slot (its name's hash tag, shared by every key and channel
    /// derived from it), on shared connections to that node (up to
    /// [`pool_max_size`](ClientBuilder::pool_max_size) per node, opened as
    /// needed). Waiting threads subscribe on that node too, with
    /// `SSUBSCRIBE` where the servers have shard channels (Redis 7 and
    /// newer), as Redisson does; one pub/sub connection per node in use.
    /// The client follows `MOVED` and `ASK` during a resharding and reads
    /// the slot map again after a failover, verifying every hold then: a
    /// hold that did not survive is reported lost at that moment.
    /// docs/cluster.md has the details and measurements.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), keyholder::Error> {
    /// let client = keyholder::Client::builder_cluster([
    ///     "redis://10.0.0.1:6379",
    ///     "redis://10.0.0.2:6379",
    ///     "redis://10.0.0.3:6379",
    /// ])
    /// .build()?;
    /// let _guard = client.lock("orders:42")?.lock()?;
    /// # Ok(()) }
    /// ```
    pub fn builder_cluster<S: Into<String>>(seeds: impl IntoIterator<Item = S>) -> ClientBuilder {
        ClientBuilder::new_cluster(seeds.into_iter().map(Into::into).collect())
    }

    /// A client of a Redis Cluster with default settings; shorthand for
    /// `Client::builder_cluster(seeds).build()`.
    ///
    /// # Errors
    ///
    /// As [`ClientBuilder::build`]; `InvalidConfig` also when the seeds are
    /// no cluster nodes.
    pub fn cluster<S: Into<String>>(seeds: impl IntoIterator<Item = S>) -> Result<Client> {
        Client::builder_cluster(seeds).build()
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
        let uuid = uuid::Uuid::new_v4();
        let connection_name: Arc<str> = Arc::from(format!("keyholder:{uuid}"));
        let short_id: String = uuid.to_string().chars().take(8).collect();
        let signals = BackgroundSignals::new();
        let connections = if config.cluster.is_some() {
            cluster_connections(&config, &connection_name, uuid, &signals, &short_id)?
        } else {
            primary_connections(&config, &connection_name, uuid, &signals)?
        };
        let Connections { routes, subscribers, sharded, wait, on_start } = connections;
        let BackgroundSignals { stop_tx, stop_rx, kick_tx, kick_rx, verify_tx, verify_rx } = signals;
        let watchdog = Registry::new(kick_tx, config.watchdog_timeout);
        let (foreign_kick, foreign_kicked) = crossbeam_channel::bounded::<()>(1);
        let (owed_kick, owed_kicked) = crossbeam_channel::bounded::<()>(1);
        let foreign = Arc::new(ForeignUnlocks::new(foreign_kick));
        subscribers.set_holders(Arc::clone(&foreign) as _);
        let inner = Arc::new_cyclic(|this| Inner {
            this: Weak::clone(this),
            waits: ChannelWaits::default(),
            uuid,
            id: uuid.to_string(),
            config,
            routes,
            scripts: Scripts::new(wait.is_some(), sharded),
            entries: Mutex::new(Entries { map: foldhash::HashMap::default(), sweep_at: MIN_SWEEP_AT }),
            next_request: AtomicU64::new(1),
            subscribers,
            companions: Mutex::new(HashMap::new()),
            sentinel_watch: Mutex::new(None),
            watchdog,
            foreign,
            renewers: Renewers::default(),
            next_hold_id: AtomicU64::new(1),
            shutdown: AtomicBool::new(false),
            stop: Mutex::new(Some(stop_tx)),
            threads: Mutex::new(Vec::new()),
            verify: verify_tx,
            outages: OutageClock::default(),
            owed: OwedWakes::new(owed_kick),
        });
        let wired: Arc<dyn Wired> = Arc::clone(&inner) as Arc<Inner>;
        if let Err(e) = on_start(&wired, &stop_rx, &short_id) {
            inner.shut_down();
            return Err(e);
        }
        let held: Weak<dyn HeldLocks> = Arc::downgrade(&inner) as Weak<Inner>;
        let foreign_stop = stop_rx.clone();
        inner.start_thread(format!("keyholder-held-{short_id}"), "held locks' listener", move || {
            foreign::run(held, foreign_stop, foreign_kicked);
        })?;
        if !inner.config.barging_window.is_zero() {
            let payer: Weak<dyn PayWakes> = Arc::downgrade(&inner) as Weak<Inner>;
            let owed_stop = stop_rx.clone();
            inner.start_thread(
                format!("keyholder-owed-{short_id}"),
                "barging releases' wakes",
                move || {
                    owed::run(payer, owed_stop, owed_kicked);
                },
            )?;
        }
        let weak: Weak<dyn Renewals> = Arc::downgrade(&inner) as Weak<Inner>;
        let deadlines_stop = stop_rx.clone();
        inner.start_thread(format!("keyholder-deadlines-{short_id}"), "lease deadlines", move || {
            deadlines::run(weak, deadlines_stop, kick_rx);
        })?;
        let weak: Weak<dyn Renewals> = Arc::downgrade(&inner) as Weak<Inner>;
        let period = inner.config.renewal_period();
        inner.start_thread(format!("keyholder-watchdog-{short_id}"), "watchdog", move || {
            watchdog::run(weak, period, Signals { stop: stop_rx, verify: verify_rx });
        })?;
        Ok(Client { handle: Arc::new(Handle { inner }) })
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.handle.inner
    }

    /// What a kind sees of this client (see `client/context.rs`).
    pub(crate) fn context(&self) -> Context<'_> {
        self.handle.inner.context()
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
        self.inner().subscribers.channel_count()
    }

    /// The number of pub/sub connections this client has: one, or on a
    /// Redis Cluster one per primary (kept open while idle, so the client
    /// hears at once that a primary died).
    pub fn pubsub_connections(&self) -> usize {
        self.inner().subscribers.connection_count()
    }

    /// Stops the client's background threads and refuses new acquisitions
    /// ([`ErrorKind::Shutdown`](crate::ErrorKind::Shutdown)); threads waiting for a lock return that error.
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

impl Renewals for Inner {
    fn registry(&self) -> &Registry {
        &self.watchdog
    }

    fn watchdog_timeout(&self) -> Duration {
        self.config.watchdog_timeout
    }

    fn renewal_group(&self, name: &str) -> Option<Addr> {
        self.routes.node_of(name)
    }
}

impl Wired for Inner {
    fn subscribers(&self) -> &Subscribers {
        &self.subscribers
    }

    /// The primary moved (a Sentinel failover): retire every command
    /// connection (they go to the old one), stop failing fast, and move the
    /// pub/sub connection, whose reconnection wakes every waiter and has
    /// every hold verified on the new primary.
    fn primary_moved(&self, target: Result<Target>) {
        self.routes.primary_moved();
        // After the connections moved: what was sent before may have been
        // taken on the old primary.
        self.watchdog.primary_moved();
        match (target, &self.subscribers) {
            (Ok(target), Subscribers::One(subscriber)) => subscriber.retarget(target),
            (Ok(_), Subscribers::PerNode(_)) => {}
            (Err(e), _) => log::warn!("keyholder: cannot subscribe on the new primary: {e}"),
        }
    }

    /// Slots of the cluster changed hands (a failover, a resharding):
    /// subscriptions move to the slots' new primaries, and every hold is
    /// verified, so that a holder whose lock did not survive is told.
    fn slots_moved(&self) {
        if let Subscribers::PerNode(nodes) = &self.subscribers {
            nodes.slots_moved();
        }
        self.watchdog.primary_moved();
        let _ = self.verify.try_send(());
    }

    fn keep_sentinel_watch(&self, watch: Arc<SentinelWatch>) {
        *self.sentinel_watch.lock() = Some(watch);
    }

    fn keep_thread(&self, thread: Background) {
        self.threads.lock().push(thread);
    }
}

impl PayWakes for Inner {
    fn owed(&self) -> &OwedWakes {
        &self.owed
    }

    fn pay(&self, owed: &Owed) {
        if owed.entry.is_held_here() {
            return;
        }
        let keys = &owed.entry.keys;
        let publish = self.scripts.publish();
        let wake = |channel: &str, message: &str| {
            let mut command = redis::cmd(publish);
            command.arg(channel).arg(message);
            self.context().calls().with_live_conn(&keys.name, |conn| {
                conn.query::<i64>(&command)?.map_err(|e| Error::from_redis(&keys.name, e))
            })
        };
        // Nobody hears the front client's channel (it stopped waiting, or
        // died): every keyholder waiter listens on the unlock channel.
        let heard = wake(&crate::names::wake_channel(&keys.name, &owed.front), "").and_then(|heard| {
            if heard > 0 { Ok(heard) } else { wake(&keys.channel, crate::store::scripts::UNLOCK_MESSAGE) }
        });
        if let Err(e) = heard {
            log::debug!("keyholder: could not wake the client queued for lock '{}': {e}", keys.name);
        }
    }
}

impl HeldLocks for Inner {
    fn foreign(&self) -> &ForeignUnlocks {
        &self.foreign
    }

    fn subscribers(&self) -> &Subscribers {
        &self.subscribers
    }

    fn check_group(&self, name: &str) -> Option<Addr> {
        self.routes.node_of(name)
    }
}

impl Inner {
    /// Starts one of the client's background threads (`what` names it in
    /// an error), stopped with the client; shuts the client down when the
    /// thread cannot be started.
    fn start_thread(&self, name: String, what: &str, body: impl FnOnce() + Send + 'static) -> Result<()> {
        match Background::spawn(name, body) {
            Ok(thread) => {
                self.threads.lock().push(thread);
                Ok(())
            }
            Err(e) => {
                self.shut_down();
                Err(Error::spawn(what, e))
            }
        }
    }

    /// A weak handle on this client, for what it owns that must not keep
    /// it alive (a hold's renewer).
    pub(crate) fn weak(&self) -> Weak<Inner> {
        Weak::clone(&self.this)
    }

    /// What a kind sees of this client (see `client/context.rs`).
    pub(crate) fn context(&self) -> Context<'_> {
        Context::new(self)
    }

    /// A call's ride through outages (see `wait/outage.rs`): for at most
    /// the client's outage budget if the call `waits`, else none (every
    /// error returned at once). Failures further apart than a waiter's
    /// longest pause plus two attempts are different outages.
    pub(crate) fn outage(&self, waits: bool) -> Outage<'_> {
        let budget = if waits { self.config.outage_budget } else { Duration::ZERO };
        let attempt = self.config.connect_timeout + self.config.command_timeout;
        Outage::new(&self.outages, budget, outage::MAX_BACKOFF + 2 * attempt)
    }

    /// The client's command connections (for the admin calls of
    /// `admin.rs`, which reach every node).
    pub(crate) fn routes(&self) -> &Routes {
        &self.routes
    }

    /// Runs `f` in a session on the shared connections (see
    /// `store/lanes.rs`) that reach the lock whose key is `key`.
    pub(crate) fn with_conn<T>(&self, key: &str, f: impl FnOnce(&mut Session<'_>) -> Result<T>) -> Result<T> {
        f(&mut self.routes.session(key)?)
    }

    /// Runs `f` like [`with_conn`](Inner::with_conn), and once more if a
    /// connection it used turned out dead (dropped or reset, not slow): the
    /// second run goes out on new connections. Only for calls that are safe
    /// to repeat: reads, renewals, a new hold's acquire (it sets the count
    /// to 1), leaving a lock's queue.
    pub(crate) fn with_live_conn<T>(
        &self,
        key: &str,
        f: impl Fn(&mut Session<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut session = self.routes.session(key)?;
        let outcome = f(&mut session);
        if !session.is_dead() {
            return outcome;
        }
        drop(session);
        self.with_conn(key, f)
    }

    /// Checks a lock name before any I/O (see `names.rs`), on a Redis
    /// Cluster also that its keys share one slot.
    pub(crate) fn validate_name(&self, name: &str) -> Result<()> {
        crate::names::validate_name(name)?;
        if self.routes.cluster().is_some() {
            crate::names::validate_cluster_name(name)?;
        }
        Ok(())
    }

    pub(crate) fn check_running(&self) -> Result<()> {
        if self.shutdown.load(Ordering::Acquire) { Err(Error::shutdown()) } else { Ok(()) }
    }

    pub(crate) fn next_hold_id(&self) -> u64 {
        self.next_hold_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Forgets a hold whose last guard was released: no more renewal, no
    /// more listening for its lock's unlocks.
    pub(crate) fn forget_hold(&self, hold_id: u64) {
        self.watchdog.deregister(hold_id);
        self.foreign.remove(hold_id, &self.subscribers);
    }

    /// Runs `unlock`, a force unlock of the lock at key `name` that returns
    /// whether it deleted one, and then marks this client's holds of `name`
    /// from before it lost ([`LostReason::Gone`](crate::LostReason::Gone)):
    /// they are gone, and this client knows it without a message.
    pub(crate) fn force_unlocking(&self, name: &str, unlock: impl FnOnce() -> Result<bool>) -> Result<bool> {
        let before = self.foreign.holds_of(name);
        let deleted = unlock()?;
        if deleted {
            self.foreign.mark_gone(&before);
        }
        Ok(deleted)
    }

    /// The local state of lock `name`, created on first use and kept while
    /// the client has few: a lock taken again and again reuses its entry.
    /// Past [`Entries::sweep_at`] entries, idle ones are dropped.
    pub(crate) fn entry(&self, name: &Arc<str>) -> Arc<Entry> {
        let mut entries = self.entries.lock();
        if let Some(entry) = entries.map.get(name) {
            return Arc::clone(entry);
        }
        let entry = Arc::new(Entry::new(LockKeys::new(name, &self.id)));
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

    /// A client with this one's settings but `watchdog_timeout`, started
    /// at the first call and shared by later ones, shut down with this
    /// one: the elections' campaigning client, whose watchdog renews
    /// leaderships with the election's lease (`election.rs`). This client
    /// when its own watchdog timeout is that.
    pub(crate) fn companion(&self, watchdog_timeout: Duration) -> Result<Client> {
        let mut companions = self.companions.lock();
        // Checked under the lock: a shutdown after it finds the new one.
        self.check_running()?;
        if let Some(client) = companions.get(&watchdog_timeout) {
            return Ok(client.clone());
        }
        let mut config = self.config.clone();
        config.watchdog_timeout = watchdog_timeout;
        let client = Client::start(config)?;
        companions.insert(watchdog_timeout, client.clone());
        Ok(client)
    }

    pub(crate) fn shut_down(&self) {
        if self.shutdown.swap(true, Ordering::AcqRel) {
            return;
        }
        // Before the connections close: nobody here takes these locks back.
        owed::pay_all(self);
        self.stop.lock().take();
        for companion in std::mem::take(&mut *self.companions.lock()).into_values() {
            companion.shutdown();
        }
        self.subscribers.shut_down();
        if let Some(watch) = self.sentinel_watch.lock().as_ref() {
            watch.shut_down();
        }
        let entries: Vec<Arc<Entry>> = self.entries.lock().map.values().cloned().collect();
        for entry in entries {
            entry.shut_down();
        }
        let threads: Vec<Background> = std::mem::take(&mut *self.threads.lock());
        // Each thread stops within a connect and a command timeout (a
        // renewal or a reconnect in flight), except the pub/sub reader while
        // it resolves a host name, which has no timeout: it is waited for
        // that long, then left to exit on its own.
        let bound = self.config.connect_timeout + self.config.command_timeout;
        for thread in threads {
            thread.stop(bound);
        }
        // Close the connections: a guard still held (or leaked) must not
        // keep them. Its release opens a connection of its own.
        self.routes.close();
    }
}
