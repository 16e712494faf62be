//! Item 9 of issue 37, on a Redis Cluster only: per primary, the slot
//! coverage as that primary sees it (`CLUSTER SLOTS`: all 16 384 slots
//! served) and the slots it is migrating or importing (its own line of
//! `CLUSTER NODES`, `[slot->-node]` and `[slot-<-node]`); and for the
//! names given ([`DoctorOptions::names`](crate::DoctorOptions::names)),
//! whether every key and channel derived from each name hashes to the lock
//! key's slot.
//!
//! The rule for names is `names.rs`'s: a name without braces, or with a
//! hash tag (`{user}:1`), keeps every derived key in its slot; a name whose
//! braces make no tag (`a{b`, `x{}y`, a stray `}` as in `a}b`) does not,
//! and a cluster client refuses it. The parsing is pure and unit-tested.

use redis::Value;

use super::report::{Check, Figure, Verdict, blank};
use crate::admin::layout::Companions;
use crate::admin::send;
use crate::error::Result;
use crate::names::{self, LockKeys};
use crate::store::lanes::Session;
use crate::store::routes::Routes;
use crate::store::slots::{self, SLOTS};

const NAME: &str = "cluster";
const NAMES: &str = "cluster_names";
const GUARANTEE: &str = "What a Redis Cluster shard failover and resharding do to locks";
const DOCS: &str = "docs/operations.md#cluster";

/// What one primary said of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct View {
    /// Slots served, by `CLUSTER SLOTS`, or its refusal.
    pub(super) covered: std::result::Result<usize, String>,
    /// Slots this primary migrates or imports (`CLUSTER NODES`), or its
    /// refusal.
    pub(super) moving: std::result::Result<Vec<Moving>, String>,
}

/// A slot on the move, as its primary's `CLUSTER NODES` line shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Moving {
    pub(super) slot: u16,
    /// Migrating out (`->-`), or importing (`-<-`).
    pub(super) out: bool,
    /// The other node: `host:port` when `CLUSTER NODES` lists it, else its id.
    pub(super) peer: String,
}

impl Default for Moving {
    fn default() -> Self {
        Moving { slot: 0, out: true, peer: String::new() }
    }
}

/// Reads one primary's view, in one round trip.
///
/// # Errors
///
/// A connection failure; a refused command is no error.
pub(super) fn read(session: &mut Session<'_>, host: &str) -> Result<View> {
    let commands = [redis::cmd("CLUSTER").arg("SLOTS").clone(), redis::cmd("CLUSTER").arg("NODES").clone()];
    let mut replies = send(session, &commands)?.into_iter();
    let covered = match replies.next().unwrap_or(Value::Nil) {
        Value::ServerError(e) => Err(format!("CLUSTER SLOTS: {e}")),
        reply => slots::parse_cluster_slots(&reply, host)
            .map(|ranges| ranges.iter().map(|r| usize::from(r.last - r.first) + 1).sum())
            .ok_or_else(|| "CLUSTER SLOTS: an unexpected reply".to_owned()),
    };
    let moving = match replies.next().unwrap_or(Value::Nil) {
        Value::ServerError(e) => Err(format!("CLUSTER NODES: {e}")),
        Value::BulkString(bytes) => Ok(parse_moving(&String::from_utf8_lossy(&bytes))),
        Value::VerbatimString { text, .. } | Value::SimpleString(text) => Ok(parse_moving(&text)),
        other => Err(format!("CLUSTER NODES: an unexpected reply: {other:?}")),
    };
    Ok(View { covered, moving })
}

/// The cluster checks: one per primary (sorted by address) and, when
/// names are given, one for them; none on a single server or through
/// Sentinel.
///
/// # Errors
///
/// A connection failure; refused commands are the checks' "unknown".
pub(super) fn checks(routes: &Routes, given: &[String]) -> Result<Vec<Check>> {
    let Routes::Cluster(cluster) = routes else { return Ok(Vec::new()) };
    let mut shards = cluster.shards();
    shards.sort_by(|a, b| a.addr.cmp(&b.addr));
    let mut checks = Vec::new();
    for shard in shards {
        let view = read(&mut shard.session()?, &shard.addr.0)?;
        checks.push(Check { node: Some(format!("{}:{}", shard.addr.0, shard.addr.1)), ..run(&view) });
    }
    if !given.is_empty() {
        checks.push(names_check(given));
    }
    Ok(checks)
}

/// The `myself` line's migrating and importing slots in `CLUSTER NODES`
/// text, their peers named by address where listed.
pub(super) fn parse_moving(text: &str) -> Vec<Moving> {
    let lines: Vec<Vec<&str>> = text.lines().map(|line| line.split_whitespace().collect()).collect();
    let addr_of = |id: &str| {
        lines
            .iter()
            .find(|fields| fields.first() == Some(&id))
            .and_then(|fields| fields.get(1))
            .map(|addr| addr.split(['@', ',']).next().unwrap_or(addr).to_owned())
            .unwrap_or_else(|| id.to_owned())
    };
    let Some(myself) =
        lines.iter().find(|fields| fields.get(2).is_some_and(|flags| flags.contains("myself")))
    else {
        return Vec::new();
    };
    myself
        .iter()
        .skip(8)
        .filter_map(|field| {
            let inner = field.strip_prefix('[')?.strip_suffix(']')?;
            let (slot, out, peer) = if let Some((slot, peer)) = inner.split_once("->-") {
                (slot, true, peer)
            } else {
                let (slot, peer) = inner.split_once("-<-")?;
                (slot, false, peer)
            };
            Some(Moving { slot: slot.parse().ok()?, out, peer: addr_of(peer) })
        })
        .collect()
}

/// The cluster check of one primary.
pub(super) fn run(view: &View) -> Check {
    let mut figures = Vec::new();
    let mut found = Vec::new();
    let mut unknown = Vec::new();
    match &view.covered {
        Ok(covered) => {
            figures.push(("slots_served", Figure::Number(*covered as i64)));
            found.push(format!("{covered} of {SLOTS} slots served (this primary's slot map)"));
        }
        Err(e) => unknown.push(e.clone()),
    }
    match &view.moving {
        Ok(moving) => {
            figures.push(("slots_moving", Figure::Number(moving.len() as i64)));
            if moving.is_empty() {
                found.push("no slot migrating or importing here".to_owned());
            } else {
                let list: Vec<String> = moving
                    .iter()
                    .map(|m| {
                        format!(
                            "slot {} {} {}",
                            m.slot,
                            if m.out { "migrating to" } else { "importing from" },
                            m.peer
                        )
                    })
                    .collect();
                found.push(list.join(", "));
            }
        }
        Err(e) => unknown.push(e.clone()),
    }
    let found =
        if found.is_empty() { "the cluster's state not readable".to_owned() } else { found.join("; ") };
    let (verdict, meaning, fix) = if view.covered.as_ref().is_ok_and(|c| *c < SLOTS) {
        (
            Verdict::Fail,
            "some slots are served by no node: every lock whose name hashes there cannot be taken or released \
             (CLUSTERDOWN, or a connection error) until they are assigned"
                .to_owned(),
            Some("assign the uncovered slots (`redis-cli --cluster fix`), or bring their node back".to_owned()),
        )
    } else if view.moving.as_ref().is_ok_and(|m| !m.is_empty()) {
        (
            Verdict::Warn,
            "a slot is on the move: a lock whose name hashes there is followed with ASK (one more round trip per \
             call), and a script whose keys are split by the move is retried (TRYAGAIN) until it ends"
                .to_owned(),
            Some(
                "let the resharding finish (`redis-cli --cluster fix` for one left half-way); check again after"
                    .to_owned(),
            ),
        )
    } else if !unknown.is_empty() {
        return Check {
            found,
            figures,
            verdict: Verdict::Unknown {
                reason: unknown.join("; "),
                confirm_by_hand:
                    "`redis-cli --cluster check <node>`: every slot covered, none open (migrating or \
                                  importing)"
                        .to_owned(),
            },
            meaning: "slot coverage and moving slots could not be read".to_owned(),
            ..blank(NAME, GUARANTEE, DOCS)
        };
    } else {
        (Verdict::Ok, "every slot is served and none is moving here".to_owned(), None)
    };
    Check { found, figures, verdict, meaning, fix, ..blank(NAME, GUARANTEE, DOCS) }
}

/// Every key and channel derived from `name`, by role, the lock key first.
pub(super) fn derived(name: &str) -> Vec<(&'static str, String)> {
    let c = Companions::of(name);
    let keys = LockKeys::new(&std::sync::Arc::from(name), "client");
    vec![
        ("lock key", name.to_owned()),
        ("unlock channel", c.lock_channel),
        ("read-write channel", c.rw_channel),
        ("semaphore channel", c.semaphore_channel),
        ("fencing counter", c.token),
        ("queue", c.queue),
        ("claim marker", c.marker),
        ("grants", keys.grants.to_string()),
        ("listening channel", keys.listening.to_string()),
        ("wake channels", keys.wake_channel.to_string()),
        ("unlock latches", names::unlock_latch(name, 0, 0)),
        ("fair queue", c.fair_queue),
        ("fair deadlines", c.fair_timeouts),
        ("fair grants", c.fair_grants),
        ("semaphore permits", c.permits),
        ("waiting writers", c.writers),
    ]
}

/// Whether each name's derived keys share the lock key's slot: one check
/// for all the names. The count-down latch's channel is Redisson's,
/// always in braces (`redisson_countdownlatch__channel__{<name>}`): for a
/// name with its own tag it falls elsewhere, and a cluster client refuses
/// that name as a latch only, which warns.
pub(super) fn names_check(given: &[String]) -> Check {
    let mut split = Vec::new();
    let mut refused = Vec::new();
    let mut no_latch = Vec::new();
    let mut fine = Vec::new();
    for name in given {
        if let Err(e) = names::validate_name(name) {
            refused.push(format!("{name:?}: {e}"));
            continue;
        }
        let slot = slots::key_slot(name.as_bytes());
        let apart: Vec<String> = derived(name)
            .into_iter()
            .filter(|(_, key)| slots::key_slot(key.as_bytes()) != slot)
            .map(|(role, key)| format!("{role} {key} (slot {})", slots::key_slot(key.as_bytes())))
            .collect();
        let latch = Companions::of(name).latch_channel;
        if !apart.is_empty() {
            split.push(format!("{name:?} (lock key in slot {slot}; {})", apart.join(", ")));
        } else if slots::key_slot(latch.as_bytes()) != slot {
            no_latch.push(format!(
                "{name:?} (slot {slot}; its count-down latch channel {latch} in slot {})",
                slots::key_slot(latch.as_bytes())
            ));
        } else {
            fine.push(format!("{name:?} (slot {slot})"));
        }
    }
    let figures = vec![
        ("names", Figure::Number(given.len() as i64)),
        ("names_split", Figure::Number((split.len() + refused.len()) as i64)),
        ("names_not_latches", Figure::Number(no_latch.len() as i64)),
    ];
    let mut found = Vec::new();
    if !fine.is_empty() {
        found.push(format!("every derived key in the lock key's slot: {}", fine.join(", ")));
    }
    if !no_latch.is_empty() {
        found.push(format!("every lock's key in its slot, not a latch's: {}", no_latch.join(", ")));
    }
    if !split.is_empty() {
        found.push(format!("split: {}", split.join("; ")));
    }
    if !refused.is_empty() {
        found.push(format!("refused: {}", refused.join("; ")));
    }
    let (verdict, meaning, fix) = if !split.is_empty() || !refused.is_empty() {
        (
            Verdict::Fail,
            "a name whose keys would fall in different slots cannot be locked on a Redis Cluster: the client \
             refuses it (InvalidArgument) before any I/O"
                .to_owned(),
            Some(
                "rename: no braces, or one {tag} with something inside (`{orders}:42`); names starting with \
                 a derived key's prefix are reserved"
                    .to_owned(),
            ),
        )
    } else if !no_latch.is_empty() {
        (
            Verdict::Warn,
            "every lock kind keeps these names' keys in one slot, but a name with its own {tag} cannot be a \
             count-down latch on a Redis Cluster (Redisson's latch channel wraps it in a second pair of \
             braces): the client refuses it as a latch"
                .to_owned(),
            Some("for a count-down latch, use a name without braces".to_owned()),
        )
    } else {
        (
            Verdict::Ok,
            "each name's lock key, channels, fencing counter, queue and the rest hash to one slot: one script \
             call reaches them all"
                .to_owned(),
            None,
        )
    };
    Check { found: found.join("; "), figures, verdict, meaning, fix, ..blank(NAMES, GUARANTEE, DOCS) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host replica e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 [5461-<-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1] [93->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]
";

    #[test]
    fn moving_slots_are_read_from_the_myself_line() {
        assert_eq!(
            parse_moving(NODES),
            [
                Moving { slot: 5461, out: false, peer: "127.0.0.1:30002".into() },
                Moving { slot: 93, out: true, peer: "292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f".into() },
            ]
        );
        assert!(parse_moving("").is_empty());
    }

    #[test]
    fn coverage_and_moving_slots_decide_the_verdict() {
        let view = |covered: usize, moving: Vec<Moving>| View { covered: Ok(covered), moving: Ok(moving) };
        assert_eq!(run(&view(SLOTS, vec![])).verdict, Verdict::Ok);
        assert_eq!(run(&view(SLOTS, vec![Moving::default()])).verdict, Verdict::Warn);
        assert_eq!(run(&view(SLOTS - 1, vec![])).verdict, Verdict::Fail);
        let refused = View { covered: Err("NOPERM".into()), moving: Err("NOPERM".into()) };
        assert!(matches!(run(&refused).verdict, Verdict::Unknown { .. }));
    }

    #[test]
    fn names_split_exactly_when_their_braces_make_no_tag() {
        let names = |names: &[&str]| names_check(&names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>());
        assert_eq!(names(&["orders:42", "job:nightly"]).verdict, Verdict::Ok);
        let tagged = names(&["orders:42", "{user}:1", "job{nightly}"]);
        assert_eq!(tagged.verdict, Verdict::Warn, "{tagged:?}");
        assert_eq!(tagged.figure("names_not_latches"), Some(&Figure::Number(2)));
        for bad in ["a{b", "x{}y", "a}b"] {
            let c = names(&["fine", "{tagged}", bad]);
            assert_eq!(c.verdict, Verdict::Fail, "{bad}: {c:?}");
            assert!(c.found.contains("split"), "{c:?}");
            assert_eq!(c.figure("names_split"), Some(&Figure::Number(1)));
        }
        assert_eq!(names(&["redisson_lock_token:x"]).verdict, Verdict::Fail);
    }
}
