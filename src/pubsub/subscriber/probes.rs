//! When the pub/sub reader probes a silent connection with PING: after a
//! command timeout of silence while anything depends on the connection,
//! after half the command connections' idle timeout in any case, so that a
//! NAT never sees it idle long enough to forget it (issue 35, item 2).

use std::time::Duration;

/// The shortest probe interval and read timeout, whatever the settings.
const MIN_PROBE: Duration = Duration::from_millis(10);

/// When the reader PINGs a silent connection (see `Subscriber::new`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Probes {
    /// After this much silence while channels are subscribed.
    pub(super) subscribed: Duration,
    /// After this much silence while none is; `None`: never.
    pub(super) idle: Option<Duration>,
    /// How often, at most, the reader looks at the silence.
    pub(super) read_timeout: Duration,
}

impl Probes {
    /// From the command timeout and the command connections' idle timeout.
    pub(super) fn of(command_timeout: Duration, idle_timeout: Option<Duration>) -> Probes {
        let idle = idle_timeout.map(|idle| (idle / 2).max(MIN_PROBE));
        let subscribed = idle.map_or(command_timeout, |p| p.min(command_timeout)).max(MIN_PROBE);
        let read_timeout =
            idle_timeout.map_or(command_timeout, |idle| (idle / 4).min(command_timeout)).max(MIN_PROBE);
        Probes { subscribed, idle, read_timeout }
    }
}

/// The longest a healthy pub/sub connection with nothing subscribed stays
/// silent: its PING is due after [`Probes::idle`] of silence and the reader
/// looks every [`Probes::read_timeout`]. `None`: never probed while idle.
/// What the doctor holds a NAT's idle timeout against.
pub(crate) fn longest_idle_silence(
    command_timeout: Duration,
    idle_timeout: Option<Duration>,
) -> Option<Duration> {
    let probes = Probes::of(command_timeout, idle_timeout);
    probes.idle.map(|idle| idle + probes.read_timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_connection_is_probed_within_the_idle_timeout() {
        let (s, ms) = (Duration::from_secs, Duration::from_millis);
        // The defaults: a command timeout while subscribed, 90 s idle.
        let defaults = Probes::of(s(3), Some(s(180)));
        assert_eq!(defaults, Probes { subscribed: s(3), idle: Some(s(90)), read_timeout: s(3) });
        // A short idle timeout: never silent past 3/4 of it (PING after
        // half, looked at every quarter), subscribed or not.
        let short = Probes::of(ms(1500), Some(ms(250)));
        assert_eq!(
            short,
            Probes { subscribed: ms(125), idle: Some(ms(125)), read_timeout: Duration::from_micros(62_500) }
        );
        // A long command timeout does not stretch the idle bound.
        let long = Probes::of(s(3600), Some(s(180)));
        assert_eq!(long, Probes { subscribed: s(90), idle: Some(s(90)), read_timeout: s(45) });
        // No idle timeout: probed only while subscribed, as before.
        assert_eq!(Probes::of(s(3), None), Probes { subscribed: s(3), idle: None, read_timeout: s(3) });
        // Absurdly short settings are floored, never zero.
        let tiny = Probes::of(ms(1), Some(ms(1)));
        assert!(tiny.subscribed >= MIN_PROBE && tiny.read_timeout >= MIN_PROBE);
        assert_eq!(tiny.idle, Some(MIN_PROBE));
    }

    #[test]
    fn the_longest_idle_silence_is_the_ping_due_plus_one_look() {
        let s = Duration::from_secs;
        assert_eq!(longest_idle_silence(s(3), Some(s(180))), Some(s(93)));
        assert_eq!(longest_idle_silence(s(3600), Some(s(180))), Some(s(135)));
        assert_eq!(longest_idle_silence(s(3), None), None);
    }
}
