//! What the unit tests (`crate::testing`) and the integration tests (`tests/common`, which
//! includes this file by path) share: when a run counts as CI, the one skip helper, and a mean
//! with its 95% interval checked against raw samples and the printed t table. Nothing here may
//! name the crate: `tests/common` compiles it as its own module.

use std::io::Write;

/// True when the environment says this is CI: `CI` set to any non-empty value other than `0` or
/// `false` (GitHub and GitLab set `true`, others `1` or `yes`; `.ci/run` exports `true`). CI
/// installs every program and runs as root, so a test that cannot run there is a failure.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| ci_value(&v))
}

/// The rule [`in_ci`] applies to the value of `CI`.
pub fn ci_value(v: &str) -> bool {
    let v = v.trim();
    !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false")
}

/// Says that `test` (or a part of it) cannot run here, and why: a visible `SKIPPED:` line
/// straight to the process's stderr, past the harness's capture, so a run that skipped
/// something shows it; under CI ([`in_ci`]) it is a failure instead.
pub fn skipped(test: &str, why: &str) {
    let line = format!("SKIPPED: {test}: {why}");
    if in_ci() {
        panic!("{line}; under CI a test that cannot run fails");
    }
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The 0.975 quantile of Student's t, from the printed table (NIST/SEMATECH e-Handbook, 1.3.6.7.2),
/// so a confidence interval is checked against a source other than the code that computed it.
const T_975: &[(usize, f64)] = &[
    (1, 12.706),
    (2, 4.303),
    (3, 3.182),
    (4, 2.776),
    (5, 2.571),
    (6, 2.447),
    (7, 2.365),
    (8, 2.306),
    (9, 2.262),
    (10, 2.228),
    (15, 2.131),
    (20, 2.086),
    (30, 2.042),
    (60, 2.000),
    (100, 1.984),
    (usize::MAX, 1.960),
];

/// A mean with its 95% interval as numbers, wherever they were read from.
pub struct Interval {
    pub mean: f64,
    pub ci95_low: f64,
    pub ci95_high: f64,
    pub ci95_half_width: f64,
    pub stddev: f64,
    pub n: usize,
}

/// Checks that `ci` is the mean of `samples` with its 95% Student's t interval: the mean and
/// sample standard deviation computed here, the quantile from the printed table (bracketed
/// between its rows). A z-interval, an n instead of n - 1, or a mean of other samples fails.
pub fn assert_interval_of(what: &str, ci: &Interval, samples: &[f64]) {
    let n = samples.len();
    assert!(n >= 1, "{what}: no samples");
    assert_eq!(ci.n, n, "{what}: n");
    let close = |a: f64, b: f64, rel: f64| (a - b).abs() <= rel * a.abs().max(b.abs()).max(1e-12);
    let mean = samples.iter().sum::<f64>() / n as f64;
    assert!(
        close(ci.mean, mean, 1e-9),
        "{what}: mean {} of {samples:?}",
        ci.mean
    );
    if n == 1 {
        assert_eq!(
            ci.ci95_half_width, 0.0,
            "{what}: one sample has no interval"
        );
        return;
    }
    let sd = (samples.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
    assert!(
        close(ci.stddev, sd, 1e-6),
        "{what}: stddev {} of {samples:?}",
        ci.stddev
    );
    let half = ci.ci95_half_width;
    assert!(
        close(ci.ci95_low, mean - half, 1e-9),
        "{what}: low {}",
        ci.ci95_low
    );
    assert!(
        close(ci.ci95_high, mean + half, 1e-9),
        "{what}: high {}",
        ci.ci95_high
    );
    if sd == 0.0 {
        assert_eq!(half, 0.0, "{what}: half-width {half} without spread");
        return;
    }
    let t = half / (sd / (n as f64).sqrt());
    let df = n - 1;
    let hi = T_975
        .iter()
        .rev()
        .find(|(d, _)| *d <= df)
        .map_or(12.706, |r| r.1);
    let lo = T_975.iter().find(|(d, _)| *d >= df).map_or(1.960, |r| r.1);
    assert!(
        t <= hi + 5e-3 && t >= lo - 5e-3,
        "{what}: half-width is {t:.4} standard errors, the table gives {lo}..{hi} for {df} degrees of freedom"
    );
}
