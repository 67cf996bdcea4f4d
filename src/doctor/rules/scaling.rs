//! SMT or shared-L2 contention in parallel scaling.
//!
//! Two hardware threads of a core share its execution units; two cores of an AMD module share a
//! decoder and an L2. A parallel program whose threads land on both halves runs slower than one
//! spread one thread per core or module (field notes E: 8+8 across sockets beat 0+16 by up to
//! 38%, and slowdown tracked the number of modules with both cores busy). The effect is the
//! `compact` policy against `scatter` at the same thread count, with compact contending.

use super::rule::{Inputs, Rule, plain_ci, rate_effect};
use crate::doctor::findings::{Confidence, Datum, Evidence, Finding, Remedy, Severity};
use crate::doctor::measurements::ScalePoint;

pub const MIN_RATIO: f64 = 1.1;

pub struct ParallelContention;

impl Rule for ParallelContention {
    fn id(&self) -> &'static str {
        "parallel-contention"
    }

    // About 100 lines: one finding whose figures (the two policies' speedups at each count)
    // feed every part, its remedies recording their changes as data.
    fn check(&self, i: Inputs<'_>) -> Vec<Finding> {
        let pairs =
            i.m.scaling
                .iter()
                .filter(|p| p.policy == "compact")
                .filter_map(|c| {
                    let s = i.m.scaling.iter().find(|s| {
                        s.policy == "scatter" && s.workload == c.workload && s.threads == c.threads
                    })?;
                    Some((
                        c,
                        s,
                        rate_effect(&c.speedup_samples, &s.speedup_samples, MIN_RATIO)?,
                    ))
                });
        let Some((c, s, eff)) = pairs.max_by(|a, b| a.2.ratio.total_cmp(&b.2.ratio)) else {
            return vec![];
        };
        let what = if i.facts.smt_active {
            "SMT siblings"
        } else if i.facts.shared_l2_groups > 0 {
            "cores sharing an L2 (modules)"
        } else {
            "cores sharing resources"
        };
        let src = |p: &ScalePoint| {
            format!(
                "measured: scale {} {} threads={}",
                p.workload, p.policy, p.threads
            )
        };
        let mut ev = vec![
            Evidence::new(
                format!("speedup packed ({})", c.policy),
                plain_ci(&c.speedup),
                src(c),
            ),
            Evidence::new(
                format!("speedup spread ({})", s.policy),
                plain_ci(&s.speedup),
                src(s),
            ),
        ];
        if let (Some(a), Some(b)) = (c.contended_groups, s.contended_groups) {
            ev.push(Evidence::new(
                "groups with both halves busy",
                Datum::versus("count", ("packed", a as f64), ("spread", b as f64)),
                "measured: per-CPU utilisation and topology",
            ));
        }
        vec![Finding {
            id: self.id().into(),
            title: format!(
                "Parallel work runs {:.2}x faster with one thread per core than packed onto {what}",
                eff.ratio
            ),
            severity: Severity::of_ratio(eff.ratio),
            magnitude: eff.magnitude(
                format!(
                    "{} with {} threads: speedup {:.2} spread against {:.2} packed",
                    c.workload, c.threads, eff.better.mean, eff.worse.mean
                ),
                "speedup",
            ),
            evidence: ev,
            mechanism: format!(
                "Threads packed onto {what} compete for the resources those CPUs share (execution \
                 units, decoder, L2), so each runs slower than alone on a core; spreading them \
                 one per core or module first avoids it until the thread count exceeds the cores."
            ),
            remedies: vec![
                Remedy::new(
                    "cpulab scale --policy scatter   (shows the CPU list), then taskset -c <that list> <command>",
                    "Runs the threads one per core or module before doubling up.",
                    "Fewer threads than CPUs may then be faster than using every CPU.",
                ),
                Remedy::new(
                    "OMP_PLACES=cores OMP_PROC_BIND=spread   (OpenMP programs)",
                    "The runtime spreads threads over cores itself.",
                    "Only for runtimes that honour it.",
                ),
                {
                    let r = Remedy::new(
                        "for a VM: pin vCPUs one per physical core or module on the host (virsh vcpupin, xl vcpu-pin)",
                        "The guest's CPUs then stop sharing cores behind its back (field notes E).",
                        "Fewer vCPUs fit on the host.",
                    );
                    // Only a guest has vCPUs for its host to pin.
                    if i.facts.hypervisor.is_some() {
                        r.on_host("the hypervisor host's administrator; not a cloud customer")
                            .changing(crate::doctor::findings::Change::VcpuPin {
                                vcpus: i.facts.online_cpus.len() as u32,
                                one_node: false,
                            })
                    } else {
                        r
                    }
                },
            ],
            confidence: if c.contended_groups.unwrap_or(0) > s.contended_groups.unwrap_or(0) {
                Confidence::High
            } else {
                Confidence::Medium
            },
            uncertain: None,
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    #[test]
    fn compact_slower_than_scatter_is_contention() {
        let (facts, m) = everything_wrong();
        let f = ParallelContention.check(Inputs {
            facts: &facts,
            m: &m,
        });
        assert!((f[0].magnitude.ratio.unwrap() - 1.9 / 1.2).abs() < 0.01);
        let (facts, m) = quiet_machine();
        assert!(
            ParallelContention
                .check(Inputs {
                    facts: &facts,
                    m: &m
                })
                .is_empty()
        );
    }

    // Written for the mutation run (docs/testing.md): literal inputs, answers worked by hand.

    fn judged(facts: &crate::doctor::measurements::Facts, points: Vec<ScalePoint>) -> Vec<Finding> {
        let (_, mut m) = everything_wrong();
        m.scaling = points;
        ParallelContention.check(Inputs { facts, m: &m })
    }

    #[test]
    fn the_finding_names_what_the_packed_threads_share() {
        let (mut facts, m) = everything_wrong();
        let title = |facts: &crate::doctor::measurements::Facts| {
            ParallelContention
                .check(Inputs { facts, m: &m })
                .remove(0)
                .title
        };
        facts.smt_active = true;
        assert_eq!(
            title(&facts),
            "Parallel work runs 1.58x faster with one thread per core than packed onto SMT \
             siblings"
        );
        facts.smt_active = false;
        facts.shared_l2_groups = 1;
        assert!(title(&facts).ends_with("packed onto cores sharing an L2 (modules)"));
        facts.shared_l2_groups = 0;
        assert!(title(&facts).ends_with("packed onto cores sharing resources"));
        let f = ParallelContention
            .check(Inputs {
                facts: &facts,
                m: &m,
            })
            .remove(0);
        assert_eq!(f.id, "parallel-contention");
        assert_eq!(
            f.magnitude.text,
            "fib with 2 threads: speedup 1.90 spread against 1.20 packed"
        );
        assert_eq!(f.severity, Severity::Medium);
    }

    #[test]
    fn compact_is_paired_with_scatter_of_the_same_workload_and_thread_count() {
        let (facts, _) = everything_wrong();
        let mut other = scale("scatter", 2, 3.9, 0);
        other.workload = "other".into();
        // Scatter at 4 threads and another workload's scatter come first; neither is compact's
        // pair, and the right pair (1.9 against 1.2) is the finding.
        let f = judged(
            &facts,
            vec![
                scale("scatter", 4, 3.9, 0),
                other,
                scale("compact", 2, 1.2, 1),
                scale("scatter", 2, 1.9, 0),
            ],
        );
        assert_eq!(f.len(), 1);
        assert!((f[0].magnitude.ratio.unwrap() - 1.9 / 1.2).abs() < 1e-9);
        // Only scatter runs, or compact alone: nothing to compare.
        assert!(
            judged(
                &facts,
                vec![scale("scatter", 2, 1.9, 0), scale("scatter", 2, 1.2, 0)]
            )
            .is_empty()
        );
        assert!(judged(&facts, vec![scale("compact", 2, 1.2, 1)]).is_empty());
    }

    #[test]
    fn contention_counted_only_on_the_packed_side_is_high_confidence() {
        let (facts, _) = everything_wrong();
        let confidence = |a: usize, b: usize| {
            judged(
                &facts,
                vec![scale("compact", 2, 1.2, a), scale("scatter", 2, 1.9, b)],
            )[0]
            .confidence
        };
        assert_eq!(confidence(1, 0), Confidence::High);
        assert_eq!(confidence(1, 1), Confidence::Medium);
        assert_eq!(confidence(0, 1), Confidence::Medium);
        let f = judged(
            &facts,
            vec![scale("compact", 2, 1.2, 3), scale("scatter", 2, 1.9, 0)],
        );
        let g = f[0]
            .evidence
            .iter()
            .find(|e| e.label == "groups with both halves busy")
            .unwrap();
        let v = g.versus.as_ref().unwrap();
        assert_eq!((v.a.value, v.b.value), (3.0, 0.0));
    }
}
