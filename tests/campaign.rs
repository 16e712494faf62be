//! The fault campaign (issue 36, item 6): Jepsen's shape on testkit's parts.
//!
//! Several worker processes (this binary run again, see [`worker`]), each of
//! a few threads, do fenced read-modify-write increments: take a fenced lock,
//! read a counter from a [`FencedStore`] with the hold's token, write the
//! value + 1 with it, release. The store lives on a Redis server of its own
//! that is never faulted: it stands for the resource the lock protects, and
//! refuses any token below the highest it has seen. Every worker prints one
//! history line per event (invoke and outcome of each acquire, read, write
//! and release, and any loss its guard reports), stamped with the wall clock
//! in nanoseconds (every process runs on this machine).
//!
//! Meanwhile the orchestrator (the default mode of [`main`]) runs a seeded
//! schedule of faults against the servers the lock lives on, in two phases:
//! a Sentinel set-up (primary, replica, three sentinels) and a Redis Cluster
//! (three shards of a primary and a replica; the faults hit the lock's
//! shard). The faults: kill (SIGKILL) the primary and restart it later
//! (empty: no persistence; before the failover it comes back as the
//! primary and its replica resyncs from it, after it as a replica), stop
//! (SIGSTOP) the primary for a while and continue it, request a failover
//! (`SENTINEL FAILOVER`; `CLUSTER FAILOVER [FORCE]` on the lock's replica),
//! kill a worker process and start a new one, stop a worker for a while
//! (past its lease), and cut the clients' connections. The cut is
//! `CLIENT KILL TYPE normal|pubsub` on the data nodes: testkit's
//! `FaultProxy` cannot sit between a Sentinel or Cluster client and the
//! nodes it discovers (the addresses come from the sentinels and from
//! `CLUSTER SLOTS`), so killing the connections server-side is the honest
//! substitute; it cuts every client at once, as a network blip would.
//!
//! Then a checker reads the whole history and the store's log of accepted
//! writes, and verifies:
//!
//! - (a) **0 stale writes accepted**: the log's tokens never decrease, and no
//!   write was acknowledged to a holder after the store had accepted a read
//!   or write with a higher token;
//! - (b) **0 token regressions**: for two acquisitions A and B where A
//!   completed before B was invoked, token(B) > token(A);
//! - (c) **0 lost acknowledged increments**: the log's values are 1, 2, ...,
//!   N, and every write a worker saw acknowledged is in it;
//! - (d) **every overlap known to at least one holder**: for two holds whose
//!   intervals (acquired .. release invoked, or the holder's process
//!   killed) overlap, at least one of them learned it lost the lock (its
//!   guard said so, its release said so, or the store refused it). An
//!   overlap with a holder killed before it could learn anything is
//!   counted apart, not as a failure.
//!
//! It prints a summary per phase, and on failure the seed and the
//! offending events, and exits non-zero.
//!
//! Budget and replay: each phase runs its schedule for 60 s by default
//! (`KEYHOLDER_CAMPAIGN_SECS` for longer), plus set-up and the drain at
//! the end. The seed is printed first; `KEYHOLDER_CAMPAIGN_SEED=<seed>`
//! replays the same schedule of faults (kinds, targets, durations, gaps).
//! The servers' and clients' timing is not the seed's, so a replay is the
//! same schedule, not the same history. `KEYHOLDER_CAMPAIGN_PHASES=sentinel`
//! (or `cluster`) runs one phase.
//!
//! A test target without libtest (`harness = false`): a name filter given
//! to `cargo test` that does not match `campaign` skips it; `--list` lists
//! it as one test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use keyholder::Client;
use keyholder_testkit::cluster::ClusterOptions;
use keyholder_testkit::sentinel::MASTER_NAME;
use keyholder_testkit::store::{FencedStore, Outcome};
use keyholder_testkit::{RedisCluster, RedisServer, SentinelSet};

/// Set in a worker process: its number.
const WORKER: &str = "KEYHOLDER_CAMPAIGN_WORKER";
/// A worker's servers: `sentinel <url>,<url>,...` or `cluster <url>,...`.
const WORKER_TARGET: &str = "KEYHOLDER_CAMPAIGN_TARGET";
/// A worker's store server URL.
const WORKER_STORE: &str = "KEYHOLDER_CAMPAIGN_STORE";
/// A worker's thread count.
const WORKER_THREADS: &str = "KEYHOLDER_CAMPAIGN_THREADS";
/// When a worker stops starting new iterations, in ns since the epoch.
const WORKER_UNTIL: &str = "KEYHOLDER_CAMPAIGN_UNTIL";

/// The lock's name, and the store's.
const NAME: &str = "campaign";
const PROCESSES: u32 = 3;
const THREADS: u32 = 2;
const SECOND: Duration = Duration::from_secs(1);
/// The workers' lease (watchdog timeout).
const LEASE: Duration = Duration::from_secs(1);
/// How long a worker thread waits for the lock per attempt.
const ACQUIRE_WAIT: Duration = Duration::from_secs(2);
/// At most this many iterations per worker thread, and faults per phase.
const MAX_ITERATIONS: u32 = 20_000;
const MAX_FAULTS: u32 = 500;
/// How long a server set may take to heal after a fault before the
/// schedule goes on regardless (and reports it).
const HEAL_LIMIT: Duration = Duration::from_secs(30);
/// How long workers get to finish their last iteration after the budget.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

fn now_ns() -> u64 {
    u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos()).unwrap()
}

fn env_u64(var: &str) -> Option<u64> {
    std::env::var(var).ok().and_then(|v| v.trim().parse().ok())
}

// ---------------------------------------------------------------------------
// The schedule's randomness: splitmix64, seeded.

struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(low + self.below(high - low + 1))
    }

    /// An index into `weights`, drawn by weight.
    fn weighted(&mut self, weights: &[u64]) -> usize {
        let mut pick = self.below(weights.iter().sum());
        for (i, &w) in weights.iter().enumerate() {
            if pick < w {
                return i;
            }
            pick -= w;
        }
        weights.len() - 1
    }
}

// ---------------------------------------------------------------------------
// Entry point

fn main() {
    if let Ok(id) = std::env::var(WORKER) {
        worker(id.parse().unwrap());
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        if !args.iter().any(|a| a == "--ignored") {
            println!("campaign: test");
        }
        return;
    }
    // libtest's options that take a value in the next argument.
    let mut filters = Vec::new();
    let mut skips = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--skip" => skips.extend(args.next().cloned()),
            "--logfile" | "--format" | "--color" | "--test-threads" | "-Z" | "--report-time" => {
                args.next();
            }
            a if a.starts_with('-') => {}
            a => filters.push(a.to_owned()),
        }
    }
    let exact = std::env::args().any(|a| a == "--exact");
    let matches = |f: &String| if exact { f == "campaign" } else { "campaign".contains(f.as_str()) };
    if (!filters.is_empty() && !filters.iter().any(matches)) || skips.iter().any(matches) {
        println!("campaign: skipped (filtered out)");
        return;
    }
    std::process::exit(orchestrate());
}

// ---------------------------------------------------------------------------
// Worker mode

/// One worker process: `KEYHOLDER_CAMPAIGN_THREADS` threads loop over fenced
/// increments until `KEYHOLDER_CAMPAIGN_UNTIL`, printing the history.
fn worker(process: u32) {
    let target = std::env::var(WORKER_TARGET).unwrap();
    let store_url = std::env::var(WORKER_STORE).unwrap();
    let threads: u32 = env_u64(WORKER_THREADS).unwrap().try_into().unwrap();
    let until = env_u64(WORKER_UNTIL).unwrap();
    // No worker outlives the orchestrator: its end closes our stdin.
    std::thread::spawn(|| {
        let mut line = String::new();
        while matches!(std::io::stdin().read_line(&mut line), Ok(n) if n > 0) {
            line.clear();
        }
        std::process::exit(3);
    });
    emit(&format!("{process}.-.-"), "start", &format!("pid={}", std::process::id()));
    let (kind, urls) = target.split_once(' ').unwrap();
    let urls: Vec<String> = urls.split(',').map(str::to_owned).collect();
    let build = || {
        let builder = match kind {
            "sentinel" => Client::builder_sentinel(urls.clone(), MASTER_NAME),
            _ => Client::builder_cluster(urls.clone()),
        };
        builder.watchdog_timeout(LEASE).connect_timeout(SECOND).command_timeout(SECOND).build()
    };
    // A worker started during a failover may find no primary at first.
    let client = loop {
        match build() {
            Ok(client) => break client,
            Err(e) if now_ns() < until => {
                emit(&format!("{process}.-.-"), "build_err", &format!("kind={:?}", e.kind()));
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(_) => {
                emit(&format!("{process}.-.-"), "exit", "");
                return;
            }
        }
    };
    let workers: Vec<_> = (0..threads)
        .map(|thread| {
            let client = client.clone();
            let store_url = store_url.clone();
            std::thread::spawn(move || worker_thread(&client, &store_url, process, thread, until))
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    emit(&format!("{process}.-.-"), "exit", "");
}

/// A store connection without socket timeouts: a read blocked on a socket
/// with a timeout fails with EINTR when the process is stopped and
/// continued (tests/suite/processes.rs), and a failed store command would
/// leave its outcome unknown. The orchestrator bounds the worker's life.
fn store_connection(url: &str) -> redis::Connection {
    let con = redis::Client::open(url).unwrap().get_connection_with_timeout(2 * SECOND).unwrap();
    con.set_read_timeout(None).unwrap();
    con.set_write_timeout(None).unwrap();
    con
}

/// One history line: `H t=<ns> h=<process>.<thread>.<iteration> ev=<event> ...`.
fn emit(hold: &str, event: &str, rest: &str) {
    let line = format!("H t={} h={hold} ev={event} {rest}\n", now_ns());
    let mut out = std::io::stdout().lock();
    if out.write_all(line.as_bytes()).and_then(|()| out.flush()).is_err() {
        std::process::exit(3);
    }
}

fn worker_thread(client: &Client, store_url: &str, process: u32, thread: u32, until: u64) {
    let lock = client.lock(NAME).unwrap().fenced();
    let store = FencedStore::new(NAME);
    let mut con = store_connection(store_url);
    for iteration in 0..MAX_ITERATIONS {
        if now_ns() >= until {
            break;
        }
        let h = format!("{process}.{thread}.{iteration}");
        emit(&h, "acq_invoke", "");
        let guard = match lock.try_lock_for(ACQUIRE_WAIT) {
            Ok(Some(guard)) => guard,
            Ok(None) => {
                emit(&h, "acq_timeout", "");
                continue;
            }
            Err(e) => {
                emit(&h, "acq_err", &format!("kind={:?}", e.kind()));
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let token = guard.fencing_token().expect("a fenced lock's guard has a token");
        emit(&h, "acq_ok", &format!("token={token}"));
        let lost = |guard: &keyholder::LockGuard| {
            if let Some(reason) = guard.lost_reason() {
                emit(&h, "lost", &format!("reason={reason:?}"));
            }
        };
        emit(&h, "read_invoke", &format!("token={token}"));
        match store.read(&mut con, token) {
            Ok(Outcome::Accepted(value)) => {
                let value: u64 = value.map_or(0, |v| v.parse().unwrap());
                emit(&h, "read_ok", &format!("token={token} value={value}"));
                // The section's work: a pause here makes the write late.
                std::thread::sleep(Duration::from_millis(2));
                lost(&guard);
                let next = value + 1;
                emit(&h, "write_invoke", &format!("token={token} value={next}"));
                match store.write(&mut con, token, &next.to_string()) {
                    Ok(Outcome::Accepted(_)) => emit(&h, "write_ok", &format!("token={token} value={next}")),
                    Ok(Outcome::Refused { highest }) => {
                        emit(&h, "write_refused", &format!("token={token} highest={highest}"));
                    }
                    Err(e) => {
                        emit(
                            &h,
                            "write_err",
                            &format!("token={token} err={}", e.to_string().replace(' ', "_")),
                        );
                        con = store_connection(store_url);
                    }
                }
            }
            Ok(Outcome::Refused { highest }) => {
                emit(&h, "read_refused", &format!("token={token} highest={highest}"));
            }
            Err(e) => {
                emit(&h, "read_err", &format!("token={token} err={}", e.to_string().replace(' ', "_")));
                con = store_connection(store_url);
            }
        }
        lost(&guard);
        emit(&h, "rel_invoke", "");
        match guard.unlock() {
            Ok(()) => emit(&h, "rel_ok", ""),
            Err(e) if e.is_lock_lost() || e.is_not_owner() => {
                emit(&h, "rel_lost", &format!("kind={:?}", e.kind()))
            }
            Err(e) => emit(&h, "rel_err", &format!("kind={:?}", e.kind())),
        }
    }
}

// ---------------------------------------------------------------------------
// Orchestrator: worker processes

/// A line of history, as parsed by the orchestrator.
#[derive(Debug, Clone)]
struct Event {
    t: u64,
    /// `<process>.<thread>.<iteration>`.
    hold: String,
    process: u32,
    kind: String,
    fields: BTreeMap<String, String>,
    line: String,
}

impl Event {
    fn parse(line: &str) -> Option<Event> {
        let rest = line.strip_prefix("H ")?;
        let fields: BTreeMap<String, String> = rest
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let hold = fields.get("h")?.clone();
        Some(Event {
            t: fields.get("t")?.parse().ok()?,
            process: hold.split('.').next()?.parse().ok()?,
            hold,
            kind: fields.get("ev")?.clone(),
            fields,
            line: line.to_owned(),
        })
    }

    fn num(&self, key: &str) -> Option<u64> {
        self.fields.get(key).and_then(|v| v.parse().ok())
    }
}

/// A worker process; killed when dropped.
struct Worker {
    process: u32,
    child: Child,
    /// Held open: the worker exits when it closes.
    _stdin: Option<ChildStdin>,
    reader: Option<JoinHandle<()>>,
    paused: bool,
}

impl Worker {
    fn spawn(
        process: u32,
        target: &str,
        store: &str,
        until: u64,
        history: &Arc<Mutex<Vec<Event>>>,
    ) -> Worker {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(WORKER, process.to_string())
            .env(WORKER_TARGET, target)
            .env(WORKER_STORE, store)
            .env(WORKER_THREADS, THREADS.to_string())
            .env(WORKER_UNTIL, until.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let history = Arc::clone(history);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(event) = Event::parse(&line) {
                    history.lock().unwrap().push(event);
                }
            }
        });
        Worker { process, _stdin: child.stdin.take(), child, reader: Some(reader), paused: false }
    }

    fn signal(&self, signal: &str) {
        let _ = Command::new("kill").args([signal, &self.child.id().to_string()]).status();
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills it (SIGKILL), reaps it, reads the rest of its output; returns
    /// when it was surely dead.
    fn kill(&mut self) -> u64 {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dead = now_ns();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        dead
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // SIGKILL also ends a stopped process.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// Orchestrator: faults

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillPrimary,
    PausePrimary,
    Failover,
    CutConnections,
    KillWorker,
    PauseWorker,
}

const FAULTS: [Fault; 6] = [
    Fault::KillPrimary,
    Fault::PausePrimary,
    Fault::Failover,
    Fault::CutConnections,
    Fault::KillWorker,
    Fault::PauseWorker,
];
const WEIGHTS: [u64; 6] = [3, 3, 3, 2, 2, 2];

/// The servers the lock lives on.
enum Servers {
    Sentinel(SentinelSet),
    Cluster(RedisCluster),
}

impl Servers {
    fn target(&self) -> String {
        match self {
            Servers::Sentinel(set) => format!("sentinel {}", set.sentinel_urls().join(",")),
            Servers::Cluster(cluster) => format!("cluster {}", cluster.seed_urls().join(",")),
        }
    }

    /// The port of the primary that serves the lock now.
    fn primary(&self) -> Option<u16> {
        match self {
            Servers::Sentinel(set) => set.agreed_primary_port(),
            Servers::Cluster(cluster) => {
                let slot = cluster.keyslot(NAME);
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cluster.primary_of_slot(slot))).ok()
            }
        }
    }

    /// Waits until the set is whole again; `Err` says what is not.
    fn heal(&mut self) -> Result<(), String> {
        match self {
            Servers::Sentinel(set) => set.wait_until_healthy(HEAL_LIMIT).map(|_| ()),
            Servers::Cluster(cluster) => cluster.ready_within(HEAL_LIMIT),
        }
    }

    /// Kills the lock's primary, waits `down`, restarts it (empty).
    fn kill_primary(&mut self, down: Duration) -> Result<String, String> {
        let primary = self.primary().ok_or("no agreed primary")?;
        match self {
            Servers::Sentinel(set) => {
                set.kill_server(primary);
                std::thread::sleep(down);
                // Before the failover it comes back as the primary (and its
                // replica resyncs from it: the data is lost); after it, as
                // the new primary's replica.
                let now = set.agreed_primary_port();
                let replica_of = now.filter(|&p| p != primary);
                set.restart_server(primary, replica_of).map_err(|e| e.to_string())?;
                Ok(format!(
                    "{primary} down {down:?}, back as {}",
                    replica_of.map_or("primary".into(), |p| format!("replica of {p}"))
                ))
            }
            Servers::Cluster(cluster) => {
                cluster.kill_node(primary);
                std::thread::sleep(down);
                cluster.try_restart_killed(HEAL_LIMIT)?;
                Ok(format!("{primary} down {down:?}"))
            }
        }
    }

    fn pause_primary(&mut self, pause: Duration) -> Result<String, String> {
        let primary = self.primary().ok_or("no agreed primary")?;
        match self {
            Servers::Sentinel(set) => {
                set.server(primary).freeze();
                std::thread::sleep(pause);
                set.server(primary).thaw();
            }
            Servers::Cluster(cluster) => {
                cluster.freeze_node(primary);
                std::thread::sleep(pause);
                cluster.thaw_node(primary);
            }
        }
        Ok(format!("{primary} stopped {pause:?}"))
    }

    fn failover(&mut self, force: bool) -> Result<String, String> {
        match self {
            Servers::Sentinel(set) => {
                set.try_failover().map_err(|e| e.to_string())?;
                Ok("SENTINEL FAILOVER".into())
            }
            Servers::Cluster(cluster) => {
                let slot = cluster.keyslot(NAME);
                let map = cluster.slot_map();
                let range = map.iter().find(|r| r.start <= slot && slot <= r.end).ok_or("slot unserved")?;
                let replica = *range.replicas.first().ok_or("no replica")?;
                let mut con = cluster.try_conn_to(replica).map_err(|e| e.to_string())?;
                let mut cmd = redis::cmd("CLUSTER");
                cmd.arg("FAILOVER");
                if force {
                    cmd.arg("FORCE");
                }
                cmd.query::<()>(&mut con).map_err(|e| e.to_string())?;
                // Wait (bounded) for the promotion before healing counts.
                let deadline = Instant::now() + 10 * SECOND;
                while Instant::now() < deadline && cluster.primaries().iter().all(|&p| p != replica) {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Ok(format!("CLUSTER FAILOVER{} on {replica}", if force { " FORCE" } else { "" }))
            }
        }
    }

    /// Cuts every client connection on the data nodes (see the module docs).
    fn cut(&mut self, pubsub: bool) -> Result<String, String> {
        let ports = match self {
            Servers::Sentinel(set) => set.server_ports(),
            Servers::Cluster(cluster) => cluster.running_ports(),
        };
        let kind = if pubsub { "pubsub" } else { "normal" };
        let mut killed = 0;
        for port in ports {
            let con = match self {
                Servers::Sentinel(set) => redis::Client::open(set.server(port).url())
                    .and_then(|c| c.get_connection_with_timeout(SECOND)),
                Servers::Cluster(cluster) => cluster.try_conn_to(port),
            };
            let Ok(mut con) = con else { continue };
            let _ = con.set_read_timeout(Some(5 * SECOND));
            killed +=
                redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg(kind).query::<i64>(&mut con).unwrap_or(0);
        }
        Ok(format!("CLIENT KILL TYPE {kind}: {killed} connections"))
    }
}

/// One fault as it was applied.
#[derive(Debug, Clone)]
struct Applied {
    fault: Fault,
    start: u64,
    end: u64,
    what: Result<String, String>,
    healed: Result<(), String>,
}

// ---------------------------------------------------------------------------
// Orchestrator: phases

#[derive(Debug, Clone, Copy)]
enum Phase {
    Sentinel,
    Cluster,
}

fn orchestrate() -> i32 {
    let seed = env_u64("KEYHOLDER_CAMPAIGN_SEED").unwrap_or_else(|| now_ns() ^ u64::from(std::process::id()));
    let secs = env_u64("KEYHOLDER_CAMPAIGN_SECS").unwrap_or(60);
    let phases = std::env::var("KEYHOLDER_CAMPAIGN_PHASES").unwrap_or_else(|_| "sentinel,cluster".into());
    println!(
        "campaign seed: {seed} (replay with KEYHOLDER_CAMPAIGN_SEED={seed}), {secs} s per phase, \
         {PROCESSES} processes x {THREADS} threads, server {}",
        keyholder_testkit::server_version()
    );
    if let Err(problem) = self_test() {
        println!("campaign FAILED: the checker's self-test: {problem}");
        return 1;
    }
    let mut failed = false;
    for (i, phase) in [Phase::Sentinel, Phase::Cluster].into_iter().enumerate() {
        let label = format!("{phase:?}").to_lowercase();
        if !phases.split(',').any(|p| p.trim() == label) {
            continue;
        }
        // Each phase has a schedule of its own, from the one seed.
        let phase_seed = Rng(seed ^ (0x5eed_0000 + i as u64)).next_u64();
        let begun = Instant::now();
        let report = run_phase(phase, phase_seed, Duration::from_secs(secs));
        println!("{}", report.text);
        println!("phase {label}: {:.1} s in all", begun.elapsed().as_secs_f64());
        if !report.ok {
            failed = true;
            println!(
                "phase {label} FAILED; replay with KEYHOLDER_CAMPAIGN_SEED={seed} KEYHOLDER_CAMPAIGN_PHASES={label}"
            );
        }
    }
    if failed {
        println!("campaign FAILED (seed {seed})");
        1
    } else {
        println!("campaign passed (seed {seed})");
        0
    }
}

struct Report {
    ok: bool,
    text: String,
    /// How many findings of each check: (a), (b), (c), (d) unknown.
    findings: [usize; 4],
}

fn run_phase(phase: Phase, seed: u64, budget: Duration) -> Report {
    let mut rng = Rng(seed);
    let started = Instant::now();
    let store_server = RedisServer::start();
    let store = FencedStore::new(NAME);
    let mut servers = match phase {
        Phase::Sentinel => Servers::Sentinel(SentinelSet::start()),
        Phase::Cluster => Servers::Cluster(ClusterOptions::new().start()),
    };
    let target = servers.target();
    let history: Arc<Mutex<Vec<Event>>> = Arc::default();
    let begun = Instant::now();
    let until = now_ns() + u64::try_from(budget.as_nanos()).unwrap();
    let deadline = begun + budget;
    let mut next_process = 0;
    let mut spawn = |history: &Arc<Mutex<Vec<Event>>>| {
        next_process += 1;
        Worker::spawn(next_process, &target, &store_server.url(), until, history)
    };
    let mut workers: Vec<Worker> = (0..PROCESSES).map(|_| spawn(&history)).collect();
    // Process → when it was killed.
    let mut killed: HashMap<u32, u64> = HashMap::new();
    let mut applied: Vec<Applied> = Vec::new();

    // Let the workers start before the first fault.
    std::thread::sleep(2 * SECOND);
    for _ in 0..MAX_FAULTS {
        let gap = rng.millis(500, 2500);
        // The last fault starts early enough that it (4 s at most) and
        // most heals end within the budget.
        if Instant::now() + gap + 5 * SECOND >= deadline {
            break;
        }
        std::thread::sleep(gap);
        let fault = FAULTS[rng.weighted(&WEIGHTS)];
        // Draw every parameter whether used or not: the schedule stays the
        // seed's whatever the faults' outcomes.
        let (duration, pick, flag) = (rng.millis(300, 4000), rng.next_u64(), rng.below(2) == 0);
        let start = now_ns();
        let what = match fault {
            Fault::KillPrimary => servers.kill_primary(duration),
            Fault::PausePrimary => servers.pause_primary(duration),
            Fault::Failover => servers.failover(flag),
            Fault::CutConnections => servers.cut(flag),
            Fault::KillWorker => {
                let i = usize::try_from(pick % workers.len() as u64).unwrap();
                let process = workers[i].process;
                killed.insert(process, workers[i].kill());
                // A new worker in its place, after a while.
                std::thread::sleep(duration / 4);
                workers[i] = spawn(&history);
                Ok(format!("process {process} killed, process {} started", workers[i].process))
            }
            Fault::PauseWorker => {
                let i = usize::try_from(pick % workers.len() as u64).unwrap();
                workers[i].paused = true;
                workers[i].signal("-STOP");
                std::thread::sleep(duration);
                workers[i].signal("-CONT");
                workers[i].paused = false;
                Ok(format!("process {} stopped {duration:?}", workers[i].process))
            }
        };
        let end = now_ns();
        let healed = servers.heal();
        if let Err(problem) = &healed {
            println!("  after {fault:?} the servers did not heal within {HEAL_LIMIT:?}: {problem}");
        }
        applied.push(Applied { fault, start, end, what, healed });
    }

    let faults_done = begun.elapsed();
    // Drain: every worker ends its last iteration and exits.
    let drain = Instant::now() + budget.saturating_sub(begun.elapsed()) + DRAIN_LIMIT;
    for w in &mut workers {
        while w.running() && Instant::now() < drain {
            std::thread::sleep(Duration::from_millis(50));
        }
        if w.running() {
            println!("  process {} did not finish within the drain; killed", w.process);
            killed.insert(w.process, w.kill());
        } else if let Some(reader) = w.reader.take() {
            let _ = reader.join();
        }
    }
    let timing = format!(
        "set-up {:.1} s, faults and workload {:.1} s, drain {:.1} s",
        (begun - started).as_secs_f64(),
        faults_done.as_secs_f64(),
        (begun.elapsed() - faults_done).as_secs_f64()
    );
    drop(workers);
    let mut con = store_server.conn();
    let log = store.log(&mut con);
    let value = store.value(&mut con);
    let history = std::mem::take(&mut *history.lock().unwrap());
    drop(servers);
    check(phase, &history, &log, value.as_deref(), &applied, &killed, &timing)
}

// ---------------------------------------------------------------------------
// The checker

/// One hold, from its events.
#[derive(Debug, Default, Clone)]
struct Hold {
    id: String,
    process: u32,
    acq_invoke: u64,
    acq_ok: Option<u64>,
    token: Option<u64>,
    /// When the holder stopped believing it held: release invoked, or its
    /// process killed.
    end: Option<u64>,
    killed: bool,
    /// It learned it lost the lock: its guard said so, its release said so,
    /// or the store refused it.
    knew: bool,
    release: Option<String>,
}

#[allow(clippy::too_many_lines)]
fn check(
    phase: Phase,
    history: &[Event],
    log: &[(u64, String)],
    value: Option<&str>,
    applied: &[Applied],
    killed: &HashMap<u32, u64>,
    timing: &str,
) -> Report {
    let mut text = String::new();
    let mut problems: Vec<String> = Vec::new();
    let mut holds: BTreeMap<&str, Hold> = BTreeMap::new();
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    for e in history {
        *counts.entry(e.kind.as_str()).or_default() += 1;
        if e.hold.ends_with(".-.-") {
            continue;
        }
        let hold = holds.entry(e.hold.as_str()).or_insert_with(|| Hold {
            id: e.hold.clone(),
            process: e.process,
            acq_invoke: e.t,
            ..Hold::default()
        });
        match e.kind.as_str() {
            "acq_invoke" => hold.acq_invoke = e.t,
            "acq_ok" => {
                hold.acq_ok = Some(e.t);
                hold.token = e.num("token");
            }
            "read_refused" | "write_refused" | "lost" | "rel_lost" => hold.knew = true,
            "rel_invoke" => hold.end = Some(e.t),
            _ => {}
        }
        if e.kind.starts_with("rel_") && e.kind != "rel_invoke" {
            hold.release = Some(e.kind.clone());
        }
    }
    for hold in holds.values_mut() {
        if hold.acq_ok.is_some() && hold.end.is_none() {
            match killed.get(&hold.process) {
                Some(&t) => {
                    hold.end = Some(t);
                    hold.killed = true;
                }
                None => problems.push(format!("hold {} has no end and its process was not killed", hold.id)),
            }
        }
    }
    let acquired: Vec<&Hold> = holds.values().filter(|h| h.acq_ok.is_some()).collect();
    let by_hold: HashMap<&str, Vec<&Event>> = history.iter().fold(HashMap::new(), |mut m, e| {
        m.entry(e.hold.as_str()).or_default().push(e);
        m
    });
    let show = |hold: &str| -> String {
        by_hold
            .get(hold)
            .map_or_else(String::new, |events| events.iter().map(|e| format!("      {}\n", e.line)).collect())
    };

    // (b) token regressions: A done before B invoked => token(B) > token(A).
    let mut done: Vec<(u64, u64, &str)> =
        acquired.iter().map(|h| (h.acq_ok.unwrap(), h.token.unwrap_or(0), h.id.as_str())).collect();
    done.sort_unstable();
    let mut invoked: Vec<&Hold> = acquired.clone();
    invoked.sort_by_key(|h| h.acq_invoke);
    let mut regressions = Vec::new();
    let (mut i, mut best): (usize, Option<(u64, &str)>) = (0, None);
    for b in &invoked {
        while i < done.len() && done[i].0 < b.acq_invoke {
            if best.is_none_or(|(t, _)| done[i].1 > t) {
                best = Some((done[i].1, done[i].2));
            }
            i += 1;
        }
        if let Some((t, a)) = best
            && b.token.unwrap_or(0) <= t
        {
            regressions.push((a, b.id.as_str(), t, b.token.unwrap_or(0)));
        }
    }
    let mut tokens: Vec<u64> = acquired.iter().filter_map(|h| h.token).collect();
    tokens.sort_unstable();
    let distinct = tokens.iter().collect::<BTreeSet<_>>().len();
    let duplicate_tokens = tokens.len() - distinct;

    // (a) stale writes: the log's tokens never decrease; no write was
    // acknowledged after a higher token had been accepted.
    let mut stale = Vec::new();
    for pair in log.windows(2) {
        if pair[1].0 < pair[0].0 {
            stale.push(format!("the store's log goes from token {} to {}", pair[0].0, pair[1].0));
        }
    }
    let mut accepted: Vec<(u64, u64)> = history
        .iter()
        .filter(|e| e.kind == "read_ok" || e.kind == "write_ok")
        .map(|e| (e.t, e.num("token").unwrap_or(0)))
        .collect();
    accepted.sort_unstable();
    let mut highest_by = Vec::with_capacity(accepted.len());
    let mut highest = 0;
    for &(_, token) in &accepted {
        highest = highest.max(token);
        highest_by.push(highest);
    }
    let invokes: HashMap<(&str, &str), u64> = history
        .iter()
        .filter(|e| e.kind.ends_with("_invoke"))
        .map(|e| ((e.hold.as_str(), e.kind.as_str()), e.t))
        .collect();
    for e in history.iter().filter(|e| e.kind == "write_ok") {
        let invoked = invokes.get(&(e.hold.as_str(), "write_invoke")).copied().unwrap_or(e.t);
        let before = accepted.partition_point(|&(t, _)| t < invoked);
        let token = e.num("token").unwrap_or(0);
        if before > 0 && highest_by[before - 1] > token {
            stale.push(format!(
                "hold {} wrote with token {token} after the store had accepted {}\n{}",
                e.hold,
                highest_by[before - 1],
                show(&e.hold)
            ));
        }
    }

    // (c) lost acknowledged increments.
    let mut lost_increments = Vec::new();
    for (i, (token, v)) in log.iter().enumerate() {
        if v.parse::<u64>().ok() != Some(i as u64 + 1) {
            lost_increments.push(format!("log entry {} is {v} (token {token}), not {}", i + 1, i + 1));
            if lost_increments.len() > 20 {
                break;
            }
        }
    }
    let logged: BTreeSet<(u64, String)> = log.iter().cloned().collect();
    for e in history.iter().filter(|e| e.kind == "write_ok") {
        let entry = (e.num("token").unwrap_or(0), e.fields.get("value").cloned().unwrap_or_default());
        if !logged.contains(&entry) {
            lost_increments
                .push(format!("acknowledged write {entry:?} of hold {} is not in the log", e.hold));
        }
    }
    if value.map(str::to_owned) != log.last().map(|(_, v)| v.clone()) {
        lost_increments.push(format!("the store holds {value:?}, its log ends with {:?}", log.last()));
    }

    // (d) overlaps of holds: at least one of the two knew.
    let mut intervals: Vec<&Hold> = acquired.clone();
    intervals.sort_by_key(|h| h.acq_ok);
    let (mut overlaps, mut known, mut with_killed) = (0u64, 0u64, 0u64);
    let mut unknown = Vec::new();
    let mut overlapping: BTreeSet<&str> = BTreeSet::new();
    for (i, a) in intervals.iter().enumerate() {
        let a_end = a.end.unwrap_or(u64::MAX);
        for b in &intervals[i + 1..] {
            if b.acq_ok.unwrap() >= a_end {
                break;
            }
            if b.end.unwrap_or(u64::MAX) <= b.acq_ok.unwrap() {
                continue;
            }
            overlaps += 1;
            overlapping.extend([a.id.as_str(), b.id.as_str()]);
            if a.knew || b.knew {
                known += 1;
            } else if a.killed || b.killed {
                with_killed += 1;
            } else {
                unknown.push((a.id.as_str(), b.id.as_str()));
            }
        }
    }

    // The summary.
    let mut by_fault: BTreeMap<Fault, (u64, u64, u64)> = BTreeMap::new();
    for a in applied {
        let entry = by_fault.entry(a.fault).or_default();
        entry.0 += 1;
        entry.1 += u64::from(a.what.is_err());
        entry.2 += u64::from(a.healed.is_err());
    }
    let c = |k: &str| counts.get(k).copied().unwrap_or(0);
    let _ = writeln!(text, "== phase {phase:?}: {timing}");
    let _ = writeln!(
        text,
        "  events {}  processes {}  acquisitions {} (timeouts {}, errors {})  tokens distinct {distinct} (duplicates {duplicate_tokens})",
        history.len(),
        c("start"),
        c("acq_ok"),
        c("acq_timeout"),
        c("acq_err"),
    );
    let _ = writeln!(
        text,
        "  store: accepted reads {} writes {}  refused reads {} writes {}  errors {}  log length {}  value {value:?}",
        c("read_ok"),
        c("write_ok"),
        c("read_refused"),
        c("write_refused"),
        c("read_err") + c("write_err"),
        log.len(),
    );
    let _ = writeln!(
        text,
        "  holds: lost told by guard {}  releases ok {} lost {} errors {}  holds cut by a process kill {}",
        c("lost"),
        c("rel_ok"),
        c("rel_lost"),
        c("rel_err"),
        acquired.iter().filter(|h| h.killed).count(),
    );
    let _ = writeln!(text, "  faults (applied / refused or failed / not healed in {HEAL_LIMIT:?}):");
    for (fault, (n, refused, unhealed)) in &by_fault {
        let name = format!("{fault:?}");
        let _ = writeln!(text, "    {name:<16} {n:>3} / {refused} / {unhealed}");
    }
    let _ = writeln!(
        text,
        "  checks: (a) stale writes accepted {}  (b) token regressions {}  (c) lost increments {}  \
         (d) overlapping pairs {overlaps} (of {} holds): known {known}, with a killed holder {with_killed}, unknown {}",
        stale.len(),
        regressions.len(),
        lost_increments.len(),
        overlapping.len(),
        unknown.len(),
    );
    let ok = stale.is_empty()
        && regressions.is_empty()
        && lost_increments.is_empty()
        && unknown.is_empty()
        && problems.is_empty();
    // The schedule as applied, always: a replay's should match it.
    let _ = writeln!(text, "  fault log (ns since the epoch):");
    for a in applied {
        let _ =
            writeln!(text, "    t={}..{} {:?}: {:?} healed {:?}", a.start, a.end, a.fault, a.what, a.healed);
    }
    if !ok {
        for p in problems.iter().take(10) {
            let _ = writeln!(text, "  PROBLEM {p}");
        }
        for s in stale.iter().take(10) {
            let _ = writeln!(text, "  STALE WRITE {s}");
        }
        for (a, b, ta, tb) in regressions.iter().take(10) {
            let _ = write!(
                text,
                "  TOKEN REGRESSION: hold {b} got {tb}, not above {ta} of hold {a}, acquired before it was invoked\n{}{}",
                show(a),
                show(b)
            );
        }
        for l in lost_increments.iter().take(10) {
            let _ = writeln!(text, "  LOST INCREMENT {l}");
        }
        for (a, b) in unknown.iter().take(10) {
            let _ = write!(text, "  UNKNOWN OVERLAP of holds {a} and {b}\n{}{}", show(a), show(b));
        }
    }
    Report { ok, text, findings: [stale.len(), regressions.len(), lost_increments.len(), unknown.len()] }
}

// ---------------------------------------------------------------------------
// The checker's self-test: small made-up histories, each breaking one
// property, must be caught by that check (and a sound one must pass), so a
// green campaign cannot come from a checker that looks at nothing.

/// Two holds of one increment each, as history lines: `(hold, acquired,
/// token, value written, released)`, times in ns, each hold's store calls
/// 1 to 4 ns after its acquisition.
fn made_up(holds: &[(&str, u64, u64, u64, u64)], lost: &[&str]) -> Vec<Event> {
    let mut lines = Vec::new();
    for &(h, t, token, value, end) in holds {
        let before = value - 1;
        lines.push(format!("H t={} h={h} ev=acq_invoke", t - 1));
        lines.push(format!("H t={t} h={h} ev=acq_ok token={token}"));
        lines.push(format!("H t={} h={h} ev=read_invoke token={token}", t + 1));
        lines.push(format!("H t={} h={h} ev=read_ok token={token} value={before}", t + 2));
        lines.push(format!("H t={} h={h} ev=write_invoke token={token} value={value}", t + 3));
        lines.push(format!("H t={} h={h} ev=write_ok token={token} value={value}", t + 4));
        if lost.contains(&h) {
            lines.push(format!("H t={} h={h} ev=lost reason=LeaseExpired", end - 1));
        }
        lines.push(format!("H t={end} h={h} ev=rel_invoke"));
        lines.push(format!("H t={} h={h} ev=rel_ok", end + 1));
    }
    let mut events: Vec<Event> = lines.iter().map(|l| Event::parse(l).unwrap()).collect();
    events.sort_by_key(|e| e.t);
    events
}

fn self_test() -> Result<(), String> {
    let log = |entries: &[(u64, &str)]| -> Vec<(u64, String)> {
        entries.iter().map(|&(t, v)| (t, v.to_owned())).collect()
    };
    let run = |holds: &[(&str, u64, u64, u64, u64)], lost: &[&str], entries: &[(u64, &str)]| {
        let history = made_up(holds, lost);
        let log = log(entries);
        let last = log.last().map(|(_, v)| v.clone());
        check(Phase::Sentinel, &history, &log, last.as_deref(), &[], &HashMap::new(), "self-test").findings
    };
    let cases: [(&str, [usize; 4]); 5] = [
        // Sound: one after the other, rising tokens.
        ("sound", run(&[("1.0.0", 20, 5, 1, 30), ("2.0.0", 40, 6, 2, 50)], &[], &[(5, "1"), (6, "2")])),
        // (b) the second acquisition's token is not above the first's.
        ("regression", run(&[("1.0.0", 20, 5, 1, 30), ("2.0.0", 40, 5, 2, 50)], &[], &[(5, "1"), (5, "2")])),
        // (a) token 5 written after token 6 was accepted (the first, lost,
        // hold writes late; (d) is then known through its loss).
        (
            "stale",
            run(&[("1.0.0", 20, 5, 2, 100), ("2.0.0", 40, 6, 1, 50)], &["1.0.0"], &[(6, "1"), (5, "2")]),
        ),
        // (c) two increments of the same value.
        (
            "lost increment",
            run(&[("1.0.0", 20, 5, 1, 30), ("2.0.0", 40, 6, 1, 50)], &[], &[(5, "1"), (6, "1")]),
        ),
        // (d) the holds overlap and neither learned of it.
        (
            "unknown overlap",
            run(&[("1.0.0", 20, 5, 1, 60), ("2.0.0", 40, 6, 2, 50)], &[], &[(5, "1"), (6, "2")]),
        ),
    ];
    let expected: [[usize; 4]; 5] = [[0, 0, 0, 0], [0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]];
    for ((name, found), want) in cases.iter().zip(expected) {
        let caught = found.iter().zip(want).all(|(&f, w)| (f > 0) == (w > 0));
        if !caught {
            return Err(format!(
                "case {name:?}: findings (a, b, c, d) {found:?}, expected {want:?} (0 or not)"
            ));
        }
    }
    Ok(())
}
