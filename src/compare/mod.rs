//! Comparing two saved results figure by figure.
//!
//! Before and after a kernel upgrade, host A against host B, with and without a tuning change:
//! the question is always which figures moved, by how much, and whether the move is larger than
//! the run-to-run noise. `compare` reads the kind's typed figures through the registry (each
//! with its unit, direction and raw samples), the doctor's and the probe's included. Only for a
//! document it has no typed reader for (a doctor or probe result older than their typed
//! figures) does it work without knowing the shape: [`walk`] names the figures and
//! [`direction`] guesses which way is worse from their names, saying "unknown" where it cannot.
//!
//! **Beyond noise** needs both of these, on figures that kept raw samples:
//! - Welch's unequal-variances t-test on the two sets of samples gives a two-sided p < 0.05
//!   ([`crate::stats::welch_t_test`]);
//! - the two 95% confidence intervals of the means do not overlap.
//!
//! The second condition is the stricter one and is there on purpose: cpulab's samples are batch
//! means of consecutive round trips, which are less independent than the t-test assumes, and
//! drift between two runs taken on different days is not in either sample. Requiring separated
//! intervals keeps a CI gate from failing on noise. Figures that kept only an interval are judged
//! by the intervals alone; plain numbers are shown but never judged.

pub mod direction;
pub mod text;
pub mod walk;

use crate::stats::{MeanCi, welch_t_test};
use direction::{DirectionSource, Worse};
use serde::Serialize;
use walk::{Figure, Flat};

/// Significance level of the Welch test.
pub const ALPHA: f64 = 0.05;

/// How a figure's difference was judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Test {
    /// Welch's t-test on both sets of raw samples, plus non-overlapping 95% intervals.
    Welch,
    /// Only the 95% intervals stated in the results (no raw samples).
    Intervals,
    /// A plain number on at least one side: not judged.
    None,
}

/// What the comparison says about one figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Changed beyond noise in the bad direction.
    Worse,
    /// Changed beyond noise in the good direction.
    Better,
    /// Changed beyond noise; the name does not say which way is worse.
    Changed,
    /// Within noise.
    Same,
    /// No noise estimate: not judged.
    Untested,
}

/// One figure present in both results.
#[derive(Clone, Debug, Serialize)]
pub struct FigureDiff {
    /// Where the figure sits in both documents.
    pub path: String,
    /// Value in the first result (mean of its samples where it kept them).
    pub a: f64,
    /// Value in the second result.
    pub b: f64,
    /// b / a; `null` when a is zero.
    pub ratio: Option<f64>,
    /// Change from a to b in percent of a; `null` when a is zero.
    pub change_pct: Option<f64>,
    /// Which direction is worse (`unknown`: never called better or worse).
    pub worse_when: Worse,
    /// Whether `worse_when` is the figure's typed direction or a guess from its name.
    pub direction_source: DirectionSource,
    pub test: Test,
    /// Two-sided p-value of Welch's t-test, when both sides kept samples.
    pub p_value: Option<f64>,
    /// 95% interval of a and of b, when known.
    pub a_ci95: Option<(f64, f64)>,
    pub b_ci95: Option<(f64, f64)>,
    /// Number of samples on each side (0 for a plain number).
    pub a_n: usize,
    pub b_n: usize,
    pub verdict: Verdict,
    /// How much worse in percent (positive = worse), when the direction is known.
    pub worse_by_pct: Option<f64>,
}

/// The whole comparison.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// The two files, as given.
    pub a_file: String,
    pub b_file: String,
    /// Their kind (both the same).
    pub result_kind: String,
    /// How "beyond noise" was decided, in words.
    pub method: String,
    /// Figures found in both, judged ones first.
    pub figures: Vec<FigureDiff>,
    /// Figures found in only one of the two.
    pub only_in_a: Vec<String>,
    pub only_in_b: Vec<String>,
    /// Context that differs (kernel, CPUs, probe facts): `[path, a, b]`.
    pub context_differences: Vec<(String, String, String)>,
    /// Figures worse beyond noise by more than the `--fail-on-regression` threshold.
    pub regressions: Vec<String>,
}

pub const METHOD: &str = "Welch's unequal-variances t-test on the raw samples (two-sided); \
a difference is beyond noise when p < 0.05 and the two 95% confidence intervals do not overlap. \
Figures without raw samples are judged by their stated intervals alone; plain numbers are not judged.";

/// Two sets of samples set against each other with the comparison's criterion.
#[derive(Clone, Debug, PartialEq)]
pub struct Separation {
    pub a: MeanCi,
    pub b: MeanCi,
    /// Two-sided p-value of Welch's t-test.
    pub p_value: f64,
    /// p < [`ALPHA`] and the two 95% intervals do not overlap.
    pub beyond_noise: bool,
}

/// Sets `a` against `b`; `None` unless both have at least two finite samples.
pub fn separation(a: &[f64], b: &[f64]) -> Option<Separation> {
    let w = welch_t_test(a, b)?;
    let (ma, mb) = (MeanCi::of(a)?, MeanCi::of(b)?);
    let beyond_noise =
        w.p_value < ALPHA && !overlap((ma.ci95_low, ma.ci95_high), (mb.ci95_low, mb.ci95_high));
    Some(Separation {
        a: ma,
        b: mb,
        p_value: w.p_value,
        beyond_noise,
    })
}

fn interval(f: &Figure) -> Option<(f64, f64)> {
    f.samples
        .as_deref()
        .and_then(MeanCi::of)
        .filter(|m| m.n >= 2)
        .map(|m| (m.ci95_low, m.ci95_high))
        .or(f.ci95)
}

fn overlap(a: (f64, f64), b: (f64, f64)) -> bool {
    a.0 <= b.1 && b.0 <= a.1
}

/// Compares one figure present in both results, guessing its direction from its name.
pub fn diff(fa: &Figure, fb: &Figure) -> FigureDiff {
    diff_as(fa, fb, direction::of_path(&fa.path), DirectionSource::Name)
}

/// A typed figure in the shape the comparison reads.
fn untyped(f: &crate::experiment::Figure) -> Figure {
    Figure {
        path: f.name.clone(),
        value: f.value,
        samples: (f.samples.len() >= 2).then(|| f.samples.clone()),
        ci95: f.ci.as_ref().map(|m| (m.ci95_low, m.ci95_high)),
    }
}

/// Compares one typed figure present in both results, with its own direction.
pub fn diff_typed(fa: &crate::experiment::Figure, fb: &crate::experiment::Figure) -> FigureDiff {
    diff_as(
        &untyped(fa),
        &untyped(fb),
        direction::from_direction(fa.direction),
        DirectionSource::Typed,
    )
}

fn diff_as(fa: &Figure, fb: &Figure, worse_when: Worse, source: DirectionSource) -> FigureDiff {
    let (a, b) = (fa.value, fb.value);
    let (a_ci, b_ci) = (interval(fa), interval(fb));
    let welch = match (&fa.samples, &fb.samples) {
        (Some(x), Some(y)) => welch_t_test(x, y),
        _ => None,
    };
    let (test, beyond) = match (welch.as_ref(), a_ci, b_ci) {
        (Some(w), Some(ia), Some(ib)) => (Test::Welch, w.p_value < ALPHA && !overlap(ia, ib)),
        (None, Some(ia), Some(ib)) => (Test::Intervals, !overlap(ia, ib)),
        _ => (Test::None, false),
    };
    let ratio = (a != 0.0).then(|| b / a);
    let worse_by_pct = ratio.and_then(|r| match worse_when {
        Worse::Higher => Some((r - 1.0) * 100.0),
        Worse::Lower => Some((1.0 - r) * 100.0),
        Worse::Unknown => None,
    });
    let verdict = match (test, beyond, worse_by_pct) {
        (Test::None, _, _) => Verdict::Untested,
        (_, false, _) => Verdict::Same,
        (_, true, Some(w)) if w > 0.0 => Verdict::Worse,
        (_, true, Some(_)) => Verdict::Better,
        (_, true, None) => Verdict::Changed,
    };
    FigureDiff {
        path: fa.path.clone(),
        a,
        b,
        ratio,
        change_pct: ratio.map(|r| (r - 1.0) * 100.0),
        worse_when,
        direction_source: source,
        test,
        p_value: welch.map(|w| w.p_value),
        a_ci95: a_ci,
        b_ci95: b_ci,
        a_n: fa.samples.as_ref().map_or(0, Vec::len),
        b_n: fb.samples.as_ref().map_or(0, Vec::len),
        verdict,
        worse_by_pct,
    }
}

fn rank(v: Verdict) -> u8 {
    match v {
        Verdict::Worse => 0,
        Verdict::Changed => 1,
        Verdict::Better => 2,
        Verdict::Same => 3,
        Verdict::Untested => 4,
    }
}

/// Compares two flattened results. `fail_pct`: the regression threshold, if any.
pub fn compare(a: &Flat, b: &Flat, fail_pct: Option<f64>) -> (Vec<FigureDiff>, Vec<String>) {
    let figures: Vec<FigureDiff> = a
        .figures
        .iter()
        .filter_map(|(k, fa)| Some(diff(fa, b.figures.get(k)?)))
        .collect();
    judge(figures, fail_pct)
}

/// Typed figures on both sides (an experiment's results), paired by name.
pub struct Typed {
    pub a: Vec<crate::experiment::Figure>,
    pub b: Vec<crate::experiment::Figure>,
}

fn judge(mut figures: Vec<FigureDiff>, fail_pct: Option<f64>) -> (Vec<FigureDiff>, Vec<String>) {
    figures.sort_by_key(|d| rank(d.verdict));
    let regressions = fail_pct
        .map(|pct| {
            figures
                .iter()
                .filter(|d| d.verdict == Verdict::Worse && d.worse_by_pct.is_some_and(|w| w > pct))
                .map(|d| d.path.clone())
                .collect()
        })
        .unwrap_or_default();
    (figures, regressions)
}

/// Everything `cpulab compare` reports, from two loaded documents. `typed`: the kind's typed
/// figures of both, when it has them; they are what is compared, each with its own direction.
/// Without them every figure the walk finds is compared, its direction guessed from its name.
pub fn comparison(
    (a_file, a): (&str, &serde_json::Value),
    (b_file, b): (&str, &serde_json::Value),
    kind: &str,
    typed: Option<Typed>,
    fail_pct: Option<f64>,
) -> Comparison {
    let (fa, fb) = (walk::flatten(a), walk::flatten(b));
    let ((figures, regressions), only_in_a, only_in_b) = match &typed {
        Some(t) => {
            let names = |x: &[crate::experiment::Figure], y: &[crate::experiment::Figure]| {
                x.iter()
                    .filter(|f| !y.iter().any(|g| g.name == f.name))
                    .map(|f| f.name.clone())
                    .collect::<Vec<_>>()
            };
            let diffs =
                t.a.iter()
                    .filter_map(|x| Some(diff_typed(x, t.b.iter().find(|y| y.name == x.name)?)))
                    .collect();
            (judge(diffs, fail_pct), names(&t.a, &t.b), names(&t.b, &t.a))
        }
        None => {
            let only = |x: &Flat, y: &Flat| -> Vec<String> {
                x.figures
                    .keys()
                    .filter(|k| !y.figures.contains_key(*k))
                    .cloned()
                    .collect()
            };
            (compare(&fa, &fb, fail_pct), only(&fa, &fb), only(&fb, &fa))
        }
    };
    let context_differences = fa
        .context
        .iter()
        .filter_map(|(k, va)| {
            let vb = fb.context.get(k)?;
            (va != vb).then(|| (k.clone(), va.clone(), vb.clone()))
        })
        .collect();
    Comparison {
        a_file: a_file.to_string(),
        b_file: b_file.to_string(),
        result_kind: kind.to_string(),
        method: METHOD.to_string(),
        only_in_a,
        only_in_b,
        figures,
        context_differences,
        regressions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(path: &str, s: &[f64]) -> Figure {
        Figure {
            path: path.into(),
            value: s.iter().sum::<f64>() / s.len() as f64,
            samples: Some(s.to_vec()),
            ci95: None,
        }
    }

    #[test]
    fn slower_latency_beyond_noise_is_worse() {
        let a = fig("rtt_ns", &[100.0, 101.0, 99.0, 100.5, 99.5]);
        let b = fig("rtt_ns", &[120.0, 121.0, 119.0, 120.5, 119.5]);
        let d = diff(&a, &b);
        assert_eq!(d.verdict, Verdict::Worse);
        assert!((d.worse_by_pct.unwrap() - 20.0).abs() < 1e-9);
        assert_eq!(d.test, Test::Welch);
        // The same change in a rate is an improvement.
        let d = diff(
            &fig("tps", &a.samples.unwrap()),
            &fig("tps", &b.samples.unwrap()),
        );
        assert_eq!(d.verdict, Verdict::Better);
    }

    #[test]
    fn overlapping_noise_is_the_same() {
        let a = fig("rtt_ns", &[90.0, 110.0, 100.0, 95.0, 105.0]);
        let b = fig("rtt_ns", &[92.0, 112.0, 102.0, 97.0, 107.0]);
        assert_eq!(diff(&a, &b).verdict, Verdict::Same);
    }

    fn typed(name: &str, d: crate::experiment::Direction, s: &[f64]) -> crate::experiment::Figure {
        crate::experiment::Figure::from_samples(
            name,
            name,
            crate::experiment::Unit::PerSecond,
            d,
            s.to_vec(),
        )
        .unwrap()
    }

    /// The first version guessed directions from key names and read `migrations_per_s` as a
    /// rate, so twice the migrations counted as an improvement. A typed figure says it is worse.
    #[test]
    fn migrations_per_s_going_up_is_a_regression() {
        use crate::experiment::Direction::LowerIsBetter;
        let a = typed(
            "migrations_per_s",
            LowerIsBetter,
            &[100.0, 101.0, 99.0, 100.5],
        );
        let b = typed(
            "migrations_per_s",
            LowerIsBetter,
            &[200.0, 201.0, 199.0, 200.5],
        );
        let d = diff_typed(&a, &b);
        assert_eq!(d.verdict, Verdict::Worse);
        assert_eq!(d.direction_source, DirectionSource::Typed);
        let (_, regressions) = judge(vec![d], Some(10.0));
        assert_eq!(regressions, vec!["migrations_per_s".to_string()]);
        // The name-based fallback no longer guesses "better" for it: it says it cannot tell.
        let d = diff(&untyped(&a), &untyped(&b));
        assert_eq!(d.worse_when, Worse::Unknown);
        assert_eq!(d.verdict, Verdict::Changed);
    }

    #[test]
    fn a_typed_figure_of_neither_direction_is_never_a_regression() {
        use crate::experiment::Direction::Neither;
        let a = typed("cpus_used", Neither, &[1.0, 1.1, 0.9]);
        let b = typed("cpus_used", Neither, &[3.0, 3.1, 2.9]);
        let d = diff_typed(&a, &b);
        assert_eq!(d.worse_when, Worse::Unknown);
        assert_eq!(d.verdict, Verdict::Changed);
        assert!(judge(vec![d], Some(0.0)).1.is_empty());
    }

    #[test]
    fn plain_numbers_are_never_judged() {
        let p = |v| Figure {
            path: "p99_ns".into(),
            value: v,
            samples: None,
            ci95: None,
        };
        assert_eq!(diff(&p(1.0), &p(100.0)).verdict, Verdict::Untested);
    }

    /// Ten samples 0..9 and the same shifted by 3.5: Welch's p is about 0.02, below
    /// [`ALPHA`], yet the two 95% intervals (half-width 2.17 each) still overlap.
    fn p_below_alpha_overlapping() -> (Vec<f64>, Vec<f64>) {
        let a: Vec<f64> = (0..10).map(f64::from).collect();
        let b = a.iter().map(|v| v + 3.5).collect();
        (a, b)
    }

    #[test]
    fn separation_needs_both_the_p_value_and_separated_intervals() {
        let (a, b) = p_below_alpha_overlapping();
        let s = separation(&a, &b).unwrap();
        assert!(s.p_value < ALPHA, "p = {}", s.p_value);
        assert!(
            s.a.ci95_high > s.b.ci95_low,
            "the fixture's intervals overlap"
        );
        assert!(!s.beyond_noise);
        assert!((s.a.mean - 4.5).abs() < 1e-12 && (s.b.mean - 8.0).abs() < 1e-12);
        // Far apart: both hold.
        let s = separation(&[1.0, 1.1, 0.9], &[5.0, 5.1, 4.9]).unwrap();
        assert!(s.p_value < ALPHA && s.a.ci95_high < s.b.ci95_low);
        assert!(s.beyond_noise);
        // Same spread, same mean: p = 1, not beyond.
        let s = separation(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]).unwrap();
        assert!((s.p_value - 1.0).abs() < 1e-12);
        assert!(!s.beyond_noise);
    }

    #[test]
    fn separation_refuses_too_few_or_non_finite_samples() {
        assert!(separation(&[1.0], &[2.0, 3.0]).is_none());
        assert!(separation(&[1.0, 2.0], &[]).is_none());
        assert!(separation(&[1.0, f64::NAN], &[2.0, 3.0]).is_none());
        assert!(separation(&[1.0, 2.0], &[2.0, f64::INFINITY]).is_none());
    }

    #[test]
    fn intervals_overlap_when_they_share_a_point() {
        assert!(overlap((0.0, 2.0), (1.0, 3.0)));
        assert!(overlap((1.0, 3.0), (0.0, 2.0)));
        assert!(overlap((0.0, 1.0), (1.0, 2.0)), "touching ends overlap");
        assert!(overlap((0.0, 4.0), (1.0, 2.0)), "nested");
        assert!(!overlap((0.0, 1.0), (2.0, 3.0)));
        assert!(!overlap((2.0, 3.0), (0.0, 1.0)));
    }

    #[test]
    fn a_difference_with_p_below_alpha_but_overlapping_intervals_is_the_same() {
        let (a, b) = p_below_alpha_overlapping();
        let d = diff(&fig("rtt_ns", &a), &fig("rtt_ns", &b));
        assert_eq!(d.test, Test::Welch);
        assert!(d.p_value.unwrap() < ALPHA);
        assert_eq!(d.verdict, Verdict::Same);
        assert_eq!((d.a_n, d.b_n), (10, 10));
    }

    #[test]
    fn ratio_change_and_worse_by_follow_the_direction() {
        let a = fig("rtt_ns", &[99.0, 100.0, 101.0]);
        let b = fig("rtt_ns", &[119.0, 120.0, 121.0]);
        let close = |x: Option<f64>, want: f64| (x.unwrap() - want).abs() < 1e-9;
        let d = diff(&a, &b);
        assert_eq!(d.worse_when, Worse::Higher);
        assert_eq!(d.direction_source, DirectionSource::Name);
        assert!(close(d.ratio, 1.2));
        assert!(close(d.change_pct, 20.0));
        assert!(close(d.worse_by_pct, 20.0));
        assert_eq!(d.verdict, Verdict::Worse);
        let ci = d.a_ci95.unwrap();
        assert!(
            ci.0 < 100.0 && 100.0 < ci.1,
            "a's interval is its samples': {ci:?}"
        );
        // A rate: higher is better, so the same move is 20% better (worse by -20%).
        let d = diff(
            &fig("tps", &[99.0, 100.0, 101.0]),
            &fig("tps", &[119.0, 120.0, 121.0]),
        );
        assert_eq!(d.worse_when, Worse::Lower);
        assert!(close(d.change_pct, 20.0));
        assert!(close(d.worse_by_pct, -20.0));
        assert_eq!(d.verdict, Verdict::Better);
        // A rate falling by 20% is worse by 20%.
        let d = diff(
            &fig("tps", &[99.0, 100.0, 101.0]),
            &fig("tps", &[79.0, 80.0, 81.0]),
        );
        assert!(close(d.change_pct, -20.0));
        assert!(close(d.worse_by_pct, 20.0));
        assert_eq!(d.verdict, Verdict::Worse);
    }

    #[test]
    fn a_zero_baseline_has_no_ratio_and_is_changed_not_judged_worse() {
        let a = fig("rtt_ns", &[-0.1, 0.0, 0.1]);
        let b = fig("rtt_ns", &[9.9, 10.0, 10.1]);
        assert_eq!(a.value, 0.0);
        let d = diff(&a, &b);
        assert_eq!(d.ratio, None);
        assert_eq!(d.change_pct, None);
        assert_eq!(d.worse_by_pct, None);
        assert_eq!(d.verdict, Verdict::Changed);
    }

    #[test]
    fn non_finite_samples_leave_a_figure_untested() {
        let a = fig("rtt_ns", &[1.0, f64::NAN, 1.0]);
        let b = fig("rtt_ns", &[5.0, 5.1, 4.9]);
        let d = diff(&a, &b);
        assert_eq!((d.test, d.verdict), (Test::None, Verdict::Untested));
        assert_eq!((d.p_value, d.a_ci95), (None, None));
    }

    fn stated(path: &str, value: f64, ci95: (f64, f64)) -> Figure {
        Figure {
            path: path.into(),
            value,
            samples: None,
            ci95: Some(ci95),
        }
    }

    #[test]
    fn stated_intervals_alone_are_judged_by_overlap() {
        let a = stated("rtt_ns", 100.0, (95.0, 105.0));
        let d = diff(&a, &stated("rtt_ns", 120.0, (115.0, 125.0)));
        assert_eq!((d.test, d.verdict), (Test::Intervals, Verdict::Worse));
        assert_eq!(d.p_value, None);
        assert_eq!(d.a_ci95, Some((95.0, 105.0)));
        let d = diff(&a, &stated("rtt_ns", 108.0, (105.0, 111.0)));
        assert_eq!((d.test, d.verdict), (Test::Intervals, Verdict::Same));
    }

    #[test]
    fn one_sample_gives_no_interval_of_its_own() {
        // A single sample is no spread: the stated interval is used instead.
        let f = Figure {
            path: "rtt_ns".into(),
            value: 100.0,
            samples: Some(vec![100.0]),
            ci95: Some((90.0, 110.0)),
        };
        assert_eq!(interval(&f), Some((90.0, 110.0)));
        let f = fig("rtt_ns", &[99.0, 100.0, 101.0]);
        let (lo, hi) = interval(&f).unwrap();
        assert!(lo < 99.0 && 101.0 < hi && lo > 0.0);
    }

    #[test]
    fn untyped_keeps_samples_only_from_two_on() {
        use crate::experiment::Direction::LowerIsBetter;
        let t = typed("rtt_ns", LowerIsBetter, &[1.0, 2.0, 3.0]);
        let f = untyped(&t);
        assert_eq!(f.samples.as_deref(), Some(&[1.0, 2.0, 3.0][..]));
        assert_eq!((f.path.as_str(), f.value), ("rtt_ns", 2.0));
        let one = typed("rtt_ns", LowerIsBetter, &[1.0]);
        assert_eq!(untyped(&one).samples, None);
        let d = diff_typed(&t, &typed("rtt_ns", LowerIsBetter, &[7.0, 8.0, 9.0]));
        assert_eq!((d.test, d.a_n, d.b_n), (Test::Welch, 3, 3));
    }

    #[test]
    fn judged_figures_come_worst_first() {
        let a = fig("rtt_ns", &[99.0, 100.0, 101.0]);
        let plain = |v| Figure {
            path: "plain_ns".into(),
            value: v,
            samples: None,
            ci95: None,
        };
        let diffs = vec![
            diff(&plain(1.0), &plain(2.0)),
            diff(&a, &fig("rtt_ns", &[99.5, 100.0, 100.5])),
            diff(
                &fig("tps", &a.samples.clone().unwrap()),
                &fig("tps", &[199.0, 200.0, 201.0]),
            ),
            diff(&fig("x", &[1.0, 1.1, 0.9]), &fig("x", &[5.0, 5.1, 4.9])),
            diff(&a, &fig("rtt_ns", &[199.0, 200.0, 201.0])),
        ];
        let (sorted, regressions) = judge(diffs, None);
        let verdicts: Vec<Verdict> = sorted.iter().map(|d| d.verdict).collect();
        use Verdict::*;
        assert_eq!(verdicts, vec![Worse, Changed, Better, Same, Untested]);
        assert!(regressions.is_empty(), "no threshold, no regressions");
    }

    #[test]
    fn a_regression_is_worse_beyond_noise_and_strictly_beyond_the_threshold() {
        let a = fig("rtt_ns", &[99.0, 100.0, 101.0]);
        let d = diff(&a, &fig("rtt_ns", &[119.0, 120.0, 121.0]));
        let w = d.worse_by_pct.unwrap();
        assert_eq!(
            judge(vec![d.clone()], Some(10.0)).1,
            vec!["rtt_ns".to_string()]
        );
        assert!(
            judge(vec![d.clone()], Some(w)).1.is_empty(),
            "exactly at the threshold"
        );
        assert_eq!(judge(vec![d.clone()], Some(w - 1e-9)).1.len(), 1);
        assert!(judge(vec![d], Some(30.0)).1.is_empty());
        // 50% slower but within noise: not a regression, whatever the threshold.
        let noisy = diff(
            &fig("rtt_ns", &[50.0, 100.0, 150.0]),
            &fig("rtt_ns", &[100.0, 150.0, 200.0]),
        );
        assert_eq!(noisy.verdict, Verdict::Same);
        assert!(noisy.worse_by_pct.unwrap() > 10.0);
        assert!(judge(vec![noisy], Some(10.0)).1.is_empty());
        // Better by 20%: never a regression, even with a threshold below its change.
        let better = diff(
            &fig("tps", &[79.0, 80.0, 81.0]),
            &fig("tps", &[99.0, 100.0, 101.0]),
        );
        assert_eq!(better.verdict, Verdict::Better);
        assert!(better.worse_by_pct.unwrap() < 0.0);
        assert!(judge(vec![better], Some(-100.0)).1.is_empty());
    }

    #[test]
    fn compare_pairs_flat_figures_by_path() {
        use serde_json::json;
        let a = walk::flatten(&json!({
            "rtt_ns": {"samples": [99.0, 100.0, 101.0]},
            "tps": {"samples": [99.0, 100.0, 101.0]},
            "gone_ns": {"samples": [1.0, 2.0]}
        }));
        let b = walk::flatten(&json!({
            "rtt_ns": {"samples": [119.0, 120.0, 121.0]},
            "tps": {"samples": [99.5, 100.0, 100.5]}
        }));
        let (figures, regressions) = compare(&a, &b, Some(10.0));
        let got: Vec<(&str, Verdict)> = figures
            .iter()
            .map(|d| (d.path.as_str(), d.verdict))
            .collect();
        assert_eq!(
            got,
            vec![("rtt_ns", Verdict::Worse), ("tps", Verdict::Same)]
        );
        assert_eq!(regressions, vec!["rtt_ns".to_string()]);
    }

    #[test]
    fn comparison_of_documents_names_what_is_only_on_one_side_and_the_context_that_moved() {
        use serde_json::json;
        let a = json!({
            "conditions": {"kernel": "6.1", "online_cpus": "0-1"},
            "rtt_ns": {"samples": [99.0, 100.0, 101.0]},
            "old_ns": {"samples": [1.0, 2.0]}
        });
        let b = json!({
            "conditions": {"kernel": "6.12", "online_cpus": "0-1"},
            "rtt_ns": {"samples": [119.0, 120.0, 121.0]},
            "new_ns": {"samples": [1.0, 2.0]}
        });
        let c = comparison(("a.json", &a), ("b.json", &b), "pingpong", None, Some(10.0));
        assert_eq!((c.a_file.as_str(), c.b_file.as_str()), ("a.json", "b.json"));
        assert_eq!(c.result_kind, "pingpong");
        assert_eq!(c.method, METHOD);
        assert_eq!(c.figures.len(), 1);
        assert_eq!(c.figures[0].verdict, Verdict::Worse);
        assert_eq!(c.only_in_a, vec!["old_ns".to_string()]);
        assert_eq!(c.only_in_b, vec!["new_ns".to_string()]);
        assert_eq!(c.regressions, vec!["rtt_ns".to_string()]);
        assert_eq!(
            c.context_differences,
            vec![("conditions.kernel".into(), "6.1".into(), "6.12".into())]
        );
    }

    #[test]
    fn comparison_of_typed_figures_pairs_them_by_name_with_their_own_direction() {
        use crate::experiment::Direction::{HigherIsBetter, LowerIsBetter};
        let doc = serde_json::json!({});
        let t = Typed {
            a: vec![
                typed("ops_per_s", HigherIsBetter, &[99.0, 100.0, 101.0]),
                typed("old_ns", LowerIsBetter, &[1.0, 2.0]),
            ],
            b: vec![
                typed("new_ns", LowerIsBetter, &[5.0, 6.0]),
                typed("ops_per_s", HigherIsBetter, &[79.0, 80.0, 81.0]),
            ],
        };
        let c = comparison(("a", &doc), ("b", &doc), "k", Some(t), Some(10.0));
        assert_eq!(c.figures.len(), 1);
        let d = &c.figures[0];
        assert_eq!(d.path, "ops_per_s");
        assert_eq!((d.a, d.b), (100.0, 80.0));
        assert_eq!(d.direction_source, DirectionSource::Typed);
        assert_eq!(d.verdict, Verdict::Worse);
        assert_eq!(c.only_in_a, vec!["old_ns".to_string()]);
        assert_eq!(c.only_in_b, vec!["new_ns".to_string()]);
        assert_eq!(c.regressions, vec!["ops_per_s".to_string()]);
        assert!(c.context_differences.is_empty());
    }
}
