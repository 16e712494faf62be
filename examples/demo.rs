//! The main job: several clients, several threads each, one lock.
//!
//! Every thread loops for a bounded time: acquire the lock, do guarded work,
//! release, do some unguarded work, repeat. The guarded work is a deliberately
//! non-atomic read-modify-write of a counter key in Redis (GET, pause, SET)
//! through a raw redis-rs connection; once in a while it also re-enters the
//! lock to show reentrancy. Once per run, one thread holds the lock longer
//! than the watchdog timeout to show the watchdog keeping it alive.
//!
//! Mutual exclusion is checked twice: a process-local "in critical section"
//! flag that no two holders may raise at once, and the Redis counter, which
//! must equal the number of acquisitions (any overlap loses an update). The
//! process exits with status 1 if any check fails, 2 if it cannot start.
//!
//! ```text
//! cargo run --release --example demo                 # private redis-server, 10 s
//! cargo run --release --example demo -- --seconds 3 --clients 2 --threads 8
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --release --example demo
//! cargo run --release --example demo -- --cluster    # on a private Redis Cluster
//! ```
//!
//! Without `REDIS_URL` the demo starts its own `redis-server` (or
//! `$REDIS_SERVER_BIN`) on a free loopback port in a temp dir, and stops it at
//! exit. With `--cluster` it starts a Redis Cluster instead (three primaries
//! and three replicas on free loopback ports, joined with `redis-cli
//! --cluster create`; `$REDIS_CLI_BIN` overrides redis-cli), runs the same
//! checked demo with cluster clients (`Client::builder_cluster`), says
//! which shard serves the lock, and stops the cluster at exit. `REDIS_URL`
//! is ignored then.

use keyholder_testkit::cluster::RedisCluster;
use keyholder_testkit::server;

use std::error::Error as StdError;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;
use keyholder::{Client, Lock, LockGuard};
use parking_lot::Mutex;

const USAGE: &str = "\
usage: demo [--seconds N] [--clients N] [--threads N] [--no-long-hold] [--cluster]

  --seconds N     how long threads keep acquiring (default 10, or $DEMO_SECONDS)
  --clients N     keyholder clients, each its own lock owner (default 3)
  --threads N     threads per client (default 4)
  --no-long-hold  skip the hold that outlives the watchdog timeout
  --cluster       run on a private Redis Cluster (3 primaries, 3 replicas on 127.0.0.1),
                  started and stopped by the demo; needs redis-server and redis-cli

REDIS_URL selects a Redis server; without it a private redis-server is started
(REDIS_URL is ignored with --cluster).";

/// The demo clients' watchdog timeout, shortened from the default 30 s so
/// that renewals happen within a short run.
const WATCHDOG_TIMEOUT: Duration = Duration::from_secs(2);
/// The one long hold: longer than the watchdog timeout.
const LONG_HOLD: Duration = Duration::from_millis(3000);
/// How long an acquisition started before the end of the run may still wait.
const GRACE: Duration = Duration::from_secs(10);
/// How often a progress line is printed.
const TICK: Duration = Duration::from_millis(500);
/// One acquisition in this many re-enters the lock.
const REENTER_EVERY: u64 = 4;

#[derive(Debug, Clone)]
struct Options {
    run_for: Duration,
    clients: usize,
    threads: usize,
    long_hold: bool,
    cluster: bool,
}

fn parse_options() -> Result<Option<Options>, String> {
    let mut opts =
        Options { run_for: Duration::from_secs(10), clients: 3, threads: 4, long_hold: true, cluster: false };
    if let Ok(value) = std::env::var("DEMO_SECONDS") {
        opts.run_for = parse_seconds(&value).map_err(|e| format!("DEMO_SECONDS: {e}"))?;
    }
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
            None => (arg.clone(), None),
        };
        let mut value = |flag: &str| {
            inline.clone().or_else(|| args.next()).ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--seconds" => opts.run_for = parse_seconds(&value("--seconds")?)?,
            "--clients" => opts.clients = parse_count(&value("--clients")?, "--clients", 16)?,
            "--threads" => opts.threads = parse_count(&value("--threads")?, "--threads", 64)?,
            "--no-long-hold" => opts.long_hold = false,
            "--cluster" => opts.cluster = true,
            _ => return Err(format!("unknown argument '{arg}'")),
        }
    }
    Ok(Some(opts))
}

fn parse_seconds(text: &str) -> Result<Duration, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 3600.0 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("'{text}' is not a number of seconds in (0, 3600]")),
    }
}

fn parse_count(text: &str, flag: &str, max: usize) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("{flag} '{text}' is not a number in 1..={max}")),
    }
}

/// An error with its chain of causes on one line.
fn describe(e: &dyn StdError) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let _ = write!(text, ": {c}");
        cause = c.source();
    }
    text
}

fn main() -> ExitCode {
    let opts = match parse_options() {
        Ok(Some(opts)) => opts,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("demo: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&opts) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("demo: error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Where Redis is: the user's server, or a private one or a private
/// cluster, stopped on drop.
enum Redis {
    External(String),
    Private(server::RedisServer),
    Cluster(RedisCluster),
}

impl Redis {
    /// The URL the raw connections use: the server's, or on a cluster that
    /// of the primary serving `key`.
    fn url_for(&self, key: &str) -> String {
        match self {
            Redis::External(url) => url.clone(),
            Redis::Private(server) => server.url(),
            Redis::Cluster(cluster) => format!("redis://127.0.0.1:{}/", cluster.primary_of_key(key)),
        }
    }

    /// A client with the demo's settings.
    fn client(&self, key: &str) -> Result<Client, keyholder::Error> {
        let builder = match self {
            Redis::Cluster(cluster) => Client::builder_cluster(cluster.seed_urls()),
            _ => Client::builder(self.url_for(key)),
        };
        builder.watchdog_timeout(WATCHDOG_TIMEOUT).build()
    }
}

fn start_redis(cluster: bool) -> Result<Redis, String> {
    if !cluster
        && let Ok(url) = std::env::var("REDIS_URL")
        && !url.trim().is_empty()
    {
        return Ok(Redis::External(url.trim().to_owned()));
    }
    let mut bins = vec![("REDIS_SERVER_BIN", "redis-server")];
    if cluster {
        bins.push(("REDIS_CLI_BIN", "redis-cli"));
    }
    for (var, default) in bins {
        let bin = std::env::var(var).unwrap_or_else(|_| default.to_owned());
        if let Err(e) = std::process::Command::new(&bin).arg("--version").output() {
            return Err(format!(
                "cannot run '{bin}' ({e}).\n  Install it (`bash .ci/demo` does, with apt-get: Debian's \
                 redis-server package brings redis-cli too), set {var} to the binary, or{} set \
                 REDIS_URL to a running server.",
                if cluster { " without --cluster," } else { "" }
            ));
        }
    }
    // The launchers are shared with the tests, where a failure panics with
    // the server logs; here that becomes an error message.
    if cluster {
        return match std::panic::catch_unwind(RedisCluster::start) {
            Ok(cluster) => Ok(Redis::Cluster(cluster)),
            Err(_) => Err("the Redis Cluster did not start (the node logs are printed above)".to_owned()),
        };
    }
    match std::panic::catch_unwind(server::RedisServer::start) {
        Ok(server) => Ok(Redis::Private(server)),
        Err(_) => Err("redis-server did not start (its log is printed above)".to_owned()),
    }
}

/// What every thread shares.
struct Shared {
    lock_name: String,
    counter_key: String,
    end: Instant,
    long_hold_at: Option<Instant>,
    /// Raised by the holder inside its critical section.
    in_critical_section: AtomicBool,
    overlaps: AtomicU64,
    /// The worker holding the lock, plus one; 0 when none does.
    holder: AtomicUsize,
    waiting: AtomicUsize,
    acquisitions: AtomicU64,
    reentries: AtomicU64,
    max_wait_us: AtomicU64,
    long_hold_taken: AtomicBool,
    /// When the long hold began and ended.
    long_hold_window: Mutex<(Option<Instant>, Option<Instant>)>,
    long_hold: Mutex<Option<LongHold>>,
    failures: Mutex<Vec<String>>,
}

impl Shared {
    fn fail(&self, who: &str, what: String) {
        let mut failures = self.failures.lock();
        if failures.len() < 20 {
            failures.push(format!("{who}: {what}"));
        }
    }
}

/// What the long hold observed.
#[derive(Debug, Clone)]
struct LongHold {
    who: String,
    held_for: Duration,
    lost: bool,
    hold_count: u32,
    remaining_lease: Option<Duration>,
}

/// One worker's tally.
#[derive(Debug, Default)]
struct Tally {
    client: usize,
    thread: usize,
    acquisitions: u64,
    reentries: u64,
    /// Acquisitions that found the lock held by another worker.
    contended: u64,
    /// Wait of every contended acquisition, in microseconds, except those
    /// spent behind the long hold.
    waits_us: Vec<u64>,
    /// Contended acquisitions that waited behind the long hold.
    behind_long_hold: u64,
    timeouts: u64,
    lost: u64,
    errors: u64,
}

fn who(client: usize, thread: usize) -> String {
    format!("c{}/t{}", client + 1, thread + 1)
}

fn run(opts: &Options) -> Result<bool, String> {
    if opts.cluster {
        println!("starting a Redis Cluster (3 primaries, 3 replicas) on 127.0.0.1 ...");
    }
    let redis = start_redis(opts.cluster)?;
    // Names unique to this run, so a shared server is not disturbed. The
    // counter keeps the lock name in braces: same Redis Cluster slot, so
    // on a cluster the same primary serves both.
    let lock_name = format!("keyholder-demo:{}", std::process::id());
    let counter_key = format!("{{{lock_name}}}:counter");
    let url = redis.url_for(&lock_name);
    let origin = match &redis {
        Redis::External(_) => "REDIS_URL".to_owned(),
        Redis::Private(_) => "private redis-server, stopped at exit".to_owned(),
        Redis::Cluster(cluster) => format!(
            "primary of the lock's slot in a private Redis Cluster, stopped at exit; seeds {}",
            cluster.seed_urls().join(" ")
        ),
    };

    let clients: Vec<Client> = (0..opts.clients)
        .map(|_| redis.client(&lock_name))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("cannot connect to Redis at {url}: {}", describe(&e)))?;
    let mut raw = raw_connection(&url).map_err(|e| format!("cannot connect to Redis at {url}: {e}"))?;
    redis::cmd("DEL")
        .arg(&counter_key)
        .query::<()>(&mut raw)
        .map_err(|e| format!("cannot reset {counter_key}: {e}"))?;

    let long_hold = opts.long_hold && opts.run_for >= LONG_HOLD * 2;
    let start = Instant::now();
    let shared = Arc::new(Shared {
        lock_name: lock_name.clone(),
        counter_key: counter_key.clone(),
        end: start + opts.run_for,
        long_hold_at: long_hold.then(|| start + opts.run_for.mul_f64(0.3)),
        in_critical_section: AtomicBool::new(false),
        overlaps: AtomicU64::new(0),
        holder: AtomicUsize::new(0),
        waiting: AtomicUsize::new(0),
        acquisitions: AtomicU64::new(0),
        reentries: AtomicU64::new(0),
        max_wait_us: AtomicU64::new(0),
        long_hold_taken: AtomicBool::new(false),
        long_hold_window: Mutex::new((None, None)),
        long_hold: Mutex::new(None),
        failures: Mutex::new(Vec::new()),
    });

    println!("keyholder demo");
    println!("  redis        {url} ({origin})");
    println!("  lock         {lock_name}  (unlock channel {})", lock_channel(&clients, &lock_name));
    println!("  counter      {counter_key}  (GET, pause, SET under the lock)");
    if let Redis::Cluster(cluster) = &redis {
        println!("  shard        {}", shard_of(cluster, &lock_name));
    }
    println!(
        "  workers      {} clients x {} threads, {:.1} s, watchdog timeout {} s",
        opts.clients,
        opts.threads,
        opts.run_for.as_secs_f64(),
        WATCHDOG_TIMEOUT.as_secs()
    );
    for (i, client) in clients.iter().enumerate() {
        println!("  client c{}    id {}", i + 1, client.id());
    }
    println!();

    let (done_tx, done_rx) = crossbeam_channel::unbounded::<Tally>();
    let mut handles = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for t in 0..opts.threads {
            let lock = client
                .lock(&lock_name)
                .map_err(|e| format!("bad lock name '{lock_name}': {}", describe(&e)))?;
            let mine = Arc::clone(&shared);
            let url = url.clone();
            let done = done_tx.clone();
            let index = c * opts.threads + t;
            let spawned = thread::Builder::new().name(who(c, t)).spawn(move || {
                let tally = work(&mine, &lock, &url, c, t, index);
                let _ = done.send(tally);
            });
            match spawned {
                Ok(handle) => handles.push(handle),
                Err(e) => {
                    shared.fail("demo", format!("cannot start a thread: {e}"));
                    break;
                }
            }
        }
    }
    drop(done_tx);

    let names: Vec<String> =
        (0..opts.clients).flat_map(|c| (0..opts.threads).map(move |t| who(c, t))).collect();
    let mut tallies = Vec::new();
    let mut next_tick = start + TICK;
    loop {
        match done_rx.recv_deadline(next_tick) {
            Ok(tally) => tallies.push(tally),
            Err(RecvTimeoutError::Timeout) => {
                print_progress(&shared, &names, start);
                next_tick += TICK;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    for handle in handles {
        if handle.join().is_err() {
            shared.fail("demo", "a worker thread panicked".into());
        }
    }
    tallies.sort_by_key(|t| (t.client, t.thread));

    let counter: Option<u64> = redis::cmd("GET")
        .arg(&counter_key)
        .query(&mut raw)
        .map_err(|e| format!("cannot read {counter_key}: {e}"))?;
    let lock_free_at_end = match clients.first().map(|c| c.lock(&lock_name)) {
        Some(Ok(lock)) => lock.is_locked().map(|held| !held).map_err(|e| describe(&e)),
        Some(Err(e)) => Err(describe(&e)),
        None => Err("no client".to_owned()),
    };
    if matches!(redis, Redis::External(_)) {
        let _ = redis::cmd("DEL").arg(&counter_key).query::<()>(&mut raw);
    }
    if matches!(redis, Redis::Cluster(_)) {
        let pubsub: Vec<String> = clients.iter().map(|c| c.pubsub_connections().to_string()).collect();
        println!(
            "pub/sub connections per client: {} (one per cluster node whose locks had a waiting thread)",
            pubsub.join(", ")
        );
    }
    drop(clients);

    let ok = print_summary(&shared, &tallies, counter.unwrap_or(0), lock_free_at_end, long_hold, start);
    drop(redis);
    Ok(ok)
}

/// Which shard serves `name`: its slot, its primary and that primary's
/// slots and replicas.
fn shard_of(cluster: &RedisCluster, name: &str) -> String {
    let slot = cluster.keyslot(name);
    let map = cluster.slot_map();
    let primary = cluster.primary_of_slot(slot);
    let ranges: Vec<String> =
        map.iter().filter(|r| r.primary == primary).map(|r| format!("{}-{}", r.start, r.end)).collect();
    let replicas: Vec<String> = map
        .iter()
        .filter(|r| r.primary == primary)
        .flat_map(|r| r.replicas.iter().map(|p| format!("127.0.0.1:{p}")))
        .collect();
    let shards = map.iter().map(|r| r.primary).collect::<std::collections::BTreeSet<_>>().len();
    format!(
        "slot {slot}: primary 127.0.0.1:{primary} (slots {}, replica {}), one of {shards} shards",
        ranges.join(","),
        replicas.join(", ")
    )
}

fn lock_channel(clients: &[Client], name: &str) -> String {
    match clients.first().map(|c| c.lock(name)) {
        Some(Ok(lock)) => lock.channel().to_owned(),
        _ => "?".to_owned(),
    }
}

fn raw_connection(url: &str) -> Result<redis::Connection, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let conn = client.get_connection_with_timeout(Duration::from_secs(3)).map_err(|e| e.to_string())?;
    conn.set_read_timeout(Some(Duration::from_secs(3))).map_err(|e| e.to_string())?;
    conn.set_write_timeout(Some(Duration::from_secs(3))).map_err(|e| e.to_string())?;
    Ok(conn)
}

/// A small deterministic generator (xorshift64*), for pauses.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }
}

/// One worker thread: acquire, guarded work, release, unguarded work.
fn work(shared: &Shared, lock: &Lock, url: &str, client: usize, thread: usize, index: usize) -> Tally {
    let me = who(client, thread);
    let mut tally = Tally { client, thread, ..Tally::default() };
    let mut conn = match raw_connection(url) {
        Ok(conn) => conn,
        Err(e) => {
            tally.errors += 1;
            shared.fail(&me, format!("cannot connect: {e}"));
            return tally;
        }
    };
    let mut rng = Rng::new(index as u64 + 1);
    while Instant::now() < shared.end {
        shared.waiting.fetch_add(1, Ordering::SeqCst);
        let contended = shared.holder.load(Ordering::SeqCst) != 0;
        let asked = Instant::now();
        let acquired = lock.try_lock_until(shared.end + GRACE);
        let got = Instant::now();
        let waited = got - asked;
        shared.waiting.fetch_sub(1, Ordering::SeqCst);
        let guard = match acquired {
            Ok(Some(guard)) => guard,
            Ok(None) => {
                tally.timeouts += 1;
                shared.fail(&me, format!("not acquired within {:.1} s", waited.as_secs_f64()));
                break;
            }
            Err(e) => {
                tally.errors += 1;
                shared.fail(&me, format!("acquire failed: {}", describe(&e)));
                break;
            }
        };

        // The critical section. The flag is raised after the acquisition and
        // lowered before the release, so two holders can never both see it
        // down unless the lock let them in together.
        if shared.in_critical_section.swap(true, Ordering::SeqCst) {
            shared.overlaps.fetch_add(1, Ordering::SeqCst);
            shared.fail(&me, "entered the critical section while another worker was in it".into());
        }
        shared.holder.store(index + 1, Ordering::SeqCst);
        tally.acquisitions += 1;
        shared.acquisitions.fetch_add(1, Ordering::SeqCst);
        if contended {
            tally.contended += 1;
            let behind_long_hold = match *shared.long_hold_window.lock() {
                (Some(began), ended) => began < got && ended.is_none_or(|ended| asked < ended),
                (None, _) => false,
            };
            if behind_long_hold {
                tally.behind_long_hold += 1;
            } else {
                let us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
                tally.waits_us.push(us);
                shared.max_wait_us.fetch_max(us, Ordering::SeqCst);
            }
        }

        let long = index == 0
            && shared.long_hold_at.is_some_and(|at| Instant::now() >= at)
            && !shared.long_hold_taken.swap(true, Ordering::SeqCst);
        if long {
            shared.long_hold_window.lock().0 = Some(Instant::now());
        }
        let pause = if long { LONG_HOLD } else { Duration::from_micros(100 + rng.below(400)) };
        let reenter = tally.acquisitions.is_multiple_of(REENTER_EVERY);
        match guarded_work(shared, lock, &guard, &mut conn, pause, reenter) {
            Ok(()) => {
                if reenter {
                    tally.reentries += 1;
                    shared.reentries.fetch_add(1, Ordering::SeqCst);
                }
            }
            Err(e) => {
                tally.errors += 1;
                shared.fail(&me, e);
            }
        }
        if long {
            let report = LongHold {
                who: me.clone(),
                held_for: pause,
                lost: guard.is_lost(),
                hold_count: lock.hold_count().unwrap_or(0),
                remaining_lease: lock.remaining_lease().unwrap_or(None),
            };
            *shared.long_hold.lock() = Some(report);
            shared.long_hold_window.lock().1 = Some(Instant::now());
        }
        if guard.is_lost() {
            tally.lost += 1;
            shared.fail(&me, format!("hold lost: {:?}", guard.lost_reason()));
        }

        let _ = shared.holder.compare_exchange(index + 1, 0, Ordering::SeqCst, Ordering::SeqCst);
        shared.in_critical_section.store(false, Ordering::SeqCst);
        if let Err(e) = guard.unlock() {
            tally.errors += 1;
            shared.fail(&me, format!("release failed: {}", describe(&e)));
        }

        // Unguarded work between acquisitions.
        thread::sleep(Duration::from_micros(rng.below(2000)));
    }
    tally
}

/// The guarded work: a non-atomic increment of the Redis counter, with a
/// re-entrant acquisition in the middle when `reenter` is set.
fn guarded_work(
    shared: &Shared,
    lock: &Lock,
    guard: &LockGuard,
    conn: &mut redis::Connection,
    pause: Duration,
    reenter: bool,
) -> Result<(), String> {
    let key = &shared.counter_key;
    let value: Option<u64> =
        redis::cmd("GET").arg(key).query(conn).map_err(|e| format!("GET {key} failed: {e}"))?;
    thread::sleep(pause);
    if reenter {
        // The same thread acquires again without waiting; Redis counts 2.
        let inner = lock.try_lock().map_err(|e| format!("re-entry failed: {}", describe(&e)))?;
        let Some(inner) = inner else {
            return Err(format!("re-entry of '{}' was refused", guard.name()));
        };
        let count = lock.hold_count().map_err(|e| format!("HGET failed: {}", describe(&e)))?;
        inner.unlock().map_err(|e| format!("inner release failed: {}", describe(&e)))?;
        let after = lock.hold_count().map_err(|e| format!("HGET failed: {}", describe(&e)))?;
        if (count, after) != (2, 1) {
            return Err(format!(
                "hold count {count} after re-entry and {after} after its release; want 2, 1"
            ));
        }
    }
    let next = value.unwrap_or(0) + 1;
    redis::cmd("SET").arg(key).arg(next).query::<()>(conn).map_err(|e| format!("SET {key} failed: {e}"))
}

fn print_progress(shared: &Shared, names: &[String], start: Instant) {
    let elapsed = start.elapsed().as_secs_f64();
    let acquisitions = shared.acquisitions.load(Ordering::SeqCst);
    let holder = match shared.holder.load(Ordering::SeqCst) {
        0 => "-".to_owned(),
        n => names.get(n - 1).cloned().unwrap_or_else(|| "?".to_owned()),
    };
    let long = if shared.long_hold_taken.load(Ordering::SeqCst) && shared.long_hold.lock().is_none() {
        "  (long hold: watchdog renewing)"
    } else {
        ""
    };
    println!(
        "[{elapsed:5.1} s] acquisitions {acquisitions:6} ({:5.0}/s)  holder {holder:6}  waiting {:2}  \
         re-entries {:5}  max wait {:7.1} ms{long}",
        acquisitions as f64 / elapsed.max(0.001),
        shared.waiting.load(Ordering::SeqCst),
        shared.reentries.load(Ordering::SeqCst),
        shared.max_wait_us.load(Ordering::SeqCst) as f64 / 1000.0,
    );
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn print_summary(
    shared: &Shared,
    tallies: &[Tally],
    counter: u64,
    lock_free_at_end: Result<bool, String>,
    long_hold: bool,
    start: Instant,
) -> bool {
    let elapsed = start.elapsed();
    println!();
    println!(
        "{:<7} {:>12} {:>10} {:>9} {:>13} {:>13} {:>6} {:>6}",
        "worker", "acquisitions", "re-entries", "waits", "avg wait ms", "max wait ms", "lost", "errors"
    );
    let mut all_waits = Vec::new();
    let mut total = Tally::default();
    let mut behind_long_hold = 0;
    for t in tallies {
        let sum: u64 = t.waits_us.iter().sum();
        let avg = if t.waits_us.is_empty() { 0 } else { sum / t.waits_us.len() as u64 };
        let max = t.waits_us.iter().copied().max().unwrap_or(0);
        println!(
            "{:<7} {:>12} {:>10} {:>9} {:>13.2} {:>13.2} {:>6} {:>6}",
            who(t.client, t.thread),
            t.acquisitions,
            t.reentries,
            t.waits_us.len(),
            ms(avg),
            ms(max),
            t.lost,
            t.errors + t.timeouts
        );
        total.acquisitions += t.acquisitions;
        total.reentries += t.reentries;
        total.contended += t.contended;
        behind_long_hold += t.behind_long_hold;
        total.lost += t.lost;
        total.errors += t.errors + t.timeouts;
        all_waits.extend_from_slice(&t.waits_us);
    }
    all_waits.sort_unstable();
    let sum: u64 = all_waits.iter().sum();
    let avg = if all_waits.is_empty() { 0 } else { sum / all_waits.len() as u64 };
    let max = all_waits.last().copied().unwrap_or(0);
    println!(
        "{:<7} {:>12} {:>10} {:>9} {:>13.2} {:>13.2} {:>6} {:>6}",
        "total",
        total.acquisitions,
        total.reentries,
        all_waits.len(),
        ms(avg),
        ms(max),
        total.lost,
        total.errors
    );
    println!();
    println!(
        "{} acquisitions in {:.1} s ({:.0}/s); waits: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        total.acquisitions,
        elapsed.as_secs_f64(),
        total.acquisitions as f64 / elapsed.as_secs_f64().max(0.001),
        ms(percentile(&all_waits, 0.50)),
        ms(percentile(&all_waits, 0.99)),
        ms(max),
    );
    println!("(a wait is an acquisition that found the lock held by another worker)");
    if behind_long_hold > 0 {
        println!(
            "({behind_long_hold} more waits were spent behind the {:.1} s long hold; not counted above)",
            LONG_HOLD.as_secs_f64()
        );
    }
    println!();

    let mut checks: Vec<(String, String, bool)> = Vec::new();
    let overlaps = shared.overlaps.load(Ordering::SeqCst);
    checks.push((
        "overlaps seen by the in-critical-section flag".into(),
        overlaps.to_string(),
        overlaps == 0,
    ));
    checks.push((
        format!("redis counter {} == acquisitions", shared.counter_key),
        format!("{counter} == {}", total.acquisitions),
        counter == total.acquisitions,
    ));
    checks.push(("holds lost".into(), total.lost.to_string(), total.lost == 0));
    checks.push(("errors and timeouts".into(), total.errors.to_string(), total.errors == 0));
    let starved: Vec<String> =
        tallies.iter().filter(|t| t.acquisitions == 0).map(|t| who(t.client, t.thread)).collect();
    checks.push((
        "every worker acquired at least once".into(),
        if starved.is_empty() { "yes".into() } else { format!("no: {}", starved.join(" ")) },
        starved.is_empty() && !tallies.is_empty(),
    ));
    match lock_free_at_end {
        Ok(free) => checks.push((
            format!("lock {} free at the end", shared.lock_name),
            if free { "yes".into() } else { "no".into() },
            free,
        )),
        Err(e) => checks.push(("lock free at the end".into(), format!("cannot tell: {e}"), false)),
    }
    if long_hold {
        match shared.long_hold.lock().clone() {
            Some(h) => {
                let kept = !h.lost && h.hold_count == 1 && h.remaining_lease.is_some();
                checks.push((
                    format!(
                        "{} held {:.1} s > {} s watchdog timeout, kept alive",
                        h.who,
                        h.held_for.as_secs_f64(),
                        WATCHDOG_TIMEOUT.as_secs()
                    ),
                    format!(
                        "lost {}, hold count {}, lease left {}",
                        h.lost,
                        h.hold_count,
                        h.remaining_lease.map_or("none".to_owned(), |d| format!("{} ms", d.as_millis()))
                    ),
                    kept,
                ));
            }
            None => checks.push(("long hold under the watchdog".into(), "did not happen".into(), false)),
        }
    }
    let width = checks.iter().map(|(what, _, _)| what.len()).max().unwrap_or(0);
    for (what, value, ok) in &checks {
        println!("  {}  {what:<width$}  {value}", if *ok { "ok  " } else { "FAIL" });
    }
    let failures = shared.failures.lock();
    if !failures.is_empty() {
        println!();
        println!("first failures:");
        for failure in failures.iter() {
            println!("  {failure}");
        }
    }
    let ok = checks.iter().all(|(_, _, ok)| *ok) && failures.is_empty();
    println!();
    println!("{}", if ok { "all checks passed" } else { "SOME CHECKS FAILED" });
    ok
}
