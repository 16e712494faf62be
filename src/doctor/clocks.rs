//! Item 4 of issue 37, as far as this version goes. The fencing design's
//! clock assumption (docs/guarantees.md, "Fencing tokens never go
//! backwards") is about the primary and any replica that may replace it:
//! their clocks must agree within a failover's duration. Reading a
//! replica's `TIME` needs a connection to the replica, which the client
//! does not keep (it talks to primaries only), so this version does not
//! read them: with replicas present the verdict is "unknown", said as
//! such, never a comparison of the primary with this machine's clock,
//! which is not the assumption.

use super::facts::Facts;
use super::options::Settings;
use super::report::{Check, Figure, Verdict, blank};

const NAME: &str = "clocks";
const GUARANTEE: &str = "Fencing tokens never go backwards";
const DOCS: &str = "docs/guarantees.md#fencing-tokens-never-go-backwards-issue-36";

/// The clock check of one primary.
pub(super) fn run(facts: &Facts, _: &Settings) -> Check {
    let replicas = facts.replicas();
    let figures = vec![("replicas", Figure::Number(replicas.len() as i64))];
    if facts.info("role").is_some() && replicas.is_empty() {
        return Check {
            found: "no replicas".to_owned(),
            figures,
            verdict: Verdict::Ok,
            meaning:
                "no replica can replace this primary, so no other clock mints after a loss; a restart on \
                      the same host keeps the fencing sequence rising unless its clock steps back"
                    .to_owned(),
            ..blank(NAME, GUARANTEE, DOCS)
        };
    }
    let addrs: Vec<String> = replicas.iter().map(|r| r.addr.clone()).collect();
    let (found, listed) = if facts.info("role").is_none() {
        (
            "the replicas could not be listed".to_owned(),
            format!(
                "; nor are the replicas listed (INFO replication: {})",
                facts.info_refused("replication").unwrap_or("no role field")
            ),
        )
    } else {
        (format!("{} replica(s): {}; their clocks not read", addrs.len(), addrs.join(", ")), String::new())
    };
    Check {
        found,
        figures,
        verdict: Verdict::Unknown {
            reason: format!(
                "replica clocks not read in this version: the client keeps no connection to replicas{listed}"
            ),
            confirm_by_hand: "that the primary and every replica that may replace it run NTP or chrony (slewing, \
                              not stepping) and agree within the failover's duration: compare `redis-cli TIME` \
                              on each, or `chronyc tracking` on each host"
                .to_owned(),
        },
        meaning: "after a failover that lost the fencing counter, the promoted replica mints from its own clock: \
                  a clock behind the old primary's by more than the failover's duration could mint a token \
                  below one already handed out"
            .to_owned(),
        fix: Some("synchronise the Redis hosts' clocks (NTP or chrony, slewed)".to_owned()),
        ..blank(NAME, GUARANTEE, DOCS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_clocks_are_unknown_and_no_replica_is_ok() {
        let settings = Settings::default_for_tests();
        let alone = run(&Facts::from_parts("role:master\r\nconnected_slaves:0\r\n", &[], None), &settings);
        assert_eq!(alone.verdict, Verdict::Ok);
        let info = "role:master\r\nconnected_slaves:1\r\nslave0:ip=10.0.0.2,port=6379,state=online,lag=0\r\n";
        let c = run(&Facts::from_parts(info, &[], None), &settings);
        let Verdict::Unknown { reason, .. } = &c.verdict else { panic!("{c:?}") };
        assert!(reason.starts_with("replica clocks not read in this version"), "{reason}");
        assert!(c.found.contains("10.0.0.2:6379"), "{}", c.found);
        // INFO refused: not ok.
        assert!(matches!(run(&Facts::from_parts("", &[], None), &settings).verdict, Verdict::Unknown { .. }));
    }
}
