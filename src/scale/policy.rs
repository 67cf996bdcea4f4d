//! Placement policies: which CPUs n threads get.
//!
//! Field notes E: a parallel Fibonacci on 16 vCPUs of two Opterons ran up to 38% faster split
//! 8+8 across the sockets than packed onto one, and near-ideally with one core per module,
//! because the two cores of a module share an instruction decoder and an L2. Where threads land
//! matters as much as how many there are, so `scale` runs every thread count under several
//! policies:
//!
//! - `compact` fills a core's SMT siblings, then the module (shared L2), then the LLC, then the
//!   node, before moving on: the fewest caches and links, the most sharing.
//! - `scatter` gives every thread its own core and module before any doubles up, spreading
//!   across nodes and LLCs first: the most caches and bandwidth, the least sharing.
//! - `os` pins nothing and lets the scheduler choose; an explicit list takes CPUs in the order
//!   given.
//!
//! Both orders come from one rank vector per CPU: (place among nodes, among the node's LLCs,
//! among the LLC's modules, among the module's cores, among the core's hardware threads).
//! Sorting by it lexicographically is compact; sorting by it reversed is scatter, a mixed-radix
//! "bit reversal" that interleaves every level. The selection is a pure function of
//! (topology, allowed CPUs, n), tested on machines we do not have.

use crate::cpulist::CpuSet;
use crate::topology::Topology;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// How threads are placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Policy {
    /// No pinning: the scheduler places threads on any allowed CPU.
    Os,
    /// Fill SMT siblings and shared-L2 modules first, then the LLC, then the node.
    Compact,
    /// One thread per core and per module before doubling up; nodes and LLCs first.
    Scatter,
    /// Thread i on the i-th CPU of this list (in the order given), round-robin.
    Explicit(Vec<u32>),
}

impl Policy {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Os => "os",
            Self::Compact => "compact",
            Self::Scatter => "scatter",
            Self::Explicit(_) => "explicit",
        }
    }

    /// Parses `os`, `compact` or `scatter`.
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim() {
            "os" => Some(Self::Os),
            "compact" => Some(Self::Compact),
            "scatter" => Some(Self::Scatter),
            _ => None,
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Explicit(cpus) => write!(f, "explicit {}", CpuSet::from_iter_u32(cpus.clone())),
            p => f.write_str(p.name()),
        }
    }
}

/// The CPU for each of `n` threads under `policy`, thread 0 first; `None` for [`Policy::Os`].
/// More threads than CPUs wrap around (oversubscription).
pub fn select(topo: &Topology, allowed: &CpuSet, n: usize, policy: &Policy) -> Option<Vec<u32>> {
    let order = match policy {
        Policy::Os => return None,
        Policy::Compact => placement_order(topo, allowed, false),
        Policy::Scatter => placement_order(topo, allowed, true),
        Policy::Explicit(list) => list.clone(),
    };
    if order.is_empty() {
        return Some(Vec::new());
    }
    Some((0..n).map(|i| order[i % order.len()]).collect())
}

/// Every allowed CPU in compact (`scatter = false`) or scatter order.
pub fn placement_order(topo: &Topology, allowed: &CpuSet, scatter: bool) -> Vec<u32> {
    let groups: BTreeMap<u32, [CpuSet; 4]> = allowed
        .iter()
        .map(|c| (c, groups(topo, allowed, c)))
        .collect();
    let mut keyed: Vec<([usize; 5], u32)> = allowed
        .iter()
        .map(|c| {
            let mut r = ranks(&groups, allowed, c);
            if scatter {
                r.reverse();
            }
            (r, c)
        })
        .collect();
    keyed.sort();
    keyed.into_iter().map(|(_, c)| c).collect()
}

/// The groups a CPU belongs to, innermost first, restricted to the allowed CPUs: its core (SMT
/// siblings), its module (CPUs sharing its L2, or the core), its LLC (or the module), and its
/// top-level domain (NUMA node and package). A level that does not nest inside the next is
/// replaced by the one below, so the hierarchy is always a tree.
fn groups(topo: &Topology, allowed: &CpuSet, cpu: u32) -> [CpuSet; 4] {
    let one = CpuSet::from_iter_u32([cpu]);
    let Some(c) = topo.cpu(cpu) else {
        return [one.clone(), one.clone(), one.clone(), one];
    };
    let core = c.smt_siblings.intersection(allowed);
    let module = c
        .sharing_at(2)
        .map(|s| s.intersection(allowed))
        .filter(|s| core.is_subset(s))
        .unwrap_or_else(|| core.clone());
    let llc = c
        .llc()
        .map(|s| s.intersection(allowed))
        .filter(|s| module.is_subset(s))
        .unwrap_or_else(|| module.clone());
    let top: CpuSet = allowed
        .iter()
        .filter(|&o| {
            topo.cpu(o)
                .is_some_and(|x| (x.node, x.package) == (c.node, c.package))
        })
        .collect();
    let top = if llc.is_subset(&top) {
        top
    } else {
        llc.clone()
    };
    [core, module, llc, top]
}

/// Position of `child` among the distinct level-`level` groups of the CPUs in `parent`, ordered
/// by their lowest CPU.
fn rank_within(
    groups: &BTreeMap<u32, [CpuSet; 4]>,
    parent: &CpuSet,
    child: &CpuSet,
    level: usize,
) -> usize {
    let children: BTreeSet<(Option<u32>, &CpuSet)> = parent
        .iter()
        .filter_map(|o| groups.get(&o).map(|g| (g[level].first(), &g[level])))
        .collect();
    children.iter().position(|(_, s)| *s == child).unwrap_or(0)
}

/// (top-level rank, LLC rank in top, module rank in LLC, core rank in module, thread rank in
/// core).
fn ranks(groups: &BTreeMap<u32, [CpuSet; 4]>, allowed: &CpuSet, cpu: u32) -> [usize; 5] {
    let Some([core, module, llc, top]) = groups.get(&cpu) else {
        return [0; 5];
    };
    [
        rank_within(groups, allowed, top, 3),
        rank_within(groups, top, llc, 2),
        rank_within(groups, llc, module, 1),
        rank_within(groups, module, core, 0),
        core.iter().position(|c| c == cpu).unwrap_or(0),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scale::test_topologies::*;

    fn pick(t: &Topology, n: usize, p: Policy) -> Vec<u32> {
        select(t, &t.online, n, &p).unwrap()
    }

    #[test]
    fn opteron_compact_packs_modules_and_one_socket() {
        let t = opteron_modules();
        assert_eq!(pick(&t, 2, Policy::Compact), vec![0, 1]);
        assert_eq!(pick(&t, 16, Policy::Compact), (0..16).collect::<Vec<_>>());
        assert_eq!(pick(&t, 18, Policy::Compact)[16..], [16, 17]);
    }

    #[test]
    fn opteron_scatter_takes_one_core_per_module_across_sockets() {
        let t = opteron_modules();
        assert_eq!(pick(&t, 4, Policy::Scatter), vec![0, 16, 2, 18]);
        // Field notes E: 16 threads, one core per module, split 8 + 8 across the sockets.
        let mut s16 = pick(&t, 16, Policy::Scatter);
        s16.sort_unstable();
        let want: Vec<u32> = (0..32).step_by(2).collect();
        assert_eq!(s16, want);
        // The 17th thread is the first to double up a module.
        assert_eq!(pick(&t, 17, Policy::Scatter)[16], 1);
    }

    #[test]
    fn smt_server_compact_fills_siblings_first() {
        let t = two_socket_smt();
        assert_eq!(pick(&t, 2, Policy::Compact), vec![0, 8]);
        assert_eq!(pick(&t, 4, Policy::Compact), vec![0, 8, 1, 9]);
        let mut c8 = pick(&t, 8, Policy::Compact);
        c8.sort_unstable();
        assert_eq!(c8, vec![0, 1, 2, 3, 8, 9, 10, 11], "one whole socket");
    }

    #[test]
    fn smt_server_scatter_uses_every_core_before_any_sibling() {
        let t = two_socket_smt();
        assert_eq!(pick(&t, 2, Policy::Scatter), vec![0, 4]);
        assert_eq!(pick(&t, 4, Policy::Scatter), vec![0, 4, 1, 5]);
        let mut s8 = pick(&t, 8, Policy::Scatter);
        s8.sort_unstable();
        assert_eq!(s8, (0..8).collect::<Vec<_>>());
        assert_eq!(pick(&t, 10, Policy::Scatter)[8..], [8, 12]);
    }

    #[test]
    fn scatter_spreads_over_llcs_within_a_node() {
        let t = two_ccx();
        assert_eq!(pick(&t, 2, Policy::Scatter), vec![0, 4]);
        assert_eq!(pick(&t, 4, Policy::Scatter), vec![0, 4, 1, 5]);
        assert_eq!(pick(&t, 2, Policy::Compact), vec![0, 1]);
    }

    #[test]
    fn restricted_cpusets_are_respected() {
        let t = two_socket_smt();
        let allowed = CpuSet::from_iter_u32([2, 3, 10, 11]);
        let c = select(&t, &allowed, 2, &Policy::Compact).unwrap();
        assert_eq!(c, vec![2, 10]);
        let s = select(&t, &allowed, 2, &Policy::Scatter).unwrap();
        assert_eq!(s, vec![2, 3]);
        assert!(
            select(&t, &allowed, 6, &Policy::Scatter)
                .unwrap()
                .iter()
                .all(|c| allowed.contains(*c))
        );
    }

    #[test]
    fn os_pins_nothing_and_explicit_keeps_its_order() {
        let t = two_vcpu_guest();
        assert_eq!(select(&t, &t.online, 2, &Policy::Os), None);
        assert_eq!(pick(&t, 3, Policy::Explicit(vec![1, 0])), vec![1, 0, 1]);
        // With no SMT and no modules both policies use every CPU, one thread each.
        assert_eq!(pick(&t, 2, Policy::Compact), vec![0, 1]);
        assert_eq!(pick(&t, 2, Policy::Scatter), vec![0, 1]);
    }

    #[test]
    fn each_policy_has_its_name_parses_back_and_prints_it() {
        for (name, p) in [
            ("os", Policy::Os),
            ("compact", Policy::Compact),
            ("scatter", Policy::Scatter),
        ] {
            assert_eq!(p.name(), name);
            assert_eq!(p.to_string(), name);
            assert_eq!(Policy::parse(&format!(" {name}\n")), Some(p));
        }
        assert_eq!(Policy::parse("explicit"), None);
        assert_eq!(Policy::parse("Compact"), None);
        let e = Policy::Explicit(vec![3, 0, 1]);
        assert_eq!(e.name(), "explicit");
        assert_eq!(e.to_string(), "explicit 0-1,3");
    }

    #[test]
    fn no_allowed_cpu_or_no_thread_places_nothing() {
        let t = two_vcpu_guest();
        let none = CpuSet::new();
        assert_eq!(select(&t, &none, 3, &Policy::Compact), Some(vec![]));
        assert_eq!(select(&t, &none, 3, &Policy::Scatter), Some(vec![]));
        assert_eq!(select(&t, &t.online, 0, &Policy::Compact), Some(vec![]));
        assert_eq!(placement_order(&t, &none, true), Vec::<u32>::new());
    }

    /// With more than one LLC per package, scatter goes to the other package before the other
    /// LLC of the same one: the top-level group is the package, not the LLC.
    #[test]
    fn scatter_spreads_over_packages_before_llcs_within_one() {
        let t = two_sockets_of_two_ccx();
        assert_eq!(pick(&t, 2, Policy::Scatter), vec![0, 4]);
        assert_eq!(pick(&t, 4, Policy::Scatter), vec![0, 4, 2, 6]);
        assert_eq!(pick(&t, 4, Policy::Compact), vec![0, 1, 2, 3]);
    }
}
