//! Baseline against changed, figure by figure, on round-level values.
//!
//! Within a round, samples (batch means) are correlated with one another: the host's state
//! during that round is shared by all of them. Across rounds they are much closer to
//! independent, and interleaving puts the host's drift on both sides. So the unit of the test is
//! the round: each round contributes one value per figure (its mean), and the two sides are
//! compared with Welch's unequal-variances t-test (Welch 1947). "No difference" comes with the
//! smallest effect the run could have detected: at 5% significance and 80% power the minimum
//! detectable difference is (t(0.975, df) + t(0.80, df)) x SE (Cohen, *Statistical Power
//! Analysis*, ch. 2), given relative to the baseline mean.

use crate::experiment::{Direction, Figure, Unit};
use crate::stats::{MeanCi, welch_t_test};
use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

use super::{Round, Side};

/// The judgement on one figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Better,
    Worse,
    /// Changed beyond noise, for a figure where neither way is better.
    Different,
    /// No difference beyond noise, and the run could have seen a change of the target size
    /// (see `detectable_rel` and `target_rel`).
    NoDifference,
    /// No difference beyond noise, but the run could not have seen a change of the target
    /// size: no verdict (see `rounds_needed`).
    Inconclusive,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Better => "better",
            Self::Worse => "worse",
            Self::Different => "changed",
            Self::NoDifference => "no difference beyond noise",
            Self::Inconclusive => "inconclusive",
        }
    }
}

/// One figure, both sides.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub name: String,
    pub label: String,
    pub unit: Unit,
    pub direction: Direction,
    /// Round-level values (each round's mean), baseline rounds.
    pub baseline_rounds: Vec<f64>,
    pub changed_rounds: Vec<f64>,
    /// Every within-round sample of each side, in round order (raw data).
    pub baseline_samples: Vec<f64>,
    pub changed_samples: Vec<f64>,
    pub baseline: MeanCi,
    pub changed: MeanCi,
    /// changed / baseline, its interval propagated from both sides; `None` when the baseline is
    /// not positive (polling time 0 without halt polling).
    pub ratio: Option<MeanCi>,
    /// Welch's two-sided p-value over the round-level values.
    pub p_value: Option<f64>,
    pub verdict: Verdict,
    /// Smallest difference the run could have detected (5% level, 80% power), as a fraction of
    /// the baseline mean (`None` when the baseline's interval reaches zero).
    pub detectable_rel: Option<f64>,
    /// The same in the figure's unit.
    pub detectable: Option<f64>,
    /// The smallest change, as a fraction of the baseline, the trial set out to be able to
    /// see (`--detect`, or the change a doctor finding predicts); `None` for a cost, a figure
    /// whose baseline reaches zero, and trials saved before the target existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_rel: Option<f64>,
    /// When `verdict` is `inconclusive`: about how many rounds per side would see the target,
    /// estimated from the spread the rounds showed (`None`: more than 10,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds_needed: Option<usize>,
    /// The same as seconds of trial still to run, at the pace of the rounds so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub more_time_s: Option<f64>,
}

impl Comparison {
    /// A cost of the change (polling time, a process's CPU time), not a figure it acts on.
    pub fn is_cost(&self) -> bool {
        self.name.starts_with("cost.")
    }
}

/// Significance level of the verdict.
pub const ALPHA: f64 = 0.05;

/// The minimum detectable difference of a Welch test on `a` and `b`, absolute.
pub fn detectable(a: &[f64], b: &[f64]) -> Option<f64> {
    let ma = MeanCi::of(a)?;
    let mb = MeanCi::of(b)?;
    detectable_from(ma.stddev, ma.n, mb.stddev, mb.n)
}

/// The minimum detectable difference (5% level, 80% power) of a Welch test on two sides with
/// these standard deviations and sizes: (t(0.975, df) + t(0.80, df)) x SE, df by
/// Welch–Satterthwaite. `None` with fewer than two values a side.
pub fn detectable_from(sd_a: f64, n_a: usize, sd_b: f64, n_b: usize) -> Option<f64> {
    if n_a < 2 || n_b < 2 {
        return None;
    }
    let (na, nb) = (n_a as f64, n_b as f64);
    let (va, vb) = (sd_a.powi(2) / na, sd_b.powi(2) / nb);
    let se2 = va + vb;
    let df = if se2 == 0.0 {
        na + nb - 2.0
    } else {
        se2 * se2 / (va * va / (na - 1.0) + vb * vb / (nb - 1.0))
    };
    let t = StudentsT::new(0.0, 1.0, df.max(1.0)).ok()?;
    Some((t.inverse_cdf(1.0 - ALPHA / 2.0) + t.inverse_cdf(0.80)) * se2.sqrt())
}

/// The verdict for a difference with p-value `p` in `direction`.
pub fn verdict(direction: Direction, baseline: f64, changed: f64, p: Option<f64>) -> Verdict {
    match p {
        Some(p) if p < ALPHA => match direction {
            Direction::LowerIsBetter if changed < baseline => Verdict::Better,
            Direction::HigherIsBetter if changed > baseline => Verdict::Better,
            Direction::Neither => Verdict::Different,
            _ => Verdict::Worse,
        },
        _ => Verdict::NoDifference,
    }
}

/// Compares every figure that every round produced.
pub fn compare_rounds(rounds: &[Round]) -> Vec<Comparison> {
    let Some(first) = rounds.first() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for f in &first.figures {
        let per_side = |side: Side| -> Option<Vec<&Figure>> {
            rounds
                .iter()
                .filter(|r| r.side == side)
                .map(|r| r.figures.iter().find(|g| g.name == f.name))
                .collect()
        };
        let (Some(a), Some(b)) = (per_side(Side::Baseline), per_side(Side::Changed)) else {
            continue;
        };
        let av: Vec<f64> = a.iter().map(|g| g.value).collect();
        let bv: Vec<f64> = b.iter().map(|g| g.value).collect();
        let (Some(ma), Some(mb)) = (MeanCi::of(&av), MeanCi::of(&bv)) else {
            continue;
        };
        let p_value = welch_t_test(&av, &bv).map(|w| w.p_value);
        out.push(Comparison {
            name: f.name.clone(),
            label: f.label.clone(),
            unit: f.unit,
            direction: f.direction,
            baseline_samples: a.iter().flat_map(|g| g.samples.clone()).collect(),
            changed_samples: b.iter().flat_map(|g| g.samples.clone()).collect(),
            // A ratio to a baseline whose interval reaches zero (no polling without halt
            // polling) says nothing: the difference and its unit do.
            ratio: if ma.ci95_low > 0.0 {
                mb.ratio(&ma)
            } else {
                None
            },
            verdict: verdict(f.direction, ma.mean, mb.mean, p_value),
            detectable_rel: detectable(&av, &bv)
                .filter(|_| ma.ci95_low > 0.0)
                .map(|d| d / ma.mean.abs()),
            detectable: detectable(&av, &bv),
            target_rel: None,
            rounds_needed: None,
            more_time_s: None,
            p_value,
            baseline: ma,
            changed: mb,
            baseline_rounds: av,
            changed_rounds: bv,
        });
    }
    out
}

/// The comparisons as figures: each side with its round-level samples, for `compare` and the
/// registry.
pub fn figures(cs: &[Comparison]) -> Vec<Figure> {
    let mut out = Vec::new();
    for c in cs {
        for (side, v) in [
            ("baseline", &c.baseline_rounds),
            ("changed", &c.changed_rounds),
        ] {
            if let Some(f) = Figure::from_samples(
                format!("{}[side={side}]", c.name),
                format!("{}, {side}", c.label),
                c.unit,
                c.direction,
                v.clone(),
            ) {
                out.push(f);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(index: usize, side: Side, v: f64, cost: f64) -> Round {
        Round {
            index,
            side,
            started_s: index as f64,
            figures: vec![
                Figure::single(
                    "rtt_ns",
                    "rtt",
                    Unit::Nanoseconds,
                    Direction::LowerIsBetter,
                    v,
                ),
                Figure::single(
                    "cost.poll_cpu_s_per_s",
                    "poll",
                    Unit::CpuSecondsPerSecond,
                    Direction::LowerIsBetter,
                    cost,
                ),
            ],
            noisy: false,
            load_before: None,
        }
    }

    #[test]
    fn a_clear_improvement_is_better_with_its_ratio() {
        let vals = [42_000.0, 7_100.0, 43_500.0, 7_000.0, 41_800.0, 6_900.0];
        let rounds: Vec<Round> = vals
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let side = if i % 2 == 0 {
                    Side::Baseline
                } else {
                    Side::Changed
                };
                round(i, side, *v, if side == Side::Changed { 0.3 } else { 0.0 })
            })
            .collect();
        let cs = compare_rounds(&rounds);
        let rtt = &cs[0];
        assert_eq!(rtt.verdict, Verdict::Better);
        let r = rtt.ratio.as_ref().unwrap();
        assert!(r.mean < 0.2 && r.ci95_low <= r.mean && r.mean <= r.ci95_high);
        assert_eq!(rtt.baseline_rounds.len(), 3);
        // Polling from nothing: no ratio, a worse cost.
        let cost = &cs[1];
        assert!(cost.ratio.is_none());
        assert_eq!(cost.verdict, Verdict::Worse);
    }

    #[test]
    fn noise_gives_no_difference_with_what_could_have_been_seen() {
        let a = [10.0, 12.0, 11.0];
        let b = [11.0, 10.5, 11.8];
        let p = welch_t_test(&a, &b).unwrap().p_value;
        assert_eq!(
            verdict(Direction::LowerIsBetter, 11.0, 11.1, Some(p)),
            Verdict::NoDifference
        );
        let d = detectable(&a, &b).unwrap();
        // The detectable difference exceeds the observed one, and more rounds shrink it.
        assert!(d > 0.1);
        let a6 = [10.0, 12.0, 11.0, 10.0, 12.0, 11.0];
        let b6 = [11.0, 10.5, 11.8, 11.0, 10.5, 11.8];
        assert!(detectable(&a6, &b6).unwrap() < d);
    }

    #[test]
    fn verdict_strings_are_what_try_prints() {
        assert_eq!(Verdict::Better.as_str(), "better");
        assert_eq!(Verdict::Worse.as_str(), "worse");
        assert_eq!(Verdict::Different.as_str(), "changed");
        assert_eq!(Verdict::NoDifference.as_str(), "no difference beyond noise");
    }

    #[test]
    fn verdict_follows_the_direction_only_below_alpha() {
        use Direction::*;
        let p = Some(0.01);
        assert_eq!(verdict(LowerIsBetter, 100.0, 90.0, p), Verdict::Better);
        assert_eq!(verdict(LowerIsBetter, 100.0, 110.0, p), Verdict::Worse);
        assert_eq!(verdict(HigherIsBetter, 100.0, 110.0, p), Verdict::Better);
        assert_eq!(verdict(HigherIsBetter, 100.0, 90.0, p), Verdict::Worse);
        assert_eq!(verdict(Neither, 100.0, 110.0, p), Verdict::Different);
        assert_eq!(verdict(Neither, 100.0, 90.0, p), Verdict::Different);
        // Equal means are not an improvement in either direction.
        assert_eq!(verdict(LowerIsBetter, 100.0, 100.0, p), Verdict::Worse);
        assert_eq!(verdict(HigherIsBetter, 100.0, 100.0, p), Verdict::Worse);
        // At alpha, above it, or with no test: no difference, whatever the means.
        for p in [Some(ALPHA), Some(0.051), Some(1.0), None] {
            assert_eq!(
                verdict(LowerIsBetter, 100.0, 10.0, p),
                Verdict::NoDifference
            );
            assert_eq!(
                verdict(HigherIsBetter, 100.0, 10.0, p),
                Verdict::NoDifference
            );
            assert_eq!(verdict(Neither, 100.0, 10.0, p), Verdict::NoDifference);
        }
        assert_eq!(
            verdict(LowerIsBetter, 100.0, 10.0, Some(0.049)),
            Verdict::Better
        );
    }

    /// Equal spreads and sizes: se^2 = 1/3 + 1/3, df = 4, and from the printed t table
    /// t(0.975, 4) = 2.776445, t(0.80, 4) = 0.940965.
    #[test]
    fn detectable_difference_of_a_worked_example() {
        let d = detectable(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]).unwrap();
        let want = (2.776_445 + 0.940_965) * (2.0f64 / 3.0).sqrt();
        assert!((d - want).abs() < 1e-5, "{d} vs {want}");
    }

    /// Unequal sizes and spreads: va = 1/3 (n = 3), vb = (20/3)/4 = 5/3 (n = 4), so se^2 = 2
    /// and Welch–Satterthwaite df = 4 / ((1/9)/2 + (25/9)/3) = 216/53.
    #[test]
    fn detectable_difference_with_unequal_sides() {
        let df = 216.0 / 53.0;
        let t = StudentsT::new(0.0, 1.0, df).unwrap();
        let want = (t.inverse_cdf(0.975) + t.inverse_cdf(0.80)) * 2.0f64.sqrt();
        let a = [1.0, 2.0, 3.0];
        let b = [2.0, 4.0, 6.0, 8.0];
        let d = detectable(&a, &b).unwrap();
        assert!((d - want).abs() < 1e-9, "{d} vs {want}");
        let d = detectable(&b, &a).unwrap();
        assert!(
            (d - want).abs() < 1e-9,
            "the same either way round: {d} vs {want}"
        );
    }

    #[test]
    fn detectable_needs_two_rounds_a_side() {
        assert_eq!(detectable(&[1.0], &[1.0, 2.0]), None);
        assert_eq!(detectable(&[1.0, 2.0], &[1.0]), None);
        assert_eq!(detectable(&[], &[1.0, 2.0]), None);
        assert!(detectable(&[1.0, 2.0], &[1.0, 3.0]).unwrap() > 0.0);
        // No spread at all: nothing smaller than zero could be missed.
        assert_eq!(detectable(&[5.0, 5.0, 5.0], &[5.0, 5.0, 5.0]), Some(0.0));
    }

    fn rounds_of(direction: Direction, baseline: &[f64], changed: &[f64]) -> Vec<Round> {
        let side = |side, vs: &[f64], from: usize| -> Vec<Round> {
            vs.iter()
                .enumerate()
                .map(|(i, v)| Round {
                    index: from + i,
                    side,
                    started_s: (from + i) as f64,
                    figures: vec![
                        Figure::from_samples(
                            "ops_per_s",
                            "ops",
                            Unit::PerSecond,
                            direction,
                            vec![v - 1.0, v + 1.0],
                        )
                        .unwrap(),
                    ],
                    noisy: false,
                    load_before: None,
                })
                .collect()
        };
        let mut r = side(Side::Baseline, baseline, 0);
        r.extend(side(Side::Changed, changed, baseline.len()));
        r
    }

    #[test]
    fn rounds_are_compared_by_side_with_the_figures_direction() {
        let cs = compare_rounds(&rounds_of(
            Direction::HigherIsBetter,
            &[100.0, 101.0, 99.0],
            &[80.0, 81.0, 79.0],
        ));
        assert_eq!(cs.len(), 1);
        let c = &cs[0];
        assert_eq!((c.name.as_str(), c.label.as_str()), ("ops_per_s", "ops"));
        assert_eq!(c.verdict, Verdict::Worse);
        assert_eq!(c.baseline_rounds, vec![100.0, 101.0, 99.0]);
        assert_eq!(c.changed_rounds, vec![80.0, 81.0, 79.0]);
        assert_eq!(
            c.baseline_samples,
            vec![99.0, 101.0, 100.0, 102.0, 98.0, 100.0]
        );
        assert_eq!(c.changed_samples.len(), 6);
        assert!(c.p_value.unwrap() < ALPHA);
        let r = c.ratio.as_ref().unwrap();
        assert!((r.mean - 0.8).abs() < 1e-12);
        let d = c.detectable.unwrap();
        assert_eq!(Some(d), detectable(&c.baseline_rounds, &c.changed_rounds));
        assert!((c.detectable_rel.unwrap() - d / 100.0).abs() < 1e-12);
        let cs = compare_rounds(&rounds_of(
            Direction::HigherIsBetter,
            &[80.0, 81.0, 79.0],
            &[100.0, 101.0, 99.0],
        ));
        assert_eq!(cs[0].verdict, Verdict::Better);
    }

    #[test]
    fn a_baseline_at_zero_has_no_ratio_and_no_relative_detectable() {
        let cs = compare_rounds(&rounds_of(
            Direction::LowerIsBetter,
            &[0.0, 0.0, 0.0],
            &[0.3, 0.31, 0.29],
        ));
        let c = &cs[0];
        assert_eq!(c.baseline.ci95_low, 0.0);
        assert!(c.ratio.is_none());
        assert_eq!(c.detectable_rel, None);
        assert!(c.detectable.unwrap() > 0.0);
        assert_eq!(c.verdict, Verdict::Worse);
    }

    #[test]
    fn too_few_rounds_or_a_missing_figure_are_not_compared() {
        assert!(compare_rounds(&[]).is_empty());
        // Only baseline rounds: nothing to set against them.
        assert!(compare_rounds(&rounds_of(Direction::LowerIsBetter, &[1.0, 2.0], &[])).is_empty());
        // One round a side: means, but no test and no detectable difference.
        let cs = compare_rounds(&rounds_of(Direction::LowerIsBetter, &[1.0], &[9.0]));
        assert_eq!(cs.len(), 1);
        assert_eq!((cs[0].p_value, cs[0].detectable), (None, None));
        assert_eq!(cs[0].verdict, Verdict::NoDifference);
        // A figure one round did not produce is left out; the others are still compared.
        let mut rounds: Vec<Round> = (0..4)
            .map(|i| {
                round(
                    i,
                    if i % 2 == 0 {
                        Side::Baseline
                    } else {
                        Side::Changed
                    },
                    10.0 + i as f64,
                    0.0,
                )
            })
            .collect();
        rounds[3].figures.retain(|f| f.name == "rtt_ns");
        let cs = compare_rounds(&rounds);
        let names: Vec<&str> = cs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, vec!["rtt_ns"]);
        assert_eq!(cs[0].baseline_rounds, vec![10.0, 12.0]);
        assert_eq!(cs[0].changed_rounds, vec![11.0, 13.0]);
    }

    #[test]
    fn figures_are_one_per_side_with_the_round_values_as_samples() {
        let cs = compare_rounds(&rounds_of(
            Direction::HigherIsBetter,
            &[100.0, 101.0, 99.0],
            &[80.0, 81.0, 79.0],
        ));
        let fs = figures(&cs);
        let names: Vec<&str> = fs.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            vec!["ops_per_s[side=baseline]", "ops_per_s[side=changed]"]
        );
        assert_eq!(fs[0].label, "ops, baseline");
        assert_eq!(fs[1].samples, vec![80.0, 81.0, 79.0]);
        assert_eq!(fs[1].direction, Direction::HigherIsBetter);
        assert_eq!(fs[1].unit, Unit::PerSecond);
        assert!((fs[0].value - 100.0).abs() < 1e-12);
    }
}
