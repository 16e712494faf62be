//! A Sentinel set-up on 127.0.0.1: one primary, one replica, three
//! sentinels (`redis-server <conf> --sentinel`), each in its own temp dir on
//! a free port, each killed by PID when dropped.
//!
//! The sentinels watch the primary with a short `down-after-milliseconds`,
//! so killing it ([`SentinelSet::kill_primary`]) promotes the replica within
//! a few seconds. [`SentinelSet::start`] returns only once every sentinel
//! knows the replica and the two other sentinels: before that, a failover
//! could not happen (no quorum, no replica to promote) and a test would
//! measure the set-up instead of the client.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::server::{RedisServer, free_port};

static NEXT_DIR: AtomicU32 = AtomicU32::new(0);

/// The name the sentinels monitor the primary under.
pub const MASTER_NAME: &str = "keyholder-test";

/// How long the sentinels wait for a silent primary before they call it down.
pub const DOWN_AFTER: Duration = Duration::from_millis(1000);

/// Replaced by a free port in each sentinel's extra configuration.
const FREE_PORT: &str = "<free-port>";

/// One primary, one replica, three sentinels.
pub struct SentinelSet {
    /// Dropped (killed) by [`SentinelSet::kill_primary`].
    primary: Option<RedisServer>,
    replica: RedisServer,
    sentinels: Vec<Sentinel>,
}

impl SentinelSet {
    /// Starts the servers and the sentinels and waits (at most 30 s) until
    /// every sentinel knows the replica and its two peers.
    pub fn start() -> SentinelSet {
        let primary = RedisServer::start();
        let replica = RedisServer::start_replica_of(&primary);
        SentinelSet::with_sentinels(primary, replica, None, String::new())
    }

    /// As [`start`](SentinelSet::start), with a primary and a replica that
    /// listen for TLS only and replicate over TLS (see
    /// [`RedisServer::start_tls`]); the sentinels listen without TLS and
    /// reach the servers over TLS with their CA.
    #[cfg(feature = "tls")]
    pub fn start_tls() -> SentinelSet {
        let primary = RedisServer::start_tls(crate::ClientAuth::Off);
        let replica = RedisServer::start_tls_replica_of(&primary);
        // Sentinels reach each other over TLS too (`tls-replication`), on
        // the TLS port they announce; clients use the plain one.
        let conf = format!(
            "tls-replication yes\ntls-port {FREE_PORT}\ntls-auth-clients no\ntls-cert-file {}\ntls-key-file {}\n\
             tls-ca-cert-file {}\n",
            primary.file("server.crt").display(),
            primary.file("server.key").display(),
            primary.file("ca.crt").display(),
        );
        SentinelSet::with_sentinels(primary, replica, None, conf)
    }

    /// As [`start`](SentinelSet::start), with sentinels that require
    /// `password` (`requirepass`; they log in to each other with it too).
    /// [`sentinel_urls`](SentinelSet::sentinel_urls) carry it.
    pub fn start_with_sentinel_password(password: &str) -> SentinelSet {
        let primary = RedisServer::start();
        let replica = RedisServer::start_replica_of(&primary);
        SentinelSet::with_sentinels(primary, replica, Some(password), String::new())
    }

    /// Starts three sentinels for `primary` (`extra_conf`: more lines for
    /// their config files) and waits until they are ready.
    fn with_sentinels(
        primary: RedisServer,
        replica: RedisServer,
        password: Option<&str>,
        extra_conf: String,
    ) -> SentinelSet {
        let sentinels = (0..3).map(|_| Sentinel::start(primary.port(), password, &extra_conf)).collect();
        let set = SentinelSet { primary: Some(primary), replica, sentinels };
        set.wait_until_ready();
        set
    }

    fn wait_until_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        for sentinel in &self.sentinels {
            loop {
                let state = sentinel.master_state();
                let replicas = state.get("num-slaves").map(String::as_str);
                let peers = state.get("num-other-sentinels").map(String::as_str);
                if replicas == Some("1") && peers == Some("2") {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "sentinel {} never saw the replica and its peers: {state:?}\nlog:\n{}",
                    sentinel.port,
                    sentinel.log()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// The sentinels' URLs, `redis://[:<password>@]127.0.0.1:<port>`.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(Sentinel::url).collect()
    }

    /// The primary; panics once it was killed.
    pub fn primary(&self) -> &RedisServer {
        self.primary.as_ref().expect("the primary was killed")
    }

    pub fn replica(&self) -> &RedisServer {
        &self.replica
    }

    /// Kills the primary (SIGKILL): the sentinels will promote the replica.
    pub fn kill_primary(&mut self) {
        if let Some(mut primary) = self.primary.take() {
            primary.stop();
        }
    }

    /// Asks a sentinel for a failover while the primary runs
    /// (`SENTINEL FAILOVER`): the replica is promoted and the old primary
    /// demoted to its replica, answering PING and refusing writes.
    pub fn failover(&self) {
        let mut con = self.sentinels[0].try_conn().unwrap();
        let _: () = redis::cmd("SENTINEL").arg("FAILOVER").arg(MASTER_NAME).query(&mut con).unwrap();
    }

    /// Protects the primary and the replica with `password` (`requirepass`,
    /// and `masterauth` so that replication goes on), and gives it to the
    /// sentinels (`auth-pass`) first, so that they never see the servers
    /// refuse them. The harness's own connections (`conn()`) must then
    /// `AUTH` themselves.
    pub fn require_password(&self, password: &str) {
        for sentinel in &self.sentinels {
            let mut con = sentinel.try_conn().unwrap();
            let _: () = redis::cmd("SENTINEL")
                .arg("SET")
                .arg(MASTER_NAME)
                .arg("auth-pass")
                .arg(password)
                .query(&mut con)
                .unwrap();
        }
        for server in [&self.replica, self.primary()] {
            let mut con = server.conn();
            for setting in ["masterauth", "requirepass"] {
                let _: () =
                    redis::cmd("CONFIG").arg("SET").arg(setting).arg(password).query(&mut con).unwrap();
            }
        }
    }

    /// The port the first sentinel names as the primary.
    pub fn primary_port_per_sentinel(&self) -> Option<u16> {
        self.sentinels[0].master_port()
    }

    /// Waits (at most `limit`) until every sentinel names the replica as
    /// the primary; returns whether they did.
    pub fn wait_for_promotion(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.sentinels.iter().all(|s| s.master_port() == Some(self.replica.port())) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every sentinel's log, for a failing assertion.
    pub fn logs(&self) -> String {
        self.sentinels.iter().map(|s| format!("--- sentinel {}\n{}", s.port, s.log())).collect()
    }

    // Role-agnostic faults, for the fault campaign (tests/campaign.rs):
    // after failovers either server may be the primary, so these address a
    // server by its port and ask the sentinels for the roles.

    /// The ports of the two data servers (the one started as the primary
    /// first, unless [`kill_primary`](SentinelSet::kill_primary) dropped
    /// it), whatever their roles now.
    pub fn server_ports(&self) -> Vec<u16> {
        self.primary.iter().chain(std::iter::once(&self.replica)).map(RedisServer::port).collect()
    }

    /// The data server on `port`, whatever its role now.
    pub fn server(&self, port: u16) -> &RedisServer {
        self.primary
            .iter()
            .chain(std::iter::once(&self.replica))
            .find(|s| s.port() == port)
            .unwrap_or_else(|| panic!("no data server on port {port}"))
    }

    fn server_mut(&mut self, port: u16) -> &mut RedisServer {
        self.primary
            .iter_mut()
            .chain(std::iter::once(&mut self.replica))
            .find(|s| s.port() == port)
            .unwrap_or_else(|| panic!("no data server on port {port}"))
    }

    /// The primary's port if every sentinel names the same one.
    pub fn agreed_primary_port(&self) -> Option<u16> {
        let ports: Vec<Option<u16>> = self.sentinels.iter().map(Sentinel::master_port).collect();
        let first = *ports.first()?;
        (first.is_some() && ports.iter().all(|p| *p == first)).then_some(first).flatten()
    }

    /// Kills (SIGKILL) the data server on `port`, whatever its role,
    /// keeping it for [`restart_server`](SentinelSet::restart_server).
    pub fn kill_server(&mut self, port: u16) {
        self.server_mut(port).stop();
    }

    /// Starts the data server on `port` again on the same port, empty (the
    /// harness's servers keep nothing on disk), then makes it a replica of
    /// the server on `replica_of`, or a primary (`REPLICAOF NO ONE`) when
    /// `None`: a primary restarted before the sentinels failed it over
    /// comes back empty as the primary, and its replica resyncs from it.
    pub fn restart_server(&mut self, port: u16, replica_of: Option<u16>) -> redis::RedisResult<()> {
        let server = self.server_mut(port);
        server.restart();
        let mut con = server.conn();
        let mut cmd = redis::cmd("REPLICAOF");
        match replica_of {
            Some(primary) => cmd.arg("127.0.0.1").arg(primary),
            None => cmd.arg("NO").arg("ONE"),
        };
        cmd.query(&mut con)
    }

    /// As [`failover`](SentinelSet::failover), the sentinel's refusal
    /// (`-INPROG`, `-NOGOODSLAVE`) returned instead of panicking.
    pub fn try_failover(&self) -> redis::RedisResult<()> {
        let mut con = self.sentinels[0].try_conn()?;
        redis::cmd("SENTINEL").arg("FAILOVER").arg(MASTER_NAME).query(&mut con)
    }

    /// Waits (at most `limit`) until the set is whole again: every sentinel
    /// names the same running server as the primary, which says it is one
    /// (`ROLE`), and the other server runs as its replica with its link up;
    /// returns the primary's port, or what is still wrong.
    pub fn wait_until_healthy(&self, limit: Duration) -> Result<u16, String> {
        let deadline = Instant::now() + limit;
        loop {
            let problem = match self.health_problem() {
                Ok(primary) => return Ok(primary),
                Err(problem) => problem,
            };
            if Instant::now() >= deadline {
                return Err(problem);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn health_problem(&self) -> Result<u16, String> {
        let primary = self.agreed_primary_port().ok_or("the sentinels do not agree on a primary")?;
        for port in self.server_ports() {
            let server = self.server(port);
            if !server.is_running() {
                return Err(format!("server {port} is not running"));
            }
            let mut con = crate::server::open(&server.url()).map_err(|e| format!("server {port}: {e}"))?;
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut con)
                .map_err(|e| format!("server {port}: {e}"))?;
            let role = if port == primary { "role:master" } else { "role:slave" };
            let linked = port == primary
                || (info.contains(&format!("master_port:{primary}"))
                    && info.contains("master_link_status:up"));
            if !info.contains(role) || !linked {
                return Err(format!("server {port} (primary {primary}):\n{info}"));
            }
        }
        Ok(primary)
    }
}

/// One `redis-server --sentinel`.
struct Sentinel {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    password: Option<String>,
}

impl Sentinel {
    /// Starts a sentinel monitoring the primary on `primary_port`; retries
    /// on a port race.
    fn start(primary_port: u16, password: Option<&str>, extra_conf: &str) -> Sentinel {
        let dir = std::env::temp_dir().join(format!(
            "keyholder-sentinel-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        for _ in 0..5 {
            let mut sentinel = Sentinel {
                child: None,
                port: free_port(),
                dir: dir.clone(),
                password: password.map(str::to_owned),
            };
            if sentinel.spawn(primary_port, extra_conf) {
                return sentinel;
            }
        }
        panic!(
            "redis-server --sentinel did not start; log:\n{}",
            std::fs::read_to_string(dir.join("sentinel.log")).unwrap_or_default()
        );
    }

    fn spawn(&mut self, primary_port: u16, extra_conf: &str) -> bool {
        std::fs::create_dir_all(&self.dir).unwrap();
        // Sentinel rewrites its config file as it learns: it must be a file
        // of its own, writable.
        let conf = self.dir.join("sentinel.conf");
        let down_after = DOWN_AFTER.as_millis();
        let requirepass = self.password.as_ref().map_or_else(String::new, |p| format!("requirepass {p}\n"));
        std::fs::write(
            &conf,
            requirepass
                + &extra_conf.replace(FREE_PORT, &free_port().to_string())
                + &format!(
                    "port {port}\n\
                 bind 127.0.0.1\n\
                 daemonize no\n\
                 dir {dir}\n\
                 logfile {dir}/sentinel.log\n\
                 sentinel announce-ip 127.0.0.1\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {primary_port} 2\n\
                 sentinel down-after-milliseconds {MASTER_NAME} {down_after}\n\
                 sentinel failover-timeout {MASTER_NAME} 5000\n\
                 sentinel parallel-syncs {MASTER_NAME} 1\n",
                    port = self.port,
                    dir = self.dir.display(),
                ),
        )
        .unwrap();
        let child = Command::new(std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into()))
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start redis-server --sentinel ({e})"));
        self.child = Some(child);
        let url = self.url();
        if crate::server::serving(&mut self.child, || crate::server::open(&url)) {
            return true;
        }
        self.stop();
        false
    }

    fn url(&self) -> String {
        match &self.password {
            Some(password) => format!("redis://:{password}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    fn try_conn(&self) -> redis::RedisResult<redis::Connection> {
        crate::server::open(&self.url())
    }

    /// `SENTINEL MASTER <name>` as field-value pairs (empty when it fails).
    fn master_state(&self) -> std::collections::HashMap<String, String> {
        let Ok(mut con) = self.try_conn() else { return Default::default() };
        let fields: Vec<String> =
            redis::cmd("SENTINEL").arg("MASTER").arg(MASTER_NAME).query(&mut con).unwrap_or_default();
        fields.chunks_exact(2).map(|pair| (pair[0].clone(), pair[1].clone())).collect()
    }

    fn master_port(&self) -> Option<u16> {
        let mut con = self.try_conn().ok()?;
        let addr: Option<(String, u16)> =
            redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(MASTER_NAME).query(&mut con).ok()?;
        addr.map(|(_, port)| port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("sentinel.log")).unwrap_or_default()
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
