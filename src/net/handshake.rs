//! The setup of every connection keyholder opens itself, command and
//! pub/sub alike, written once: connect (the TLS handshake included), log
//! in, pick the database, name the connection, say which library it is,
//! and, for a node a sentinel named, check that it is a master.
//!
//! **One round trip.** The setup is one pipelined write: `AUTH` when there
//! is a password (with its ACL user when there is one), `SELECT` when the
//! database is not 0, `CLIENT SETNAME`, `CLIENT SETINFO` (library name and
//! version) and, when asked, `ROLE`. Its replies come back together. The
//! name used to ride with a command connection's first commands, to save a
//! round trip when redis-rs owned the setup; the setup is ours now and
//! always costs its one round trip (`SETINFO` is always sent), so the name
//! and `ROLE` go in it for free: a connection through Sentinel costs one
//! round trip to set up, not two, and a new connection carries no state
//! into its first commands.
//!
//! **Timeouts.** The connect, the TLS handshake and the setup's round trip
//! all fall within the connect timeout; after it, every read and write of
//! the connection is bounded by the command timeout. The setup's replies
//! prove the server answers before anything else is sent: a path that
//! swallows replies fails here, with nothing run.
//!
//! **Errors** are the ones redis-rs gave when it opened connections, so
//! that `build()` classifies them as before: a refused `AUTH` is
//! `AuthenticationFailed` (access denied), a refused `SELECT` says so with
//! the server's reason (an index out of range), a node that is not a master
//! is a refused connection (a failover is under way: ask the sentinels
//! again). The name and the library information are best effort: an ACL
//! may deny `CLIENT`, and Redis before 7.2 does not know `SETINFO`.

use std::io;
use std::time::{Duration, Instant};

use redis::{RedisError, RedisResult, Value};

use crate::error::reaching::{self, Stage, What, failed_io};
use crate::net::commands::write_commands;
use crate::net::probe;
use crate::net::replies::ReplyReader;
use crate::net::stream::{Address, Stream};

/// Who a connection logs in as, and what its setup asks of the server.
pub(crate) struct Setup<'a> {
    /// The ACL user `AUTH` logs in as (with the password only).
    pub(crate) username: Option<&'a str>,
    /// `AUTH` when given.
    pub(crate) password: Option<&'a str>,
    /// `SELECT` when not 0.
    pub(crate) db: i64,
    /// `CLIENT SETNAME`, so that `CLIENT LIST` tells keyholder's
    /// connections, and whose they are.
    pub(crate) name: &'a str,
    /// `ROLE`: the node must be a master (one a sentinel named, which may
    /// have been demoted since).
    pub(crate) require_master: bool,
}

/// A connection set up: its socket, with the command timeout for reads and
/// writes, and its reader (the setup's replies all read).
pub(crate) struct Opened {
    pub(crate) stream: Stream,
    pub(crate) replies: ReplyReader,
}

/// One command of the setup, and what its reply means.
#[derive(Clone, Copy)]
enum Step {
    Auth,
    Select,
    /// `CLIENT SETNAME` and `CLIENT SETINFO`: best effort.
    Label,
    Role,
}

impl Setup<'_> {
    /// The setup's commands, in order.
    fn commands(&self) -> Vec<(Step, redis::Cmd)> {
        let mut commands = Vec::with_capacity(6);
        if let Some(password) = self.password {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = self.username {
                auth.arg(user);
            }
            auth.arg(password);
            commands.push((Step::Auth, auth));
        }
        if self.db != 0 {
            commands.push((Step::Select, redis::cmd("SELECT").arg(self.db).clone()));
        }
        commands.push((Step::Label, redis::cmd("CLIENT").arg("SETNAME").arg(self.name).clone()));
        for (field, value) in [("LIB-NAME", "keyholder"), ("LIB-VER", env!("CARGO_PKG_VERSION"))] {
            commands.push((Step::Label, redis::cmd("CLIENT").arg("SETINFO").arg(field).arg(value).clone()));
        }
        if self.require_master {
            commands.push((Step::Role, redis::cmd("ROLE")));
        }
        commands
    }
}

/// Connects to `address` and sets the connection up (see the module doc):
/// all within `connect_timeout`, then `command_timeout` for every read and
/// write. A failure to connect or to get the setup's answers says what
/// happened, at which address (`error/reaching.rs`); a refusal in the
/// answers (a password, a database) is as redis-rs typed it.
pub(crate) fn open(
    address: &Address,
    setup: &Setup<'_>,
    connect_timeout: Duration,
    command_timeout: Duration,
) -> RedisResult<Opened> {
    let deadline = Instant::now() + connect_timeout;
    let mut stream = address.connect(connect_timeout)?;
    // Asked before any exchange: a reset socket no longer knows it.
    let peer = stream.tcp_peer();
    let (steps, commands): (Vec<Step>, Vec<redis::Cmd>) = setup.commands().into_iter().unzip();
    let mut replies = ReplyReader::default();
    let mut first = Vec::new();
    let mut answers = Vec::with_capacity(steps.len());
    let exchanged = (|| -> RedisResult<()> {
        stream.set_write_timeout(Some(left(deadline)?))?;
        write_commands(&mut stream, &commands)?;
        for _ in &steps {
            stream.set_read_timeout(Some(left(deadline)?))?;
            answers.push(replies.next(&mut Recorder { stream: &mut stream, first: &mut first })?);
        }
        Ok(())
    })();
    if let Err(e) = exchanged {
        return Err(setup_failure(e, address, peer, &first, deadline, connect_timeout));
    }
    // In order: a refused AUTH explains the refusals after it.
    for (step, answer) in steps.into_iter().zip(answers) {
        check(step, answer, address)?;
    }
    stream.set_read_timeout(Some(command_timeout))?;
    stream.set_write_timeout(Some(command_timeout))?;
    Ok(Opened { stream, replies })
}

/// What a failed exchange of the setup means: a server that answered
/// something other than RESP does not speak Redis; one that reset or closed
/// the connection before any answer may be a TLS port (asked, when the URL
/// is plain TCP: `probe.rs`); a TLS refusal after the handshake (a client
/// certificate, TLS 1.3) says so; a read that timed out is the connect
/// timeout's.
fn setup_failure(
    e: RedisError,
    address: &Address,
    peer: Option<std::net::SocketAddr>,
    first: &[u8],
    deadline: Instant,
    timeout: Duration,
) -> RedisError {
    if reaching::of(&e).is_some() {
        return e;
    }
    let not_resp = first.first().is_some_and(|b| !RESP_TYPES.contains(b));
    if e.kind() == redis::ErrorKind::Parse || not_resp {
        return address.failure(What::NotRedis { answer: reaching::shown(first) }, None).into();
    }
    #[cfg(feature = "tls")]
    if let Some(tls) = reaching::io_of(&e).and_then(|io| io.get_ref()?.downcast_ref::<rustls::Error>()) {
        return address.failure(What::TlsRefused(crate::tls::refusal_words(tls)), None).into();
    }
    let Some(io) = reaching::io_of(&e) else { return e };
    let (what, cause) = failed_io(io::Error::new(io.kind(), io.to_string()), timeout, Stage::Setup);
    if matches!(what, What::Closed { .. })
        && first.is_empty()
        && address.is_plain_tcp()
        && let Some(peer) = peer
        && probe::speaks_tls(peer, deadline.saturating_duration_since(Instant::now()))
    {
        return address.failure(What::TlsPort, None).into();
    }
    address.failure(what, cause).into()
}

/// The first byte of every RESP2 and RESP3 reply.
const RESP_TYPES: &[u8] = b"+-:$*_,#!=(%~>|";

/// The connection, read during the setup, keeping the server's first bytes
/// (to show what a server that does not speak Redis answered).
struct Recorder<'a> {
    stream: &'a mut Stream,
    first: &'a mut Vec<u8>,
}

impl io::Read for Recorder<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.stream.read(buf)?;
        if self.first.len() < 64 {
            let room = 64 - self.first.len();
            self.first.extend_from_slice(buf.get(..n.min(room)).unwrap_or_default());
        }
        Ok(n)
    }
}

/// What is left of the connect timeout; none left is a timeout.
fn left(deadline: Instant) -> RedisResult<Duration> {
    match deadline.saturating_duration_since(Instant::now()) {
        left if left.is_zero() => {
            Err(io::Error::new(io::ErrorKind::TimedOut, "connecting to redis timed out").into())
        }
        left => Ok(left),
    }
}

/// The setup's verdict on one reply.
fn check(step: Step, answer: Value, address: &Address) -> RedisResult<()> {
    match (step, answer) {
        (Step::Auth, Value::ServerError(e)) => Err(RedisError::from((
            redis::ErrorKind::AuthenticationFailed,
            "Password authentication failed",
            e.details().unwrap_or(e.code()).to_owned(),
        ))),
        (Step::Select, Value::ServerError(e)) => Err(RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "Redis server refused to switch database",
            e.details().unwrap_or(e.code()).to_owned(),
        ))),
        (Step::Role, Value::ServerError(e)) => Err(e.into()),
        (Step::Role, Value::Array(items)) if matches!(items.first(), Some(Value::BulkString(role)) if role == b"master") => {
            Ok(())
        }
        (Step::Role, _) => Err(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            format!("{} is not a master (a failover is under way)", address.describe()),
        )
        .into()),
        (Step::Auth | Step::Select | Step::Label, _) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(password: Option<&'static str>, db: i64, require_master: bool) -> Setup<'static> {
        Setup { username: Some("alice"), password, db, name: "kh", require_master }
    }

    fn names(setup: &Setup<'_>) -> Vec<String> {
        setup
            .commands()
            .iter()
            .map(|(_, cmd)| {
                cmd.args_iter()
                    .take(2)
                    .map(|arg| match arg {
                        redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                        _ => String::new(),
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }

    #[test]
    fn the_setup_asks_only_for_what_the_connection_needs() {
        assert_eq!(names(&setup(None, 0, false)), ["CLIENT SETNAME", "CLIENT SETINFO", "CLIENT SETINFO"]);
        assert_eq!(
            names(&setup(Some("pw"), 3, true)),
            ["AUTH alice", "SELECT 3", "CLIENT SETNAME", "CLIENT SETINFO", "CLIENT SETINFO", "ROLE"]
        );
    }

    #[test]
    fn refusals_are_typed_as_redis_rs_typed_them() {
        let address = Address::Tcp { host: "h".into(), port: 1 };
        let error = |text: &str| redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap();
        let auth =
            check(Step::Auth, error("WRONGPASS invalid username-password pair"), &address).unwrap_err();
        assert_eq!(auth.kind(), redis::ErrorKind::AuthenticationFailed, "{auth:?}");
        let select = check(Step::Select, error("ERR DB index is out of range"), &address).unwrap_err();
        assert!(select.to_string().contains("DB index is out of range"), "{select}");
        let replica = Value::Array(vec![Value::BulkString(b"slave".to_vec())]);
        let role = check(Step::Role, replica, &address).unwrap_err();
        assert!(role.is_connection_dropped() && role.to_string().contains("not a master"), "{role}");
        let master = Value::Array(vec![Value::BulkString(b"master".to_vec()), Value::Int(0)]);
        assert!(check(Step::Role, master, &address).is_ok());
        assert!(check(Step::Label, error("NOPERM no"), &address).is_ok(), "best effort");
        assert!(check(Step::Auth, Value::Okay, &address).is_ok());
    }

    /// The setup against real servers: one write, the name and library
    /// set, a replica refused when a master is required.
    mod on_a_server {
        use keyholder_testkit::RedisServer;

        use super::*;

        const TIMEOUT: Duration = Duration::from_millis(500);

        fn query(opened: &mut Opened, command: &redis::Cmd) -> Value {
            write_commands(&mut opened.stream, std::slice::from_ref(command)).unwrap();
            opened.replies.next(&mut opened.stream).unwrap()
        }

        #[test]
        fn names_the_connection_and_refuses_a_replica_where_a_master_is_required() {
            let primary = RedisServer::start();
            let replica = RedisServer::start();
            let _: () = redis::cmd("REPLICAOF")
                .arg("127.0.0.1")
                .arg(primary.port())
                .query(&mut replica.conn())
                .unwrap();
            let at = |server: &RedisServer| Address::Tcp { host: "127.0.0.1".into(), port: server.port() };
            let setup =
                Setup { username: None, password: None, db: 0, name: "kh-setup", require_master: true };

            let mut opened = open(&at(&primary), &setup, TIMEOUT, TIMEOUT).unwrap();
            assert_eq!(
                query(&mut opened, redis::cmd("CLIENT").arg("GETNAME")),
                Value::BulkString(b"kh-setup".to_vec())
            );
            let Value::BulkString(info) = query(&mut opened, redis::cmd("CLIENT").arg("INFO")) else {
                panic!()
            };
            // Redis before 7.2 refuses SETINFO (and lists no library),
            // which the setup takes in its stride.
            let info = String::from_utf8_lossy(&info);
            assert!(!info.contains("lib-name=") || info.contains("lib-name=keyholder"), "{info}");

            let e = open(&at(&replica), &setup, TIMEOUT, TIMEOUT).err().unwrap();
            assert!(e.is_connection_dropped() && e.to_string().contains("is not a master"), "{e}");
            let anywhere = Setup { require_master: false, ..setup };
            assert!(open(&at(&replica), &anywhere, TIMEOUT, TIMEOUT).is_ok());
        }
    }
}
