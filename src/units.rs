//! Quantities as people write and read them: one parser for every duration flag, and the
//! number formats every renderer shares. Pure functions, no I/O, at the bottom of the crate so
//! that both the terminal printer (`output`) and the HTML primitives (`report`) can use them
//! without importing each other.

use std::time::Duration;

/// The longest duration any flag accepts: a day. Long enough for any measurement, short enough
/// that no arithmetic on it overflows.
pub const MAX_DURATION: Duration = Duration::from_secs(86_400);

/// Parses a duration flag: a number with an optional unit, `ns`, `us`, `ms`, `s`, `m` or `h`
/// (`500ms`, `2s`, `1m`, `0.2`); a bare number is seconds, so `--duration 10` keeps its old
/// meaning. Negative, non-finite and absurd values (over [`MAX_DURATION`]) are errors, never a
/// panic in a later conversion.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        // Any letter, not only ASCII: `µs` starts with the micro sign (issue 21, found by a
        // property test: `250µs` was refused as not a time).
        .find(|c: char| c.is_alphabetic() && c != 'e' && c != 'E')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale = match unit.trim() {
        "" | "s" | "sec" | "secs" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "ns" => 1e-9,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "`{t}`: unknown unit `{other}`; give a time like `500ms`, `2s` or `1m`"
            ));
        }
    };
    let bad =
        || format!("`{t}` is not a time; give one like `500ms`, `2s`, `1m` (or seconds: `2`)");
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    if !v.is_finite() || v < 0.0 {
        return Err(bad());
    }
    let d = Duration::try_from_secs_f64(v * scale).map_err(|_| bad())?;
    if d > MAX_DURATION {
        return Err(format!("`{t}` is longer than a day; give a shorter time"));
    }
    Ok(d)
}

/// [`parse_duration`] for a command-line flag: a bad value is bad input naming the flag (one
/// line, exit 2).
pub fn flag_duration(flag: &str, text: &str) -> anyhow::Result<Duration> {
    parse_duration(text).map_err(|e| crate::error::bad_input(format!("--{flag}: {e}")))
}

/// The most runs any `--repeats` accepts: enough for a tight interval, few enough that the
/// samples of every run fit in memory and the command ends the same day.
pub const MAX_REPEATS: usize = 100;

/// A count flag (`--repeats`) checked against its range before anything runs: outside
/// `min..=max` is bad input naming the flag, the value and the range to give (one line, exit 2).
pub fn flag_count(flag: &str, value: usize, min: usize, max: usize) -> anyhow::Result<usize> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(crate::error::bad_input(format!(
            "--{flag} {value}: give {min} to {max}"
        )))
    }
}

/// A number as given, for a message that quotes it: as written when it is of everyday size, in
/// scientific notation when it is very large or very small (`1e300`, not three hundred digits;
/// `2.5e-9`, not a string of zeros). `NaN` and `inf` as such.
pub fn fmt_given(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() || a == 0.0 || (1e-3..1e9).contains(&a) {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

/// A figure with `decimals` where it is of printable size, in scientific notation with three
/// significant digits beyond 1e12 (no row of a table is ever a hundred digits wide).
pub fn fmt_fixed(v: f64, decimals: usize) -> String {
    if v.is_finite() && v.abs() >= 1e12 {
        format!("{v:.2e}")
    } else {
        format!("{v:.decimals$}")
    }
}

/// The largest percentage a regression or change threshold takes (`compare
/// --fail-on-regression`, `history check --threshold`, `fleet --threshold`): a figure worse by
/// more than 1000% took 11 times as long, and a rate can lose at most 100%, so a larger
/// threshold could only fire on a time that grew more than elevenfold, and is almost surely a
/// typo for a smaller one.
pub const MAX_THRESHOLD_PCT: f64 = 1000.0;

/// A threshold flag in percent, checked before anything is read: 0 (any change beyond noise) to
/// [`MAX_THRESHOLD_PCT`]; negative, NaN, infinite or larger is bad input naming the flag, the
/// value and the range (one line, exit 2).
pub fn flag_percent(flag: &str, value: f64) -> anyhow::Result<f64> {
    if (0.0..=MAX_THRESHOLD_PCT).contains(&value) {
        return Ok(value);
    }
    let why = if value > MAX_THRESHOLD_PCT {
        " (worse by more than 1000% is 11 times as long, and a rate loses at most 100%: a \
         larger threshold is almost surely a typo)"
    } else {
        ""
    };
    Err(crate::error::bad_input(format!(
        "--{flag} {}: give 0 to {MAX_THRESHOLD_PCT} percent{why}",
        fmt_given(value)
    )))
}

/// The most `--touch` accepts: 1 GiB, far beyond any cache.
pub const MAX_BYTES: u64 = 1 << 30;

/// Parses a size: a whole number with an optional binary unit, `K`, `M` or `G` (also `KiB`,
/// `MiB`, `GiB`; case ignored): `256K` is 262,144 bytes. A bare number is bytes. Zero, and more
/// than [`MAX_BYTES`], are errors.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        _ => {
            return Err(format!(
                "`{t}`: unknown unit `{}`; give a size like `256K` or `1M`",
                unit.trim()
            ));
        }
    };
    let bad = || format!("`{t}` is not a size; give one like `256K`, `1M` or `65536`");
    let v: u64 = num.parse().map_err(|_| bad())?;
    let bytes = v
        .checked_shl(shift)
        .filter(|b| b >> shift == v)
        .ok_or_else(bad)?;
    if bytes == 0 || bytes > MAX_BYTES {
        return Err(format!("`{t}`: give a size from 1 byte to 1G"));
    }
    Ok(bytes)
}

/// Formats a size for people in binary units: `512 B`, `16 KiB`, `1.50 GiB` (whole numbers
/// where the size is a whole number of the unit).
pub fn fmt_bytes(bytes: u64) -> String {
    let (unit, shift) = [("GiB", 30), ("MiB", 20), ("KiB", 10)]
        .into_iter()
        .find(|(_, s)| bytes >> s > 0)
        .unwrap_or(("B", 0));
    if bytes.trailing_zeros() >= shift {
        format!("{} {unit}", bytes >> shift)
    } else {
        format!("{:.2} {unit}", bytes as f64 / (1u64 << shift) as f64)
    }
}

/// Formats nanoseconds for people: `812 ns`, `5.03 us`, `1.20 ms`.
pub fn fmt_ns(ns: f64) -> String {
    if ns < 1_000.0 {
        format!("{ns:.0} ns")
    } else if ns < 1_000_000.0 {
        format!("{:.2} us", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// A whole number with thousands separators: `12,345`.
pub fn thousands(v: f64) -> String {
    grouped(v, 0)
}

/// `v` with `decimals`, the whole part grouped in thousands: `518,946.8`; a value that rounds
/// to zero has no minus sign.
pub fn grouped(v: f64, decimals: usize) -> String {
    let s = format!("{:.decimals$}", v.abs());
    let (whole, frac) = s.split_once('.').unwrap_or((s.as_str(), ""));
    let mut out = if v < 0.0 && s.chars().any(|c| c != '0' && c != '.') {
        "-".to_string()
    } else {
        String::new()
    };
    for (i, ch) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    out
}

/// A `Duration` in JSON as seconds (`"work_s": 0.001`), the unit in the field's name.
pub mod serde_secs {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Duration::try_from_secs_f64(f64::deserialize(d)?).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_outside_its_range_is_one_line_naming_flag_value_and_range() {
        assert_eq!(flag_count("repeats", 3, 1, MAX_REPEATS).unwrap(), 3);
        assert_eq!(flag_count("repeats", 1, 1, MAX_REPEATS).unwrap(), 1);
        assert_eq!(flag_count("repeats", 100, 1, MAX_REPEATS).unwrap(), 100);
        for bad in [0, 101, usize::MAX] {
            let e = flag_count("repeats", bad, 1, MAX_REPEATS).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2);
            assert_eq!(format!("{e:#}"), format!("--repeats {bad}: give 1 to 100"));
        }
    }

    #[test]
    fn quoted_numbers_never_run_to_hundreds_of_digits() {
        assert_eq!(fmt_given(1e300), "1e300");
        assert_eq!(fmt_given(-2.5e-9), "-2.5e-9");
        assert_eq!(fmt_given(1500.0), "1500");
        assert_eq!(fmt_given(0.25), "0.25");
        assert_eq!(fmt_given(0.0), "0");
        assert_eq!(fmt_given(f64::NAN), "NaN");
        assert_eq!(fmt_given(f64::INFINITY), "inf");
        assert_eq!(fmt_fixed(1271.4, 0), "1271");
        assert_eq!(fmt_fixed(3e300, 1), "3.00e300");
        for v in [1e300, -1e300, 1e-300, f64::MAX, f64::MIN_POSITIVE] {
            assert!(fmt_given(v).len() < 25, "{}", fmt_given(v));
            assert!(fmt_fixed(v, 1).len() < 16, "{}", fmt_fixed(v, 1));
        }
    }

    #[test]
    fn a_threshold_is_a_percentage_from_0_to_1000() {
        for ok in [0.0, 5.0, 100.0, 1000.0] {
            assert_eq!(flag_percent("threshold", ok).unwrap(), ok);
        }
        for bad in [
            -0.5,
            1000.5,
            1e300,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            let e = flag_percent("threshold", bad).unwrap_err();
            let m = format!("{e:#}");
            assert_eq!(crate::error::exit_code(&e), 2, "{m}");
            assert!(
                m.starts_with(&format!(
                    "--threshold {}: give 0 to 1000 percent",
                    fmt_given(bad)
                )),
                "{m}"
            );
            assert!(!m.contains('\n') && m.len() < 200, "{m}");
            assert_eq!(m.contains("typo"), bad > 1000.0, "{m}");
        }
    }

    #[test]
    fn sizes_take_binary_units_and_refuse_nonsense() {
        assert_eq!(parse_bytes("256K"), Ok(262_144));
        assert_eq!(parse_bytes(" 1MiB "), Ok(1 << 20));
        assert_eq!(parse_bytes("1g"), Ok(1 << 30));
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(16 << 10), "16 KiB");
        assert_eq!(fmt_bytes(3 << 29), "1.50 GiB");
        assert_eq!(fmt_bytes((1 << 20) + 1), "1.00 MiB");
        assert_eq!(fmt_bytes(0), "0 B");
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("4096b"), Ok(4096));
        for bad in [
            "",
            "0",
            "0K",
            "2G",
            "-1K",
            "1.5M",
            "K",
            "12 parsecs",
            "99999999999999999999K",
        ] {
            assert!(parse_bytes(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn durations_take_units_and_bare_seconds() {
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration(" 0.2 "), Ok(Duration::from_millis(200)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("1e-3s"), Ok(Duration::from_millis(1)));
    }

    /// `--ready-timeout 1e20` used to reach `Duration::from_secs_f64`, which panics.
    #[test]
    fn huge_negative_and_nonsense_durations_are_errors_not_panics() {
        for bad in [
            "1e20", "-1", "nan", "inf", "", "x", "2 days", "1e400", "25h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn grouped_keeps_decimals_and_drops_a_sign_that_rounds_away() {
        assert_eq!(grouped(518_946.84, 1), "518,946.8");
        assert_eq!(grouped(-1_234.5, 1), "-1,234.5");
        assert_eq!(grouped(-0.0001, 1), "0.0");
        assert_eq!(grouped(999.96, 1), "1,000.0");
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(1234567.0), "1,234,567");
        assert_eq!(thousands(-999.0), "-999");
    }

    /// Every unit, its boundary and the printed forms, with their known values.
    #[test]
    fn every_unit_and_the_one_day_limit() {
        assert_eq!(parse_duration("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse_duration("3µs"), Ok(Duration::from_micros(3)));
        assert_eq!(parse_duration("2min"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("3 secs"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("24h"), Ok(MAX_DURATION));
        assert!(parse_duration("86400.001").is_err());
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn times_print_in_the_unit_that_fits() {
        assert_eq!(fmt_ns(812.4), "812 ns");
        assert_eq!(fmt_ns(999.0), "999 ns");
        assert_eq!(fmt_ns(1_000.0), "1.00 us");
        assert_eq!(fmt_ns(5_030.0), "5.03 us");
        assert_eq!(fmt_ns(1_000_000.0), "1.00 ms");
        assert_eq!(fmt_ns(1_200_000.0), "1.20 ms");
        assert_eq!(fmt_ns(1e9), "1.00 s");
        assert_eq!(fmt_ns(2.5e9), "2.50 s");
    }

    #[test]
    fn grouping_puts_a_comma_every_three_digits_from_the_right() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1000.0), "1,000");
        assert_eq!(thousands(12345.0), "12,345");
        assert_eq!(grouped(-0.06, 1), "-0.1");
        assert_eq!(grouped(0.5, 0), "0");
    }

    #[test]
    fn durations_serialise_as_seconds() {
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct T {
            #[serde(with = "serde_secs")]
            work_s: Duration,
        }
        let t = T {
            work_s: Duration::from_millis(1500),
        };
        let text = serde_json::to_string(&t).unwrap();
        assert_eq!(text, r#"{"work_s":1.5}"#);
        assert_eq!(serde_json::from_str::<T>(&text).unwrap(), t);
        assert!(serde_json::from_str::<T>(r#"{"work_s":-1}"#).is_err());
    }

    #[test]
    fn a_bad_flag_value_names_the_flag() {
        assert_eq!(
            flag_duration("duration", "2s").unwrap(),
            Duration::from_secs(2)
        );
        let e = flag_duration("duration", "soon").unwrap_err().to_string();
        assert!(e.starts_with("--duration: "), "{e}");
    }
}
