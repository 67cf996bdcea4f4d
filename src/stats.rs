//! Statistics over measured samples: means with confidence intervals, percentiles, and the
//! significance test used to compare two results.
//!
//! Round trips are timed individually for the latency histogram, but consecutive round trips are
//! correlated (a cache warmed, a CPU halted), so the confidence interval is computed over *batch
//! means*: each batch is long enough that neighbouring batches are nearly independent. This is the
//! method of batch means (Law & Kelton, *Simulation Modeling and Analysis*, ch. 9).

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

/// Samples that are known to be usable: at least two, all finite.
#[derive(Clone, Debug)]
pub struct Samples<'a>(&'a [f64]);

impl<'a> Samples<'a> {
    /// `None` when there are fewer than two samples or any is NaN or infinite.
    pub fn new(values: &'a [f64]) -> Option<Self> {
        (values.len() >= 2 && values.iter().all(|v| v.is_finite())).then_some(Self(values))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn mean(&self) -> f64 {
        self.0.iter().sum::<f64>() / self.0.len() as f64
    }

    /// Sample standard deviation (n - 1 in the denominator).
    pub fn stddev(&self) -> f64 {
        let m = self.mean();
        let ss: f64 = self.0.iter().map(|v| (v - m) * (v - m)).sum();
        (ss / (self.0.len() - 1) as f64).sqrt()
    }

    /// Half-width of the two-sided 95% confidence interval of the mean (Student's t).
    pub fn ci95_half_width(&self) -> f64 {
        let n = self.0.len() as f64;
        t_975(n - 1.0) * self.stddev() / n.sqrt()
    }

    pub fn mean_ci(&self) -> MeanCi {
        let mean = self.mean();
        let half = self.ci95_half_width();
        MeanCi {
            mean,
            ci95_low: mean - half,
            ci95_high: mean + half,
            ci95_half_width: half,
            stddev: self.stddev(),
            n: self.0.len(),
        }
    }
}

/// The 0.975 quantile of Student's t with `df` degrees of freedom.
pub fn t_975(df: f64) -> f64 {
    StudentsT::new(0.0, 1.0, df.max(1.0))
        .map(|t| t.inverse_cdf(0.975))
        .unwrap_or(1.96)
}

/// A mean with its 95% confidence interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeanCi {
    pub mean: f64,
    pub ci95_low: f64,
    pub ci95_high: f64,
    pub ci95_half_width: f64,
    pub stddev: f64,
    /// Number of samples the interval was computed from.
    pub n: usize,
}

impl MeanCi {
    /// Relative half-width of the interval (0.02 = ±2%).
    pub fn rel_half_width(&self) -> f64 {
        if self.mean == 0.0 {
            f64::INFINITY
        } else {
            self.ci95_half_width / self.mean.abs()
        }
    }

    /// For a single sample, an interval of zero width flagged by n = 1.
    pub fn single(v: f64) -> Self {
        Self {
            mean: v,
            ci95_low: v,
            ci95_high: v,
            ci95_half_width: 0.0,
            stddev: 0.0,
            n: 1,
        }
    }

    /// `self.mean / other.mean`, its interval from the two relative half-widths combined in
    /// quadrature (first-order propagation of independent errors), so the uncertainty of the
    /// baseline is carried into the ratio. `None` unless both means are positive.
    pub fn ratio(&self, other: &MeanCi) -> Option<MeanCi> {
        if self.mean <= 0.0 || other.mean <= 0.0 {
            return None;
        }
        let mean = self.mean / other.mean;
        let rel = |m: &MeanCi| m.ci95_half_width / m.mean;
        let rel_sd = |m: &MeanCi| m.stddev / m.mean;
        let half = mean * (rel(self).powi(2) + rel(other).powi(2)).sqrt();
        Some(MeanCi {
            mean,
            ci95_low: mean - half,
            ci95_high: mean + half,
            ci95_half_width: half,
            stddev: mean * (rel_sd(self).powi(2) + rel_sd(other).powi(2)).sqrt(),
            n: self.n.min(other.n),
        })
    }

    /// Mean and interval of `values`; a single value gives a zero-width interval with n = 1,
    /// and none gives `None`.
    pub fn of(values: &[f64]) -> Option<Self> {
        match Samples::new(values) {
            Some(s) => Some(s.mean_ci()),
            None if values.len() == 1 && values[0].is_finite() => Some(Self::single(values[0])),
            None => None,
        }
    }
}

/// Latency percentiles in nanoseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub min_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    /// Number of recorded values.
    pub count: u64,
}

impl Percentiles {
    /// Percentiles of a histogram recorded in another unit (timer ticks), converted to
    /// nanoseconds with `ns_per_unit`.
    pub fn from_histogram_scaled(h: &hdrhistogram::Histogram<u64>, ns_per_unit: f64) -> Self {
        let ns = |v: u64| (v as f64 * ns_per_unit).round() as u64;
        Self {
            min_ns: ns(h.min()),
            p50_ns: ns(h.value_at_quantile(0.50)),
            p90_ns: ns(h.value_at_quantile(0.90)),
            p99_ns: ns(h.value_at_quantile(0.99)),
            p999_ns: ns(h.value_at_quantile(0.999)),
            max_ns: ns(h.max()),
            count: h.len(),
        }
    }
}

/// Nearest-rank percentile of unsorted values (`q` in 0..=1). `None` for no values.
pub fn percentile(values: &[f64], q: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[rank - 1])
}

/// Result of Welch's unequal-variances t-test.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WelchTest {
    pub t: f64,
    pub df: f64,
    /// Two-sided p-value.
    pub p_value: f64,
}

/// Welch's t-test of the means of `a` and `b` (Welch 1947; df by Welch–Satterthwaite).
/// `None` unless both have at least two finite samples.
pub fn welch_t_test(a: &[f64], b: &[f64]) -> Option<WelchTest> {
    let (sa, sb) = (Samples::new(a)?, Samples::new(b)?);
    let (na, nb) = (sa.len() as f64, sb.len() as f64);
    let (va, vb) = (sa.stddev().powi(2) / na, sb.stddev().powi(2) / nb);
    let se2 = va + vb;
    if se2 == 0.0 {
        let p = if sa.mean() == sb.mean() { 1.0 } else { 0.0 };
        return Some(WelchTest {
            t: if p == 1.0 { 0.0 } else { f64::INFINITY },
            df: na + nb - 2.0,
            p_value: p,
        });
    }
    let t = (sa.mean() - sb.mean()) / se2.sqrt();
    let df = se2 * se2 / (va * va / (na - 1.0) + vb * vb / (nb - 1.0));
    let dist = StudentsT::new(0.0, 1.0, df).ok()?;
    let p_value = (2.0 * (1.0 - dist.cdf(t.abs()))).clamp(0.0, 1.0);
    Some(WelchTest { t, df, p_value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_two_finite_samples() {
        assert!(Samples::new(&[1.0]).is_none());
        assert!(Samples::new(&[1.0, f64::NAN]).is_none());
        assert!(Samples::new(&[1.0, 2.0]).is_some());
    }

    #[test]
    fn mean_and_interval() {
        let s = [9.0, 10.0, 11.0, 10.0];
        let m = Samples::new(&s).unwrap().mean_ci();
        assert!((m.mean - 10.0).abs() < 1e-12);
        // sd = sqrt(2/3), t(3) = 3.182
        let expect = 3.182_446 * (2.0f64 / 3.0).sqrt() / 2.0;
        assert!((m.ci95_half_width - expect).abs() < 1e-3);
        assert!(m.ci95_low < m.mean && m.mean < m.ci95_high);
    }

    #[test]
    fn ratio_propagates_relative_error() {
        let a = MeanCi::of(&[10.0, 10.2, 9.8]).unwrap();
        let b = MeanCi::of(&[5.0, 5.1, 4.9]).unwrap();
        let r = a.ratio(&b).unwrap();
        assert!((r.mean - 2.0).abs() < 1e-9);
        let want =
            2.0 * ((a.ci95_half_width / 10.0).powi(2) + (b.ci95_half_width / 5.0).powi(2)).sqrt();
        assert!((r.ci95_half_width - want).abs() < 1e-9);
        assert!(a.ratio(&MeanCi::single(0.0)).is_none());
    }

    #[test]
    fn percentiles_are_ordered() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), Some(50.0));
        assert_eq!(percentile(&v, 0.99), Some(99.0));
        assert_eq!(percentile(&v, 1.0), Some(100.0));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn welch_separates_different_means() {
        let a = [10.0, 10.1, 9.9, 10.05, 9.95];
        let b = [12.0, 12.1, 11.9, 12.05, 11.95];
        assert!(welch_t_test(&a, &b).unwrap().p_value < 0.001);
        assert!(welch_t_test(&a, &a).unwrap().p_value > 0.99);
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn sample_stddev_divides_by_n_minus_one() {
        let s = Samples::new(&[9.0, 10.0, 11.0, 10.0]).unwrap();
        assert_eq!((s.len(), s.is_empty()), (4, false));
        // Squares about the mean 10: 1 + 0 + 1 + 0 = 2, over n - 1 = 3.
        assert!(close(s.stddev(), (2.0f64 / 3.0).sqrt(), 1e-12));
        let m = s.mean_ci();
        assert_eq!(m.n, 4);
        assert!(close(m.stddev, (2.0f64 / 3.0).sqrt(), 1e-12));
        // t(3) = 3.182446 from the printed table, sqrt(n) = 2.
        let half = 3.182_446 * (2.0f64 / 3.0).sqrt() / 2.0;
        assert!(close(m.ci95_low, 10.0 - half, 1e-5));
        assert!(close(m.ci95_high, 10.0 + half, 1e-5));
        assert!(Samples::new(&[]).is_none());
        assert!(Samples::new(&[1.0, f64::INFINITY]).is_none());
    }

    #[test]
    fn t_quantiles_match_the_printed_table() {
        assert!(close(t_975(1.0), 12.706_205, 1e-5));
        assert!(close(t_975(2.0), 4.302_653, 1e-5));
        assert!(close(t_975(30.0), 2.042_272, 1e-5));
        // Fewer than one degree of freedom is read as one.
        assert!(close(t_975(0.0), 12.706_205, 1e-5));
    }

    #[test]
    fn relative_half_width_and_single_values() {
        let m = MeanCi {
            mean: -4.0,
            ci95_low: -5.0,
            ci95_high: -3.0,
            ci95_half_width: 1.0,
            stddev: 2.0,
            n: 9,
        };
        assert_eq!(m.rel_half_width(), 0.25);
        assert_eq!(MeanCi::single(0.0).rel_half_width(), f64::INFINITY);
        let one = MeanCi::of(&[3.5]).unwrap();
        assert_eq!(
            one,
            MeanCi {
                mean: 3.5,
                ci95_low: 3.5,
                ci95_high: 3.5,
                ci95_half_width: 0.0,
                stddev: 0.0,
                n: 1
            }
        );
        assert_eq!(one.rel_half_width(), 0.0);
        assert!(MeanCi::of(&[]).is_none());
        assert!(MeanCi::of(&[f64::NAN]).is_none());
        assert!(MeanCi::of(&[1.0, f64::NAN]).is_none());
        assert_eq!(MeanCi::of(&[1.0, 3.0]).unwrap().mean, 2.0);
    }

    #[test]
    fn ratio_carries_both_spreads_and_the_smaller_count() {
        let a = MeanCi {
            mean: 10.0,
            ci95_low: 9.0,
            ci95_high: 11.0,
            ci95_half_width: 1.0, // 10%
            stddev: 0.3,          // 3%
            n: 5,
        };
        let b = MeanCi {
            mean: 5.0,
            ci95_low: 4.85,
            ci95_high: 5.15,
            ci95_half_width: 0.15, // 3%
            stddev: 0.2,           // 4%
            n: 3,
        };
        let r = a.ratio(&b).unwrap();
        // 2 x sqrt(0.1^2 + 0.03^2) and 2 x sqrt(0.03^2 + 0.04^2) = 2 x 0.05.
        let half = 2.0 * (0.01f64 + 0.0009).sqrt();
        assert!(close(r.mean, 2.0, 1e-12));
        assert!(close(r.ci95_half_width, half, 1e-12));
        assert!(close(r.ci95_low, 2.0 - half, 1e-12));
        assert!(close(r.ci95_high, 2.0 + half, 1e-12));
        assert!(close(r.stddev, 0.1, 1e-12));
        assert_eq!(r.n, 3);
        assert_eq!(b.ratio(&a).unwrap().n, 3);
        assert!(MeanCi::single(0.0).ratio(&a).is_none());
        assert!(MeanCi::single(-1.0).ratio(&a).is_none());
        assert!(a.ratio(&MeanCi::single(-1.0)).is_none());
    }

    #[test]
    fn percentile_is_the_nearest_rank() {
        let v: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 0.25), Some(3.0)); // rank ceil(2.5) = 3
        assert_eq!(percentile(&v, 0.3), Some(3.0));
        assert_eq!(percentile(&v, 0.31), Some(4.0));
        assert_eq!(percentile(&v, 2.0), Some(10.0));
        assert_eq!(percentile(&v, -1.0), Some(1.0));
        // Values that are not numbers are left out.
        assert_eq!(percentile(&[f64::NAN, 2.0, 1.0], 1.0), Some(2.0));
        assert_eq!(percentile(&[f64::NAN], 0.5), None);
    }

    #[test]
    fn histogram_percentiles_in_nanoseconds() {
        let mut h = hdrhistogram::Histogram::<u64>::new(3).unwrap();
        for v in 1..=1000u64 {
            h.record(v).unwrap();
        }
        // Ticks of 2.5 ns each.
        let p = Percentiles::from_histogram_scaled(&h, 2.5);
        assert_eq!(
            p,
            Percentiles {
                min_ns: 3, // 2.5 rounds away from zero
                p50_ns: 1250,
                p90_ns: 2250,
                p99_ns: 2475,
                p999_ns: 2498, // 999 x 2.5 = 2497.5
                max_ns: 2500,
                count: 1000,
            }
        );
    }

    #[test]
    fn welch_matches_a_worked_example() {
        // 1, 2, 3 against 2, 4, 6: variances 1 and 4 over n = 3, se^2 = 5/3,
        // t = -2 / sqrt(5/3), df = (5/3)^2 / ((1/3)^2/2 + (4/3)^2/2) = 50/17,
        // two-sided p = 0.2209 (R's t.test gives the same).
        let w = welch_t_test(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0]).unwrap();
        assert!(close(w.t, -1.549_193_3, 1e-6));
        assert!(close(w.df, 50.0 / 17.0, 1e-9));
        assert!(close(w.p_value, 0.220_88, 1e-4));
        // The sign of t follows the order of the arguments; p does not.
        let back = welch_t_test(&[2.0, 4.0, 6.0], &[1.0, 2.0, 3.0]).unwrap();
        assert!(close(back.t, 1.549_193_3, 1e-6));
        assert!(close(back.p_value, w.p_value, 1e-12));
        assert!(welch_t_test(&[1.0], &[2.0, 3.0]).is_none());
        assert!(welch_t_test(&[2.0, 3.0], &[1.0]).is_none());
    }

    #[test]
    fn welch_without_spread_is_all_or_nothing() {
        let same = welch_t_test(&[4.0, 4.0], &[4.0, 4.0, 4.0]).unwrap();
        assert_eq!((same.t, same.df, same.p_value), (0.0, 3.0, 1.0));
        let apart = welch_t_test(&[4.0, 4.0], &[5.0, 5.0, 5.0]).unwrap();
        assert_eq!(
            (apart.t, apart.df, apart.p_value),
            (f64::INFINITY, 3.0, 0.0)
        );
    }
}
