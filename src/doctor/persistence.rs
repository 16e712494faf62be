//! Item 2 of issue 37: what a restart of the server loses. Without an
//! append-only file a restart loses held locks (every one without
//! snapshots; with RDB snapshots the ones taken since the last); fencing
//! tokens are not lost since issue 36, as they follow the server's clock.

use super::facts::Facts;
use super::options::Settings;
use super::report::{Check, Figure, Verdict, blank};

const NAME: &str = "persistence";
const GUARANTEE: &str = "Mutual exclusion across a restart of Redis";
const DOCS: &str = "docs/guarantees.md#redis-restarts-without-persistence";
const TOKENS: &str = "fencing tokens are not lost: they follow the server's clock (issue 36)";

/// The persistence check of one primary.
pub(super) fn run(facts: &Facts, _: &Settings) -> Check {
    let aof = match facts.config("appendonly") {
        Some(value) => Some((value.eq_ignore_ascii_case("yes"), "CONFIG GET")),
        None => facts.info_number("aof_enabled").map(|n| (n == 1, "INFO persistence")),
    };
    let fsync = facts.config("appendfsync").map(str::to_ascii_lowercase);
    let save = facts.config("save").map(str::trim).map(str::to_owned);
    let mut figures = Vec::new();
    let Some((aof, source)) = aof else {
        let reason = format!(
            "CONFIG GET appendonly: {}; INFO persistence: {}",
            facts.config_refused().unwrap_or("not given"),
            facts.info_refused("persistence").unwrap_or("no aof_enabled field")
        );
        return Check {
            found: "appendonly not readable".to_owned(),
            verdict: Verdict::Unknown {
                reason,
                confirm_by_hand: "in the service's settings: whether append-only persistence (AOF) is on and \
                                  its fsync policy (appendfsync everysec or always), or how often snapshots are \
                                  taken"
                    .to_owned(),
            },
            meaning: format!("without AOF a restart loses held locks; {TOKENS}"),
            fix: Some("appendonly yes with appendfsync everysec (or always)".to_owned()),
            ..blank(NAME, GUARANTEE, DOCS)
        };
    };
    figures.push(("appendonly", Figure::Flag(aof)));
    if let Some(fsync) = &fsync {
        figures.push(("appendfsync", Figure::Text(fsync.clone())));
    }
    if let Some(save) = &save {
        figures.push(("save", Figure::Text(save.clone())));
    }
    let mut found = format!("appendonly {}", if aof { "yes" } else { "no" });
    if let Some(fsync) = &fsync {
        found.push_str(&format!(", appendfsync {fsync}"));
    }
    match &save {
        Some(save) if save.is_empty() => found.push_str(", save \"\" (no snapshots)"),
        Some(save) => found.push_str(&format!(", save \"{save}\"")),
        None => {}
    }
    found.push_str(&format!(" (from {source})"));
    let fix = || {
        Some(
            "appendonly yes with appendfsync everysec (or always), if holders must keep their locks across a \
             restart; fencing tokens checked by the resource cover what a restart still does"
                .to_owned(),
        )
    };
    let (verdict, meaning, fix) = match (aof, fsync.as_deref(), save.as_deref()) {
        (true, Some("always"), _) => {
            (Verdict::Ok, format!("a restart loses no acknowledged acquisition or release; {TOKENS}"), None)
        }
        (true, Some("everysec"), _) => (
            Verdict::Ok,
            format!(
                "a restart may lose the last second of writes: holds taken within it are lost (two holders \
                 until the old one is told), holds released within it come back until their lease runs out; \
                 {TOKENS}"
            ),
            None,
        ),
        (true, Some(_), _) => (
            Verdict::Warn,
            format!(
                "appendfsync no: the operating system flushes the file when it chooses (about 30 s on Linux), \
                 and a crash of the host loses the holds taken since; {TOKENS}"
            ),
            Some("appendfsync everysec (or always)".to_owned()),
        ),
        (true, None, _) => {
            return Check {
                found,
                figures,
                verdict: Verdict::Unknown {
                    reason: format!(
                        "AOF is on, but CONFIG GET appendfsync: {}",
                        facts.config_refused().unwrap_or("not given")
                    ),
                    confirm_by_hand: "in the service's settings: appendfsync is everysec or always"
                        .to_owned(),
                },
                meaning: format!("with appendfsync no a host crash loses about 30 s of holds; {TOKENS}"),
                fix: Some("appendfsync everysec (or always)".to_owned()),
                ..blank(NAME, GUARANTEE, DOCS)
            };
        }
        (false, Some(_) | None, Some("")) => (
            Verdict::Warn,
            format!(
                "no AOF and no snapshots: a restart loses every held lock, and another client can take one \
                 while its holder still works (until the holder is told, at its reconnection or lease); {TOKENS}"
            ),
            fix(),
        ),
        (false, _, Some(_)) => (
            Verdict::Warn,
            format!(
                "no AOF: a restart reloads the last RDB snapshot, so holds taken since it are lost (two holders \
                 until the old one is told) and holds released since it come back until their lease runs out; \
                 {TOKENS}"
            ),
            fix(),
        ),
        (false, _, None) => (
            Verdict::Warn,
            format!(
                "no AOF: a restart loses every hold taken since the last snapshot, if snapshots are taken at all \
                 (the schedule could not be read); {TOKENS}"
            ),
            fix(),
        ),
    };
    Check { found, figures, verdict, meaning, fix, ..blank(NAME, GUARANTEE, DOCS) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_on(info: &str, config: &[(&str, &str)], refused: Option<&str>) -> Check {
        run(&Facts::from_parts(info, config, refused), &Settings::default_for_tests())
    }

    #[test]
    fn aof_with_fsync_every_second_or_always_passes() {
        for fsync in ["everysec", "always"] {
            let c = run_on("", &[("appendonly", "yes"), ("appendfsync", fsync), ("save", "")], None);
            assert_eq!(c.verdict, Verdict::Ok, "{fsync}");
            assert!(c.meaning.contains("not lost"), "{}", c.meaning);
        }
        let c = run_on("", &[("appendonly", "yes"), ("appendfsync", "no")], None);
        assert_eq!(c.verdict, Verdict::Warn);
    }

    #[test]
    fn no_aof_warns_and_says_what_a_restart_loses() {
        let none = run_on("", &[("appendonly", "no"), ("appendfsync", "everysec"), ("save", "")], None);
        assert_eq!(none.verdict, Verdict::Warn);
        assert!(none.meaning.contains("every held lock"), "{}", none.meaning);
        let rdb = run_on("", &[("appendonly", "no"), ("save", "3600 1 300 100")], None);
        assert_eq!(rdb.verdict, Verdict::Warn);
        assert!(rdb.meaning.contains("snapshot"), "{}", rdb.meaning);
        assert_eq!(rdb.figure("save"), Some(&Figure::Text("3600 1 300 100".into())));
    }

    #[test]
    fn config_refused_reads_info_and_never_says_ok_blind() {
        let off = run_on("aof_enabled:0\r\n", &[], Some("NOPERM"));
        assert_eq!(off.verdict, Verdict::Warn);
        // AOF on, fsync policy unknown: not ok.
        let on = run_on("aof_enabled:1\r\n", &[], Some("NOPERM"));
        assert!(matches!(on.verdict, Verdict::Unknown { .. }), "{on:?}");
        let blind = run_on("", &[], Some("NOPERM"));
        assert!(matches!(blind.verdict, Verdict::Unknown { .. }), "{blind:?}");
    }
}
