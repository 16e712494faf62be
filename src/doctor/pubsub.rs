//! Item 5 of issue 37: what the deployment does to the client's pub/sub
//! connection, which wakes waiters. The `pubsub` class of
//! `client-output-buffer-limit` (a subscriber that reads too slowly is
//! disconnected at the limit), shard channels on a cluster (`SPUBLISH`,
//! Redis 7+), and a NAT's idle timeout stated by the operator against how
//! long the client's connections may stay silent (the pub/sub connection
//! PINGs after half `connection_idle_timeout` of silence; a command
//! connection idle that long is not used again).
//!
//! None of this can break mutual exclusion: a missed unlock message is
//! covered by the lease-end wake (docs/design.md, "Why correctness never
//! depends on pub/sub"). What it costs is waiting time.

use std::time::Duration;

use super::facts::Facts;
use super::options::{Deployment, Settings};
use super::report::{Check, Figure, Verdict, blank};
use super::server::Version;
use crate::pubsub::subscriber::longest_idle_silence;

const NAME: &str = "pubsub";
const GUARANTEE: &str = "Waiters are woken at a release (correctness never depends on pub/sub)";
const DOCS: &str = "docs/operations.md#pubsub";

/// A pub/sub output buffer limit below this disconnects a subscriber at a
/// burst of unlock messages.
const SMALL_LIMIT: u64 = 1024 * 1024;

/// The `pubsub` class of `client-output-buffer-limit`, in bytes and
/// seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BufferLimit {
    pub(super) hard: u64,
    pub(super) soft: u64,
    pub(super) seconds: u64,
}

/// A size as Redis writes it: `33554432`, `64kb`, `1mb`, `1g`.
fn size(text: &str) -> Option<u64> {
    let text = text.trim().to_ascii_lowercase();
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let scale: u64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    number.checked_mul(scale)
}

/// The `pubsub` class of a `client-output-buffer-limit` value (`normal 0
/// 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60`).
pub(super) fn parse_buffer_limit(value: &str) -> Option<BufferLimit> {
    let words: Vec<&str> = value.split_whitespace().collect();
    words.chunks(4).find(|class| class.first() == Some(&"pubsub")).and_then(|class| match class {
        [_, hard, soft, seconds] => {
            Some(BufferLimit { hard: size(hard)?, soft: size(soft)?, seconds: seconds.parse().ok()? })
        }
        _ => None,
    })
}

/// How far behind a subscriber is disconnected: `more than 33554432
/// bytes behind, or 8388608 bytes for 60 s`.
fn behind(limit: BufferLimit) -> String {
    let mut text = Vec::new();
    if limit.hard > 0 {
        text.push(format!("more than {} bytes behind", limit.hard));
    }
    if limit.soft > 0 {
        text.push(format!("more than {} bytes behind for {} s", limit.soft, limit.seconds));
    }
    text.join(", or ")
}

/// The idle-drop rule: a stated NAT idle timeout against the longest
/// silence of the client's idle pub/sub connection and the command
/// connections' idle timeout (`None`: never). `Some(what)` when a flow the
/// client still counts on can be dropped: what would be.
pub(super) fn idle_exposure(
    idle_drop: Duration,
    pubsub_silence: Option<Duration>,
    idle_timeout: Option<Duration>,
) -> Option<String> {
    let mut exposed = Vec::new();
    match pubsub_silence {
        Some(silence) if silence < idle_drop => {}
        Some(silence) => exposed.push(format!(
            "the idle pub/sub connection PINGs only after up to {} ms of silence",
            silence.as_millis()
        )),
        None => exposed.push("the pub/sub connection is not PINGed while idle (no idle timeout)".to_owned()),
    }
    match idle_timeout {
        Some(idle) if idle < idle_drop => {}
        Some(idle) => exposed.push(format!(
            "a command connection idle for up to {} ms (connection_idle_timeout) is used again",
            idle.as_millis()
        )),
        None => exposed.push("command connections are used again however long idle".to_owned()),
    }
    (!exposed.is_empty()).then(|| exposed.join("; "))
}

/// One part's verdict: 0 ok, 1 unknown, 2 warn, 3 fail.
type Part = (u8, String, Option<String>);

/// The pub/sub check of one primary.
pub(super) fn run(facts: &Facts, settings: &Settings) -> Check {
    let mut figures = Vec::new();
    let mut found = Vec::new();
    let mut parts: Vec<Part> = Vec::new();

    // The output buffer limit.
    match facts.config("client-output-buffer-limit").map(parse_buffer_limit) {
        Some(Some(limit)) => {
            figures
                .push(("pubsub_hard_limit", Figure::Number(i64::try_from(limit.hard).unwrap_or(i64::MAX))));
            figures
                .push(("pubsub_soft_limit", Figure::Number(i64::try_from(limit.soft).unwrap_or(i64::MAX))));
            figures.push((
                "pubsub_soft_seconds",
                Figure::Number(i64::try_from(limit.seconds).unwrap_or(i64::MAX)),
            ));
            found.push(format!(
                "client-output-buffer-limit pubsub {} {} {}",
                limit.hard, limit.soft, limit.seconds
            ));
            let smallest = [limit.hard, limit.soft].into_iter().filter(|n| *n > 0).min();
            match smallest {
                None => parts.push((
                    0,
                    "no output buffer limit for subscribers: a slow one is never disconnected".to_owned(),
                    None,
                )),
                Some(n) if n < SMALL_LIMIT => parts.push((
                    2,
                    format!(
                        "a subscriber {} is disconnected: a burst of unlock messages (many locks released at \
                         once) can cut the client's pub/sub connection; it reconnects, resubscribes and wakes \
                         every waiter to try again, and a missed unlock is covered by the lease-end wake, so \
                         waiters lose time, never correctness (a limit of {n} bytes, under 1 MiB)",
                        behind(limit)
                    ),
                    Some(
                        "CONFIG SET client-output-buffer-limit \"pubsub 32mb 8mb 60\" (the default), or at least \
                         1 MiB"
                            .to_owned(),
                    ),
                )),
                Some(_) => parts.push((
                    0,
                    format!(
                        "only a subscriber {} is disconnected (it then reconnects, resubscribes and wakes its \
                         waiters: they lose time, never correctness)",
                        behind(limit)
                    ),
                    None,
                )),
            }
        }
        other => {
            let why = match (other, facts.config_refused()) {
                (Some(None), _) => "client-output-buffer-limit unreadable".to_owned(),
                (_, Some(refusal)) => format!("CONFIG GET client-output-buffer-limit: {refusal}"),
                _ => "CONFIG GET client-output-buffer-limit gave nothing".to_owned(),
            };
            found.push("client-output-buffer-limit not read".to_owned());
            parts.push((1, why, None));
        }
    }

    // Shard channels on a cluster.
    if settings.deployment == Deployment::Cluster {
        let valkey = facts.info("server_name").is_some_and(|n| n.eq_ignore_ascii_case("valkey"))
            || facts.info("valkey_version").is_some();
        let field = if valkey { "valkey_version" } else { "redis_version" };
        let spublish = facts.info(field).and_then(Version::parse).map(|v| valkey || v >= Version(7, 0, 0));
        match (settings.sharded_pubsub, spublish) {
            (Some(false), _) => {
                figures.push(("sharded", Figure::Flag(false)));
                found.push("shard channels turned off (sharded_pubsub(false))".to_owned());
                parts.push((
                    0,
                    "unlock messages go on plain channels by choice: every node relays each to every other"
                        .to_owned(),
                    None,
                ));
            }
            (_, Some(true)) => {
                figures.push(("sharded", Figure::Flag(true)));
                found.push("shard channels (SPUBLISH)".to_owned());
                parts.push((0, "unlock messages stay on the lock's shard (SPUBLISH)".to_owned(), None));
            }
            (_, Some(false)) => {
                figures.push(("sharded", Figure::Flag(false)));
                found.push("no shard channels (SPUBLISH needs Redis 7.0)".to_owned());
                parts.push((
                    2,
                    "this server has no SPUBLISH: unlock messages go on plain channels, which every node relays \
                     to every other over the cluster bus"
                        .to_owned(),
                    Some("upgrade to Redis 7 or newer, or Valkey".to_owned()),
                ));
            }
            (_, None) => {
                found.push("shard channels: the server's version not read".to_owned());
                parts.push((1, "the server's version not read: SPUBLISH unknown".to_owned(), None));
            }
        }
    }

    // The idle drop.
    let silence = longest_idle_silence(settings.command_timeout, settings.idle_timeout);
    if let Some(silence) = silence {
        figures.push(("idle_ping", Figure::Duration(silence)));
    }
    if let Some(idle) = settings.idle_timeout {
        figures.push(("connection_idle_timeout", Figure::Duration(idle)));
    }
    let silence_text =
        silence.map_or_else(|| "never while idle".to_owned(), |s| format!("within {} ms", s.as_millis()));
    match settings.idle_drop {
        None => {
            found.push(format!("idle drop not stated (the idle pub/sub connection PINGs {silence_text})"))
        }
        Some(drop) => {
            figures.push(("idle_drop", Figure::Duration(drop)));
            found.push(format!(
                "idle drop {} ms against a PING {silence_text} and a connection idle timeout of {}",
                drop.as_millis(),
                settings.idle_timeout.map_or_else(|| "none".to_owned(), |t| format!("{} ms", t.as_millis()))
            ));
            match idle_exposure(drop, silence, settings.idle_timeout) {
                Some(exposed) => parts.push((
                    3,
                    format!(
                        "{exposed}, longer than the idle drop: a flow dropped silently goes unnoticed until the \
                         next command or PING, which waits a command timeout; waiters subscribed on a dead flow \
                         hear no unlock and wait for the lease"
                    ),
                    Some(format!(
                        "ClientBuilder::connection_idle_timeout below {} ms in the services (half of it is the \
                         pub/sub PING)",
                        drop.as_millis()
                    )),
                )),
                None => parts.push((
                    0,
                    "the client's connections are never idle as long as the idle drop".to_owned(),
                    None,
                )),
            }
        }
    }

    let worst = parts.iter().map(|(level, _, _)| *level).max().unwrap_or(0);
    let pick = |level: u8| parts.iter().filter(move |(l, _, _)| *l == level);
    let meaning: Vec<String> = parts.iter().filter(|(l, _, _)| *l != 1).map(|(_, m, _)| m.clone()).collect();
    let fixes: Vec<String> = parts.iter().filter_map(|(_, _, fix)| fix.clone()).collect();
    let verdict = match worst {
        3 => Verdict::Fail,
        2 => Verdict::Warn,
        1 => Verdict::Unknown {
            reason: pick(1).map(|(_, m, _)| m.clone()).collect::<Vec<_>>().join("; "),
            confirm_by_hand:
                "client-output-buffer-limit's pubsub class in the service's console (the default \
                              32mb 8mb 60, or 0 0 0, is fine; below 1 MiB disconnects subscribers at bursts)"
                    .to_owned(),
        },
        _ => Verdict::Ok,
    };
    Check {
        found: found.join("; "),
        figures,
        verdict,
        meaning: if meaning.is_empty() {
            "a disconnected subscriber costs waiters time, never correctness (the lease-end wake)".to_owned()
        } else {
            meaning.join("; ")
        },
        fix: (!fixes.is_empty()).then(|| fixes.join("; ")),
        ..blank(NAME, GUARANTEE, DOCS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: &str = "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60";

    fn run_on(config: &[(&str, &str)], settings: Settings) -> Check {
        run(&Facts::from_parts("redis_version:7.0.15\r\n", config, None), &settings)
    }

    #[test]
    fn buffer_limits_parse_in_bytes_and_units() {
        assert_eq!(
            parse_buffer_limit(DEFAULT),
            Some(BufferLimit { hard: 33_554_432, soft: 8_388_608, seconds: 60 })
        );
        assert_eq!(
            parse_buffer_limit("pubsub 64kb 32kb 10"),
            Some(BufferLimit { hard: 65_536, soft: 32_768, seconds: 10 })
        );
        assert_eq!(parse_buffer_limit("normal 0 0 0"), None);
        assert_eq!(parse_buffer_limit("pubsub 1x 0 0"), None);
    }

    #[test]
    fn a_small_buffer_limit_warns_and_the_default_or_none_passes() {
        let c = run_on(&[("client-output-buffer-limit", DEFAULT)], Settings::default_for_tests());
        assert_eq!(c.verdict, Verdict::Ok, "{c:?}");
        assert!(c.found.contains("idle drop not stated"), "{}", c.found);
        let none = run_on(&[("client-output-buffer-limit", "pubsub 0 0 0")], Settings::default_for_tests());
        assert_eq!(none.verdict, Verdict::Ok);
        let small =
            run_on(&[("client-output-buffer-limit", "pubsub 65536 32768 10")], Settings::default_for_tests());
        assert_eq!(small.verdict, Verdict::Warn);
        assert!(small.meaning.contains("lease-end wake"), "{}", small.meaning);
        let refused = run(&Facts::from_parts("", &[], Some("NOPERM")), &Settings::default_for_tests());
        assert!(matches!(refused.verdict, Verdict::Unknown { .. }), "{refused:?}");
    }

    #[test]
    fn an_idle_drop_shorter_than_the_clients_silences_fails() {
        let s = Duration::from_secs;
        // The defaults: PING within 93 s, command connections idle out at 180 s.
        assert_eq!(idle_exposure(s(350), Some(s(93)), Some(s(180))), None);
        let exposed = idle_exposure(s(120), Some(s(93)), Some(s(180))).unwrap();
        assert!(exposed.contains("180000 ms"), "{exposed}");
        assert!(idle_exposure(s(60), Some(s(93)), Some(s(30))).unwrap().contains("93000 ms"));
        assert!(idle_exposure(s(3600), None, None).is_some());
        let settings = Settings { idle_drop: Some(s(120)), ..Settings::default_for_tests() };
        let c = run_on(&[("client-output-buffer-limit", DEFAULT)], settings);
        assert_eq!(c.verdict, Verdict::Fail, "{c:?}");
        assert_eq!(c.figure("idle_drop"), Some(&Figure::Duration(s(120))));
    }

    #[test]
    fn shard_channels_on_a_cluster_need_redis_seven() {
        let cluster = Settings { deployment: Deployment::Cluster, ..Settings::default_for_tests() };
        let config = [("client-output-buffer-limit", DEFAULT)];
        let seven = run(&Facts::from_parts("redis_version:7.0.15\r\n", &config, None), &cluster);
        assert_eq!(seven.verdict, Verdict::Ok);
        assert_eq!(seven.figure("sharded"), Some(&Figure::Flag(true)));
        let six = run(&Facts::from_parts("redis_version:6.2.14\r\n", &config, None), &cluster);
        assert_eq!(six.verdict, Verdict::Warn);
        let off = Settings { sharded_pubsub: Some(false), ..cluster };
        assert_eq!(
            run(&Facts::from_parts("redis_version:6.2.14\r\n", &config, None), &off).verdict,
            Verdict::Ok
        );
    }
}
