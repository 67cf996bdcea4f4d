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

use super::wakeup::{MIN_RATIO, primary_method};
use super::{Inputs, Rule, cost_effect, ns_ci, remedies};
use crate::doctor::findings::{Confidence, Datum, Evidence, Finding, Magnitude, Severity};
use crate::output::fmt_ns;
use crate::topology::PlacementClass;

pub struct UnpinnedPlacement;

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
        if modes.is_none() && !(slow.is_some() && near_cross) {
            return vec![];
        }
        let src = format!("measured: pingpong {method} unpinned");
        let mut ev = vec![
            Evidence::new("unpinned round trip", ns_ci(&free.rtt_ns), src.clone()),
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
                src.clone(),
            ));
        }
        if let Some(r) = free.migrations_per_s {
            ev.push(Evidence::new(
                "migrations per second (both ends)",
                Datum::number(r, "per_s"),
                src.clone(),
            ));
        }
        let ratio = free.rtt_ns.mean / same.rtt_ns.mean;
        // Within noise of its threshold, the next run may not see it: the two modes' split, or
        // the slow side against one CPU.
        let uncertain = match &modes {
            Some((lo, hi)) => {
                cost_effect(hi, lo, 1.5).and_then(|e| super::uncertainty(&e, 1.5, None))
            }
            None => slow
                .as_ref()
                .and_then(|e| super::uncertainty(e, MIN_RATIO, None)),
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
                    "an unpinned round trip takes {} against {} pinned to one CPU ({ratio:.1}x), close to the cross-CPU figure",
                    fmt_ns(free.rtt_ns.mean),
                    fmt_ns(same.rtt_ns.mean)
                ),
            ),
        };
        let cpu = same
            .cpus
            .as_deref()
            .and_then(|c| c.split(':').next()?.parse().ok())
            .unwrap_or(0);
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
            confidence: if near_cross || modes.is_some() {
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
}
