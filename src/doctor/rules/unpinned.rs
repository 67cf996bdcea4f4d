//! Unpinned placement: bimodal, or on the slow side.
//!
//! Left to itself, the scheduler decides for every wakeup whether the woken task runs where it
//! last ran, where the waker runs, or on an idle CPU. For a pair that takes turns, the idle CPU
//! is usually chosen (it looks free), so an unpinned pair pays the cross-CPU price the pinned
//! runs measured; and because the choice flips with load, the batches of one run can fall into
//! two groups (field notes: ~11 us or ~43 us, and watching them moves them).
//!
//! Bimodality is found by splitting the sorted batch means where the within-group variance is
//! smallest (one-dimensional 2-means, exact for sorted data) and asking whether the two groups
//! are beyond noise apart by 1.5x or more, each holding at least 10% of the batches.

use super::remedies;
use super::rule::{Inputs, Rule, cost_effect, home_cpu, ns_ci, uncertainty};
use super::wakeup::{MIN_RATIO, primary_method};
use crate::doctor::findings::{Confidence, Datum, Evidence, Finding, Magnitude, Severity};
use crate::doctor::measurements::WakeupRun;
use crate::output::fmt_ns;
use crate::topology::PlacementClass;

pub struct UnpinnedPlacement;

/// At most this share of the unpinned run's samples with both ends on one CPU counts as the
/// scheduler spreading the pair.
const SPREAD_SHARE: f64 = 0.05;

/// The two groups of a bimodal sample: (low, high), when it is bimodal.
pub fn split_modes(values: &[f64]) -> Option<(Vec<f64>, Vec<f64>)> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let min_group = (n / 10).max(2);
    if n < 2 * min_group {
        return None;
    }
    let ss = |s: &[f64]| {
        let m = s.iter().sum::<f64>() / s.len() as f64;
        s.iter().map(|x| (x - m) * (x - m)).sum::<f64>()
    };
    let k = (min_group..=n - min_group)
        .min_by(|&a, &b| (ss(&v[..a]) + ss(&v[a..])).total_cmp(&(ss(&v[..b]) + ss(&v[b..]))))?;
    let (lo, hi) = (v[..k].to_vec(), v[k..].to_vec());
    cost_effect(&hi, &lo, 1.5).map(|_| (lo, hi))
}

impl Rule for UnpinnedPlacement {
    fn id(&self) -> &'static str {
        "unpinned-placement"
    }

    fn check(&self, i: Inputs<'_>) -> Vec<Finding> {
        let Some(method) = primary_method(&i) else {
            return vec![];
        };
        let (Some(same), Some(free)) = (
            i.m.wakeup(&method, PlacementClass::SameCpu),
            i.m.wakeup(&method, PlacementClass::Unpinned),
        ) else {
            return vec![];
        };
        let cross =
            i.m.wakeup
                .iter()
                .filter(|w| w.method == method && w.blocking)
                .filter(|w| !matches!(w.class, PlacementClass::SameCpu | PlacementClass::Unpinned))
                .max_by(|a, b| a.rtt_ns.mean.total_cmp(&b.rtt_ns.mean));
        let slow = cost_effect(&free.batch_means_ns, &same.batch_means_ns, MIN_RATIO);
        let modes = split_modes(&free.batch_means_ns);
        let near_cross = cross.is_some_and(|c| {
            (free.rtt_ns.mean - c.rtt_ns.mean).abs() < (free.rtt_ns.mean - same.rtt_ns.mean).abs()
        });
        // The two ends never shared a CPU: the spreading is measured, not inferred from where
        // the mean falls between the pinned figures (each from its own run, whose run-to-run
        // spread on a VM is far wider than its interval: the midpoint decided findings by noise).
        let spread = free.same_cpu_share.filter(|s| *s <= SPREAD_SHARE);
        if modes.is_none() && !(slow.is_some() && (near_cross || spread.is_some())) {
            return vec![];
        }
        let src = format!("measured: pingpong {method} unpinned");
        let mut ev = evidence(&method, same, free, cross, &src);
        let ratio = free.rtt_ns.mean / same.rtt_ns.mean;
        // Within noise of its threshold, the next run may not see it: the two modes' split, or
        // the slow side against one CPU.
        let uncertain = match &modes {
            Some((lo, hi)) => cost_effect(hi, lo, 1.5).and_then(|e| uncertainty(&e, 1.5, None)),
            None => slow.as_ref().and_then(|e| uncertainty(e, MIN_RATIO, None)),
        };
        let (title, text) = match &modes {
            Some((lo, hi)) => {
                let (ml, mh) = (mean(lo), mean(hi));
                ev.push(Evidence::new(
                    "batches in each mode",
                    Datum::versus(
                        "ns",
                        (&format!("fast mode, {} batches", lo.len()), ml),
                        (&format!("slow mode, {} batches", hi.len()), mh),
                    ),
                    src.clone(),
                ));
                (
                    "Unpinned placement is bimodal: the scheduler flips between co-locating and spreading the pair".to_string(),
                    format!(
                        "an unpinned round trip takes either ~{} or ~{} ({:.1}x apart), {} on average against {} pinned to one CPU",
                        fmt_ns(ml), fmt_ns(mh), mh / ml, fmt_ns(free.rtt_ns.mean), fmt_ns(same.rtt_ns.mean)
                    ),
                )
            }
            None => (
                "Unpinned placement lands on the slow side: the scheduler spreads the pair"
                    .to_string(),
                format!(
                    "an unpinned round trip takes {} against {} pinned to one CPU ({ratio:.1}x), {}",
                    fmt_ns(free.rtt_ns.mean),
                    fmt_ns(same.rtt_ns.mean),
                    match spread {
                        Some(share) if !near_cross => format!(
                            "its two ends sharing a CPU {:.0}% of the time",
                            share * 100.0
                        ),
                        _ => "close to the cross-CPU figure".to_string(),
                    }
                ),
            ),
        };
        let cpu = home_cpu(same, i.facts);
        vec![Finding {
            id: self.id().into(),
            title,
            severity: Severity::of_ratio(ratio.max(1.0)),
            magnitude: Magnitude {
                text,
                ratio: Some(ratio.max(1.0)),
                worse: Some(free.rtt_ns.mean),
                better: Some(same.rtt_ns.mean),
                unit: "ns".into(),
            },
            evidence: ev,
            mechanism: "When one end wakes the other, the scheduler looks for an idle CPU to run \
                the woken task and usually finds the other one, because the pair takes turns and \
                leaves it idle; the pair then pays the cross-CPU wakeup on every round trip. \
                Whether it co-locates instead depends on load at that instant, so results flip \
                between runs and change when something else (a monitoring tool) runs."
                .into(),
            remedies: remedies::colocate(cpu, i.facts, i.m.app_watch.as_ref()),
            confidence: if near_cross || spread.is_some() || modes.is_some() {
                Confidence::High
            } else {
                Confidence::Medium
            },
            uncertain,
        }]
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// The unpinned, same-CPU and slowest pinned round trips, the share of time on one CPU and the
/// migrations.
fn evidence(
    method: &str,
    same: &WakeupRun,
    free: &WakeupRun,
    cross: Option<&WakeupRun>,
    src: &str,
) -> Vec<Evidence> {
    let mut ev = vec![
        Evidence::new("unpinned round trip", ns_ci(&free.rtt_ns), src),
        Evidence::new(
            "same-CPU round trip",
            ns_ci(&same.rtt_ns),
            format!("measured: pingpong {method} same-cpu"),
        ),
    ];
    if let Some(c) = cross {
        ev.push(Evidence::new(
            format!("pinned {} round trip", c.class),
            ns_ci(&c.rtt_ns),
            format!("measured: pingpong {method} {}", c.class),
        ));
    }
    if let Some(s) = free.same_cpu_share {
        ev.push(Evidence::new(
            "time both ends shared a CPU",
            Datum::share(s),
            src,
        ));
    }
    if let Some(r) = free.migrations_per_s {
        ev.push(Evidence::new(
            "migrations per second (both ends)",
            Datum::number(r, "per_s"),
            src,
        ));
    }
    ev
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    #[test]
    fn two_clusters_are_bimodal_one_is_not() {
        let two = [samples(11e3, 0.02, 10), samples(43e3, 0.02, 10)].concat();
        let (lo, hi) = split_modes(&two).unwrap();
        assert_eq!((lo.len(), hi.len()), (10, 10));
        assert!(split_modes(&samples(11e3, 0.05, 20)).is_none());
        assert!(split_modes(&[1.0, 2.0]).is_none());
    }

    #[test]
    fn bimodal_unpinned_run_is_reported() {
        let (facts, m) = everything_wrong();
        let f = UnpinnedPlacement.check(Inputs {
            facts: &facts,
            m: &m,
        });
        assert_eq!(f.len(), 1);
        assert!(f[0].title.contains("bimodal"));
    }

    #[test]
    fn unpinned_on_the_slow_side_is_reported() {
        let (facts, mut m) = everything_wrong();
        let w = m
            .wakeup
            .iter_mut()
            .find(|w| w.class == PlacementClass::Unpinned)
            .unwrap();
        w.batch_means_ns = samples(40e3, 0.02, 20);
        w.rtt_ns = mci(&w.batch_means_ns);
        let f = UnpinnedPlacement.check(Inputs {
            facts: &facts,
            m: &m,
        });
        assert!(f[0].title.contains("slow side"), "{}", f[0].title);
    }

    // Written for the mutation run (docs/testing.md): literal inputs, answers worked by hand.

    #[test]
    fn the_split_falls_between_the_clusters_and_a_mode_needs_a_tenth_of_the_batches() {
        let six_fourteen = [samples(10e3, 0.02, 6), samples(40e3, 0.02, 14)].concat();
        let (lo, hi) = split_modes(&six_fourteen).unwrap();
        assert_eq!((lo.len(), hi.len()), (6, 14));
        assert!(lo.iter().all(|v| *v < 11e3) && hi.iter().all(|v| *v > 39e3));
        // Four batches, two a side: the smallest sample that can be bimodal.
        let (lo, hi) = split_modes(&[10.0, 10.1, 40.0, 40.4]).unwrap();
        assert_eq!((lo, hi), (vec![10.0, 10.1], vec![40.0, 40.4]));
        // The split minimises the within-group sums of squares (worked by hand): 978.7 at
        // 5 | 3, against 1607.5 at 4 | 4 and 2087.5 at 3 | 5.
        let (lo, hi) = split_modes(&[2.0, 3.0, 11.0, 27.0, 32.0, 60.0, 65.0, 80.0]).unwrap();
        assert_eq!((lo.len(), hi.len()), (5, 3));
        assert!(split_modes(&[10.0]).is_none());
        assert!(split_modes(&[10.0, f64::NAN, 40.0, f64::INFINITY]).is_none());
        // 30 batches: 3 slow ones are a mode (10%), 2 are not.
        let with_slow = |n: usize| {
            let mut v = samples(10e3, 0.02, 30 - n);
            v.extend(samples(50e3, 0.02, n));
            split_modes(&v).map(|(lo, hi)| (lo.len(), hi.len()))
        };
        assert_eq!(with_slow(3), Some((27, 3)));
        assert_eq!(with_slow(2), None);
    }

    /// Same CPU 10 us, pinned shared LLC 40 us, unpinned with these batch means, plus `extra`.
    fn judged(unpinned: (f64, f64), extra: Vec<WakeupRun>) -> Vec<Finding> {
        let free = exact_wake(
            "pipe",
            true,
            PlacementClass::Unpinned,
            "",
            unpinned,
            None,
            None,
        );
        judged_among(free, extra)
    }

    /// [`judged`] with the unpinned run given whole.
    fn judged_with(free: WakeupRun) -> Vec<Finding> {
        judged_among(free, vec![])
    }

    fn judged_among(free: WakeupRun, extra: Vec<WakeupRun>) -> Vec<Finding> {
        use PlacementClass::*;
        let (facts, mut m) = quiet_machine();
        m.wakeup = vec![
            exact_wake("pipe", true, SameCpu, "0:0", (9e3, 11e3), None, None),
            exact_wake("pipe", true, SharedLlc, "0:1", (39e3, 41e3), None, None),
            free,
        ];
        m.wakeup.extend(extra);
        UnpinnedPlacement.check(Inputs {
            facts: &facts,
            m: &m,
        })
    }

    use crate::doctor::measurements::WakeupRun;

    #[test]
    fn slow_unpinned_is_reported_when_nearer_the_pinned_cross_cpu_figure() {
        // 26 us: 14 us from the cross-CPU 40, 16 from the same-CPU 10.
        let f = judged((25e3, 27e3), vec![]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].id, "unpinned-placement");
        assert_eq!(
            f[0].magnitude.text,
            "an unpinned round trip takes 26.00 us against 10.00 us pinned to one CPU (2.6x), \
             close to the cross-CPU figure"
        );
        assert!((f[0].magnitude.ratio.unwrap() - 2.6).abs() < 1e-12);
        assert_eq!(f[0].severity, Severity::Medium);
        assert_eq!(f[0].confidence, Confidence::High);
        assert!(
            f[0].evidence
                .iter()
                .any(|e| e.label == "pinned shared-llc round trip")
        );
        // 25 us: halfway, as near one as the other: no finding, unless where the two ends ran
        // was measured and says the scheduler kept them apart.
        assert!(judged((24e3, 26e3), vec![]).is_empty());
        let halfway = |share: Option<f64>| {
            let mut w = exact_wake(
                "pipe",
                true,
                PlacementClass::Unpinned,
                "",
                (24e3, 26e3),
                None,
                None,
            );
            w.same_cpu_share = share;
            judged_with(w)
        };
        let f = halfway(Some(0.0));
        assert_eq!(f.len(), 1);
        assert!(
            f[0].magnitude
                .text
                .ends_with("(2.5x), its two ends sharing a CPU 0% of the time"),
            "{}",
            f[0].magnitude.text
        );
        assert_eq!(f[0].confidence, Confidence::High);
        assert!(halfway(Some(0.05)).len() == 1);
        assert!(
            halfway(Some(0.3)).is_empty(),
            "co-located a third of the time"
        );
        assert!(
            halfway(None).is_empty(),
            "not recorded is not 'never shared'"
        );
        // The cross-CPU figure is the slowest blocking pinned run of the method, not another
        // method's, a spinning or the unpinned run.
        let f = judged(
            (25e3, 27e3),
            vec![
                exact_wake(
                    "eventfd",
                    true,
                    PlacementClass::SharedLlc,
                    "0:1",
                    (1e5, 1e5),
                    None,
                    None,
                ),
                exact_wake(
                    "spin",
                    false,
                    PlacementClass::CrossNode,
                    "0:8",
                    (1e5, 1e5),
                    None,
                    None,
                ),
            ],
        );
        assert_eq!(f.len(), 1);
    }

    #[test]
    fn bimodal_without_a_pinned_cross_run_is_reported_with_both_modes() {
        let (facts, mut m) = quiet_machine();
        // Same CPU 5 us; ten unpinned batches at 11 us and ten at 43 us: 27 us on average.
        let mut free = exact_wake(
            "pipe",
            true,
            PlacementClass::Unpinned,
            "",
            (1.0, 1.0),
            None,
            None,
        );
        free.batch_means_ns = [[10.9e3, 11.1e3].repeat(5), [42.9e3, 43.1e3].repeat(5)].concat();
        free.rtt_ns = mci(&free.batch_means_ns);
        m.wakeup = vec![
            exact_wake(
                "pipe",
                true,
                PlacementClass::SameCpu,
                "0:0",
                (4e3, 6e3),
                None,
                None,
            ),
            free,
        ];
        let f = UnpinnedPlacement.check(Inputs {
            facts: &facts,
            m: &m,
        });
        assert_eq!(f.len(), 1);
        assert_eq!(
            f[0].magnitude.text,
            "an unpinned round trip takes either ~11.00 us or ~43.00 us (3.9x apart), 27.00 us \
             on average against 5.00 us pinned to one CPU"
        );
        assert!((f[0].magnitude.ratio.unwrap() - 5.4).abs() < 1e-12);
        assert_eq!(f[0].severity, Severity::High);
        assert_eq!(f[0].confidence, Confidence::High);
        let v = f[0]
            .evidence
            .iter()
            .find(|e| e.label == "batches in each mode")
            .unwrap()
            .versus
            .clone()
            .unwrap();
        assert_eq!(
            (v.a.label.as_str(), v.a.value),
            ("fast mode, 10 batches", 11e3)
        );
        assert_eq!(
            (v.b.label.as_str(), v.b.value),
            ("slow mode, 10 batches", 43e3)
        );
    }

    #[test]
    fn the_split_with_the_smallest_sums_of_squares_wins_whichever_comes_first() {
        // Within-group sums of squares, worked by hand: 1334.0 at 2 | 6, then 2025.9, 2307.5,
        // 2761.9 and 4227.3 as the cut moves right.
        let v = [11.0, 14.0, 54.0, 58.0, 66.0, 83.0, 87.0, 93.0];
        let (lo, hi) = split_modes(&v).unwrap();
        assert_eq!((lo, hi.len()), (vec![11.0, 14.0], 6));
    }
}
