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
}
