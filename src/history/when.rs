//! Times as the history shows and reads them: UTC, `YYYY-MM-DD HH:MM`, no time-zone database.

/// Days since 1970-01-01 of a civil date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date of a day count (Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

/// `2026-11-25 17:34 UTC`.
pub fn utc(t: i64) -> String {
    let (y, m, d) = civil_from_days(t.div_euclid(86_400));
    let s = t.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        s / 3600,
        s % 3600 / 60
    )
}

/// Reads a time given on the command line: Unix seconds, `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS]`
/// (UTC), or an age (`90m`, `36h`, `7d` before `now`).
pub fn parse(text: &str, now: i64) -> Option<i64> {
    let t = text.trim();
    if let Ok(n) = t.parse::<i64>() {
        return Some(n);
    }
    for (suffix, unit) in [("m", 60), ("h", 3600), ("d", 86_400)] {
        if let Some(n) = t.strip_suffix(suffix).and_then(|n| n.parse::<i64>().ok()) {
            return Some(now - n * unit);
        }
    }
    let (date, time) = t.split_once(['T', ' ']).unwrap_or((t, "00:00"));
    let ymd: Vec<i64> = date
        .split('-')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let hms: Vec<i64> = time
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let ([y, m, d], [h, mi, rest @ ..]) = (ymd.as_slice(), hms.as_slice()) else {
        return None;
    };
    let sec = rest.first().copied().unwrap_or(0);
    let ok = (1..=12).contains(m) && (1..=31).contains(d) && *h < 24 && *mi < 60 && sec < 61;
    ok.then(|| days_from_civil(*y, *m, *d) * 86_400 + h * 3600 + mi * 60 + sec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_and_print_in_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc(1_764_091_800), "2025-11-25 17:30 UTC");
        assert_eq!(parse("2025-11-25T17:30", 0), Some(1_764_091_800));
        assert_eq!(parse("2025-11-25", 0), Some(1_764_028_800));
        assert_eq!(parse("7d", 1_000_000), Some(1_000_000 - 7 * 86_400));
        assert_eq!(parse("12", 0), Some(12));
        assert_eq!(parse("yesterday", 0), None);
        assert_eq!(parse("2025-13-01", 0), None);
    }
}
