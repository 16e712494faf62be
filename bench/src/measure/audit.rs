//! Counting top-level commands with the slow log. `INFO commandstats`
//! cannot tell a HEXISTS that keyholder sends from one its scripts run, so
//! in an audited window the slow log records every command (threshold 0),
//! script-internal ones with the peer `?:0` and top-level ones with the
//! client's address, and the round trips are the top-level ones it lists.

use std::collections::HashMap;

use redis::Value;

use crate::env::Env;
use crate::error::{Res, err};

/// Slow-log entries kept during an audited window; a window that logs more
/// falls back to the INFO commandstats count.
const AUDIT_MAX_LEN: u64 = 1_000_000;

/// Commands whose first argument is a subcommand, named `cmd|sub` as INFO
/// commandstats names them.
const CONTAINERS: &[&str] =
    &["client", "config", "slowlog", "script", "pubsub", "command", "memory", "object"];

/// Starts an audited window, when audits are on (not `--no-audit`): from
/// here the slow log records every command. Returns whether it does.
pub(crate) fn audit_start(env: &Env, stats: &mut redis::Connection) -> Res<bool> {
    if !env.cfg.audit {
        return Ok(false);
    }
    redis::cmd("CONFIG").arg("SET").arg("slowlog-max-len").arg(AUDIT_MAX_LEN).query::<()>(stats)?;
    redis::cmd("CONFIG").arg("SET").arg("slowlog-log-slower-than").arg(0).query::<()>(stats)?;
    redis::cmd("SLOWLOG").arg("RESET").query::<()>(stats)?;
    Ok(true)
}

/// Ends an audited window: the top-level commands it logged, by name, or
/// `None` when the window was not audited (`on` false) or logged more than
/// the slow log keeps. Restores the server's threshold.
pub(crate) fn audit_end(
    env: &Env,
    stats: &mut redis::Connection,
    on: bool,
) -> Res<Option<HashMap<String, u64>>> {
    if !on {
        return Ok(None);
    }
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(&env.slowlog_threshold)
        .query::<()>(stats)?;
    let len: u64 = redis::cmd("SLOWLOG").arg("LEN").query(stats)?;
    if len >= AUDIT_MAX_LEN {
        eprintln!("bench: the slow log overflowed ({len} entries); counting with INFO commandstats only");
        redis::cmd("SLOWLOG").arg("RESET").query::<()>(stats)?;
        return Ok(None);
    }
    let entries: Value = redis::cmd("SLOWLOG").arg("GET").arg(len.max(1)).query(stats)?;
    redis::cmd("SLOWLOG").arg("RESET").query::<()>(stats)?;
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let Value::Array(entries) = entries else { return Err(err("SLOWLOG GET replied with no array")) };
    let mut top = HashMap::new();
    for entry in &entries {
        let Value::Array(fields) = entry else { continue };
        let (Some(Value::Array(args)), Some(peer)) = (fields.get(3), fields.get(4).and_then(text)) else {
            return Err(err("a slow log entry without arguments or peer (Redis 4 or newer is needed)"));
        };
        if peer.starts_with('?') {
            continue; // run by a script
        }
        let mut name = args.first().and_then(text).unwrap_or_default().to_lowercase();
        if CONTAINERS.contains(&name.as_str())
            && let Some(sub) = args.get(1).and_then(text)
        {
            name = format!("{name}|{}", sub.to_lowercase());
        }
        *top.entry(name).or_insert(0) += 1;
    }
    Ok(Some(top))
}
