//! What [`Client::doctor`](crate::Client::doctor) hands back: a [`Report`]
//! of [`Check`]s, each with what it found, a [`Verdict`], the guarantee it
//! bears on, where the docs explain it and how to fix it.

use std::fmt;
use std::time::Duration;

/// A deployment checked against keyholder's guarantees: one [`Check`] per
/// check and primary (a Redis Cluster's every primary), in the order the
/// checks run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// The checks, grouped by check, each group's nodes sorted.
    pub checks: Vec<Check>,
    /// What this version of the doctor does not check yet, and other
    /// remarks that are no verdict.
    pub notes: Vec<String>,
}

impl Report {
    /// The most severe verdict: [`Level::Ok`] when every check passed,
    /// [`Level::Warn`] when some warned or could not tell
    /// ([`Verdict::Unknown`]), [`Level::Fail`] when one failed. A report
    /// with no checks is [`Level::Ok`].
    pub fn worst(&self) -> Level {
        self.checks.iter().map(|check| check.verdict.level()).max().unwrap_or(Level::Ok)
    }

    /// The checks whose verdict is at least `level`.
    pub fn at_least(&self, level: Level) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(move |check| check.verdict.level() >= level)
    }
}

/// One check of one primary.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Check {
    /// The check: `eviction`, `persistence`, `server`, `replication`,
    /// `clocks`, `failover`, `pubsub`, `latency`, and on a Redis Cluster
    /// `cluster` and `cluster_names`.
    pub name: &'static str,
    /// On a Redis Cluster, the primary checked (`host:port`); `None` on a
    /// single server or through Sentinel.
    pub node: Option<String>,
    /// What it found, in words, with the numbers.
    pub found: String,
    /// The same numbers, typed, by name (`maxmemory`,
    /// `maxmemory_policy`, ...); a figure the server would not tell is
    /// missing.
    pub figures: Vec<(&'static str, Figure)>,
    /// The verdict.
    pub verdict: Verdict,
    /// What the finding means for locks held on this deployment.
    pub meaning: String,
    /// The guarantee it bears on, as docs/guarantees.md names it.
    pub guarantee: &'static str,
    /// The docs section that explains it (`docs/operations.md#eviction`).
    pub docs: &'static str,
    /// What to change, when the verdict is not [`Verdict::Ok`].
    pub fix: Option<String>,
}

impl Check {
    /// The figure named `name`, if the check found it.
    pub fn figure(&self, name: &str) -> Option<&Figure> {
        self.figures.iter().find(|(n, _)| *n == name).map(|(_, figure)| figure)
    }
}

/// A number (or word) a check found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Figure {
    /// A count or a size (bytes, replicas).
    Number(i64),
    /// A duration (a replica's lag, a threshold).
    Duration(Duration),
    /// A yes or no (`appendonly`).
    Flag(bool),
    /// A word or a setting as the server spells it (`allkeys-lru`,
    /// `7.0.15`).
    Text(String),
}

impl fmt::Display for Figure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Figure::Number(n) => write!(f, "{n}"),
            Figure::Duration(d) => write!(f, "{} ms", d.as_millis()),
            Figure::Flag(b) => write!(f, "{}", if *b { "yes" } else { "no" }),
            Figure::Text(t) => f.write_str(t),
        }
    }
}

/// A check's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// The guarantee holds as far as this check can tell.
    Ok,
    /// The guarantee holds with a weakness worth knowing (a restart loses
    /// holds; a failover may).
    Warn,
    /// The deployment breaks the guarantee (an eviction policy that can
    /// drop held locks).
    Fail,
    /// The check could not read what it needs: the server refused a
    /// command (managed services refuse `CONFIG` and trim `INFO`) or does
    /// not give the figure. Counts as a warning; never as ok.
    Unknown {
        /// Why the check cannot tell (the server's refusal).
        reason: String,
        /// What the operator should confirm by hand instead.
        confirm_by_hand: String,
    },
}

impl Verdict {
    /// How severe it is: [`Verdict::Unknown`] is a warning.
    pub fn level(&self) -> Level {
        match self {
            Verdict::Ok => Level::Ok,
            Verdict::Warn | Verdict::Unknown { .. } => Level::Warn,
            Verdict::Fail => Level::Fail,
        }
    }

    /// `ok`, `warn`, `fail` or `unknown`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Fail => "fail",
            Verdict::Unknown { .. } => "unknown",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How severe a verdict is, ordered: `Ok < Warn < Fail` (for an exit
/// status, or a metric of a service that checks itself at start-up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Level {
    /// Every guarantee holds as far as the checks can tell.
    Ok,
    /// A weakness, or a check that could not tell.
    Warn,
    /// A guarantee broken.
    Fail,
}

impl Level {
    /// `ok`, `warn` or `fail`.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Fail => "fail",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A check with nothing found yet: `ok`, no figures, no fix (the checks
/// fill in the rest).
pub(super) fn blank(name: &'static str, guarantee: &'static str, docs: &'static str) -> Check {
    Check {
        name,
        node: None,
        found: String::new(),
        figures: Vec::new(),
        verdict: Verdict::Ok,
        meaning: String::new(),
        guarantee,
        docs,
        fix: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(verdict: Verdict) -> Check {
        Check { figures: vec![("maxmemory", Figure::Number(0))], verdict, ..blank("eviction", "", "") }
    }

    #[test]
    fn the_worst_verdict_counts_unknown_as_a_warning() {
        let unknown = Verdict::Unknown { reason: "refused".into(), confirm_by_hand: "x".into() };
        let report = |verdicts: Vec<Verdict>| Report {
            checks: verdicts.into_iter().map(check).collect(),
            notes: Vec::new(),
        };
        assert_eq!(report(vec![]).worst(), Level::Ok);
        assert_eq!(report(vec![Verdict::Ok, Verdict::Ok]).worst(), Level::Ok);
        assert_eq!(report(vec![Verdict::Ok, unknown.clone()]).worst(), Level::Warn);
        assert_eq!(report(vec![Verdict::Warn, Verdict::Fail, unknown]).worst(), Level::Fail);
        assert_eq!(report(vec![Verdict::Fail, Verdict::Ok]).at_least(Level::Warn).count(), 1);
    }

    #[test]
    fn figures_are_found_by_name() {
        let c = check(Verdict::Ok);
        assert_eq!(c.figure("maxmemory"), Some(&Figure::Number(0)));
        assert_eq!(c.figure("nothing"), None);
        assert_eq!(Figure::Duration(Duration::from_millis(1500)).to_string(), "1500 ms");
        assert_eq!(Figure::Flag(true).to_string(), "yes");
    }
}
