//! From settings to the list of runs: which placements, in which order, and which
//! combinations are skipped with a reason.

use super::report::SkippedRun;
use super::settings::{Method, PairSpec, Placement};
use crate::cpulist::CpuSet;
use crate::topology::{PlacementClass, Topology};

/// One run to perform.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Planned {
    pub method: Method,
    pub placement: Placement,
    pub class: PlacementClass,
}

/// Why spinning on one CPU is not measured.
pub const SPIN_SAME_CPU: &str = "spinning on one CPU is meaningless: the waiting side spins \
     until its time slice ends before the other side can answer, so the figure would be the \
     scheduler's time slice, not a round trip";

/// The placements `spec` names on `cpus`, each with its class.
pub fn placements(
    topology: &Topology,
    cpus: &CpuSet,
    spec: &PairSpec,
) -> Vec<(Placement, PlacementClass)> {
    let pinned = |a, b| (Placement::Pinned { a, b }, topology.class(a, b));
    match spec {
        PairSpec::Auto => topology
            .representative_pairs(cpus)
            .into_iter()
            .map(|p| (Placement::Pinned { a: p.a, b: p.b }, p.class))
            .chain([(Placement::Unpinned, PlacementClass::Unpinned)])
            .collect(),
        PairSpec::All => cpus
            .iter()
            .flat_map(|a| cpus.iter().map(move |b| (a, b)))
            .map(|(a, b)| pinned(a, b))
            .collect(),
        PairSpec::List(list) => list
            .iter()
            .map(|p| match *p {
                Placement::Pinned { a, b } => pinned(a, b),
                // The class of two CPUs needs both; a free end is the scheduler's choice.
                free => (free, PlacementClass::Unpinned),
            })
            .collect(),
    }
}

/// Every method at every placement, methods outermost; spin on one CPU is skipped.
pub fn plan(
    topology: &Topology,
    cpus: &CpuSet,
    methods: &[Method],
    spec: &PairSpec,
) -> (Vec<Planned>, Vec<SkippedRun>) {
    let places = placements(topology, cpus, spec);
    let mut runs = Vec::new();
    let mut skipped = Vec::new();
    for &method in methods {
        for &(placement, class) in &places {
            let one_cpu = match placement {
                Placement::Pinned { a, b } => a == b,
                _ => cpus.len() == 1,
            };
            if method == Method::Spin && one_cpu {
                let (cpu_a, cpu_b) = cpus_of(placement);
                skipped.push(SkippedRun {
                    method,
                    placement: class,
                    cpu_a,
                    cpu_b,
                    reason: SPIN_SAME_CPU.to_string(),
                });
            } else {
                runs.push(Planned {
                    method,
                    placement,
                    class,
                });
            }
        }
    }
    (runs, skipped)
}

/// The initiator's and the responder's CPU; `None` for a free end.
pub fn cpus_of(p: Placement) -> (Option<u32>, Option<u32>) {
    (p.initiator(), p.responder())
}

/// The CPUs whose counters a placement's run reads: its two CPUs, or all of `cpus` when an end
/// is free (it may run on any of them).
pub fn cpus_in_use(p: Placement, cpus: &CpuSet) -> CpuSet {
    match p {
        Placement::Pinned { a, b } => CpuSet::from_iter_u32([a, b]),
        _ => cpus.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Two CPUs that share only an LLC, as on this project's 2-vCPU guest.
    fn two_cpus() -> Topology {
        let cpu = |id| crate::topology::Cpu {
            id,
            package: 0,
            die: 0,
            core_id: id,
            node: Some(0),
            smt_siblings: CpuSet::from_iter_u32([id]),
            caches: vec![crate::topology::Cache {
                level: 3,
                kind: "Unified".into(),
                size_kib: None,
                shared_cpus: CpuSet::from_iter_u32([0, 1]),
            }],
        };
        Topology {
            online: CpuSet::from_iter_u32([0, 1]),
            cpus: vec![cpu(0), cpu(1)],
            nodes: BTreeMap::new(),
        }
    }

    #[test]
    fn auto_gives_one_pair_per_class_plus_unpinned() {
        let t = two_cpus();
        let p = placements(&t, &t.online, &PairSpec::Auto);
        let classes: Vec<_> = p.iter().map(|x| x.1).collect();
        assert_eq!(
            classes,
            [
                PlacementClass::SameCpu,
                PlacementClass::SharedLlc,
                PlacementClass::Unpinned
            ]
        );
    }

    #[test]
    fn all_is_every_ordered_pair() {
        let t = two_cpus();
        assert_eq!(placements(&t, &t.online, &PairSpec::All).len(), 4);
    }

    #[test]
    fn spin_on_one_cpu_is_skipped_with_a_reason() {
        let t = two_cpus();
        let (runs, skipped) = plan(&t, &t.online, &[Method::Spin], &PairSpec::Auto);
        assert_eq!(runs.len(), 2);
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].placement, PlacementClass::SameCpu);
        let one = CpuSet::from_iter_u32([0]);
        let (runs, skipped) = plan(&t, &one, &[Method::Spin, Method::Pipe], &PairSpec::Auto);
        assert_eq!(skipped.len(), 2, "same-cpu and unpinned on one CPU");
        assert_eq!(runs.len(), 2, "pipe same-cpu and unpinned");
    }

    #[test]
    fn a_half_pinned_pair_is_unpinned_and_reads_every_allowed_cpu() {
        let t = two_cpus();
        let half = [
            Placement::ResponderUnpinned { a: 1 },
            Placement::InitiatorUnpinned { b: 0 },
        ];
        let spec = PairSpec::List(half.to_vec());
        let p = placements(&t, &t.online, &spec);
        assert_eq!(
            p,
            half.map(|h| (h, PlacementClass::Unpinned)).to_vec(),
            "a free end has no distance to class"
        );
        assert_eq!(cpus_of(half[0]), (Some(1), None));
        assert_eq!(cpus_of(half[1]), (None, Some(0)));
        assert_eq!(cpus_in_use(half[0], &t.online), t.online);
        // Spinning with a free end is measured on two CPUs and skipped on one.
        let (runs, skipped) = plan(&t, &t.online, &[Method::Spin], &spec);
        assert_eq!((runs.len(), skipped.len()), (2, 0));
        let one = CpuSet::from_iter_u32([1]);
        let spec = PairSpec::List(vec![half[0]]);
        let (runs, skipped) = plan(&t, &one, &[Method::Spin], &spec);
        assert_eq!((runs.len(), skipped.len()), (0, 1));
        assert_eq!((skipped[0].cpu_a, skipped[0].cpu_b), (Some(1), None));
    }
}
