//! Contended cores and modules: how many SMT cores or shared-L2 modules had both halves busy.
//!
//! Field notes E: "slowdown tracked the number of modules with both cores busy". Two hardware
//! threads of a core share its execution units; two cores of an AMD module share a decoder, an
//! FPU and the L2. Either pair runs slower together than apart, so a scaling curve is read
//! against how many such pairs were doubled up. The count comes from the busy CPUs, either
//! planned (the CPUs a policy pinned threads to) or observed (per-CPU utilisation from
//! `/proc/stat` during the run, busy above a threshold), and the topology.

use crate::cpulist::CpuSet;
use crate::topology::Topology;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A CPU counts as busy when at least this share of its time was user, system or interrupt.
pub const BUSY_THRESHOLD_PCT: f64 = 50.0;

/// How many shared cores and modules a set of busy CPUs doubles up.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contention {
    /// The CPUs taken as busy.
    pub busy_cpus: CpuSet,
    /// Cores with more than one hardware thread among the CPUs considered.
    pub smt_cores: usize,
    /// Of those, cores with at least two busy hardware threads.
    pub smt_cores_contended: usize,
    /// L2 caches shared by more than one core (modules) among the CPUs considered.
    pub l2_modules: usize,
    /// Of those, modules with at least two busy cores.
    pub l2_modules_contended: usize,
}

/// Counts contended cores and modules among `considered` CPUs when `busy` are busy.
pub fn count(topo: &Topology, considered: &CpuSet, busy: &CpuSet) -> Contention {
    let mut cores: Vec<CpuSet> = Vec::new();
    let mut modules: Vec<CpuSet> = Vec::new();
    for id in considered.iter() {
        let Some(c) = topo.cpu(id) else { continue };
        let core = c.smt_siblings.intersection(considered);
        if core.len() > 1 && !cores.contains(&core) {
            cores.push(core.clone());
        }
        if let Some(l2) = c.sharing_at(2) {
            let l2 = l2.intersection(considered);
            if cores_in(topo, &l2).len() > 1 && !modules.contains(&l2) {
                modules.push(l2);
            }
        }
    }
    let busy = busy.intersection(considered);
    Contention {
        smt_cores: cores.len(),
        smt_cores_contended: cores
            .iter()
            .filter(|c| c.intersection(&busy).len() >= 2)
            .count(),
        l2_modules: modules.len(),
        l2_modules_contended: modules
            .iter()
            .filter(|m| cores_in(topo, &m.intersection(&busy)).len() >= 2)
            .count(),
        busy_cpus: busy,
    }
}

/// Distinct cores (SMT sibling sets) that the CPUs of `set` belong to.
fn cores_in(topo: &Topology, set: &CpuSet) -> Vec<CpuSet> {
    let mut v: Vec<CpuSet> = set
        .iter()
        .filter_map(|c| topo.cpu(c).map(|x| x.smt_siblings.clone()))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The CPUs busier than [`BUSY_THRESHOLD_PCT`] in a per-CPU busy map.
pub fn busy_from_utilisation(busy_pct: &BTreeMap<u32, f64>) -> CpuSet {
    busy_pct
        .iter()
        .filter(|(_, b)| **b >= BUSY_THRESHOLD_PCT)
        .map(|(c, _)| *c)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scale::policy::{Policy, select};
    use crate::scale::test_topologies::*;

    fn planned(t: &Topology, n: usize, p: Policy) -> Contention {
        let cpus = CpuSet::from_iter_u32(select(t, &t.online, n, &p).unwrap());
        count(t, &t.online, &cpus)
    }

    #[test]
    fn opteron_modules_doubled_up_by_policy() {
        let t = opteron_modules();
        let c = planned(&t, 16, Policy::Compact);
        assert_eq!((c.l2_modules, c.l2_modules_contended), (16, 8));
        assert_eq!(c.smt_cores, 0);
        let s = planned(&t, 16, Policy::Scatter);
        assert_eq!(s.l2_modules_contended, 0, "one core per module");
        assert_eq!(planned(&t, 20, Policy::Scatter).l2_modules_contended, 4);
    }

    #[test]
    fn smt_siblings_are_cores_not_modules() {
        let t = two_socket_smt();
        let c = planned(&t, 4, Policy::Compact);
        assert_eq!((c.smt_cores, c.smt_cores_contended), (8, 2));
        // L2 is per core here: no module is shared by two cores.
        assert_eq!(c.l2_modules, 0);
        assert_eq!(planned(&t, 8, Policy::Scatter).smt_cores_contended, 0);
    }

    #[test]
    fn utilisation_threshold() {
        let m = BTreeMap::from([(0, 99.0), (1, 49.0), (2, 50.0)]);
        assert_eq!(busy_from_utilisation(&m), CpuSet::from_iter_u32([0, 2]));
        let t = two_vcpu_guest();
        let c = count(&t, &t.online, &CpuSet::from_iter_u32([0, 1]));
        assert_eq!(
            c.smt_cores + c.l2_modules,
            0,
            "nothing shared on this machine"
        );
    }
}
