//! The replicas' own settings. A failover promotes a replica with the
//! settings it has, not the old primary's: one that evicts (`maxmemory`
//! with an evicting policy) or keeps no AOF turns the new primary into one
//! the eviction or persistence check would have failed or warned about.
//! So each replica `INFO replication` lists is read as a primary is (one
//! round trip of `INFO` and `CONFIG GET`, on a connection of its own that
//! `store/connection.rs` opens with the primary's credentials and TLS
//! settings, closed after; the same connection reads its clock for
//! `clocks.rs`), and checked by `eviction.rs` and `persistence.rs` under
//! its own node, `replica <host>:<port>`.

use super::facts::Facts;
use super::options::Settings;
use super::report::{Check, Verdict};
use super::skew::{self, Clock, split};
use super::{eviction, persistence};
use crate::store::connection::Connector;
use crate::store::lanes::Session;

/// What one replica said, or why it could not be read.
pub(super) type Read = (String, Result<Facts, String>);

/// Each replica (`host:port`, as `INFO replication` lists them) of the
/// primary `session` talks to, on one connection of its own that
/// `connector` opens and closes after: its settings, and its clock against
/// the primary's (`skew.rs`).
pub(super) fn read(
    session: &mut Session<'_>,
    connector: &Connector,
    replicas: &[String],
) -> (Vec<Clock>, Vec<Read>) {
    replicas
        .iter()
        .map(|node| {
            let opened = split(node).and_then(|(host, port)| {
                connector.open_at(host, port).map_err(|e| format!("could not connect to the replica: {e}"))
            });
            let (reading, facts) = match opened {
                Ok(mut conn) => {
                    let facts = Facts::read_on(&mut conn);
                    let reading =
                        skew::measure(|| skew::time_on_session(session), || skew::time_on_conn(&mut conn));
                    conn.retire();
                    (reading, facts)
                }
                Err(reason) => (Err(reason.clone()), Err(reason)),
            };
            (Clock { node: node.clone(), role: "replica", reading }, (node.clone(), facts))
        })
        .unzip()
}

/// The eviction and persistence checks of each replica read.
pub(super) fn checks(replicas: &[Read], settings: &Settings) -> Vec<Check> {
    let runs: [fn(&Facts, &Settings) -> Check; 2] = [eviction::run, persistence::run];
    runs.iter()
        .flat_map(|run| {
            replicas.iter().map(move |(node, facts)| {
                let check = match facts {
                    Ok(facts) => run(facts, settings),
                    Err(reason) => unread(run(&Facts::default(), settings), reason),
                };
                Check {
                    node: Some(format!("replica {node}")),
                    meaning: format!("once this replica is promoted: {}", check.meaning),
                    ..check
                }
            })
        })
        .collect()
}

/// A check of a replica that could not be read: unknown, with the reason,
/// and what the check of nothing asks to confirm by hand.
fn unread(nothing: Check, reason: &str) -> Check {
    let confirm_by_hand = match nothing.verdict {
        Verdict::Unknown { confirm_by_hand, .. } => confirm_by_hand,
        _ => "the replica's settings, as the primary's".to_owned(),
    };
    Check { verdict: Verdict::Unknown { reason: reason.to_owned(), confirm_by_hand }, ..nothing }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_is_checked_under_its_own_node_and_one_not_read_is_unknown() {
        let settings = Settings::default_for_tests();
        let evicting =
            Facts::from_parts("", &[("maxmemory", "10485760"), ("maxmemory-policy", "allkeys-lru")], None);
        let replicas = vec![
            ("10.0.0.2:6379".to_owned(), Ok(evicting)),
            ("10.0.0.3:6379".to_owned(), Err("could not connect to the replica: refused".to_owned())),
        ];
        let checks = checks(&replicas, &settings);
        assert_eq!(checks.len(), 4);
        let eviction = &checks[0];
        assert_eq!((eviction.name, eviction.node.as_deref()), ("eviction", Some("replica 10.0.0.2:6379")));
        assert_eq!(eviction.verdict, Verdict::Fail, "{eviction:?}");
        assert!(eviction.meaning.starts_with("once this replica is promoted: "), "{}", eviction.meaning);
        let Verdict::Unknown { reason, confirm_by_hand } = &checks[1].verdict else {
            panic!("{:?}", checks[1])
        };
        assert!(reason.contains("refused"), "{reason}");
        assert!(!confirm_by_hand.is_empty());
        assert_eq!(checks[2].name, "persistence");
    }
}
