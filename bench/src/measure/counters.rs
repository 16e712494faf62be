//! The server's counters (`INFO commandstats`, `INFO cpu`) and the
//! process's CPU, snapshotted at both ends of a measured window; their
//! difference is the window's [`Delta`]. Redis counts round trips for us:
//! every top-level command is one, and the commands scripts run inside
//! Redis are left out by name (or, when the window was audited, by the slow
//! log's peer).

use std::collections::HashMap;
use std::time::Instant;

use super::audit::{audit_end, audit_start};
use super::process::process_cpu;
use crate::env::Env;
use crate::error::{Res, err};

/// The bench's own inspection commands, and a replica's `REPLCONF ACK`
/// (each second, to its primary, on a Redis Cluster): never a round trip of
/// an implementation.
const BENCH_OWN: &[&str] = &[
    "replconf",
    "info",
    "client|list",
    "pubsub|numsub",
    "dbsize",
    "slowlog|reset",
    "slowlog|get",
    "slowlog|len",
    "config|set",
];

/// One `INFO` section's text.
pub(crate) fn info(stats: &mut redis::Connection, section: &str) -> Res<String> {
    Ok(redis::cmd("INFO").arg(section).query::<String>(stats)?)
}

/// A `field:value` line's value in `INFO`-like text.
pub(crate) fn info_field(text: &str, field: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(field).and_then(|r| r.strip_prefix(':')))
        .map(|v| v.trim().to_owned())
}

/// The server's `connected_clients`.
pub(crate) fn connected_clients(stats: &mut redis::Connection) -> Res<f64> {
    let clients = info(stats, "clients")?;
    info_field(&clients, "connected_clients")
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| err("no connected_clients in INFO clients"))
}

/// The server's error replies by error code (`INFO errorstats`, Redis 6.2
/// and newer: `errorstat_MOVED:count=3`); empty on older servers.
pub(crate) fn error_counts(stats: &mut redis::Connection) -> Res<HashMap<String, u64>> {
    let text = info(stats, "errorstats")?;
    Ok(text
        .lines()
        .filter_map(|l| l.strip_prefix("errorstat_"))
        .filter_map(|rest| {
            let (code, fields) = rest.split_once(':')?;
            let n = fields.split(',').find_map(|f| f.strip_prefix("count="))?.trim().parse().ok()?;
            Some((code.to_owned(), n))
        })
        .collect())
}

/// A snapshot of the server's counters and the process's CPU.
pub(crate) struct Snap {
    calls: HashMap<String, u64>,
    /// Microseconds Redis spent executing each command (`usec`): its own
    /// time, no network I/O; a script's includes the commands it runs.
    usec: HashMap<String, u64>,
    server_cpu: f64,
    client_cpu: f64,
    at: Instant,
}

/// Takes a [`Snap`] over the `stats` connection.
pub(crate) fn snap(stats: &mut redis::Connection) -> Res<Snap> {
    let client_cpu = process_cpu();
    let at = Instant::now();
    let text = info(stats, "commandstats")?;
    let (mut calls, mut usec) = (HashMap::new(), HashMap::new());
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else { continue };
        let Some((name, fields)) = rest.split_once(':') else { continue };
        let field = |key: &str| {
            fields
                .split(',')
                .find_map(|f| f.strip_prefix(key))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        calls.insert(name.to_owned(), field("calls="));
        usec.insert(name.to_owned(), field("usec="));
    }
    let cpu = info(stats, "cpu")?;
    let secs = |f: &str| info_field(&cpu, f).and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN);
    let server_cpu = secs("used_cpu_user") + secs("used_cpu_sys");
    Ok(Snap { calls, usec, server_cpu, client_cpu, at })
}

/// What happened between two snapshots.
#[derive(Clone)]
pub(crate) struct Delta {
    calls: HashMap<String, u64>,
    /// Redis's execution time by command, µs (see [`Snap`]).
    usec: HashMap<String, u64>,
    /// Top-level commands by name, when the window was audited.
    top: Option<HashMap<String, u64>>,
    /// Redis CPU, seconds.
    pub(crate) server_cpu: f64,
    /// This process's CPU, seconds.
    pub(crate) client_cpu: f64,
    /// Wall time, seconds.
    pub(crate) wall: f64,
}

impl Delta {
    /// The window from `a` to `b`, not audited.
    pub(crate) fn between(a: &Snap, b: &Snap) -> Delta {
        let less = |after: &HashMap<String, u64>, before: &HashMap<String, u64>| {
            after
                .iter()
                .map(|(name, n)| (name.clone(), n.saturating_sub(before.get(name).copied().unwrap_or(0))))
                .filter(|(_, n)| *n > 0)
                .collect()
        };
        Delta {
            calls: less(&b.calls, &a.calls),
            usec: less(&b.usec, &a.usec),
            top: None,
            server_cpu: b.server_cpu - a.server_cpu,
            client_cpu: b.client_cpu - a.client_cpu,
            wall: b.at.duration_since(a.at).as_secs_f64(),
        }
    }

    /// Several servers' deltas over one window as one: calls, top-level
    /// commands and server CPU summed; the process's CPU and the wall time
    /// are the longest of them (each delta saw the same process).
    pub(crate) fn merge(deltas: &[Delta]) -> Delta {
        let mut calls: HashMap<String, u64> = HashMap::new();
        let mut usec: HashMap<String, u64> = HashMap::new();
        let mut top: Option<HashMap<String, u64>> = Some(HashMap::new());
        for d in deltas {
            for (name, n) in &d.calls {
                *calls.entry(name.clone()).or_insert(0) += n;
            }
            for (name, n) in &d.usec {
                *usec.entry(name.clone()).or_insert(0) += n;
            }
            match (&mut top, &d.top) {
                (Some(sum), Some(t)) => {
                    for (name, n) in t {
                        *sum.entry(name.clone()).or_insert(0) += n;
                    }
                }
                _ => top = None,
            }
        }
        Delta {
            calls,
            usec,
            top: if deltas.is_empty() { None } else { top },
            server_cpu: deltas.iter().map(|d| d.server_cpu).sum(),
            client_cpu: deltas.iter().map(|d| d.client_cpu).fold(0.0, f64::max),
            wall: deltas.iter().map(|d| d.wall).fold(0.0, f64::max),
        }
    }

    /// The same window with the top-level commands its audit counted.
    pub(crate) fn with_audit(self, top: Option<HashMap<String, u64>>) -> Delta {
        Delta { top, ..self }
    }

    /// Calls of `name` (`INFO commandstats` naming), inside scripts or not.
    pub(crate) fn calls(&self, name: &str) -> f64 {
        self.calls.get(name).copied().unwrap_or(0) as f64
    }

    /// Calls of an implementation's attempt command (see
    /// `LockImpl::attempt_command`), less the counter's `counter_ops` when it
    /// is the GET or SET the counter also sends.
    pub(crate) fn attempts(&self, command: &str, counter_ops: u64, acquisitions: u64) -> f64 {
        let n = self.calls.get(command).copied().unwrap_or(0);
        // The counter's GET/SET; and for "evalsha", each acquisition's one
        // release (or hand-off) script: the rest are acquire attempts.
        let own = match command {
            "get" | "set" => counter_ops,
            "evalsha" => acquisitions,
            _ => 0,
        };
        n.saturating_sub(own) as f64
    }

    /// Of the `n` calls of `name`, those sent at top level, for an
    /// implementation whose scripts run the commands `nested`: none of a
    /// command in `nested`; all of one that is not; and, for an entry
    /// `name-a-b...`, all but as many as the calls of `a`, `b`, ...: a
    /// command its scripts run once with each of those, that it also sends
    /// itself (Redisson 4's `del-publish-spublish`: its unlock script's DEL
    /// of the lock goes with its PUBLISH, and the client then DELs the
    /// latch).
    fn top_level(&self, nested: &[&str], name: &str, n: u64) -> u64 {
        if nested.contains(&name) {
            return 0;
        }
        let paired = nested.iter().find_map(|entry| {
            let mut parts = entry.split('-');
            (parts.next() == Some(name)).then(|| parts.map(|p| self.calls(p) as u64).sum::<u64>())
        });
        n.saturating_sub(paired.unwrap_or(0))
    }

    /// Top-level commands but the bench's own and the counter's
    /// `counter_ops` GETs and SETs: from the audit when there is one, else all
    /// calls but those that ran inside the scripts (`nested`, see
    /// [`Delta::top_level`]).
    pub(crate) fn round_trips(&self, nested: &[&str], counter_ops: u64) -> f64 {
        let own_or_counter = |name: &str, n: u64| {
            if BENCH_OWN.contains(&name) {
                0
            } else if name == "get" || name == "set" {
                n.saturating_sub(counter_ops)
            } else {
                n
            }
        };
        if let Some(top) = &self.top {
            return top.iter().map(|(name, n)| own_or_counter(name, *n)).sum::<u64>() as f64;
        }
        self.calls.iter().map(|(name, n)| own_or_counter(name, self.top_level(nested, name, *n))).sum::<u64>()
            as f64
    }

    /// Redis's execution time of the top-level commands, µs: all but the
    /// bench's own and those that ran inside the scripts (`nested`; a
    /// script's time includes theirs). No network I/O, no event loop: the
    /// part of the server's CPU that the commands and scripts themselves
    /// cost. Includes the counter's GETs and SETs where there are any. A
    /// command both sent and run in scripts (see [`Delta::top_level`])
    /// counts in proportion of its top-level calls.
    pub(crate) fn command_usec(&self, nested: &[&str]) -> f64 {
        self.usec
            .iter()
            .filter(|(name, _)| !BENCH_OWN.contains(&name.as_str()))
            .map(|(name, usec)| {
                let calls = self.calls.get(name).copied().unwrap_or(0);
                if calls == 0 {
                    return 0.0;
                }
                *usec as f64 * self.top_level(nested, name, calls) as f64 / calls as f64
            })
            .sum::<f64>()
    }

    /// Every command the server ran, top-level and inside scripts, but the
    /// bench's own: the work an implementation asks of Redis, counted, with
    /// none of the noise of a timing.
    pub(crate) fn commands_run(&self) -> f64 {
        self.calls
            .iter()
            .filter(|(name, _)| !BENCH_OWN.contains(&name.as_str()))
            .map(|(_, n)| *n)
            .sum::<u64>() as f64
    }

    /// SUBSCRIBE and UNSUBSCRIBE calls.
    pub(crate) fn subscribes(&self) -> f64 {
        self.calls("subscribe") + self.calls("unsubscribe")
    }

    /// Top-level calls of `name`, from the audit; NaN without one.
    pub(crate) fn top_calls(&self, name: &str) -> f64 {
        self.top.as_ref().map_or(f64::NAN, |top| top.get(name).copied().unwrap_or(0) as f64)
    }
}

/// Where a measured window's counters are read: one server (its
/// `redis::Connection`) or every primary of a Redis Cluster
/// ([`ShardStats`](super::ShardStats)), so that a window is measured the same
/// way on either.
pub(crate) trait Counters {
    /// The counters at one moment.
    type Snap;
    /// What an audit counted (see `measure::audit`); the default: no audit.
    type Audit: Default;
    /// What a window shows beyond its sum over the servers: nothing for one
    /// server, each primary's share on a cluster.
    type Parts;

    /// Takes a snapshot.
    fn snap(&mut self) -> Res<Self::Snap>;

    /// Starts an audited window when audits are on; returns whether it did.
    fn audit_start(&mut self, env: &Env) -> Res<bool>;

    /// Ends it: what it counted.
    fn audit_end(&mut self, env: &Env, on: bool) -> Res<Self::Audit>;

    /// The window from `a` to `b`, with what its audit counted.
    fn between(&self, a: &Self::Snap, b: &Self::Snap, audit: Self::Audit) -> (Self::Parts, Delta);
}

impl Counters for redis::Connection {
    type Snap = Snap;
    type Audit = Option<HashMap<String, u64>>;
    type Parts = ();

    fn snap(&mut self) -> Res<Snap> {
        snap(self)
    }

    fn audit_start(&mut self, env: &Env) -> Res<bool> {
        audit_start(env, self)
    }

    fn audit_end(&mut self, env: &Env, on: bool) -> Res<Self::Audit> {
        audit_end(env, self, on)
    }

    fn between(&self, a: &Snap, b: &Snap, audit: Self::Audit) -> ((), Delta) {
        ((), Delta::between(a, b).with_audit(audit))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::Delta;

    fn delta(calls: &[(&str, u64)], usec: &[(&str, u64)]) -> Delta {
        let map = |pairs: &[(&str, u64)]| pairs.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect();
        let calls: HashMap<String, u64> = map(calls);
        Delta { calls, usec: map(usec), top: None, server_cpu: 0.0, client_cpu: 0.0, wall: 1.0 }
    }

    /// Redisson 4's uncontended pairs: two EVALSHA and the latch DEL are
    /// top-level; the scripts' DEL of the lock (one per PUBLISH) is not.
    #[test]
    fn a_command_paired_with_a_script_command_counts_its_extra_calls_only() {
        let d = delta(
            &[
                ("evalsha", 200),
                ("exists", 100),
                ("hincrby", 200),
                ("pexpire", 100),
                ("get", 100),
                ("hexists", 100),
                ("del", 200),
                ("publish", 100),
                ("set", 100),
                ("info", 4),
            ],
            &[("evalsha", 1000), ("del", 400), ("info", 50)],
        );
        // The Redisson 4 row's own list, with its "del-publish-spublish".
        let nested = crate::lock_impl::REDISSON_SCRIPT_COMMANDS;
        assert_eq!(d.round_trips(nested, 0), 300.0);
        assert_eq!(d.command_usec(nested), 1200.0, "half of the DELs' time is top-level");
        assert_eq!(d.commands_run(), 1200.0, "the bench's INFO left out");
        // Without the pairing entry every DEL would be nested, or top-level.
        assert_eq!(d.round_trips(&["del"], 0), 200.0 + 800.0);
        let plain = ["exists", "hexists", "hincrby", "pexpire", "get", "set", "publish"];
        assert_eq!(d.round_trips(&plain, 0), 400.0);
    }
}
