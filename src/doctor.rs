//! Checking a deployment against the guarantees it must give (issue 37):
//! [`Client::doctor`] reads what each primary says of itself and hands
//! back a [`Report`] of typed checks, for the `keyholder doctor` tool and
//! for services that check themselves at start-up.
//!
//! One concept per file: `report.rs` the report's types, `options.rs` the
//! settings the deployment is checked against, `facts.rs` reading a
//! primary (`INFO`, `CONFIG GET`; pure parsing, unit-tested), and one file
//! per check, each a pure function of a primary's facts and the settings:
//! `eviction.rs`, `persistence.rs`, `server.rs`, `replication.rs`,
//! `clocks.rs`, `failover.rs` (over what `facts.rs` asks the sentinels),
//! `pubsub.rs`;
//! and three that measure and read beyond the facts:
//! `latency.rs` (round trips and a scratch lock, timed), `access.rs` (a
//! dry run of every kind's scripts as the ACL user) and `cluster.rs`
//! (a Redis Cluster's slots, and the slots of the names given). The
//! clocks are read by `skew.rs` (each replica's `TIME` against its
//! primary's) into the facts before the checks run; `replicas.rs` opens
//! one connection to each replica, on which it reads the replica's clock
//! and its own settings, and runs the eviction and persistence checks on
//! them.
//!
//! It sits above the kinds and the admin module (it reuses the admin's
//! way of sending commands on a primary's session); nothing below imports
//! it. Read-only, but for the latency check's scratch lock under the
//! reserved name `keyholder:doctor:<client id>` and the access check's
//! under the same prefix (a 5 s lease or TTL, removed at the end).

mod access;
mod clocks;
mod cluster;
mod eviction;
mod facts;
mod failover;
mod latency;
mod options;
mod persistence;
mod pubsub;
mod replicas;
mod replication;
mod report;
mod server;
mod skew;

pub use options::DoctorOptions;
pub use report::{Check, Figure, Level, Report, Verdict};

use facts::Facts;
use options::Settings;

use crate::client::Client;
use crate::error::Result;
use crate::store::lanes::Session;
use crate::store::routes::Routes;

/// One check: a pure function of a primary's facts and the settings.
type Run = fn(&Facts, &Settings) -> Check;

/// The checks, in the order the report lists them.
const CHECKS: [Run; 7] =
    [eviction::run, persistence::run, replication::run, clocks::run, server::run, failover::run, pubsub::run];

/// Names given to a deployment that is no cluster.
const NAMES_NOT_CLUSTER: &str = "the names given are checked on a Redis Cluster only: a single server keeps \
                                 every key of a lock in one place";

impl Client {
    /// Checks the deployment this client talks to against the guarantees
    /// keyholder's locks rely on, on every primary (a Redis Cluster's
    /// each): whether the server may evict a held lock (`eviction`), what a
    /// restart loses (`persistence`), the replicas and the
    /// acknowledgements the services wait for (`replication`), the clocks
    /// the fencing tokens rest on (`clocks`), the server's version and
    /// what it lacks (`server`), how fast a primary is failed over against
    /// the services' timeouts and lease (`failover`), and what the server
    /// and the network do to the pub/sub connection that wakes waiters
    /// (`pubsub`), the round trips and a scratch lock's acquire, release
    /// and wake-up against the command timeout (`latency`), whether the ACL
    /// user may run every kind's scripts (`access`), and on a Redis
    /// Cluster its slots (`cluster`) and those of the names given
    /// (`cluster_names`). Each [`Check`] says what it found, its
    /// [`Verdict`], the guarantee, the docs section and the fix;
    /// [`Report::worst`] sums them up.
    ///
    /// `options` names the services' settings the deployment is checked
    /// against; [`DoctorOptions::default`] takes this client's own.
    ///
    /// One pipelined round trip per primary of read-only commands (`INFO`
    /// of four sections, `CONFIG GET` of eleven settings; through Sentinel,
    /// `SENTINEL MASTER` on each sentinel); each replica's `TIME` on a
    /// connection of its own, between two of its primary's; then 50 `PING`s
    /// and a scratch lock, `keyholder:doctor:<client id>` (a reserved
    /// name; on a cluster one per primary, tagged to land there), taken
    /// and released twice with a fixed 5 s lease, once more with a second
    /// client of the same settings waiting for it, and force-unlocked at
    /// the end; a dry run of every kind's scripts on scratch names under
    /// the same prefix, removed after; on a cluster, `CLUSTER SLOTS` and `CLUSTER NODES` per
    /// primary. A command the
    /// server refuses (managed services refuse `CONFIG` and trim `INFO`)
    /// is no error: the check falls back on `INFO`, or answers
    /// [`Verdict::Unknown`] with the refusal and what to confirm by hand.
    ///
    /// # Errors
    ///
    /// Only when nothing could be checked: a connection failure or a
    /// timeout, a shut-down client.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use keyholder::{DoctorOptions, Level};
    ///
    /// # fn main() -> Result<(), keyholder::Error> {
    /// let client = keyholder::Client::open("redis://127.0.0.1:6379/")?;
    /// let report = client.doctor(&DoctorOptions::default())?;
    /// for check in report.at_least(Level::Warn) {
    ///     println!("{} {}: {} ({})", check.name, check.verdict, check.found, check.meaning);
    /// }
    /// if report.worst() == Level::Fail {
    ///     eprintln!("this Redis can break mutual exclusion");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn doctor(&self, options: &DoctorOptions) -> Result<Report> {
        let inner = self.inner();
        inner.check_running()?;
        let settings = options.settings(&inner.config);
        let mut nodes: Vec<(Option<String>, Facts)> = Vec::new();
        let mut replica_facts = Vec::new();
        match inner.routes() {
            Routes::Primary(lanes) => {
                let mut session = inner.routes().session("")?;
                let mut facts = Facts::read(&mut session)?;
                facts.sentinel = facts::ask_sentinels(&inner.config);
                let (clocks, read) = replicas::read(&mut session, lanes.connector(), &facts.replica_addrs());
                facts.clocks = clocks;
                replica_facts.extend(read);
                nodes.push((None, facts));
            }
            Routes::Cluster(cluster) => {
                let mut shards = cluster.shards();
                shards.sort_by(|a, b| a.addr.cmp(&b.addr));
                // The first primary's clock is the others' reference.
                let mut first: Option<Session<'static>> = None;
                for shard in shards {
                    let mut session = shard.session()?;
                    let node = format!("{}:{}", shard.addr.0, shard.addr.1);
                    let mut facts = Facts::read(&mut session)?;
                    let (clocks, read) =
                        replicas::read(&mut session, shard.connector(), &facts.replica_addrs());
                    facts.clocks = clocks;
                    replica_facts.extend(read);
                    match first.as_mut() {
                        Some(reference) => facts.clocks.push(skew::primary(reference, &mut session, &node)),
                        None => first = Some(session),
                    }
                    nodes.push((Some(node), facts));
                }
            }
        }
        let mut checks: Vec<Check> = CHECKS
            .iter()
            .flat_map(|run| {
                nodes.iter().map(move |(node, facts)| Check { node: node.clone(), ..run(facts, &settings) })
            })
            .collect();
        checks.extend(replicas::checks(&replica_facts, &settings));
        checks.extend(latency::checks(self, &settings)?);
        checks.extend(access::checks(self, options.lock_names())?);
        checks.extend(cluster::checks(inner.routes(), options.lock_names())?);
        let mut notes = Vec::new();
        if inner.routes().cluster().is_none() && !options.lock_names().is_empty() {
            notes.push(NAMES_NOT_CLUSTER.to_owned());
        }
        Ok(Report { checks, notes })
    }
}
