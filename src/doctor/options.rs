//! [`DoctorOptions`]: the settings the doctor checks the deployment
//! against. By default the client's own; an operator's tool names those of
//! the services instead.

use std::time::Duration;

use crate::config::Config;

/// What [`Client::doctor`](crate::Client::doctor) checks the deployment
/// against: the settings of the services that lock on it. Each defaults to
/// the setting of the client that runs the doctor, so a service that
/// checks itself at start-up passes `&DoctorOptions::default()`; the
/// `keyholder doctor` tool, whose own client is not the services', takes
/// them on its command line.
///
/// ```
/// use std::time::Duration;
///
/// let options = keyholder::DoctorOptions::new()
///     .command_timeout(Duration::from_secs(1))   // default: the client's
///     .replica_acks(1)                           // default: the client's (none)
///     .watchdog_timeout(Duration::from_secs(30)) // default: the client's
///     .idle_drop(Duration::from_secs(350));      // default: not stated
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DoctorOptions {
    command_timeout: Option<Duration>,
    replica_acks: Option<Acks>,
    watchdog_timeout: Option<Duration>,
    idle_drop: Option<Duration>,
    names: Vec<String>,
}

/// The replica acknowledgement the services wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Acks {
    /// Replicas to wait for; 0: none.
    pub(super) replicas: u32,
    /// With `WAITAOF` (`replica_acks_aof`) rather than `WAIT`.
    pub(super) aof: bool,
}

/// The settings resolved against the client's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Settings {
    pub(super) command_timeout: Duration,
    pub(super) acks: Acks,
    /// The lease a holder's watchdog renews
    /// ([`ClientBuilder::watchdog_timeout`](crate::ClientBuilder::watchdog_timeout)).
    pub(super) watchdog_timeout: Duration,
    /// The command connections' idle timeout (`None`: never idle out).
    pub(super) idle_timeout: Option<Duration>,
    /// The NAT or firewall idle timeout the operator states; `None`: not
    /// stated.
    pub(super) idle_drop: Option<Duration>,
    /// Shard channels on a cluster: forced on or off, or (`None`) used
    /// when the servers have them.
    pub(super) sharded_pubsub: Option<bool>,
    /// How the client finds its primaries.
    pub(super) deployment: Deployment,
}

/// How the client finds its primaries: what fails a primary over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Deployment {
    /// One server's URL: no automatic failover.
    Single,
    /// The master Sentinel names.
    Sentinel,
    /// A Redis Cluster.
    Cluster,
}

impl Settings {
    /// The crate's defaults, for the checks' unit tests.
    #[cfg(test)]
    pub(super) fn default_for_tests() -> Settings {
        Settings {
            command_timeout: Duration::from_secs(3),
            acks: Acks { replicas: 0, aof: false },
            watchdog_timeout: Duration::from_secs(30),
            idle_timeout: Some(Duration::from_secs(180)),
            idle_drop: None,
            sharded_pubsub: None,
            deployment: Deployment::Single,
        }
    }
}

impl DoctorOptions {
    /// The client's own settings (as [`Default`]).
    pub fn new() -> DoctorOptions {
        DoctorOptions::default()
    }

    /// The services' command timeout
    /// ([`ClientBuilder::command_timeout`](crate::ClientBuilder::command_timeout)),
    /// which the `server` check holds the server's script time limit
    /// against. Default: the client's.
    #[must_use]
    pub fn command_timeout(mut self, timeout: Duration) -> DoctorOptions {
        self.command_timeout = Some(timeout);
        self
    }

    /// The replicas the services' acquisitions wait for with `WAIT`
    /// ([`ClientBuilder::replica_acks`](crate::ClientBuilder::replica_acks));
    /// 0 for none. The `replication` check fails when fewer replicas are
    /// connected. Default: the client's setting (none unless it set one).
    #[must_use]
    pub fn replica_acks(mut self, replicas: u32) -> DoctorOptions {
        self.replica_acks = Some(Acks { replicas, aof: false });
        self
    }

    /// As [`replica_acks`](DoctorOptions::replica_acks), for services that
    /// wait with `WAITAOF`
    /// ([`ClientBuilder::replica_acks_aof`](crate::ClientBuilder::replica_acks_aof)):
    /// the `server` check warns when the server has no `WAITAOF` (Redis
    /// before 7.2). Default: the client's setting.
    #[must_use]
    pub fn replica_acks_aof(mut self, replicas: u32) -> DoctorOptions {
        self.replica_acks = Some(Acks { replicas, aof: true });
        self
    }

    /// The services' watchdog timeout, the lease their holds are renewed
    /// to ([`ClientBuilder::watchdog_timeout`](crate::ClientBuilder::watchdog_timeout)),
    /// which the `failover` check counts in how long two holders may
    /// overlap when the old holder is cut off with the old primary.
    /// Default: the client's.
    #[must_use]
    pub fn watchdog_timeout(mut self, timeout: Duration) -> DoctorOptions {
        self.watchdog_timeout = Some(timeout);
        self
    }

    /// The idle timeout of a NAT, firewall or load balancer between the
    /// services and Redis, as the operator knows it (AWS's NAT gateway
    /// drops flows idle for 350 s): the `pubsub` check fails when the
    /// client's connections may stay silent that long (a dropped flow goes
    /// unnoticed until the next command or PING). Default: not stated, and
    /// the check says so.
    #[must_use]
    pub fn idle_drop(mut self, timeout: Duration) -> DoctorOptions {
        self.idle_drop = Some(timeout);
        self
    }

    /// Lock names the `cluster_names` check looks at, on a Redis Cluster:
    /// whether every key and channel derived from each (its unlock
    /// channel, fencing counter, queue...) hashes to the lock key's slot.
    /// Added to those given before. Default: none.
    #[must_use]
    pub fn names<I, S>(mut self, names: I) -> DoctorOptions
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.names.extend(names.into_iter().map(Into::into));
        self
    }

    /// The names given.
    pub(super) fn lock_names(&self) -> &[String] {
        &self.names
    }

    /// These options, a setting not given taken from `config`.
    pub(super) fn settings(&self, config: &Config) -> Settings {
        let own = config
            .replica_acks
            .map(|acks| Acks { replicas: acks.replicas, aof: acks.aof_local.is_some() })
            .unwrap_or(Acks { replicas: 0, aof: false });
        Settings {
            command_timeout: self.command_timeout.unwrap_or(config.command_timeout),
            acks: self.replica_acks.unwrap_or(own),
            watchdog_timeout: self.watchdog_timeout.unwrap_or(config.watchdog_timeout),
            idle_timeout: config.idle_timeout,
            idle_drop: self.idle_drop,
            sharded_pubsub: config.sharded_pubsub,
            deployment: if config.cluster.is_some() {
                Deployment::Cluster
            } else if config.sentinel.is_some() {
                Deployment::Sentinel
            } else {
                Deployment::Single
            },
        }
    }
}
