//! The keyholder benchmark: the workloads of SPEC section 4 (W1 to W7), each
//! measured three ways in one process against one Redis server. W6's clients
//! are threads of this process, each with its own `Client` (its own pool,
//! pub/sub connection and client id), as separate processes would have.
//!
//! * **floor**: the library's own `lua/acquire.lua` and `lua/release.lua`
//!   called in a raw loop on a plain redis-rs connection, with no library
//!   logic. For contended workloads the floor is the *ideal*
//!   `1 / (hold + one handoff)`, where a handoff is the floor's mean
//!   acquire+release pair latency measured in the same run.
//! * **baseline**: the hand-rolled lock users replace: `SET key token NX PX
//!   30000`, on failure sleep 10 ms and retry; release with the Lua
//!   compare-and-delete. One redis-rs connection per thread.
//! * **keyholder** with its defaults (watchdog lease, pub/sub waiting).
//!
//! ```text
//! cargo run --release --example bench                     # full run, ~3 min on 2 cores
//! cargo run --release --example bench -- --quick          # tiny run, a few seconds
//! cargo run --release --example bench -- --runs 5 --only W1,W2
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --release --example bench
//! ```
//!
//! Without `REDIS_URL` a private `redis-server` (or `$REDIS_SERVER_BIN`) is
//! started on a free loopback port and stopped at exit. Every figure is the
//! median over `--runs` runs; within a run the implementations take turns on
//! the same server.
//!
//! Redis round trips are counted by the server: the delta of `INFO
//! commandstats` over the measured window. Redis counts the commands a Lua
//! script runs as calls too, so the commands that run inside the scripts
//! (`exists`, `hexists`, `hincrby`, `hset`, `hdel`, `pexpire`, `pttl`, `del`,
//! `publish`, `type`, `incr`, and `get`/`set` for keyholder's unlock latch and
//! next-in-line marker and the baseline's compare-and-delete) are left out,
//! as are the counter's GET and SET (their number is known exactly) and the
//! bench's own INFO calls. keyholder also sends one of those commands itself:
//! a queued thread asks `HEXISTS` whether a local holder still holds the lock
//! after an unlock message. So in the contended workloads (W2, W3) keyholder's
//! windows are also *audited*: the server's slow log records every command
//! (threshold 0), script-internal ones with the peer `?:0` and top-level ones
//! with the client's address, and keyholder's round trips are the top-level
//! commands it lists (SUBSCRIBE, UNSUBSCRIBE, PING and HEXISTS included).
//! W2 audits the floor loop and the baseline too, so that all pay the same
//! slow-log cost; `--no-audit` turns it off.
//! Client CPU is the process's utime+stime from `/proc/self/stat` (10 ms
//! ticks); Redis CPU is `INFO cpu` (used_cpu_user + used_cpu_sys).

use keyholder_testkit::server;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;
use keyholder::{Client, Lock, LockGuard};
use redis::Value;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Res<T> = Result<T, BoxError>;

fn err(msg: impl Into<String>) -> BoxError {
    msg.into().into()
}

const USAGE: &str = "\
usage: bench [--quick] [--runs N] [--only W1,W2,...] [--w2-clients N] [--w6-clients N,N,...] [--w3-baseline-threads N] [--no-audit]

  --quick                    a tiny configuration that finishes in a few seconds
  --runs N                   runs per workload; figures are medians (default 3, quick 1)
  --only LIST                run only these workloads (W1..W7, comma-separated)
  --w2-clients N             clients of W2's second configuration (default 4; the 8 threads are spread over them)
  --w6-clients LIST          W6's client counts, one thread each (default 8,32,128; quick 8)
  --w3-baseline-threads N    polling threads for the W3 baseline (default: as many as keyholder's)
  --no-audit                 do not count top-level commands with the slow log in W2 and W3
                             (then keyholder's top-level HEXISTS calls go uncounted)

REDIS_URL selects a Redis server; without it a private redis-server is started
(REDIS_SERVER_BIN overrides the binary).";

/// The lease of floor and baseline locks, equal to keyholder's default
/// watchdog lease.
const LEASE_MS: u64 = 30_000;
/// The baseline's retry sleep.
const BASELINE_RETRY: Duration = Duration::from_millis(10);
/// The hand-rolled release: Lua compare-and-delete.
const COMPARE_AND_DELETE: &str =
    "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";
/// Upper bound of any single acquisition in the bench (nothing waits forever).
const ACQUIRE_LIMIT: Duration = Duration::from_secs(120);

/// Commands that keyholder's and the floor's scripts run inside EVALSHA
/// (acquire with the waiter queue, release with its unlock latch and the
/// queue, handoff, renew); keyholder sends none of them on its own in these
/// workloads.
const NESTED_LIB: &[&str] = &[
    "exists",
    "hexists",
    "hincrby",
    "hset",
    "hdel",
    "hget",
    "pexpire",
    "pttl",
    "del",
    "publish",
    "spublish",
    "type",
    "get",
    "set",
    "incr",
    "zadd",
    "zrange",
    "zrem",
    "zscore",
    "zcard",
    "time",
    "pubsub|numsub",
];
/// Commands that the baseline's compare-and-delete runs inside EVALSHA.
const NESTED_BASELINE: &[&str] = &["get", "del"];
/// The bench's own inspection commands.
const BENCH_OWN: &[&str] = &[
    "info",
    "client|list",
    "pubsub|numsub",
    "dbsize",
    "slowlog|reset",
    "slowlog|get",
    "slowlog|len",
    "config|set",
];
/// Slow-log entries kept during an audited window; a window that logs more
/// falls back to the INFO commandstats count.
const AUDIT_MAX_LEN: u64 = 1_000_000;

#[derive(Debug, Clone)]
struct Cfg {
    runs: usize,
    quick: bool,
    only: Vec<String>,
    handoff_pairs: usize,
    w1_pairs: usize,
    w2_threads: usize,
    w2_clients: usize,
    w2_per_thread: usize,
    hold: Duration,
    w3_threads: usize,
    w3_clients: usize,
    /// W3's second configuration: the same threads over this many clients.
    w3_many_clients: usize,
    /// W6: client counts, one thread each.
    w6_clients: Vec<usize>,
    /// W6: acquisitions over all threads.
    w6_acquisitions: usize,
    /// W7: thread counts, one client, distinct names per thread.
    w7_threads: Vec<usize>,
    /// W7: acquire+release pairs over all threads.
    w7_pairs: usize,
    w3_baseline_threads: usize,
    /// Count top-level commands with the slow log in W2 and W3.
    audit: bool,
    w3_idle: Duration,
    w3_stack: usize,
    w4_locks: usize,
    w4_threads: usize,
    w4_watchdog: Duration,
    w4_periods: u32,
    w5_iters: usize,
}

impl Cfg {
    fn full() -> Cfg {
        Cfg {
            runs: 3,
            quick: false,
            only: Vec::new(),
            handoff_pairs: 500,
            w1_pairs: 5000,
            w2_threads: 8,
            w2_clients: 4,
            w2_per_thread: 100,
            hold: Duration::from_millis(1),
            w3_threads: 1000,
            w3_clients: 4,
            w3_many_clients: 100,
            w6_clients: vec![8, 32, 128],
            w6_acquisitions: 1600,
            w7_threads: vec![1, 8, 32, 128, 512],
            w7_pairs: 8000,
            w3_baseline_threads: 1000,
            audit: true,
            w3_idle: Duration::from_secs(1),
            w3_stack: 64 * 1024,
            w4_locks: 10_000,
            w4_threads: 4,
            w4_watchdog: Duration::from_millis(3000),
            w4_periods: 4,
            w5_iters: 2000,
        }
    }

    fn quick() -> Cfg {
        Cfg {
            runs: 1,
            quick: true,
            handoff_pairs: 100,
            w1_pairs: 200,
            w2_per_thread: 5,
            w3_threads: 40,
            w3_many_clients: 10,
            w6_clients: vec![8],
            w6_acquisitions: 40,
            w7_threads: vec![1, 8],
            w7_pairs: 100,
            w3_baseline_threads: 40,
            w3_idle: Duration::from_millis(200),
            w4_locks: 200,
            w4_threads: 2,
            w4_watchdog: Duration::from_millis(600),
            w5_iters: 100,
            ..Cfg::full()
        }
    }

    fn wants(&self, workload: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|w| w.eq_ignore_ascii_case(workload))
    }
}

fn parse_args() -> Result<Option<Cfg>, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut cfg = if args.iter().any(|a| a == "--quick") { Cfg::quick() } else { Cfg::full() };
    let mut i = 0;
    while i < args.len() {
        let (flag, inline) = match args[i].split_once('=') {
            Some((f, v)) => (f.to_owned(), Some(v.to_owned())),
            None => (args[i].clone(), None),
        };
        let mut value = || -> Result<String, String> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            i += 1;
            args.get(i).cloned().ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--quick" => {}
            "--no-audit" => cfg.audit = false,
            "--runs" => {
                cfg.runs = value()?.parse().map_err(|e| format!("--runs: {e}"))?;
                if cfg.runs == 0 || cfg.runs > 100 {
                    return Err("--runs must be 1..=100".into());
                }
            }
            "--only" => {
                cfg.only = value()?.split(',').map(|s| s.trim().to_uppercase()).collect();
                for w in &cfg.only {
                    if !["W1", "W2", "W3", "W4", "W5", "W6", "W7"].contains(&w.as_str()) {
                        return Err(format!("--only: unknown workload {w}"));
                    }
                }
            }
            "--w2-clients" => {
                cfg.w2_clients = value()?.parse().map_err(|e| format!("--w2-clients: {e}"))?;
                if cfg.w2_clients < 2 || cfg.w2_clients > cfg.w2_threads {
                    return Err(format!("--w2-clients must be 2..={}", cfg.w2_threads));
                }
            }
            "--w6-clients" => {
                let list = value()?;
                cfg.w6_clients = list
                    .split(',')
                    .map(|n| n.trim().parse::<usize>().map_err(|e| format!("--w6-clients: {e}")))
                    .collect::<Result<_, _>>()?;
                if cfg.w6_clients.iter().any(|n| !(2..=512).contains(n)) {
                    return Err("--w6-clients takes counts of 2..=512".into());
                }
            }
            "--w3-baseline-threads" => {
                cfg.w3_baseline_threads =
                    value()?.parse().map_err(|e| format!("--w3-baseline-threads: {e}"))?;
                if cfg.w3_baseline_threads == 0 || cfg.w3_baseline_threads > 5000 {
                    return Err("--w3-baseline-threads must be 1..=5000".into());
                }
            }
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument {other}")),
        }
        i += 1;
    }
    Ok(Some(cfg))
}

fn main() -> ExitCode {
    let cfg = match parse_args() {
        Ok(Some(cfg)) => cfg,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("bench: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------
// Environment: the server, connections, scripts.

/// Where Redis is: the user's server, or a private one stopped on drop.
enum Redis {
    External(String),
    Private(server::RedisServer),
}

impl Redis {
    fn start() -> Res<Redis> {
        if let Ok(url) = std::env::var("REDIS_URL")
            && !url.trim().is_empty()
        {
            return Ok(Redis::External(url));
        }
        let bin = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".to_owned());
        match Command::new(&bin).arg("--version").output() {
            Ok(out) if out.status.success() => Ok(Redis::Private(server::RedisServer::start())),
            _ => Err(err(format!(
                "cannot run {bin}: install redis-server, set REDIS_SERVER_BIN to a redis-server binary, \
                 or set REDIS_URL to a running server"
            ))),
        }
    }

    fn url(&self) -> String {
        match self {
            Redis::External(url) => url.clone(),
            Redis::Private(server) => server.url(),
        }
    }

    fn describe(&self) -> String {
        match self {
            Redis::External(url) => format!("REDIS_URL={url} (counters include any other traffic on it)"),
            Redis::Private(server) => format!("private redis-server on 127.0.0.1:{}", server.port()),
        }
    }
}

const ACQUIRE_LUA: &str = include_str!("../lua/acquire.lua");
const RELEASE_LUA: &str = include_str!("../lua/release.lua");
const RENEW_LUA: &str = include_str!("../lua/renew.lua");
const HANDOFF_LUA: &str = include_str!("../lua/handoff.lua");
const DEQUEUE_LUA: &str = include_str!("../lua/dequeue.lua");

struct Scripts {
    acquire: redis::Script,
    release: redis::Script,
    renew: redis::Script,
    compare_and_delete: redis::Script,
}

impl Scripts {
    fn new() -> Scripts {
        Scripts {
            acquire: redis::Script::new(ACQUIRE_LUA),
            release: redis::Script::new(RELEASE_LUA),
            renew: redis::Script::new(RENEW_LUA),
            compare_and_delete: redis::Script::new(COMPARE_AND_DELETE),
        }
    }
}

/// What every workload shares; read-only, so threads borrow it.
struct Env {
    cfg: Cfg,
    url: String,
    /// A redis-rs client whose connections set TCP_NODELAY, as keyholder's do.
    raw: redis::Client,
    scripts: Scripts,
    prefix: String,
    /// The server's own `slowlog-log-slower-than`, restored after each audit.
    slowlog_threshold: String,
}

impl Env {
    fn key(&self, what: &str) -> String {
        format!("{}:{what}", self.prefix)
    }

    fn keyholder(&self, watchdog: Option<Duration>) -> Res<Client> {
        let mut builder = Client::builder(self.url.clone());
        if let Some(timeout) = watchdog {
            builder = builder.watchdog_timeout(timeout);
        }
        Ok(builder.build()?)
    }
}

fn raw_client(url: &str) -> Res<redis::Client> {
    let client = redis::Client::open(url)?;
    let info = client
        .get_connection_info()
        .clone()
        .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
    Ok(redis::Client::open(info)?)
}

fn connect(client: &redis::Client) -> Res<redis::Connection> {
    let con = client.get_connection_with_timeout(Duration::from_secs(3))?;
    con.set_read_timeout(Some(Duration::from_secs(10)))?;
    con.set_write_timeout(Some(Duration::from_secs(10)))?;
    Ok(con)
}

/// Redisson's unlock channel of a lock name.
fn channel_of(name: &str) -> String {
    if name.contains('{') {
        format!("redisson_lock__channel:{name}")
    } else {
        format!("redisson_lock__channel:{{{name}}}")
    }
}

// ---------------------------------------------------------------------------
// The three implementations' primitives.

/// Floor acquire: `acquire.lua`; true when acquired or re-entered.
fn floor_acquire(con: &mut redis::Connection, s: &Scripts, key: &str, owner: &str) -> Res<bool> {
    let reply: Value = s.acquire.key(key).arg(LEASE_MS).arg(owner).invoke(con)?;
    match reply {
        Value::Nil => Ok(true),
        Value::Int(_) => Ok(false),
        other => Err(err(format!("acquire.lua replied {other:?}"))),
    }
}

/// Floor release: `release.lua` without an unlock latch; 0 = still held,
/// 1 = released and published.
fn floor_release(con: &mut redis::Connection, s: &Scripts, key: &str, owner: &str) -> Res<i64> {
    let reply: Value =
        s.release.key(key).key(channel_of(key)).arg("0").arg(LEASE_MS).arg(owner).invoke(con)?;
    match reply {
        Value::Int(n) => Ok(n),
        other => Err(err(format!("release.lua replied {other:?}"))),
    }
}

/// One floor acquire+release pair on a free lock.
fn floor_pair(con: &mut redis::Connection, s: &Scripts, key: &str, owner: &str) -> Res<()> {
    if !floor_acquire(con, s, key, owner)? {
        return Err(err(format!("floor: {key} is unexpectedly held")));
    }
    match floor_release(con, s, key, owner)? {
        1 => Ok(()),
        n => Err(err(format!("floor: release.lua replied {n}, expected 1"))),
    }
}

/// Baseline: one `SET key token NX PX 30000`.
fn baseline_try(con: &mut redis::Connection, key: &str, token: &str) -> Res<bool> {
    let reply: Value = redis::cmd("SET").arg(key).arg(token).arg("NX").arg("PX").arg(LEASE_MS).query(con)?;
    match reply {
        Value::Nil => Ok(false),
        Value::Okay | Value::SimpleString(_) => Ok(true),
        other => Err(err(format!("SET NX replied {other:?}"))),
    }
}

/// Baseline: SET NX, sleep 10 ms and retry, bounded by `limit`. Returns the
/// number of attempts.
fn baseline_lock(con: &mut redis::Connection, key: &str, token: &str, limit: Duration) -> Res<u64> {
    let deadline = Instant::now() + limit;
    let mut attempts = 0;
    loop {
        attempts += 1;
        if baseline_try(con, key, token)? {
            return Ok(attempts);
        }
        if Instant::now() >= deadline {
            return Err(err(format!("baseline: {key} not acquired within {limit:?}")));
        }
        thread::sleep(BASELINE_RETRY);
    }
}

/// Baseline: compare-and-delete.
fn baseline_unlock(con: &mut redis::Connection, s: &Scripts, key: &str, token: &str) -> Res<()> {
    let deleted: i64 = s.compare_and_delete.key(key).arg(token).invoke(con)?;
    if deleted == 1 { Ok(()) } else { Err(err(format!("baseline: {key} was gone at release"))) }
}

fn token() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// keyholder: acquire, waiting at most `limit`.
fn kh_lock(lock: &Lock, limit: Duration) -> Res<LockGuard> {
    lock.try_lock_for(limit)?
        .ok_or_else(|| err(format!("keyholder: {} not acquired within {limit:?}", lock.name())))
}

// ---------------------------------------------------------------------------
// Measuring: server counters, CPU, statistics.

/// The process's CPU time (user + system, all threads), in seconds; NaN
/// where /proc is not available. Resolution: one clock tick (10 ms).
fn process_cpu() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return f64::NAN };
    let Some((_, rest)) = stat.rsplit_once(')') else { return f64::NAN };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command name: state is field 3, utime 14, stime 15.
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / 100.0,
        _ => f64::NAN,
    }
}

/// Context switches (voluntary + involuntary) of every thread of this
/// process but the main one: how often threads were woken. NaN without /proc.
fn thread_switches() -> f64 {
    let main = std::process::id().to_string();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return f64::NAN };
    let mut total = 0.0;
    for task in tasks.flatten() {
        if task.file_name().to_string_lossy() == main {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else { continue };
        for line in status.lines() {
            if let Some(v) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                total += v.trim().parse::<f64>().unwrap_or(0.0);
            }
        }
    }
    total
}

fn info(stats: &mut redis::Connection, section: &str) -> Res<String> {
    Ok(redis::cmd("INFO").arg(section).query::<String>(stats)?)
}

fn info_field(text: &str, field: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(field).and_then(|r| r.strip_prefix(':')))
        .map(|v| v.trim().to_owned())
}

/// A snapshot of the server's counters and the process's CPU.
struct Snap {
    calls: HashMap<String, u64>,
    server_cpu: f64,
    client_cpu: f64,
    at: Instant,
}

fn snap(stats: &mut redis::Connection) -> Res<Snap> {
    let client_cpu = process_cpu();
    let at = Instant::now();
    let text = info(stats, "commandstats")?;
    let mut calls = HashMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else { continue };
        let Some((name, fields)) = rest.split_once(':') else { continue };
        let n = fields
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        calls.insert(name.to_owned(), n);
    }
    let cpu = info(stats, "cpu")?;
    let secs = |f: &str| info_field(&cpu, f).and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN);
    let server_cpu = secs("used_cpu_user") + secs("used_cpu_sys");
    Ok(Snap { calls, server_cpu, client_cpu, at })
}

/// What happened between two snapshots.
struct Delta {
    calls: HashMap<String, u64>,
    /// Top-level commands by name, when the window was audited.
    top: Option<HashMap<String, u64>>,
    server_cpu: f64,
    client_cpu: f64,
    wall: f64,
}

/// Starts an audited window, when audits are on: from here the slow log
/// records every command, script-internal ones with the peer `?:0`.
fn audit_start(env: &Env, stats: &mut redis::Connection) -> Res<bool> {
    if !env.cfg.audit {
        return Ok(false);
    }
    redis::cmd("CONFIG").arg("SET").arg("slowlog-max-len").arg(AUDIT_MAX_LEN).query::<()>(stats)?;
    redis::cmd("CONFIG").arg("SET").arg("slowlog-log-slower-than").arg(0).query::<()>(stats)?;
    redis::cmd("SLOWLOG").arg("RESET").query::<()>(stats)?;
    Ok(true)
}

/// Commands whose first argument is a subcommand, named `cmd|sub` as INFO
/// commandstats names them.
const CONTAINERS: &[&str] =
    &["client", "config", "slowlog", "script", "pubsub", "command", "memory", "object"];

/// Ends an audited window: the top-level commands it logged, by name, or
/// `None` when the window was not audited (or logged more than the slow log
/// keeps).
fn audit_end(env: &Env, stats: &mut redis::Connection, on: bool) -> Res<Option<HashMap<String, u64>>> {
    if !on {
        return Ok(None);
    }
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(&env.slowlog_threshold)
        .query::<()>(stats)?;
    let len: u64 = redis::cmd("SLOWLOG").arg("LEN").query(stats)?;
    if len >= AUDIT_MAX_LEN {
        eprintln!("bench: the slow log overflowed ({len} entries); counting with INFO commandstats only");
        redis::cmd("SLOWLOG").arg("RESET").query::<()>(stats)?;
        return Ok(None);
    }
    let entries: Value = redis::cmd("SLOWLOG").arg("GET").arg(len.max(1)).query(stats)?;
    redis::cmd("SLOWLOG").arg("RESET").query::<()>(stats)?;
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let Value::Array(entries) = entries else { return Err(err("SLOWLOG GET replied with no array")) };
    let mut top = HashMap::new();
    for entry in &entries {
        let Value::Array(fields) = entry else { continue };
        let (Some(Value::Array(args)), Some(peer)) = (fields.get(3), fields.get(4).and_then(text)) else {
            return Err(err("a slow log entry without arguments or peer (Redis 4 or newer is needed)"));
        };
        if peer.starts_with('?') {
            continue; // run by a script
        }
        let mut name = args.first().and_then(text).unwrap_or_default().to_lowercase();
        if CONTAINERS.contains(&name.as_str())
            && let Some(sub) = args.get(1).and_then(text)
        {
            name = format!("{name}|{}", sub.to_lowercase());
        }
        *top.entry(name).or_insert(0) += 1;
    }
    Ok(Some(top))
}

impl Delta {
    fn between(a: &Snap, b: &Snap) -> Delta {
        let calls = b
            .calls
            .iter()
            .map(|(name, n)| (name.clone(), n.saturating_sub(a.calls.get(name).copied().unwrap_or(0))))
            .filter(|(_, n)| *n > 0)
            .collect();
        Delta {
            calls,
            top: None,
            server_cpu: b.server_cpu - a.server_cpu,
            client_cpu: b.client_cpu - a.client_cpu,
            wall: b.at.duration_since(a.at).as_secs_f64(),
        }
    }

    fn calls(&self, name: &str) -> f64 {
        self.calls.get(name).copied().unwrap_or(0) as f64
    }

    /// Top-level commands but the bench's own and the counter's
    /// `counter_ops` GETs and SETs: from the audit when there is one, else all
    /// calls but those that ran inside the scripts (`nested`).
    fn round_trips(&self, nested: &[&str], counter_ops: u64) -> f64 {
        if let Some(top) = &self.top {
            let own = |name: &str| BENCH_OWN.contains(&name);
            return top
                .iter()
                .filter(|(name, _)| !own(name))
                .map(
                    |(name, n)| {
                        if name == "get" || name == "set" { n.saturating_sub(counter_ops) } else { *n }
                    },
                )
                .sum::<u64>() as f64;
        }
        let mut total = 0;
        for (name, n) in &self.calls {
            let name = name.as_str();
            if BENCH_OWN.contains(&name) || nested.contains(&name) {
                continue;
            }
            total += if name == "get" || name == "set" { n.saturating_sub(counter_ops) } else { *n };
        }
        total as f64
    }

    fn subscribes(&self) -> f64 {
        self.calls("subscribe") + self.calls("unsubscribe")
    }

    /// Top-level calls of `name`, from the audit; NaN without one.
    fn top_calls(&self, name: &str) -> f64 {
        self.top.as_ref().map_or(f64::NAN, |top| top.get(name).copied().unwrap_or(0) as f64)
    }
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.retain(|x| !x.is_nan());
    v.sort_by(f64::total_cmp);
    v
}

/// Nearest-rank percentile of sorted values.
fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn median(values: Vec<f64>) -> f64 {
    let v = sorted(values);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The median over runs of one figure.
fn med<T>(runs: &[T], f: impl Fn(&T) -> f64) -> f64 {
    median(runs.iter().map(f).collect())
}

fn max_of<T>(runs: &[T], f: impl Fn(&T) -> f64) -> f64 {
    runs.iter().map(f).filter(|x| !x.is_nan()).fold(f64::NAN, f64::max)
}

fn sum_of<T>(runs: &[T], f: impl Fn(&T) -> f64) -> f64 {
    runs.iter().map(f).sum()
}

fn fmt(v: f64, decimals: usize) -> String {
    if v.is_nan() { "n/a".to_owned() } else { format!("{v:.decimals$}") }
}

fn fmt_ratio(v: f64) -> String {
    if v.is_nan() { "n/a".to_owned() } else { format!("{v:.2}x") }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn print_table(title: &str, header: &[&str], rows: &[Vec<String>], notes: &[String]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut out = String::from("|");
        for (cell, w) in cells.iter().zip(&widths) {
            let pad = w.saturating_sub(cell.chars().count());
            let _ = write!(out, " {cell}{} |", " ".repeat(pad));
        }
        out
    };
    println!("\n### {title}\n");
    println!("{}", line(&header.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>()));
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    println!("{}", line(&rule).replace(' ', "-"));
    for row in rows {
        println!("{}", line(row));
    }
    if !notes.is_empty() {
        println!();
        for note in notes.iter().filter(|n| !n.is_empty()) {
            println!("{note}");
        }
    }
}

fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) -> Res<()> {
    let deadline = Instant::now() + limit;
    while !done() {
        if Instant::now() >= deadline {
            return Err(err(format!("timed out after {limit:?} waiting for {what}")));
        }
        thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

fn join<T>(handle: thread::ScopedJoinHandle<'_, Res<T>>) -> Res<T> {
    handle.join().map_err(|_| err("a bench thread panicked"))?
}

/// The floor's mean acquire+release pair time in seconds: the "one handoff"
/// of the contended workloads' ideal.
fn handoff(env: &Env) -> Res<f64> {
    let mut con = connect(&env.raw)?;
    let key = env.key("handoff");
    for _ in 0..20 {
        floor_pair(&mut con, &env.scripts, &key, "bench-floor:1")?;
    }
    let start = Instant::now();
    for _ in 0..env.cfg.handoff_pairs {
        floor_pair(&mut con, &env.scripts, &key, "bench-floor:1")?;
    }
    Ok(start.elapsed().as_secs_f64() / env.cfg.handoff_pairs as f64)
}

/// The critical section of W2: a deliberately non-atomic GET-then-SET of the
/// counter, padded to `hold`. Returns how long the lock was held for it.
fn critical_section(con: &mut redis::Connection, counter: &str, hold: Duration) -> Res<Duration> {
    let start = Instant::now();
    let value: Option<i64> = redis::cmd("GET").arg(counter).query(con)?;
    redis::cmd("SET").arg(counter).arg(value.unwrap_or(0) + 1).query::<()>(con)?;
    if let Some(rest) = hold.checked_sub(start.elapsed()) {
        thread::sleep(rest);
    }
    Ok(start.elapsed())
}

// ---------------------------------------------------------------------------
// The run.

fn run(cfg: Cfg) -> Res<()> {
    let started = Instant::now();
    let redis = Redis::start()?;
    let url = redis.url();
    let raw = raw_client(&url)?;
    let mut stats = connect(&raw)?;
    let slowlog = |name: &str, stats: &mut redis::Connection| -> Res<String> {
        let pair: Vec<String> = redis::cmd("CONFIG").arg("GET").arg(name).query(stats)?;
        pair.get(1).cloned().ok_or_else(|| err(format!("CONFIG GET {name} replied {pair:?}")))
    };
    let slowlog_threshold = slowlog("slowlog-log-slower-than", &mut stats)?;
    let slowlog_max_len = slowlog("slowlog-max-len", &mut stats)?;
    let env = Env {
        raw,
        url,
        scripts: Scripts::new(),
        prefix: format!("kh-bench:{}", &token()[..8]),
        cfg,
        slowlog_threshold,
    };
    // Load every script up front, so that no measured window pays a NOSCRIPT
    // round trip (keyholder's force_unlock.lua is not used).
    for source in [ACQUIRE_LUA, RELEASE_LUA, RENEW_LUA, HANDOFF_LUA, DEQUEUE_LUA, COMPARE_AND_DELETE] {
        redis::cmd("SCRIPT").arg("LOAD").arg(source).query::<String>(&mut stats)?;
    }
    let outcome = run_workloads(&env, &redis, &mut stats);
    // Leave a shared server's slow log as it was.
    let _ =
        redis::cmd("CONFIG").arg("SET").arg("slowlog-max-len").arg(&slowlog_max_len).query::<()>(&mut stats);
    outcome?;
    println!(
        "\nTotal bench time {:.1} s; load average at the end: {}.",
        started.elapsed().as_secs_f64(),
        loadavg()
    );
    Ok(())
}

fn run_workloads(env: &Env, redis: &Redis, stats: &mut redis::Connection) -> Res<()> {
    header(env, redis, stats)?;
    if env.cfg.wants("W1") {
        w1(env, stats)?;
    }
    if env.cfg.wants("W2") {
        w2(env, stats)?;
    }
    if env.cfg.wants("W3") {
        w3(env, stats)?;
    }
    if env.cfg.wants("W4") {
        w4(env, stats)?;
    }
    if env.cfg.wants("W5") {
        w5(env, stats)?;
    }
    if env.cfg.wants("W6") {
        w6(env, stats)?;
    }
    if env.cfg.wants("W7") {
        w7(env, stats)?;
    }
    Ok(())
}

/// One-way latency of waking a thread blocked on a channel, in µs: the cost
/// every local handoff between threads pays on top of the Redis round trips.
fn thread_wake_latency() -> Res<Vec<f64>> {
    let (ping_tx, ping_rx) = crossbeam_channel::bounded::<()>(0);
    let (pong_tx, pong_rx) = crossbeam_channel::bounded::<()>(0);
    thread::scope(|scope| -> Res<Vec<f64>> {
        scope.spawn(move || {
            while ping_rx.recv().is_ok() {
                if pong_tx.send(()).is_err() {
                    return;
                }
            }
        });
        let mut wakes = Vec::with_capacity(1000);
        for _ in 0..1000 {
            let t = Instant::now();
            ping_tx.send(()).map_err(|_| err("ping-pong thread gone"))?;
            pong_rx.recv_timeout(Duration::from_secs(5)).map_err(|_| err("ping-pong thread silent"))?;
            wakes.push(us(t.elapsed()) / 2.0);
        }
        drop(ping_tx);
        Ok(sorted(wakes))
    })
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "n/a".to_owned())
}

fn header(env: &Env, redis: &Redis, stats: &mut redis::Connection) -> Res<()> {
    let cpus = thread::available_parallelism().map(|n| n.get().to_string()).unwrap_or_else(|_| "?".into());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| info_field(&c.replace('\t', ""), "model name"))
        .unwrap_or_else(|| "unknown".into());
    let server = info(stats, "server")?;
    let version = info_field(&server, "redis_version").unwrap_or_else(|| "?".into());
    // Loopback round trip: the physical unit of every figure below.
    let mut rtts = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let t = Instant::now();
        redis::cmd("PING").query::<String>(stats)?;
        rtts.push(us(t.elapsed()));
    }
    let rtts = sorted(rtts);
    let wakes = thread_wake_latency()?;
    let c = &env.cfg;
    println!("# keyholder benchmark\n");
    println!("- machine: {cpus} CPUs, {model}; load average at start {}", loadavg());
    println!("- redis: {version}, {}", redis.describe());
    println!(
        "- loopback PING round trip: p50 {} µs, p99 {} µs (1000 pings)",
        fmt(pct(&rtts, 50.0), 0),
        fmt(pct(&rtts, 99.0), 0)
    );
    println!(
        "- waking a blocked thread (channel ping-pong, one way): p50 {} µs, p99 {} µs (1000 round trips)",
        fmt(pct(&wakes, 50.0), 0),
        fmt(pct(&wakes, 99.0), 0)
    );
    println!(
        "- build: {}; keyholder {}",
        if cfg!(debug_assertions) { "DEBUG (figures meaningless; use --release)" } else { "release" },
        env!("CARGO_PKG_VERSION")
    );
    println!(
        "- configuration{}: {} run(s) per workload, figures are medians over runs; W1 {} pairs; \
         W2 {} threads x {} acquisitions, hold {:?}, 1 client and {} clients; W3 {} threads over {} \
         and over {} clients (baseline {} threads), idle window {:?}, stacks {} KiB; W4 {} locks from {} \
         threads, watchdog timeout {:?} ({} periods held); W5 {} iterations; W6 {:?} clients of 1 thread, \
         {} acquisitions in all; handoff = floor pair mean over {} pairs",
        if c.quick { " (--quick)" } else { "" },
        c.runs,
        c.w1_pairs,
        c.w2_threads,
        c.w2_per_thread,
        c.hold,
        c.w2_clients,
        c.w3_threads,
        c.w3_clients,
        c.w3_many_clients,
        c.w3_baseline_threads,
        c.w3_idle,
        c.w3_stack / 1024,
        c.w4_locks,
        c.w4_threads,
        c.w4_watchdog,
        c.w4_periods,
        c.w5_iters,
        c.w6_clients,
        c.w6_acquisitions,
        c.handoff_pairs,
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// W1 and W5: one thread, a loop of operations.

/// One measured single-thread loop.
struct Loop {
    rate: f64,
    p50: f64,
    p99: f64,
    rt: f64,
    evalsha: f64,
    cpu_us: f64,
    server_us: f64,
    vs_floor: f64,
}

fn measure_loop(
    stats: &mut redis::Connection,
    n: usize,
    nested: &[&str],
    mut op: impl FnMut() -> Res<()>,
) -> Res<Loop> {
    for _ in 0..n.clamp(10, 100) {
        op()?; // warm-up: scripts loaded, connections open
    }
    let mut lat = Vec::with_capacity(n);
    let a = snap(stats)?;
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        op()?;
        lat.push(us(t.elapsed()));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let b = snap(stats)?;
    let d = Delta::between(&a, &b);
    let lat = sorted(lat);
    let n = n as f64;
    Ok(Loop {
        rate: n / elapsed,
        p50: pct(&lat, 50.0),
        p99: pct(&lat, 99.0),
        rt: d.round_trips(nested, 0) / n,
        evalsha: d.calls("evalsha") / n,
        cpu_us: d.client_cpu / n * 1e6,
        server_us: d.server_cpu / n * 1e6,
        vs_floor: f64::NAN,
    })
}

fn loop_row(name: &str, runs: &[Loop]) -> Vec<String> {
    vec![
        name.to_owned(),
        fmt(med(runs, |r| r.rate), 0),
        fmt_ratio(med(runs, |r| r.vs_floor)),
        fmt(med(runs, |r| r.p50), 0),
        fmt(med(runs, |r| r.p99), 0),
        fmt(med(runs, |r| r.rt), 2),
        fmt(med(runs, |r| r.evalsha), 2),
        fmt(med(runs, |r| r.cpu_us), 1),
        fmt(med(runs, |r| r.server_us), 1),
    ]
}

fn w1(env: &Env, stats: &mut redis::Connection) -> Res<()> {
    let n = env.cfg.w1_pairs;
    let key = env.key("w1");
    let s = &env.scripts;
    let mut floor_con = connect(&env.raw)?;
    let mut base_con = connect(&env.raw)?;
    let client = env.keyholder(None)?;
    let lock = client.lock(&key)?;
    let (mut floor, mut base, mut kh) = (Vec::new(), Vec::new(), Vec::new());
    for run in 1..=env.cfg.runs {
        eprintln!("W1 run {run}/{}", env.cfg.runs);
        let f = measure_loop(stats, n, NESTED_LIB, || floor_pair(&mut floor_con, s, &key, "bench-floor:1"))?;
        let mut b = measure_loop(stats, n, NESTED_BASELINE, || {
            let t = token();
            baseline_lock(&mut base_con, &key, &t, ACQUIRE_LIMIT)?;
            baseline_unlock(&mut base_con, s, &key, &t)
        })?;
        let mut k = measure_loop(stats, n, NESTED_LIB, || Ok(kh_lock(&lock, ACQUIRE_LIMIT)?.unlock()?))?;
        b.vs_floor = b.rate / f.rate;
        k.vs_floor = k.rate / f.rate;
        floor.push(Loop { vs_floor: 1.0, ..f });
        base.push(b);
        kh.push(k);
    }
    client.shutdown();
    print_table(
        &format!("W1: uncontended acquire+release, 1 thread, {n} pairs (target: keyholder >= 0.9x floor)"),
        &[
            "impl",
            "pairs/s",
            "vs floor",
            "p50 µs",
            "p99 µs",
            "round trips/pair",
            "EVALSHA/pair",
            "client CPU µs/pair",
            "Redis CPU µs/pair",
        ],
        &[loop_row("floor", &floor), loop_row("baseline", &base), loop_row("keyholder", &kh)],
        &["vs floor = median over runs of (pairs/s ÷ the same run's floor pairs/s). Round trips counted \
           by the server (INFO commandstats). Client CPU is the whole process's, read with 10 ms tick \
           resolution; Redis CPU is the server's own (INFO cpu)."
            .to_owned()],
    );
    Ok(())
}

fn w5(env: &Env, stats: &mut redis::Connection) -> Res<()> {
    let n = env.cfg.w5_iters;
    let key = env.key("w5");
    let s = &env.scripts;
    let mut floor_con = connect(&env.raw)?;
    let client = env.keyholder(None)?;
    let lock = client.lock(&key)?;
    let (mut floor, mut kh) = (Vec::new(), Vec::new());
    let owner = "bench-floor:1";
    for run in 1..=env.cfg.runs {
        eprintln!("W5 run {run}/{}", env.cfg.runs);
        let f = measure_loop(stats, n, NESTED_LIB, || {
            for _ in 0..3 {
                if !floor_acquire(&mut floor_con, s, &key, owner)? {
                    return Err(err("floor: W5 lock unexpectedly held"));
                }
            }
            for expected in [0, 0, 1] {
                let got = floor_release(&mut floor_con, s, &key, owner)?;
                if got != expected {
                    return Err(err(format!("floor: release.lua replied {got}, expected {expected}")));
                }
            }
            Ok(())
        })?;
        let mut k = measure_loop(stats, n, NESTED_LIB, || {
            let g1 = kh_lock(&lock, ACQUIRE_LIMIT)?;
            let g2 = kh_lock(&lock, ACQUIRE_LIMIT)?;
            let g3 = kh_lock(&lock, ACQUIRE_LIMIT)?;
            g3.unlock()?;
            g2.unlock()?;
            g1.unlock()?;
            Ok(())
        })?;
        k.vs_floor = k.rate / f.rate;
        floor.push(Loop { vs_floor: 1.0, ..f });
        kh.push(k);
    }
    client.shutdown();
    let mut na = vec!["baseline".to_owned()];
    na.extend(std::iter::repeat_n("n/a".to_owned(), 8));
    print_table(
        &format!("W5: reentrancy, depth-3 nested acquire then release, 1 thread, {n} iterations"),
        &[
            "impl",
            "iterations/s",
            "vs floor",
            "p50 µs",
            "p99 µs",
            "round trips/iter",
            "EVALSHA/iter",
            "client CPU µs/iter",
            "Redis CPU µs/iter",
        ],
        &[loop_row("floor (6 script calls)", &floor), na, loop_row("keyholder", &kh)],
        &["baseline: n/a: SET NX is not reentrant; the holder's second SET NX fails and it would wait on \
           itself until its own 30 s lease expires."
            .to_owned()],
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// W2: 8 threads, one lock, 1 ms holds.

struct Contended {
    rate: f64,
    /// Mean time per acquisition not spent holding the lock, µs.
    handoff_us: f64,
    /// Longest run of consecutive acquisitions by one thread.
    thread_streak: f64,
    /// Longest run of consecutive acquisitions by one keyholder client.
    client_streak: f64,
    /// Acquisitions by other threads during the longest wait.
    worst_others: f64,
    /// The runs of one client (one thread with one client) they formed.
    worst_runs: f64,
    ideal: f64,
    vs_ideal: f64,
    hold_ms: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    lost: f64,
    rt: f64,
    attempts: f64,
    evalsha: f64,
    subs: f64,
    /// Top-level HEXISTS per acquisition (a queued thread checking a local
    /// holder after an unlock message), from the audit.
    hexists: f64,
    handoffs: f64,
    cpu_us: f64,
    server_us: f64,
}

#[derive(Clone, Copy)]
enum Kind<'a> {
    Baseline,
    Keyholder(&'a [Lock]),
}

struct Worker {
    index: usize,
    waits_ms: Vec<f64>,
    acquired_at: Vec<Instant>,
    held: Duration,
}

/// How many threads contend, and how often each acquires.
#[derive(Debug, Clone, Copy)]
struct Shape {
    threads: usize,
    per_thread: usize,
}

/// A contended worker's start line: it reports ready, then waits for go.
struct StartLine {
    ready: crossbeam_channel::Sender<()>,
    go: crossbeam_channel::Receiver<()>,
}

fn w2_worker(
    env: &Env,
    kind: Kind<'_>,
    shape: Shape,
    index: usize,
    key: &str,
    counter: &str,
    start: StartLine,
) -> Res<Worker> {
    let StartLine { ready, go } = start;
    let setup = (|| -> Res<(redis::Connection, Option<redis::Connection>)> {
        let counter_con = connect(&env.raw)?;
        let lock_con = match kind {
            Kind::Baseline => Some(connect(&env.raw)?),
            Kind::Keyholder(_) => None,
        };
        Ok((counter_con, lock_con))
    })();
    let _ = ready.send(());
    // The start signal is the sender's drop; a timeout means the bench gave up.
    if let Err(RecvTimeoutError::Timeout) = go.recv_timeout(Duration::from_secs(120)) {
        return Err(err("W2 worker was never started"));
    }
    let (mut counter_con, mut lock_con) = setup?;
    let n = shape.per_thread;
    let mut out = Worker {
        index,
        waits_ms: Vec::with_capacity(n),
        acquired_at: Vec::with_capacity(n),
        held: Duration::ZERO,
    };
    for _ in 0..n {
        let t = Instant::now();
        match (kind, lock_con.as_mut()) {
            (Kind::Keyholder(locks), _) => {
                let guard = kh_lock(&locks[index % locks.len()], ACQUIRE_LIMIT)?;
                out.acquired_at.push(Instant::now());
                out.waits_ms.push(t.elapsed().as_secs_f64() * 1e3);
                out.held += critical_section(&mut counter_con, counter, env.cfg.hold)?;
                guard.unlock()?;
            }
            (Kind::Baseline, Some(con)) => {
                let tok = token();
                baseline_lock(con, key, &tok, ACQUIRE_LIMIT)?;
                out.acquired_at.push(Instant::now());
                out.waits_ms.push(t.elapsed().as_secs_f64() * 1e3);
                out.held += critical_section(&mut counter_con, counter, env.cfg.hold)?;
                baseline_unlock(con, &env.scripts, key, &tok)?;
            }
            (Kind::Baseline, None) => return Err(err("baseline worker without a connection")),
        }
    }
    Ok(out)
}

fn run_w2(
    env: &Env,
    stats: &mut redis::Connection,
    kind: Kind<'_>,
    shape: Shape,
    handoff: f64,
) -> Res<Contended> {
    let threads = shape.threads;
    let key = env.key("w2");
    let counter = env.key("w2:counter");
    redis::cmd("DEL").arg(&counter).query::<()>(stats)?;
    let (ready_tx, ready_rx) = crossbeam_channel::unbounded::<()>();
    let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(0);
    let (workers, d) = thread::scope(|scope| -> Res<(Vec<Worker>, Delta)> {
        let mut handles = Vec::new();
        for i in 0..threads {
            let (ready, go, key, counter) = (ready_tx.clone(), go_rx.clone(), &key, &counter);
            let start = StartLine { ready, go };
            handles.push(scope.spawn(move || w2_worker(env, kind, shape, i, key, counter, start)));
        }
        for _ in 0..threads {
            ready_rx.recv_timeout(Duration::from_secs(60)).map_err(|_| err("W2 workers did not start"))?;
        }
        let audited = audit_start(env, stats)?;
        let a = snap(stats)?;
        drop(go_tx);
        let mut workers = Vec::new();
        let mut failure = None;
        for h in handles {
            match join(h) {
                Ok(w) => workers.push(w),
                Err(e) => failure = Some(e),
            }
        }
        let b = snap(stats)?;
        let top = audit_end(env, stats, audited)?;
        match failure {
            Some(e) => Err(e),
            None => Ok((workers, Delta { top, ..Delta::between(&a, &b) })),
        }
    })?;
    let acquisitions = workers.iter().map(|w| w.waits_ms.len()).sum::<usize>();
    let counted: Option<i64> = redis::cmd("GET").arg(&counter).query(stats)?;
    redis::cmd("DEL").arg(&counter).query::<()>(stats)?;
    let n = acquisitions as f64;
    let held: Duration = workers.iter().map(|w| w.held).sum();
    let hold = held.as_secs_f64() / n;
    let mut order: Vec<(Instant, usize)> =
        workers.iter().flat_map(|w| w.acquired_at.iter().map(move |at| (*at, w.index))).collect();
    order.sort();
    let clients = match kind {
        Kind::Keyholder(locks) if locks.len() > 1 => Some(locks.len()),
        _ => None,
    };
    let thread_streak = longest_streak(order.iter().map(|(_, i)| *i));
    // The longest wait, and what happened during it: acquisitions by other
    // threads, and the runs of consecutive acquisitions by one client (or,
    // with one client or the baseline, by one thread) they formed.
    let worst = workers
        .iter()
        .flat_map(|w| w.acquired_at.iter().zip(&w.waits_ms).map(move |(at, ms)| (*at, *ms, w.index)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let (worst_others, worst_runs) = worst.map_or((f64::NAN, f64::NAN), |(at, ms, me)| {
        let asked = at.checked_sub(Duration::from_secs_f64(ms / 1e3)).unwrap_or(at);
        let during: Vec<usize> =
            order.iter().filter(|(t, i)| *t > asked && *t < at && *i != me).map(|(_, i)| *i).collect();
        let owner = |i: usize| clients.map_or(i, |c| i % c);
        let runs = during.windows(2).filter(|w| owner(w[0]) != owner(w[1])).count()
            + usize::from(!during.is_empty());
        (during.len() as f64, runs as f64)
    });
    let client_streak = clients.map_or(f64::NAN, |c| longest_streak(order.iter().map(|(_, i)| i % c)));
    let waits = sorted(workers.into_iter().flat_map(|w| w.waits_ms).collect());
    let rate = n / d.wall;
    let ideal = 1.0 / (hold + handoff);
    let (nested, attempts) = match kind {
        Kind::Baseline => (NESTED_BASELINE, d.calls("set") - n),
        Kind::Keyholder(_) => (NESTED_LIB, d.calls("exists")),
    };
    Ok(Contended {
        rate,
        handoff_us: (1.0 / rate - hold) * 1e6,
        thread_streak,
        client_streak,
        worst_others,
        worst_runs,
        ideal,
        vs_ideal: rate / ideal,
        hold_ms: hold * 1e3,
        p50_ms: pct(&waits, 50.0),
        p99_ms: pct(&waits, 99.0),
        max_ms: pct(&waits, 100.0),
        lost: n - counted.unwrap_or(0) as f64,
        rt: d.round_trips(nested, acquisitions as u64) / n,
        attempts: attempts / n,
        evalsha: d.calls("evalsha") / n,
        subs: d.subscribes() / n,
        hexists: d.top_calls("hexists") / n,
        handoffs: d.calls("hdel") / n,
        cpu_us: d.client_cpu / n * 1e6,
        server_us: d.server_cpu / n * 1e6,
    })
}

/// The longest run of equal consecutive items.
fn longest_streak(items: impl Iterator<Item = usize>) -> f64 {
    let (mut best, mut run, mut last) = (0, 0, None);
    for item in items {
        run = if last == Some(item) { run + 1 } else { 1 };
        last = Some(item);
        best = best.max(run);
    }
    best as f64
}

/// The floor measured with the same critical section: one thread, the raw
/// scripts around the same hold, no second thread and no waiting. What one
/// acquire+release pair costs when each round trip follows a 1 ms pause.
fn run_floor_hold(env: &Env, stats: &mut redis::Connection, n: usize, handoff: f64) -> Res<Contended> {
    let key = env.key("w2f");
    let counter = env.key("w2f:counter");
    let owner = "bench-floor:2";
    let s = &env.scripts;
    let mut con = connect(&env.raw)?;
    let mut counter_con = connect(&env.raw)?;
    redis::cmd("DEL").arg(&counter).query::<()>(stats)?;
    let mut held = Duration::ZERO;
    let audited = audit_start(env, stats)?;
    let a = snap(stats)?;
    for _ in 0..n {
        if !floor_acquire(&mut con, s, &key, owner)? {
            return Err(err("floor: W2 lock unexpectedly held"));
        }
        held += critical_section(&mut counter_con, &counter, env.cfg.hold)?;
        if floor_release(&mut con, s, &key, owner)? != 1 {
            return Err(err("floor: W2 release did not free the lock"));
        }
    }
    let b = snap(stats)?;
    let top = audit_end(env, stats, audited)?;
    let counted: Option<i64> = redis::cmd("GET").arg(&counter).query(stats)?;
    redis::cmd("DEL").arg(&counter).query::<()>(stats)?;
    let d = Delta { top, ..Delta::between(&a, &b) };
    let nf = n as f64;
    let hold = held.as_secs_f64() / nf;
    let rate = nf / d.wall;
    let ideal = 1.0 / (hold + handoff);
    Ok(Contended {
        rate,
        handoff_us: (1.0 / rate - hold) * 1e6,
        thread_streak: f64::NAN,
        client_streak: f64::NAN,
        worst_others: f64::NAN,
        worst_runs: f64::NAN,
        ideal,
        vs_ideal: rate / ideal,
        hold_ms: hold * 1e3,
        p50_ms: f64::NAN,
        p99_ms: f64::NAN,
        max_ms: f64::NAN,
        lost: nf - counted.unwrap_or(0) as f64,
        rt: d.round_trips(NESTED_LIB, n as u64) / nf,
        attempts: d.calls("exists") / nf,
        evalsha: d.calls("evalsha") / nf,
        subs: d.subscribes() / nf,
        hexists: d.top_calls("hexists") / nf,
        handoffs: d.calls("hdel") / nf,
        cpu_us: d.client_cpu / nf * 1e6,
        server_us: d.server_cpu / nf * 1e6,
    })
}

fn contended_row(name: &str, runs: &[Contended]) -> Vec<String> {
    vec![
        name.to_owned(),
        fmt(med(runs, |r| r.rate), 0),
        fmt_ratio(med(runs, |r| r.vs_ideal)),
        fmt(med(runs, |r| r.hold_ms), 3),
        fmt(med(runs, |r| r.handoff_us), 0),
        fmt(med(runs, |r| r.p50_ms), 2),
        fmt(med(runs, |r| r.p99_ms), 2),
        format!("{} ({})", fmt(med(runs, |r| r.max_ms), 1), fmt(max_of(runs, |r| r.max_ms), 1)),
        {
            // The run whose wait was the longest.
            let worst =
                runs.iter().filter(|r| !r.max_ms.is_nan()).max_by(|a, b| a.max_ms.total_cmp(&b.max_ms));
            worst.map_or("n/a".to_owned(), |r| {
                format!("{} / {}", fmt(r.worst_others, 0), fmt(r.worst_runs, 0))
            })
        },
        format!(
            "{} / {}",
            fmt(max_of(runs, |r| r.thread_streak), 0),
            fmt(max_of(runs, |r| r.client_streak), 0)
        ),
        fmt(sum_of(runs, |r| r.lost), 0),
        fmt(med(runs, |r| r.rt), 2),
        fmt(med(runs, |r| r.attempts), 2),
        fmt(med(runs, |r| r.evalsha), 2),
        fmt(med(runs, |r| r.subs), 2),
        fmt(med(runs, |r| r.hexists), 2),
        fmt(med(runs, |r| r.handoffs), 2),
        fmt(med(runs, |r| r.cpu_us), 0),
        fmt(med(runs, |r| r.server_us), 0),
    ]
}

fn w2(env: &Env, stats: &mut redis::Connection) -> Res<()> {
    let c = &env.cfg;
    let shape = Shape { threads: c.w2_threads, per_thread: c.w2_per_thread };
    for clients in [1, c.w2_clients] {
        let spread = if clients == 1 {
            format!("{} threads in 1 client", c.w2_threads)
        } else {
            format!("{} threads over {clients} clients", c.w2_threads)
        };
        let title = format!(
            "W2: {spread}, 1 lock, {} acquisitions each, hold {:?} with a GET-then-SET counter \
             (targets: >= 0.9x ideal, max wait <= 50 ms, 0 lost updates, <= 3 round trips/acq)",
            c.w2_per_thread, c.hold
        );
        contended(env, stats, "W2", shape, clients, &title)?;
    }
    Ok(())
}

/// W6: many processes, as a service scaled out to many pods would run: N
/// clients of one thread each on one lock.
fn w6(env: &Env, stats: &mut redis::Connection) -> Res<()> {
    let c = &env.cfg;
    for &clients in &c.w6_clients {
        let shape = Shape { threads: clients, per_thread: (c.w6_acquisitions / clients).max(3) };
        let title = format!(
            "W6: {clients} clients of 1 thread each, 1 lock, {} acquisitions each, hold {:?} with a \
             GET-then-SET counter (targets: <= 3 round trips/acq, >= the baseline's throughput and >= 0.9x \
             ideal, max wait <= 50 ms with 8 clients and growing no faster than the waiters ahead)",
            shape.per_thread, c.hold
        );
        contended(env, stats, "W6", shape, clients, &title)?;
    }
    Ok(())
}

/// W7: thread-per-request. One process's threads each take and release
/// their own lock names, with no contention: the floor and the baseline with
/// a connection per thread, keyholder with one client and its defaults.
fn w7(env: &Env, stats: &mut redis::Connection) -> Res<()> {
    let c = &env.cfg;
    let mut rows = Vec::new();
    for &threads in &c.w7_threads {
        let (mut floor, mut base, mut kh) = (Vec::new(), Vec::new(), Vec::new());
        for run in 1..=c.runs {
            eprintln!("W7 ({threads} threads) run {run}/{}", c.runs);
            floor.push(run_w7(env, stats, PerRequest::Floor, threads, c.w7_pairs)?);
            base.push(run_w7(env, stats, PerRequest::Baseline, threads, c.w7_pairs)?);
            let client = env.keyholder(None)?;
            kh.push(run_w7(env, stats, PerRequest::Keyholder(&client), threads, c.w7_pairs)?);
            client.shutdown();
        }
        let rate = |runs: &[PerRequestRun]| median(runs.iter().map(|r| r.rate).collect());
        let conns = |runs: &[PerRequestRun]| median(runs.iter().map(|r| r.connections).collect());
        let ratio =
            |over: &[PerRequestRun]| median(kh.iter().zip(over).map(|(k, o)| k.rate / o.rate).collect());
        rows.push(vec![
            threads.to_string(),
            fmt(rate(&floor), 0),
            fmt(rate(&base), 0),
            fmt(rate(&kh), 0),
            fmt_ratio(ratio(&floor)),
            fmt_ratio(ratio(&base)),
            format!("{} / {} / {}", fmt(conns(&floor), 0), fmt(conns(&base), 0), fmt(conns(&kh), 0)),
            fmt(median(kh.iter().map(|r| r.rt).collect()), 2),
        ]);
    }
    print_table(
        &format!(
            "W7: thread-per-request, 1 client, each thread on its own lock names, {} acquire+release pairs in \
             all (targets: keyholder >= 0.9x the floor at every thread count with default settings and at \
             most 16 connections per client; stretch: >= the baseline from 32 threads)",
            c.w7_pairs
        ),
        &[
            "threads",
            "floor pairs/s",
            "baseline pairs/s",
            "keyholder pairs/s",
            "keyholder vs floor",
            "keyholder vs baseline",
            "Redis connections floor / baseline / keyholder",
            "keyholder round trips/pair",
        ],
        &rows,
        &["The floor runs the raw acquire.lua and release.lua and the baseline SET NX PX and its \
           compare-and-delete, each thread on a connection of its own; keyholder is one client with \
           default settings (a pool of 16 connections). Connections: connected_clients added while every \
           thread still holds what it opened, counting keyholder's pub/sub connection. Rates are medians \
           over runs, ratios medians of per-run ratios; round trips from INFO commandstats."
            .to_owned()],
    );
    Ok(())
}

/// How W7 takes and gives back a lock.
#[derive(Clone, Copy)]
enum PerRequest<'a> {
    /// The raw scripts, one connection per thread.
    Floor,
    /// `SET NX PX` and compare-and-delete, one connection per thread.
    Baseline,
    /// keyholder with its defaults: one client shared by every thread.
    Keyholder(&'a Client),
}

/// One W7 window: pairs per second, Redis connections in use, round trips
/// per pair.
struct PerRequestRun {
    rate: f64,
    connections: f64,
    rt: f64,
}

/// W7 once: `threads` threads of one process, each taking and releasing its
/// own lock names (`pairs` pairs in all), as request threads of a server do.
fn run_w7(
    env: &Env,
    stats: &mut redis::Connection,
    how: PerRequest<'_>,
    threads: usize,
    pairs: usize,
) -> Res<PerRequestRun> {
    let per_thread = (pairs / threads).max(5);
    let before = connected_clients(stats)?;
    // Four meeting points: all set up; go (the window starts); all done (the
    // window ends, their connections still open and counted); counted (they
    // may close).
    let ready = std::sync::Barrier::new(threads + 1);
    let go = std::sync::Barrier::new(threads + 1);
    let finished = std::sync::Barrier::new(threads + 1);
    let counted = std::sync::Barrier::new(threads + 1);
    let (d, connections) = thread::scope(|scope| -> Res<(Delta, f64)> {
        let mut handles = Vec::new();
        for t in 0..threads {
            let (ready, go, finished, counted) = (&ready, &go, &finished, &counted);
            let builder = thread::Builder::new().stack_size(env.cfg.w3_stack);
            let handle = builder.spawn_scoped(scope, move || -> Res<()> {
                let keys: Vec<String> = (0..4).map(|i| env.key(&format!("w7:{t}:{i}"))).collect();
                let owner = format!("bench-floor:{t}");
                let setup = match how {
                    PerRequest::Keyholder(client) => keys
                        .iter()
                        .map(|k| client.lock(k))
                        .collect::<Result<Vec<Lock>, _>>()
                        .map(|locks| (None, locks))
                        .map_err(BoxError::from),
                    _ => connect(&env.raw).map(|con| (Some(con), Vec::new())),
                };
                ready.wait();
                go.wait();
                let outcome = setup.and_then(|(mut con, locks)| {
                    for i in 0..per_thread {
                        let key = &keys[i % keys.len()];
                        match (how, con.as_mut()) {
                            (PerRequest::Floor, Some(con)) => floor_pair(con, &env.scripts, key, &owner)?,
                            (PerRequest::Baseline, Some(con)) => {
                                let tok = token();
                                baseline_lock(con, key, &tok, ACQUIRE_LIMIT)?;
                                baseline_unlock(con, &env.scripts, key, &tok)?;
                            }
                            (PerRequest::Keyholder(_), _) => {
                                kh_lock(&locks[i % locks.len()], ACQUIRE_LIMIT)?.unlock()?;
                            }
                            _ => return Err(err("W7 worker without a connection")),
                        }
                    }
                    Ok(con)
                });
                finished.wait();
                counted.wait();
                outcome.map(drop)
            })?;
            handles.push(handle);
        }
        ready.wait();
        let a = snap(stats)?;
        go.wait();
        finished.wait();
        let b = snap(stats)?;
        let connections = connected_clients(stats)? - before;
        counted.wait();
        for h in handles {
            join(h)?;
        }
        Ok((Delta::between(&a, &b), connections))
    })?;
    let n = (per_thread * threads) as f64;
    Ok(PerRequestRun { rate: n / d.wall, connections, rt: d.round_trips(NESTED_LIB, 0) / n })
}

/// Runs one contended configuration (`shape` spread over `clients`
/// keyholder clients) as the floor, the baseline and keyholder, and prints
/// its table.
fn contended(
    env: &Env,
    stats: &mut redis::Connection,
    workload: &str,
    shape: Shape,
    clients: usize,
    title: &str,
) -> Res<()> {
    let c = &env.cfg;
    {
        let (mut ideal, mut handoffs, mut floor_loop, mut base, mut kh) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for run in 1..=c.runs {
            eprintln!("{workload} ({clients} client(s)) run {run}/{}", c.runs);
            let h = handoff(env)?;
            handoffs.push(h * 1e6);
            floor_loop.push(run_floor_hold(env, stats, (shape.per_thread * 2).max(10), h)?);
            base.push(run_w2(env, stats, Kind::Baseline, shape, h)?);
            let kh_clients = (0..clients).map(|_| env.keyholder(None)).collect::<Res<Vec<Client>>>()?;
            let locks =
                kh_clients.iter().map(|k| k.lock(&env.key("w2"))).collect::<Result<Vec<Lock>, _>>()?;
            let k = run_w2(env, stats, Kind::Keyholder(&locks), shape, h)?;
            for k in &kh_clients {
                k.shutdown();
            }
            // The floor row: the ideal at keyholder's measured hold.
            ideal.push(Contended {
                rate: k.ideal,
                handoff_us: h * 1e6,
                thread_streak: f64::NAN,
                client_streak: f64::NAN,
                worst_others: f64::NAN,
                worst_runs: f64::NAN,
                ideal: k.ideal,
                vs_ideal: 1.0,
                hold_ms: k.hold_ms,
                p50_ms: f64::NAN,
                p99_ms: f64::NAN,
                max_ms: f64::NAN,
                lost: f64::NAN,
                rt: 2.0,
                attempts: 1.0,
                evalsha: 2.0,
                subs: 0.0,
                hexists: 0.0,
                handoffs: 0.0,
                cpu_us: f64::NAN,
                server_us: f64::NAN,
            });
            kh.push(k);
        }
        print_table(
            title,
            &[
                "impl",
                "acq/s",
                "vs ideal",
                "hold ms",
                "handoff µs",
                "p50 wait ms",
                "p99 wait ms",
                "max wait ms (worst run)",
                "during worst wait: others' acqs / runs",
                "longest streak thread / client",
                "lost updates",
                "round trips/acq",
                "acquire attempts/acq",
                "EVALSHA/acq",
                "(UN)SUBSCRIBE/acq",
                "HEXISTS/acq",
                "hand-offs/acq",
                "client CPU µs/acq",
                "Redis CPU µs/acq",
            ],
            &[
                contended_row("floor (ideal)", &ideal),
                contended_row("floor loop, 1 thread, same hold", &floor_loop),
                contended_row("baseline", &base),
                contended_row("keyholder", &kh),
            ],
            &[
                format!(
                    "ideal = 1 / (measured mean hold + one handoff); handoff = floor acquire+release pair, \
                     median {} µs; an implementation's handoff = 1/(acq/s) - mean hold. vs ideal is each \
                     run's own ratio. Longest streak: most consecutive acquisitions by one thread / one \
                     keyholder client, worst run (a streak is barging). During worst wait: in the worst run, the \
                     acquisitions other threads made while the longest-waiting thread waited, and the runs \
                     of consecutive acquisitions by one client (by one thread, with one client or the \
                     baseline) they formed. Lost updates: summed over runs. \
                     Round trips are top-level commands{}, excluding the counter's GET/SET; \
                     HEXISTS: keyholder's own top-level HEXISTS (a queued thread checking a local holder \
                     after an unlock message), counted by the audit. Acquire attempts: keyholder's acquire.lua \
                     calls (its EXISTS count), the baseline's SET NX calls; hand-offs: keyholder's HDEL \
                     count: handoff.lua calls that passed the lock straight to a local thread, and grant \
                     entries taken off the queue when clients queue (about one per acquisition then). Client CPU includes the \
                     counter's GET/SET, and has a 10 ms tick resolution. The floor loop is measured: one \
                     thread runs the raw acquire.lua, the same critical section and release.lua, with no \
                     second thread to wake: what a pair costs when its round trips follow a 1 ms pause.",
                    fmt(median(handoffs), 0),
                    if c.audit {
                        " counted by the server's slow log (every command logged, script-internal ones \
                         told apart by their peer)"
                    } else {
                        " (INFO commandstats less script-internal commands; --no-audit: top-level HEXISTS \
                         uncounted)"
                    }
                ),
                if clients == 1 {
                    String::new()
                } else {
                    "The baseline has no client object: each of its threads has its own connection in both \
                     configurations."
                        .to_owned()
                },
            ],
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// W3: the herd.

struct Herd {
    threads: usize,
    total_s: f64,
    ideal_s: f64,
    vs_ideal: f64,
    pubsub_conns: f64,
    conns: f64,
    numsub: f64,
    attempts: f64,
    rt: f64,
    evalsha: f64,
    subs: f64,
    handoffs: f64,
    /// acquire.lua calls per published unlock message.
    per_unlock: f64,
    /// Top-level HEXISTS per acquisition, from the audit.
    hexists: f64,
    idle_cpu_ms_s: f64,
    idle_wakeups_s: f64,
    idle_cmds_s: f64,
    herd_cpu_us: f64,
    herd_server_us: f64,
}

impl Herd {
    /// The figures both implementations report, from one run's idle window
    /// and counter delta; `attempt` is the command that counts acquire
    /// attempts, `nested` the commands their scripts run inside Redis.
    /// Per-unlock and HEXISTS figures are left unknown (NaN).
    fn measured(
        threads: usize,
        total_s: f64,
        ideal_s: f64,
        idle: &Idle,
        d: &Delta,
        attempt: &str,
        nested: &[&str],
    ) -> Herd {
        let nf = threads as f64;
        Herd {
            threads,
            total_s,
            ideal_s,
            vs_ideal: ideal_s / total_s,
            pubsub_conns: idle.pubsub_conns,
            conns: idle.conns,
            numsub: idle.numsub,
            attempts: d.calls(attempt) / nf,
            rt: d.round_trips(nested, 0) / nf,
            evalsha: d.calls("evalsha") / nf,
            subs: d.subscribes() / nf,
            handoffs: d.calls("hdel") / nf,
            per_unlock: f64::NAN,
            hexists: f64::NAN,
            idle_cpu_ms_s: idle.cpu_ms_s,
            idle_wakeups_s: idle.wakeups_s,
            idle_cmds_s: idle.cmds_s,
            herd_cpu_us: d.client_cpu / nf * 1e6,
            herd_server_us: d.server_cpu / nf * 1e6,
        }
    }
}

/// What the server and the process did while every thread waited on a held lock.
struct Idle {
    cpu_ms_s: f64,
    wakeups_s: f64,
    cmds_s: f64,
    pubsub_conns: f64,
    conns: f64,
    numsub: f64,
}

fn measure_idle(
    env: &Env,
    stats: &mut redis::Connection,
    channel: &str,
    nested: &[&str],
    conns_before: f64,
    audit: bool,
) -> Res<Idle> {
    let window = env.cfg.w3_idle;
    let audited = audit && audit_start(env, stats)?;
    let w0 = thread_switches();
    let a = snap(stats)?;
    thread::sleep(window);
    let b = snap(stats)?;
    let w1 = thread_switches();
    let top = audit_end(env, stats, audited)?;
    let d = Delta { top, ..Delta::between(&a, &b) };
    let secs = d.wall;
    let pubsub: String = redis::cmd("CLIENT").arg("LIST").arg("TYPE").arg("pubsub").query(stats)?;
    let numsub: HashMap<String, i64> = redis::cmd("PUBSUB").arg("NUMSUB").arg(channel).query(stats)?;
    let clients = info(stats, "clients")?;
    let connected =
        info_field(&clients, "connected_clients").and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN);
    Ok(Idle {
        cpu_ms_s: d.client_cpu * 1e3 / secs,
        wakeups_s: (w1 - w0) / secs,
        cmds_s: d.round_trips(nested, 0) / secs,
        pubsub_conns: pubsub.lines().filter(|l| !l.trim().is_empty()).count() as f64,
        conns: connected - conns_before,
        numsub: numsub.get(channel).copied().unwrap_or(0) as f64,
    })
}

fn connected_clients(stats: &mut redis::Connection) -> Res<f64> {
    let clients = info(stats, "clients")?;
    info_field(&clients, "connected_clients")
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| err("no connected_clients in INFO clients"))
}

fn w3_keyholder(env: &Env, stats: &mut redis::Connection, clients: usize, handoff: f64) -> Res<Herd> {
    let c = &env.cfg;
    let n = c.w3_threads;
    let key = env.key("w3");
    let channel = channel_of(&key);
    let s = &env.scripts;
    let blocker = "bench-blocker:1";
    let conns_before = connected_clients(stats)?;
    let clients = (0..clients).map(|_| env.keyholder(None)).collect::<Res<Vec<Client>>>()?;
    let locks = clients.iter().map(|k| k.lock(&key)).collect::<Result<Vec<Lock>, _>>()?;
    for lock in &locks {
        kh_lock(lock, ACQUIRE_LIMIT)?.unlock()?; // warm-up: a pooled connection each
    }
    let mut block_con = connect(&env.raw)?;
    if !floor_acquire(&mut block_con, s, &key, blocker)? {
        return Err(err("W3: the lock is unexpectedly held"));
    }
    let ready = AtomicUsize::new(0);
    let held_ns = AtomicU64::new(0);
    let result = thread::scope(|scope| -> Res<Herd> {
        let mut handles = Vec::new();
        let mut spawn_error = None;
        for i in 0..n {
            let (lock, ready, held_ns, hold) = (&locks[i % locks.len()], &ready, &held_ns, c.hold);
            let spawned =
                thread::Builder::new().stack_size(c.w3_stack).spawn_scoped(scope, move || -> Res<()> {
                    ready.fetch_add(1, Ordering::AcqRel);
                    let guard = kh_lock(lock, ACQUIRE_LIMIT)?;
                    let start = Instant::now();
                    thread::sleep(hold);
                    held_ns.fetch_add(start.elapsed().as_nanos() as u64, Ordering::AcqRel);
                    Ok(guard.unlock()?)
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    spawn_error = Some(err(format!("W3: spawning thread {i} failed: {e}")));
                    break;
                }
            }
        }
        let idle = match spawn_error {
            Some(e) => Err(e),
            None => (|| -> Res<Idle> {
                wait_until(Duration::from_secs(60), "W3 threads to start", || {
                    ready.load(Ordering::Acquire) >= n
                })?;
                // Every client's waiters subscribe; give them a bounded moment
                // (the idle window reports what is there either way).
                let _ = wait_until(Duration::from_secs(5), "every client to subscribe", || {
                    clients.iter().all(|k| k.subscribed_channels() == 1)
                });
                thread::sleep(Duration::from_millis(if c.quick { 50 } else { 300 }));
                measure_idle(env, stats, &channel, NESTED_LIB, conns_before + 1.0, true)
            })(),
        };
        // Pass the lock along, whatever happened above: the threads finish.
        let audited = audit_start(env, stats).unwrap_or(false);
        let a = snap(stats);
        let start = Instant::now();
        let released = floor_release(&mut block_con, s, &key, blocker);
        let mut failure = None;
        for h in handles {
            if let Err(e) = join(h) {
                failure = Some(e);
            }
        }
        let total = start.elapsed().as_secs_f64();
        let b = snap(stats)?;
        let top = audit_end(env, stats, audited)?;
        let a = a?;
        if released? != 1 {
            return Err(err("W3: the blocker's release did not publish"));
        }
        if let Some(e) = failure {
            return Err(e);
        }
        let idle = idle?;
        let d = Delta { top, ..Delta::between(&a, &b) };
        let nf = n as f64;
        let ideal = held_ns.load(Ordering::Acquire) as f64 / 1e9 + nf * handoff;
        Ok(Herd {
            per_unlock: d.calls("exists") / d.calls("publish"),
            hexists: d.top_calls("hexists") / nf,
            ..Herd::measured(n, total, ideal, &idle, &d, "exists", NESTED_LIB)
        })
    });
    for k in &clients {
        k.shutdown();
    }
    result
}

fn w3_baseline(env: &Env, stats: &mut redis::Connection, handoff: f64) -> Res<Herd> {
    let c = &env.cfg;
    let n = c.w3_baseline_threads;
    let key = env.key("w3b");
    let s = &env.scripts;
    let conns_before = connected_clients(stats)?;
    let mut block_con = connect(&env.raw)?;
    let blocker = token();
    if !baseline_try(&mut block_con, &key, &blocker)? {
        return Err(err("W3 baseline: the lock is unexpectedly held"));
    }
    let ready = AtomicUsize::new(0);
    let held_ns = AtomicU64::new(0);
    thread::scope(|scope| -> Res<Herd> {
        let mut handles = Vec::new();
        let mut spawn_error = None;
        for i in 0..n {
            let (key, ready, held_ns, hold) = (&key, &ready, &held_ns, c.hold);
            let spawned =
                thread::Builder::new().stack_size(c.w3_stack).spawn_scoped(scope, move || -> Res<()> {
                    let con = connect(&env.raw);
                    ready.fetch_add(1, Ordering::AcqRel);
                    let mut con = con?;
                    let tok = token();
                    baseline_lock(&mut con, key, &tok, ACQUIRE_LIMIT)?;
                    let start = Instant::now();
                    thread::sleep(hold);
                    held_ns.fetch_add(start.elapsed().as_nanos() as u64, Ordering::AcqRel);
                    baseline_unlock(&mut con, s, key, &tok)
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    spawn_error = Some(err(format!("W3 baseline: spawning thread {i} failed: {e}")));
                    break;
                }
            }
        }
        let idle = match spawn_error {
            Some(e) => Err(e),
            None => (|| -> Res<Idle> {
                wait_until(Duration::from_secs(60), "W3 baseline threads to connect", || {
                    ready.load(Ordering::Acquire) >= n
                })?;
                thread::sleep(Duration::from_millis(if c.quick { 50 } else { 300 }));
                // Not audited: 1000 pollers would fill the slow log, and the
                // baseline runs no command both inside and outside a script.
                measure_idle(
                    env,
                    stats,
                    &channel_of(key.as_str()),
                    NESTED_BASELINE,
                    conns_before + 1.0,
                    false,
                )
            })(),
        };
        let a = snap(stats);
        let start = Instant::now();
        let released = baseline_unlock(&mut block_con, s, &key, &blocker);
        let mut failure = None;
        for h in handles {
            if let Err(e) = join(h) {
                failure = Some(e);
            }
        }
        let total = start.elapsed().as_secs_f64();
        let b = snap(stats)?;
        let a = a?;
        released?;
        if let Some(e) = failure {
            return Err(e);
        }
        let idle = idle?;
        let d = Delta::between(&a, &b);
        let nf = n as f64;
        let ideal = held_ns.load(Ordering::Acquire) as f64 / 1e9 + nf * handoff;
        Ok(Herd::measured(n, total, ideal, &idle, &d, "set", NESTED_BASELINE))
    })
}

fn herd_row(name: &str, runs: &[Herd]) -> Vec<String> {
    vec![
        name.to_owned(),
        runs.first().map(|r| r.threads.to_string()).unwrap_or_default(),
        fmt(med(runs, |r| r.total_s), 2),
        fmt_ratio(med(runs, |r| r.vs_ideal)),
        fmt(med(runs, |r| r.pubsub_conns), 0),
        fmt(med(runs, |r| r.conns), 0),
        fmt(med(runs, |r| r.numsub), 0),
        fmt(med(runs, |r| r.attempts), 2),
        fmt(med(runs, |r| r.evalsha), 2),
        fmt(med(runs, |r| r.subs), 2),
        fmt(med(runs, |r| r.handoffs), 2),
        fmt(med(runs, |r| r.per_unlock), 2),
        fmt(med(runs, |r| r.hexists), 2),
        fmt(med(runs, |r| r.rt), 2),
        fmt(med(runs, |r| r.idle_cpu_ms_s), 0),
        fmt(med(runs, |r| r.idle_wakeups_s), 0),
        fmt(med(runs, |r| r.idle_cmds_s), 0),
        fmt(med(runs, |r| r.herd_cpu_us), 0),
        fmt(med(runs, |r| r.herd_server_us), 0),
    ]
}

fn w3(env: &Env, stats: &mut redis::Connection) -> Res<()> {
    w3_herd(env, stats, env.cfg.w3_clients, true)?;
    // The same herd spread over many clients (processes, pods): one wake per
    // unlock must not become one per client. The baseline has no clients.
    w3_herd(env, stats, env.cfg.w3_many_clients, false)
}

/// One W3 configuration: the herd over `clients` keyholder clients, with
/// the polling baseline when `baseline`.
fn w3_herd(env: &Env, stats: &mut redis::Connection, clients: usize, baseline: bool) -> Res<()> {
    let c = &env.cfg;
    let (mut ideal, mut base, mut kh, mut handoffs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 1..=c.runs {
        eprintln!("W3 ({clients} clients) run {run}/{}", c.runs);
        let h = handoff(env)?;
        handoffs.push(h * 1e6);
        if baseline {
            base.push(w3_baseline(env, stats, h)?);
        }
        let k = w3_keyholder(env, stats, clients, h)?;
        ideal.push(Herd {
            threads: k.threads,
            total_s: k.ideal_s,
            ideal_s: k.ideal_s,
            vs_ideal: 1.0,
            pubsub_conns: f64::NAN,
            conns: f64::NAN,
            numsub: f64::NAN,
            attempts: 1.0,
            rt: 2.0,
            evalsha: 2.0,
            subs: 0.0,
            handoffs: 0.0,
            per_unlock: 1.0,
            hexists: 0.0,
            idle_cpu_ms_s: f64::NAN,
            idle_wakeups_s: f64::NAN,
            idle_cmds_s: f64::NAN,
            herd_cpu_us: f64::NAN,
            herd_server_us: f64::NAN,
        });
        kh.push(k);
    }
    let mut notes = vec![format!(
        "ideal = sum of measured holds + threads x one handoff (floor pair, median {} µs). Idle figures are \
         measured over {:?} while every thread waits on a lock held by another owner: client CPU, context \
         switches of all non-main threads (wake-ups), and top-level Redis commands. pub/sub conns: CLIENT \
         LIST TYPE pubsub; conns: connected_clients added by the implementation; subscribers: PUBSUB NUMSUB \
         of the lock's channel. Acquire attempts per acquisition: keyholder's acquire.lua calls (EXISTS \
         count), the baseline's SET NX calls; hand-offs: HDEL count, i.e. handoff.lua calls that passed the \
         lock straight to a local thread and, across clients, grant entries taken off the queue (so about \
         one per acquisition once clients queue); acquire calls/unlock: acquire.lua calls per unlock message published \
         (EXISTS / PUBLISH count, a release that hands the lock over publishing once, one that wakes a \
         client three times), at most one per client when each unlock wakes at most one thread per \
         client. EVALSHA counts every script \
         call: acquires, releases, hand-offs. keyholder's round trips and idle commands{}; HEXISTS: its own \
         top-level HEXISTS. The baseline's are INFO commandstats less its compare-and-delete's GET/DEL.",
        fmt(median(handoffs), 0),
        c.w3_idle,
        if c.audit {
            " are top-level commands counted by the server's slow log"
        } else {
            " are INFO commandstats less script-internal commands (--no-audit: top-level HEXISTS uncounted)"
        }
    )];
    if !baseline {
        notes.push("The polling baseline has no clients: see the first W3 table.".to_owned());
    } else if c.w3_baseline_threads != c.w3_threads {
        notes.push(format!(
            "The baseline ran {} polling threads, not {}, each with its own connection.",
            c.w3_baseline_threads, c.w3_threads
        ));
    }
    print_table(
        &format!(
            "W3: herd, {} threads over {} clients wait on 1 lock held elsewhere, then each takes it once \
             for {:?} (targets: 1 pub/sub connection per client, <= 1 woken thread per client per unlock, \
             no CPU while waiting)",
            c.w3_threads, clients, c.hold
        ),
        &[
            "impl",
            "threads",
            "total s",
            "vs ideal",
            "pub/sub conns",
            "conns",
            "subscribers",
            "acquire attempts/acq",
            "EVALSHA/acq",
            "(UN)SUBSCRIBE/acq",
            "hand-offs/acq",
            "acquire calls/unlock",
            "HEXISTS/acq",
            "round trips/acq",
            "idle client CPU ms/s",
            "idle wake-ups/s",
            "idle Redis cmds/s",
            "herd client CPU µs/acq",
            "herd Redis CPU µs/acq",
        ],
        &if baseline {
            vec![herd_row("floor (ideal)", &ideal), herd_row("baseline", &base), herd_row("keyholder", &kh)]
        } else {
            vec![herd_row("floor (ideal)", &ideal), herd_row("keyholder", &kh)]
        },
        &notes,
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// W4: many locks under the watchdog.

struct Many {
    acquire_rate: f64,
    release_rate: f64,
    rounds: f64,
    calls_per_round: f64,
    per_100: f64,
    keys_per_round: f64,
    keys_lost: f64,
    guards_lost: f64,
    /// Releases that failed (the hold was found lost at release).
    release_errors: f64,
    min_pttl_ms: f64,
    cpu_ms_round: f64,
    server_ms_round: f64,
    acquire_rt: f64,
}

/// Every key present with a TTL? Returns (missing or without TTL, min PTTL).
fn check_keys(stats: &mut redis::Connection, names: &[String]) -> Res<(f64, f64)> {
    let mut lost = 0;
    let mut min = i64::MAX;
    for chunk in names.chunks(1000) {
        let mut pipe = redis::pipe();
        for name in chunk {
            pipe.cmd("PTTL").arg(name);
        }
        let ttls: Vec<i64> = pipe.query(stats)?;
        for ttl in ttls {
            if ttl <= 0 {
                lost += 1;
            } else {
                min = min.min(ttl);
            }
        }
    }
    Ok((lost as f64, if min == i64::MAX { f64::NAN } else { min as f64 }))
}

fn w4_names(env: &Env, what: &str) -> Vec<String> {
    (0..env.cfg.w4_locks).map(|i| env.key(&format!("{what}:{i}"))).collect()
}

fn w4_keyholder(env: &Env, stats: &mut redis::Connection) -> Res<Many> {
    let c = &env.cfg;
    let names = w4_names(env, "w4k");
    let client = env.keyholder(Some(c.w4_watchdog))?;
    kh_lock(&client.lock(&env.key("w4k:warm-up"))?, ACQUIRE_LIMIT)?.unlock()?;
    let period = c.w4_watchdog / 3;
    let per_thread = names.len().div_ceil(c.w4_threads);
    let (ready_tx, ready_rx) = crossbeam_channel::unbounded::<Res<()>>();
    let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(0);
    let out = thread::scope(|scope| -> Res<Many> {
        let mut handles = Vec::new();
        let a = snap(stats)?;
        for chunk in names.chunks(per_thread) {
            let (client, ready, go) = (&client, ready_tx.clone(), go_rx.clone());
            handles.push(scope.spawn(move || -> Res<(usize, usize)> {
                let mut guards = Vec::with_capacity(chunk.len());
                let acquired = (|| -> Res<()> {
                    for name in chunk {
                        guards.push(kh_lock(&client.lock(name)?, ACQUIRE_LIMIT)?);
                    }
                    Ok(())
                })();
                let failed = acquired.as_ref().err().map(|e| e.to_string());
                let _ = ready.send(acquired);
                let _ = go.recv_timeout(Duration::from_secs(600));
                let lost = guards.iter().filter(|g| g.is_lost()).count();
                let mut release_errors = 0;
                for guard in guards {
                    if guard.unlock().is_err() {
                        release_errors += 1;
                    }
                }
                match failed {
                    Some(e) => Err(err(e)),
                    None => Ok((lost, release_errors)),
                }
            }));
        }
        let start = Instant::now();
        let mut acquired: Res<()> = Ok(());
        for _ in 0..handles.len() {
            match ready_rx.recv_timeout(Duration::from_secs(300)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => acquired = Err(e),
                Err(_) => acquired = Err(err("W4: acquiring timed out")),
            }
        }
        let acquire_s = start.elapsed().as_secs_f64();
        let measured = acquired.and_then(|()| -> Res<_> {
            let b = snap(stats)?;
            let s0 = snap(stats)?;
            thread::sleep(period * c.w4_periods);
            let s1 = snap(stats)?;
            let keys = check_keys(stats, &names)?;
            Ok((Delta::between(&a, &b), Delta::between(&s0, &s1), keys))
        });
        let release_start = Instant::now();
        drop(go_tx);
        let mut guards_lost = 0;
        let mut release_errors = 0;
        let mut failure = None;
        for h in handles {
            match join(h) {
                Ok((lost, errors)) => {
                    guards_lost += lost;
                    release_errors += errors;
                }
                Err(e) => failure = Some(e),
            }
        }
        let release_s = release_start.elapsed().as_secs_f64();
        if let Some(e) = failure {
            return Err(e);
        }
        let (acq, hold, (keys_lost, min_pttl)) = measured?;
        let n = names.len() as f64;
        let rounds = hold.calls("type") / n;
        let calls = hold.calls("evalsha");
        Ok(Many {
            acquire_rate: n / acquire_s,
            release_rate: n / release_s,
            rounds,
            calls_per_round: calls / rounds,
            per_100: calls / rounds / (n / 100.0),
            keys_per_round: hold.calls("type") / rounds,
            keys_lost,
            guards_lost: guards_lost as f64,
            release_errors: release_errors as f64,
            min_pttl_ms: min_pttl,
            cpu_ms_round: hold.client_cpu * 1e3 / rounds,
            server_ms_round: hold.server_cpu * 1e3 / rounds,
            acquire_rt: acq.round_trips(NESTED_LIB, 0) / n,
        })
    });
    client.shutdown();
    out
}

/// Floor W4: the same holds taken by `acquire.lua` and renewed by the raw
/// loop of `renew.lua` over batches of 100 keys every period.
fn w4_floor(env: &Env, stats: &mut redis::Connection) -> Res<Many> {
    let c = &env.cfg;
    let names = w4_names(env, "w4f");
    let s = &env.scripts;
    let per_thread = names.len().div_ceil(c.w4_threads);
    let owner = "bench-floor:4";
    let parallel = |f: &(dyn Fn(&mut redis::Connection, &str) -> Res<()> + Sync)| -> Res<f64> {
        let start = Instant::now();
        thread::scope(|scope| -> Res<()> {
            let handles: Vec<_> = names
                .chunks(per_thread)
                .map(|chunk| {
                    scope.spawn(move || -> Res<()> {
                        let mut con = connect(&env.raw)?;
                        for name in chunk {
                            f(&mut con, name)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            for h in handles {
                join(h)?;
            }
            Ok(())
        })?;
        Ok(start.elapsed().as_secs_f64())
    };
    let a = snap(stats)?;
    let acquire_s = parallel(&|con, name| {
        if floor_acquire(con, s, name, owner)? { Ok(()) } else { Err(err("floor W4: lock held")) }
    })?;
    let b = snap(stats)?;
    let lease_ms = c.w4_watchdog.as_millis() as u64;
    let period = c.w4_watchdog / 3;
    let mut con = connect(&env.raw)?;
    let s0 = snap(stats)?;
    let start = Instant::now();
    for round in 1..=c.w4_periods {
        let tick = start + period * round;
        thread::sleep(tick.saturating_duration_since(Instant::now()));
        for batch in names.chunks(100) {
            let mut invocation = s.renew.prepare_invoke();
            invocation.arg(lease_ms);
            for name in batch {
                invocation.key(name.as_str()).arg(owner);
            }
            let renewed: Vec<i64> = invocation.invoke(&mut con)?;
            if renewed.iter().any(|r| *r != 1) {
                return Err(err("floor W4: a renewal was refused"));
            }
        }
    }
    thread::sleep((start + period * c.w4_periods).saturating_duration_since(Instant::now()));
    let s1 = snap(stats)?;
    let (keys_lost, min_pttl) = check_keys(stats, &names)?;
    let release_s = parallel(&|con, name| match floor_release(con, s, name, owner)? {
        1 => Ok(()),
        n => Err(err(format!("floor W4: release.lua replied {n}"))),
    })?;
    let (acq, hold) = (Delta::between(&a, &b), Delta::between(&s0, &s1));
    let n = names.len() as f64;
    let rounds = hold.calls("type") / n;
    let calls = hold.calls("evalsha");
    Ok(Many {
        acquire_rate: n / acquire_s,
        release_rate: n / release_s,
        rounds,
        calls_per_round: calls / rounds,
        per_100: calls / rounds / (n / 100.0),
        keys_per_round: hold.calls("type") / rounds,
        keys_lost,
        guards_lost: f64::NAN,
        release_errors: f64::NAN,
        min_pttl_ms: min_pttl,
        cpu_ms_round: hold.client_cpu * 1e3 / rounds,
        server_ms_round: hold.server_cpu * 1e3 / rounds,
        acquire_rt: acq.round_trips(NESTED_LIB, 0) / n,
    })
}

/// Baseline W4: SET NX PX 30000 per lock, no renewal at all.
fn w4_baseline(env: &Env, stats: &mut redis::Connection) -> Res<Many> {
    let c = &env.cfg;
    let names = w4_names(env, "w4b");
    let tokens: Vec<String> = names.iter().map(|_| token()).collect();
    let per_thread = names.len().div_ceil(c.w4_threads);
    let s = &env.scripts;
    let parallel = |release: bool| -> Res<f64> {
        let start = Instant::now();
        thread::scope(|scope| -> Res<()> {
            let handles: Vec<_> = names
                .chunks(per_thread)
                .zip(tokens.chunks(per_thread))
                .map(|(chunk, toks)| {
                    scope.spawn(move || -> Res<()> {
                        let mut con = connect(&env.raw)?;
                        for (name, tok) in chunk.iter().zip(toks) {
                            if release {
                                baseline_unlock(&mut con, s, name, tok)?;
                            } else {
                                baseline_lock(&mut con, name, tok, ACQUIRE_LIMIT)?;
                            }
                        }
                        Ok(())
                    })
                })
                .collect();
            for h in handles {
                join(h)?;
            }
            Ok(())
        })?;
        Ok(start.elapsed().as_secs_f64())
    };
    let a = snap(stats)?;
    let acquire_s = parallel(false)?;
    let b = snap(stats)?;
    let (keys_lost, min_pttl) = check_keys(stats, &names)?;
    let release_s = parallel(true)?;
    let n = names.len() as f64;
    Ok(Many {
        acquire_rate: n / acquire_s,
        release_rate: n / release_s,
        rounds: f64::NAN,
        calls_per_round: f64::NAN,
        per_100: f64::NAN,
        keys_per_round: f64::NAN,
        keys_lost,
        guards_lost: f64::NAN,
        release_errors: f64::NAN,
        min_pttl_ms: min_pttl,
        cpu_ms_round: f64::NAN,
        server_ms_round: f64::NAN,
        acquire_rt: Delta::between(&a, &b).round_trips(NESTED_BASELINE, 0) / n,
    })
}

fn many_row(name: &str, runs: &[Many]) -> Vec<String> {
    vec![
        name.to_owned(),
        fmt(med(runs, |r| r.acquire_rate), 0),
        fmt(med(runs, |r| r.acquire_rt), 2),
        fmt(med(runs, |r| r.rounds), 0),
        fmt(med(runs, |r| r.calls_per_round), 1),
        fmt(med(runs, |r| r.per_100), 2),
        fmt(med(runs, |r| r.keys_per_round), 0),
        fmt(sum_of(runs, |r| r.keys_lost), 0),
        format!(
            "{} / {}",
            fmt(sum_of(runs, |r| r.guards_lost), 0),
            fmt(sum_of(runs, |r| r.release_errors), 0)
        ),
        fmt(med(runs, |r| r.min_pttl_ms), 0),
        fmt(med(runs, |r| r.cpu_ms_round), 1),
        fmt(med(runs, |r| r.server_ms_round), 1),
        fmt(med(runs, |r| r.release_rate), 0),
    ]
}

fn w4(env: &Env, stats: &mut redis::Connection) -> Res<()> {
    let c = &env.cfg;
    let (mut floor, mut base, mut kh) = (Vec::new(), Vec::new(), Vec::new());
    for run in 1..=c.runs {
        eprintln!("W4 run {run}/{}", c.runs);
        floor.push(w4_floor(env, stats)?);
        base.push(w4_baseline(env, stats)?);
        kh.push(w4_keyholder(env, stats)?);
    }
    let n = c.w4_locks;
    let mut base_row = many_row("baseline (fixed 30 s lease)", &base);
    base_row[4] = format!("none ({n} PEXPIRE if hand-renewed)");
    base_row[5] = "none (100.00 if hand-renewed)".to_owned();
    print_table(
        &format!(
            "W4: {n} locks held under the watchdog from {} threads, watchdog timeout {:?} (a period of \
             {:?}), held {} periods (targets: <= 1 renewal call per 100 locks per period, 0 keys lost)",
            c.w4_threads,
            c.w4_watchdog,
            c.w4_watchdog / 3,
            c.w4_periods
        ),
        &[
            "impl",
            "acquire locks/s",
            "round trips/acquire",
            "renewal rounds",
            "renewal calls/round",
            "calls per 100 locks per round",
            "keys renewed/round",
            "keys lost",
            "guards lost / release errors",
            "min PTTL ms at end",
            "client CPU ms/round",
            "Redis CPU ms/round",
            "release locks/s",
        ],
        &[many_row("floor (raw renew.lua, 100 keys/call)", &floor), base_row, many_row("keyholder", &kh)],
        &[format!(
            "A renewal round is one watchdog period; rounds are counted by the server (renew.lua runs TYPE \
             once per key, so rounds = TYPE calls / locks) and calls are EVALSHA calls in the hold window. \
             Keys lost: keys missing or without TTL at the end of the hold (PTTL <= 0); guards lost: \
             LockGuard::is_lost() at the end; release errors: unlock() calls that failed; all summed over runs. CPU is over the hold window only. The \
             baseline holds a fixed 30 s lease and never renews (its hold window is skipped): renewing it by \
             hand costs one PEXPIRE per lock per period, {n} calls."
        )],
    );
    Ok(())
}
