//! A real application's throughput depends on placement.
//!
//! The wakeup figures explain; the application figures are what the user pays. When the doctor
//! ran a preset (`--with pgbench,http`), the placement that loses the most transactions per
//! second against the best one becomes a finding of its own, measured on the real programs
//! (field notes A and B: pgbench 3.6x, Apache up to 1.6x).

use super::remedies;
use super::rule::{Inputs, Rule, rate_ci, rate_effect};
use crate::doctor::findings::{Confidence, Datum, Evidence, Finding, Severity};
use crate::doctor::measurements::PresetRun;
use crate::topology::PlacementClass;
use crate::units::thousands;
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
        // A counter read in one run only compares with nothing: never with a zero.
        let Some(b) = best.per_transaction.get(k).copied() else {
            continue;
        };
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
                thousands(eff.better.mean),
                best.placement,
                thousands(eff.worse.mean),
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

    // Written for the mutation run (docs/testing.md): literal inputs, answers worked by hand.

    /// pgbench at two placements on the quiet machine, the worse one first, with these
    /// counters per transaction: `(name, at the worse placement, at the better one)`.
    fn judged(
        worse: PresetRun,
        better: PresetRun,
        counters: &[(&str, f64, Option<f64>)],
    ) -> Vec<Finding> {
        let (facts, mut m) = quiet_machine();
        let (mut worse, mut better) = (worse, better);
        for &(k, w, b) in counters {
            worse.per_transaction.insert(k.into(), w);
            if let Some(b) = b {
                better.per_transaction.insert(k.into(), b);
            }
        }
        m.presets = vec![worse, better];
        AppPlacement.check(Inputs {
            facts: &facts,
            m: &m,
        })
    }

    #[test]
    fn the_finding_names_the_placements_its_ratio_and_pins_both_ends_together() {
        // Three samples at 98%, 99% and 100% of the rate: means 65,340 and 16,335 (4.0x).
        let f = judged(
            preset("shared-llc", PlacementClass::SharedLlc, 16.5e3),
            preset("same-cpu", PlacementClass::SameCpu, 66e3),
            &[],
        );
        assert_eq!(f.len(), 1);
        let f = &f[0];
        assert_eq!(f.id, "app-placement");
        assert_eq!(
            f.title,
            "pgbench SELECT 1 runs 4.0x faster at same-cpu than at shared-llc"
        );
        assert_eq!(
            f.magnitude.text,
            "pgbench SELECT 1: 65,340 transactions/s at same-cpu against 16,335 at shared-llc"
        );
        assert_eq!(f.severity, Severity::High);
        let labels: Vec<&str> = f.evidence.iter().map(|e| e.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "pgbench SELECT 1 (shared-llc)",
                "pgbench SELECT 1 (same-cpu)"
            ]
        );
        assert!(
            f.mechanism
                .starts_with("Each transaction is a request and a reply")
        );
        assert_eq!(
            f.remedies[0].command,
            "taskset -c 0 <server command>; taskset -c 0 <client command>"
        );
    }

    #[test]
    fn when_separate_cpus_win_the_remedy_gives_each_side_its_own() {
        let f = judged(
            preset("same-cpu", PlacementClass::SameCpu, 16.5e3),
            preset("shared-llc", PlacementClass::SharedLlc, 66e3),
            &[],
        );
        assert_eq!(
            f[0].title,
            "pgbench SELECT 1 runs 4.0x faster at shared-llc than at same-cpu"
        );
        assert!(
            f[0].mechanism
                .starts_with("The client and server each need CPU time")
        );
        assert_eq!(f[0].remedies.len(), 1);
        assert_eq!(
            f[0].remedies[0].command,
            "taskset -c <server cpus> <server>; taskset -c <other cpus> <client>   (shared-llc)"
        );
    }

    #[test]
    fn only_the_counters_that_differ_by_a_quarter_are_evidence() {
        let f = judged(
            preset("shared-llc", PlacementClass::SharedLlc, 16.5e3),
            preset("same-cpu", PlacementClass::SameCpu, 66e3),
            &[
                // 0.1 against a counter not read there: not compared.
                ("cs", 0.1, None),
                // 1.0 against 0.75: exactly a quarter of the larger, shown.
                ("idle_entries", 1.0, Some(0.75)),
                // 1.0 against 1.05: 5%, hidden.
                ("irq_CAL", 1.0, Some(1.05)),
                // 4.0 against 3.5: 0.5, under a quarter of 4 (1.0), hidden.
                ("irq_RES", 4.0, Some(3.5)),
                // 0.5 against a counter not read there: not compared (never with a zero).
                ("migrations", 0.5, None),
            ],
        );
        let shown: Vec<(&str, f64, f64)> = f[0]
            .evidence
            .iter()
            .filter_map(|e| {
                let v = e.versus.as_ref()?;
                assert_eq!(v.unit, "per_transaction");
                assert_eq!(
                    (v.a.label.as_str(), v.b.label.as_str()),
                    ("shared-llc", "same-cpu")
                );
                assert_eq!(e.source, "measured: pair --preset pgbench shared-llc");
                Some((e.label.as_str(), v.a.value, v.b.value))
            })
            .collect();
        assert_eq!(shown, [("idle_entries per transaction", 1.0, 0.75)]);
    }
}
