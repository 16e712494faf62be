//! A Redis Cluster on 127.0.0.1 for tests: three primaries and three
//! replicas, each a `redis-server --cluster-enabled yes` in its own temp dir
//! on a free client port and a free cluster bus port, joined with
//! `redis-cli --cluster create --cluster-replicas 1`.
//!
//! Why it is built this way:
//!
//! - **Ready means ready.** [`RedisCluster::start`] returns only once every
//!   node says `cluster_state:ok` with all 16384 slots assigned, every node
//!   answers the same `CLUSTER SLOTS`, and every replica's link is up and it
//!   acknowledges a write of its primary (`WAIT`). A test that starts earlier
//!   measures the set-up (CLUSTERDOWN, MOVED between nodes that disagree,
//!   `WAIT` returning 0), not the client.
//! - **Both ports are free ports.** The bus port is chosen like the client
//!   port (`--cluster-port`), not `port + 10000`, which may overflow or
//!   collide with another cluster on a shared machine; a node that loses a
//!   race for either port is started again on new ones.
//! - **No server outlives the test binary.** A cluster shared by a binary's
//!   tests ([`RedisCluster::shared`]) lives in a static, which is never
//!   dropped. So every node runs under a tiny `sh` wrapper: it forks a
//!   watcher that blocks reading a pipe from the test process, then `exec`s
//!   the server (the child's PID is the server's, so it is killed by PID and
//!   the PID check of [`crate::server`] applies). When the test process
//!   exits, however it exits, the pipe closes, and the watcher kills the
//!   server (SIGKILL) and removes its temp dir. The harness itself kills a
//!   node before it reaps it and waits for the watcher to finish before
//!   reaping, so no watcher ever signals a PID that could have been reused.
//! - **Disruption needs `&mut`.** Killing nodes and moving slots take
//!   `&mut self`, so the shared cluster (`&'static`) cannot be disrupted by
//!   one test under another's feet; tests that disrupt start their own.
//!
//! Variants ([`ClusterOptions`]): the node timeout (`cluster-node-timeout`,
//! default [`NODE_TIMEOUT`]), an ACL user with a password (the default user
//! is then off), and, with the `tls` feature, TLS only (`--port 0
//! --tls-port`, `--tls-cluster yes --tls-replication yes`). The harness talks
//! to TLS nodes over their Unix sockets, as [`crate::RedisServer`] does.
//!
//! Worth knowing when testing a client against it: redis-server 7.0 leaves a
//! replica out of `CLUSTER SLOTS` while its replication offset is 0 (in an
//! idle new cluster, until the primary's first replication ping, 10 s);
//! `start` writes to every primary so that the map it returns with names
//! every replica. `CLUSTER SLOTS` never lists a failed node.
//!
//! `REDIS_SERVER_BIN` and `REDIS_CLI_BIN` override the binaries.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
#[cfg(feature = "tls")]
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

#[cfg(feature = "tls")]
use crate::server::{ClientAuth, TlsSetup};
use crate::server::{free_port, open, server_bin, server_major_version, serving};

static NEXT_DIR: AtomicU32 = AtomicU32::new(0);

/// The default `cluster-node-timeout`: long enough that a loaded two-core
/// machine does not fail a primary over spuriously, short enough that a
/// killed primary's replica is promoted in about 3 to 4 s.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(2000);

/// How long [`RedisCluster::start`] waits for the cluster to be ready.
pub const READY_LIMIT: Duration = Duration::from_secs(30);

/// How long a finished migration waits for every node to agree.
const AGREE_LIMIT: Duration = Duration::from_secs(10);

/// The number of hash slots.
pub const SLOTS: u16 = 16384;

/// Runs the server given as `$2...` with its stdin at `/dev/null`, after
/// forking a watcher that reads the wrapper's stdin (a pipe from the test
/// process) and, once it reads a line or end of file, kills the server
/// (`$$`: the `exec`ed shell is the server) and removes its dir (`$1`)
/// unless the line was `keep`. The watcher holds the wrapper's stdout, so
/// its end of file tells the harness the watcher is done. `$0` names the
/// wrapper.
const WRAPPER: &str = r#"dir=$1; shift
exec 3<&0 </dev/null
{ read x <&3; kill -9 $$ 2>/dev/null; [ "$x" = keep ] || rm -rf "$dir"; } &
exec "$@" 3<&- >/dev/null"#;

fn cli_bin() -> String {
    std::env::var("REDIS_CLI_BIN").unwrap_or_else(|_| "redis-cli".to_string())
}

/// How a cluster is started; [`ClusterOptions::start`] starts it.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    node_timeout: Duration,
    user: Option<(String, String)>,
    #[cfg(feature = "tls")]
    tls: Option<ClientAuth>,
}

impl Default for ClusterOptions {
    fn default() -> ClusterOptions {
        ClusterOptions {
            node_timeout: NODE_TIMEOUT,
            user: None,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }
}

impl ClusterOptions {
    pub fn new() -> ClusterOptions {
        ClusterOptions::default()
    }

    /// `cluster-node-timeout`: how long a silent node takes to be failed
    /// (and its replica promoted, a second or so later). Below about a
    /// second, a loaded machine sees spurious failovers.
    pub fn node_timeout(mut self, timeout: Duration) -> ClusterOptions {
        self.node_timeout = timeout;
        self
    }

    /// Every node knows the ACL user `user` with `password` and all
    /// permissions; `default` turns the default user into one that needs
    /// the password (as `requirepass` does), any other name turns the
    /// default user off. Replication logs in with it (`masteruser`,
    /// `masterauth`), so does `MIGRATE` (`AUTH2`), and so do the harness's
    /// connections and [`RedisCluster::seed_urls`].
    pub fn acl_user(mut self, user: &str, password: &str) -> ClusterOptions {
        self.user = Some((user.to_owned(), password.to_owned()));
        self
    }

    /// Nodes listen for TLS only (`--port 0 --tls-port`) and speak TLS on
    /// the cluster bus and for replication, with a fresh CA (see
    /// [`RedisCluster::tls`]); `auth` says whether clients must present a
    /// certificate. Nodes present the client certificate to each other.
    #[cfg(feature = "tls")]
    pub fn tls(mut self, auth: ClientAuth) -> ClusterOptions {
        self.tls = Some(auth);
        self
    }

    /// Starts the cluster; see [`RedisCluster::start`].
    pub fn start(self) -> RedisCluster {
        RedisCluster::start_with(self)
    }
}

/// A range of slots and who serves it, from `CLUSTER SLOTS` (ports only;
/// replicas sorted by port; failed replicas are not listed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRange {
    pub start: u16,
    pub end: u16,
    pub primary: u16,
    pub replicas: Vec<u16>,
}

/// How the harness reaches nodes: TCP, or each TLS node's Unix socket, with
/// the credentials if any. Cloned into a [`Migration`].
#[derive(Debug, Clone)]
struct Access {
    user: Option<(String, String)>,
    /// Node port → Unix socket, for TLS-only nodes.
    sockets: Option<HashMap<u16, PathBuf>>,
}

impl Access {
    fn url(&self, port: u16) -> String {
        if let Some(sockets) = &self.sockets {
            let socket = sockets.get(&port).unwrap_or_else(|| panic!("no node on port {port}"));
            let mut url = format!("redis+unix://{}", socket.display());
            if let Some((user, password)) = &self.user {
                url += &format!("?user={}&pass={}", encode(user), encode(password));
            }
            return url;
        }
        match &self.user {
            Some((user, password)) => {
                format!("redis://{}:{}@127.0.0.1:{port}/", encode(user), encode(password))
            }
            None => format!("redis://127.0.0.1:{port}/"),
        }
    }

    fn open(&self, port: u16) -> redis::RedisResult<redis::Connection> {
        open(&self.url(port))
    }

    fn conn(&self, port: u16) -> redis::Connection {
        self.open(port).unwrap_or_else(|e| panic!("cannot connect to cluster node {port}: {e}"))
    }

    /// `CLUSTER SLOTS` of the node on `port`.
    fn slot_map(&self, port: u16) -> redis::RedisResult<Vec<SlotRange>> {
        let mut con = self.open(port)?;
        let value: redis::Value = redis::cmd("CLUSTER").arg("SLOTS").query(&mut con)?;
        parse_slots(&value).ok_or_else(|| {
            redis::RedisError::from((
                redis::ErrorKind::Parse,
                "unexpected CLUSTER SLOTS reply",
                format!("{value:?}"),
            ))
        })
    }

    /// `CLUSTER INFO` of the node on `port`, as fields.
    fn info(&self, port: u16) -> redis::RedisResult<HashMap<String, String>> {
        let mut con = self.open(port)?;
        let text: String = redis::cmd("CLUSTER").arg("INFO").query(&mut con)?;
        Ok(fields(&text))
    }

    /// Waits (at most `limit`) until every node in `ports` answers the same
    /// slot map, with `slot` served by `owner` and `cluster_state:ok`.
    fn wait_for_agreement(
        &self,
        ports: &[u16],
        slot: u16,
        owner: u16,
        limit: Duration,
    ) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            let problem = self.agreement_problem(ports, slot, owner);
            let Some(problem) = problem else { return Ok(()) };
            if Instant::now() >= deadline {
                return Err(problem);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn agreement_problem(&self, ports: &[u16], slot: u16, owner: u16) -> Option<String> {
        let mut first: Option<(u16, Vec<SlotRange>)> = None;
        for &port in ports {
            match self.info(port) {
                Ok(info) if info.get("cluster_state").map(String::as_str) == Some("ok") => {}
                Ok(info) => {
                    return Some(format!("node {port}: cluster_state {:?}", info.get("cluster_state")));
                }
                Err(e) => return Some(format!("node {port}: CLUSTER INFO failed: {e}")),
            }
            let map = match self.slot_map(port) {
                Ok(map) => map,
                Err(e) => return Some(format!("node {port}: CLUSTER SLOTS failed: {e}")),
            };
            if owner_in(&map, slot) != Some(owner) {
                return Some(format!(
                    "node {port} says slot {slot} is on {:?}, not {owner}",
                    owner_in(&map, slot)
                ));
            }
            match &first {
                None => first = Some((port, map)),
                Some((other, first_map)) if *first_map != map => {
                    return Some(format!("nodes {other} and {port} disagree:\n{first_map:?}\n{map:?}"));
                }
                Some(_) => {}
            }
        }
        None
    }
}

/// Percent-encodes everything but unreserved characters, for URLs.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// `key:value` lines (`CLUSTER INFO`, `INFO`) as a map.
fn fields(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| line.trim().split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn parse_slots(value: &redis::Value) -> Option<Vec<SlotRange>> {
    use redis::Value;
    let int = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    let port = |v: &Value| match v {
        Value::Array(items) => items.get(1).and_then(int),
        _ => None,
    };
    let Value::Array(ranges) = value else { return None };
    let mut map = Vec::new();
    for range in ranges {
        let Value::Array(items) = range else { return None };
        if items.len() < 3 {
            return None;
        }
        let mut replicas = items[3..].iter().map(port).collect::<Option<Vec<u16>>>()?;
        replicas.sort_unstable();
        map.push(SlotRange {
            start: int(&items[0])?,
            end: int(&items[1])?,
            primary: port(&items[2])?,
            replicas,
        });
    }
    map.sort_by_key(|r| r.start);
    Some(map)
}

fn owner_in(map: &[SlotRange], slot: u16) -> Option<u16> {
    map.iter().find(|r| r.start <= slot && slot <= r.end).map(|r| r.primary)
}

/// One node: a `redis-server` under the watcher wrapper.
struct Node {
    port: u16,
    bus_port: u16,
    dir: PathBuf,
    /// Its cluster node id, known once it runs.
    id: String,
    /// The server (the wrapper's PID); `None` once killed.
    process: Option<Child>,
    /// The watcher's pipes, held apart from `process` so that they outlive
    /// a failed start (which [`serving`] reaps and drops): a watcher is
    /// only ever told to stop, with or without its dir, by [`Node::kill`].
    watcher: Option<(ChildStdin, ChildStdout)>,
}

impl Node {
    fn running(&self) -> bool {
        self.process.is_some()
    }

    /// Kills the server (SIGKILL by PID: unreaped, the PID cannot have been
    /// reused), closes the watcher's pipe (with `keep`: leave the temp dir
    /// for a restart), waits until the watcher has exited (its own kill
    /// then hit our zombie, not a reused PID) and reaps the server.
    fn kill(&mut self, keep_dir: bool) {
        let mut child = self.process.take();
        if let Some(child) = &mut child {
            let _ = child.kill();
        }
        if let Some((mut stdin, mut stdout)) = self.watcher.take() {
            if keep_dir {
                let _ = stdin.write_all(b"keep\n");
            }
            drop(stdin);
            let _ = stdout.read_to_end(&mut Vec::new());
        }
        if let Some(child) = &mut child {
            let _ = child.wait();
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }
}

/// Three primaries and three replicas; see the module docs.
pub struct RedisCluster {
    nodes: Vec<Node>,
    options: ClusterOptions,
    access: Access,
    #[cfg(feature = "tls")]
    tls: Option<Arc<TlsSetup>>,
}

impl std::fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCluster")
            .field("ports", &self.ports())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl RedisCluster {
    /// Starts a plain cluster (no TLS, no password, [`NODE_TIMEOUT`]) and
    /// returns once it is ready (see the module docs), at most
    /// [`READY_LIMIT`] later; panics with the node logs otherwise.
    pub fn start() -> RedisCluster {
        ClusterOptions::new().start()
    }

    /// The options builder, for the other variants.
    pub fn options() -> ClusterOptions {
        ClusterOptions::new()
    }

    /// A plain cluster shared by the tests of this test binary, started by
    /// the first caller. Do not change what others rely on: use keys of
    /// your own and leave the slot map and the nodes alone (killing and
    /// migrating need `&mut`, which a `&'static` does not give). Its
    /// servers are killed when the test binary exits (see the module docs).
    pub fn shared() -> &'static RedisCluster {
        static SHARED: OnceLock<RedisCluster> = OnceLock::new();
        SHARED.get_or_init(RedisCluster::start)
    }

    fn start_with(options: ClusterOptions) -> RedisCluster {
        let begun = Instant::now();
        #[cfg(feature = "tls")]
        let tls = options.tls.map(|auth| Arc::new(TlsSetup::new("keyholder cluster test CA", auth)));
        #[cfg(feature = "tls")]
        let is_tls = tls.is_some();
        #[cfg(not(feature = "tls"))]
        let is_tls = false;

        let mut cluster = RedisCluster {
            nodes: Vec::new(),
            access: Access { user: options.user.clone(), sockets: is_tls.then(HashMap::new) },
            options,
            #[cfg(feature = "tls")]
            tls,
        };
        for _ in 0..6 {
            let dir = std::env::temp_dir().join(format!(
                "keyholder-cluster-{}-{}",
                std::process::id(),
                NEXT_DIR.fetch_add(1, Ordering::Relaxed)
            ));
            let mut node =
                Node { port: 0, bus_port: 0, dir, id: String::new(), process: None, watcher: None };
            cluster.spawn_on_free_ports(&mut node);
            cluster.nodes.push(node);
        }
        for i in 0..cluster.nodes.len() {
            let mut con = cluster.access.conn(cluster.nodes[i].port);
            cluster.nodes[i].id = redis::cmd("CLUSTER").arg("MYID").query(&mut con).unwrap();
        }
        cluster.create();
        cluster.wait_until_ready(begun + READY_LIMIT);
        cluster
    }

    /// Starts `node` on new free ports; retries on a port race.
    fn spawn_on_free_ports(&mut self, node: &mut Node) {
        for _ in 0..5 {
            node.port = free_port();
            node.bus_port = free_port();
            if node.port != node.bus_port && self.spawn(node) {
                return;
            }
        }
        let (log, err) =
            (node.log(), std::fs::read_to_string(node.dir.join("redis.err")).unwrap_or_default());
        let _ = std::fs::remove_dir_all(&node.dir);
        panic!("a cluster node did not start; log:\n{log}\nstderr:\n{err}");
    }

    /// Starts `node` on its ports, in its dir (keeping a `nodes.conf` there);
    /// false if it did not answer as ours (see [`crate::server::serving`]).
    fn spawn(&mut self, node: &mut Node) -> bool {
        std::fs::create_dir_all(&node.dir).unwrap();
        let socket = node.dir.join("redis.sock");
        if let Some(sockets) = &mut self.access.sockets {
            sockets.insert(node.port, socket.clone());
        }
        let mut args: Vec<String> = self.listen_args(node);
        let dir = node.dir.display().to_string();
        args.extend(
            [
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-port",
                &node.bus_port.to_string(),
                "--cluster-config-file",
                &format!("{dir}/nodes.conf"),
                "--cluster-node-timeout",
                &self.options.node_timeout.as_millis().to_string(),
                // A replica may always be promoted, however long the
                // cluster sat idle.
                "--cluster-replica-validity-factor",
                "0",
                "--save",
                "",
                "--appendonly",
                "no",
                "--repl-diskless-sync-delay",
                "0",
                "--daemonize",
                "no",
                "--dir",
                &dir,
                "--logfile",
                &format!("{dir}/redis.log"),
                "--unixsocket",
                &socket.display().to_string(),
                "--unixsocketperm",
                "700",
            ]
            .map(str::to_owned),
        );
        if let Some((user, password)) = &self.options.user {
            // A `user` line defines the user afresh, permissions included.
            let rules = ["--user", user, "on", &format!(">{password}"), "~*", "&*", "+@all"];
            args.extend(rules.map(str::to_owned));
            if user != "default" {
                args.extend(["--user", "default", "off"].map(str::to_owned));
            }
            args.extend(["--masteruser", user, "--masterauth", password].map(str::to_owned));
        }
        if server_major_version() >= 7 {
            args.extend(["--enable-debug-command", "yes"].map(str::to_owned));
        }
        let stderr =
            std::fs::File::create(node.dir.join("redis.err")).map_or_else(|_| Stdio::null(), Stdio::from);
        let mut child = Command::new("sh")
            .args(["-c", WRAPPER, "keyholder-cluster-node", &dir, &server_bin()])
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run sh to start {} ({e})", server_bin()));
        node.watcher = Some((child.stdin.take().unwrap(), child.stdout.take().unwrap()));
        node.process = Some(child);
        let access = self.access.clone();
        let port = node.port;
        if serving(&mut node.process, || access.open(port)) {
            return true;
        }
        // Not ours, or it exited (then `serving` reaped it, and the watcher
        // kills a PID just freed: not one reused that soon). Keep the dir:
        // a restart needs its `nodes.conf`.
        node.kill(true);
        false
    }

    fn listen_args(&self, node: &Node) -> Vec<String> {
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            let mut args = tls.listen_args(&node.dir, node.port);
            args.extend([
                // Nodes log in to each other (bus, replication, MIGRATE)
                // with the client certificate: the server one is for
                // servers only.
                "--tls-client-cert-file".into(),
                TlsSetup::write(&node.dir, "client.crt", &tls.client.cert),
                "--tls-client-key-file".into(),
                TlsSetup::write(&node.dir, "client.key", &tls.client.key),
                "--tls-cluster".into(),
                "yes".into(),
                "--tls-replication".into(),
                "yes".into(),
            ]);
            return args;
        }
        vec!["--port".into(), node.port.to_string()]
    }

    /// `redis-cli --cluster create` with every node, one replica each.
    fn create(&self) {
        let mut cmd = Command::new(cli_bin());
        #[cfg(feature = "tls")]
        if self.tls.is_some() {
            let file = |name: &str| self.nodes[0].dir.join(name).display().to_string();
            cmd.args([
                "--tls",
                "--cacert",
                &file("ca.crt"),
                "--cert",
                &file("client.crt"),
                "--key",
                &file("client.key"),
            ]);
        }
        if let Some((user, password)) = &self.options.user {
            cmd.args(["--user", user, "-a", password, "--no-auth-warning"]);
        }
        cmd.args(["--cluster", "create"])
            .args(self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot run {} ({e})", cli_bin()));
        // Bounded: redis-cli waits for the nodes to agree, which they may
        // never do if something is wrong.
        let deadline = Instant::now() + READY_LIMIT;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut out = String::new();
        let mut err = String::new();
        if let Some(mut stdout) = child.stdout.take() {
            let _ = stdout.read_to_string(&mut out);
        }
        if let Some(mut stderr) = child.stderr.take() {
            let _ = stderr.read_to_string(&mut err);
        }
        if status.is_none_or(|s| !s.success()) {
            panic!(
                "redis-cli --cluster create failed ({status:?}):\n{out}\n{err}\nnode logs:\n{}",
                self.logs()
            );
        }
    }

    /// Waits until [`RedisCluster::ready_problem`] finds none.
    fn wait_until_ready(&self, deadline: Instant) {
        loop {
            let Some(problem) = self.ready_problem() else { return };
            assert!(
                Instant::now() < deadline,
                "the cluster never became ready: {problem}\nnode logs:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Why the cluster is not ready yet, or `None` once it is: every
    /// running node says `cluster_state:ok`, knows every node and has
    /// every slot assigned; every replica's link to its primary is up and
    /// every primary's replicas acknowledge a write of it (`WAIT`); every
    /// node answers the same slot map, covering every slot and naming
    /// exactly the running nodes.
    ///
    /// The write matters for more than `WAIT`: redis-server 7.0 leaves out
    /// of `CLUSTER SLOTS` a replica whose replication offset is still 0,
    /// which in an idle new cluster lasts until the primary's first
    /// replication ping (`repl-ping-replica-period`, 10 s).
    fn ready_problem(&self) -> Option<String> {
        let running: Vec<u16> = self.nodes.iter().filter(|n| n.running()).map(|n| n.port).collect();
        for &port in &running {
            let info = match self.access.info(port) {
                Ok(info) => info,
                Err(e) => return Some(format!("node {port}: CLUSTER INFO failed: {e}")),
            };
            let get = |k: &str| info.get(k).cloned().unwrap_or_default();
            if get("cluster_state") != "ok"
                || get("cluster_slots_ok") != SLOTS.to_string()
                || get("cluster_known_nodes") != self.nodes.len().to_string()
            {
                return Some(format!("node {port}: {info:?}"));
            }
        }
        let map = match self.access.slot_map(running[0]) {
            Ok(map) => map,
            Err(e) => return Some(format!("node {}: CLUSTER SLOTS failed: {e}", running[0])),
        };
        let mut primaries: Vec<u16> = map.iter().map(|r| r.primary).collect();
        primaries.sort_unstable();
        primaries.dedup();
        // Replicas by their own account.
        let mut replicas_of: HashMap<u16, usize> = HashMap::new();
        for &port in running.iter().filter(|p| !primaries.contains(p)) {
            let Ok(mut con) = self.access.open(port) else {
                return Some(format!("node {port} does not answer"));
            };
            let info: String = redis::cmd("INFO").arg("replication").query(&mut con).unwrap_or_default();
            let info = fields(&info);
            let link = info.get("master_link_status").map(String::as_str);
            let master = info.get("master_port").and_then(|p| p.parse::<u16>().ok());
            match master {
                Some(master) if link == Some("up") && primaries.contains(&master) => {
                    *replicas_of.entry(master).or_default() += 1;
                }
                _ => {
                    return Some(format!(
                        "node {port}: role {:?}, link {link:?} to {master:?}",
                        info.get("role")
                    ));
                }
            }
        }
        for &primary in &primaries {
            if let Err(problem) =
                self.probe_acks(primary, &map, replicas_of.get(&primary).copied().unwrap_or(0))
            {
                return Some(problem);
            }
        }
        for &port in &running[1..] {
            match self.access.slot_map(port) {
                Ok(other) if other == map => {}
                Ok(other) => {
                    return Some(format!("nodes {} and {port} disagree:\n{map:?}\n{other:?}", running[0]));
                }
                Err(e) => return Some(format!("node {port}: CLUSTER SLOTS failed: {e}")),
            }
        }
        let mut next = 0u32;
        for range in &map {
            if u32::from(range.start) != next {
                return Some(format!("slots {next}..{} are not served: {map:?}", range.start));
            }
            next = u32::from(range.end) + 1;
        }
        if next != u32::from(SLOTS) {
            return Some(format!("slots from {next} are not served: {map:?}"));
        }
        let mut named: Vec<u16> =
            map.iter().flat_map(|r| std::iter::once(r.primary).chain(r.replicas.clone())).collect();
        named.sort_unstable();
        named.dedup();
        let mut expected = running.clone();
        expected.sort_unstable();
        if named != expected {
            return Some(format!("the slot map names {named:?}, the running nodes are {expected:?}"));
        }
        None
    }

    /// Writes a key of `primary`'s own on it and asks `WAIT` for `replicas`
    /// acknowledgements (a replica still loading the snapshot is online but
    /// acknowledges nothing).
    fn probe_acks(&self, primary: u16, map: &[SlotRange], replicas: usize) -> Result<(), String> {
        let mut con = self.access.open(primary).map_err(|e| format!("primary {primary}: {e}"))?;
        let key = (0..1000)
            .map(|i| format!("keyholder-testkit:probe:{i}"))
            .find(|key| {
                let slot: Option<u16> = redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query(&mut con).ok();
                slot.and_then(|s| owner_in(map, s)) == Some(primary)
            })
            .ok_or_else(|| format!("no probe key found for primary {primary}"))?;
        let result: redis::RedisResult<i64> = (|| {
            let _: () = redis::cmd("SET").arg(&key).arg(1).query(&mut con)?;
            let acked: i64 = redis::cmd("WAIT").arg(replicas).arg(100).query(&mut con)?;
            let _: i64 = redis::cmd("DEL").arg(&key).query(&mut con)?;
            Ok(acked)
        })();
        match result {
            Ok(acked) if acked >= replicas as i64 => Ok(()),
            Ok(acked) => Err(format!("primary {primary}: WAIT {replicas} got {acked}")),
            Err(e) => Err(format!("primary {primary}: probe write failed: {e}")),
        }
    }

    /// Every node's client port, in start order (killed ones included).
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// The ports of the nodes running now.
    pub fn running_ports(&self) -> Vec<u16> {
        self.nodes.iter().filter(|n| n.running()).map(|n| n.port).collect()
    }

    /// The nodes' `(port, cluster node id)`, in start order.
    pub fn node_ids(&self) -> Vec<(u16, String)> {
        self.nodes.iter().map(|n| (n.port, n.id.clone())).collect()
    }

    /// The cluster node id of the node on `port`.
    pub fn node_id(&self, port: u16) -> &str {
        &self.node(port).id
    }

    fn node(&self, port: u16) -> &Node {
        self.nodes.iter().find(|n| n.port == port).unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    /// Every node's URL, `redis://[user:password@]127.0.0.1:<port>/`
    /// (`rediss://` for TLS), killed nodes included: seeds for a client.
    pub fn seed_urls(&self) -> Vec<String> {
        #[cfg(feature = "tls")]
        let scheme = if self.tls.is_some() { "rediss" } else { "redis" };
        #[cfg(not(feature = "tls"))]
        let scheme = "redis";
        let credentials = match &self.options.user {
            Some((user, password)) => format!("{}:{}@", encode(user), encode(password)),
            None => String::new(),
        };
        self.nodes.iter().map(|n| format!("{scheme}://{credentials}127.0.0.1:{}/", n.port)).collect()
    }

    /// The ACL user and password, if the cluster has one.
    pub fn credentials(&self) -> Option<(&str, &str)> {
        self.options.user.as_ref().map(|(u, p)| (u.as_str(), p.as_str()))
    }

    /// A TLS cluster's certificates: trust `ca`, present `client` (when
    /// `auth` is [`ClientAuth::Required`]).
    #[cfg(feature = "tls")]
    pub fn tls(&self) -> &TlsSetup {
        self.tls.as_deref().expect("not a TLS cluster")
    }

    /// A TLS cluster's certificate files, in the first node's temp dir:
    /// `ca.crt`, `client.crt`, `client.key` (and the servers' `server.crt`,
    /// `server.key`).
    #[cfg(feature = "tls")]
    pub fn tls_file(&self, name: &str) -> PathBuf {
        assert!(self.tls.is_some(), "not a TLS cluster");
        self.nodes[0].dir.join(name)
    }

    /// The slot map as a running node sees it (`CLUSTER SLOTS`).
    pub fn slot_map(&self) -> Vec<SlotRange> {
        let mut last = None;
        for port in self.running_ports() {
            match self.access.slot_map(port) {
                Ok(map) => return map,
                Err(e) => last = Some(format!("{port}: {e}")),
            }
        }
        panic!("no cluster node answers CLUSTER SLOTS ({last:?})")
    }

    /// The ports of the running primaries (`ROLE` says `master`).
    pub fn primaries(&self) -> Vec<u16> {
        self.ports_with_role("master")
    }

    /// The ports of the running replicas (`ROLE` says `slave`).
    pub fn replicas(&self) -> Vec<u16> {
        self.ports_with_role("slave")
    }

    fn ports_with_role(&self, role: &str) -> Vec<u16> {
        self.running_ports()
            .into_iter()
            .filter(|&port| {
                let mut con = self.conn_to(port);
                let reply: Vec<redis::Value> = redis::cmd("ROLE").query(&mut con).unwrap();
                matches!(reply.first(), Some(redis::Value::BulkString(r)) if r == role.as_bytes())
            })
            .collect()
    }

    /// The primaries of each replica's link, as `(replica, primary)` ports.
    pub fn replica_links(&self) -> Vec<(u16, u16)> {
        self.slot_map()
            .iter()
            .flat_map(|r| r.replicas.iter().map(move |&replica| (replica, r.primary)))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// The hash slot of `key`, as a running node computes it
    /// (`CLUSTER KEYSLOT`: the part between the first `{` and the next `}`
    /// if that is not empty, else the whole key).
    pub fn keyslot(&self, key: &str) -> u16 {
        let port = *self.running_ports().first().expect("no cluster node runs");
        let mut con = self.conn_to(port);
        redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query(&mut con).unwrap()
    }

    /// The port of the primary serving `slot`, per a running node's
    /// `CLUSTER SLOTS`.
    pub fn primary_of_slot(&self, slot: u16) -> u16 {
        let map = self.slot_map();
        owner_in(&map, slot).unwrap_or_else(|| panic!("no node serves slot {slot}: {map:?}"))
    }

    /// The port of the primary serving `key`'s slot.
    pub fn primary_of_key(&self, key: &str) -> u16 {
        self.primary_of_slot(self.keyslot(key))
    }

    /// A harness connection to the node on `port` (over its Unix socket for
    /// a TLS cluster), logged in if the cluster has a user: connects within
    /// 1 s, replies within 5 s. Panics if it cannot connect.
    pub fn conn_to(&self, port: u16) -> redis::Connection {
        self.access.conn(port)
    }

    /// As [`conn_to`](RedisCluster::conn_to), the error returned.
    pub fn try_conn_to(&self, port: u16) -> redis::RedisResult<redis::Connection> {
        self.access.open(port)
    }

    /// The URL the harness reaches the node on `port` by (with credentials):
    /// `redis://`, or `redis+unix://` for a TLS cluster.
    pub fn harness_url(&self, port: u16) -> String {
        self.access.url(port)
    }

    /// A connection to the primary serving `key`.
    pub fn conn_for_key(&self, key: &str) -> redis::Connection {
        self.conn_to(self.primary_of_key(key))
    }

    /// Every node's log, for a failing assertion.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| {
                let state = if n.running() { "" } else { " (killed)" };
                format!("--- node {} {}{state}\n{}", n.port, n.id, n.log())
            })
            .collect()
    }

    /// The log of the node on `port`.
    pub fn log(&self, port: u16) -> String {
        self.node(port).log()
    }

    /// Starts moving `slot` from its primary to the primary on `to`:
    /// `CLUSTER SETSLOT <slot> IMPORTING <source id>` on `to`, then
    /// `MIGRATING <target id>` on the source. Keys stay where they are
    /// until [`Migration::move_keys`].
    ///
    /// In this state, for keys of `slot`:
    /// - the source serves keys it still has, and answers
    ///   `-ASK <slot> 127.0.0.1:<to>` for a key it does not have (moved, or
    ///   new: a write that would create it is sent there too);
    /// - the target answers `-MOVED <slot> <source>` unless the command
    ///   follows `ASKING` on the same connection, after which it serves it;
    /// - a multi-key command whose keys are split between the two, or
    ///   partly missing, gets `-TRYAGAIN` (on the source; with `ASKING`, on
    ///   the target too);
    /// - `CLUSTER SLOTS` still names the source on every node.
    pub fn begin_migration(&mut self, slot: u16, to: u16) -> Migration {
        let from = self.primary_of_slot(slot);
        assert_ne!(from, to, "slot {slot} is already on {to}");
        let migration = Migration {
            slot,
            from,
            to,
            from_id: self.node_id(from).to_owned(),
            to_id: self.node_id(to).to_owned(),
            access: self.access.clone(),
            primaries: self.primaries(),
            running: self.running_ports(),
        };
        let set = |port: u16, state: &str, id: &str| {
            let mut con = self.conn_to(port);
            let _: () = redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg(state)
                .arg(id)
                .query(&mut con)
                .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {state} {id} on {port}: {e}"));
        };
        set(to, "IMPORTING", &migration.from_id);
        set(from, "MIGRATING", &migration.to_id);
        migration
    }

    /// Moves `slot` to the primary on `to` with its keys:
    /// [`begin_migration`](RedisCluster::begin_migration),
    /// [`Migration::move_keys`], [`Migration::finish`]. Afterwards every
    /// node says `to` serves it and the old owner answers `-MOVED`.
    pub fn migrate_slot(&mut self, slot: u16, to: u16) {
        let migration = self.begin_migration(slot, to);
        migration.move_keys();
        migration.finish();
    }

    /// Kills (SIGKILL) the primary serving `slot` and returns its port.
    /// Until its replica is promoted ([`wait_for_failover`]), the slot is
    /// served by nobody: clients see connection errors to the dead node,
    /// and, once the others fail it (after the node timeout), `-CLUSTERDOWN`
    /// from every node (full coverage is required).
    ///
    /// [`wait_for_failover`]: RedisCluster::wait_for_failover
    pub fn kill_primary_of_slot(&mut self, slot: u16) -> u16 {
        let port = self.primary_of_slot(slot);
        self.kill_node(port);
        port
    }

    /// Kills (SIGKILL) the node on `port`, keeping its dir and `nodes.conf`
    /// for [`restart_killed`](RedisCluster::restart_killed).
    pub fn kill_node(&mut self, port: u16) {
        let node =
            self.nodes.iter_mut().find(|n| n.port == port).unwrap_or_else(|| panic!("no node on {port}"));
        node.kill(true);
    }

    /// Waits (at most `limit`) until every running node says
    /// `cluster_state:ok` and names the same running node as `slot`'s
    /// primary; returns that node's port, or `None` when time ran out.
    pub fn wait_for_failover(&self, slot: u16, limit: Duration) -> Option<u16> {
        let deadline = Instant::now() + limit;
        let running = self.running_ports();
        loop {
            let mut owners = running.iter().map(|&port| {
                let ok = self.access.info(port).ok()?.get("cluster_state").map(String::as_str) == Some("ok");
                let owner = owner_in(&self.access.slot_map(port).ok()?, slot)?;
                (ok && running.contains(&owner)).then_some(owner)
            });
            let first = owners.next().flatten();
            if first.is_some() && owners.all(|owner| owner == first) {
                return first;
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the killed nodes again on their ports with their
    /// `nodes.conf` (a killed primary comes back as a replica of the one
    /// that replaced it) and waits until the cluster is ready again.
    pub fn restart_killed(&mut self) {
        let begun = Instant::now();
        let mut nodes = std::mem::take(&mut self.nodes);
        for node in nodes.iter_mut().filter(|n| !n.running()) {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !self.spawn(node) {
                assert!(
                    Instant::now() < deadline,
                    "node {} did not restart on its port:\n{}\nstderr:\n{}",
                    node.port,
                    node.log(),
                    std::fs::read_to_string(node.dir.join("redis.err")).unwrap_or_default()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.nodes = nodes;
        self.wait_until_ready(begun + READY_LIMIT);
    }

    /// Waits (at most [`READY_LIMIT`]) until the cluster is as ready as
    /// [`start`](RedisCluster::start) leaves it; with nodes killed, never.
    pub fn wait_until_ready_again(&self) {
        self.wait_until_ready(Instant::now() + READY_LIMIT);
    }

    /// Hangs the node on `port` (SIGSTOP), as [`RedisServer::freeze`]
    /// does: its connections stay open and it answers nothing, reads
    /// nothing (a replica falls behind its primary) and pings no one; past
    /// the node timeout the others flag it as failing. A frozen node is
    /// still killed by [`kill_node`](RedisCluster::kill_node) and the drop.
    ///
    /// [`RedisServer::freeze`]: crate::RedisServer::freeze
    pub fn freeze_node(&mut self, port: u16) {
        self.signal_node(port, "-STOP");
    }

    /// Lets a [`freeze_node`](RedisCluster::freeze_node)d node go on
    /// (SIGCONT).
    pub fn thaw_node(&mut self, port: u16) {
        self.signal_node(port, "-CONT");
    }

    fn signal_node(&self, port: u16, signal: &str) {
        let node = self.nodes.iter().find(|n| n.port == port).unwrap_or_else(|| panic!("no node on {port}"));
        // The wrapper `exec`s the server: the child's PID is the server's.
        let pid = node.process.as_ref().unwrap_or_else(|| panic!("node {port} is not running")).id();
        let status = Command::new("kill").args([signal, &pid.to_string()]).status().unwrap();
        assert!(status.success(), "kill {signal} {pid} failed");
    }

    // Faults that return instead of panicking, for the fault campaign
    // (tests/campaign.rs), which goes on after a fault the cluster is slow
    // to heal from and reports it.

    /// As [`restart_killed`](RedisCluster::restart_killed), bounded by
    /// `limit` and returning what is still wrong instead of panicking.
    pub fn try_restart_killed(&mut self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        let mut nodes = std::mem::take(&mut self.nodes);
        let mut failed = None;
        for node in nodes.iter_mut().filter(|n| !n.running()) {
            while !self.spawn(node) {
                if Instant::now() >= deadline {
                    failed = Some(format!("node {} did not restart on its port", node.port));
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.nodes = nodes;
        match failed {
            Some(problem) => Err(problem),
            None => self.ready_within(deadline.saturating_duration_since(Instant::now())),
        }
    }

    /// Waits (at most `limit`) until the cluster is as ready as
    /// [`start`](RedisCluster::start) leaves it; returns what is still
    /// wrong otherwise.
    pub fn ready_within(&self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            let Some(problem) = self.ready_problem() else { return Ok(()) };
            if Instant::now() >= deadline {
                return Err(problem);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill(false);
            let _ = std::fs::remove_dir_all(&node.dir);
        }
    }
}

/// A slot being moved, begun by [`RedisCluster::begin_migration`]. It holds
/// no borrow of the cluster, so a test can look at the cluster meanwhile.
/// Dropping it unfinished leaves the slot half-moved.
#[derive(Debug)]
pub struct Migration {
    slot: u16,
    from: u16,
    to: u16,
    from_id: String,
    to_id: String,
    access: Access,
    primaries: Vec<u16>,
    running: Vec<u16>,
}

impl Migration {
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The source's port.
    pub fn from(&self) -> u16 {
        self.from
    }

    /// The target's port.
    pub fn to(&self) -> u16 {
        self.to
    }

    /// Moves every key of the slot from the source to the target
    /// (`CLUSTER GETKEYSINSLOT`, then `MIGRATE ... KEYS`, 100 at a time, at
    /// most 1000 rounds). Afterwards the source answers `-ASK` for every
    /// key of the slot (none is left there) and `CLUSTER SLOTS` still names
    /// the source.
    pub fn move_keys(&self) {
        let mut source = self.access.conn(self.from);
        for _ in 0..1000 {
            let keys: Vec<Vec<u8>> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(self.slot)
                .arg(100)
                .query(&mut source)
                .unwrap_or_else(|e| panic!("CLUSTER GETKEYSINSLOT {} on {}: {e}", self.slot, self.from));
            if keys.is_empty() {
                return;
            }
            self.migrate(&mut source, &keys);
        }
        panic!("slot {} still has keys on {} after 1000 rounds of MIGRATE", self.slot, self.from);
    }

    /// Moves the one key `key` (of this slot) to the target, as
    /// [`move_keys`](Migration::move_keys) does for all: afterwards the
    /// source answers `-ASK` for it and still serves the others.
    pub fn move_key(&self, key: &str) {
        let mut source = self.access.conn(self.from);
        self.migrate(&mut source, &[key.as_bytes().to_vec()]);
    }

    fn migrate(&self, source: &mut redis::Connection, keys: &[Vec<u8>]) {
        let mut cmd = redis::cmd("MIGRATE");
        cmd.arg("127.0.0.1").arg(self.to).arg("").arg(0).arg(5000);
        if let Some((user, password)) = &self.access.user {
            cmd.arg("AUTH2").arg(user).arg(password);
        }
        cmd.arg("KEYS").arg(keys);
        let reply: redis::RedisResult<redis::Value> = cmd.query(source);
        if let Err(e) = reply {
            panic!(
                "MIGRATE of {} keys of slot {} from {} to {}: {e}",
                keys.len(),
                self.slot,
                self.from,
                self.to
            );
        }
    }

    /// Ends the migration: `CLUSTER SETSLOT <slot> NODE <target id>` on the
    /// target, then the source, then every other primary, then waits (at
    /// most 10 s) until every running node answers the same slot map with
    /// the target serving the slot. Panics if keys are left on the source
    /// (the source refuses) or the nodes do not agree in time.
    ///
    /// Afterwards the source (and every other node) answers
    /// `-MOVED <slot> 127.0.0.1:<target>` for the slot's keys, and the
    /// target serves them without `ASKING`.
    pub fn finish(self) {
        let mut order = vec![self.to, self.from];
        order.extend(self.primaries.iter().copied().filter(|p| *p != self.to && *p != self.from));
        for port in order {
            let mut con = self.access.conn(port);
            let reply: redis::RedisResult<()> = redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(self.slot)
                .arg("NODE")
                .arg(&self.to_id)
                .query(&mut con);
            if let Err(e) = reply {
                panic!("CLUSTER SETSLOT {} NODE {} on {port}: {e}", self.slot, self.to_id);
            }
        }
        if let Err(problem) = self.access.wait_for_agreement(&self.running, self.slot, self.to, AGREE_LIMIT) {
            panic!("after moving slot {} to {}, the nodes do not agree: {problem}", self.slot, self.to);
        }
    }
}
