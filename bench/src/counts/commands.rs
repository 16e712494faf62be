//! The Redis commands a window ran, by name, from `INFO commandstats`:
//! every command counts, top-level or run inside a script (Redis counts a
//! script's `redis.call`s under their own names, beside its `evalsha`), so
//! the figure is exact and no load moves it. The harness's own `INFO` and
//! `PUBSUB CHANNELS` are left out by name; nothing else talks to the
//! private server.
//!
//! Some of a client's commands are sent by its background threads, a
//! moment after the call that caused them: a hold `LISTEN_AFTER` (20 ms,
//! src/holds/foreign.rs) old is listened for (its channel subscribed, its
//! key armed for removal alarms), a channel no longer used is unsubscribed
//! `LINGER` (100 ms, src/pubsub/subscriber.rs) after. So the worker starts
//! each measured stretch from a settled state ([`until_quiet`]), and keeps
//! the holds of the single-thread paths young.

use std::collections::BTreeMap;

use crate::error::Res;

/// Calls by command name (`INFO commandstats` naming: `evalsha`,
/// `hincrby`, `client|setname`).
pub(crate) type Calls = BTreeMap<String, u64>;

/// The harness's own commands: never an operation's.
const OWN: &[&str] = &["info", "pubsub|channels"];

/// The server's calls so far, by command, but the harness's own.
pub(crate) fn calls(stats: &mut redis::Connection) -> Res<Calls> {
    let text: String = redis::cmd("INFO").arg("commandstats").query(stats)?;
    Ok(text
        .lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|rest| {
            let (name, fields) = rest.split_once(':')?;
            let n = fields.split(',').find_map(|f| f.strip_prefix("calls="))?.trim().parse().ok()?;
            Some((name.to_owned(), n))
        })
        .filter(|(name, _)| !OWN.contains(&name.as_str()))
        .collect())
}

/// What ran between two [`calls`] snapshots: the commands whose count grew.
pub(crate) fn between(before: &Calls, after: &Calls) -> Calls {
    after
        .iter()
        .map(|(name, n)| (name.clone(), n.saturating_sub(before.get(name).copied().unwrap_or(0))))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// `name=count` pairs, space-separated, in name order (`-` when none).
pub(crate) fn format(calls: &Calls) -> String {
    if calls.is_empty() {
        return "-".to_owned();
    }
    calls.iter().map(|(name, n)| format!("{name}={n}")).collect::<Vec<_>>().join(" ")
}

/// The inverse of [`format`].
pub(crate) fn parse(text: &str) -> Res<Calls> {
    if text.trim() == "-" {
        return Ok(Calls::new());
    }
    text.split_whitespace()
        .map(|pair| {
            let (name, n) = pair
                .split_once('=')
                .ok_or_else(|| crate::error::err(format!("not a name=count pair: {pair:?}")))?;
            Ok((name.to_owned(), n.parse::<u64>()?))
        })
        .collect()
}

/// Whether any connection listens on `channel` (`PUBSUB CHANNELS`, which
/// no library script sends, so the harness's own calls are told apart).
pub(crate) fn listened(stats: &mut redis::Connection, channel: &str) -> Res<bool> {
    let channels: Vec<String> = redis::cmd("PUBSUB").arg("CHANNELS").arg(channel).query(stats)?;
    Ok(!channels.is_empty())
}

/// Looks 10 ms apart.
const LOOK: std::time::Duration = std::time::Duration::from_millis(10);
/// Looks without a new command that make the server quiet: 100 ms, more
/// than a hold takes to be listened for (`LISTEN_AFTER`, 20 ms, and the
/// thread's next wake-up) or a channel to linger out (`LINGER`, 100 ms,
/// counted from the last look that saw a command).
const QUIET_LOOKS: usize = 10;
/// At most this many looks (20 s).
const MAX_LOOKS: usize = 2_000;

/// Until the server has run no command for [`QUIET_LOOKS`] looks in a row
/// and `channel` is listened on or not, as `listening` says: no signal
/// tells that a client's background threads are done, so the harness
/// looks, boundedly.
pub(crate) fn until_quiet(stats: &mut redis::Connection, channel: &str, listening: bool) -> Res<()> {
    let mut last = None;
    let mut quiet = 0;
    for _ in 0..MAX_LOOKS {
        std::thread::sleep(LOOK);
        let ran: u64 = calls(stats)?.values().sum();
        quiet = if last == Some(ran) { quiet + 1 } else { 0 };
        last = Some(ran);
        if quiet >= QUIET_LOOKS && listened(stats, channel)? == listening {
            return Ok(());
        }
    }
    Err(crate::error::err(format!(
        "the server did not settle ({channel} {}listened on, no command for 100 ms) within 20 s",
        if listening { "" } else { "not " }
    )))
}
