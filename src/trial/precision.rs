//! How many rounds a trial runs: enough to see a change of the size it looks for, or a plain
//! "inconclusive" with what it would take.
//!
//! Three rounds a side is often too few. A trial of halt polling on a busy guest once ended
//! "no difference beyond noise (could have seen ±58%)": a trial that could not have seen the
//! effect it tests is no verdict. So a trial has a target, the smallest change it sets out to be
//! able to see (`--detect`, 10% by default, or the change a doctor finding predicts), and adds
//! rounds in A/B pairs, after `--rounds` a side, until every figure's minimum detectable
//! difference (5% level, 80% power; [`super::compare::detectable_from`]) is within the target,
//! or its time limit (`--max-time`) would be passed by one more pair.
//!
//! **Why the stop rule never looks at the difference.** Stopping as soon as a difference is
//! significant ("peeking") turns a 5% test into a much larger false-positive rate: with
//! enough looks, noise alone crosses the line (Armitage, McPherson and Rowe 1969). The rule
//! here looks only at the spread of the rounds (how wide the test's net is), never at the
//! means' difference or the p-value, so it cannot stop *because* noise looked like an effect.
//! Choosing the sample size from the observed variance alone is the "internal pilot" design
//! (Wittes and Brittain 1990), whose effect on the test's size is small. The test is made once,
//! on all the rounds, when adding stops.

use super::compare::{Comparison, Verdict, detectable_from};
use serde::{Deserialize, Serialize};

/// The change a standalone trial sets out to be able to see: 10% of the baseline.
pub const DEFAULT_TARGET: f64 = 0.10;
/// The default time limit of one A/B trial, in seconds (`--max-time`).
pub const DEFAULT_MAX_TIME_S: f64 = 120.0;
/// Estimates beyond this many rounds a side are reported as "more than".
pub const MAX_ROUNDS: usize = 10_000;

/// What a trial sets out to be able to see, and within what time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Goal {
    /// The smallest change, as a fraction of the baseline mean, the trial should be able to
    /// see (0.10 = ±10%).
    pub target_rel: f64,
    /// Where the target came from: `default`, `--detect`, or the doctor finding it predicts.
    pub target_from: String,
    /// Seconds the rounds of one A/B trial may take; no pair is started that would pass it.
    pub max_time_s: f64,
    /// Rounds per side measured whatever the spread (`--rounds`).
    pub min_rounds: usize,
    /// Only figures whose name starts with this are held to the target (`metric[` for a
    /// measured command: its wall time is context); every figure when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
}

impl Goal {
    /// The standalone default: ±10%, two minutes, `min_rounds` a side first.
    pub fn default_with(min_rounds: usize) -> Self {
        Self {
            target_rel: DEFAULT_TARGET,
            target_from: "default".into(),
            max_time_s: DEFAULT_MAX_TIME_S,
            min_rounds,
            held: None,
        }
    }

    /// Whether `c` is held to the target: a figure (not a cost) the goal names, whose
    /// baseline is away from zero, so a relative change means something.
    pub fn holds(&self, c: &Comparison) -> bool {
        !c.is_cost()
            && c.baseline.ci95_low > 0.0
            && self.held.as_ref().is_none_or(|p| c.name.starts_with(p))
    }

    /// Whether `c` is held to the target and could not yet have seen it.
    pub fn short_of(&self, c: &Comparison) -> bool {
        self.holds(c) && c.detectable_rel.is_none_or(|d| d > self.target_rel)
    }
}

/// Why a trial stopped adding rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stopped {
    /// Every figure could have seen the target.
    Reached,
    /// One more pair of rounds would have passed the time limit.
    TimeLimit,
}

/// How the adding of rounds went, for the report and `--json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub goal: Goal,
    /// Rounds measured per side.
    pub rounds_per_side: usize,
    pub stopped: Stopped,
    /// Seconds the rounds took, settling included.
    pub elapsed_s: f64,
    /// Figures that could not have seen the target.
    pub inconclusive: usize,
}

/// What to do after a pair of rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    More,
    Stop(Stopped),
}

/// After a pair: more rounds while a figure is short of the target and another pair (at
/// `pair_s`, the pace so far) still ends within `max_time_s` (pure).
pub fn next(short: usize, elapsed_s: f64, pair_s: f64, max_time_s: f64) -> Next {
    if short == 0 {
        Next::Stop(Stopped::Reached)
    } else if elapsed_s + pair_s > max_time_s {
        Next::Stop(Stopped::TimeLimit)
    } else {
        Next::More
    }
}

/// Rounds per side at which two sides with these standard deviations would have a minimum
/// detectable difference of at most `target_abs`; at least `from`. `None` when it would take
/// more than [`MAX_ROUNDS`] (or the target is not positive while there is spread).
pub fn rounds_needed(sd_a: f64, sd_b: f64, target_abs: f64, from: usize) -> Option<usize> {
    let from = from.max(2);
    let fits = |n: usize| detectable_from(sd_a, n, sd_b, n).is_some_and(|d| d <= target_abs);
    if fits(from) {
        return Some(from);
    }
    if target_abs.is_nan() || target_abs <= 0.0 {
        return None;
    }
    // The normal approximation, (z(0.975) + z(0.80))^2 (sa^2 + sb^2) / d^2, is a lower bound
    // (t's quantiles exceed z's); count up from it.
    let z = 1.959_964 + 0.841_621;
    let low = (z * z * (sd_a.powi(2) + sd_b.powi(2)) / target_abs.powi(2)).ceil();
    if low > MAX_ROUNDS as f64 {
        return None;
    }
    (from.max(low as usize)..=MAX_ROUNDS).find(|&n| fits(n))
}

/// Sets each judged figure's target and turns a "no difference" that could not have seen it
/// into `Inconclusive`, with the rounds a side (and seconds, at `pair_s` per pair) it would
/// take. Significant differences keep their verdict: the target is about what a trial could
/// have missed.
pub fn judge(cs: &mut [Comparison], goal: &Goal, per_side: usize, pair_s: f64) {
    let target = goal.target_rel;
    for c in cs.iter_mut().filter(|c| goal.holds(c)) {
        c.target_rel = Some(target);
        if c.verdict == Verdict::NoDifference && goal.short_of(c) {
            c.verdict = Verdict::Inconclusive;
            let needed = rounds_needed(
                c.baseline.stddev,
                c.changed.stddev,
                target * c.baseline.mean.abs(),
                per_side,
            );
            c.rounds_needed = needed;
            c.more_time_s = needed.map(|n| n.saturating_sub(per_side) as f64 * pair_s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::{Direction, Unit};
    use crate::stats::MeanCi;

    fn goal(target: f64) -> Goal {
        Goal {
            target_rel: target,
            ..Goal::default_with(3)
        }
    }

    fn comparison(name: &str, a: &[f64], b: &[f64]) -> Comparison {
        let (ma, mb) = (MeanCi::of(a).unwrap(), MeanCi::of(b).unwrap());
        let d = super::super::compare::detectable(a, b);
        Comparison {
            name: name.into(),
            label: name.into(),
            unit: Unit::Nanoseconds,
            direction: Direction::LowerIsBetter,
            baseline_rounds: a.to_vec(),
            changed_rounds: b.to_vec(),
            baseline_samples: a.to_vec(),
            changed_samples: b.to_vec(),
            ratio: mb.ratio(&ma),
            p_value: crate::stats::welch_t_test(a, b).map(|w| w.p_value),
            verdict: Verdict::NoDifference,
            detectable_rel: d.filter(|_| ma.ci95_low > 0.0).map(|d| d / ma.mean),
            detectable: d,
            target_rel: None,
            rounds_needed: None,
            more_time_s: None,
            baseline: ma,
            changed: mb,
        }
    }

    #[test]
    fn the_next_step_looks_at_figures_short_of_the_target_and_the_clock() {
        assert_eq!(next(0, 10.0, 5.0, 120.0), Next::Stop(Stopped::Reached));
        // Reached wins even past the limit: nothing is left to add.
        assert_eq!(next(0, 200.0, 5.0, 120.0), Next::Stop(Stopped::Reached));
        assert_eq!(next(2, 10.0, 5.0, 120.0), Next::More);
        // A pair that would end exactly at the limit is run; one that would pass it is not.
        assert_eq!(next(1, 115.0, 5.0, 120.0), Next::More);
        assert_eq!(next(1, 115.1, 5.0, 120.0), Next::Stop(Stopped::TimeLimit));
        assert_eq!(next(1, 0.0, 5.0, 0.0), Next::Stop(Stopped::TimeLimit));
    }

    /// Spreads of 10 a side and a target of 10: (z + z)^2 x 200 / 100 = 15.7 by the normal
    /// approximation; with t's wider quantiles the answer is 17 (checked against
    /// `detectable_from` on both sides of it).
    #[test]
    fn rounds_needed_is_the_first_count_whose_net_is_fine_enough() {
        let n = rounds_needed(10.0, 10.0, 10.0, 3).unwrap();
        assert_eq!(n, 17);
        assert!(detectable_from(10.0, 17, 10.0, 17).unwrap() <= 10.0);
        assert!(detectable_from(10.0, 16, 10.0, 16).unwrap() > 10.0);
        // Half the target: about four times the rounds.
        let n2 = rounds_needed(10.0, 10.0, 5.0, 3).unwrap();
        assert!((4 * n - 6..=4 * n).contains(&n2), "{n2} vs 4 x {n}");
        // Already fine: the rounds there are.
        assert_eq!(rounds_needed(1.0, 1.0, 10.0, 5), Some(5));
        // No spread: the rounds there are, whatever the target.
        assert_eq!(rounds_needed(0.0, 0.0, 0.0, 3), Some(3));
        // Out of reach: none, not a huge number.
        assert_eq!(rounds_needed(100.0, 100.0, 0.1, 3), None);
        assert_eq!(rounds_needed(1.0, 1.0, 0.0, 3), None);
    }

    #[test]
    fn a_wide_no_difference_becomes_inconclusive_with_what_it_would_take() {
        // Baseline 100 ±~25, changed alike: could only have seen about ±60%.
        let mut cs = vec![comparison(
            "rtt_ns",
            &[80.0, 120.0, 100.0],
            &[90.0, 125.0, 95.0],
        )];
        assert!(cs[0].detectable_rel.unwrap() > 0.3);
        judge(&mut cs, &goal(0.10), 3, 8.0);
        let c = &cs[0];
        assert_eq!(c.verdict, Verdict::Inconclusive);
        assert_eq!(c.target_rel, Some(0.10));
        let n = c.rounds_needed.unwrap();
        assert!(n > 3);
        // By definition, not by rounds_needed again: the first count whose detectable effect
        // is within 10% of the baseline's mean of 100 (spreads 20 and 18.93 by hand).
        let (sa, sb) = (20.0, (716.666_666_666_7_f64 / 2.0).sqrt());
        assert!((c.baseline.stddev - sa).abs() < 1e-9 && (c.changed.stddev - sb).abs() < 1e-9);
        assert!(detectable_from(sa, n, sb, n).unwrap() <= 10.0);
        assert!(detectable_from(sa, n - 1, sb, n - 1).unwrap() > 10.0);
        assert_eq!(c.more_time_s, Some((n - 3) as f64 * 8.0));
    }

    #[test]
    fn a_fine_no_difference_stays_a_verdict_and_a_difference_keeps_its_own() {
        let mut cs = vec![
            comparison("quiet", &[100.0, 101.0, 99.0], &[100.5, 99.5, 100.0]),
            comparison("moved", &[100.0, 130.0, 70.0], &[10.0, 11.0, 9.0]),
        ];
        cs[1].verdict = Verdict::Better;
        judge(&mut cs, &goal(0.10), 3, 8.0);
        assert_eq!(cs[0].verdict, Verdict::NoDifference);
        assert!(cs[0].detectable_rel.unwrap() <= 0.10);
        assert_eq!((cs[0].rounds_needed, cs[0].more_time_s), (None, None));
        // Significant is significant: the target only qualifies a "no difference".
        assert_eq!(cs[1].verdict, Verdict::Better);
        assert!(
            goal(0.10).short_of(&cs[1]),
            "it still counts for adding rounds"
        );
    }

    #[test]
    fn costs_and_figures_from_zero_are_not_held_to_a_relative_target() {
        let mut cs = vec![
            comparison("cost.poll_cpu_s_per_s", &[0.1, 0.5, 0.3], &[0.2, 0.6, 0.1]),
            comparison("from_zero", &[0.0, 0.0, 0.0], &[0.0, 1.0, 2.0]),
        ];
        assert!(cs.iter().all(|c| !goal(0.10).short_of(c)));
        judge(&mut cs, &goal(0.10), 3, 8.0);
        assert!(cs.iter().all(|c| c.verdict == Verdict::NoDifference));
        assert!(cs.iter().all(|c| c.target_rel.is_none()));
    }

    /// A measured command's wall time (a few ms of `sh`, as noisy as the machine) is context:
    /// with `held`, only the metric decides how many rounds are run.
    #[test]
    fn only_the_held_figures_count() {
        let mut c = comparison("wall_s", &[10.0, 12.0, 11.0], &[11.0, 10.0, 12.0]);
        let g = Goal {
            held: Some("metric[".into()),
            ..goal(0.10)
        };
        assert!(!g.holds(&c) && !g.short_of(&c));
        c.name = "metric[value]".into();
        assert!(g.holds(&c) && g.short_of(&c));
        assert!(goal(0.10).short_of(&c));
    }
}
