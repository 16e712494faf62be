//! The rest of item 3 of issue 37: how fast the deployment fails a primary
//! over, against the services' timeouts. Sentinel's
//! `down-after-milliseconds`, `failover-timeout` and quorum (`SENTINEL
//! MASTER` on the sentinels the client was built with, through
//! `store/sentinel.rs`), or the cluster's `cluster-node-timeout` (`CONFIG
//! GET`; `INFO` has no such field). From them, in figures: how long new
//! acquisitions are unavailable after a primary dies, and how long two
//! holders may overlap after a lossy failover (a hold the promoted replica
//! lacks), with the mechanism docs/guarantees.md measures: the old holder
//! is told at its client's switch to the new primary.

use std::time::Duration;

use super::facts::Facts;
use super::options::{Deployment, Settings};
use super::report::{Check, Figure, Verdict, blank};

const NAME: &str = "failover";
const GUARANTEE: &str = "Failover with asynchronous replication (replica_acks)";
const DOCS: &str = "docs/operations.md#failover";

/// What a promotion adds to the detection time, about: the sentinels'
/// election and the replica's promotion, or a cluster's `FAIL` agreement
/// and replica election (500 ms and a random delay of up to 500 ms, more
/// for a lagging replica), plus the client hearing of it. Measured
/// (docs/guarantees.md): a Sentinel failover with
/// `down-after-milliseconds 1000` moved the client 2.2 to 2.8 s after the
/// kill; a cluster client hears of a promotion within about a second.
const PROMOTION: Duration = Duration::from_secs(2);

fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

fn millis(n: i64) -> Option<Duration> {
    u64::try_from(n).ok().map(Duration::from_millis)
}

/// How long the deployment takes to notice a dead primary: the sentinels'
/// `down-after-milliseconds` or the cluster's `cluster-node-timeout`
/// (`None` for one server, whose replicas are promoted by hand, or when
/// it could not be read). An outage lasts at least this long (the clock
/// check's tolerance).
pub(super) fn detection(facts: &Facts, settings: &Settings) -> Option<Duration> {
    match settings.deployment {
        Deployment::Single => None,
        Deployment::Sentinel => facts.sentinel.as_ref()?.number("down-after-milliseconds").and_then(millis),
        Deployment::Cluster => facts.config_number("cluster-node-timeout").and_then(millis),
    }
}

/// The failover check of one primary.
pub(super) fn run(facts: &Facts, settings: &Settings) -> Check {
    // The primary's replicas (INFO replication), or the sentinels' count.
    let replicas: Option<i64> = if facts.info("role").is_some() {
        Some(facts.replicas().len() as i64)
    } else {
        facts.sentinel.as_ref().and_then(|view| view.number("num-slaves"))
    };
    let mut figures = vec![
        ("watchdog_timeout", Figure::Duration(settings.watchdog_timeout)),
        ("command_timeout", Figure::Duration(settings.command_timeout)),
    ];
    // (detection, what detects, what ends a cut-off old primary's writes)
    let (detection, detector, mut found, cut_off) = match settings.deployment {
        Deployment::Single => {
            return Check {
                found: "one server, neither Sentinel nor Cluster: no automatic failover".to_owned(),
                figures,
                meaning: "nothing promotes a replica behind the services' back; a failover by hand is \
                          announced by the operator (see replication for what it may lose)"
                    .to_owned(),
                ..blank(NAME, GUARANTEE, DOCS)
            };
        }
        Deployment::Sentinel => {
            let Some(view) = facts.sentinel.as_ref() else {
                return unknown(figures, "the sentinels were not asked".to_owned(), settings);
            };
            let Some(down_after) = view.number("down-after-milliseconds").and_then(millis) else {
                let errors: Vec<String> = view
                    .answers
                    .iter()
                    .filter_map(|(at, a)| a.as_ref().err().map(|e| format!("{at}: {e}")))
                    .collect();
                return unknown(
                    figures,
                    format!("no sentinel answered SENTINEL MASTER ({})", errors.join("; ")),
                    settings,
                );
            };
            let failover_timeout = view.number("failover-timeout").and_then(millis);
            let quorum = view.number("quorum");
            let known = view.number("num-other-sentinels").map(|n| n + 1);
            figures.push(("down_after", Figure::Duration(down_after)));
            if let Some(t) = failover_timeout {
                figures.push(("failover_timeout", Figure::Duration(t)));
            }
            if let Some(q) = quorum {
                figures.push(("quorum", Figure::Number(q)));
            }
            if let Some(n) = known {
                figures.push(("sentinels", Figure::Number(n)));
            }
            figures.push(("sentinels_answered", Figure::Number(view.answered() as i64)));
            let mut found = format!(
                "Sentinel: down-after-milliseconds {}, failover-timeout {}, quorum {} of {} sentinel(s) \
                 ({} of the {} given answered)",
                down_after.as_millis(),
                failover_timeout.map_or_else(|| "not given".to_owned(), ms),
                quorum.map_or_else(|| "?".to_owned(), |q| q.to_string()),
                known.map_or_else(|| "?".to_owned(), |n| n.to_string()),
                view.answered(),
                view.answers.len()
            );
            if let (Some(q), Some(n)) = (quorum, known)
                && q > n
            {
                found.push_str(&format!("; the quorum ({q}) exceeds the sentinels known ({n})"));
            }
            let cut_off = match (facts.config_number("min-replicas-to-write"), facts.config_number("min-replicas-max-lag"))
            {
                (Some(n), Some(lag)) if n > 0 => {
                    let limit = Duration::from_secs(u64::try_from(lag).unwrap_or(0)) + settings.watchdog_timeout;
                    figures.push(("overlap_cut_off", Figure::Duration(limit)));
                    format!(
                        "an old holder cut off with the old primary: up to {} after the cut (min-replicas-max-lag \
                         {lag} s, then its renewals are refused and its hold runs out within the watchdog timeout)",
                        ms(limit)
                    )
                }
                _ => "an old holder cut off with the old primary (a partition, not a crash): until the partition \
                      heals, as the old primary goes on renewing its hold (min-replicas-to-write 0, or not read)"
                    .to_owned(),
            };
            (down_after, "the sentinels' down-after-milliseconds", found, cut_off)
        }
        Deployment::Cluster => {
            let Some(node_timeout) = facts.config_number("cluster-node-timeout").and_then(millis) else {
                let reason = match facts.config_refused() {
                    Some(refusal) => format!("CONFIG GET cluster-node-timeout: {refusal}"),
                    None => "CONFIG GET cluster-node-timeout gave nothing".to_owned(),
                };
                return unknown(figures, reason, settings);
            };
            figures.push(("node_timeout", Figure::Duration(node_timeout)));
            let limit = node_timeout + settings.watchdog_timeout;
            figures.push(("overlap_cut_off", Figure::Duration(limit)));
            (
                node_timeout,
                "cluster-node-timeout",
                format!("Cluster: cluster-node-timeout {}", node_timeout.as_millis()),
                format!(
                    "an old holder cut off with the old primary: up to {} after the cut (a primary cut off from \
                     the majority refuses writes after cluster-node-timeout, then the hold runs out within the \
                     watchdog timeout)",
                    ms(limit)
                ),
            )
        }
    };
    let switch = detection + PROMOTION;
    figures.push(("unavailable", Figure::Duration(switch)));
    figures.push(("overlap", Figure::Duration(switch)));
    if let Some(n) = replicas {
        figures.push(("replicas", Figure::Number(n)));
    }
    let listed = replicas.map_or_else(|| "replicas not listed".to_owned(), |n| format!("{n} replica(s)"));
    let acks = settings.acks.replicas;
    found.push_str(&format!(
        "; after a primary dies, new acquisitions fail for about {} (detection + about {} of promotion); after \
         a lossy failover two holders overlap for about {} (the old holder is told at its client's switch), or \
         {cut_off}; watchdog timeout {}, command timeout {}, {listed}, {acks} acknowledgement(s) \
         asked",
        ms(switch),
        ms(PROMOTION),
        ms(switch),
        ms(settings.watchdog_timeout),
        ms(settings.command_timeout),
    ));
    let quorum_unreachable = matches!(
        (settings.deployment, facts.sentinel.as_ref()),
        (Deployment::Sentinel, Some(view))
            if view.number("quorum").zip(view.number("num-other-sentinels")).is_some_and(|(q, o)| q > o + 1)
    );
    let (verdict, meaning, fix) = if quorum_unreachable {
        (
            Verdict::Warn,
            "the quorum exceeds the sentinels that know the master: the primary is never failed over"
                .to_owned(),
            Some("add sentinels, or lower the quorum (SENTINEL SET <name> quorum N)".to_owned()),
        )
    } else if detection < settings.command_timeout {
        (
            Verdict::Warn,
            format!(
                "{detector} ({}) is shorter than the services' command timeout ({}), the longest round trip they \
                 ride out: a stall they would wait through (a fork, a long script, a busy network) fails the \
                 primary over, and a failover without acknowledgements can lose holds",
                ms(detection),
                ms(settings.command_timeout)
            ),
            Some(format!(
                "raise {detector} well above the command timeout (Sentinel's default is 30 s, the cluster's 15 s), \
                 or lower the services' command timeout"
            )),
        )
    } else if replicas.is_none_or(|n| n > 0) && acks == 0 {
        (
            Verdict::Warn,
            format!(
                "the services wait for no replica acknowledgement: a failover can lose a hold, and two holders \
                 then overlap for about {} (longer for a holder cut off with the old primary)",
                ms(switch)
            ),
            Some(
                "ClientBuilder::replica_acks(n, timeout) in the services; fencing tokens checked by the resource \
                 cover the overlap"
                    .to_owned(),
            ),
        )
    } else {
        (
            Verdict::Ok,
            format!(
                "failovers are detected after {} and take about {} in all; {}",
                ms(detection),
                ms(switch),
                if replicas == Some(0) {
                    "no replica to promote: a dead primary stays down until it returns".to_owned()
                } else {
                    "holds acknowledged by the promoted replica survive it".to_owned()
                }
            ),
            None,
        )
    };
    Check { found, figures, verdict, meaning, fix, ..blank(NAME, GUARANTEE, DOCS) }
}

/// The timings could not be read.
fn unknown(figures: Vec<(&'static str, Figure)>, reason: String, settings: &Settings) -> Check {
    let what = match settings.deployment {
        Deployment::Cluster => "cluster-node-timeout",
        _ => "the sentinels' down-after-milliseconds, failover-timeout and quorum",
    };
    Check {
        found: format!("{what} not readable"),
        figures,
        verdict: Verdict::Unknown {
            reason,
            confirm_by_hand: format!(
                "{what} in the service's console: detection well above the services' command timeout ({}); \
                 after a lossy failover two holders overlap for about the detection time plus a promotion",
                ms(settings.command_timeout)
            ),
        },
        meaning:
            "how long a failover takes bounds both the outage and the overlap of two holders after a lossy \
                  one"
            .to_owned(),
        ..blank(NAME, GUARANTEE, DOCS)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::doctor::facts::SentinelView;
    use crate::doctor::options::Acks;

    const ONE_REPLICA: &str =
        "role:master\r\nconnected_slaves:1\r\nslave0:ip=10.0.0.2,port=6379,state=online,offset=9,lag=0\r\n";

    fn settings(deployment: Deployment, acks: u32) -> Settings {
        Settings { deployment, acks: Acks { replicas: acks, aof: false }, ..Settings::default_for_tests() }
    }

    fn sentinel(down_after: &str, quorum: &str) -> SentinelView {
        let fields: BTreeMap<String, String> = [
            ("down-after-milliseconds", down_after),
            ("failover-timeout", "180000"),
            ("quorum", quorum),
            ("num-other-sentinels", "2"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        SentinelView {
            answers: vec![("s1:26379".into(), Ok(fields)), ("s2:26379".into(), Err("refused".into()))],
        }
    }

    fn on_sentinel(view: Option<SentinelView>, acks: u32) -> Check {
        let mut facts = Facts::from_parts(ONE_REPLICA, &[], None);
        facts.sentinel = view;
        run(&facts, &settings(Deployment::Sentinel, acks))
    }

    #[test]
    fn a_long_detection_with_acknowledgements_passes_with_figures() {
        let c = on_sentinel(Some(sentinel("30000", "2")), 1);
        assert_eq!(c.verdict, Verdict::Ok, "{c:?}");
        assert_eq!(c.figure("down_after"), Some(&Figure::Duration(Duration::from_secs(30))));
        assert_eq!(c.figure("unavailable"), Some(&Figure::Duration(Duration::from_secs(32))));
        assert_eq!(c.figure("sentinels"), Some(&Figure::Number(3)));
        assert_eq!(c.figure("sentinels_answered"), Some(&Figure::Number(1)));
        assert!(c.found.contains("until the partition heals"), "{}", c.found);
    }

    #[test]
    fn a_short_detection_or_no_acknowledgements_warns() {
        let c = on_sentinel(Some(sentinel("1000", "2")), 1);
        assert_eq!(c.verdict, Verdict::Warn);
        assert!(c.meaning.contains("shorter than the services' command timeout"), "{}", c.meaning);
        let c = on_sentinel(Some(sentinel("30000", "2")), 0);
        assert_eq!(c.verdict, Verdict::Warn);
        assert!(c.meaning.contains("overlap for about 32000 ms"), "{}", c.meaning);
        let c = on_sentinel(Some(sentinel("30000", "4")), 1);
        assert_eq!(c.verdict, Verdict::Warn);
        assert!(c.meaning.contains("never failed over"), "{}", c.meaning);
    }

    #[test]
    fn no_answer_or_config_refused_is_unknown_and_one_server_is_ok() {
        let none = SentinelView { answers: vec![("s1:26379".into(), Err("connection refused".into()))] };
        let c = on_sentinel(Some(none), 1);
        let Verdict::Unknown { reason, .. } = &c.verdict else { panic!("{c:?}") };
        assert!(reason.contains("s1:26379: connection refused"), "{reason}");
        let refused = Facts::from_parts(ONE_REPLICA, &[], Some("NOPERM no config"));
        let c = run(&refused, &settings(Deployment::Cluster, 1));
        assert!(matches!(c.verdict, Verdict::Unknown { .. }), "{c:?}");
        let c = run(&Facts::from_parts(ONE_REPLICA, &[], None), &settings(Deployment::Single, 0));
        assert_eq!(c.verdict, Verdict::Ok);
    }

    #[test]
    fn a_cluster_counts_the_node_timeout_and_the_watchdog() {
        let facts = Facts::from_parts(ONE_REPLICA, &[("cluster-node-timeout", "15000")], None);
        let c = run(&facts, &settings(Deployment::Cluster, 1));
        assert_eq!(c.verdict, Verdict::Ok, "{c:?}");
        assert_eq!(c.figure("overlap_cut_off"), Some(&Figure::Duration(Duration::from_secs(45))));
        // The testkit's 2 s against the default 3 s command timeout.
        let facts = Facts::from_parts(ONE_REPLICA, &[("cluster-node-timeout", "2000")], None);
        assert_eq!(run(&facts, &settings(Deployment::Cluster, 1)).verdict, Verdict::Warn);
        let quick = Settings { command_timeout: Duration::from_secs(1), ..settings(Deployment::Cluster, 1) };
        assert_eq!(run(&facts, &quick).verdict, Verdict::Ok);
        // INFO refused: the replicas unknown, never taken for none.
        let blind = Facts::from_parts("", &[("cluster-node-timeout", "15000")], None);
        let c = run(&blind, &settings(Deployment::Cluster, 0));
        assert_eq!(c.verdict, Verdict::Warn, "{c:?}");
        assert!(c.found.contains("replicas not listed"), "{}", c.found);
    }
}
