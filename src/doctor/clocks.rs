//! Item 4 of issue 37: the clocks the fencing tokens rest on. A token is
//! the larger of the counter's next value and the minting server's `TIME`
//! (docs/guarantees.md, "Fencing tokens never go backwards"), so after a
//! loss of the counter (a failover to a replica that lacked it, a restart
//! without persistence) the sequence keeps rising if the server minting
//! next has a clock not behind the old one by more than the outage. An
//! automatic failover's outage lasts at least its detection time (the
//! sentinels' `down-after-milliseconds`, `cluster-node-timeout`): that is
//! the tolerance; a promotion by hand (one server with replicas) is given
//! one second.
//!
//! What is compared is what the assumption is about: each replica's clock
//! against its primary's, and on a Redis Cluster each primary's against
//! the first's (a slot that moves takes its counter along, but a lost
//! counter is minted again by whichever primary serves the slot). Never
//! this machine's clock. The readings (`skew.rs`) are taken before the
//! check runs; the check is a pure function of them.

use std::time::Duration;

use super::facts::Facts;
use super::failover;
use super::options::Settings;
use super::report::{Check, Figure, Verdict, blank};
use super::skew::Clock;

const NAME: &str = "clocks";
const GUARANTEE: &str = "Fencing tokens never go backwards";
const DOCS: &str = "docs/guarantees.md#fencing-tokens-never-go-backwards-issue-36";

/// The tolerance when replicas are promoted by hand: a promotion within a
/// second of the loss is about the quickest an operator manages.
const BY_HAND: Duration = Duration::from_secs(1);

/// Clocks further apart than this are not kept by NTP or chrony, which hold
/// hosts within a few milliseconds of each other.
const SYNCED: Duration = Duration::from_millis(50);

const MEANING: &str = "after a loss of the fencing counter (a failover to a replica that lacked it, a restart \
                       without persistence) the server minting next starts from its own clock: a clock behind \
                       the old one by more than the outage could mint a token below one already handed out";

/// The clock check of one primary.
pub(super) fn run(facts: &Facts, settings: &Settings) -> Check {
    let listed = facts.info("role").is_some();
    let replicas = facts.replicas().len();
    let detection = failover::detection(facts, settings);
    let tolerance = detection.unwrap_or(BY_HAND);
    let read: Vec<(&Clock, Duration, Duration)> = facts
        .clocks
        .iter()
        .filter_map(|clock| {
            let offset = clock.reading.as_ref().ok()?;
            Some((clock, micros(offset.surely_behind_us()), micros(offset.surely_apart_us())))
        })
        .collect();
    let unread: Vec<String> = facts
        .clocks
        .iter()
        .filter_map(|c| c.reading.as_ref().err().map(|e| format!("{} {}: {e}", c.role, c.node)))
        .collect();
    let most_behind = read.iter().map(|(_, behind, _)| *behind).max().unwrap_or_default();
    let widest = read.iter().map(|(_, _, apart)| *apart).max().unwrap_or_default();
    let figures = vec![
        ("replicas", Figure::Number(replicas as i64)),
        ("clocks_read", Figure::Number(read.len() as i64)),
        ("tolerance", Figure::Duration(tolerance)),
        ("most_behind", Figure::Duration(most_behind)),
        ("widest_apart", Figure::Duration(widest)),
    ];
    let mut found: Vec<String> = facts.clocks.iter().map(shown).collect();
    if facts.clocks.is_empty() {
        found.push(if listed { "no replicas".to_owned() } else { "no clock read".to_owned() });
    }
    if !listed {
        found.push(format!(
            "the replicas could not be listed (INFO replication: {})",
            facts.info_refused("replication").unwrap_or("no role field")
        ));
    }
    let tolerance_is = match detection {
        Some(d) => format!("the failover's detection time, {} ms", d.as_millis()),
        None => format!("{} ms, for a promotion by hand", BY_HAND.as_millis()),
    };
    let found = format!("{}; tolerance {tolerance_is}", found.join("; "));
    let check = Check { found, figures, meaning: MEANING.to_owned(), ..blank(NAME, GUARANTEE, DOCS) };
    if most_behind > tolerance {
        let behind: Vec<String> = read
            .iter()
            .filter(|(_, behind, _)| *behind > tolerance)
            .map(|(clock, behind, _)| format!("{} {} ({} ms)", clock.role, clock.node, behind.as_millis()))
            .collect();
        return Check {
            verdict: Verdict::Fail,
            meaning: format!(
                "{} behind by more than {tolerance_is}: after a loss of the counter, a token minted there can \
                 be below one already handed out, and a resource that checks tokens refuses the new holder or, \
                 worse, the old one's late write passes",
                behind.join(", ")
            ),
            fix: Some(
                "synchronise the Redis hosts' clocks (NTP or chrony on every host, slewing, not stepping); \
                 confirm with `chronyc tracking` on each"
                    .to_owned(),
            ),
            ..check
        };
    }
    if !listed || !unread.is_empty() {
        return Check {
            verdict: Verdict::Unknown {
                reason: if unread.is_empty() {
                    format!(
                        "the replicas could not be listed, so their clocks were not read (INFO replication: {})",
                        facts.info_refused("replication").unwrap_or("no role field")
                    )
                } else {
                    format!("not read: {}", unread.join("; "))
                },
                confirm_by_hand: "that the primary and every replica that may replace it run NTP or chrony \
                                  (slewing, not stepping) and agree within the failover's detection time: compare \
                                  `redis-cli TIME` on each, or `chronyc tracking` on each host"
                    .to_owned(),
            },
            fix: Some("synchronise the Redis hosts' clocks (NTP or chrony, slewed)".to_owned()),
            ..check
        };
    }
    if widest > SYNCED {
        return Check {
            verdict: Verdict::Warn,
            meaning: format!(
                "clocks {} ms apart are not synchronised (NTP or chrony keep hosts within a few ms); within the \
                 tolerance today, but a clock that drifts further can mint tokens below ones handed out",
                widest.as_millis()
            ),
            fix: Some("run NTP or chrony (slewing) on every Redis host".to_owned()),
            ..check
        };
    }
    let meaning = if facts.clocks.is_empty() {
        "no other server mints after a loss: a restart on the same host keeps the fencing sequence rising \
         unless its clock steps back"
            .to_owned()
    } else {
        format!(
            "every clock read agrees with this primary's within {} ms, well inside {tolerance_is}: the fencing \
             design's clock assumption holds",
            SYNCED.as_millis()
        )
    };
    Check { meaning, ..check }
}

/// One reading, for the report: `replica 10.0.0.2:6379 0.1 ms ahead
/// (±0.2 ms)`.
fn shown(clock: &Clock) -> String {
    match &clock.reading {
        Ok(offset) => {
            let side = if offset.ahead_us < 0 { "behind" } else { "ahead" };
            format!(
                "{} {} {:.1} ms {side} (±{:.1} ms)",
                clock.role,
                clock.node,
                offset.ahead_us.unsigned_abs() as f64 / 1000.0,
                offset.within_us as f64 / 1000.0
            )
        }
        Err(e) => format!("{} {} not read ({e})", clock.role, clock.node),
    }
}

fn micros(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::options::Deployment;
    use crate::doctor::skew::Offset;

    const ONE_REPLICA: &str =
        "role:master\r\nconnected_slaves:1\r\nslave0:ip=10.0.0.2,port=6379,state=online,lag=0\r\n";

    fn with(clocks: Vec<Clock>, config: &[(&str, &str)]) -> Facts {
        let mut facts = Facts::from_parts(ONE_REPLICA, config, None);
        facts.clocks = clocks;
        facts
    }

    fn replica(ahead_us: i64, within_us: i64) -> Clock {
        Clock { node: "10.0.0.2:6379".into(), role: "replica", reading: Ok(Offset { ahead_us, within_us }) }
    }

    #[test]
    fn no_replica_is_ok_and_agreeing_clocks_are_ok() {
        let settings = Settings::default_for_tests();
        let alone = run(&Facts::from_parts("role:master\r\nconnected_slaves:0\r\n", &[], None), &settings);
        assert_eq!(alone.verdict, Verdict::Ok, "{alone:?}");
        let agreeing = run(&with(vec![replica(-300, 150)], &[]), &settings);
        assert_eq!(agreeing.verdict, Verdict::Ok, "{agreeing:?}");
        assert!(
            agreeing.found.contains("replica 10.0.0.2:6379 0.3 ms behind (±0.1 ms)"),
            "{}",
            agreeing.found
        );
        assert_eq!(agreeing.figure("tolerance"), Some(&Figure::Duration(BY_HAND)));
    }

    #[test]
    fn a_clock_behind_by_more_than_the_detection_time_fails_and_apart_warns() {
        let mut settings = Settings::default_for_tests();
        settings.deployment = Deployment::Cluster;
        let config = [("cluster-node-timeout", "5000")];
        let behind = run(&with(vec![replica(-6_000_000, 1_000)], &config), &settings);
        assert_eq!(behind.verdict, Verdict::Fail, "{behind:?}");
        assert_eq!(behind.figure("tolerance"), Some(&Figure::Duration(Duration::from_secs(5))));
        assert_eq!(behind.figure("most_behind"), Some(&Figure::Duration(Duration::from_millis(5_999))));
        // Ahead by as much: no token goes back at this failover, but the
        // clocks are not synchronised.
        let ahead = run(&with(vec![replica(6_000_000, 1_000)], &config), &settings);
        assert_eq!(ahead.verdict, Verdict::Warn, "{ahead:?}");
        let drifting = run(&with(vec![replica(-80_000, 1_000)], &config), &settings);
        assert_eq!(drifting.verdict, Verdict::Warn, "{drifting:?}");
        // Within the bracket: not surely apart.
        let close = run(&with(vec![replica(-60_000, 20_000)], &config), &settings);
        assert_eq!(close.verdict, Verdict::Ok, "{close:?}");
    }

    #[test]
    fn an_unread_clock_or_unlisted_replicas_are_unknown_never_ok_but_a_fail_still_fails() {
        let settings = Settings::default_for_tests();
        let unread = Clock { node: "10.0.0.2:6379".into(), role: "replica", reading: Err("refused".into()) };
        let c = run(&with(vec![unread.clone()], &[]), &settings);
        let Verdict::Unknown { reason, .. } = &c.verdict else { panic!("{c:?}") };
        assert!(reason.contains("replica 10.0.0.2:6379: refused"), "{reason}");
        let failing = Clock { node: "10.0.0.3:6379".into(), ..replica(-2_000_000, 10) };
        assert_eq!(run(&with(vec![unread, failing], &[]), &settings).verdict, Verdict::Fail);
        // INFO refused: not ok.
        assert!(matches!(run(&Facts::from_parts("", &[], None), &settings).verdict, Verdict::Unknown { .. }));
    }
}
