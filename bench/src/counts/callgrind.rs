//! Runs a path's worker under callgrind and reads back what it counted.
//!
//! Only the client runs under valgrind; Redis runs natively. Collection is
//! off at the start (`--collect-atstart=no`) and on only inside the path's
//! measured function, per thread (`--toggle-collect`), and callgrind writes
//! a dump file after every call of it (`--dump-after`), so each file holds
//! one operation's instructions and nothing else: no start-up, no set-up,
//! no other thread. The operations that count are the worker's to say
//! (after a warm-up; for the renewal, whole rounds with every hold in
//! place); the figure is the fewest any of them took (see
//! [`Measured::instructions`]), with their median and most beside it.
//! The C library's `memset` is counted apart, not in the figure (see
//! [`Measured::memset`]).

use std::path::{Path as FsPath, PathBuf};
use std::process::Command;

use crate::commands::{self, Calls};
use crate::error::{Res, err};
use crate::paths::Path;

/// Set, the workers' own lines (each operation's commands) are shown.
const TRACE: &str = "KEYHOLDER_COUNTS_TRACE";

/// What one path cost per operation.
pub(crate) struct Measured {
    /// The fewest instructions an operation took, `memset`'s left out: the
    /// path's own work. Some operations also wake one of the client's
    /// threads (a hold registered while the thread that listens for old
    /// holds sleeps with no deadline: a channel send and a futex wake,
    /// about 250 instructions), as the threads' timing has it, which moved
    /// the median of a new hold's acquire by 2.7% between two runs.
    pub(crate) instructions: u64,
    /// Their median.
    pub(crate) median: u64,
    /// The median of the instructions in `memset`, left out of the above:
    /// callgrind counts each byte a `rep stosb` clears as an instruction,
    /// so this is the size of the buffers zeroed (a connection's read
    /// buffer, before each read, as much as it has free), which moves from
    /// call to call with where that buffer stands and from machine to
    /// machine with the C library's choice of variant: shown, not gated.
    pub(crate) memset: u64,
    /// The most instructions a counted operation took.
    pub(crate) most: u64,
    /// Operations counted.
    pub(crate) ops: usize,
    /// Operations left out: they took another path (see `tally::Tally`).
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
    let exe = std::env::current_exe()?.to_string_lossy().into_owned();
    let args = padded(&exe, &["--worker", path.name, "--url", url, "--dir", &dir_text])?;
    let mut command = Command::new(valgrind()?);
    command.env_clear();
    if std::env::var_os(TRACE).is_some() {
        // Moves the counts a little (see COMMAND_LINE): for debugging.
        command.env(TRACE, "1");
    }
    let out = command
        .arg("--tool=callgrind")
        .arg("--collect-atstart=no")
        .arg(format!("--toggle-collect={}", path.toggle))
        .arg(format!("--dump-after={}", path.toggle))
        .arg(format!("--callgrind-out-file={}", dir.join("cg.out").display()))
        .arg(&exe)
        .args(&args)
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if std::env::var_os(TRACE).is_some() {
        // The worker's own lines (valgrind's start with `==`).
        let stderr = String::from_utf8_lossy(&out.stderr);
        stderr.lines().filter(|l| !l.starts_with("==")).for_each(|l| eprintln!("{}: {l}", path.name));
    }
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
    let dumps =
        field("dumps ")?.split_whitespace().map(|n| n.parse::<usize>()).collect::<Result<Vec<usize>, _>>()?;
    let outliers = field("outliers ")?.parse::<usize>()?;
    let costs = dumps.iter().map(|n| costs_of(&dump_file(&dir, *n))).collect::<Res<Vec<Costs>>>()?;
    let mut counted: Vec<u64> = costs.iter().map(|c| c.all - c.memset).collect();
    let mut memset: Vec<u64> = costs.iter().map(|c| c.memset).collect();
    counted.sort_unstable();
    memset.sort_unstable();
    let (Some(&low), Some(&high)) = (counted.first(), counted.last()) else {
        return Err(err(format!("{}: no operation was counted", path.name)));
    };
    Ok(Measured {
        instructions: low,
        median: counted[counted.len() / 2],
        most: high,
        memset: memset[memset.len() / 2],
        ops: counted.len(),
        outliers,
        commands,
    })
}

/// The bytes the worker's command line takes on its initial stack (its
/// path twice, as `argv[0]` and as the auxiliary vector's `AT_EXECFN`,
/// and each argument, each with its NUL), made up to with a `--pad`
/// argument. Where the stack begins moves with that size (valgrind places
/// it at the same address every time, less what it holds), and with it the
/// alignment of the buffers on it, which some paths' instruction counts
/// follow: 300 instructions of a re-entry's 7 000 came and went with the
/// length of the scratch directory's name. The environment is emptied for
/// the same reason.
const COMMAND_LINE: usize = 1_024;

/// `args` with `--pad` and a run of `x` that bring the command line to
/// [`COMMAND_LINE`] bytes.
fn padded(exe: &str, args: &[&str]) -> Res<Vec<String>> {
    let pad_flag = "--pad";
    let used = 2 * (exe.len() + 1) + args.iter().map(|a| a.len() + 1).sum::<usize>() + pad_flag.len() + 1 + 1;
    let room = COMMAND_LINE
        .checked_sub(used)
        .ok_or_else(|| err(format!("the worker's command line is over {COMMAND_LINE} bytes")))?;
    let mut padded: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    padded.push(pad_flag.to_owned());
    padded.push("x".repeat(room));
    Ok(padded)
}

/// valgrind's path, found on `PATH` (the worker runs with an empty
/// environment, so it is not looked up there).
fn valgrind() -> Res<PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("valgrind"))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| err("valgrind is not on PATH: install it (Debian: apt-get install valgrind)"))
}

/// The `n`th dump's file (callgrind numbers them from 1).
fn dump_file(dir: &FsPath, n: usize) -> PathBuf {
    dir.join(format!("cg.out.{n}"))
}

/// What a dump file counted: all instructions (its `summary:` or
/// `totals:` line), and those of the C library's `memset`.
fn costs_of(file: &FsPath) -> Res<Costs> {
    let text = std::fs::read_to_string(file).map_err(|e| err(format!("{}: {e}", file.display())))?;
    let all = text
        .lines()
        .find_map(|l| l.strip_prefix("summary:").or_else(|| l.strip_prefix("totals:")))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| err(format!("{}: no summary line", file.display())))?;
    Ok(Costs { all, memset: memset_of(&text) })
}

/// One operation's instructions.
#[derive(Clone, Copy)]
struct Costs {
    all: u64,
    memset: u64,
}

/// The instructions spent in `memset` (glibc's `__memset_*` variants) in
/// callgrind's output format: the cost lines of those functions' own
/// blocks (`fn=`), not the inclusive costs after their `calls=` lines.
/// Names are given once, as `fn=(id) name` or `cfn=(id) name`, and by id
/// after.
fn memset_of(text: &str) -> u64 {
    let mut names: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    let mut in_memset = false;
    let mut after_calls = false;
    let mut sum = 0;
    for line in text.lines() {
        let (is_fn, spec) = match line.split_once('=') {
            Some(("fn", spec)) => (true, spec),
            Some(("cfn", spec)) => (false, spec),
            _ => (false, ""),
        };
        if !spec.is_empty() {
            let (id, name) = spec.split_once(' ').unwrap_or((spec, ""));
            if !name.is_empty() {
                names.insert(id, name);
            }
            if is_fn {
                let name = names.get(id).copied().unwrap_or("");
                in_memset = name.starts_with("__memset_") || name == "memset";
            }
            continue;
        }
        if line.starts_with("calls=") {
            after_calls = true;
            continue;
        }
        let is_cost = line.starts_with(|c: char| c.is_ascii_digit() || c == '+' || c == '-' || c == '*');
        if is_cost {
            if in_memset && !after_calls {
                sum += line.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            }
            after_calls = false;
        }
    }
    sum
}
