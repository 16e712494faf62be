//! Durations as people write them, for every message that names one (a
//! setting out of range, a timeout). A leaf: it imports nothing of the
//! crate, so the error types and the settings can both use it.

use std::time::Duration;

/// `d` for people, in the largest unit it reaches, with at most three
/// decimals: `1.5 s`, `30 days`, `250 ms`, `584942417355 years`. Every
/// message that names a duration (a setting out of range, a timeout) uses
/// it, rather than `Debug`'s `18446744073709551615.999999999s`.
pub(crate) fn for_people(d: Duration) -> String {
    const UNITS: [(u64, &str, &str); 8] = [
        (365 * 24 * 3600 * 1_000_000_000, "year", "years"),
        (24 * 3600 * 1_000_000_000, "day", "days"),
        (3600 * 1_000_000_000, "h", "h"),
        (60 * 1_000_000_000, "min", "min"),
        (1_000_000_000, "s", "s"),
        (1_000_000, "ms", "ms"),
        (1_000, "µs", "µs"),
        (1, "ns", "ns"),
    ];
    let nanos = d.as_nanos();
    let Some(&(unit, one, many)) = UNITS.iter().find(|(unit, ..)| nanos >= u128::from(*unit)) else {
        return "0 s".to_owned();
    };
    let unit = u128::from(unit);
    let whole = nanos / unit;
    // Years are counted whole: a fraction of one says nothing at that size.
    let thousandths = if many == "years" { 0 } else { (nanos % unit) * 1000 / unit };
    let number = if thousandths == 0 {
        whole.to_string()
    } else {
        format!("{whole}.{thousandths:03}").trim_end_matches('0').to_owned()
    };
    let name = if whole == 1 && thousandths == 0 { one } else { many };
    format!("{number} {name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(for_people(Duration::MAX), "584942417355 years");
        assert_eq!(for_people(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(for_people(Duration::from_secs(30 * 24 * 3600)), "30 days");
        assert_eq!(for_people(Duration::from_secs(24 * 3600)), "1 day");
        assert_eq!(for_people(Duration::from_secs(36 * 3600)), "1.5 days");
        assert_eq!(for_people(Duration::from_secs(3600)), "1 h");
        assert_eq!(for_people(Duration::from_secs(90)), "1.5 min");
        assert_eq!(for_people(Duration::from_millis(1)), "1 ms");
        assert_eq!(for_people(Duration::from_micros(999)), "999 µs");
        assert_eq!(for_people(Duration::from_nanos(1_001_000_001)), "1.001 s");
        assert_eq!(for_people(Duration::ZERO), "0 s");
    }
}
