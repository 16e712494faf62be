//! Part of item 3 of issue 37, the primary's side: its replicas and their
//! lag (`INFO replication`), `min-replicas-to-write`, and the replica
//! acknowledgements the services wait for against the replicas present.
//! Sentinel's and Cluster's failover timings against the lease are a later
//! slice.

use std::time::Duration;

use super::facts::Facts;
use super::options::Settings;
use super::report::{Check, Figure, Verdict, blank};

const NAME: &str = "replication";
const GUARANTEE: &str = "Failover with asynchronous replication (replica_acks)";
const DOCS: &str = "docs/guarantees.md#failover-with-asynchronous-replication";

/// A replica whose last acknowledgement is older than this lags. Replicas
/// acknowledge once a second and `lag` is counted in whole seconds, so 0 to
/// 2 is a replica in step.
const MAX_LAG_SECS: i64 = 2;

/// The replication check of one primary.
pub(super) fn run(facts: &Facts, settings: &Settings) -> Check {
    let Some(role) = facts.info("role") else {
        return Check {
            found: "INFO replication not readable".to_owned(),
            verdict: Verdict::Unknown {
                reason: format!(
                    "INFO replication: {}",
                    facts.info_refused("replication").unwrap_or("no role field")
                ),
                confirm_by_hand:
                    "in the service's console: how many replicas the primary has, that they are \
                                  in sync, and that the services' replica_acks does not exceed them"
                        .to_owned(),
            },
            meaning: "replication is asynchronous: a failover can lose holds no replica acknowledged"
                .to_owned(),
            ..blank(NAME, GUARANTEE, DOCS)
        };
    };
    let replicas = facts.replicas();
    let connected = facts.info_number("connected_slaves").unwrap_or(replicas.len() as i64);
    let online = replicas.iter().filter(|r| r.state == "online").count() as i64;
    let lagging: Vec<String> = replicas
        .iter()
        .filter(|r| r.state != "online" || r.lag.is_none_or(|lag| lag > MAX_LAG_SECS))
        .map(|r| match r.lag {
            Some(lag) => format!("{} ({}, lag {lag} s)", r.addr, r.state),
            None => format!("{} ({})", r.addr, r.state),
        })
        .collect();
    let max_lag = replicas.iter().filter_map(|r| r.lag).max();
    let min_to_write = facts.config_number("min-replicas-to-write");
    let min_max_lag = facts.config_number("min-replicas-max-lag");
    let acks = settings.acks.replicas;
    let mut figures = vec![
        ("role", Figure::Text(role.to_owned())),
        ("connected_replicas", Figure::Number(connected)),
        ("online_replicas", Figure::Number(online)),
        ("replica_acks", Figure::Number(i64::from(acks))),
    ];
    if let Some(lag) = max_lag.and_then(|lag| u64::try_from(lag).ok()) {
        figures.push(("max_lag", Figure::Duration(Duration::from_secs(lag))));
    }
    if let Some(n) = min_to_write {
        figures.push(("min_replicas_to_write", Figure::Number(n)));
    }
    if let Some(n) = min_max_lag {
        figures.push(("min_replicas_max_lag", Figure::Number(n)));
    }
    let mut found = format!("role {role}, {connected} replica(s) connected, {online} online");
    if let Some(lag) = max_lag {
        found.push_str(&format!(", largest lag {lag} s"));
    }
    if !lagging.is_empty() {
        found.push_str(&format!(" (behind: {})", lagging.join(", ")));
    }
    match min_to_write {
        Some(n) => found.push_str(&format!(
            "; min-replicas-to-write {n}{}",
            min_max_lag.map(|lag| format!(", min-replicas-max-lag {lag} s")).unwrap_or_default()
        )),
        None => found.push_str(&format!(
            "; min-replicas-to-write not read ({})",
            facts.config_refused().unwrap_or("not given")
        )),
    }
    let waits = if settings.acks.aof { "WAITAOF" } else { "WAIT" };
    found.push_str(&format!("; the services wait for {acks} replica acknowledgement(s) ({waits})"));

    let (verdict, meaning, fix) = if role != "master" {
        (
            Verdict::Fail,
            format!("this node is a {role}, not a primary: locks cannot be taken here"),
            Some("point the services at the primary (or at Sentinel, which names it)".to_owned()),
        )
    } else if min_to_write.is_some_and(|n| n > online) {
        (
            Verdict::Fail,
            format!(
                "min-replicas-to-write asks for more replicas than are online ({online}): the primary refuses \
                 every write (NOREPLICAS), so every acquisition fails"
            ),
            Some("bring the replicas back, or lower min-replicas-to-write".to_owned()),
        )
    } else if i64::from(acks) > online {
        (
            Verdict::Fail,
            format!(
                "the services wait for {acks} replica(s) but {online} are online: every acquisition waits its \
                 acknowledgement timeout and comes back unacknowledged (refused with replica_acks_required)"
            ),
            Some(if connected > online {
                format!(
                    "{} replica(s) connected but not in sync yet (see their state): once they are online, check \
                     again; otherwise add replicas, or ask for at most {online} acknowledgement(s)",
                    connected - online
                )
            } else {
                format!("add replicas, or ask for at most {online} acknowledgement(s)")
            }),
        )
    } else if !lagging.is_empty() {
        (
            Verdict::Warn,
            format!(
                "a replica is behind by more than {MAX_LAG_SECS} s or not in sync: a failover that promotes it \
                 loses the holds it has not received"
            ),
            Some("find out why the replica lags (network, load, a full resync)".to_owned()),
        )
    } else if online == 0 {
        (
            Verdict::Ok,
            "no replicas: no failover can lose a hold (a restart can: see persistence)".to_owned(),
            None,
        )
    } else if acks == 0 {
        (
            Verdict::Warn,
            "replication is asynchronous and the services wait for no replica: a failover can promote a replica \
             that missed the latest acquisitions, and two holders overlap"
                .to_owned(),
            Some(
                "ClientBuilder::replica_acks(n, timeout) (or replica_acks_aof) in the services, with \
                 replica_acks_required if an unacknowledged hold must not be used; fencing tokens checked by \
                 the resource"
                    .to_owned(),
            ),
        )
    } else {
        (
            Verdict::Ok,
            format!(
                "acquisitions wait for {acks} of {online} replica(s): a failover that promotes a replica that \
                 acknowledged a hold keeps it{}",
                if i64::from(acks) >= online { " (every replica acknowledges)" } else { "" }
            ),
            None,
        )
    };
    Check { found, figures, verdict, meaning, fix, ..blank(NAME, GUARANTEE, DOCS) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::options::Acks;

    const TWO: &str = "role:master\r\nconnected_slaves:2\r\n\
                       slave0:ip=10.0.0.2,port=6379,state=online,offset=9,lag=0\r\n\
                       slave1:ip=10.0.0.3,port=6379,state=online,offset=9,lag=1\r\n";

    fn run_on(info: &str, config: &[(&str, &str)], acks: u32) -> Check {
        let settings =
            Settings { acks: Acks { replicas: acks, aof: false }, ..Settings::default_for_tests() };
        run(&Facts::from_parts(info, config, None), &settings)
    }

    #[test]
    fn acknowledgements_the_replicas_can_give_pass() {
        let c = run_on(TWO, &[("min-replicas-to-write", "0")], 2);
        assert_eq!(c.verdict, Verdict::Ok, "{c:?}");
        assert_eq!(c.figure("online_replicas"), Some(&Figure::Number(2)));
        let alone = run_on("role:master\r\nconnected_slaves:0\r\n", &[], 0);
        assert_eq!(alone.verdict, Verdict::Ok);
    }

    #[test]
    fn more_acknowledgements_than_replicas_fail() {
        let c = run_on("role:master\r\nconnected_slaves:0\r\n", &[], 1);
        assert_eq!(c.verdict, Verdict::Fail);
        assert!(c.meaning.contains("0 are online"), "{}", c.meaning);
        let c = run_on(TWO, &[("min-replicas-to-write", "3")], 0);
        assert_eq!(c.verdict, Verdict::Fail);
        assert!(c.meaning.contains("NOREPLICAS"), "{}", c.meaning);
    }

    #[test]
    fn replicas_without_acknowledgements_or_lagging_warn() {
        assert_eq!(run_on(TWO, &[], 0).verdict, Verdict::Warn);
        let lagging =
            "role:master\r\nconnected_slaves:1\r\nslave0:ip=a,port=1,state=online,offset=1,lag=3\r\n";
        let c = run_on(lagging, &[], 1);
        assert_eq!(c.verdict, Verdict::Warn);
        assert!(c.found.contains("a:1 (online, lag 3 s)"), "{}", c.found);
    }

    #[test]
    fn a_replica_or_no_info_is_not_ok() {
        assert_eq!(run_on("role:slave\r\n", &[], 0).verdict, Verdict::Fail);
        assert!(matches!(run_on("", &[], 0).verdict, Verdict::Unknown { .. }));
    }
}
