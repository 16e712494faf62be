//! `keyholder doctor`: the deployment checked against keyholder's
//! guarantees (`Client::doctor`), printed as one block per check or as
//! JSON, and summed up in the exit status.

use std::time::Duration;

use keyholder::{Check, Client, DoctorOptions, Figure, Level, Report, Verdict};
use serde_json::{Map, Value, json};

use crate::output::{Output, print_json, print_text};
use crate::{Failure, failure};

/// The services' settings the deployment is checked against, as given.
pub(crate) struct Services {
    pub(crate) command_timeout: f64,
    pub(crate) replica_acks: Option<u32>,
    pub(crate) replica_acks_aof: Option<u32>,
    pub(crate) watchdog_timeout: f64,
    /// As given: `350s`, `4m`, `500ms`, `350`.
    pub(crate) idle_drop: Option<String>,
    /// The lock names whose slots are checked (`--name`).
    pub(crate) names: Vec<String>,
}

/// `--command-timeout`, `--watchdog-timeout`: a positive number of seconds.
fn seconds(option: &str, value: f64) -> Result<Duration, Failure> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|t| !t.is_zero())
        .ok_or_else(|| Failure::Usage(format!("{option} {value} is no positive number of seconds")))
}

/// `--idle-drop`: a positive duration, `350s`, `4m`, `500ms`, `1h`, or
/// seconds without a unit.
fn idle_drop(text: &str) -> Result<Duration, Failure> {
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let scale = match unit.trim() {
        "" | "s" => Some(1.0),
        "ms" => Some(0.001),
        "m" | "min" => Some(60.0),
        "h" => Some(3600.0),
        _ => None,
    };
    scale
        .zip(number.parse::<f64>().ok())
        .and_then(|(scale, n)| Duration::try_from_secs_f64(n * scale).ok())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            Failure::Usage(format!("--idle-drop {text:?} is no positive duration (350s, 4m, 500ms, 1h)"))
        })
}

/// Runs the checks and prints the report; warnings (or checks that could
/// not tell) and failures end with their own exit statuses.
pub(crate) fn doctor(client: &Client, out: &Output, services: &Services) -> Result<(), Failure> {
    let timeout = seconds("--command-timeout", services.command_timeout)?;
    let watchdog = seconds("--watchdog-timeout", services.watchdog_timeout)?;
    let mut options = DoctorOptions::new()
        .command_timeout(timeout)
        .watchdog_timeout(watchdog)
        .replica_acks(0)
        .names(services.names.iter().cloned());
    if let Some(text) = &services.idle_drop {
        options = options.idle_drop(idle_drop(text)?);
    }
    if let Some(n) = services.replica_acks {
        options = options.replica_acks(n);
    }
    if let Some(n) = services.replica_acks_aof {
        options = options.replica_acks_aof(n);
    }
    print(out, &client.doctor(&options).map_err(failure)?)
}

/// Prints `report` and sums it up in the exit status.
pub(crate) fn print(out: &Output, report: &Report) -> Result<(), Failure> {
    if out.json {
        print_json(&report_json(report))?;
    } else {
        print_text(&report_text(report))?;
    }
    match report.worst() {
        Level::Ok => Ok(()),
        Level::Fail => Err(Failure::ChecksFailed),
        _ => Err(Failure::ChecksWarned),
    }
}

/// One block per check, then the notes and the sum.
fn report_text(report: &Report) -> String {
    let mut text = String::new();
    for check in &report.checks {
        let title = match &check.node {
            Some(node) => format!("{} on {node}", check.name),
            None => check.name.to_owned(),
        };
        text.push_str(&format!("{title}: {}\n", check.verdict.as_str().to_uppercase()));
        let mut rows = vec![("found", check.found.clone())];
        if let Verdict::Unknown { reason, confirm_by_hand } = &check.verdict {
            rows.push(("why unknown", reason.clone()));
            rows.push(("confirm", confirm_by_hand.clone()));
        }
        rows.push(("meaning", check.meaning.clone()));
        rows.push(("guarantee", check.guarantee.to_owned()));
        rows.push(("docs", check.docs.to_owned()));
        if let Some(fix) = &check.fix {
            rows.push(("fix", fix.clone()));
        }
        for (label, value) in rows {
            text.push_str(&format!("  {label:<13}{value}\n"));
        }
        text.push('\n');
    }
    for note in &report.notes {
        text.push_str(&format!("note: {note}\n"));
    }
    let count = |level: Level| report.checks.iter().filter(|c| c.verdict.level() == level).count();
    text.push_str(&format!(
        "verdict: {} ({} ok, {} warn or unknown, {} fail)",
        report.worst(),
        count(Level::Ok),
        count(Level::Warn),
        count(Level::Fail)
    ));
    text.push('\n');
    text
}

/// The report as one JSON object.
fn report_json(report: &Report) -> Value {
    json!({
        "worst": report.worst().as_str(),
        "checks": report.checks.iter().map(check_json).collect::<Vec<_>>(),
        "notes": report.notes,
    })
}

fn check_json(check: &Check) -> Value {
    let (reason, confirm) = match &check.verdict {
        Verdict::Unknown { reason, confirm_by_hand } => (Some(reason), Some(confirm_by_hand)),
        _ => (None, None),
    };
    let mut figures = Map::new();
    for (name, figure) in &check.figures {
        let (key, value) = match figure {
            Figure::Number(n) => ((*name).to_owned(), json!(n)),
            Figure::Duration(d) => {
                (format!("{name}_ms"), json!(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)))
            }
            Figure::Flag(b) => ((*name).to_owned(), json!(b)),
            Figure::Text(t) => ((*name).to_owned(), json!(t)),
            other => ((*name).to_owned(), json!(other.to_string())),
        };
        figures.insert(key, value);
    }
    json!({
        "name": check.name,
        "node": check.node,
        "verdict": check.verdict.as_str(),
        "level": check.verdict.level().as_str(),
        "found": check.found,
        "figures": figures,
        "reason": reason,
        "confirm_by_hand": confirm,
        "meaning": check.meaning,
        "guarantee": check.guarantee,
        "docs": check.docs,
        "fix": check.fix,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_drops_take_a_unit_or_seconds() {
        let ok = |text: &str| idle_drop(text).ok();
        assert_eq!(ok("350s"), Some(Duration::from_secs(350)));
        assert_eq!(ok("350"), Some(Duration::from_secs(350)));
        assert_eq!(ok("4m"), Some(Duration::from_secs(240)));
        assert_eq!(ok("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(ok("1.5s"), Some(Duration::from_millis(1500)));
        for bad in ["", "0s", "-1s", "5 parsecs", "s"] {
            assert!(ok(bad).is_none(), "{bad}");
        }
    }
}
