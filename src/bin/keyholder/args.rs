//! The command line: the deployment to reach (one group of options, also
//! read from the environment), the output format, and the commands.

use clap::{Args, Parser, Subcommand};

/// Inspect, list, force-unlock and watch keyholder and Redisson locks,
/// semaphores and latches on Redis, and check the deployment.
#[derive(Debug, Parser)]
#[command(name = "keyholder", version, long_about = None)]
#[command(
    about = "Inspect, list, force-unlock and watch keyholder and Redisson locks on Redis, and check the deployment"
)]
#[command(after_help = "Exit status: 0 done (doctor: every check ok), 1 an error (Redis unreachable, ...), \
2 a usage error, 3 a force-unlock not confirmed, 4 a watch whose --timeout passed before --count messages, \
5 doctor: warnings (or checks that could not tell) and no failure, 6 doctor: at least one failure.")]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) connection: Connection,

    /// Print JSON instead of tables (one object per line for `watch`).
    #[arg(long, global = true, help_heading = "Output")]
    pub(crate) json: bool,

    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Where Redis is: one of --url, --sentinel with --master, or --cluster
/// (given on the command line, or else in the environment).
#[derive(Debug, Args)]
#[command(next_help_heading = "Connection")]
pub(crate) struct Connection {
    /// The Redis server: redis://[[user]:password@]host[:port][/db],
    /// rediss://... (TLS builds), redis+unix:///path/to/redis.sock.
    /// Default: redis://127.0.0.1:6379/.
    #[arg(long, env = "KEYHOLDER_URL", global = true, value_name = "URL")]
    pub(crate) url: Option<String>,

    /// A sentinel's URL (repeat, or separate with commas); needs --master.
    #[arg(long, env = "KEYHOLDER_SENTINELS", global = true, value_delimiter = ',', value_name = "URL")]
    pub(crate) sentinel: Vec<String>,

    /// The name the sentinels monitor the primary under.
    #[arg(long, env = "KEYHOLDER_MASTER", global = true, value_name = "NAME")]
    pub(crate) master: Option<String>,

    /// A Redis Cluster node's URL (repeat, or separate with commas).
    #[arg(long, env = "KEYHOLDER_CLUSTER", global = true, value_delimiter = ',', value_name = "URL")]
    pub(crate) cluster: Vec<String>,

    /// Through Sentinel: the primary's ACL user.
    #[arg(long, env = "KEYHOLDER_NODE_USERNAME", global = true, value_name = "USER")]
    pub(crate) node_username: Option<String>,

    /// Through Sentinel: the primary's password.
    #[arg(
        long,
        env = "KEYHOLDER_NODE_PASSWORD",
        global = true,
        value_name = "PASSWORD",
        hide_env_values = true
    )]
    pub(crate) node_password: Option<String>,

    /// Through Sentinel: the primary's database index.
    #[arg(long, env = "KEYHOLDER_NODE_DB", global = true, value_name = "INDEX")]
    pub(crate) node_db: Option<i64>,

    /// On a cluster: unlock messages on shard channels (SSUBSCRIBE) or
    /// not; by default as the servers allow (Redis 7+), as the library does.
    #[arg(long, global = true, value_name = "BOOL")]
    pub(crate) sharded_pubsub: Option<bool>,

    /// Count a string key at a lock's name as a hand-rolled lock's holder
    /// (the library's migration mode): `list` shows such keys.
    #[arg(long, global = true)]
    pub(crate) migration_mode: bool,

    /// How long to wait for Redis to connect, and for each reply, in
    /// seconds; the library's default (ClientBuilder::connect_timeout and
    /// command_timeout).
    #[arg(
        long,
        env = "KEYHOLDER_REDIS_TIMEOUT",
        global = true,
        value_name = "SECONDS",
        default_value_t = 3.0
    )]
    pub(crate) redis_timeout: f64,

    #[cfg(feature = "tls")]
    #[command(flatten)]
    pub(crate) tls: Tls,
}

/// TLS settings for rediss:// URLs.
#[cfg(feature = "tls")]
#[derive(Debug, Args)]
#[command(next_help_heading = "Connection")]
pub(crate) struct Tls {
    /// A PEM file of the CA that signed the servers' certificates.
    #[arg(long, env = "KEYHOLDER_TLS_CA", global = true, value_name = "FILE")]
    pub(crate) tls_ca: Option<std::path::PathBuf>,

    /// A PEM file of this client's certificate (mutual TLS); needs --tls-key.
    #[arg(long, env = "KEYHOLDER_TLS_CERT", global = true, value_name = "FILE", requires = "tls_key")]
    pub(crate) tls_cert: Option<std::path::PathBuf>,

    /// A PEM file of this client's private key; needs --tls-cert.
    #[arg(long, env = "KEYHOLDER_TLS_KEY", global = true, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<std::path::PathBuf>,

    /// Through Sentinel: reach the primary over TLS.
    #[arg(long, global = true)]
    pub(crate) node_tls: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// What sits at a name: the kind (lock, fair lock, read-write lock,
    /// semaphore, latch...), holders with hold counts, remaining lease,
    /// permits or count, queues with deadlines, fencing token, subscribers.
    Inspect {
        /// The lock's (semaphore's, latch's) name.
        name: String,
    },
    /// The locks, semaphores and latches whose names match PATTERN, found
    /// with SCAN (every primary of a cluster), never KEYS.
    List {
        /// A SCAN MATCH glob.
        #[arg(default_value = "*")]
        pattern: String,
        /// Stop after this many locks.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
    /// Delete a lock (reentrant, fair or read-write) whoever holds it and
    /// wake a waiter. The holder is not told at once: use it only for a
    /// holder known dead. Asks first unless --yes.
    ForceUnlock {
        /// The lock's name.
        name: String,
        /// Do not ask.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Print the messages of the name's channel as they come (the channel
    /// of the kind found there), following restarts, failovers and slot
    /// moves, until --count of them, --timeout, or Ctrl-C.
    Watch {
        /// The name.
        name: String,
        /// Watch this kind's channel instead of the one found at the name
        /// (reentrant, fair, read-write, semaphore, count-down-latch...).
        #[arg(long, value_name = "KIND")]
        kind: Option<String>,
        /// Exit (status 0) after this many messages.
        #[arg(long, value_name = "N", help_heading = "When to stop")]
        count: Option<u64>,
        /// Exit after this many seconds, saying so on standard error:
        /// status 4 when --count messages did not come by then, 0 without
        /// --count.
        #[arg(long, value_name = "SECONDS", help_heading = "When to stop")]
        timeout: Option<f64>,
    },
    /// Check the deployment against keyholder's guarantees on every
    /// primary (eviction, persistence, replication, clocks, the server,
    /// failover timing, pub/sub, latency, cluster slots). Exit status 0, 5
    /// or 6 (below).
    ///
    /// Read-only, but for one scratch lock with a 5 s lease, removed at the
    /// end (keyholder:doctor:<client id>, a reserved name), whose acquire,
    /// release and wake-up are timed.
    ///
    /// Each check prints what it found, its verdict (ok, warn, fail, or
    /// unknown when the server refused to tell), what that means for held
    /// locks, the guarantee, the docs section and the fix.
    #[command(after_help = "Exit status: 0 every check ok; 5 warnings, or checks that could not tell \
(a command the server refused), and no failure; 6 at least one failure; 1 Redis unreachable or another \
error; 2 a usage error. docs/operations.md, \"Checking a deployment\", explains each check.")]
    Doctor {
        /// The services' command timeout (ClientBuilder::command_timeout),
        /// in seconds, which the server's script time limit is held
        /// against; the library's default.
        #[arg(long, value_name = "SECONDS", default_value_t = 3.0, help_heading = "The services' settings")]
        command_timeout: f64,
        /// The replicas the services' acquisitions wait for
        /// (ClientBuilder::replica_acks); none by default.
        #[arg(
            long,
            value_name = "N",
            conflicts_with = "replica_acks_aof",
            help_heading = "The services' settings"
        )]
        replica_acks: Option<u32>,
        /// As --replica-acks, waiting with WAITAOF
        /// (ClientBuilder::replica_acks_aof).
        #[arg(long, value_name = "N", help_heading = "The services' settings")]
        replica_acks_aof: Option<u32>,
        /// The services' watchdog timeout, the lease their holds are
        /// renewed to (ClientBuilder::watchdog_timeout), in seconds, counted
        /// in how long two holders may overlap after a failover; the
        /// library's default.
        #[arg(long, value_name = "SECONDS", default_value_t = 30.0, help_heading = "The services' settings")]
        watchdog_timeout: f64,
        /// The idle timeout of a NAT, firewall or load balancer between
        /// the services and Redis (350s, 4m, 500ms; seconds without a
        /// unit): the pubsub check fails when the client's connections may
        /// stay silent that long. Not stated by default.
        #[arg(long, value_name = "DURATION", help_heading = "The deployment")]
        idle_drop: Option<String>,
        /// On a Redis Cluster, check that every key and channel derived
        /// from this lock name hashes to its lock key's slot (repeatable).
        #[arg(long = "name", value_name = "NAME", help_heading = "The services' settings")]
        names: Vec<String>,
    },
}
