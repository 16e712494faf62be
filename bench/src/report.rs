//! The report: Markdown tables on stdout (progress goes to stderr), and the
//! cell formats every table uses. A figure that does not apply is NaN and
//! prints as `n/a`.

use std::fmt::Write as _;

/// A figure with `decimals` decimals, or `n/a`.
pub(crate) fn fmt(v: f64, decimals: usize) -> String {
    if v.is_nan() { "n/a".to_owned() } else { format!("{v:.decimals$}") }
}

/// A ratio such as `0.93x`, or `n/a`.
pub(crate) fn fmt_ratio(v: f64) -> String {
    if v.is_nan() { "n/a".to_owned() } else { format!("{v:.2}x") }
}

/// The median of per-run ratios, and in brackets the worst run's, when
/// there are several: `0.93x (0.88x)`. A target "in every run" is read off
/// the bracket.
pub(crate) fn fmt_ratios(ratios: Vec<f64>) -> String {
    let worst = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let median = crate::measure::median(ratios.clone());
    if ratios.len() < 2 || worst.is_nan() {
        return fmt_ratio(median);
    }
    format!("{} ({})", fmt_ratio(median), fmt_ratio(worst))
}

/// Prints a `### title` section: a table with aligned columns, then the
/// notes that are not empty.
pub(crate) fn print_table(title: &str, header: &[impl AsRef<str>], rows: &[Vec<String>], notes: &[String]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.as_ref().chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut out = String::from("|");
        for (cell, w) in cells.iter().zip(&widths) {
            let pad = w.saturating_sub(cell.chars().count());
            let _ = write!(out, " {cell}{} |", " ".repeat(pad));
        }
        out
    };
    println!("\n### {title}\n");
    println!("{}", line(&header.iter().map(|h| h.as_ref().to_owned()).collect::<Vec<_>>()));
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    println!("{}", line(&rule).replace(' ', "-"));
    for row in rows {
        println!("{}", line(row));
    }
    if !notes.is_empty() {
        println!();
        for note in notes.iter().filter(|n| !n.is_empty()) {
            println!("{note}");
        }
    }
}
