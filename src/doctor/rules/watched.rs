//! A live application's wakeups that pay the cross-CPU penalty the battery measured.
//!
//! `doctor --pid`/`--comm` watches the application for a few seconds (`cpulab watch`): how many
//! of its wakeups land on another CPU than the waker's. The battery measured, on this machine,
//! what a blocking round trip costs across CPUs against on one CPU. Only when both are there (a
//! penalty beyond noise, and a watched process whose wakeups mostly cross) is there a finding:
//! the watch figures are its evidence, and what that costs the application per second is an
//! ESTIMATE, labelled as one (a model: the pingpong penalty per wakeup times the application's
//! cross-CPU wakeups per second), never a measurement of the application itself.

use super::remedies;
use super::rule::{Inputs, Rule, home_cpu, ns_ci};
use super::wakeup::worst_penalty;
use crate::doctor::findings::{Confidence, Datum, Evidence, Finding, Severity};
use crate::output::fmt_ns;

/// Share of a process's wakeups that must cross CPUs for a finding.
pub const MIN_CROSS_SHARE: f64 = 0.5;
/// Fewer cross-CPU wakeups per second than this cost too little to speak of.
pub const MIN_CROSS_PER_S: f64 = 1000.0;

pub struct WatchedCrossWakeups;

impl Rule for WatchedCrossWakeups {
    fn id(&self) -> &'static str {
        "watched-cross-cpu-wakeups"
    }

    // About 100 lines: one finding stated in order (process, penalty, estimate, remedies).
    fn check(&self, i: Inputs<'_>) -> Vec<Finding> {
        let Some(w) = &i.m.app_watch else {
            return vec![];
        };
        let Some((base, worst, eff)) = worst_penalty(&i) else {
            return vec![];
        };
        let Some(p) = w
            .processes
            .iter()
            .filter(|p| {
                p.cross_share >= MIN_CROSS_SHARE && p.cross_wakeups_per_s >= MIN_CROSS_PER_S
            })
            .max_by(|a, b| a.cross_wakeups_per_s.total_cmp(&b.cross_wakeups_per_s))
        else {
            return vec![];
        };
        // A blocking round trip is two wakeups: the penalty per wakeup is half the round trip's.
        let per_wakeup_ns = (eff.worse.mean - eff.better.mean) / 2.0;
        let cost_s_per_s = per_wakeup_ns * p.cross_wakeups_per_s / 1e9;
        let src = format!(
            "measured: cpulab watch {} for {:.1} s",
            w.target, w.interval_s
        );
        let mut evidence = vec![
            Evidence::new(
                format!("{}: wakeups per second", p.name),
                Datum::number(p.wakeups_per_s, "per_s"),
                src.clone(),
            ),
            Evidence::new(
                format!(
                    "{}: share of wakeups on another CPU than the waker's",
                    p.name
                ),
                Datum::share(p.cross_share),
                src.clone(),
            ),
            Evidence::new(
                "blocking round trip across CPUs",
                ns_ci(&eff.worse),
                format!(
                    "measured: pingpong {} {}",
                    worst.method,
                    worst.cpus.as_deref().unwrap_or("?")
                ),
            ),
            Evidence::new(
                "blocking round trip on one CPU",
                ns_ci(&eff.better),
                format!(
                    "measured: pingpong {} {}",
                    base.method,
                    base.cpus.as_deref().unwrap_or("?")
                ),
            ),
            Evidence::new(
                "ESTIMATE: wakeup latency the crossings add, per second",
                Datum::number(cost_s_per_s, "s_per_s"),
                "model: (cross-CPU round trip - same-CPU round trip) / 2 per wakeup x the application's cross-CPU wakeups per second",
            ),
        ];
        if let Some(why) = &w.incomplete {
            evidence.push(Evidence::new(
                "the watch's figures are lower bounds",
                why.as_str(),
                src.clone(),
            ));
        }
        let cpu = home_cpu(worst, i.facts);
        vec![Finding {
            id: self.id().into(),
            title: format!(
                "{}: {:.0}% of {:.0} wakeups/s cross CPUs; each costs ~{} more than on one CPU (estimate)",
                p.name,
                p.cross_share * 100.0,
                p.wakeups_per_s,
                fmt_ns(per_wakeup_ns)
            ),
            severity: Severity::of_ratio(eff.ratio),
            magnitude: eff.magnitude(
                format!(
                    "{:.0} cross-CPU wakeups/s watched; the battery's blocking round trip across CPUs takes {} against {} on one CPU: ESTIMATE ~{cost_s_per_s:.3} s of added wakeup latency per second",
                    p.cross_wakeups_per_s,
                    fmt_ns(eff.worse.mean),
                    fmt_ns(eff.better.mean)
                ),
                "ns",
            ),
            evidence,
            mechanism: "The application's wakeups were watched landing on another CPU than their \
                        waker's; on this machine such a wakeup was measured to cost more than one \
                        on the same CPU (see the cross-CPU wakeup finding for why). The added \
                        latency per second is an estimate from those two measurements, not a \
                        measurement of the application: `cpulab try` measures it."
                .into(),
            remedies: remedies::colocate(cpu, i.facts, i.m.app_watch.as_ref()),
            confidence: Confidence::from_agreeing(2),
            uncertain: None,
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::findings::SourceKind;
    use crate::doctor::measurements::{AppWatch, WatchedProcess};
    use crate::doctor::rules::fixtures::{everything_wrong, quiet_machine};

    fn watch(cross_share: f64, per_s: f64) -> AppWatch {
        AppWatch {
            target: "comm postgres".into(),
            setup_s: None,
            interval_s: 5.0,
            incomplete: None,
            processes: vec![WatchedProcess {
                name: "postgres".into(),
                pids: vec![812],
                wakeups_per_s: per_s,
                cross_share,
                cross_wakeups_per_s: per_s * cross_share,
                cgroup: None,
                unit: None,
            }],
        }
    }

    #[test]
    fn crossing_wakeups_with_a_measured_penalty_are_a_finding_with_an_estimate() {
        let (facts, mut m) = everything_wrong();
        m.app_watch = Some(watch(0.71, 48_000.0));
        let f = WatchedCrossWakeups.check(Inputs {
            facts: &facts,
            m: &m,
        });
        assert_eq!(f.len(), 1);
        assert!(f[0].title.contains("71%") && f[0].title.contains("estimate"));
        let kinds: Vec<SourceKind> = f[0].evidence.iter().map(|e| e.source_kind).collect();
        assert!(kinds.contains(&SourceKind::Measured));
        let est = f[0]
            .evidence
            .iter()
            .find(|e| e.label.starts_with("ESTIMATE"))
            .unwrap();
        assert_eq!(est.source_kind, SourceKind::Model);
        assert!(est.quantity.as_ref().unwrap().value > 0.0);
    }

    #[test]
    fn silent_without_crossings_or_without_a_penalty() {
        let (facts, mut m) = everything_wrong();
        m.app_watch = Some(watch(0.1, 48_000.0));
        let i = Inputs {
            facts: &facts,
            m: &m,
        };
        assert!(WatchedCrossWakeups.check(i).is_empty());
        let (facts, mut m) = quiet_machine();
        m.app_watch = Some(watch(0.9, 48_000.0));
        let i = Inputs {
            facts: &facts,
            m: &m,
        };
        assert!(
            WatchedCrossWakeups.check(i).is_empty(),
            "no penalty measured"
        );
    }

    // Written for the mutation run (docs/testing.md): literal inputs, answers worked by hand.

    /// The fixture with every effect (a blocking pipe round trip of 42 us across CPUs 0:1
    /// against 5 us on one CPU), watching `w`.
    fn judged(w: AppWatch) -> Vec<Finding> {
        let (facts, mut m) = everything_wrong();
        m.app_watch = Some(w);
        WatchedCrossWakeups.check(Inputs {
            facts: &facts,
            m: &m,
        })
    }

    fn process(name: &str, per_s: f64, cross_share: f64) -> WatchedProcess {
        WatchedProcess {
            name: name.into(),
            pids: vec![900],
            wakeups_per_s: per_s,
            cross_share,
            cross_wakeups_per_s: per_s * cross_share,
            cgroup: None,
            unit: None,
        }
    }

    #[test]
    fn a_process_counts_from_half_its_wakeups_crossing_and_1000_crossings_a_second() {
        // Exactly on both lines: half of 2000 wakeups a second cross, 1000 a second.
        assert_eq!(judged(watch(0.5, 2000.0)).len(), 1);
        // Under either line alone: nothing.
        assert!(judged(watch(0.49, 4000.0)).is_empty(), "1960 a second");
        assert!(judged(watch(0.5, 1998.0)).is_empty(), "999 a second");
        assert!(judged(watch(0.9, 1000.0)).is_empty(), "900 a second");
    }

    #[test]
    fn the_estimate_is_half_the_round_trip_penalty_per_crossing() {
        let f = judged(watch(0.71, 48_000.0)).remove(0);
        assert_eq!(f.id, "watched-cross-cpu-wakeups");
        // (42 us - 5 us) / 2 = 18.5 us a wakeup, times 34,080 crossings a second: 0.63 s/s.
        assert_eq!(
            f.title,
            "postgres: 71% of 48000 wakeups/s cross CPUs; each costs ~18.50 us more than on one \
             CPU (estimate)"
        );
        let est = f
            .evidence
            .iter()
            .find(|e| e.label.starts_with("ESTIMATE"))
            .unwrap();
        let v = est.quantity.as_ref().unwrap().value;
        assert!((v - 0.630_48).abs() < 1e-9, "{v}");
        assert!(
            f.magnitude
                .text
                .starts_with("34080 cross-CPU wakeups/s watched; ")
                && f.magnitude
                    .text
                    .ends_with("ESTIMATE ~0.630 s of added wakeup latency per second"),
            "{}",
            f.magnitude.text
        );
        assert!((f.magnitude.ratio.unwrap() - 8.4).abs() < 1e-9);
        assert_eq!(f.severity, Severity::High);
        assert_eq!(f.confidence, Confidence::High);
        assert!(
            f.evidence
                .iter()
                .all(|e| e.label != "the watch's figures are lower bounds")
        );
    }

    #[test]
    fn the_busiest_crossing_process_is_named_and_the_pair_s_first_cpu_is_the_remedy_s() {
        let mut w = watch(0.6, 5000.0);
        w.processes.extend([
            // Most crossings a second, but most of its wakeups stay: not a finding's.
            process("walwriter", 100_000.0, 0.3),
            process("pgbench", 10_000.0, 0.8),
            // Nearly all cross, too few a second.
            process("checkpointer", 1000.0, 0.9),
        ]);
        w.incomplete = Some("12 events lost".into());
        let (facts, mut m) = everything_wrong();
        for r in &mut m.wakeup {
            if r.blocking && r.class == crate::topology::PlacementClass::SharedLlc {
                r.cpus = Some("2:3".into());
            }
        }
        m.app_watch = Some(w);
        let f = WatchedCrossWakeups
            .check(Inputs {
                facts: &facts,
                m: &m,
            })
            .remove(0);
        assert!(
            f.title
                .starts_with("pgbench: 80% of 10000 wakeups/s cross CPUs"),
            "{}",
            f.title
        );
        let lost = f
            .evidence
            .iter()
            .find(|e| e.label == "the watch's figures are lower bounds")
            .unwrap();
        assert_eq!(lost.value, "12 events lost");
        assert!(
            f.remedies[0]
                .command
                .starts_with("taskset -c 2 <server command>"),
            "{}",
            f.remedies[0].command
        );
    }
}
