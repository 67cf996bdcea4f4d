//! A real application's throughput depends on placement.
//!
//! The wakeup figures explain; the application figures are what the user pays. When the doctor
//! ran a preset (`--with pgbench,http`), the placement that loses the most transactions per
//! second against the best one becomes a finding of its own, measured on the real programs
//! (field notes A and B: pgbench 3.6x, Apache up to 1.6x).

use super::{Datum, Inputs, Rule, rate_ci, rate_effect, remedies};
use crate::doctor::findings::{Confidence, Evidence, Finding, Severity};
use crate::doctor::measurements::PresetRun;
use crate::topology::PlacementClass;
use std::collections::BTreeMap;

pub const MIN_RATIO: f64 = 1.2;

pub struct AppPlacement;

impl Rule for AppPlacement {
    fn id(&self) -> &'static str {
        "app-placement"
    }

    fn check(&self, i: Inputs<'_>) -> Vec<Finding> {
        let mut by_workload: BTreeMap<&str, Vec<&PresetRun>> = BTreeMap::new();
        for p in &i.m.presets {
            by_workload.entry(&p.workload).or_default().push(p);
        }
        by_workload
            .values()
            .filter_map(|runs| finding(self.id(), runs, &i))
            .collect()
    }
}

fn finding(id: &str, runs: &[&PresetRun], i: &Inputs<'_>) -> Option<Finding> {
    let best = runs
        .iter()
        .max_by(|a, b| a.per_s.mean.total_cmp(&b.per_s.mean))?;
    let (worst, eff) = runs
        .iter()
        .filter_map(|w| {
            Some((
                *w,
                rate_effect(&w.samples_per_s, &best.samples_per_s, MIN_RATIO)?,
            ))
        })
        .max_by(|a, b| a.1.ratio.total_cmp(&b.1.ratio))?;
    let src = |p: &PresetRun| format!("measured: pair --preset {} {}", p.preset, p.placement);
    let mut evidence: Vec<Evidence> = runs
        .iter()
        .map(|p| {
            Evidence::new(
                format!("{} ({})", p.workload, p.placement),
                rate_ci(&p.per_s),
                src(p),
            )
        })
        .collect();
    // Only the counters that differ between the two placements say something.
    for (k, v) in &worst.per_transaction {
        let b = best.per_transaction.get(k).copied().unwrap_or(0.0);
        if (v - b).abs() < 0.2_f64.max(0.25 * v.abs().max(b.abs())) {
            continue;
        }
        evidence.push(Evidence::new(
            format!("{k} per transaction"),
            Datum::versus(
                "per_transaction",
                (&worst.placement.to_string(), *v),
                (&best.placement.to_string(), b),
            ),
            src(worst),
        ));
    }
    let co_located = best.class == Some(PlacementClass::SameCpu);
    let cpu = i.facts.allowed_cpus.first().unwrap_or(0);
    Some(Finding {
        id: id.into(),
        title: format!(
            "{} runs {:.1}x faster at {} than at {}",
            worst.workload, eff.ratio, best.placement, worst.placement
        ),
        severity: Severity::of_ratio(eff.ratio),
        magnitude: eff.magnitude(
            format!(
                "{}: {} transactions/s at {} against {} at {}",
                worst.workload,
                super::thousands(eff.better.mean),
                best.placement,
                super::thousands(eff.worse.mean),
                worst.placement
            ),
            "per_s",
        ),
        evidence,
        mechanism: if co_located {
            "Each transaction is a request and a reply between client and server; on one CPU \
             each is a local context switch, across CPUs each is a cross-CPU wakeup, with the \
             cost the wakeup finding measures."
                .into()
        } else {
            "The client and server each need CPU time at once, so giving them separate CPUs wins \
             more than the cross-CPU wakeups cost."
                .into()
        },
        remedies: if co_located {
            remedies::colocate(cpu, i.facts, i.m.app_watch.as_ref())
        } else {
            vec![crate::doctor::findings::Remedy::new(
                format!(
                    "taskset -c <server cpus> <server>; taskset -c <other cpus> <client>   ({})",
                    best.placement
                ),
                "Gives each side its own CPU, as in the fastest placement measured.",
                "Wakeups cross CPUs; latency per request can be higher.",
            )]
        },
        confidence: Confidence::High,
        uncertain: None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    #[test]
    fn pgbench_same_cpu_wins() {
        let (facts, m) = everything_wrong();
        let f = AppPlacement.check(Inputs {
            facts: &facts,
            m: &m,
        });
        assert_eq!(f.len(), 1);
        assert!((f[0].magnitude.ratio.unwrap() - 4.0).abs() < 0.01);
        assert!(f[0].title.contains("same-cpu"));
    }
}
