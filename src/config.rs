//! Building a client: every setting, its default, and its validation.

use std::time::Duration;

mod url;

use crate::error::{Error, Result};
use crate::lease::{MAX_LEASE, for_people};

pub(crate) use self::url::{check_url, without_credentials};

/// The default most command connections: with the pub/sub connection, 16
/// per server, the most a managed Redis plan's budget should see from one
/// client.
const DEFAULT_COMMAND_CONNECTIONS: u32 = 15;

/// The default idle timeout of a command connection: below the shortest
/// idle cut-off of the cloud defaults (Azure's load balancer, 4 min; AWS's
/// NAT gateway, 350 s; GCP's Cloud NAT, 10 min and more), with room for
/// the pool's reaper, which runs every 30 s.
const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(180);

/// The default maximum lifetime of a command connection: r2d2's and
/// HikariCP's default, long enough that reconnects cost nothing
/// measurable, short enough that connections follow a load balancer's new
/// backends and a managed service's maintenance within the half hour.
const DEFAULT_MAX_LIFETIME: Duration = Duration::from_secs(30 * 60);

/// The default number of idle connections kept open, in reserve, per node.
const DEFAULT_MIN_IDLE: u32 = 1;

/// The longest idle timeout and maximum lifetime accepted.
const MAX_CONNECTION_AGE: Duration = Duration::from_secs(24 * 3600);

/// The settings a client was built with.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// The server's URL; unused through Sentinel.
    pub(crate) url: String,
    /// Where the sentinels are and the master's name, for a client that
    /// finds its primary through Sentinel.
    pub(crate) sentinel: Option<SentinelSettings>,
    /// The seed nodes' URLs, for a client of a Redis Cluster.
    pub(crate) cluster: Option<ClusterSeeds>,
    /// Shard channels on a cluster: forced on or off, or (`None`) used
    /// when the servers have them.
    pub(crate) sharded_pubsub: Option<bool>,
    /// Credentials and database of the primary found through Sentinel.
    pub(crate) node: NodeSettings,
    pub(crate) pool_max_size: u32,
    /// A command connection unused this long is not used again (`None`:
    /// never).
    pub(crate) idle_timeout: Option<Duration>,
    /// A command connection open this long is not used again (`None`:
    /// never).
    pub(crate) max_lifetime: Option<Duration>,
    /// Idle command connections kept open in reserve, per node.
    pub(crate) min_idle: u32,
    pub(crate) connect_timeout: Duration,
    pub(crate) command_timeout: Duration,
    pub(crate) watchdog_timeout: Duration,
    pub(crate) fairness_window: Duration,
    /// Barging between clients (issue 24): see `ClientBuilder::barging_window`.
    pub(crate) barging_window: Duration,
    /// How long a waiting call rides out an outage (zero: not at all).
    pub(crate) outage_budget: Duration,
    /// What to wait for after each write, and for how long.
    pub(crate) replica_acks: Option<ReplicaAcks>,
    /// Missing acknowledgements of an acquisition or release are errors.
    pub(crate) replica_acks_required: bool,
    /// A string key at a lock's name is a hand-rolled lock's holder.
    pub(crate) migration_mode: bool,
    /// Root CA, client certificate and the tests-only opt-out.
    #[cfg(feature = "tls")]
    pub(crate) tls: crate::tls::TlsOptions,
}

/// The acknowledgement every write of a lock waits for
/// ([`ClientBuilder::replica_acks`], [`ClientBuilder::replica_acks_aof`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaAcks {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
    /// `WAITAOF`, with the primary's own fsync when `Some(true)`; `None`:
    /// `WAIT`.
    pub(crate) aof_local: Option<bool>,
}

/// The sentinels of a client that finds its primary through Sentinel.
#[derive(Clone)]
pub(crate) struct SentinelSettings {
    /// `redis://[[user]:password@]host:port`, the sentinels' own credentials.
    pub(crate) urls: Vec<String>,
    pub(crate) master: String,
}

/// Never prints the sentinels' credentials.
impl std::fmt::Debug for SentinelSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<String> = self.urls.iter().map(|url| without_credentials(url)).collect();
        f.debug_struct("SentinelSettings").field("urls", &urls).field("master", &self.master).finish()
    }
}

/// The seed node URLs of a cluster client,
/// `redis://[[user]:password@]host:port`: every node is reached with the
/// first one's credentials and TLS setting.
#[derive(Clone)]
pub(crate) struct ClusterSeeds(pub(crate) Vec<String>);

/// Never prints the nodes' credentials.
impl std::fmt::Debug for ClusterSeeds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.iter().map(|url| without_credentials(url))).finish()
    }
}

/// How to log in to a primary found through Sentinel (a URL carries these
/// itself).
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct NodeSettings {
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) database: i64,
    /// TLS to the primary, with the builder's TLS settings.
    pub(crate) tls: bool,
}

/// Never prints the password.
impl std::fmt::Debug for NodeSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeSettings")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("database", &self.database)
            .field("tls", &self.tls)
            .finish()
    }
}

/// The default outage budget: Redisson's retry budget, `retryAttempts` 3
/// × `retryInterval` 1.5 s.
const DEFAULT_OUTAGE_BUDGET: Duration = Duration::from_millis(4_500);

/// The shortest watchdog timeout accepted (renewal every 10 ms).
pub const MIN_WATCHDOG_TIMEOUT: Duration = Duration::from_millis(30);

/// A builder for [`Client`](crate::Client): consuming setters, each with a documented
/// default, and validation in [`build`](ClientBuilder::build) rather than
/// panics, since lock settings often come from configuration files.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
///
/// # fn main() -> Result<(), keyholder::Error> {
/// let client = keyholder::Client::builder("redis://127.0.0.1:6379/")
///     .pool_max_size(32)
///     .command_timeout(Duration::from_secs(1))
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until build() is called"]
pub struct ClientBuilder {
    config: Config,
}

impl ClientBuilder {
    pub(crate) fn new(url: impl Into<String>) -> Self {
        ClientBuilder {
            config: Config {
                url: url.into(),
                sentinel: None,
                cluster: None,
                sharded_pubsub: None,
                node: NodeSettings::default(),
                pool_max_size: DEFAULT_COMMAND_CONNECTIONS,
                idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
                max_lifetime: Some(DEFAULT_MAX_LIFETIME),
                min_idle: DEFAULT_MIN_IDLE,
                connect_timeout: Duration::from_secs(3),
                command_timeout: Duration::from_secs(3),
                watchdog_timeout: Duration::from_secs(30),
                fairness_window: Duration::from_millis(10),
                barging_window: DEFAULT_BARGING_WINDOW,
                outage_budget: DEFAULT_OUTAGE_BUDGET,
                replica_acks: None,
                replica_acks_required: false,
                migration_mode: false,
                #[cfg(feature = "tls")]
                tls: crate::tls::TlsOptions::default(),
            },
        }
    }

    pub(crate) fn new_cluster(seeds: Vec<String>) -> Self {
        let mut builder = ClientBuilder::new(String::new());
        builder.config.cluster = Some(ClusterSeeds(seeds));
        builder
    }

    pub(crate) fn new_sentinel(urls: Vec<String>, master: String) -> Self {
        let mut builder = ClientBuilder::new(String::new());
        builder.config.sentinel = Some(SentinelSettings { urls, master });
        builder
    }

    /// Whether a Redis Cluster client's unlock messages go out on shard
    /// channels (`SPUBLISH`, heard with `SSUBSCRIBE` on the slot's primary)
    /// or on plain ones (`PUBLISH`, which every node relays to every
    /// other). Default: shard channels when the servers have them (Redis 7
    /// and newer), as Redisson's default `shardedSubscriptionMode` AUTO
    /// does. Java and Rust services sharing locks must agree: set `false`
    /// for Redisson clients configured with `shardedSubscriptionMode` OFF.
    /// Ignored by clients of one server.
    pub fn sharded_pubsub(mut self, sharded: bool) -> Self {
        self.config.sharded_pubsub = Some(sharded);
        self
    }

    /// The ACL user to log in to the primary as, for a client built with
    /// [`Client::builder_sentinel`](crate::Client::builder_sentinel) (a
    /// `redis://` URL carries its user itself). The sentinels' own
    /// credentials go in their URLs.
    ///
    /// Defaults to none (the `default` user).
    pub fn node_username(mut self, username: impl Into<String>) -> Self {
        self.config.node.username = Some(username.into());
        self
    }

    /// The password to log in to the primary with, for a client built with
    /// [`Client::builder_sentinel`](crate::Client::builder_sentinel).
    ///
    /// Defaults to none.
    pub fn node_password(mut self, password: impl Into<String>) -> Self {
        self.config.node.password = Some(password.into());
        self
    }

    /// The database index of the primary's locks, for a client built with
    /// [`Client::builder_sentinel`](crate::Client::builder_sentinel).
    ///
    /// Defaults to 0.
    pub fn node_database(mut self, database: i64) -> Self {
        self.config.node.database = database;
        self
    }

    /// Speaks TLS to the primary (and the replica promoted after it), for a
    /// client built with
    /// [`Client::builder_sentinel`](crate::Client::builder_sentinel), with
    /// the builder's TLS settings
    /// ([`tls_ca_certificate`](ClientBuilder::tls_ca_certificate) and the
    /// rest); the primary's certificate must name the address the sentinels
    /// give for it (often an IP address). The sentinels themselves are
    /// reached without TLS. (A `rediss://` URL says as much by itself.)
    ///
    /// Defaults to false. Requires the `tls` feature.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn node_tls(mut self, tls: bool) -> Self {
        self.config.node.tls = tls;
        self
    }

    /// The most command connections the client opens, shared by all of its
    /// threads. A thread that finds every connection busy queues its
    /// command for the next batch on one of them: whoever's turn it is
    /// writes every queued command in one write and reads the replies in
    /// order, so far more threads than connections keep Redis busy (one
    /// client measured at or above a connection per thread from 1 to 512
    /// threads with 15). Connections are opened as threads first need them
    /// at once, kept while the client lives, and none is held while a
    /// thread waits for a lock.
    ///
    /// Defaults to 15: with its pub/sub connection and its tracking one
    /// (removal alarms and renewals, opened once a lock is held for 20 ms),
    /// a client opens at most 17 connections to a server (or to each
    /// cluster node). Must be at
    /// least 1. (Redisson's `connectionPoolSize` is 64, one command per
    /// connection at a time.) Connections idle in reserve
    /// ([`min_idle_connections`](ClientBuilder::min_idle_connections))
    /// count towards it.
    pub fn pool_max_size(mut self, size: u32) -> Self {
        self.config.pool_max_size = size;
        self
    }

    /// How long a command connection may go unused before it is closed and
    /// replaced: a connection idle this long is never written to again (a
    /// call that finds its lane's connection past it takes another, without
    /// any I/O on the old one), and an idle one held in reserve is closed
    /// within 30 s of it. `None`: never.
    ///
    /// Networks drop idle flows without a word: a NAT or a load balancer
    /// that forgot a connection swallows what is sent on it, and the call
    /// would wait out the whole command timeout before failing. Every
    /// socket also has TCP keepalive on (first probe after 60 s idle), which
    /// keeps most such mappings alive; this bound holds where keepalive
    /// probes do not count as traffic or do not get through.
    ///
    /// The pub/sub connection is kept as trustworthy: it is probed with
    /// PING after half this much silence, whether or not a thread waits
    /// (so a healthy one is never silent this long, and no NAT forgets
    /// it), replaced when a PING goes unanswered for the command timeout,
    /// and replaced before a waiter subscribes on it if it heard nothing
    /// for longer than this (its probes could not run). `None`: it is
    /// probed only while threads wait.
    ///
    /// Defaults to 3 min: below the shortest of the cloud defaults (Azure's
    /// load balancer forgets an idle flow after 4 min, AWS's NAT gateway
    /// after 350 s, GCP's Cloud NAT after 10 min or more), reaper included.
    /// At most 24 h.
    pub fn connection_idle_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.config.idle_timeout = timeout;
        self
    }

    /// How long a command connection may stay open at all: one older than
    /// this is not used again (a call that finds it takes another, without
    /// any I/O on the old one), and an idle one held in reserve is closed
    /// within 30 s of it. Spreads a client's reconnects over time and lets
    /// its connections follow a load balancer's new backends or a managed
    /// service's maintenance. `None`: never.
    ///
    /// Defaults to 30 min (r2d2's default). At most 24 h.
    pub fn connection_max_lifetime(mut self, lifetime: Option<Duration>) -> Self {
        self.config.max_lifetime = lifetime;
        self
    }

    /// How many idle command connections each node keeps open in reserve,
    /// opened and replaced on the process's pool maintenance thread, so
    /// that a thread that needs a new connection (its lane's was closed,
    /// or more threads call at once than before) usually finds one ready
    /// instead of connecting. A thread that finds none connects by itself,
    /// within the connect timeout, and never waits for that thread. The
    /// reserve counts towards [`pool_max_size`](ClientBuilder::pool_max_size):
    /// none is kept once every lane has a connection.
    ///
    /// Defaults to 1. 0 opens connections only when a call needs one. At
    /// most `pool_max_size`.
    pub fn min_idle_connections(mut self, connections: u32) -> Self {
        self.config.min_idle = connections;
        self
    }

    /// How long to wait for a connection to Redis (with `rediss://`, its
    /// TLS handshake included). A command queued behind others on a shared
    /// connection waits at most this and the command timeout for its reply.
    ///
    /// Defaults to 3 s (Redisson's `connectTimeout` is 10 s; `timeout` 3 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// The read and write timeout of every command, and the time a waiter
    /// waits for Redis to confirm a subscription. While threads wait, the
    /// pub/sub connection is probed with PING after this much silence (or
    /// half the [idle timeout](ClientBuilder::connection_idle_timeout), if
    /// shorter, which also applies while none waits), and it is replaced if
    /// the probe gets no answer within it.
    ///
    /// Defaults to 3 s (Redisson's `timeout`).
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.config.command_timeout = timeout;
        self
    }

    /// The lease of a lock taken with [`Lease::Watchdog`](crate::Lease::Watchdog):
    /// the key's TTL, renewed every third of it while held. If the process
    /// dies, its locks free themselves within this time.
    ///
    /// Defaults to 30 s (Redisson's `lockWatchdogTimeout`). 30 ms to 30 days.
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.config.watchdog_timeout = timeout;
        self
    }

    /// How long one client may keep a contended lock among its own threads.
    ///
    /// Within the window, counted from when the lock came to this client, a
    /// release hands the lock straight to the next waiting thread of the same
    /// client, in one round trip and without waking anyone else. Past it, the
    /// release serves the next client in the lock's queue in Redis (keyholder
    /// clients queue there in arrival order), so other clients wait about a
    /// window plus a hold per client ahead of them, while most hand-offs stay
    /// local. Zero turns local hand-off off. Java clients do not queue; they
    /// race for each release, as among themselves.
    ///
    /// Defaults to 10 ms. At most 1 h.
    pub fn fairness_window(mut self, window: Duration) -> Self {
        self.config.fairness_window = window;
        self
    }

    /// How long a waiting call rides out an outage: Redis unreachable (a
    /// restart, a Sentinel or cluster failover, a network cut) or not
    /// serving yet (`LOADING`, `MASTERDOWN`, `CLUSTERDOWN`, `TRYAGAIN`).
    ///
    /// A thread blocked in `lock()` (of any kind), `acquire`, or a latch's
    /// `await_for` keeps waiting while Redis is away: it sleeps until the
    /// client's pub/sub connection is back (or a back-off of 50 ms doubling
    /// to 1 s), tries again, and acquires once Redis serves again. It gives
    /// up with the connection error once the outage has lasted this long,
    /// counted from the first failure the client's waiters saw, or at its
    /// own deadline (`try_lock_for`, `try_lock_until`, `await_for`) if that
    /// comes first. Calls that do not wait (`try_lock`, queries, releases)
    /// fail at once. Zero gives the error at the first failure.
    ///
    /// Defaults to 4.5 s (Redisson's retry budget: `retryAttempts` 3 ×
    /// `retryInterval` 1.5 s), which covers a restart and a graceful
    /// failover; to ride out an unplanned failover, set it above the time
    /// the failover takes (Sentinel's `down-after-milliseconds` plus the
    /// election, or the cluster's `cluster-node-timeout` plus the
    /// election). At most 1 h.
    pub fn outage_budget(mut self, budget: Duration) -> Self {
        self.config.outage_budget = budget;
        self
    }

    /// Waits, after every acquisition, release, hand-off and renewal, until
    /// `replicas` replicas have the write or `timeout` passes (`WAIT`, in the
    /// same round trip as the script, as Redisson's `syncSlaves`), so that a
    /// lock survives a failover to an acknowledged replica. A lock handed
    /// over (to another thread of the client, or granted to a queued client
    /// by another client's release) carries the acknowledgement of the write
    /// that made it: a granted holder confirms the grant with a write and a
    /// `WAIT` of its own, one round trip more.
    ///
    /// Not reaching them is never silent: the guard's
    /// [`is_replicated`](crate::LockGuard::is_replicated) turns false (and a
    /// warning is logged), or, with
    /// [`replica_acks_required`](ClientBuilder::replica_acks_required), a new
    /// hold is given back and the acquisition fails with
    /// [`ErrorKind::ReplicaAcks`](crate::ErrorKind::ReplicaAcks), as does a
    /// release. The timeout must be shorter than the command timeout; keep
    /// it well under a third of the watchdog timeout too: a renewal's reply
    /// waits for the `WAIT`, and one heard after the hold's lease deadline
    /// cannot save it (the hold was reported lost at the deadline, since
    /// the client could not know the renewal had reached Redis).
    ///
    /// Off by default. [`replica_acks_aof`](ClientBuilder::replica_acks_aof)
    /// waits for the append-only files instead; the later of the two calls
    /// is the one that counts.
    pub fn replica_acks(mut self, replicas: u32, timeout: Duration) -> Self {
        self.config.replica_acks = Some(ReplicaAcks { replicas, timeout, aof_local: None });
        self
    }

    /// As [`replica_acks`](ClientBuilder::replica_acks), with `WAITAOF`
    /// (Redis 7.2 or newer, Valkey) instead of `WAIT`: after every write of
    /// a lock, waits until the write is fsynced to the append-only file of
    /// `replicas` replicas and, with `local`, of the primary itself, or
    /// until `timeout` passes (`WAITAOF local replicas timeout`, in the same
    /// round trip as the script, as Redisson's `syncAOF`). A lock then
    /// survives a failover to an acknowledged replica even if that replica
    /// restarts, and, with `local`, a restart of the primary itself (with
    /// `appendfsync everysec`, the server's default, a crash can otherwise
    /// lose the last second of writes, and with it a hold).
    ///
    /// `local` or at least one replica; the timeout must be shorter than
    /// the command timeout. Every replica must run with `appendonly yes`
    /// to be counted; the primary too with `local`. Not reaching them is
    /// handled as with `replica_acks` (the guard's
    /// [`is_replicated`](crate::LockGuard::is_replicated), or
    /// [`replica_acks_required`](ClientBuilder::replica_acks_required)).
    ///
    /// [`build`](ClientBuilder::build) fails with
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) when
    /// the server refuses `WAITAOF`: one older than Redis 7.2 (which does
    /// not know the command), or, with `local`, one without `appendonly
    /// yes`. On a cluster, the node that serves slot 0 is asked. A server
    /// that refuses it later (a failover to an older one, appendonly turned
    /// off) acknowledges nothing, and says why in a logged warning.
    ///
    /// Off by default; the later of this and `replica_acks` counts.
    pub fn replica_acks_aof(mut self, local: bool, replicas: u32, timeout: Duration) -> Self {
        self.config.replica_acks = Some(ReplicaAcks { replicas, timeout, aof_local: Some(local) });
        self
    }

    /// Makes missing replica acknowledgements of acquisitions and releases
    /// errors instead of a flag on the guard (see
    /// [`replica_acks`](ClientBuilder::replica_acks)). Re-entries and
    /// renewals only ever clear the flag.
    ///
    /// Defaults to false.
    pub fn replica_acks_required(mut self, required: bool) -> Self {
        self.config.replica_acks_required = required;
        self
    }

    /// Migration mode, for rolling out keyholder over code that locks with
    /// hand-rolled `SET key token NX PX` (or `SETNX` + `EXPIRE`): a string
    /// key at a lock's name counts as a lock held by a legacy holder instead
    /// of being an [`ErrorKind::WrongType`](crate::ErrorKind::WrongType)
    /// error. [`Lock::try_lock`](crate::Lock::try_lock) returns `Ok(None)`;
    /// [`lock`](crate::Lock::lock) and the timed forms wait until the key is
    /// deleted or expires, re-checking at its PTTL (a legacy holder
    /// publishes nothing when it deletes its key, so that is when a waiter
    /// finds out); a run-once [`Job`](crate::Job) is skipped. The key is
    /// only read, never modified. A string key without a TTL is
    /// [`ErrorKind::LegacyLockWithoutTtl`](crate::ErrorKind::LegacyLockWithoutTtl):
    /// waiting on it could last forever (a waiting call first gives it 1 s to
    /// get one, as `SETNX` + `EXPIRE` sets it a round trip late). Old code is kept out while
    /// keyholder holds a lock because its `SET NX` fails on keyholder's hash.
    ///
    /// Per lock: [`Lock::with_migration_mode`](crate::Lock::with_migration_mode).
    /// See `docs/migrating.md` for the rollout.
    ///
    /// Defaults to false: outside a migration a string at a lock's name is
    /// a mistake (a name shared with unrelated data), and reporting it is
    /// safer than waiting on it; and each acquire attempt in migration mode
    /// costs the script one more `TYPE`.
    pub fn migration_mode(mut self, on: bool) -> Self {
        self.config.migration_mode = on;
        self
    }

    /// Trusts the certificates in `pem` (one or more PEM `CERTIFICATE`
    /// blocks, the contents of a `ca.crt`) as the roots for the server's
    /// certificate, instead of the system's. For a Redis whose certificate
    /// a private CA signed. Needs a `rediss://` URL; the server's
    /// certificate must name the URL's host (a DNS name or an IP address).
    ///
    /// Defaults to the system's roots. A PEM that holds no certificate fails
    /// [`build`](ClientBuilder::build) with
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig); a
    /// server certificate these roots do not vouch for, with
    /// [`ErrorKind::Tls`](crate::ErrorKind::Tls). Requires the `tls` feature.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = keyholder::Client::builder("rediss://redis.internal:6380/")
    ///     .tls_ca_certificate(std::fs::read("/etc/redis/tls/ca.crt")?)
    ///     .tls_client_certificate(
    ///         std::fs::read("/etc/redis/tls/client.crt")?,
    ///         std::fs::read("/etc/redis/tls/client.key")?,
    ///     )
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_ca_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.config.tls.ca_pem = Some(pem.into());
        self
    }

    /// Presents a client certificate for mutual TLS: `cert_pem`, its chain
    /// (the client's certificate first), and `key_pem`, its private key
    /// (PKCS#8, PKCS#1 or SEC1 PEM), for a server that checks clients'
    /// certificates (`tls-auth-clients yes`). Needs a `rediss://` URL.
    ///
    /// Defaults to none. A key that does not parse or does not match the
    /// certificate fails [`build`](ClientBuilder::build) with
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig); a
    /// server that refuses the certificate (or its absence), with
    /// [`ErrorKind::Tls`](crate::ErrorKind::Tls). Requires the `tls` feature.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.config.tls.client_pem = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// **Turns off the checks of the server's certificate: for tests
    /// only.** With `true`, the client accepts any certificate for any
    /// name, so anyone on the network path can pose as Redis, read the
    /// client's traffic and forge its locks. Encryption stays on. A warning
    /// is logged when the client is built. redis-rs's `#insecure` URL
    /// fragment (`rediss://host:port/#insecure`) does the same.
    ///
    /// Defaults to false. Requires the `tls` feature.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn danger_accept_invalid_certs(mut self, accept: bool) -> Self {
        self.config.tls.accept_invalid_certs = accept;
        self
    }

    /// The settings, validated (before any I/O).
    pub(crate) fn into_config(self) -> Result<Config> {
        self.config.validate()?;
        Ok(self.config)
    }
}

// ---- Barging between clients (issue 24, item 3; ADR 48) ----------------

/// The default barging window: none. Measured on W6 (8 single-thread
/// clients), no window bought throughput on a 2-core machine (CPU per
/// acquisition is the limit there, not the hand-over), while a window costs
/// a cross-client hand-over up to the 2 ms head start when the releaser does
/// not come back (see `docs/performance.md`, "Barging window", and ADR 48).
const DEFAULT_BARGING_WINDOW: Duration = Duration::ZERO;

/// The longest barging window accepted.
const MAX_BARGING_WINDOW: Duration = Duration::from_secs(60);

impl ClientBuilder {
    /// How long the first client in a lock's queue may wait while releases
    /// let the lock be taken back (barging) instead of handing it to that
    /// client: eventual fairness, as `parking_lot`'s.
    ///
    /// While the client at the front of the lock's queue in Redis (keyholder
    /// clients queue there in arrival order) has waited less than this, by
    /// Redis's clock, the release of a lock's last hold leaves the lock free
    /// and wakes that client, which races for it: the releasing client, any
    /// of its threads, usually takes it back first, in one round trip and
    /// with no wake-up of another process on the lock's path. Once the front
    /// client has waited longer, each release hands the lock to it, in
    /// arrival order, as with zero. So a waiting client waits about the
    /// window and a hold more, at most, before the lock is handed to it
    /// (plus a hold per client ahead of it once the queue runs in order).
    /// Zero: every release hands the lock to the next queued client (strict
    /// arrival order between clients, the behaviour before 0.1's issue 24).
    /// Not used while Redisson waiters listen on the lock (they take turns
    /// with the queue), nor by the fair lock, which keeps exact FIFO.
    /// Independent of [`fairness_window`](ClientBuilder::fairness_window),
    /// which bounds hand-offs among this client's own threads.
    ///
    /// Defaults to zero (off: strict arrival order between clients). At
    /// most 60 s.
    pub fn barging_window(mut self, window: Duration) -> Self {
        self.config.barging_window = window;
        self
    }
}

impl Config {
    /// The barging window's check (see [`Config::validate`]).
    fn validate_barging(&self) -> Result<()> {
        if self.barging_window > MAX_BARGING_WINDOW {
            return Err(Error::invalid_config(format!(
                "barging_window {} is over 60 s",
                for_people(self.barging_window)
            )));
        }
        Ok(())
    }
}

// ---- End of barging between clients -------------------------------------

impl Config {
    pub(crate) fn validate(&self) -> Result<()> {
        let invalid = |what: String| Err(Error::invalid_config(what));
        match (&self.sentinel, &self.cluster) {
            (Some(sentinel), _) => sentinel.urls.iter().try_for_each(|url| check_url(url))?,
            (None, Some(ClusterSeeds(seeds))) => seeds.iter().try_for_each(|url| check_url(url))?,
            (None, None) => check_url(&self.url)?,
        }
        if self.sentinel.is_none() && self.node != NodeSettings::default() {
            return invalid(
                "node_username, node_password, node_database and node_tls are for clients built with \
                 Client::builder_sentinel; a URL carries them itself"
                    .into(),
            );
        }
        #[cfg(feature = "tls")]
        if self.sentinel.is_some() && self.tls.is_set() && !self.node.tls {
            return invalid(
                "TLS settings for a client built with Client::builder_sentinel need node_tls(true)".into(),
            );
        }
        if let Some(ClusterSeeds(seeds)) = &self.cluster {
            if seeds.is_empty() {
                return invalid("a cluster client needs at least one seed node URL".into());
            }
            let scheme = |url: &str| url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
            if seeds.iter().any(|url| scheme(url) != scheme(&seeds[0])) {
                return invalid("the cluster's seed URLs mix schemes (redis:// and rediss://)".into());
            }
        }
        if self.pool_max_size == 0 {
            return invalid("pool_max_size must be at least 1".into());
        }
        if self.min_idle > self.pool_max_size {
            return invalid(format!(
                "min_idle_connections {} is over pool_max_size {}",
                self.min_idle, self.pool_max_size
            ));
        }
        for (name, value) in
            [("connection_idle_timeout", self.idle_timeout), ("connection_max_lifetime", self.max_lifetime)]
        {
            if let Some(value) = value
                && (value.is_zero() || value > MAX_CONNECTION_AGE)
            {
                return invalid(format!("{name} {} is outside (0, 24 h]", for_people(value)));
            }
        }
        for (name, value) in
            [("connect_timeout", self.connect_timeout), ("command_timeout", self.command_timeout)]
        {
            if value.is_zero() || value > Duration::from_secs(3600) {
                return invalid(format!("{name} {} is outside (0, 1 h]", for_people(value)));
            }
        }
        if let Some(ReplicaAcks { replicas, timeout, aof_local }) = self.replica_acks {
            let timed = !timeout.is_zero() && timeout < self.command_timeout;
            match aof_local {
                None if replicas == 0 || !timed => {
                    return invalid(format!(
                        "replica_acks({replicas}, {}) needs at least one replica and a timeout in \
                         (0, command_timeout)",
                        for_people(timeout)
                    ));
                }
                Some(local) if (replicas == 0 && !local) || !timed => {
                    return invalid(format!(
                        "replica_acks_aof({local}, {replicas}, {}) needs the local fsync or at least \
                         one replica, and a timeout in (0, command_timeout)",
                        for_people(timeout)
                    ));
                }
                _ => {}
            }
        }
        if self.fairness_window > Duration::from_secs(3600) {
            return invalid(format!("fairness_window {} is over 1 h", for_people(self.fairness_window)));
        }
        self.validate_barging()?;
        if self.outage_budget > Duration::from_secs(3600) {
            return invalid(format!("outage_budget {} is over 1 h", for_people(self.outage_budget)));
        }
        if self.watchdog_timeout < MIN_WATCHDOG_TIMEOUT || self.watchdog_timeout > MAX_LEASE {
            return invalid(format!(
                "watchdog_timeout {} is outside {} ..= {}",
                for_people(self.watchdog_timeout),
                for_people(MIN_WATCHDOG_TIMEOUT),
                for_people(MAX_LEASE)
            ));
        }
        Ok(())
    }

    /// How often the watchdog renews: a third of the watchdog timeout.
    pub(crate) fn renewal_period(&self) -> Duration {
        self.watchdog_timeout / 3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        ClientBuilder::new("redis://127.0.0.1/").config
    }

    #[test]
    fn defaults_match_the_docs() {
        let c = config();
        assert_eq!(c.pool_max_size, 15);
        assert_eq!(c.idle_timeout, Some(Duration::from_secs(180)));
        assert_eq!(c.max_lifetime, Some(Duration::from_secs(1800)));
        assert_eq!(c.min_idle, 1);
        assert_eq!(c.connect_timeout, Duration::from_secs(3));
        assert_eq!(c.command_timeout, Duration::from_secs(3));
        assert_eq!(c.watchdog_timeout, Duration::from_secs(30));
        assert_eq!(c.renewal_period(), Duration::from_secs(10));
        assert_eq!(c.fairness_window, Duration::from_millis(10));
        assert_eq!(c.barging_window, Duration::ZERO);
        assert_eq!(c.outage_budget, Duration::from_millis(4_500));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn debug_output_hides_every_password() {
        let builder = ClientBuilder::new_sentinel(
            vec!["redis://:sentinel-secret@10.0.0.1:26379".to_owned(), "redis://10.0.0.2:26379".to_owned()],
            "orders".to_owned(),
        )
        .node_username("app")
        .node_password("node-secret");
        let printed = format!("{builder:?}");
        assert!(!printed.contains("secret"), "{printed}");
        assert!(printed.contains("10.0.0.1:26379") && printed.contains("app"), "{printed}");
    }

    #[test]
    fn out_of_range_settings_are_refused() {
        let bad = [
            Config { pool_max_size: 0, ..config() },
            Config { min_idle: 16, ..config() },
            Config { idle_timeout: Some(Duration::ZERO), ..config() },
            Config { max_lifetime: Some(Duration::from_secs(24 * 3600 + 1)), ..config() },
            Config { connect_timeout: Duration::ZERO, ..config() },
            Config { command_timeout: Duration::from_secs(7200), ..config() },
            Config { watchdog_timeout: Duration::from_millis(29), ..config() },
            Config { fairness_window: Duration::from_secs(3601), ..config() },
            Config { barging_window: Duration::from_millis(60_001), ..config() },
            Config { outage_budget: Duration::from_secs(3601), ..config() },
            Config { node: NodeSettings { database: 1, ..NodeSettings::default() }, ..config() },
        ];
        for c in bad {
            assert!(c.validate().unwrap_err().is_invalid(), "{c:?}");
        }
        let never = Config { idle_timeout: None, max_lifetime: None, min_idle: 0, ..config() };
        assert!(never.validate().is_ok(), "no idle timeout, no lifetime, no reserve");
        assert!(Config { min_idle: 15, ..config() }.validate().is_ok());
    }

    #[test]
    fn replica_acks_need_something_to_wait_for_within_the_command_timeout() {
        let acks = |replicas, millis, aof_local| Config {
            replica_acks: Some(ReplicaAcks { replicas, timeout: Duration::from_millis(millis), aof_local }),
            ..config()
        };
        let refused = [acks(0, 500, None), acks(1, 0, None), acks(1, 3_000, None), acks(0, 500, Some(false))];
        for c in refused {
            assert!(c.validate().unwrap_err().is_invalid(), "{:?}", c.replica_acks);
        }
        let accepted = [acks(1, 500, None), acks(0, 500, Some(true)), acks(2, 500, Some(false))];
        for c in accepted {
            assert!(c.validate().is_ok(), "{:?}", c.replica_acks);
        }
        let builder =
            ClientBuilder::new("redis://127.0.0.1/").replica_acks_aof(true, 0, Duration::from_millis(5));
        let aof = ReplicaAcks { replicas: 0, timeout: Duration::from_millis(5), aof_local: Some(true) };
        assert_eq!(builder.config.replica_acks, Some(aof), "the later call counts");
        let wait = builder.replica_acks(1, Duration::from_millis(5)).config.replica_acks;
        assert_eq!(wait.and_then(|acks| acks.aof_local), None);
    }
}
