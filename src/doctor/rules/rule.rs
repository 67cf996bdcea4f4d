//! What every rule shares: the [`Rule`] trait and its [`Inputs`], the measured [`Effect`]
//! (beyond noise by [`crate::compare`]'s criterion and at least a rule's minimum size) and the
//! note on its uncertainty, and the figures a rule states as data.
//!
//! Every rule file imports from here; nothing here imports a rule, and the list of rules
//! (`rules::all`) stays in `mod.rs`, so no rule imports the file that lists it.

use crate::compare::{Separation, separation};
use crate::doctor::findings::{Datum, Finding};
use crate::doctor::measurements::{Facts, Measurements};
use crate::pingpong::summary::WakeupRun;
use crate::stats::MeanCi;

/// What every rule reads.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    pub facts: &'a Facts,
    pub m: &'a Measurements,
}

/// One family of causes.
pub trait Rule {
    /// Identifier of the finding it produces.
    fn id(&self) -> &'static str;
    /// Findings for these inputs; empty when the effect is absent or within noise.
    fn check(&self, input: Inputs<'_>) -> Vec<Finding>;
}

/// A measured effect: `worse` against `better`, beyond noise and at least `min_ratio` apart.
#[derive(Clone, Debug)]
pub struct Effect {
    pub worse: MeanCi,
    pub better: MeanCi,
    /// worse.mean / better.mean for costs, better.mean / worse.mean for rates: always >= 1.
    pub ratio: f64,
    pub p_value: f64,
}

impl Effect {
    /// The finding's magnitude: this effect's two means and ratio, with the words for it.
    pub fn magnitude(&self, text: String, unit: &str) -> crate::doctor::findings::Magnitude {
        crate::doctor::findings::Magnitude {
            text,
            ratio: Some(self.ratio),
            worse: Some(self.worse.mean),
            better: Some(self.better.mean),
            unit: unit.into(),
        }
    }
}

/// Why a finding may not come out the same in the next run (issue 22, "the same answer twice"),
/// or `None` (pure): the effect's 95% intervals reach below the rule's threshold (the ratio of
/// their nearer ends is under `min_ratio`), or `placement` says the unpinned pair moved while
/// it was measured.
pub fn uncertainty(eff: &Effect, min_ratio: f64, placement: Option<String>) -> Option<String> {
    let (big, small) = if eff.worse.mean >= eff.better.mean {
        (&eff.worse, &eff.better)
    } else {
        (&eff.better, &eff.worse)
    };
    let nearest = big.ci95_low / small.ci95_high;
    let mut why = Vec::new();
    // A NaN ratio (a zero interval end) counts as within noise.
    if nearest.is_nan() || nearest < min_ratio {
        why.push(format!(
            "the evidence is within noise of the rule's {min_ratio}x: the 95% intervals' nearer \
             ends are only {nearest:.2}x apart"
        ));
    }
    why.extend(placement);
    (!why.is_empty()).then(|| why.join("; "))
}

/// `worse` costs more than `better` (times, costs): beyond noise and by `min_ratio` or more.
pub fn cost_effect(worse: &[f64], better: &[f64], min_ratio: f64) -> Option<Effect> {
    let s: Separation = separation(worse, better)?;
    let ratio = s.a.mean / s.b.mean;
    (s.beyond_noise && s.b.mean > 0.0 && ratio >= min_ratio).then_some(Effect {
        ratio,
        p_value: s.p_value,
        worse: s.a,
        better: s.b,
    })
}

/// `worse` achieves less than `better` (rates, shares): beyond noise and by `min_ratio` or more.
pub fn rate_effect(worse: &[f64], better: &[f64], min_ratio: f64) -> Option<Effect> {
    let s = separation(worse, better)?;
    let ratio = s.b.mean / s.a.mean;
    (s.beyond_noise && s.a.mean > 0.0 && ratio >= min_ratio).then_some(Effect {
        ratio,
        p_value: s.p_value,
        worse: s.a,
        better: s.b,
    })
}

/// Like [`rate_effect`], for a rule whose evidence can straddle "beyond noise": Welch's test
/// alone (p < [`crate::compare::ALPHA`]) admits the effect, and the flag says whether it is also
/// clear of noise by the stricter test (the two 95% intervals apart). Overlapping intervals can
/// still differ significantly; a rule that reports on the weaker test states the uncertainty
/// (lower confidence, the p-value) instead of appearing in one run and not the next.
pub fn rate_effect_banded(worse: &[f64], better: &[f64], min_ratio: f64) -> Option<(Effect, bool)> {
    let s = separation(worse, better)?;
    let ratio = s.b.mean / s.a.mean;
    let admitted = s.p_value < crate::compare::ALPHA && s.a.mean > 0.0 && ratio >= min_ratio;
    admitted.then_some((
        Effect {
            ratio,
            p_value: s.p_value,
            worse: s.a,
            better: s.b,
        },
        s.beyond_noise,
    ))
}

/// A round trip in nanoseconds with its interval.
/// The CPU a remedy keeps both ends on: the pinned CPU of the run that measured the fast
/// placement, else the first CPU this process may use (never a CPU outside its cpuset).
pub fn home_cpu(run: &WakeupRun, facts: &Facts) -> u32 {
    run.pinned_cpu()
        .or_else(|| facts.allowed_cpus.first())
        .unwrap_or(0)
}

pub fn ns_ci(m: &MeanCi) -> Datum {
    Datum::mean_ci(m, "ns")
}

/// A rate per second with its interval.
pub fn rate_ci(m: &MeanCi) -> Datum {
    Datum::mean_ci(m, "per_s")
}

/// A dimensionless figure (a share or a ratio) with its interval.
pub fn plain_ci(m: &MeanCi) -> Datum {
    Datum::mean_ci(m, "ratio")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::thousands;

    #[test]
    fn a_remedy_keeps_both_ends_on_the_pinned_cpu_or_a_usable_one() {
        use super::super::fixtures::{quiet_machine, wake};
        use crate::cpulist::CpuSet;
        use crate::topology::PlacementClass;
        let (mut facts, _) = quiet_machine();
        facts.allowed_cpus = CpuSet::from_iter_u32([4, 5]);
        let mut run = wake("pipe", true, PlacementClass::SameCpu, "5:5", 5000.0, 0.0);
        assert_eq!(home_cpu(&run, &facts), 5);
        // Half-pinned either way: the pinned end's CPU, not the free end's `*`.
        for (cpus, cpu) in [("1:*", 1), ("*:3", 3)] {
            run.cpus = Some(cpus.into());
            assert_eq!((run.pinned_cpu(), home_cpu(&run, &facts)), (Some(cpu), cpu));
        }
        // Neither end pinned: the first CPU the cpuset allows, never CPU 0 outside it.
        run.cpus = None;
        assert_eq!((run.pinned_cpu(), home_cpu(&run, &facts)), (None, 4));
        run.cpus = Some("*:*".into());
        assert_eq!(home_cpu(&run, &facts), 4);
    }

    #[test]
    fn effects_need_noise_and_size() {
        let fast = [5000.0, 5010.0, 4990.0, 5005.0, 4995.0];
        let slow = [42000.0, 42100.0, 41900.0, 42050.0, 41950.0];
        let e = cost_effect(&slow, &fast, 1.25).unwrap();
        assert!((e.ratio - 8.4).abs() < 0.01);
        assert!(
            cost_effect(&fast, &slow, 1.0).is_none(),
            "faster is not a cost"
        );
        let nearly = [5100.0, 5110.0, 5090.0, 5105.0, 5095.0];
        assert!(
            cost_effect(&nearly, &fast, 1.25).is_none(),
            "2% is below the minimum size"
        );
        assert!(rate_effect(&[100.0, 101.0, 99.0], &[200.0, 201.0, 199.0], 1.5).is_some());
        assert_eq!(thousands(66012.4), "66,012");
        assert_eq!(thousands(999.0), "999");
    }

    // Written for the mutation run (docs/testing.md): literal inputs, answers worked by hand.

    /// Samples whose 95% intervals are far apart (no spread: Welch's p is 0).
    const TEN: [f64; 3] = [10.0, 10.0, 10.0];
    const ZERO: [f64; 3] = [0.0, 0.0, 0.0];
    /// Means 55 and 175 (3.2x) with so much spread that Welch's p is about 0.2.
    const NOISY_LOW: [f64; 4] = [10.0, 100.0, 10.0, 100.0];
    const NOISY_HIGH: [f64; 4] = [50.0, 300.0, 50.0, 300.0];

    #[test]
    fn a_rate_effect_is_the_better_rate_over_the_worse_and_needs_noise_and_size() {
        let (low, high) = ([100.0, 101.0, 99.0], [200.0, 201.0, 199.0]);
        let e = rate_effect(&low, &high, 1.5).unwrap();
        assert_eq!((e.worse.mean, e.better.mean, e.ratio), (100.0, 200.0, 2.0));
        // Exactly at the minimum size is an effect; just above it is not.
        assert!(rate_effect(&low, &high, 2.0).is_some());
        assert!(rate_effect(&low, &high, 2.0001).is_none());
        assert!(rate_effect(&high, &low, 1.0).is_none(), "more is not worse");
        assert!(
            rate_effect(&NOISY_LOW, &NOISY_HIGH, 1.5).is_none(),
            "3.2x within noise is no effect"
        );
        // The same for costs, the other way round.
        let e = cost_effect(&high, &low, 2.0).unwrap();
        assert_eq!((e.worse.mean, e.better.mean, e.ratio), (200.0, 100.0, 2.0));
        assert!(cost_effect(&high, &low, 2.0001).is_none());
        assert!(cost_effect(&NOISY_HIGH, &NOISY_LOW, 1.5).is_none());
    }

    #[test]
    fn a_zero_baseline_is_no_ratio() {
        // Beyond noise (p = 0, intervals apart), but the ratio would be infinite.
        assert!(separation(&TEN, &ZERO).unwrap().beyond_noise);
        assert!(cost_effect(&TEN, &ZERO, 1.0).is_none());
        assert!(rate_effect(&ZERO, &TEN, 1.0).is_none());
        assert!(rate_effect_banded(&ZERO, &TEN, 1.0).is_none());
    }

    #[test]
    fn a_banded_rate_effect_admits_on_welch_alone_and_says_whether_the_intervals_part() {
        // 0..9 against 3.5..12.5: Welch's p is about 0.02 but the 95% intervals overlap.
        let low: Vec<f64> = (0..10).map(f64::from).collect();
        let high: Vec<f64> = low.iter().map(|v| v + 3.5).collect();
        let (e, clear) = rate_effect_banded(&low, &high, 1.5).unwrap();
        assert!(!clear, "overlapping intervals are not clear of noise");
        assert_eq!((e.worse.mean, e.better.mean), (4.5, 8.0));
        assert!((e.ratio - 16.0 / 9.0).abs() < 1e-12, "{}", e.ratio);
        assert!(e.p_value < crate::compare::ALPHA, "{}", e.p_value);
        assert!(
            rate_effect_banded(&low, &high, 1.8).is_none(),
            "16/9 is under 1.8"
        );
        let (e, clear) =
            rate_effect_banded(&[100.0, 101.0, 99.0], &[200.0, 201.0, 199.0], 2.0).unwrap();
        assert!(clear);
        assert_eq!(e.ratio, 2.0);
        assert!(
            rate_effect_banded(&[100.0, 101.0, 99.0], &[200.0, 201.0, 199.0], 2.0001).is_none()
        );
        assert!(
            rate_effect_banded(&high, &low, 1.0).is_none(),
            "more is not worse"
        );
        assert!(rate_effect_banded(&NOISY_LOW, &NOISY_HIGH, 1.5).is_none());
    }

    /// A hand-set interval: no samples give these exact ends.
    fn interval(mean: f64, lo: f64, hi: f64) -> MeanCi {
        MeanCi {
            mean,
            ci95_low: lo,
            ci95_high: hi,
            ci95_half_width: (hi - lo) / 2.0,
            stddev: 0.0,
            n: 10,
        }
    }

    fn effect(worse: MeanCi, better: MeanCi) -> Effect {
        Effect {
            ratio: worse.mean / better.mean,
            p_value: 0.001,
            worse,
            better,
        }
    }

    #[test]
    fn an_effect_is_uncertain_when_its_intervals_reach_below_the_threshold() {
        // Nearer ends 27 and 22: 1.227x apart.
        let e = effect(interval(30.0, 27.0, 33.0), interval(20.0, 18.0, 22.0));
        assert_eq!(uncertainty(&e, 1.2, None), None);
        assert_eq!(
            uncertainty(&e, 1.25, None).as_deref(),
            Some(
                "the evidence is within noise of the rule's 1.25x: the 95% intervals' nearer \
                 ends are only 1.23x apart"
            )
        );
        // A rate effect (the worse side lower) reads the same ends.
        let r = effect(interval(20.0, 18.0, 22.0), interval(30.0, 27.0, 33.0));
        assert_eq!(uncertainty(&r, 1.25, None), uncertainty(&e, 1.25, None));
        assert_eq!(uncertainty(&r, 1.2, None), None);
        // Nearer ends exactly 1.5x apart meet a 1.5x threshold.
        let exact = effect(interval(40.0, 30.0, 50.0), interval(15.0, 10.0, 20.0));
        assert_eq!(uncertainty(&exact, 1.5, None), None);
        assert!(uncertainty(&exact, 1.5001, None).is_some());
        // A moved pair is said alone, or after the noise.
        let moved = || Some("the pair moved".to_string());
        assert_eq!(
            uncertainty(&exact, 1.5, moved()).as_deref(),
            Some("the pair moved")
        );
        assert_eq!(
            uncertainty(&e, 1.25, moved()).as_deref(),
            Some(
                "the evidence is within noise of the rule's 1.25x: the 95% intervals' nearer \
                 ends are only 1.23x apart; the pair moved"
            )
        );
        // Intervals ending at zero give no ratio: within noise.
        let zero = effect(interval(1.0, 0.0, 2.0), interval(0.5, -1.0, 0.0));
        assert!(
            uncertainty(&zero, 1.5, None)
                .unwrap()
                .contains("only NaNx apart")
        );
    }
}
