//! Times as the history shows and reads them: UTC, `YYYY-MM-DD HH:MM`, no time-zone database.

/// Now, in seconds since the Unix epoch (0 on a clock set before it).
pub fn now_unix_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

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

/// Days in month `m` (1-12) of year `y`, by the Gregorian leap-year rule.
fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Reads a time given on the command line: Unix seconds, `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS]`
/// (UTC, with or without the ` UTC` that [`utc`] prints), or an age (`90m`, `36h`, `7d` before
/// `now`). A date that does not exist (February 30th), a time of day out of range, a year
/// outside 0-9999 or an age too large to count back from `now` is no time.
pub fn parse(text: &str, now: i64) -> Option<i64> {
    let t = text.trim();
    if let Ok(n) = t.parse::<i64>() {
        return Some(n);
    }
    for (suffix, unit) in [("m", 60), ("h", 3600), ("d", 86_400)] {
        if let Some(n) = t.strip_suffix(suffix).and_then(|n| n.parse::<i64>().ok()) {
            return now.checked_sub(n.checked_mul(unit)?);
        }
    }
    let t = t.strip_suffix("UTC").map_or(t, str::trim_end);
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
    let ok = (0..=9999).contains(y)
        && (1..=12).contains(m)
        && (1..=days_in_month(*y, *m)).contains(d)
        && (0..24).contains(h)
        && (0..60).contains(mi)
        && (0..61).contains(&sec)
        && rest.len() <= 1;
    ok.then(|| days_from_civil(*y, *m, *d) * 86_400 + h * 3600 + mi * 60 + sec)
}

/// Why a `--since`/`--until` window can hold no run, or `None` when it can: a start after
/// `now` (no run is recorded in the future), or a start after the end.
pub fn empty_window(since: Option<i64>, until: Option<i64>, now: i64) -> Option<String> {
    if let Some(s) = since
        && s > now
    {
        return Some(format!(
            "--since {} is in the future, so no run can match; give a time in the past, such as 7d",
            utc(s)
        ));
    }
    if let (Some(s), Some(u)) = (since, until)
        && s > u
    {
        return Some(format!(
            "--since {} is after --until {}, so no run can match; give --since the earlier time",
            utc(s),
            utc(u)
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_that_holds_no_run_says_why() {
        let now = 1_800_000_000;
        assert_eq!(empty_window(None, None, now), None);
        assert_eq!(empty_window(Some(now), Some(now), now), None);
        assert_eq!(empty_window(Some(now - 86_400), None, now), None);
        // An end in the future is fine: it only bounds nothing.
        assert_eq!(empty_window(None, Some(now + 86_400), now), None);
        let future = empty_window(Some(now + 1), None, now).unwrap();
        assert!(
            future.starts_with("--since 2027-01-15 08:00 UTC is in the future"),
            "{future}"
        );
        let reversed = empty_window(Some(now - 60), Some(now - 120), now).unwrap();
        assert!(
            reversed.contains("is after --until 2027-01-15 07:58 UTC"),
            "{reversed}"
        );
    }

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

    #[test]
    fn what_the_history_prints_reads_back_and_impossible_times_do_not() {
        // Found by tests/parsers.rs: the printed form with its ` UTC` did not read back; a day
        // past the month's end read as a day of the next month; a negative hour or minute read
        // as a time before midnight; and an age or year too large overflowed (a panic in debug
        // builds, a wrapped time in release).
        assert_eq!(parse(&utc(1_764_091_800), 0), Some(1_764_091_800));
        assert_eq!(parse("2025-02-29", 0), None);
        assert_eq!(parse("2024-02-29", 0), Some(1_709_164_800));
        assert_eq!(parse("2025-04-31", 0), None);
        assert_eq!(parse("2025-01-01T-2:00", 0), None);
        assert_eq!(parse("2025-01-01T00:-1", 0), None);
        assert_eq!(parse("2025-01-01T00:00:00:00", 0), None);
        assert_eq!(parse("2000000000000000h", -2_023_372_036_854_775_809), None);
        assert_eq!(parse("99999999999999999-01-01", 0), None);
    }
}
