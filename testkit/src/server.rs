//! A private `redis-server` on a free loopback port, in its own temp dir,
//! killed when dropped. Used by the tests (`tests/common`), the demo and the
//! benchmark (`bench/`).
//!
//! `REDIS_SERVER_BIN` overrides the binary (a `valkey-server` too: see
//! [`server_version`] for what the tests may ask of it). A missing binary
//! fails loudly.
//!
//! With the `tls` feature, `RedisServer::start_tls` starts one that listens
//! for TLS only (`--port 0 --tls-port`), with certificates made for it in its
//! temp dir; the harness itself talks to it over its Unix socket.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::TcpListener;
#[cfg(feature = "tls")]
use std::path::Path;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
#[cfg(feature = "tls")]
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static NEXT_DIR: AtomicU32 = AtomicU32::new(0);

pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    /// Arguments beyond the defaults (a replica's `--replicaof`).
    extra: Vec<String>,
    /// Runs in a session of its own (see [`RedisServer::start_standalone`]).
    own_session: bool,
    /// Listens for TLS only, with these certificates.
    #[cfg(feature = "tls")]
    tls: Option<Arc<TlsSetup>>,
    /// Environment variables of the server's process (a clock offset).
    env: Vec<(String, String)>,
}

/// Whether a TLS test server asks clients for a certificate
/// (`--tls-auth-clients`).
#[cfg(feature = "tls")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// A client must present a certificate the server's CA signed.
    Required,
    /// Clients present none.
    Off,
}

/// A TLS test server's certificates: its CA, its own, and one for a client.
#[cfg(feature = "tls")]
#[derive(Debug)]
pub struct TlsSetup {
    pub ca: crate::tls::TestCa,
    pub server: crate::tls::Pem,
    pub client: crate::tls::Pem,
    pub auth: ClientAuth,
}

#[cfg(feature = "tls")]
impl TlsSetup {
    /// Fresh certificates from a new CA named `ca_name`.
    pub(crate) fn new(ca_name: &str, auth: ClientAuth) -> TlsSetup {
        let ca = crate::tls::TestCa::new(ca_name);
        TlsSetup { server: ca.server(), client: ca.client(), ca, auth }
    }

    /// Writes `pem` to `dir/name` (a server reads its certificates from
    /// files) and returns the path.
    pub(crate) fn write(dir: &Path, name: &str, pem: &str) -> String {
        let path = dir.join(name);
        std::fs::write(&path, pem).unwrap();
        path.display().to_string()
    }

    /// The arguments of a `redis-server` listening for TLS only on `port`
    /// (`--port 0 --tls-port`), its certificate, key and CA written to
    /// `dir`, asking clients for a certificate as `auth` says.
    pub(crate) fn listen_args(&self, dir: &Path, port: u16) -> Vec<String> {
        let auth = match self.auth {
            ClientAuth::Required => "yes",
            ClientAuth::Off => "no",
        };
        vec![
            "--port".into(),
            "0".into(),
            "--tls-port".into(),
            port.to_string(),
            "--tls-cert-file".into(),
            TlsSetup::write(dir, "server.crt", &self.server.cert),
            "--tls-key-file".into(),
            TlsSetup::write(dir, "server.key", &self.server.key),
            "--tls-ca-cert-file".into(),
            TlsSetup::write(dir, "ca.crt", self.ca.cert_pem()),
            "--tls-auth-clients".into(),
            auth.into(),
        ]
    }
}

pub(crate) fn server_bin() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".to_string())
}

pub(crate) fn server_major_version() -> u32 {
    server_version().major
}

/// The server the tests run (`REDIS_SERVER_BIN`, else `redis-server`), from
/// its `--version`: Redis or Valkey, and its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerVersion {
    /// `"Redis"` or `"Valkey"`.
    pub name: String,
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl ServerVersion {
    /// Parses `redis-server --version`'s `Redis server v=7.0.15 sha=…` (or
    /// Valkey's `Valkey server v=8.1.8 …`).
    pub fn parse(text: &str) -> ServerVersion {
        let name = if text.trim_start().starts_with("Valkey") { "Valkey" } else { "Redis" };
        let version = text.split("v=").nth(1).and_then(|v| v.split_whitespace().next()).unwrap_or("");
        let mut parts = version.split('.').map(|n| n.parse().unwrap_or(0));
        let mut next = || parts.next().unwrap_or(0);
        ServerVersion { name: name.to_owned(), major: next(), minor: next(), patch: next() }
    }

    /// Whether the server has `WAITAOF`: Redis 7.2 or newer, and Valkey
    /// (forked from 7.2.4).
    pub fn has_waitaof(&self) -> bool {
        self.name == "Valkey" || (self.major, self.minor) >= (7, 2)
    }
}

impl std::fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}.{}.{}", self.name, self.major, self.minor, self.patch)
    }
}

/// The server the tests run, asked once per process.
pub fn server_version() -> &'static ServerVersion {
    static VERSION: std::sync::OnceLock<ServerVersion> = std::sync::OnceLock::new();
    VERSION.get_or_init(|| {
        let out = Command::new(server_bin()).arg("--version").output().unwrap_or_else(|e| {
            panic!("cannot run {} ({e}); install redis-server or set REDIS_SERVER_BIN", server_bin())
        });
        ServerVersion::parse(&String::from_utf8_lossy(&out.stdout))
    })
}

/// Whether `setsid` (util-linux) runs here.
fn has_setsid() -> bool {
    Command::new("setsid")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The Redis a program (an example) talks to: `REDIS_URL` when it is set
/// and not blank, else a private server started here, returned with its URL
/// and stopped when dropped. A server that does not start is an error, not
/// a panic (its log is printed).
pub fn url_from_env_or_start() -> Result<(String, Option<RedisServer>), &'static str> {
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.trim().is_empty() => Ok((url.trim().to_owned(), None)),
        _ => {
            let private = std::panic::catch_unwind(RedisServer::start)
                .map_err(|_| "redis-server did not start (set REDIS_URL or REDIS_SERVER_BIN)")?;
            Ok((private.url(), Some(private)))
        }
    }
}

impl RedisServer {
    /// Starts a server; retries on a port race.
    pub fn start() -> RedisServer {
        RedisServer::start_with(Vec::new())
    }

    /// Starts a server with `args` after the defaults, which they override
    /// (`["--appendonly", "yes"]`: the harness's servers keep no data on
    /// disk otherwise).
    pub fn start_with_args(args: &[&str]) -> RedisServer {
        RedisServer::start_with(args.iter().map(|&arg| arg.to_owned()).collect())
    }

    /// Starts a replica of `primary` and waits (bounded) until the primary
    /// counts it as a connected replica.
    pub fn start_replica_of(primary: &RedisServer) -> RedisServer {
        RedisServer::start_replica_of_with_args(primary, &[])
    }

    /// As [`start_replica_of`](RedisServer::start_replica_of), with `args`
    /// after the defaults (see [`start_with_args`](RedisServer::start_with_args)).
    pub fn start_replica_of_with_args(primary: &RedisServer, args: &[&str]) -> RedisServer {
        let mut extra = vec!["--replicaof".to_owned(), "127.0.0.1".to_owned(), primary.port.to_string()];
        extra.extend(args.iter().map(|&arg| arg.to_owned()));
        primary.start_replica(|| RedisServer::start_with(extra))
    }

    /// Starts a replica of the TLS server `primary` that replicates over TLS
    /// and listens for TLS only, with `primary`'s certificates, and waits
    /// (bounded) until the primary counts it as a connected replica.
    #[cfg(feature = "tls")]
    pub fn start_tls_replica_of(primary: &RedisServer) -> RedisServer {
        let tls = primary.tls.clone().expect("not a TLS server");
        let args = ["--replicaof", "127.0.0.1", &primary.port.to_string(), "--tls-replication", "yes"]
            .map(str::to_owned)
            .to_vec();
        primary.start_replica(|| RedisServer::start_configured(args, Vec::new(), false, Some(tls)))
    }

    fn start_replica(&self, start: impl FnOnce() -> RedisServer) -> RedisServer {
        let mut con = self.conn();
        // Start the full sync at once, not after the default 5 s delay.
        let _: () =
            redis::cmd("CONFIG").arg("SET").arg("repl-diskless-sync-delay").arg(0).query(&mut con).unwrap();
        let replica = start();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // Online on the primary, and acknowledging writes: a replica that
            // still loads the snapshot is online but answers no GETACK.
            let info: String = redis::cmd("INFO").arg("replication").query(&mut con).unwrap();
            if info.contains(&format!("port={},state=online", replica.port)) {
                // WAIT counts replicas past this connection's last write.
                let _: () = redis::cmd("SET").arg("keyholder-testkit:probe").arg(1).query(&mut con).unwrap();
                let acked: i64 = redis::cmd("WAIT").arg(1).arg(100).query(&mut con).unwrap();
                let _: i64 = redis::cmd("DEL").arg("keyholder-testkit:probe").query(&mut con).unwrap();
                if acked >= 1 {
                    return replica;
                }
            }
            assert!(Instant::now() < deadline, "the replica never came online:\n{info}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts a server that listens for TLS only, on a free port, with a
    /// fresh CA and certificates (see [`RedisServer::tls`]).
    #[cfg(feature = "tls")]
    pub fn start_tls(auth: ClientAuth) -> RedisServer {
        let setup = TlsSetup::new("keyholder test CA", auth);
        RedisServer::start_configured(Vec::new(), Vec::new(), false, Some(Arc::new(setup)))
    }

    /// A TLS server's certificates.
    #[cfg(feature = "tls")]
    pub fn tls(&self) -> &TlsSetup {
        self.tls.as_deref().expect("not a TLS server")
    }

    /// Starts a server in a session of its own, as a deployed Redis runs
    /// (a daemon, a service): for the benchmark. On Linux the scheduler
    /// shares CPU between sessions first (autogroups), so a server in its
    /// client's session would compete as one thread among the client's
    /// threads, and the benchmark would measure that. Falls back to
    /// [`start`](RedisServer::start) where there is no `setsid`.
    pub fn start_standalone() -> RedisServer {
        #[cfg(feature = "tls")]
        return RedisServer::start_configured(Vec::new(), Vec::new(), true, None);
        #[cfg(not(feature = "tls"))]
        RedisServer::start_configured(Vec::new(), Vec::new(), true)
    }

    fn start_with(extra: Vec<String>) -> RedisServer {
        RedisServer::start_with_env(extra, Vec::new())
    }

    fn start_with_env(extra: Vec<String>, env: Vec<(String, String)>) -> RedisServer {
        #[cfg(feature = "tls")]
        return RedisServer::start_configured(extra, env, false, None);
        #[cfg(not(feature = "tls"))]
        RedisServer::start_configured(extra, env, false)
    }

    /// Starts a replica of `primary` whose clock (`TIME`, and every other
    /// reading of the wall clock) is `offset_ms` ahead of this machine's
    /// (behind when negative), and waits until the primary counts it as a
    /// connected replica. The offset is a small `LD_PRELOAD` library the
    /// harness compiles with the system's C compiler (`cc`) on first use
    /// ([`crate::clock_shim`]): the real server, with a really wrong clock.
    pub fn start_replica_of_with_clock_offset(primary: &RedisServer, offset_ms: i64) -> RedisServer {
        let shim = crate::clock_shim::library();
        let extra = vec!["--replicaof".to_owned(), "127.0.0.1".to_owned(), primary.port.to_string()];
        let env = vec![
            ("LD_PRELOAD".to_owned(), shim.display().to_string()),
            (crate::clock_shim::OFFSET_VAR.to_owned(), offset_ms.to_string()),
        ];
        primary.start_replica(|| RedisServer::start_with_env(extra, env))
    }

    fn start_configured(
        extra: Vec<String>,
        env: Vec<(String, String)>,
        own_session: bool,
        #[cfg(feature = "tls")] tls: Option<Arc<TlsSetup>>,
    ) -> RedisServer {
        let dir = std::env::temp_dir().join(format!(
            "keyholder-test-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        for _ in 0..5 {
            let mut server = RedisServer {
                child: None,
                port: free_port(),
                dir: dir.clone(),
                extra: extra.clone(),
                env: env.clone(),
                own_session,
                #[cfg(feature = "tls")]
                tls: tls.clone(),
            };
            if server.spawn() {
                return server;
            }
        }
        panic!(
            "redis-server did not start; log:\n{}\nstderr:\n{}",
            std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default(),
            std::fs::read_to_string(dir.join("redis.err")).unwrap_or_default()
        );
    }

    fn spawn(&mut self) -> bool {
        // A failed attempt (its port taken meanwhile) is dropped, and its drop
        // removes the directory that the next attempt reuses.
        std::fs::create_dir_all(&self.dir).unwrap();
        // `setsid` execs the server in place (a spawned child leads no
        // process group), so the PID stays the server's own.
        let mut cmd = if self.own_session && has_setsid() {
            let mut cmd = Command::new("setsid");
            cmd.arg(server_bin());
            cmd
        } else {
            Command::new(server_bin())
        };
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd.args(self.listen_args())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .arg("--unixsocket")
            .arg(self.socket())
            .args(["--unixsocketperm", "700"])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // What a server says before it opens its log (a bad argument).
            .stderr(
                std::fs::File::create(self.dir.join("redis.err")).map_or_else(|_| Stdio::null(), Stdio::from),
            );
        if server_major_version() >= 7 {
            cmd.args(["--enable-debug-command", "yes"]);
        }
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!("cannot start {} ({e}); install redis-server or set REDIS_SERVER_BIN", server_bin())
        });
        self.child = Some(child);
        let url = self.conn_url();
        if serving(&mut self.child, || open(&url)) {
            return true;
        }
        self.stop();
        false
    }

    /// Where the server listens: `--port`, or TLS only with its files.
    fn listen_args(&self) -> Vec<String> {
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            return tls.listen_args(&self.dir, self.port);
        }
        vec!["--port".into(), self.port.to_string()]
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// A file in the server's temp dir (a TLS server's `server.crt`,
    /// `server.key`, `ca.crt`).
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The server's Unix socket, in its temp dir.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("redis.sock")
    }

    /// A `redis+unix://` URL of the server's Unix socket.
    pub fn unix_url(&self) -> String {
        format!("redis+unix://{}", self.socket().display())
    }

    /// The URL clients use: `redis://`, or `rediss://` for a TLS server.
    pub fn url(&self) -> String {
        #[cfg(feature = "tls")]
        if self.tls.is_some() {
            return format!("rediss://127.0.0.1:{}/", self.port);
        }
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The URL the harness itself talks to the server by: TCP, or, for a
    /// TLS-only server, its Unix socket (the server binds its port before it
    /// opens the socket, so an answer there also means the port is ours).
    fn conn_url(&self) -> String {
        #[cfg(feature = "tls")]
        if self.tls.is_some() {
            return self.unix_url();
        }
        self.url()
    }

    fn try_conn(&self) -> redis::RedisResult<redis::Connection> {
        open(&self.conn_url())
    }

    /// A raw redis-rs connection, for inspecting and arranging state.
    pub fn conn(&self) -> redis::Connection {
        self.try_conn().unwrap()
    }

    /// Hangs the server (SIGSTOP): connections stay open and nothing is
    /// answered, as a server stuck in a slow command or a paused VM.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Lets a [`freeze`](Self::freeze)d server go on (SIGCONT).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("the server is not running").id();
        let status = Command::new("kill").args([signal, &pid.to_string()]).status().unwrap();
        assert!(status.success(), "kill {signal} {pid} failed");
    }

    /// Kills the server (SIGKILL) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (and with the same
    /// arguments): empty, unless it was started with `--appendonly yes`,
    /// whose file in its temp dir it loads.
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.spawn() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis-server did not restart on port {}", self.port);
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    /// Whether the server runs: started and not [`stop`](Self::stop)ped
    /// since (a [`freeze`](Self::freeze)d server runs).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

/// A harness connection to `url`: connect within 1 s, replies within 5 s.
pub(crate) fn open(url: &str) -> redis::RedisResult<redis::Connection> {
    let con = redis::Client::open(url)?.get_connection_with_timeout(Duration::from_secs(1))?;
    con.set_read_timeout(Some(Duration::from_secs(5)))?;
    Ok(con)
}

/// Waits (at most 10 s) until the process just spawned into `child` answers
/// PING through `connect`: true once it does; false if it exited first (most
/// likely its port was taken) or another process answers on its port
/// (another test's server took the port between `free_port()` and our bind:
/// only a server with our child's PID is ours) or time ran out. The caller
/// stops the child when false.
pub(crate) fn serving(
    child: &mut Option<Child>,
    connect: impl Fn() -> redis::RedisResult<redis::Connection>,
) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let Some(process) = child.as_mut() else { return false };
        if let Ok(Some(_)) = process.try_wait() {
            *child = None;
            return false;
        }
        if let Ok(mut con) = connect()
            && redis::cmd("PING").query::<String>(&mut con).is_ok()
        {
            let pid = process.id().to_string();
            let info: String = redis::cmd("INFO").arg("server").query(&mut con).unwrap_or_default();
            return info.lines().filter_map(|l| l.strip_prefix("process_id:")).any(|v| v.trim() == pid);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::ServerVersion;

    #[test]
    fn both_servers_versions_parse() {
        let redis =
            ServerVersion::parse("Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64");
        assert_eq!((redis.to_string(), redis.has_waitaof()), ("Redis 7.0.15".to_owned(), false));
        let valkey = ServerVersion::parse("Valkey server v=8.1.8 sha=00000000:1 malloc=libc bits=64");
        assert_eq!((valkey.to_string(), valkey.has_waitaof()), ("Valkey 8.1.8".to_owned(), true));
        assert!(ServerVersion::parse("Redis server v=7.2.4 sha=0").has_waitaof());
    }
}
