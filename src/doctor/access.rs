//! Item 6 of issue 37: whether the ACL user may do what the kinds need.
//! The commands a lock sends and those its scripts call inside Redis, the
//! keys they touch and the channels they publish on are all checked by
//! Redis's ACL at the moment they run, so the check runs them: a dry run
//! of each kind's script paths (acquire, re-entry, release of a nested and
//! of the last hold, the semaphores' and the latch's set-up, acquire,
//! release and removal) on scratch names of the kind under the doctor's
//! reserved prefix, each with a fixed lease or TTL and removed at the end.
//! A refusal (`NOPERM`) is named with what refused it: a command, a key or
//! a channel.
//!
//! A user whose key patterns leave out the reserved prefix cannot run the
//! dry run at all, which says nothing of the names the services use: that
//! is "unknown", and the names given (`--name`) are probed instead, each
//! derived key with a no-op write (`HDEL` of a field no lock has, inside a
//! script, which is where the kinds write) and each derived channel with a
//! `SUBSCRIBE` and `UNSUBSCRIBE` on a connection of its own (Redis applies
//! the same channel patterns to publishing and subscribing).
//!
//! A user who may not run `EVALSHA` or `EVAL` at all gets no client: the
//! client's build refuses it ([`Report::refused_access`] turns that
//! refusal into this check's failure, as `keyholder doctor` prints it).

use redis::Value;

use super::cluster::derived;
use super::latency::{SCRATCH_LEASE, scratch_name, scratch_on};
use super::report::{Check, Figure, Report, Verdict, blank};
use crate::admin::send;
use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::lease::Lease;
use crate::store::routes::Routes;

const NAME: &str = "access";
const GUARANTEE: &str = "Requirements: the ACL user's permissions";
const DOCS: &str = "docs/operations.md#access";

/// What one step of the dry run came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outcome {
    Ran,
    /// Redis refused it (`NOPERM`): the refusal as Redis worded it.
    Refused(String),
    /// It failed otherwise (a server out of memory, a timeout).
    Failed(String),
}

/// One step: the kind, what was done, and its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Step {
    pub(super) kind: &'static str,
    pub(super) what: String,
    pub(super) outcome: Outcome,
}

/// What was tried on one primary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Tried {
    /// The dry run of each kind on scratch names.
    pub(super) dry_run: Vec<Step>,
    /// The probes of the names given.
    pub(super) names: Vec<Step>,
    /// The scratch name's prefix.
    pub(super) scratch: String,
}

/// The reentrant lock: every kind but the semaphores and the latch stands
/// on its layout, and it is the one every service uses.
const BASE: &str = "lock";

/// The access check of one primary.
pub(super) fn run(tried: &Tried) -> Check {
    let refused = |steps: &[Step]| -> Vec<String> {
        steps
            .iter()
            .filter_map(|s| match &s.outcome {
                Outcome::Refused(e) => Some(format!("{} {}: {e}", s.kind, s.what)),
                _ => None,
            })
            .collect()
    };
    let failed: Vec<String> = tried
        .dry_run
        .iter()
        .chain(&tried.names)
        .filter_map(|s| match &s.outcome {
            Outcome::Failed(e) => Some(format!("{} {}: {e}", s.kind, s.what)),
            _ => None,
        })
        .collect();
    let dry_refused = refused(&tried.dry_run);
    let names_refused = refused(&tried.names);
    // The scratch keys themselves out of the user's key patterns: the dry
    // run tells nothing of the commands.
    let scratch_out_of_reach =
        tried.dry_run.iter().any(|s| matches!(&s.outcome, Outcome::Refused(e) if is_key_refusal(e)));
    let ran = tried.dry_run.iter().filter(|s| s.outcome == Outcome::Ran).count();
    let figures = vec![
        ("dry_run_steps", Figure::Number(tried.dry_run.len() as i64)),
        ("dry_run_ran", Figure::Number(ran as i64)),
        ("refused", Figure::Number((dry_refused.len() + names_refused.len()) as i64)),
        ("names_probed", Figure::Number(tried.names.len() as i64)),
    ];
    let kinds: Vec<&str> = tried.dry_run.iter().map(|s| s.kind).fold(Vec::new(), |mut kinds, kind| {
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
        kinds
    });
    let mut found = format!(
        "dry run of {} step(s) of {} on scratch names {}*: {ran} ran",
        tried.dry_run.len(),
        kinds.join(", "),
        tried.scratch
    );
    if !tried.names.is_empty() {
        found.push_str(&format!(
            "; {} derived key(s) and channel(s) of the names given probed, {} refused",
            tried.names.len(),
            names_refused.len()
        ));
    }
    let all_refused: Vec<String> = if scratch_out_of_reach {
        names_refused.clone()
    } else {
        [dry_refused.clone(), names_refused.clone()].concat()
    };
    if !all_refused.is_empty() {
        found.push_str(&format!("; refused: {}", all_refused.join("; ")));
    }
    let check = Check { found, figures, ..blank(NAME, GUARANTEE, DOCS) };
    let base_refused = !scratch_out_of_reach
        && tried.dry_run.iter().any(|s| s.kind == BASE && matches!(s.outcome, Outcome::Refused(_)));
    if base_refused || !names_refused.is_empty() {
        return Check {
            verdict: Verdict::Fail,
            meaning: "Redis refuses this user what every lock needs: acquisitions or releases fail with NOPERM \
                      (a release refused leaves the lock held until its lease runs out)"
                .to_owned(),
            fix: Some(
                "grant the user the commands, keys and channels refused (ACL SETUSER <user> +<command> ~<key \
                 pattern> &<channel pattern>); docs/operations.md#access lists what each kind needs"
                    .to_owned(),
            ),
            ..check
        };
    }
    if scratch_out_of_reach {
        return Check {
            verdict: Verdict::Unknown {
                reason: format!(
                    "the user's key patterns leave out the doctor's scratch names ({}*), so the kinds' scripts \
                     could not be run; {}",
                    tried.scratch,
                    if tried.names.is_empty() {
                        "no names were given to probe instead".to_owned()
                    } else {
                        "the names given are reachable".to_owned()
                    }
                ),
                confirm_by_hand: "that the user may run EVALSHA, EVAL and the commands the scripts call (HSET, \
                                  HINCRBY, HGET, HDEL, HEXISTS, PEXPIRE, PTTL, DEL, GET, SET, INCR, ZADD, ZREM, \
                                  ZRANGE, RPUSH, LPOP, LREM, LINDEX, PUBLISH), SUBSCRIBE, and the keys and \
                                  channels of the services' names (give them with --name)"
                    .to_owned(),
            },
            meaning: "what the user may do with the services' own names decides whether their locks work".to_owned(),
            ..check
        };
    }
    if !dry_refused.is_empty() {
        let kinds: Vec<&str> =
            tried.dry_run.iter().filter(|s| matches!(s.outcome, Outcome::Refused(_))).map(|s| s.kind).fold(
                Vec::new(),
                |mut kinds, kind| {
                    if !kinds.contains(&kind) {
                        kinds.push(kind);
                    }
                    kinds
                },
            );
        return Check {
            verdict: Verdict::Warn,
            meaning: format!(
                "the reentrant lock works for this user, but {} do(es) not: a service that uses them gets NOPERM",
                kinds.join(", ")
            ),
            fix: Some("grant the user the commands refused, if the services use those kinds".to_owned()),
            ..check
        };
    }
    if !failed.is_empty() {
        return Check {
            verdict: Verdict::Unknown {
                reason: format!("the dry run did not complete: {}", failed.join("; ")),
                confirm_by_hand: "that the user may run the kinds' scripts: run `keyholder doctor` again"
                    .to_owned(),
            },
            meaning: "a step failed for another reason than the user's permissions".to_owned(),
            ..check
        };
    }
    Check {
        meaning: "the user may run every kind's scripts, with the commands, keys and channels they use"
            .to_owned(),
        ..check
    }
}

/// The access check of every primary (on a Redis Cluster, each with
/// scratch names tagged to land on it).
///
/// # Errors
///
/// A connection failure; refusals and other failures of a step are the
/// check's findings.
pub(super) fn checks(client: &Client, names: &[String]) -> Result<Vec<Check>> {
    let inner = client.inner();
    let id = client.id();
    let mut checks = Vec::new();
    match inner.routes() {
        Routes::Primary(_) => {
            let scratch = scratch_name(id, None);
            checks.push(run(&try_all(client, &scratch, names)));
        }
        Routes::Cluster(cluster) => {
            let mut shards = cluster.shards();
            shards.sort_by(|a, b| a.addr.cmp(&b.addr));
            for shard in shards {
                let node = format!("{}:{}", shard.addr.0, shard.addr.1);
                let (scratch, _) = scratch_on(cluster, &shard.addr, id);
                // The names given are probed where they live, once.
                let here: Vec<String> = names
                    .iter()
                    .filter(|n| cluster.node_of(n).as_ref() == Some(&shard.addr))
                    .cloned()
                    .collect();
                checks.push(Check { node: Some(node), ..run(&try_all(client, &scratch, &here)) });
            }
        }
    }
    Ok(checks)
}

/// The dry run on scratch names under `scratch`, and the probes of `names`.
fn try_all(client: &Client, scratch: &str, names: &[String]) -> Tried {
    let mut dry_run = Vec::new();
    let mut step = |kind: &'static str, what: &str, outcome: Result<()>| {
        dry_run.push(Step { kind, what: what.to_owned(), outcome: outcome_of(outcome) });
    };
    let lease = Lease::Fixed(SCRATCH_LEASE);
    let name = |kind: &str| format!("{scratch}:access:{kind}");

    let taken =
        client.lock_with_lease(&name("lock"), lease).and_then(|lock| Ok((acquired(lock.try_lock())?, lock)));
    match taken {
        Err(e) => step(BASE, "acquire", Err(e)),
        Ok((last, lock)) => {
            step(BASE, "acquire", Ok(()));
            match acquired(lock.try_lock()) {
                Ok(nested) => {
                    step(BASE, "re-entry", Ok(()));
                    step(BASE, "release of a nested hold", nested.unlock());
                }
                Err(e) => step(BASE, "re-entry", Err(e)),
            }
            step(BASE, "release of the last hold", last.unlock());
        }
    }

    let fenced = client.lock_with_lease(&name("fenced"), lease).map(|lock| lock.fenced());
    let outcome = fenced.and_then(|lock| acquired(lock.try_lock())?.unlock());
    step("fenced lock", "acquire and release", outcome);

    let outcome = client
        .fair_lock(&name("fair"))
        .and_then(|lock| lock.with_lease(lease))
        .and_then(|lock| acquired(lock.try_lock())?.unlock());
    step("fair lock", "acquire and release", outcome);

    let rw = client.read_write_lock(&name("rw")).and_then(|rw| {
        let read = rw.read().with_lease(lease)?;
        let write = rw.write().with_lease(lease)?;
        Ok((read, write))
    });
    match rw {
        Ok((read, write)) => {
            step(
                "read-write lock",
                "read acquire and release",
                acquired(read.try_lock()).and_then(|g| g.unlock()),
            );
            step(
                "read-write lock",
                "write acquire and release",
                acquired(write.try_lock()).and_then(|g| g.unlock()),
            );
        }
        Err(e) => step("read-write lock", "handle", Err(e)),
    }

    let outcome = client
        .spin_lock(&name("spin"))
        .and_then(|lock| lock.with_lease(lease))
        .and_then(|lock| acquired(lock.try_lock())?.unlock());
    step("spin lock", "acquire and release", outcome);

    let outcome = client.semaphore(&name("semaphore")).and_then(|semaphore| {
        semaphore.try_set_permits_with_ttl(1, SCRATCH_LEASE)?;
        let permits = semaphore.try_acquire(1)?.ok_or_else(|| {
            Error::unexpected_reply("doctor", "no permit in a fresh scratch semaphore".to_owned())
        })?;
        permits.release().map(drop)
    });
    step("semaphore", "set, acquire and release", outcome);

    let outcome = client
        .permit_expirable_semaphore(&name("permits"))
        .and_then(|semaphore| semaphore.with_lease(lease))
        .and_then(|semaphore| {
            semaphore.try_set_permits(1)?;
            let permits = semaphore.try_acquire(1)?.ok_or_else(|| {
                Error::unexpected_reply("doctor", "no permit in a fresh scratch semaphore".to_owned())
            })?;
            permits.release()
        });
    step("permit-expirable semaphore", "set, acquire and release", outcome);

    // A hash-tagged scratch name (on a cluster) cannot be a latch: its
    // channel wraps the name in a second pair of braces. Not tried there.
    if !scratch.contains('{') {
        let outcome = client.count_down_latch(&name("latch")).and_then(|latch| {
            latch.try_set_count(1)?;
            latch.count_down()?;
            latch.delete().map(drop)
        });
        step("count-down latch", "set, count down and delete", outcome);
    }

    for kind in ["lock", "fenced", "fair", "rw", "spin", "semaphore", "permits", "latch"] {
        remove(client, &name(kind));
    }
    let names = names.iter().flat_map(|n| probe_name(client, n)).collect();
    Tried { dry_run, names, scratch: format!("{scratch}:access:") }
}

/// A guard, or "not acquired" as a failure (the scratch names are this
/// client's alone, so another holder is a surprise worth saying).
fn acquired<G>(attempt: Result<Option<G>>) -> Result<G> {
    attempt?.ok_or_else(|| Error::unexpected_reply("doctor", "a scratch lock was held by another".to_owned()))
}

fn outcome_of(result: Result<()>) -> Outcome {
    match result {
        Ok(()) => Outcome::Ran,
        Err(e) => {
            let text = with_causes(&e);
            // A refusal inside a script comes back as the script's error,
            // with Redis's NOPERM among its causes.
            // Redis 7.0 words it "The user executing the script can't run
            // this command", "... can't access at least one of the keys".
            let refused = ["NOPERM", "no permissions", "user executing the script can't"];
            if e.kind() == ErrorKind::AccessDenied || refused.iter().any(|r| text.contains(r)) {
                Outcome::Refused(text)
            } else {
                Outcome::Failed(text)
            }
        }
    }
}

/// A refusal of a key (not of a command or channel): "No permissions to
/// access a key", "can't access at least one of the keys".
fn is_key_refusal(text: &str) -> bool {
    text.contains("access a key") || text.contains("of the keys")
}

/// An error and its causes, as one line.
fn with_causes(e: &Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Deletes every key derived from a scratch name, one command each (on a
/// cluster they may live in different slots); best effort.
fn remove(client: &Client, name: &str) {
    let routes = client.inner().routes();
    for (role, key) in derived(name) {
        if role.ends_with("channel") || role.ends_with("channels") {
            continue;
        }
        let deleted = routes
            .session(&key)
            .and_then(|mut session| send(&mut session, &[redis::cmd("DEL").arg(&key).clone()]));
        if let Err(e) = deleted {
            log::warn!("keyholder doctor: could not remove the scratch key {key}: {e}");
        }
    }
}

/// A script that writes nothing: `HDEL` of a field no lock has.
const NO_OP_WRITE: &str = "return redis.pcall('HDEL', KEYS[1], ARGV[1])";

/// Probes each key and channel derived from `name`: a no-op write inside a
/// script for a key, a subscription on a connection of its own for a
/// channel.
fn probe_name(client: &Client, name: &str) -> Vec<Step> {
    let routes = client.inner().routes();
    let absent_field = format!("keyholder:doctor:{}", client.id());
    derived(name)
        .into_iter()
        .map(|(role, key)| {
            let is_channel = role.ends_with("channel") || role.ends_with("channels");
            let outcome = if is_channel {
                subscribe_probe(client, &key)
            } else {
                routes.session(&key).and_then(|mut session| {
                    let eval =
                        redis::cmd("EVAL").arg(NO_OP_WRITE).arg(1).arg(&key).arg(&absent_field).clone();
                    reply_outcome(send(&mut session, &[eval])?.into_iter().next().unwrap_or(Value::Nil))
                })
            };
            Step { kind: "name", what: format!("{name} {role} {key}"), outcome: outcome_of(outcome) }
        })
        .collect()
}

/// A reply's refusal as an error (a `WRONGTYPE` from a key of another
/// kind is no refusal).
fn reply_outcome(reply: Value) -> Result<()> {
    match reply {
        Value::ServerError(e) if e.code() == "NOPERM" => {
            Err(Error::access_denied_to(format!("NOPERM {}", e.details().unwrap_or_default())))
        }
        _ => Ok(()),
    }
}

/// `SUBSCRIBE` and `UNSUBSCRIBE` of `channel` on a connection of its own
/// to the primary that serves it.
fn subscribe_probe(client: &Client, channel: &str) -> Result<()> {
    let inner = client.inner();
    let connector = match inner.routes() {
        Routes::Primary(lanes) => lanes.connector().clone(),
        Routes::Cluster(cluster) => {
            let addr = cluster
                .node_of(channel)
                .ok_or_else(|| Error::unexpected_reply("doctor", format!("no node serves {channel}")))?;
            let shard = cluster.shards().into_iter().find(|s| s.addr == addr).ok_or_else(|| {
                Error::unexpected_reply("doctor", format!("no shard at {}:{}", addr.0, addr.1))
            })?;
            shard.connector().clone()
        }
    };
    let mut conn = connector.connect().map_err(Error::redis)?;
    let packed: Vec<u8> =
        [redis::cmd("SUBSCRIBE").arg(channel).clone(), redis::cmd("UNSUBSCRIBE").arg(channel).clone()]
            .iter()
            .flat_map(redis::Cmd::get_packed_command)
            .collect();
    conn.send(&packed).map_err(Error::redis)?;
    let (replies, failure) = conn.receive(1);
    if let Some(e) = failure {
        return Err(Error::redis(e));
    }
    conn.retire();
    reply_outcome(replies.into_iter().next().unwrap_or(Value::Nil))
}

impl Report {
    /// The report of a client that could not be built because Redis
    /// refused its user what every lock needs (`EVALSHA`, `EVAL`, the
    /// subscription that wakes waiters): one failed `access` check with the
    /// refusal. `None` for any other error, which is no finding about the
    /// deployment but a failure to check it.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), keyholder::Error> {
    /// use keyholder::{Client, DoctorOptions, Report};
    ///
    /// let report = match Client::open("redis://app:secret@127.0.0.1:6379/") {
    ///     Ok(client) => client.doctor(&DoctorOptions::default())?,
    ///     Err(e) => Report::refused_access(&e).ok_or(e)?,
    /// };
    /// # let _ = report;
    /// # Ok(()) }
    /// ```
    pub fn refused_access(error: &Error) -> Option<Report> {
        if error.kind() != ErrorKind::AccessDenied {
            return None;
        }
        let check = Check {
            found: format!("the client could not be built: {error}"),
            verdict: Verdict::Fail,
            meaning:
                "Redis refuses this user what every lock needs, so no lock works for it; nothing else was \
                      checked"
                    .to_owned(),
            fix: Some(
                "grant the user what was refused (ACL SETUSER <user> +evalsha +eval ...), or give the \
                 services' own credentials"
                    .to_owned(),
            ),
            ..blank(NAME, GUARANTEE, DOCS)
        };
        Some(Report { checks: vec![check], notes: Vec::new() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(kind: &'static str, outcome: Outcome) -> Step {
        Step { kind, what: "acquire".into(), outcome }
    }

    fn tried(dry_run: Vec<Step>, names: Vec<Step>) -> Tried {
        Tried { dry_run, names, scratch: "keyholder:doctor:x:access:".into() }
    }

    #[test]
    fn every_step_run_is_ok_and_a_refusal_of_the_base_lock_fails() {
        assert_eq!(
            run(&tried(vec![step(BASE, Outcome::Ran), step("fair lock", Outcome::Ran)], vec![])).verdict,
            Verdict::Ok
        );
        let refused =
            Outcome::Refused("NOPERM this user has no permissions to run the 'hincrby' command".into());
        let c = run(&tried(vec![step(BASE, refused.clone())], vec![]));
        assert_eq!(c.verdict, Verdict::Fail, "{c:?}");
        assert!(c.found.contains("'hincrby'"), "{}", c.found);
        // Another kind refused: a warning naming it.
        let c = run(&tried(vec![step(BASE, Outcome::Ran), step("fair lock", refused)], vec![]));
        assert_eq!(c.verdict, Verdict::Warn, "{c:?}");
        assert!(c.meaning.contains("fair lock"), "{}", c.meaning);
    }

    #[test]
    fn scratch_keys_out_of_reach_are_unknown_unless_a_name_given_is_refused() {
        let key_refused = Outcome::Refused("NOPERM No permissions to access a key".into());
        let c = run(&tried(vec![step(BASE, key_refused.clone())], vec![]));
        assert!(matches!(c.verdict, Verdict::Unknown { .. }), "{c:?}");
        let c = run(&tried(vec![step(BASE, key_refused.clone())], vec![step("name", Outcome::Ran)]));
        assert!(matches!(c.verdict, Verdict::Unknown { .. }), "{c:?}");
        let c = run(&tried(
            vec![step(BASE, key_refused)],
            vec![step("name", Outcome::Refused("NOPERM channel".into()))],
        ));
        assert_eq!(c.verdict, Verdict::Fail, "{c:?}");
    }

    #[test]
    fn another_failure_is_unknown_and_only_access_denied_makes_a_report() {
        let c = run(&tried(vec![step(BASE, Outcome::Failed("OOM".into()))], vec![]));
        assert!(matches!(c.verdict, Verdict::Unknown { .. }), "{c:?}");
        assert!(Report::refused_access(&Error::access_denied_to("no EVALSHA".into())).is_some());
        assert!(Report::refused_access(&Error::invalid_config("bad url".to_owned())).is_none());
    }
}
