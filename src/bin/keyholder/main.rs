//! `keyholder`: the operators' tool for keyholder's (and Redisson's) locks,
//! semaphores and latches.
//!
//! ```text
//! keyholder [--url URL | --sentinel URL... --master NAME | --cluster URL...] [--json] COMMAND
//!   inspect NAME          what sits at a name (its kind), who holds and who waits
//!   list [PATTERN]        the locks whose names match (SCAN, every primary)
//!   force-unlock NAME     delete a lock whoever holds it (asks unless --yes)
//!   watch NAME            print the name's channel's messages as they come
//!   doctor                check the deployment against keyholder's guarantees
//! ```
//!
//! Built with the `cli` feature. Exit status: 0 done (for `doctor`: every
//! check ok), 1 an error (printed on standard error), 2 a usage error, 3 a
//! force-unlock not confirmed, 4 a watch whose `--timeout` passed before
//! `--count` messages came, 5 a `doctor` report with warnings (or checks
//! that could not tell) and no failure, 6 a `doctor` report with a
//! failure. docs/operations.md has the details.
//!
//! `args.rs` is the command line, `output.rs` the tables and JSON,
//! `doctor.rs` the doctor's report; this file connects and runs the
//! commands.

mod args;
mod doctor;
mod output;

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};
use keyholder::{Client, ErrorKind, LockInfo, LockKind, ReadWriteMode, WatchEvent};

use args::{Cli, Command, Connection};
use output::{Output, seconds};

/// How the tool ends, besides success.
pub(crate) enum Failure {
    /// An error to print: exit status 1.
    Error(String),
    /// A usage error to print: exit status 2.
    Usage(String),
    /// A force-unlock not confirmed: exit status 3.
    NotConfirmed,
    /// A watch that timed out before its count: exit status 4.
    TimedOut,
    /// A doctor's report with warnings (or unknowns) and no failure: exit
    /// status 5.
    ChecksWarned,
    /// A doctor's report with at least one failure: exit status 6.
    ChecksFailed,
}

/// An error and its causes: `the connection to redis failed: Connection
/// refused (os error 111)`.
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

/// A library error: an invalid argument (a name, a pattern) is a usage
/// error.
fn failure(e: keyholder::Error) -> Failure {
    let usage = e.kind() == ErrorKind::InvalidArgument;
    match Failure::from(e) {
        Failure::Error(message) if usage => Failure::Usage(message),
        other => other,
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
        Err(Failure::Usage(message)) => {
            eprintln!("keyholder: {message}\n\nFor more information, try '--help'.");
            ExitCode::from(2)
        }
        Err(Failure::NotConfirmed) => ExitCode::from(3),
        Err(Failure::TimedOut) => ExitCode::from(4),
        Err(Failure::ChecksWarned) => ExitCode::from(5),
        Err(Failure::ChecksFailed) => ExitCode::from(6),
    }
}

fn run(cli: &Cli, matches: &clap::ArgMatches) -> Result<(), Failure> {
    // Usage errors first, before any connection.
    let watch_kind = match &cli.command {
        Command::Watch { kind: Some(kind), .. } => Some(kind.parse::<LockKind>().map_err(failure)?),
        _ => None,
    };
    let deadline = match &cli.command {
        Command::Watch { timeout: Some(secs), .. } => Some(
            Duration::try_from_secs_f64(*secs)
                .ok()
                .and_then(|t| Instant::now().checked_add(t))
                .ok_or_else(|| Failure::Usage(format!("--timeout {secs} is no number of seconds")))?,
        ),
        _ => None,
    };
    let out = Output { json: cli.json };
    let client = match connect(&cli.connection, matches)?.build() {
        Ok(client) => client,
        // A user Redis refuses what every lock needs is the doctor's
        // finding, not a failure to check.
        Err(e) if matches!(cli.command, Command::Doctor { .. }) && e.kind() == ErrorKind::AccessDenied => {
            return match keyholder::Report::refused_access(&e) {
                Some(report) => doctor::print(&out, &report),
                None => Err(failure(e)),
            };
        }
        // A configuration the library refuses comes from the connection
        // options given (a URL that does not parse, a database the server
        // lacks): a bad option value, so a usage error.
        Err(e) if e.kind() == ErrorKind::InvalidConfig => return Err(Failure::Usage(e.to_string())),
        Err(e) => return Err(failure(e)),
    };
    match &cli.command {
        Command::Inspect { name } => out.inspect(&client.inspect(name).map_err(failure)?),
        Command::List { pattern, limit } => {
            out.list(&client.list_locks(pattern, *limit).map_err(failure)?, *limit)
        }
        Command::ForceUnlock { name, yes } => force_unlock(&client, &out, name, *yes),
        Command::Watch { name, count, timeout, .. } => {
            let until = Until { deadline, timeout: *timeout, count: *count };
            watch(&client, &out, name, watch_kind, until)
        }
        Command::Doctor {
            command_timeout,
            replica_acks,
            replica_acks_aof,
            watchdog_timeout,
            idle_drop,
            names,
        } => {
            let services = doctor::Services {
                names: names.clone(),
                command_timeout: *command_timeout,
                replica_acks: *replica_acks,
                replica_acks_aof: *replica_acks_aof,
                watchdog_timeout: *watchdog_timeout,
                idle_drop: idle_drop.clone(),
            };
            doctor::doctor(&client, &out, &services)
        }
    }
}

/// Which deployment the options name: those given on the command line
/// win over those from the environment; more than one at the same level
/// is a usage error. The client is built by the caller.
fn connect(c: &Connection, matches: &clap::ArgMatches) -> Result<keyholder::ClientBuilder, Failure> {
    let source = |id: &str| matches.value_source(id);
    let given = |from: ValueSource| {
        let mut kinds = Vec::new();
        if source("url") == Some(from) {
            kinds.push("--url");
        }
        if source("sentinel") == Some(from) || source("master") == Some(from) {
            kinds.push("--sentinel");
        }
        if source("cluster") == Some(from) {
            kinds.push("--cluster");
        }
        kinds
    };
    let mut kinds = given(ValueSource::CommandLine);
    if kinds.is_empty() {
        kinds = given(ValueSource::EnvVariable);
    }
    if kinds.len() > 1 {
        return Err(Failure::Usage(format!(
            "give one of --url, --sentinel with --master, or --cluster (got {})",
            kinds.join(" and ")
        )));
    }
    let timeout =
        Duration::try_from_secs_f64(c.redis_timeout).ok().filter(|t| !t.is_zero()).ok_or_else(|| {
            Failure::Usage(format!("--redis-timeout {} is no positive number of seconds", c.redis_timeout))
        })?;
    let mut builder = match kinds.first().copied() {
        Some("--cluster") => Client::builder_cluster(c.cluster.iter().cloned()),
        Some("--sentinel") => {
            let Some(master) = &c.master else {
                return Err(Failure::Usage("--sentinel needs --master NAME".to_owned()));
            };
            if c.sentinel.is_empty() {
                return Err(Failure::Usage("--master needs at least one --sentinel URL".to_owned()));
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
    Ok(builder)
}

fn force_unlock(client: &Client, out: &Output, name: &str, yes: bool) -> Result<(), Failure> {
    let info = client.inspect(name).map_err(failure)?;
    match info.kind {
        LockKind::Free => return out.unlocked(name, info.kind, false, &info.holders),
        kind if kind.is_lock() && !info.is_locked() => {
            return out.unlocked(name, info.kind, false, &info.holders);
        }
        kind if kind.is_lock() => {}
        LockKind::Legacy => {
            return Err(Failure::Error(format!(
                "'{name}' is a string key (a hand-rolled lock), which keyholder never deletes: \
                 DEL it by hand once its holder is known dead"
            )));
        }
        kind if kind.is_counter() => {
            return Err(Failure::Error(format!(
                "'{name}' is a {}: it has no holder to unlock, so force-unlock does not apply \
                 (a semaphore's permits are released by their holders, or expire with a \
                 permit-expirable semaphore's leases; a latch opens by counting down); it is left alone",
                kind.as_str().replace('-', " ")
            )));
        }
        _ => {
            return Err(Failure::Error(format!(
                "'{name}' is a {} key that is no lock; it is left alone",
                info.redis_type
            )));
        }
    }
    if !yes && !confirmed(name, &info)? {
        return Err(Failure::NotConfirmed);
    }
    let unlocked = match (info.kind, info.mode) {
        (LockKind::Fair, _) => client.fair_lock(name).and_then(|lock| lock.force_unlock()),
        (LockKind::ReadWrite, Some(ReadWriteMode::Write)) => {
            client.read_write_lock(name).and_then(|lock| lock.write().force_unlock())
        }
        (LockKind::ReadWrite, _) => client.read_write_lock(name).and_then(|lock| lock.read().force_unlock()),
        _ => client.lock(name).and_then(|lock| lock.force_unlock()),
    };
    out.unlocked(name, info.kind, unlocked.map_err(failure)?, &info.holders)
}

/// Asks on the terminal; refuses when standard input is none.
fn confirmed(name: &str, info: &LockInfo) -> Result<bool, Failure> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        eprintln!(
            "keyholder: not force-unlocking '{name}': confirm with --yes (standard input is not a terminal)"
        );
        return Ok(false);
    }
    let holders: Vec<String> =
        info.holders.iter().map(|h| format!("{} (count {})", h.owner, h.count)).collect();
    eprint!(
        "Force-unlock '{name}' ({}), held by {}{}? Its holder is not told at once. [y/N] ",
        info.kind.as_str(),
        holders.join(", "),
        info.remaining_lease.map(|l| format!(" for {} more", seconds(l))).unwrap_or_default()
    );
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer)?;
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        return Ok(true);
    }
    eprintln!("keyholder: '{name}' left as it is");
    Ok(false)
}

/// When a watch ends.
struct Until {
    deadline: Option<Instant>,
    /// `--timeout` as given, to say so.
    timeout: Option<f64>,
    count: Option<u64>,
}

fn watch(
    client: &Client,
    out: &Output,
    name: &str,
    kind: Option<LockKind>,
    until: Until,
) -> Result<(), Failure> {
    let mut watch = match kind {
        Some(kind) => client.watch_as(name, kind),
        None => client.watch(name),
    }
    .map_err(failure)?;
    // Subscribed: every message published from now on is printed.
    eprintln!("keyholder: watching {} ({}) on {}", watch.channel(), watch.kind(), watch.node());
    let mut seen = 0u64;
    loop {
        if until.count.is_some_and(|count| seen >= count) {
            return Ok(());
        }
        let wait = match until.deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    let secs = until.timeout.unwrap_or_default();
                    return match until.count {
                        Some(count) => {
                            eprintln!(
                                "keyholder: --timeout {secs} s passed with {seen} of {count} message(s) heard"
                            );
                            Err(Failure::TimedOut)
                        }
                        None => {
                            eprintln!("keyholder: --timeout {secs} s passed; {seen} message(s) heard");
                            Ok(())
                        }
                    };
                }
                left.min(Duration::from_secs(1))
            }
            None => Duration::from_secs(1),
        };
        match watch.next_event(wait).map_err(failure)? {
            Some(WatchEvent::Message(message)) => {
                seen += 1;
                out.message(&message)?;
            }
            Some(WatchEvent::Interrupted) => eprintln!(
                "keyholder: the subscription was lost (Redis restarted or failed over, or the slot moved); \
                 following it, messages until it is back are not heard"
            ),
            Some(WatchEvent::Resubscribed { node }) => {
                eprintln!("keyholder: watching {} again on {node}", watch.channel());
            }
            Some(_) | None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_redis_timeout_defaults_to_the_librarys() {
        let cli = <Cli as clap::Parser>::try_parse_from(["keyholder", "inspect", "x"]).unwrap();
        assert_eq!(cli.connection.redis_timeout, 3.0);
    }
}
