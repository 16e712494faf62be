//! Shared test harness: the crate `keyholder-testkit` (a private
//! `redis-server` per test, the fault proxy, child processes, the fenced
//! store) and small helpers that use keyholder itself.
#![allow(dead_code, unreachable_pub, unused_imports, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub use keyholder_testkit::{child, proxy, store};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use keyholder::{Client, ClientBuilder};
pub use keyholder_testkit::{RedisServer, free_port};

/// Clients for a test server.
pub trait ServerExt {
    /// A builder with test-friendly timeouts.
    fn builder(&self) -> ClientBuilder;
    /// A client with test-friendly timeouts.
    fn client(&self) -> Client;
}

impl ServerExt for RedisServer {
    fn builder(&self) -> ClientBuilder {
        Client::builder(self.url())
            .connect_timeout(Duration::from_secs(2))
            .command_timeout(Duration::from_secs(2))
    }

    fn client(&self) -> Client {
        self.builder().build().unwrap()
    }
}

/// The text keyholder sends to Redis for script `lua/<path>`: the
/// `lua/common/` files its header lists on its `-- Prepended:` line, in
/// that order, then the script itself (as the kinds' `LuaScript` statics
/// assemble it with `concat!`; `tests/suite/script_headers.rs` checks they agree).
/// True for a `CLIENT LIST` line of a connection that has run nothing but
/// keyholder's setup (one pipelined write, which Redis may report as
/// `cmd=NULL`, or as its last command): a command connection kept warm in
/// reserve.
#[allow(dead_code)]
pub fn setup_only(line: &str) -> bool {
    ["cmd=NULL ", "cmd=client|setinfo ", "cmd=client|setname ", "cmd=role "].iter().any(|c| line.contains(c))
}

pub fn lua(path: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = std::fs::read_to_string(root.join("lua").join(path)).unwrap();
    let mut text = String::new();
    for common in lua_prelude(&script) {
        text.push_str(&std::fs::read_to_string(root.join(common)).unwrap());
    }
    text.push_str(&script);
    text
}

/// The `lua/common/` files a script's header lists on its `-- Prepended:`
/// line (paths from the crate root), none when it has no such line.
pub fn lua_prelude(script: &str) -> Vec<String> {
    script
        .lines()
        .take_while(|l| l.starts_with("--"))
        .find_map(|l| l.strip_prefix("-- Prepended: "))
        .map(|list| list.split(", ").map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Reads `INFO` field `field` of section `section` as an integer.
pub fn info_field(con: &mut redis::Connection, section: &str, field: &str) -> i64 {
    let info: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in INFO {section}"))
}

/// Calls `f` until it returns true or `limit` passes; true if it did.
/// Bounded in time: for waiting on a background effect in tests only.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Total calls since the server started of every command but `INFO` and the
/// `CLIENT` subcommands a new connection sends, from `INFO commandstats`
/// (commands run by scripts included): the data commands anyone sent.
pub fn command_calls(con: &mut redis::Connection) -> i64 {
    commandstats(con)
        .into_iter()
        .filter(|(name, _)| name != "info" && !name.starts_with("client|"))
        .map(|(_, calls)| calls)
        .sum()
}

/// Calls of one command (lower case, e.g. `"evalsha"`, `"publish"`) since the
/// server started; 0 if it never ran.
pub fn calls_of(con: &mut redis::Connection, command: &str) -> i64 {
    commandstats(con).into_iter().find(|(name, _)| name == command).map_or(0, |(_, calls)| calls)
}

fn commandstats(con: &mut redis::Connection) -> Vec<(String, i64)> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.split(',').find_map(|kv| kv.strip_prefix("calls="))?.parse().ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// `PUBSUB NUMSUB channel`: how many connections subscribe to `channel`.
pub fn numsub(con: &mut redis::Connection, channel: &str) -> i64 {
    let reply: (String, i64) = redis::cmd("PUBSUB").arg("NUMSUB").arg(channel).query(con).unwrap();
    reply.1
}

/// The number of connections of type `pubsub` (subscribed to something).
pub fn pubsub_connections(con: &mut redis::Connection) -> usize {
    let list: String = redis::cmd("CLIENT").arg("LIST").arg("TYPE").arg("pubsub").query(con).unwrap();
    list.lines().filter(|l| !l.trim().is_empty()).count()
}

/// The fields and values of the hash at `key`.
pub fn hgetall(con: &mut redis::Connection, key: &str) -> std::collections::BTreeMap<String, String> {
    redis::cmd("HGETALL").arg(key).query(con).unwrap()
}

/// `PTTL key`.
pub fn pttl(con: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).unwrap()
}

/// The server's clock (`TIME`) in microseconds: what a fencing token is
/// minted from when the counter is below it.
pub fn server_micros(con: &mut redis::Connection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(con).unwrap();
    secs * 1_000_000 + micros
}

/// `EXISTS key`.
pub fn exists(con: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(con).unwrap() == 1
}

/// Runs `f` and measures it.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let value = f();
    (value, start.elapsed())
}

/// Runs `f` on a new thread; its result arrives on the returned channel
/// (disconnected if it panicked). Read it with [`recv_within`], so a hung
/// thread fails the test instead of hanging the suite.
pub fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Receiver<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx
}

/// The next value on `rx`, failing the test after `limit` or if the sender
/// panicked.
#[track_caller]
pub fn recv_within<T>(rx: &Receiver<T>, limit: Duration, what: &str) -> T {
    match rx.recv_timeout(limit) {
        Ok(value) => value,
        Err(RecvTimeoutError::Timeout) => panic!("{what}: nothing within {limit:?}"),
        Err(RecvTimeoutError::Disconnected) => panic!("{what}: the thread panicked"),
    }
}

/// Flushes the server's script cache in a tight loop on a thread of its own
/// until `stop` is set (or 20 s pass, or the server stops); the number of
/// flushes arrives on the returned channel.
pub fn flush_scripts_until(server: &RedisServer, stop: &Arc<AtomicBool>) -> Receiver<u64> {
    let (stop, mut con) = (Arc::clone(stop), server.conn());
    spawn(move || {
        let until = Instant::now() + Duration::from_secs(20);
        let mut flushes = 0u64;
        while !stop.load(Ordering::Acquire) && Instant::now() < until {
            // An error here means the test is over (its server stopped).
            if redis::cmd("SCRIPT").arg("FLUSH").query::<()>(&mut con).is_err() {
                break;
            }
            flushes += 1;
        }
        flushes
    })
}

/// Waits (bounded) until `client` is subscribed to `n` unlock channels: the
/// observable sign that one of its threads is waiting in Redis.
#[track_caller]
pub fn wait_subscribed(client: &Client, n: usize) {
    assert!(
        eventually(Duration::from_secs(5), || client.subscribed_channels() == n),
        "client never subscribed to {n} channel(s); has {}",
        client.subscribed_channels()
    );
}

/// Waits (bounded) until `PUBSUB NUMSUB channel` is `n`.
#[track_caller]
pub fn wait_numsub(con: &mut redis::Connection, channel: &str, n: i64) {
    assert!(
        eventually(Duration::from_secs(5), || numsub(con, channel) == n),
        "NUMSUB {channel} never reached {n}; is {}",
        numsub(con, channel)
    );
}

/// The unlock channel of a lock name, as the spec defines it.
pub fn channel_of(name: &str) -> String {
    if name.contains('{') {
        format!("redisson_lock__channel:{name}")
    } else {
        format!("redisson_lock__channel:{{{name}}}")
    }
}

/// A connection subscribed to some channels on its own thread, forwarding
/// every `(channel, payload)` it receives. The subscriptions are confirmed by
/// Redis before [`Listener::start`] returns.
pub struct Listener {
    rx: Receiver<(String, String)>,
    stop: Arc<AtomicBool>,
}

impl Listener {
    pub fn start(server: &RedisServer, channels: &[&str]) -> Listener {
        let mut con = server.conn();
        let channels: Vec<String> = channels.iter().map(|c| (*c).to_owned()).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel();
        let (tx, rx) = mpsc::channel();
        let stopping = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut pubsub = con.as_pubsub();
            for channel in &channels {
                pubsub.subscribe(channel).unwrap(); // returns once confirmed
            }
            pubsub.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            ready_tx.send(()).unwrap();
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stopping.load(Ordering::Acquire) && Instant::now() < deadline {
                match pubsub.get_message() {
                    Ok(msg) => {
                        let payload: String = msg.get_payload().unwrap();
                        if tx.send((msg.get_channel_name().to_owned(), payload)).is_err() {
                            return;
                        }
                    }
                    Err(e) if e.is_timeout() => {}
                    Err(_) => return,
                }
            }
        });
        recv_within(&ready_rx, Duration::from_secs(5), "listener subscription");
        Listener { rx, stop }
    }

    /// The next message, if one arrives within `limit`.
    pub fn next(&self, limit: Duration) -> Option<(String, String)> {
        self.rx.recv_timeout(limit).ok()
    }

    /// Publishes a marker on `channel` and returns every message received
    /// before it: since Redis delivers one connection's messages in order,
    /// this is exactly what was published before the marker, with no sleep.
    pub fn drain_until_marker(&self, con: &mut redis::Connection, channel: &str) -> Vec<(String, String)> {
        let marker = format!("marker-{}", MARKERS.fetch_add(1, Ordering::Relaxed));
        let _: i64 = redis::cmd("PUBLISH").arg(channel).arg(&marker).query(con).unwrap();
        let mut before = Vec::new();
        for _ in 0..1000 {
            let msg = self.next(Duration::from_secs(5)).expect("the marker never arrived");
            if msg.1 == marker {
                return before;
            }
            before.push(msg);
        }
        panic!("too many messages before the marker");
    }
}

static MARKERS: AtomicU64 = AtomicU64::new(0);

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}
