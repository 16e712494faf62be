//! Item 7 of issue 37: which server, which version, and what it lacks of
//! what keyholder can use: below Redis 5 keyholder does not run; below
//! Redis 6 holders are not told of a foreign removal at once (client-side
//! caching), below 7.0 a cluster has no shard channels (`SPUBLISH`), below
//! 7.2 there is no `WAITAOF` (Valkey has all of them). And how long a
//! script may run before the server answers `BUSY` to everyone, against
//! the services' command timeout.

use std::time::Duration;

use super::facts::Facts;
use super::options::Settings;
use super::report::{Check, Figure, Verdict, blank};

const NAME: &str = "server";
const GUARANTEE: &str = "Requirements: Redis 5 or newer, or Valkey";
const DOCS: &str = "docs/operations.md#server";

/// The oldest Redis keyholder supports.
const MINIMUM: (u32, u32) = (5, 0);

/// A Redis or Valkey version, `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Version(pub(super) u32, pub(super) u32, pub(super) u32);

impl Version {
    /// `7.0.15`, `255.255.255` (an unstable build); `None` for anything
    /// else.
    pub(super) fn parse(text: &str) -> Option<Version> {
        let mut parts = text.trim().split('.').map(|part| part.parse::<u32>().ok());
        let major = parts.next()??;
        let minor = parts.next().unwrap_or(Some(0))?;
        let patch = parts.next().unwrap_or(Some(0))?;
        Some(Version(major, minor, patch))
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// The server check of one primary.
pub(super) fn run(facts: &Facts, settings: &Settings) -> Check {
    let valkey = facts.info("server_name").is_some_and(|name| name.eq_ignore_ascii_case("valkey"))
        || facts.info("valkey_version").is_some();
    let (server, field) = if valkey { ("valkey", "valkey_version") } else { ("redis", "redis_version") };
    let Some(version) = facts.info(field).and_then(Version::parse) else {
        let reason = match facts.info_refused("server") {
            Some(refusal) => format!("INFO server: {refusal}"),
            None => format!("INFO server has no readable {field}"),
        };
        return Check {
            found: "the server's version not readable".to_owned(),
            verdict: Verdict::Unknown {
                reason,
                confirm_by_hand:
                    "the engine and version in the service's console: Redis 5.0 or newer (7.0+ for \
                                  shard channels on a cluster, 7.2+ for WAITAOF), or Valkey"
                        .to_owned(),
            },
            meaning: "keyholder runs on Redis 5 or newer, or Valkey".to_owned(),
            ..blank(NAME, GUARANTEE, DOCS)
        };
    };
    // Valkey has had every feature below since its first release.
    let at_least = |major: u32, minor: u32| valkey || version >= Version(major, minor, 0);
    // (the feature, what its absence costs)
    let mut lacks: Vec<(&str, &str)> = Vec::new();
    if !at_least(6, 0) {
        lacks.push((
            "CLIENT TRACKING",
            "client-side caching (Redis 6.0+): a holder hears of a foreign removal at its next renewal",
        ));
    }
    if !at_least(7, 0) {
        lacks.push(("SPUBLISH", "SPUBLISH (Redis 7.0+): on a cluster, waiters listen on ordinary channels"));
        lacks.push((
            "script flags",
            "script flags (Redis 7.0+): nothing lost, keyholder's scripts declare none and run the same on 5.0",
        ));
    }
    let waitaof = at_least(7, 2);
    if !waitaof {
        lacks.push(("WAITAOF", "WAITAOF (Redis 7.2+ or Valkey): replica_acks_aof is refused"));
    }
    let threshold = facts
        .config_number("busy-reply-threshold")
        .or_else(|| facts.config_number("lua-time-limit"))
        .and_then(|ms| u64::try_from(ms).ok())
        .map(Duration::from_millis);
    let mut figures =
        vec![("server", Figure::Text(server.to_owned())), ("version", Figure::Text(version.to_string()))];
    let names: Vec<&str> = lacks.iter().map(|(name, _)| *name).collect();
    figures.push(("lacks", Figure::Text(names.join(","))));
    if let Some(threshold) = threshold {
        figures.push(("busy_reply_threshold", Figure::Duration(threshold)));
    }
    figures.push(("command_timeout", Figure::Duration(settings.command_timeout)));
    let mut found = format!("{} {version}", if valkey { "Valkey" } else { "Redis" });
    if lacks.is_empty() {
        found.push_str(", lacks nothing keyholder uses");
    } else {
        let costs: Vec<&str> = lacks.iter().map(|(_, cost)| *cost).collect();
        found.push_str(&format!("; lacks {}", costs.join("; ")));
    }
    let timeout_ms = settings.command_timeout.as_millis();
    match threshold {
        Some(threshold) => found.push_str(&format!(
            "; busy-reply-threshold {} ms against a command timeout of {timeout_ms} ms: a script (any \
             application's) running {} blocks every client, whose calls {}",
            threshold.as_millis(),
            if threshold.is_zero() { "at all" } else { "that long" },
            if threshold > settings.command_timeout {
                "time out before the server answers BUSY"
            } else {
                "are answered BUSY before they time out"
            }
        )),
        None => found.push_str(&format!(
            "; busy-reply-threshold not read ({}); command timeout {timeout_ms} ms",
            facts.config_refused().unwrap_or("not given")
        )),
    }
    let (verdict, meaning, fix) = if !valkey && version < Version(MINIMUM.0, MINIMUM.1, 0) {
        (
            Verdict::Fail,
            format!(
                "Redis {version} is older than the oldest keyholder supports (5.0): its scripts may fail"
            ),
            Some("upgrade to Redis 7.2 or newer, or Valkey".to_owned()),
        )
    } else if settings.acks.aof && !waitaof {
        (
            Verdict::Warn,
            "the services wait for replica acknowledgements with WAITAOF (replica_acks_aof), which this server \
             does not have: their clients are refused at build"
                .to_owned(),
            Some("upgrade to Redis 7.2 or newer (or Valkey), or use replica_acks (WAIT) instead".to_owned()),
        )
    } else {
        (
            Verdict::Ok,
            if lacks.is_empty() {
                "every feature keyholder uses is there".to_owned()
            } else {
                "supported; what it lacks is optional, and the settings checked do not need it".to_owned()
            },
            None,
        )
    };
    Check { found, figures, verdict, meaning, fix, ..blank(NAME, GUARANTEE, DOCS) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::options::Acks;

    fn run_on(info: &str, config: &[(&str, &str)], settings: Settings) -> Check {
        run(&Facts::from_parts(info, config, None), &settings)
    }

    #[test]
    fn versions_parse_and_compare() {
        assert_eq!(Version::parse("7.0.15"), Some(Version(7, 0, 15)));
        assert_eq!(Version::parse("8.1"), Some(Version(8, 1, 0)));
        assert_eq!(Version::parse("7.x"), None);
        assert!(Version(7, 2, 0) > Version(7, 0, 15));
    }

    #[test]
    fn redis_below_five_fails_and_newer_passes() {
        let old = run_on("redis_version:4.0.14\r\n", &[], Settings::default_for_tests());
        assert_eq!(old.verdict, Verdict::Fail);
        let seven = run_on(
            "redis_version:7.0.15\r\n",
            &[("busy-reply-threshold", "5000")],
            Settings::default_for_tests(),
        );
        assert_eq!(seven.verdict, Verdict::Ok);
        assert!(seven.found.contains("WAITAOF"), "{}", seven.found);
        assert!(seven.found.contains("time out before the server answers BUSY"), "{}", seven.found);
        assert_eq!(seven.figure("busy_reply_threshold"), Some(&Figure::Duration(Duration::from_secs(5))));
    }

    #[test]
    fn valkey_is_told_apart_and_lacks_nothing() {
        let info = "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.1\r\n";
        let c = run_on(info, &[("lua-time-limit", "1000")], Settings::default_for_tests());
        assert_eq!(c.verdict, Verdict::Ok);
        assert!(c.found.starts_with("Valkey 8.1.1, lacks nothing"), "{}", c.found);
        assert!(c.found.contains("answered BUSY before they time out"), "{}", c.found);
    }

    #[test]
    fn waitaof_wanted_but_missing_warns() {
        let settings = Settings { acks: Acks { replicas: 1, aof: true }, ..Settings::default_for_tests() };
        let c = run_on("redis_version:7.0.15\r\n", &[], settings);
        assert_eq!(c.verdict, Verdict::Warn);
        let c = run_on("redis_version:7.2.5\r\n", &[], settings);
        assert_eq!(c.verdict, Verdict::Ok);
    }

    #[test]
    fn no_version_is_unknown() {
        let c = run_on("", &[], Settings::default_for_tests());
        assert!(matches!(c.verdict, Verdict::Unknown { .. }), "{c:?}");
    }
}
