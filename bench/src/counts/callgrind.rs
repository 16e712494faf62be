//! Runs a path's worker under callgrind and reads back what it counted.
//!
//! Only the client runs under valgrind; Redis runs natively. Collection is
//! off at the start (`--collect-atstart=no`) and on only inside the path's
//! measured function, per thread (`--toggle-collect`), and callgrind writes
//! a dump file after every call of it (`--dump-after`), so each file holds
//! one operation's instructions and nothing else: no start-up, no set-up,
//! no other thread. The operations that count are the worker's to say
//! (after a warm-up; for the renewal, whole rounds with every hold in
//! place); the figure is their median, and their spread is reported.

use std::path::{Path as FsPath, PathBuf};
use std::process::Command;

use crate::commands::{self, Calls};
use crate::error::{Res, err};
use crate::paths::Path;

/// What one path cost per operation.
pub(crate) struct Measured {
    /// The median of the operations' instructions.
    pub(crate) instructions: u64,
    /// The fewest and the most instructions any counted operation took.
    pub(crate) spread: (u64, u64),
    /// Operations counted.
    pub(crate) ops: usize,
    /// Operations left out: they took another path (see `paths::Tally`).
    pub(crate) outliers: usize,
    /// The Redis commands of one operation.
    pub(crate) commands: Calls,
}

/// Runs `path`'s worker (this program, `--worker`) under callgrind against
/// the server at `url`, in a scratch directory under `scratch`.
pub(crate) fn measure(path: &Path, url: &str, scratch: &FsPath) -> Res<Measured> {
    let dir = scratch.join(path.name);
    std::fs::create_dir_all(&dir)?;
    let dir_text = dir.to_string_lossy().into_owned();
    let exe = std::env::current_exe()?;
    let out = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg("--collect-atstart=no")
        .arg(format!("--toggle-collect={}", path.toggle))
        .arg(format!("--dump-after={}", path.toggle))
        .arg(format!("--callgrind-out-file={}", dir.join("cg.out").display()))
        .arg(exe)
        .args(["--worker", path.name, "--url", url, "--dir", &dir_text])
        .output()
        .map_err(|e| err(format!("cannot run valgrind ({e}): install it (Debian: apt-get install valgrind)")))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(err(format!(
            "{}: the worker failed ({}):\n{}\n{}",
            path.name,
            out.status,
            stdout.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let field = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(str::trim)
            .ok_or_else(|| err(format!("{}: the worker did not report {key:?}:\n{stdout}", path.name)))
    };
    let commands = commands::parse(field("commands ")?)?;
    let dumps = field("dumps ")?
        .split_whitespace()
        .map(|n| n.parse::<usize>())
        .collect::<Result<Vec<usize>, _>>()?;
    let outliers = field("outliers ")?.parse::<usize>()?;
    let mut counts = dumps.iter().map(|n| total_of(&dump_file(&dir, *n))).collect::<Res<Vec<u64>>>()?;
    counts.sort_unstable();
    let (Some(&low), Some(&high)) = (counts.first(), counts.last()) else {
        return Err(err(format!("{}: no operation was counted", path.name)));
    };
    let instructions = counts[counts.len() / 2];
    Ok(Measured { instructions, spread: (low, high), ops: counts.len(), outliers, commands })
}

/// The `n`th dump's file (callgrind numbers them from 1).
fn dump_file(dir: &FsPath, n: usize) -> PathBuf {
    dir.join(format!("cg.out.{n}"))
}

/// The instructions a dump file counted: its `totals:` line (or, from an
/// older callgrind, `summary:`).
fn total_of(file: &FsPath) -> Res<u64> {
    let text = std::fs::read_to_string(file).map_err(|e| err(format!("{}: {e}", file.display())))?;
    text.lines()
        .find_map(|l| l.strip_prefix("totals:").or_else(|| l.strip_prefix("summary:")))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| err(format!("{}: no totals line", file.display())))
}
