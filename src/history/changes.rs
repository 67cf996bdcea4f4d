//! Change points over a long series: where a figure moved and stayed moved.
//!
//! Hunter's method (DataStax's e-divisive with a t-test in place of permutations) is the model,
//! kept deterministic: the same series always gives the same change points. Binary
//! segmentation: a segment is split where one shift of the mean fits it best (least squares, at
//! least [`MIN_SEGMENT`] runs on each side); the split is a change point when Welch's t-test on
//! the two sides gives p < [`super::check::ALPHA`] and the two means differ by at least the
//! minimum effect; then both halves are searched the same way. Runs are the unit, as in [`super::check`].

use super::check::ALPHA;
use serde::Serialize;

/// The fewest runs on either side of a change point.
pub const MIN_SEGMENT: usize = 3;

/// A change point in a series.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChangePoint {
    /// Index of the first value after the change.
    pub at: usize,
    pub before_mean: f64,
    pub after_mean: f64,
    /// After against before, in percent of before.
    pub change_pct: f64,
    pub p_value: f64,
}

fn mean_var(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let m = x.iter().sum::<f64>() / n;
    (
        m,
        x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1.0),
    )
}

fn welch_p(a: &[f64], b: &[f64]) -> f64 {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    let ((ma, va), (mb, vb)) = (mean_var(a), mean_var(b));
    let (sa, sb) = (va / a.len() as f64, vb / b.len() as f64);
    let se = (sa + sb).sqrt();
    if se == 0.0 {
        return if ma == mb { 1.0 } else { 0.0 };
    }
    let df = (sa + sb).powi(2)
        / (sa.powi(2) / (a.len() as f64 - 1.0) + sb.powi(2) / (b.len() as f64 - 1.0))
            .max(f64::MIN_POSITIVE);
    StudentsT::new(0.0, 1.0, df.max(1.0))
        .map(|d| 2.0 * (1.0 - d.cdf(((mb - ma) / se).abs())))
        .unwrap_or(1.0)
}

fn best(values: &[f64], offset: usize, threshold_pct: f64) -> Option<ChangePoint> {
    let at = super::check::best_split(values, MIN_SEGMENT, MIN_SEGMENT)?;
    let (a, b) = values.split_at(at);
    let (ma, mb) = (mean_var(a).0, mean_var(b).0);
    if ma == 0.0 {
        return None;
    }
    let change_pct = (mb / ma - 1.0) * 100.0;
    let p = welch_p(a, b);
    (change_pct.abs() >= threshold_pct && p < ALPHA).then_some(ChangePoint {
        at: offset + at,
        before_mean: ma,
        after_mean: mb,
        change_pct,
        p_value: p,
    })
}

/// Every change point of `values`, in order (pure, deterministic).
pub fn change_points(values: &[f64], threshold_pct: f64) -> Vec<ChangePoint> {
    let mut found = Vec::new();
    let mut segments = vec![(0usize, values.len())];
    while let Some((lo, hi)) = segments.pop() {
        if let Some(cp) = best(&values[lo..hi], lo, threshold_pct) {
            segments.push((lo, cp.at));
            segments.push((cp.at, hi));
            found.push(cp);
        }
    }
    found.sort_by_key(|c| c.at);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noisy(level: f64, n: usize, seed: usize) -> Vec<f64> {
        let wobble = [1.0, 1.015, 0.987, 1.006, 0.994, 1.011, 0.983, 1.003];
        (0..n).map(|i| level * wobble[(i + seed) % 8]).collect()
    }

    #[test]
    fn two_steps_are_found_where_they_are() {
        let mut v = noisy(100.0, 10, 0);
        v.extend(noisy(113.0, 10, 3));
        v.extend(noisy(90.0, 8, 5));
        let cps = change_points(&v, 5.0);
        let at: Vec<usize> = cps.iter().map(|c| c.at).collect();
        assert_eq!(at, vec![10, 20]);
        assert!((cps[0].change_pct - 13.0).abs() < 2.0);
        // The same series, the same answer.
        assert_eq!(change_points(&v, 5.0), cps);
    }

    #[test]
    fn noise_has_no_change_point() {
        assert!(change_points(&noisy(100.0, 40, 1), 5.0).is_empty());
        assert!(change_points(&[1.0, 2.0], 5.0).is_empty());
    }
}
