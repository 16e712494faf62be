//! The bench process's own costs, read from `/proc`: CPU time and the
//! context switches of its threads. NaN where `/proc` is not available.

/// The process's CPU time (user + system, all threads), in seconds.
/// Resolution: one clock tick (10 ms).
pub(super) fn process_cpu() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return f64::NAN };
    let Some((_, rest)) = stat.rsplit_once(')') else { return f64::NAN };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command name: state is field 3, utime 14, stime 15.
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / 100.0,
        _ => f64::NAN,
    }
}

/// Context switches (voluntary + involuntary) of every thread of this
/// process but the main one: how often threads were woken.
pub(crate) fn thread_switches() -> f64 {
    let main = std::process::id().to_string();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return f64::NAN };
    let mut total = 0.0;
    for task in tasks.flatten() {
        if task.file_name().to_string_lossy() == main {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else { continue };
        for line in status.lines() {
            if let Some(v) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                total += v.trim().parse::<f64>().unwrap_or(0.0);
            }
        }
    }
    total
}

/// The machine's 1, 5 and 15 minute load averages, or `n/a`.
pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "n/a".to_owned())
}
