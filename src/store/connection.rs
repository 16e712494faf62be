//! Opening command connections, and what a connection remembers of its
//! failures.
//!
//! **keyholder's own socket.** A command connection is a socket of
//! `net/stream.rs` (TCP, TLS, a Unix socket) and the reply reader of
//! `net/replies.rs`, not a `redis::Connection`: the lanes pipeline many
//! callers' scripts on it and read their replies by position. redis-rs
//! still parses URLs, packs commands and provides `Value` and `RedisError`;
//! replies come out as the same values and errors it gives. Opening one is
//! `net/handshake.rs`'s setup (see [`Connector::open`]): connect, TLS
//! handshake and one setup round trip (`AUTH`, `SELECT`, `CLIENT SETNAME`,
//! `CLIENT SETINFO`, and `ROLE` for a primary a sentinel named) within the
//! connect timeout.
//!
//! **Timeouts.** Both socket timeouts are set to the command timeout, so a
//! black-holed Redis cannot hang a caller, and any I/O error or timeout
//! retires the connection: a write cut short leaves the stream's framing
//! unknown, and a reply that timed out points at a hung path whose late
//! reply the next user of the connection would wait behind (design.md,
//! ADR 12). Replies are matched to calls by position in the lanes.
//!
//! **Dead idle connections.** When Redis, a proxy or a load balancer drops
//! every connection at once (a restart, `CLIENT KILL`, an idle `timeout`),
//! the client still holds them. So a connection that turns out dead
//! (dropped or reset; a timeout is not taken as proof) starts a new
//! *generation*: every connection opened before it is replaced before its
//! next use, without any I/O, and callers whose call is safe to repeat
//! retry it once on a new connection. One outage costs one reconnect per
//! connection in use, not one failed call per connection.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use redis::{RedisError, Value};

use crate::error::reaching::{self, NetError, Stage, What};
use crate::error::{Error, Result};
use crate::net::commands::write_packed;
use crate::net::handshake::{self, Opened, Setup};
use crate::net::replies::ReplyReader;
use crate::net::stream::{Address, Stream};
use crate::store::primary::{Node, Primary};

/// A command connection that remembers whether an I/O error left it in an
/// unknown state.
pub(crate) struct Conn {
    stream: Stream,
    /// The server's address, for the errors of the connection.
    address: Arc<str>,
    command_timeout: Duration,
    /// The read buffer, and the replies read but not yet taken.
    replies: ReplyReader,
    broken: bool,
    /// The connection was found dropped or reset by the other side.
    dead: bool,
    /// The generation the connection was opened in.
    generation: u64,
    /// When the connection was opened, for its maximum lifetime.
    opened_at: Instant,
    /// When a command was last written, for its idle timeout.
    last_used: Instant,
}

impl Conn {
    /// Writes `bytes` (packed commands). A failure retires the connection.
    pub(crate) fn send(&mut self, bytes: &[u8]) -> Result<(), RedisError> {
        self.send_at(bytes, Instant::now())
    }

    /// [`send`](Conn::send) at `now`, the caller's clock read.
    pub(crate) fn send_at(&mut self, bytes: &[u8], now: Instant) -> Result<(), RedisError> {
        self.last_used = now;
        write_packed(&mut self.stream, bytes).map_err(|e| self.broken(e.into())).inspect_err(|e| self.fail(e))
    }

    /// Reads `replies` replies, stopping at the first failure, which
    /// retires the connection: after it, the replies still on their way
    /// would be taken for the next caller's.
    pub(crate) fn receive(&mut self, replies: usize) -> (Vec<Value>, Option<RedisError>) {
        let mut values = Vec::with_capacity(replies);
        while values.len() < replies {
            match self.replies.next(&mut self.stream).and_then(refuse_demoted) {
                Ok(value) => values.push(value),
                Err(e) => {
                    let e = self.broken(e);
                    self.fail(&e);
                    return (values, Some(e));
                }
            }
        }
        (values, None)
    }

    /// An I/O failure of the connection, said with its address (see
    /// `error/reaching.rs`); other errors (a parse error) as they are.
    fn broken(&self, e: RedisError) -> RedisError {
        let Some(io) = reaching::io_of(&e) else { return e };
        let what = match io.kind() {
            // Words of keyholder's own (a demoted primary) are kept.
            _ if io.get_ref().is_some() => What::Failed,
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                What::TimedOut { after: self.command_timeout, stage: Stage::Command }
            }
            std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe => What::Closed { reset: true },
            std::io::ErrorKind::UnexpectedEof => What::Closed { reset: false },
            _ => What::Failed,
        };
        let cause = matches!(what, What::Failed).then_some(e);
        NetError::broken(&*self.address, what, cause).into()
    }

    fn fail(&mut self, e: &RedisError) {
        self.broken = true;
        self.dead |= (is_transport_error(e) || e.is_unrecoverable_error()) && !e.is_timeout();
    }

    /// True once a call found the connection dropped or reset (not merely
    /// slow): the others opened with it are most likely dead too.
    pub(crate) fn is_dead(&self) -> bool {
        self.dead
    }

    /// True when the connection can take the next command: no failure left
    /// it in an unknown state (the other side closing it included: a read
    /// that finds the end of the stream fails), and it is of the current
    /// generation.
    pub(crate) fn is_usable(&self, generation: &Generation) -> bool {
        !self.broken && self.generation >= generation.current()
    }

    /// The generation the connection was opened in.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// When the connection was opened.
    pub(crate) fn opened_at(&self) -> Instant {
        self.opened_at
    }

    /// When a command was last written on the connection (or it was
    /// opened).
    pub(crate) fn last_used(&self) -> Instant {
        self.last_used
    }

    /// Takes the connection out of use, as a failure would: it is not
    /// written to again, and the pool closes rather than keeps it.
    pub(crate) fn retire(&mut self) {
        self.broken = true;
    }
}

/// The current connection generation, shared by the connector and the
/// lanes, and whom to tell when a dead connection starts a new one.
#[derive(Default)]
pub(crate) struct Generation {
    current: AtomicU64,
    /// Called when a connection found dead starts a new generation: Redis
    /// may have restarted or failed over, so every hold is verified.
    on_dead: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl fmt::Debug for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Generation").field("current", &self.current).finish_non_exhaustive()
    }
}

impl Generation {
    pub(crate) fn current(&self) -> u64 {
        self.current.load(Ordering::Acquire)
    }

    /// Sets what to do when a dead connection starts a new generation
    /// (once; later calls are ignored).
    pub(crate) fn on_dead(&self, hook: impl Fn() + Send + Sync + 'static) {
        let _ = self.on_dead.set(Box::new(hook));
    }

    /// Starts a new generation at once: every connection opened before is
    /// stale (the primary moved).
    pub(crate) fn advance(&self) {
        self.current.fetch_add(1, Ordering::AcqRel);
    }

    /// Starts a new generation, unless one started since `opened` (the
    /// generation of the connection found dead): every connection opened
    /// before is stale.
    pub(crate) fn advance_past(&self, opened: u64) {
        let started = self.current.compare_exchange(opened, opened + 1, Ordering::AcqRel, Ordering::Acquire);
        if started.is_ok()
            && let Some(hook) = self.on_dead.get()
        {
            hook();
        }
    }
}

/// True when a command failed in transit (I/O error, timeout, dropped
/// connection): it may or may not have run on the server.
pub(crate) fn is_transport_error(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped()
}

/// A primary demoted by a failover refuses writes with `READONLY` but
/// still answers PING: its connections are as useless as dropped ones. The
/// refusal is turned into a reset connection, so that the connection's
/// generation is retired, calls that are safe to repeat run again on a new
/// connection (which `ROLE` sends to the new primary), and the rest report a
/// connection error. The script did not write anything: on a replica, its
/// first write fails.
fn demoted_as_dropped(e: redis::RedisError) -> redis::RedisError {
    if e.code() != Some("READONLY") {
        return e;
    }
    std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        format!("the primary was demoted (a failover): {e}"),
    )
    .into()
}

/// A `READONLY` error reply, turned into the reset connection it means
/// (see [`demoted_as_dropped`]); other replies, error replies included, pass.
fn refuse_demoted(value: Value) -> redis::RedisResult<Value> {
    match value {
        Value::ServerError(e) if e.code() == "READONLY" => Err(demoted_as_dropped(e.into())),
        other => Ok(other),
    }
}

/// The SHA1 of no script: `EVALSHA` of it answers `NOSCRIPT` to a user
/// allowed to run scripts, `NOPERM` to one who is not.
const ABSENT_SCRIPT_SHA: &str = "0000000000000000000000000000000000000000";

/// Opens command connections.
#[derive(Debug, Clone)]
pub(crate) struct Connector {
    /// Where connections go: asked at every connect.
    primary: Arc<Primary>,
    connect_timeout: Duration,
    command_timeout: Duration,
    generation: Arc<Generation>,
    /// The `CLIENT SETNAME` of every connection: `keyholder:<client-uuid>`.
    name: Arc<str>,
}

impl Connector {
    pub(crate) fn new(
        primary: Arc<Primary>,
        connect_timeout: Duration,
        command_timeout: Duration,
        generation: Arc<Generation>,
        name: Arc<str>,
    ) -> Self {
        Connector { primary, connect_timeout, command_timeout, generation, name }
    }
}

impl Connector {
    /// The address connections go to now, if known (no I/O).
    pub(crate) fn known_address(&self) -> Option<String> {
        self.primary.known_address()
    }

    /// The generation of the connections this connector opens.
    pub(crate) fn generation(&self) -> &Generation {
        &self.generation
    }

    /// Opens one connection and tries on it what keyholder will need, so
    /// that a server that refuses this client (no password, a wrong one, a
    /// database index out of range, an ACL user that may not PING or run
    /// scripts) fails `build()` with an error that says so, at once, rather
    /// than every later call. One write: `PING`, an `EVALSHA` of a script no
    /// server has (`NOSCRIPT` is the answer of a user who may run it) and a
    /// trivial `EVAL`. Returns the connection, the client's first.
    pub(crate) fn check_access(&self) -> Result<Conn> {
        let mut conn = self.connect().map_err(access_error)?;
        let probes = [
            redis::cmd("PING"),
            redis::cmd("EVALSHA").arg(ABSENT_SCRIPT_SHA).arg(0).clone(),
            redis::cmd("EVAL").arg("return 1").arg(0).clone(),
        ];
        let packed: Vec<u8> = probes.iter().flat_map(redis::Cmd::get_packed_command).collect();
        conn.send(&packed).map_err(access_error)?;
        let (replies, failure) = conn.receive(probes.len());
        if let Some(e) = failure {
            return Err(access_error(e));
        }
        let mut replies = replies.into_iter();
        replies.next().unwrap_or(Value::Nil).extract_error().map_err(access_error)?;
        for (command, reply) in ["EVALSHA", "EVAL"].into_iter().zip(replies) {
            match reply {
                Value::ServerError(e) if e.code() == "NOPERM" => {
                    return Err(Error::access_denied_to(format!(
                        "this user may not run {command}, which every lock operation needs: {}",
                        e.details().unwrap_or_default()
                    )));
                }
                // NOSCRIPT, the EVAL's 1, or another refusal that is not
                // about this user's rights (a busy script, say).
                _ => {}
            }
        }
        Ok(conn)
    }
}

/// Classifies a failure to open or use a first connection.
pub(crate) fn access_error(e: redis::RedisError) -> Error {
    let refused = e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"));
    if refused {
        return Error::access_denied(e);
    }
    if e.kind() == redis::ErrorKind::MasterNameNotFoundBySentinel {
        return Error::invalid_config(format!("no sentinel monitors that master: {e}"));
    }
    if e.to_string().contains("DB index is out of range") {
        return Error::invalid_config(format!("the database index is out of range: {e}"));
    }
    Error::redis(e)
}

impl Connector {
    /// Opens a connection with its timeouts set, to the node
    /// [`Primary::locate`] names (confirmed a master when it was found
    /// through Sentinel). Through Sentinel, a node that refuses the
    /// connection or is no longer a master sends the next attempt to the
    /// sentinels: once.
    pub(crate) fn connect(&self) -> redis::RedisResult<Conn> {
        match self.connect_to_primary() {
            Err(e) if self.primary.is_discovered() && is_transport_error(&e) => self.connect_to_primary(),
            outcome => outcome,
        }
    }

    /// One connection to the primary. Any failure to open it (a refused
    /// connection, a node that is no longer a master) sends the next
    /// attempt through Sentinel to the sentinels.
    fn connect_to_primary(&self) -> redis::RedisResult<Conn> {
        let generation = self.generation.current();
        let node = self.primary.locate()?;
        self.open(&node, generation).inspect_err(|_| self.primary.lost(&node))
    }

    /// Connects to `node` and sets the connection up (`net/handshake.rs`):
    /// the TCP connect, the TLS handshake and one setup round trip within
    /// the connect timeout, then the command timeout for every read and
    /// write. The setup logs in when the node's URL has a password (with
    /// its ACL user when it has one), selects the database it names, names
    /// the connection `keyholder:<client-uuid>`, and, for a primary a
    /// sentinel named (a discovered one), checks with `ROLE` that it is a
    /// master; a fixed one is taken as it is.
    fn open(&self, node: &Node, generation: u64) -> redis::RedisResult<Conn> {
        self.open_address(node, node.address(), self.primary.is_discovered(), generation)
    }

    /// One connection of its own to the node at `host:port` (one the
    /// primary names as its replica), set up as the primary's are (its
    /// credentials, database and TLS settings): the doctor reads a
    /// replica's clock on it. Not pooled; no check that it is a master.
    pub(crate) fn open_at(&self, host: &str, port: u16) -> redis::RedisResult<Conn> {
        let node = self.primary.locate()?;
        let address = node.address().at(host.to_owned(), port);
        self.open_address(&node, &address, false, self.generation.current())
    }

    /// Connects to `address` with `node`'s credentials and database.
    fn open_address(
        &self,
        node: &Node,
        address: &Address,
        require_master: bool,
        generation: u64,
    ) -> redis::RedisResult<Conn> {
        let settings = node.info().redis_settings();
        let setup = Setup {
            username: settings.username(),
            password: settings.password(),
            db: settings.db(),
            name: &self.name,
            require_master,
        };
        let Opened { stream, replies } =
            handshake::open(address, &setup, self.connect_timeout, self.command_timeout)?;
        let now = Instant::now();
        Ok(Conn {
            stream,
            address: Arc::from(address.shown()),
            command_timeout: self.command_timeout,
            replies,
            broken: false,
            dead: false,
            generation,
            opened_at: now,
            last_used: now,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_demoted_primary_counts_as_a_reset_connection() {
        let readonly = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
            "You can't write against a read only replica.",
        ));
        let mapped = demoted_as_dropped(readonly);
        assert!(is_transport_error(&mapped) && !mapped.is_timeout(), "{mapped:?}");
        let other =
            redis::RedisError::from((redis::ErrorKind::Server(redis::ServerErrorKind::NoScript), "NOSCRIPT"));
        assert!(!is_transport_error(&demoted_as_dropped(other)));
    }

    /// The command connection against a real server: what redis-rs's
    /// connection setup did (AUTH with an ACL user, SELECT), the name on the
    /// first write, and how failures are classified.
    mod on_a_server {
        use keyholder_testkit::RedisServer;

        use super::*;

        const TIMEOUT: Duration = Duration::from_millis(300);

        fn connector(url: &str) -> Connector {
            let node = Node::new(redis::Client::open(url).unwrap(), None).unwrap();
            let generation = Arc::new(Generation::default());
            Connector::new(Arc::new(Primary::fixed(node)), TIMEOUT, TIMEOUT, generation, Arc::from("kh-test"))
        }

        fn query(conn: &mut Conn, command: &redis::Cmd) -> Value {
            conn.send(&command.get_packed_command()).unwrap();
            let (mut replies, failure) = conn.receive(1);
            assert!(failure.is_none(), "{failure:?}");
            replies.pop().unwrap()
        }

        #[test]
        fn logs_in_selects_the_database_and_names_itself() {
            let server = RedisServer::start();
            let mut admin = server.conn();
            let _: () = redis::cmd("ACL")
                .arg("SETUSER")
                .arg("alice")
                .arg("on")
                .arg(">pw")
                .arg("~*")
                .arg("&*")
                .arg("+@all")
                .query(&mut admin)
                .unwrap();
            let url = format!("redis://alice:pw@127.0.0.1:{}/3", server.port());
            let mut conn = connector(&url).connect().unwrap();
            assert_eq!(query(&mut conn, redis::cmd("SET").arg("in-db-3").arg("x")), Value::Okay);
            assert_eq!(
                query(&mut conn, &redis::cmd("ACL").arg("WHOAMI").clone()),
                Value::BulkString(b"alice".to_vec())
            );
            assert_eq!(
                query(&mut conn, redis::cmd("CLIENT").arg("GETNAME")),
                Value::BulkString(b"kh-test".to_vec())
            );
            let mut exists = |db: i64| {
                let _: () = redis::cmd("SELECT").arg(db).query(&mut admin).unwrap();
                redis::cmd("EXISTS").arg("in-db-3").query::<i64>(&mut admin).unwrap()
            };
            assert_eq!((exists(3), exists(0)), (1, 0));

            let refused = format!("redis://alice:nope@127.0.0.1:{}/", server.port());
            let e = connector(&refused).connect().err().unwrap();
            assert_eq!(e.kind(), redis::ErrorKind::AuthenticationFailed, "{e:?}");
            let out_of_range = format!("redis://alice:pw@127.0.0.1:{}/99", server.port());
            let e = connector(&out_of_range).connect().err().unwrap();
            assert!(e.to_string().contains("DB index is out of range"), "{e}");
        }

        #[test]
        fn a_timeout_breaks_the_connection_and_a_close_kills_it() {
            let server = RedisServer::start();
            let connector = connector(&server.url());
            let generation = Generation::default();

            let mut slow = connector.connect().unwrap();
            slow.send(&redis::cmd("BLPOP").arg("nothing").arg(2).get_packed_command()).unwrap();
            let (replies, failure) = slow.receive(1);
            let e = failure.unwrap();
            assert!(replies.is_empty() && e.is_timeout(), "{e:?}");
            assert!(!slow.is_dead() && !slow.is_usable(&generation));

            let mut closed = connector.connect().unwrap();
            assert_eq!(query(&mut closed, &redis::cmd("QUIT")), Value::Okay);
            let _ = closed.send(&redis::cmd("PING").get_packed_command());
            let (_, failure) = closed.receive(1);
            assert!(failure.is_some_and(|e| is_transport_error(&e)));
            assert!(closed.is_dead() && !closed.is_usable(&generation));

            let mut fine = connector.connect().unwrap();
            let error = query(&mut fine, redis::cmd("INCR").arg("in-db-3").arg("x"));
            assert!(matches!(error, Value::ServerError(e) if e.code() == "ERR"));
            assert!(fine.is_usable(&generation), "an error reply leaves the connection as it was");
        }
    }
}
