//! The committed baseline (`bench/counts-baseline.txt`), and the gate: a
//! fresh run fails against it when a path's instructions grow by more than
//! [`TOLERANCE`] or any of its Redis command counts grows at all. A count
//! that improves as much fails too, with a request to bless: the baseline
//! moves with the change that moved it, in the same commit, so a later
//! regression is measured from where the code really is.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::callgrind::Measured;
use crate::commands::{self, Calls};
use crate::error::{Res, err};

/// The committed file, beside the bench crate's manifest.
pub(crate) const FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/counts-baseline.txt");

/// How much a path's instructions may grow (or shrink) before the gate
/// fails, in percent: rounding, the hasher's per-process seed and the
/// server's replies move a count by far less (see docs/performance.md).
pub(crate) const TOLERANCE: f64 = 3.0;

/// One path's committed counts.
pub(crate) struct Entry {
    pub(crate) instructions: u64,
    pub(crate) commands: Calls,
}

const HEADER: &str = "\
# keyholder's exact counts per operation (issue 38; docs/performance.md,
# \"Exact counts (gated in CI)\"): the client's instructions (callgrind, the
# `counts` profile: release in one code generation unit; this toolchain:
# instruction counts move with the compiler)
# and the Redis commands each operation runs, top-level and inside scripts.
# `.ci/run` fails when a path's instructions move by more than 3% or any of
# its command counts moves. Rewritten by
#   cargo run --profile counts -p keyholder-bench --bin counts -- --bless
# path instructions commands(name=count ...)
";

/// Reads the baseline; an absent file is an empty one.
pub(crate) fn read() -> Res<BTreeMap<String, Entry>> {
    let text = match std::fs::read_to_string(FILE) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(err(format!("{FILE}: {e}"))),
    };
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let mut words = line.splitn(3, ' ');
            let (Some(name), Some(instructions), rest) = (words.next(), words.next(), words.next()) else {
                return Err(err(format!("{FILE}: bad line {line:?}")));
            };
            let entry = Entry {
                instructions: instructions.parse()?,
                commands: commands::parse(rest.unwrap_or("-"))?,
            };
            Ok((name.to_owned(), entry))
        })
        .collect()
}

/// Writes `measured` as the baseline.
pub(crate) fn write(measured: &[(&str, Measured)]) -> Res<()> {
    let mut text = HEADER.to_owned();
    for (name, m) in measured {
        writeln!(text, "{name} {} {}", m.instructions, commands::format(&m.commands))?;
    }
    std::fs::write(FILE, text)?;
    Ok(())
}

/// The table of `measured` against `baseline`, and what fails the gate;
/// `complete`: every path was measured (not `--only`), so a baseline entry
/// that was not is a path gone.
pub(crate) fn compare(
    measured: &[(&str, Measured)],
    baseline: &BTreeMap<String, Entry>,
    complete: bool,
) -> (String, Vec<String>) {
    let mut table = String::from(
        "| path | instructions: baseline | now | change | median / most | memset (not gated) | commands: baseline | now |\n\
         |---|---:|---:|---:|---:|---:|---:|---|\n",
    );
    let mut failures = Vec::new();
    for (name, m) in measured {
        let total: u64 = m.commands.values().sum();
        let spread = match m.outliers {
            0 => format!("{} / {} ({})", m.median, m.most, m.ops),
            n => format!("{} / {} ({}, {n} left out)", m.median, m.most, m.ops),
        };
        let now_commands = format!("{total}: {}", commands::format(&m.commands));
        let Some(base) = baseline.get(*name) else {
            let _ = writeln!(
                table,
                "| {name} | - | {} | new | {spread} | {} | - | {now_commands} |",
                m.instructions, m.memset
            );
            failures.push(format!("{name}: not in the baseline (bless it)"));
            continue;
        };
        let change =
            (m.instructions as f64 - base.instructions as f64) / base.instructions.max(1) as f64 * 100.0;
        let base_total: u64 = base.commands.values().sum();
        let _ = writeln!(
            table,
            "| {name} | {} | {} | {change:+.2}% | {spread} | {} | {base_total} | {now_commands} |",
            base.instructions, m.instructions, m.memset
        );
        if change > TOLERANCE {
            failures.push(format!("{name}: instructions grew {change:+.2}% (more than {TOLERANCE}%)"));
        } else if change < -TOLERANCE {
            failures.push(format!(
                "{name}: instructions fell {change:+.2}%: bless the baseline (--bless) in this commit"
            ));
        }
        let names: std::collections::BTreeSet<&String> =
            base.commands.keys().chain(m.commands.keys()).collect();
        for command in names {
            let (was, now) = (
                base.commands.get(command).copied().unwrap_or(0),
                m.commands.get(command).copied().unwrap_or(0),
            );
            if now > was {
                failures
                    .push(format!("{name}: {command} {was} -> {now} per operation (commands may not grow)"));
            } else if now < was {
                failures.push(format!(
                    "{name}: {command} {was} -> {now} per operation: fewer, bless the baseline (--bless) in this commit"
                ));
            }
        }
    }
    for name in baseline.keys() {
        if complete && !measured.iter().any(|(n, _)| n == name) {
            failures.push(format!("{name}: in the baseline but not measured"));
        }
    }
    (table, failures)
}
