//! Printing what the admin API found: aligned tables for people, one JSON
//! object per line for scripts (the same information).

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use keyholder::{HeldPermit, Holder, ListedLock, LockInfo, LockKind, UnlockMessage, Waiter};
use serde_json::{Value, json};

use crate::Failure;

/// Prints tables, or JSON.
pub(crate) struct Output {
    pub(crate) json: bool,
}

/// How `inspect` names a kind.
fn describe(kind: LockKind, redis_type: &str) -> String {
    match kind {
        LockKind::Free => "free (no key)".to_owned(),
        LockKind::Reentrant => "reentrant lock (hash; a spin lock has the same layout)".to_owned(),
        LockKind::Fair => "fair lock (hash and waiter queue)".to_owned(),
        LockKind::ReadWrite => "read-write lock (hash with a mode)".to_owned(),
        LockKind::Semaphore => "semaphore (string: permits available)".to_owned(),
        LockKind::PermitExpirableSemaphore => {
            "permit-expirable semaphore (string: permits available; held permits beside it)".to_owned()
        }
        LockKind::CountDownLatch => "count-down latch (string: the count)".to_owned(),
        LockKind::SemaphoreOrLatch => {
            "semaphore or count-down latch (string holding a number; nobody waits on it to tell which)"
                .to_owned()
        }
        LockKind::Legacy => "legacy lock (string: a hand-rolled SET NX lock)".to_owned(),
        _ => format!("no lock: a {redis_type} key"),
    }
}

impl Output {
    pub(crate) fn inspect(&self, info: &LockInfo) -> Result<(), Failure> {
        if self.json {
            return print_json(&json!({
                "name": info.name,
                "kind": info.kind.as_str(),
                "redis_type": info.redis_type,
                "holders": holders_json(&info.holders),
                "mode": info.mode.map(|m| m.as_str()),
                "count": info.count,
                "permits": permits_json(&info.permits),
                "fair_queue": waiters_json(&info.fair_queue),
                "waiting_writers": waiters_json(&info.waiting_writers),
                "legacy_token": info.legacy_token,
                "remaining_lease_ms": info.remaining_lease.map(millis),
                "fencing_token": info.fencing_token,
                "unlock_channel": info.unlock_channel,
                "subscribers": info.subscribers,
                "queued_clients": info.queued_clients,
                "next_claim": info.next_claim,
                "server_time_ms": info.server_time.map(epoch_millis),
                "node": info.node,
            }));
        }
        let mut rows = vec![
            ["name".to_owned(), info.name.clone()],
            ["kind".to_owned(), describe(info.kind, &info.redis_type)],
        ];
        if let Some(node) = &info.node {
            rows.push(["node".to_owned(), node.clone()]);
        }
        if let Some(mode) = info.mode {
            rows.push(["mode".to_owned(), mode.to_string()]);
        }
        if let Some(count) = info.count {
            let label = match info.kind {
                LockKind::CountDownLatch => "count",
                LockKind::SemaphoreOrLatch => "permits or count",
                _ => "permits available",
            };
            rows.push([label.to_owned(), count.to_string()]);
        }
        if let Some(token) = &info.legacy_token {
            rows.push(["token".to_owned(), token.clone()]);
        }
        rows.push(["lease left".to_owned(), info.remaining_lease.map_or_else(|| "-".to_owned(), seconds)]);
        if !info.kind.is_counter() {
            rows.push([
                "fencing token".to_owned(),
                info.fencing_token.map_or_else(|| "-".to_owned(), |t| t.to_string()),
            ]);
        }
        rows.push(["channel".to_owned(), info.unlock_channel.clone()]);
        rows.push(["subscribers".to_owned(), info.subscribers.to_string()]);
        if matches!(info.kind, LockKind::Free | LockKind::Reentrant) {
            rows.push(["queued clients".to_owned(), or_dash(&info.queued_clients.join(", "))]);
            rows.push(["next claim".to_owned(), info.next_claim.clone().unwrap_or_else(|| "-".to_owned())]);
        }
        let mut text = table(&[], &rows);
        if !info.holders.is_empty() {
            text.push('\n');
            if info.kind == LockKind::ReadWrite {
                let rows: Vec<[String; 4]> = info
                    .holders
                    .iter()
                    .map(|h| {
                        let side = if h.write { "write" } else { "read" };
                        [h.client_id.clone(), h.thread_id.to_string(), side.to_owned(), h.count.to_string()]
                    })
                    .collect();
                text.push_str(&table(&["CLIENT", "THREAD", "HOLD", "COUNT"], &rows));
            } else {
                let rows: Vec<[String; 3]> = info
                    .holders
                    .iter()
                    .map(|h| [h.client_id.clone(), h.thread_id.to_string(), h.count.to_string()])
                    .collect();
                text.push_str(&table(&["CLIENT", "THREAD", "COUNT"], &rows));
            }
        }
        if !info.fair_queue.is_empty() {
            text.push('\n');
            let rows: Vec<[String; 5]> = info
                .fair_queue
                .iter()
                .enumerate()
                .map(|(at, w)| {
                    let [owner, deadline, left] = waiter_cells(w);
                    let grant = if w.keyholder { "yes" } else { "-" };
                    [(at + 1).to_string(), owner, deadline, left, grant.to_owned()]
                })
                .collect();
            text.push_str(&table(&["#", "FAIR QUEUE", "DEADLINE", "LEFT", "GRANT"], &rows));
        }
        if !info.waiting_writers.is_empty() {
            text.push('\n');
            let rows: Vec<[String; 3]> = info.waiting_writers.iter().map(waiter_cells).collect();
            text.push_str(&table(&["WAITING WRITER", "STALE AT", "LEFT"], &rows));
        }
        if !info.permits.is_empty() {
            text.push('\n');
            let rows: Vec<[String; 3]> = info
                .permits
                .iter()
                .map(|p| {
                    [
                        p.id.clone(),
                        p.expires.map_or_else(|| "never".to_owned(), |e| utc(since_epoch(e))),
                        p.remaining.map_or_else(|| "-".to_owned(), seconds),
                    ]
                })
                .collect();
            text.push_str(&table(&["HELD PERMIT", "EXPIRES", "LEFT"], &rows));
        }
        print_text(&text)
    }

    pub(crate) fn list(&self, locks: &[ListedLock], limit: usize) -> Result<(), Failure> {
        let truncated = locks.len() >= limit;
        if self.json {
            let locks: Vec<Value> = locks
                .iter()
                .map(|lock| {
                    json!({
                        "name": lock.name,
                        "kind": lock.kind.as_str(),
                        "holders": holders_json(&lock.holders),
                        "mode": lock.mode.map(|m| m.as_str()),
                        "count": lock.count,
                        "remaining_lease_ms": lock.remaining_lease.map(millis),
                        "node": lock.node,
                    })
                })
                .collect();
            return print_json(&json!({ "locks": locks, "limit_reached": truncated }));
        }
        let rows: Vec<[String; 7]> = locks
            .iter()
            .map(|lock| {
                let (owner, count) = match lock.holders.as_slice() {
                    [] => ("-".to_owned(), "-".to_owned()),
                    [one] => (one.owner.clone(), one.count.to_string()),
                    many => (
                        many.iter().map(|h| h.owner.as_str()).collect::<Vec<_>>().join(","),
                        many.iter().map(|h| h.count.to_string()).collect::<Vec<_>>().join(","),
                    ),
                };
                let state = match (lock.mode, lock.count) {
                    (Some(mode), _) => mode.to_string(),
                    (None, Some(count)) if lock.kind == LockKind::CountDownLatch => format!("count {count}"),
                    (None, Some(count)) => format!("{count} permits"),
                    (None, None) if lock.kind == LockKind::Legacy => "held".to_owned(),
                    (None, None) => if lock.holders.is_empty() { "free" } else { "held" }.to_owned(),
                };
                let lease = lock.remaining_lease.map_or_else(|| "-".to_owned(), seconds);
                let node = lock.node.clone().unwrap_or_else(|| "-".to_owned());
                [lock.name.clone(), lock.kind.as_str().to_owned(), state, owner, count, lease, node]
            })
            .collect();
        let mut text = table(&["NAME", "KIND", "STATE", "OWNER", "COUNT", "LEASE", "NODE"], &rows);
        text.push_str(&format!(
            "{} lock(s){}\n",
            locks.len(),
            if truncated { " (limit reached: --limit for more)" } else { "" }
        ));
        print_text(&text)
    }

    pub(crate) fn unlocked(
        &self,
        name: &str,
        kind: LockKind,
        unlocked: bool,
        holders: &[Holder],
    ) -> Result<(), Failure> {
        if self.json {
            return print_json(&json!({
                "name": name,
                "kind": kind.as_str(),
                "unlocked": unlocked,
                "holders": holders_json(holders),
            }));
        }
        if !unlocked {
            return print_text(&format!("'{name}' was not locked: nothing to do\n"));
        }
        let owners: Vec<&str> = holders.iter().map(|h| h.owner.as_str()).collect();
        print_text(&format!(
            "force-unlocked {} '{name}' (was held by {}); its waiters were told\n",
            kind.as_str(),
            owners.join(", ")
        ))
    }

    pub(crate) fn message(&self, message: &UnlockMessage) -> Result<(), Failure> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        if self.json {
            return print_json(&json!({
                "at": utc(now),
                "at_ms": millis(now),
                "channel": message.channel,
                "kind": message.kind.as_str(),
                "payload": message.payload,
                "meaning": message.meaning(),
            }));
        }
        print_text(&format!(
            "{}  {}  {}  {}\n",
            utc(now),
            message.channel,
            message.payload,
            message.meaning()
        ))
    }
}

/// A waiter's owner, deadline and time left, as table cells.
fn waiter_cells(w: &Waiter) -> [String; 3] {
    [
        w.owner.clone(),
        w.deadline.map_or_else(|| "-".to_owned(), |d| utc(since_epoch(d))),
        w.remaining.map_or_else(|| "-".to_owned(), seconds),
    ]
}

fn holders_json(holders: &[Holder]) -> Vec<Value> {
    holders
        .iter()
        .map(|h| {
            json!({
                "owner": h.owner,
                "client_id": h.client_id,
                "thread_id": h.thread_id,
                "count": h.count,
                "write": h.write,
            })
        })
        .collect()
}

fn waiters_json(waiters: &[Waiter]) -> Vec<Value> {
    waiters
        .iter()
        .map(|w| {
            json!({
                "owner": w.owner,
                "deadline_ms": w.deadline.map(epoch_millis),
                "remaining_ms": w.remaining.map(millis),
                "keyholder": w.keyholder,
            })
        })
        .collect()
}

fn permits_json(permits: &[HeldPermit]) -> Vec<Value> {
    permits
        .iter()
        .map(|p| {
            json!({
                "id": p.id,
                "expires_ms": p.expires.map(epoch_millis),
                "remaining_ms": p.remaining.map(millis),
            })
        })
        .collect()
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn since_epoch(at: SystemTime) -> Duration {
    at.duration_since(UNIX_EPOCH).unwrap_or_default()
}

fn epoch_millis(at: SystemTime) -> u64 {
    millis(since_epoch(at))
}

/// Prints one line of JSON and flushes (a `watch` is read line by line).
pub(crate) fn print_json(value: &Value) -> Result<(), Failure> {
    print_text(&format!("{value}\n"))
}

pub(crate) fn print_text(text: &str) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// Left-aligned columns two spaces apart, under an optional header.
pub(crate) fn table<const N: usize>(header: &[&str], rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for (at, title) in header.iter().enumerate().take(N) {
        widths[at] = title.chars().count();
    }
    for row in rows {
        for (at, cell) in row.iter().enumerate() {
            widths[at] = widths[at].max(cell.chars().count());
        }
    }
    let mut text = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (at, cell) in cells.iter().enumerate() {
            if at + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}  ", width = widths[at]));
            }
        }
        text.push_str(out.trim_end());
        text.push('\n');
    };
    if !header.is_empty() {
        line(header.to_vec());
    }
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    text
}

fn or_dash(text: &str) -> String {
    if text.is_empty() { "-".to_owned() } else { text.to_owned() }
}

/// A duration as seconds with milliseconds: `29.873 s`.
pub(crate) fn seconds(d: Duration) -> String {
    format!("{}.{:03} s", d.as_secs(), d.subsec_millis())
}

/// A time since the Unix epoch as RFC 3339 UTC with milliseconds.
pub(crate) fn utc(since_epoch: Duration) -> String {
    let secs = since_epoch.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since_epoch.subsec_millis()
    )
}

/// The Gregorian date `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_gregorian() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(utc(Duration::from_millis(1_795_000_000_123)), "2026-11-18T11:06:40.123Z");
    }

    #[test]
    fn tables_align_columns() {
        let rows = [["a".to_owned(), "1".to_owned()], ["bbb".to_owned(), "22".to_owned()]];
        assert_eq!(table(&["N", "V"], &rows), "N    V\na    1\nbbb  22\n");
    }
}
