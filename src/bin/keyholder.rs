//! `keyholder`: the operators' tool for keyholder's (and Redisson's) locks.
//!
//! ```text
//! keyholder [--url URL | --sentinel URL... --master NAME | --cluster URL...] [--json] COMMAND
//!   inspect NAME          what sits at a lock's name, who holds and who waits
//!   list [PATTERN]        the locks whose names match (SCAN, every primary)
//!   force-unlock NAME     delete a lock whoever holds it (asks unless --yes)
//!   watch NAME            print the lock's unlock messages as they come
//! ```
//!
//! Built with the `cli` feature (`cargo install keyholder --features cli`).
//! Exit status: 0 done, 1 an error (printed on standard error), 2 a usage
//! error, 3 a force-unlock not confirmed, 4 a watch whose `--timeout` passed
//! before `--count` messages came. docs/operations.md has the details.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use keyholder::{Client, Holder, ListedLock, LockInfo, LockKind, UnlockMessage};
use serde_json::{Value, json};

/// Inspect, list, force-unlock and watch Redisson-layout locks on Redis.
#[derive(Debug, Parser)]
#[command(name = "keyholder", version, long_about = None)]
#[command(about = "Inspect, list, force-unlock and watch keyholder and Redisson locks on Redis")]
struct Cli {
    #[command(flatten)]
    connection: Connection,

    /// Print JSON instead of tables (one object per line for `watch`).
    #[arg(long, global = true)]
    json: bool,

    #[command(subcommand)]
    command: Command,
}

/// Where Redis is: one of --url, --sentinel with --master, or --cluster
/// (given on the command line, or else in the environment).
#[derive(Debug, Args)]
struct Connection {
    /// The Redis server: redis://[[user]:password@]host[:port][/db],
    /// rediss://... (TLS builds), redis+unix:///path/to/redis.sock.
    /// Default: redis://127.0.0.1:6379/.
    #[arg(long, env = "KEYHOLDER_URL", global = true, value_name = "URL")]
    url: Option<String>,

    /// A sentinel's URL (repeat, or separate with commas); needs --master.
    #[arg(long, env = "KEYHOLDER_SENTINELS", global = true, value_delimiter = ',', value_name = "URL")]
    sentinel: Vec<String>,

    /// The name the sentinels monitor the primary under.
    #[arg(long, env = "KEYHOLDER_MASTER", global = true, value_name = "NAME")]
    master: Option<String>,

    /// A Redis Cluster node's URL (repeat, or separate with commas).
    #[arg(long, env = "KEYHOLDER_CLUSTER", global = true, value_delimiter = ',', value_name = "URL")]
    cluster: Vec<String>,

    /// Through Sentinel: the primary's ACL user.
    #[arg(long, env = "KEYHOLDER_NODE_USERNAME", global = true, value_name = "USER")]
    node_username: Option<String>,

    /// Through Sentinel: the primary's password.
    #[arg(
        long,
        env = "KEYHOLDER_NODE_PASSWORD",
        global = true,
        value_name = "PASSWORD",
        hide_env_values = true
    )]
    node_password: Option<String>,

    /// Through Sentinel: the primary's database index.
    #[arg(long, env = "KEYHOLDER_NODE_DB", global = true, value_name = "INDEX")]
    node_db: Option<i64>,

    /// On a cluster: unlock messages on shard channels (SSUBSCRIBE) or
    /// not; by default as the servers allow (Redis 7+), as the library does.
    #[arg(long, global = true, value_name = "BOOL")]
    sharded_pubsub: Option<bool>,

    /// Count a string key at a lock's name as a hand-rolled lock's holder
    /// (the library's migration mode): `list` shows such keys.
    #[arg(long, global = true)]
    migration_mode: bool,

    /// How long to wait for Redis to connect, and for each reply, in
    /// seconds.
    #[arg(
        long,
        env = "KEYHOLDER_REDIS_TIMEOUT",
        global = true,
        value_name = "SECONDS",
        default_value_t = 5.0
    )]
    redis_timeout: f64,

    #[cfg(feature = "tls")]
    #[command(flatten)]
    tls: Tls,
}

/// TLS settings for rediss:// URLs.
#[cfg(feature = "tls")]
#[derive(Debug, Args)]
struct Tls {
    /// A PEM file of the CA that signed the servers' certificates.
    #[arg(long, env = "KEYHOLDER_TLS_CA", global = true, value_name = "FILE")]
    tls_ca: Option<std::path::PathBuf>,

    /// A PEM file of this client's certificate (mutual TLS); needs --tls-key.
    #[arg(long, env = "KEYHOLDER_TLS_CERT", global = true, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,

    /// A PEM file of this client's private key; needs --tls-cert.
    #[arg(long, env = "KEYHOLDER_TLS_KEY", global = true, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,

    /// Through Sentinel: reach the primary over TLS.
    #[arg(long, global = true)]
    node_tls: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// What sits at a lock's name: kind, holders with hold counts,
    /// remaining lease, fencing token, waiting subscribers, queued clients.
    Inspect {
        /// The lock's name.
        name: String,
    },
    /// The locks whose names match PATTERN, found with SCAN (every primary
    /// of a cluster), never KEYS.
    List {
        /// A SCAN MATCH glob.
        #[arg(default_value = "*")]
        pattern: String,
        /// Stop after this many locks.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
    /// Delete a lock whoever holds it and wake a waiter. The holder is not
    /// told: use it only for a holder known dead. Asks first unless --yes.
    ForceUnlock {
        /// The lock's name.
        name: String,
        /// Do not ask.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Print the lock's unlock messages as they come, until --count of
    /// them, --timeout, or Ctrl-C.
    Watch {
        /// The lock's name.
        name: String,
        /// Exit after this many messages.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
        /// Exit after this many seconds.
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<f64>,
    },
}

/// How the tool ends, besides success.
enum Failure {
    /// An error to print: exit status 1.
    Error(String),
    /// A force-unlock not confirmed: exit status 3.
    NotConfirmed,
    /// A watch that timed out before its count: exit status 4.
    TimedOut,
}

/// An error and the causes it does not already say: `cannot connect to
/// redis at 127.0.0.1:6379: connection refused`, or `cannot connect to redis
/// at nohost:6379: its host name did not resolve: failed to lookup address
/// information: Name or service not known`.
impl<E: std::error::Error> From<E> for Failure {
    fn from(e: E) -> Failure {
        let mut message = e.to_string();
        let mut source = e.source();
        while let Some(cause) = source {
            let cause_text = cause.to_string();
            if !message.contains(&cause_text) {
                message.push_str(": ");
                message.push_str(&cause_text);
            }
            source = cause.source();
        }
        Failure::Error(message)
    }
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match run(&cli, &matches) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Error(message)) => {
            eprintln!("keyholder: {message}");
            ExitCode::from(1)
        }
        Err(Failure::NotConfirmed) => ExitCode::from(3),
        Err(Failure::TimedOut) => ExitCode::from(4),
    }
}

fn run(cli: &Cli, matches: &clap::ArgMatches) -> Result<(), Failure> {
    let client = connect(&cli.connection, matches)?;
    let out = Output { json: cli.json };
    match &cli.command {
        Command::Inspect { name } => out.inspect(&client.inspect(name)?),
        Command::List { pattern, limit } => out.list(&client.list_locks(pattern, *limit)?, *limit),
        Command::ForceUnlock { name, yes } => force_unlock(&client, &out, name, *yes),
        Command::Watch { name, count, timeout } => watch(&client, &out, name, *count, *timeout),
    }
}

/// Which deployment the options name: those given on the command line
/// win over those from the environment; more than one at the same level
/// is an error.
fn connect(c: &Connection, matches: &clap::ArgMatches) -> Result<Client, Failure> {
    let source = |id: &str| matches.value_source(id);
    let given = |from: ValueSource| {
        let mut kinds = Vec::new();
        if source("url") == Some(from) {
            kinds.push("url");
        }
        if source("sentinel") == Some(from) || source("master") == Some(from) {
            kinds.push("sentinel");
        }
        if source("cluster") == Some(from) {
            kinds.push("cluster");
        }
        kinds
    };
    let mut kinds = given(ValueSource::CommandLine);
    if kinds.is_empty() {
        kinds = given(ValueSource::EnvVariable);
    }
    if kinds.len() > 1 {
        return Err(Failure::Error(format!(
            "give one of --url, --sentinel with --master, or --cluster (got {})",
            kinds.join(", ")
        )));
    }
    let timeout =
        Duration::try_from_secs_f64(c.redis_timeout).ok().filter(|t| !t.is_zero()).ok_or_else(|| {
            Failure::Error(format!("--redis-timeout {} is no positive number of seconds", c.redis_timeout))
        })?;
    let mut builder = match kinds.first().copied() {
        Some("cluster") => Client::builder_cluster(c.cluster.iter().cloned()),
        Some("sentinel") => {
            let Some(master) = &c.master else {
                return Err(Failure::Error("--sentinel needs --master NAME".to_owned()));
            };
            if c.sentinel.is_empty() {
                return Err(Failure::Error("--master needs at least one --sentinel URL".to_owned()));
            }
            let mut builder = Client::builder_sentinel(c.sentinel.iter().cloned(), master.clone());
            if let Some(user) = &c.node_username {
                builder = builder.node_username(user.clone());
            }
            if let Some(password) = &c.node_password {
                builder = builder.node_password(password.clone());
            }
            if let Some(db) = c.node_db {
                builder = builder.node_database(db);
            }
            #[cfg(feature = "tls")]
            {
                builder = builder.node_tls(c.tls.node_tls);
            }
            builder
        }
        _ => Client::builder(c.url.clone().unwrap_or_else(|| "redis://127.0.0.1:6379/".to_owned())),
    };
    builder = builder.connect_timeout(timeout).command_timeout(timeout).migration_mode(c.migration_mode);
    if let Some(sharded) = c.sharded_pubsub {
        builder = builder.sharded_pubsub(sharded);
    }
    #[cfg(feature = "tls")]
    {
        let read = |path: &std::path::Path| {
            std::fs::read(path).map_err(|e| Failure::Error(format!("cannot read {}: {e}", path.display())))
        };
        if let Some(ca) = &c.tls.tls_ca {
            builder = builder.tls_ca_certificate(read(ca)?);
        }
        if let (Some(cert), Some(key)) = (&c.tls.tls_cert, &c.tls.tls_key) {
            builder = builder.tls_client_certificate(read(cert)?, read(key)?);
        }
    }
    Ok(builder.build()?)
}

fn force_unlock(client: &Client, out: &Output, name: &str, yes: bool) -> Result<(), Failure> {
    let info = client.inspect(name)?;
    match info.kind {
        LockKind::Free => return out.unlocked(name, false, &info.holders),
        LockKind::Reentrant => {}
        LockKind::Legacy => {
            return Err(Failure::Error(format!(
                "'{name}' is a string key (a hand-rolled lock), which keyholder never deletes: \
                 DEL it by hand once its holder is known dead"
            )));
        }
        _ => {
            return Err(Failure::Error(format!(
                "'{name}' is a {} key that is no lock; it is left alone",
                info.redis_type
            )));
        }
    }
    if !yes {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            eprintln!(
                "keyholder: not force-unlocking '{name}': confirm with --yes (standard input is not a terminal)"
            );
            return Err(Failure::NotConfirmed);
        }
        let holders: Vec<String> =
            info.holders.iter().map(|h| format!("{} (count {})", h.owner, h.count)).collect();
        eprint!(
            "Force-unlock '{name}', held by {}{}? Its holder is not told. [y/N] ",
            holders.join(", "),
            info.remaining_lease.map(|l| format!(" for {} more", seconds(l))).unwrap_or_default()
        );
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        stdin.lock().read_line(&mut answer)?;
        if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
            eprintln!("keyholder: '{name}' left as it is");
            return Err(Failure::NotConfirmed);
        }
    }
    let unlocked = client.lock(name)?.force_unlock()?;
    out.unlocked(name, unlocked, &info.holders)
}

fn watch(
    client: &Client,
    out: &Output,
    name: &str,
    count: Option<u64>,
    timeout: Option<f64>,
) -> Result<(), Failure> {
    let deadline = match timeout {
        Some(secs) => Some(
            Duration::try_from_secs_f64(secs)
                .ok()
                .and_then(|t| Instant::now().checked_add(t))
                .ok_or_else(|| Failure::Error(format!("--timeout {secs} is no number of seconds")))?,
        ),
        None => None,
    };
    let mut watch = client.watch(name)?;
    // Subscribed: every message published from now on is printed.
    eprintln!("keyholder: watching {} on {}", watch.channel(), watch.node());
    let mut seen = 0u64;
    loop {
        if count.is_some_and(|count| seen >= count) {
            return Ok(());
        }
        let wait = match deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return if count.is_some() { Err(Failure::TimedOut) } else { Ok(()) };
                }
                left.min(Duration::from_secs(1))
            }
            None => Duration::from_secs(1),
        };
        if let Some(message) = watch.next_message(wait)? {
            seen += 1;
            out.message(&message)?;
        }
    }
}

/// Prints tables, or JSON.
struct Output {
    json: bool,
}

impl Output {
    fn inspect(&self, info: &LockInfo) -> Result<(), Failure> {
        if self.json {
            return print_json(&json!({
                "name": info.name,
                "kind": info.kind.as_str(),
                "redis_type": info.redis_type,
                "holders": holders_json(&info.holders),
                "legacy_token": info.legacy_token,
                "remaining_lease_ms": info.remaining_lease.map(|l| l.as_millis() as u64),
                "fencing_token": info.fencing_token,
                "unlock_channel": info.unlock_channel,
                "subscribers": info.subscribers,
                "queued_clients": info.queued_clients,
                "next_claim": info.next_claim,
                "node": info.node,
            }));
        }
        let kind = match info.kind {
            LockKind::Free => "free (no key)".to_owned(),
            LockKind::Reentrant => "reentrant lock (hash)".to_owned(),
            LockKind::Legacy => "legacy lock (string: a hand-rolled SET NX lock)".to_owned(),
            _ => format!("no lock: a {} key", info.redis_type),
        };
        let mut rows = vec![["lock".to_owned(), info.name.clone()], ["kind".to_owned(), kind]];
        if let Some(node) = &info.node {
            rows.push(["node".to_owned(), node.clone()]);
        }
        if let Some(token) = &info.legacy_token {
            rows.push(["token".to_owned(), token.clone()]);
        }
        rows.push(["lease left".to_owned(), info.remaining_lease.map_or_else(|| "-".to_owned(), seconds)]);
        rows.push([
            "fencing token".to_owned(),
            info.fencing_token.map_or_else(|| "-".to_owned(), |t| t.to_string()),
        ]);
        rows.push(["unlock channel".to_owned(), info.unlock_channel.clone()]);
        rows.push(["subscribers".to_owned(), info.subscribers.to_string()]);
        rows.push(["queued clients".to_owned(), or_dash(&info.queued_clients.join(", "))]);
        rows.push(["next claim".to_owned(), info.next_claim.clone().unwrap_or_else(|| "-".to_owned())]);
        let mut text = table(&[], &rows);
        if !info.holders.is_empty() {
            text.push('\n');
            let rows: Vec<[String; 3]> = info
                .holders
                .iter()
                .map(|h| [h.client_id.clone(), h.thread_id.to_string(), h.count.to_string()])
                .collect();
            text.push_str(&table(&["CLIENT", "THREAD", "COUNT"], &rows));
        }
        print_text(&text)
    }

    fn list(&self, locks: &[ListedLock], limit: usize) -> Result<(), Failure> {
        let truncated = locks.len() >= limit;
        if self.json {
            let locks: Vec<Value> = locks
                .iter()
                .map(|lock| {
                    json!({
                        "name": lock.name,
                        "kind": lock.kind.as_str(),
                        "holders": holders_json(&lock.holders),
                        "remaining_lease_ms": lock.remaining_lease.map(|l| l.as_millis() as u64),
                        "node": lock.node,
                    })
                })
                .collect();
            return print_json(&json!({ "locks": locks, "limit_reached": truncated }));
        }
        let rows: Vec<[String; 6]> = locks
            .iter()
            .map(|lock| {
                let (owner, count) = match lock.holders.as_slice() {
                    [] => ("-".to_owned(), "-".to_owned()),
                    [one] => (one.owner.clone(), one.count.to_string()),
                    many => (
                        many.iter().map(|h| h.owner.as_str()).collect::<Vec<_>>().join(","),
                        many.iter().map(|h| h.count.to_string()).collect::<Vec<_>>().join(","),
                    ),
                };
                let lease = lock.remaining_lease.map_or_else(|| "-".to_owned(), seconds);
                let node = lock.node.clone().unwrap_or_else(|| "-".to_owned());
                [lock.name.clone(), lock.kind.as_str().to_owned(), owner, count, lease, node]
            })
            .collect();
        let mut text = table(&["NAME", "KIND", "OWNER", "COUNT", "LEASE", "NODE"], &rows);
        text.push_str(&format!(
            "{} lock(s){}\n",
            locks.len(),
            if truncated { " (limit reached: --limit for more)" } else { "" }
        ));
        print_text(&text)
    }

    fn unlocked(&self, name: &str, unlocked: bool, holders: &[Holder]) -> Result<(), Failure> {
        if self.json {
            return print_json(
                &json!({ "name": name, "unlocked": unlocked, "holders": holders_json(holders) }),
            );
        }
        if !unlocked {
            return print_text(&format!("'{name}' was not locked: nothing to do\n"));
        }
        let owners: Vec<&str> = holders.iter().map(|h| h.owner.as_str()).collect();
        print_text(&format!(
            "force-unlocked '{name}' (was held by {}); an unlock message was published\n",
            owners.join(", ")
        ))
    }

    fn message(&self, message: &UnlockMessage) -> Result<(), Failure> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        if self.json {
            return print_json(&json!({
                "at": utc(now),
                "at_ms": now.as_millis() as u64,
                "channel": message.channel,
                "payload": message.payload,
                "meaning": message.meaning(),
            }));
        }
        print_text(&format!(
            "{}  {}  {}  {}\n",
            utc(now),
            message.channel,
            message.payload,
            message.meaning()
        ))
    }
}

fn holders_json(holders: &[Holder]) -> Vec<Value> {
    holders
        .iter()
        .map(|h| json!({ "owner": h.owner, "client_id": h.client_id, "thread_id": h.thread_id, "count": h.count }))
        .collect()
}

/// Prints one line of JSON and flushes (a `watch` is read line by line).
fn print_json(value: &Value) -> Result<(), Failure> {
    print_text(&format!("{value}\n"))
}

fn print_text(text: &str) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// Left-aligned columns two spaces apart, under an optional header.
fn table<const N: usize>(header: &[&str], rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for (at, title) in header.iter().enumerate().take(N) {
        widths[at] = title.chars().count();
    }
    for row in rows {
        for (at, cell) in row.iter().enumerate() {
            widths[at] = widths[at].max(cell.chars().count());
        }
    }
    let mut text = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (at, cell) in cells.iter().enumerate() {
            if at + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}  ", width = widths[at]));
            }
        }
        text.push_str(out.trim_end());
        text.push('\n');
    };
    if !header.is_empty() {
        line(header.to_vec());
    }
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    text
}

fn or_dash(text: &str) -> String {
    if text.is_empty() { "-".to_owned() } else { text.to_owned() }
}

/// A duration as seconds with milliseconds: `29.873 s`.
fn seconds(d: Duration) -> String {
    format!("{}.{:03} s", d.as_secs(), d.subsec_millis())
}

/// A time since the Unix epoch as RFC 3339 UTC with milliseconds.
fn utc(since_epoch: Duration) -> String {
    let secs = since_epoch.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since_epoch.subsec_millis()
    )
}

/// The Gregorian date `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_gregorian() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(utc(Duration::from_millis(1_795_000_000_123)), "2026-11-18T11:06:40.123Z");
    }

    #[test]
    fn tables_align_columns() {
        let rows = [["a".to_owned(), "1".to_owned()], ["bbb".to_owned(), "22".to_owned()]];
        assert_eq!(table(&["N", "V"], &rows), "N    V\na    1\nbbb  22\n");
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }
}
