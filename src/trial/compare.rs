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
    /// No difference beyond noise (see `detectable_rel`).
    NoDifference,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Better => "better",
            Self::Worse => "worse",
            Self::Different => "changed",
            Self::NoDifference => "no difference beyond noise",
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
}

/// Significance level of the verdict.
pub const ALPHA: f64 = 0.05;

/// The minimum detectable difference of a Welch test on `a` and `b`, absolute.
pub fn detectable(a: &[f64], b: &[f64]) -> Option<f64> {
    let ma = MeanCi::of(a)?;
    let mb = MeanCi::of(b)?;
    if ma.n < 2 || mb.n < 2 {
        return None;
    }
    let (va, vb) = (
        ma.stddev.powi(2) / ma.n as f64,
        mb.stddev.powi(2) / mb.n as f64,
    );
    let se2 = va + vb;
    let df = if se2 == 0.0 {
        (ma.n + mb.n - 2) as f64
    } else {
        se2 * se2 / (va * va / (ma.n as f64 - 1.0) + vb * vb / (mb.n as f64 - 1.0))
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
}
