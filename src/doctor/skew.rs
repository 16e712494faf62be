//! Reading clocks for the clock check (`clocks.rs`): another server's
//! `TIME` against a reference server's, on the primary's replicas (on the
//! connection `replicas.rs` opens to each) and, on a Redis Cluster, each
//! primary against the first.
//!
//! The other server's `TIME` is taken between two of the reference's, so
//! the reference's reading at the same instant lies between them: the
//! offset is measured from their midpoint, give or take half the bracket.
//! Three rounds; the narrowest bracket is kept (the one least disturbed by
//! the network or a busy server). Pure but for the two readers, so the
//! arithmetic is unit-tested with made-up clocks.

use redis::Value;

use crate::admin::send;
use crate::store::connection::Conn;
use crate::store::lanes::Session;

/// Rounds of reference, other, reference.
const ROUNDS: usize = 3;

/// One clock read against the reference's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Clock {
    /// `host:port` of the server read.
    pub(super) node: String,
    /// `replica` (of the primary checked), or `primary` (a cluster's
    /// primary, against the cluster's first).
    pub(super) role: &'static str,
    /// The offset, or why it could not be read.
    pub(super) reading: Result<Offset, String>,
}

/// How far a clock is ahead of the reference's (behind when negative).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Offset {
    /// Microseconds ahead of the reference.
    pub(super) ahead_us: i64,
    /// Give or take this many microseconds (half the bracket).
    pub(super) within_us: i64,
}

impl Offset {
    /// Microseconds behind the reference, at least (0 when it may not be
    /// behind at all).
    pub(super) fn surely_behind_us(&self) -> i64 {
        (-self.ahead_us - self.within_us).max(0)
    }

    /// Microseconds apart from the reference, at least.
    pub(super) fn surely_apart_us(&self) -> i64 {
        (self.ahead_us.abs() - self.within_us).max(0)
    }
}

/// Measures `other`'s clock against `reference`'s: each reader returns its
/// server's `TIME` in microseconds.
pub(super) fn measure(
    mut reference: impl FnMut() -> Result<i64, String>,
    mut other: impl FnMut() -> Result<i64, String>,
) -> Result<Offset, String> {
    let mut best: Option<Offset> = None;
    for _ in 0..ROUNDS {
        let before = reference()?;
        let theirs = other()?;
        let after = reference()?;
        // A reference clock stepped back between its two readings says
        // nothing of the instant: that round is left out.
        if after < before {
            continue;
        }
        let within_us = (after - before + 1) / 2;
        let offset = Offset { ahead_us: theirs - (before + (after - before) / 2), within_us };
        if best.is_none_or(|b| offset.within_us < b.within_us) {
            best = Some(offset);
        }
    }
    best.ok_or_else(|| "the reference clock stepped back in every round".to_owned())
}

/// The clock of the primary `session` talks to (`node`) against the one
/// `reference` talks to.
pub(super) fn primary(reference: &mut Session<'_>, session: &mut Session<'_>, node: &str) -> Clock {
    let reading = measure(|| time_on_session(reference), || time_on_session(session));
    Clock { node: node.to_owned(), role: "primary", reading }
}

/// `host:port` (the host may be an IPv6 address, colons and all).
pub(super) fn split(node: &str) -> Result<(&str, u16), String> {
    node.rsplit_once(':')
        .and_then(|(host, port)| {
            Some((host.trim_start_matches('[').trim_end_matches(']'), port.parse().ok()?))
        })
        .ok_or_else(|| format!("not an address: {node}"))
}

pub(super) fn time_on_session(session: &mut Session<'_>) -> Result<i64, String> {
    let reply = send(session, &[redis::cmd("TIME")]).map_err(|e| e.to_string())?;
    micros(reply.into_iter().next().unwrap_or(Value::Nil))
}

pub(super) fn time_on_conn(conn: &mut Conn) -> Result<i64, String> {
    conn.send(&redis::cmd("TIME").get_packed_command()).map_err(|e| e.to_string())?;
    let (replies, failure) = conn.receive(1);
    if let Some(e) = failure {
        return Err(e.to_string());
    }
    micros(replies.into_iter().next().unwrap_or(Value::Nil))
}

/// A `TIME` reply (seconds and microseconds, as two strings) in
/// microseconds.
fn micros(reply: Value) -> Result<i64, String> {
    let reply = reply.extract_error().map_err(|e| format!("TIME refused: {e}"))?;
    let parts: Vec<i64> =
        redis::from_redis_value(reply.clone()).map_err(|_| format!("TIME answered {reply:?}"))?;
    match parts[..] {
        [secs, us] => secs.checked_mul(1_000_000).and_then(|s| s.checked_add(us)),
        _ => None,
    }
    .ok_or_else(|| format!("TIME answered {reply:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that returns `values` in turn.
    fn clock(values: &[i64]) -> impl FnMut() -> Result<i64, String> + '_ {
        let mut it = values.iter();
        move || it.next().copied().ok_or_else(|| "no more".to_owned())
    }

    #[test]
    fn the_narrowest_bracket_wins_and_the_offset_is_from_its_midpoint() {
        // Rounds: [0, 100] other 5_050; [200, 220] other 5_212; [300, 400].
        let offset = measure(clock(&[0, 100, 200, 220, 300, 400]), clock(&[5_050, 5_212, 5_350])).unwrap();
        assert_eq!(offset, Offset { ahead_us: 5_002, within_us: 10 });
        assert_eq!(offset.surely_behind_us(), 0);
        assert_eq!(offset.surely_apart_us(), 4_992);
        let behind = Offset { ahead_us: -30_000_000, within_us: 500 };
        assert_eq!(behind.surely_behind_us(), 29_999_500);
        // Within the bracket: not surely apart.
        assert_eq!(Offset { ahead_us: -300, within_us: 500 }.surely_apart_us(), 0);
    }

    #[test]
    fn a_failed_read_is_the_reason_and_a_stepped_back_reference_is_left_out() {
        assert_eq!(measure(clock(&[0]), clock(&[])), Err("no more".to_owned()));
        let offset = measure(clock(&[100, 50, 0, 10, 20, 30]), clock(&[0, 5, 25])).unwrap();
        assert_eq!(offset, Offset { ahead_us: 0, within_us: 5 });
        assert!(measure(clock(&[9, 1, 9, 1, 9, 1]), clock(&[0, 0, 0])).is_err());
    }

    #[test]
    fn time_replies_and_addresses_are_read() {
        let reply = Value::Array(vec![
            Value::BulkString(b"1796220762".to_vec()),
            Value::BulkString(b"662715".to_vec()),
        ]);
        assert_eq!(micros(reply), Ok(1_796_220_762_662_715));
        assert!(micros(Value::Nil).is_err());
        assert_eq!(split("10.0.0.2:6379"), Ok(("10.0.0.2", 6379)));
        assert_eq!(split("::1:6380"), Ok(("::1", 6380)));
        assert!(split("nowhere").is_err());
    }
}
