//! Item 1 of issue 37: can the server evict a held lock? With `maxmemory`
//! set, every policy but `noeviction` can: `allkeys-*` any key,
//! `volatile-*` exactly the keys with a TTL, which every lock has.

use super::facts::Facts;
use super::options::Settings;
use super::report::{Check, Figure, Verdict, blank};

const NAME: &str = "eviction";
/// The guarantee an evicted lock breaks.
const GUARANTEE: &str = "Mutual exclusion while the lease holds";
const DOCS: &str = "docs/operations.md#eviction";

/// The eviction check of one primary.
pub(super) fn run(facts: &Facts, _: &Settings) -> Check {
    // CONFIG GET first; INFO memory (which managed services usually keep)
    // when CONFIG is refused.
    let (maxmemory, policy, source) =
        match (facts.config_number("maxmemory"), facts.config("maxmemory-policy")) {
            (Some(bytes), Some(policy)) => (bytes, policy.to_owned(), "CONFIG GET"),
            _ => match (facts.info_number("maxmemory"), facts.info("maxmemory_policy")) {
                (Some(bytes), Some(policy)) => (bytes, policy.to_owned(), "INFO memory"),
                _ => {
                    let reason = format!(
                        "CONFIG GET maxmemory-policy: {}; INFO memory: {}",
                        facts.config_refused().unwrap_or("not given"),
                        facts.info_refused("memory").unwrap_or("no maxmemory or maxmemory_policy field")
                    );
                    return Check {
                        found: "maxmemory and maxmemory-policy not readable".to_owned(),
                        verdict: Verdict::Unknown {
                            reason,
                            confirm_by_hand: "in the service's settings (parameter group, console): \
                                          maxmemory-policy is noeviction, or maxmemory is 0"
                                .to_owned(),
                        },
                        meaning:
                            "an eviction policy other than noeviction would drop held locks under memory \
                              pressure"
                                .to_owned(),
                        fix: Some("set maxmemory-policy noeviction (or confirm it is)".to_owned()),
                        ..blank(NAME, GUARANTEE, DOCS)
                    };
                }
            },
        };
    let figures = vec![
        ("maxmemory", Figure::Number(maxmemory)),
        ("maxmemory_policy", Figure::Text(policy.clone())),
        ("source", Figure::Text(source.to_owned())),
    ];
    let found =
        format!("maxmemory {maxmemory} ({}), maxmemory-policy {policy} (from {source})", size(maxmemory));
    let (verdict, meaning, fix) = if maxmemory == 0 {
        (
            Verdict::Ok,
            "no memory limit: nothing is evicted (the host's memory is the limit; past it the server is killed, \
             a restart: see persistence)"
                .to_owned(),
            None,
        )
    } else if policy == "noeviction" {
        (
            Verdict::Ok,
            "at the limit, writes are refused (OOM errors: acquisitions fail) and no held lock is evicted"
                .to_owned(),
            None,
        )
    } else {
        let which = if policy.starts_with("allkeys-") {
            "any key, held locks included"
        } else if policy.starts_with("volatile-") {
            "exactly the keys with a TTL, which every held lock has"
        } else {
            "keys as this policy chooses, held locks included"
        };
        (
            Verdict::Fail,
            format!(
                "at the memory limit {policy} evicts {which}: a lock evicted while held is free to another \
                 client while its holder still works (silent loss of mutual exclusion)"
            ),
            Some(
                "set maxmemory-policy noeviction on the servers that hold locks (or keep locks on a server of \
                 their own with noeviction)"
                    .to_owned(),
            ),
        )
    };
    Check { found, figures, verdict, meaning, fix, ..blank(NAME, GUARANTEE, DOCS) }
}

/// Bytes in words: `10 MiB`.
fn size(bytes: i64) -> String {
    const MIB: i64 = 1024 * 1024;
    const GIB: i64 = 1024 * MIB;
    match bytes {
        0 => "no limit".to_owned(),
        b if b % GIB == 0 => format!("{} GiB", b / GIB),
        b if b % MIB == 0 => format!("{} MiB", b / MIB),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(info: &str, config: &[(&str, &str)], refused: Option<&str>) -> Check {
        run(&Facts::from_parts(info, config, refused), &Settings::default_for_tests())
    }

    #[test]
    fn a_limit_with_an_evicting_policy_fails() {
        for policy in ["allkeys-lru", "allkeys-random", "volatile-ttl", "volatile-lfu"] {
            let c = verdict("", &[("maxmemory", "10485760"), ("maxmemory-policy", policy)], None);
            assert_eq!(c.verdict, Verdict::Fail, "{policy}");
            assert!(c.found.contains("10 MiB"), "{}", c.found);
            assert!(c.fix.is_some());
        }
        let volatile = verdict("", &[("maxmemory", "1"), ("maxmemory-policy", "volatile-lru")], None);
        assert!(volatile.meaning.contains("with a TTL"), "{}", volatile.meaning);
        let big = verdict("", &[("maxmemory", "2147483648"), ("maxmemory-policy", "allkeys-lfu")], None);
        assert!(big.found.contains("(2 GiB)"), "{}", big.found);
    }

    #[test]
    fn no_limit_or_noeviction_passes() {
        let unlimited = verdict("", &[("maxmemory", "0"), ("maxmemory-policy", "allkeys-lru")], None);
        assert_eq!(unlimited.verdict, Verdict::Ok);
        let noeviction = verdict("", &[("maxmemory", "100"), ("maxmemory-policy", "noeviction")], None);
        assert_eq!(noeviction.verdict, Verdict::Ok);
        assert_eq!(noeviction.fix, None);
    }

    #[test]
    fn config_refused_falls_back_on_info_and_else_is_unknown() {
        let info = "maxmemory:1048576\r\nmaxmemory_policy:allkeys-lru\r\n";
        let c = verdict(info, &[], Some("NOPERM no config"));
        assert_eq!(c.verdict, Verdict::Fail);
        assert_eq!(c.figure("source"), Some(&Figure::Text("INFO memory".into())));
        let c = verdict("used_memory:100\r\n", &[], Some("ERR unknown command 'CONFIG'"));
        let Verdict::Unknown { reason, confirm_by_hand } = &c.verdict else { panic!("{c:?}") };
        assert!(reason.contains("unknown command"), "{reason}");
        assert!(confirm_by_hand.contains("noeviction"), "{confirm_by_hand}");
    }
}
