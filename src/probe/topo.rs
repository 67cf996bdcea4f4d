//! The topology section: what CPUs there are, which ones this process may use, how they share
//! caches, and the placement class of every pair.
//!
//! The classes come from [`Topology::class`]; this module only arranges them for reading. The
//! JSON carries the full matrix (every pair of allowed CPUs), which is what a later experiment
//! or a comparison between machines needs; people get one line per class with how many pairs
//! fall in it and a representative pair to try.

use super::cgroup::{Cpuset, Layout, read_cpuset};
use super::reading::{Reading, Reason, read_parsed, read_trim};
use crate::cpulist::CpuSet;
use crate::machine::Machine;
use crate::topology::{PlacementClass, Topology};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One cache level and kind, and how it is shared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheLevel {
    /// Cache level (1, 2, 3).
    pub level: u32,
    /// `Data`, `Instruction` or `Unified`.
    pub kind: String,
    /// Size of one instance in KiB, when sysfs gives it.
    pub size_kib: Option<u64>,
    /// The distinct groups of CPUs sharing one instance.
    pub instances: Vec<CpuSet>,
    /// How one instance is shared, in words: `per core`, `per module (2 cores)`, `per package`.
    pub shared_by: String,
}

/// How many pairs of allowed CPUs fall in one placement class, and one to try.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassSummary {
    /// The placement class.
    pub class: PlacementClass,
    /// Unordered pairs of distinct allowed CPUs in this class (0 for same-cpu).
    pub pairs: usize,
    /// The lowest-numbered pair showing the class.
    pub example: (u32, u32),
}

/// The placement class of every ordered pair of allowed CPUs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementMatrix {
    /// Row and column headers: the allowed CPUs in order.
    pub cpus: Vec<u32>,
    /// `classes[i][j]` is the class of `cpus[i]` and `cpus[j]`.
    pub classes: Vec<Vec<PlacementClass>>,
}

/// The topology section of the probe.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopologyView {
    /// Online CPUs.
    pub online: CpuSet,
    /// This process's affinity mask (live machine only).
    pub affinity: Reading<CpuSet>,
    /// The cgroup cpuset that bounds this process.
    pub cgroup_cpuset: Reading<Cpuset>,
    /// CPUs this process may use: online ∩ affinity ∩ cpuset. Everything below uses these.
    pub allowed: CpuSet,
    /// CPUs isolated from the scheduler at boot (`isolcpus`).
    pub isolated: Reading<CpuSet>,
    /// `/sys/devices/system/cpu/smt/control`: on, off, forceoff, notsupported.
    pub smt_control: Reading<String>,
    /// Physical packages (sockets).
    pub packages: usize,
    /// Dies across all packages.
    pub dies: usize,
    /// NUMA nodes and their CPUs; empty when the kernel exposes none.
    pub nodes: BTreeMap<u32, CpuSet>,
    /// Cores, counting the two cores of an AMD module separately.
    pub cores: usize,
    /// Hardware threads per core (1 without SMT).
    pub threads_per_core: usize,
    /// Each cache level and kind, and what shares one instance.
    pub caches: Vec<CacheLevel>,
    /// L2 caches shared by more than one core (AMD modules, Intel E-core clusters).
    pub modules: Vec<CpuSet>,
    /// Last-level cache domains.
    pub llc_domains: Vec<CpuSet>,
    /// One line per placement class present among the allowed CPUs, nearest first.
    pub classes: Vec<ClassSummary>,
    /// The class of every ordered pair of allowed CPUs.
    pub matrix: PlacementMatrix,
    /// Every online CPU as sysfs describes it.
    pub cpus: Vec<crate::topology::Cpu>,
}

impl TopologyView {
    /// Builds the section; fixture roots have no affinity of their own, so only their cpuset
    /// narrows the allowed set.
    pub fn read(machine: &Machine, layout: &Layout, live: bool) -> Self {
        let topo = &machine.topology;
        let cpu_dir = machine.root.join("sys/devices/system/cpu");
        let affinity = if live {
            match crate::affinity::get(0) {
                Ok(s) => Reading::Value(s),
                Err(e) => Reading::unavailable(Reason::Unreadable, format!("{e:#}")),
            }
        } else {
            Reading::unavailable(Reason::NotApplicable, "fixture root: no process to ask")
        };
        let cgroup_cpuset = read_cpuset(layout);
        let mut allowed = machine.allowed.clone();
        if let Some(c) = cgroup_cpuset.value().filter(|c| !c.cpus.is_empty()) {
            allowed = allowed.intersection(&c.cpus);
        }
        let isolated = read_parsed(&cpu_dir.join("isolated"), |t| {
            CpuSet::parse_list(t, true).ok()
        });
        let modules = topo
            .cache_groups(2)
            .into_iter()
            .filter(|g| cores_in(topo, g) > 1 && has_l3(topo, g))
            .collect();
        let llc_domains = llc_domains(topo);
        let (classes, matrix) = placement(topo, &allowed);
        Self {
            online: topo.online.clone(),
            affinity,
            cgroup_cpuset,
            allowed,
            isolated,
            smt_control: read_trim(&cpu_dir.join("smt/control")),
            packages: topo.packages(),
            dies: count_distinct(topo.cpus.iter().map(|c| (c.package, c.die))),
            nodes: topo.nodes.clone(),
            cores: topo.cores(),
            threads_per_core: topo
                .cpus
                .iter()
                .map(|c| c.smt_siblings.len())
                .max()
                .unwrap_or(1),
            caches: cache_levels(topo),
            modules,
            llc_domains,
            classes,
            matrix,
            cpus: topo.cpus.clone(),
        }
    }

    /// The class of two CPUs as recorded in the matrix.
    pub fn class_of(&self, a: u32, b: u32) -> Option<PlacementClass> {
        let i = self.matrix.cpus.iter().position(|&c| c == a)?;
        let j = self.matrix.cpus.iter().position(|&c| c == b)?;
        Some(self.matrix.classes[i][j])
    }
}

fn count_distinct<T: Ord>(it: impl Iterator<Item = T>) -> usize {
    let mut v: Vec<T> = it.collect();
    v.sort();
    v.dedup();
    v.len()
}

/// Distinct cores (SMT sibling groups) among `cpus`.
fn cores_in(topo: &Topology, cpus: &CpuSet) -> usize {
    count_distinct(
        cpus.iter()
            .filter_map(|c| topo.cpu(c))
            .map(|c| c.smt_siblings.to_string()),
    )
}

fn has_l3(topo: &Topology, cpus: &CpuSet) -> bool {
    cpus.first()
        .and_then(|c| topo.cpu(c))
        .and_then(|c| c.llc_level())
        .is_some_and(|l| l > 2)
}

fn llc_domains(topo: &Topology) -> Vec<CpuSet> {
    let mut v: Vec<CpuSet> = topo.cpus.iter().filter_map(|c| c.llc().cloned()).collect();
    v.sort();
    v.dedup();
    v
}

fn cache_levels(topo: &Topology) -> Vec<CacheLevel> {
    let mut by_key: BTreeMap<(u32, String), (Option<u64>, Vec<CpuSet>)> = BTreeMap::new();
    for cpu in &topo.cpus {
        for c in &cpu.caches {
            let e = by_key.entry((c.level, c.kind.clone())).or_default();
            e.0 = e.0.or(c.size_kib);
            if !e.1.contains(&c.shared_cpus) {
                e.1.push(c.shared_cpus.clone());
            }
        }
    }
    by_key
        .into_iter()
        .map(|((level, kind), (size_kib, mut instances))| {
            instances.sort();
            let shared_by = instances
                .first()
                .map(|g| describe_sharing(topo, g))
                .unwrap_or_default();
            CacheLevel {
                level,
                kind,
                size_kib,
                instances,
                shared_by,
            }
        })
        .collect()
}

/// Names what one cache instance spans: a core, a module, a die, a package.
pub fn describe_sharing(topo: &Topology, group: &CpuSet) -> String {
    let cores = cores_in(topo, group);
    let members: Vec<_> = group.iter().filter_map(|c| topo.cpu(c)).collect();
    let Some(first) = members.first() else {
        return String::new();
    };
    if cores <= 1 {
        return "per core".to_string();
    }
    let same_die = members
        .iter()
        .all(|c| c.package == first.package && c.die == first.die);
    let whole_die = same_die
        && topo
            .cpus
            .iter()
            .filter(|c| c.package == first.package && c.die == first.die)
            .all(|c| group.contains(c.id));
    if whole_die {
        let dies_in_package = count_distinct(
            topo.cpus
                .iter()
                .filter(|c| c.package == first.package)
                .map(|c| c.die),
        );
        let unit = if dies_in_package > 1 {
            "die"
        } else {
            "package"
        };
        return format!("per {unit} ({cores} cores)");
    }
    let whole_node = first
        .node
        .is_some_and(|n| topo.nodes.get(&n).is_some_and(|cpus| cpus == group));
    if whole_node {
        return format!("per NUMA node ({cores} cores)");
    }
    if cores == 2 {
        return "per module (2 cores)".to_string();
    }
    format!("per cluster of {cores} cores")
}

fn placement(topo: &Topology, allowed: &CpuSet) -> (Vec<ClassSummary>, PlacementMatrix) {
    let cpus = allowed.to_vec();
    let classes: Vec<Vec<PlacementClass>> = cpus
        .iter()
        .map(|&a| cpus.iter().map(|&b| topo.class(a, b)).collect())
        .collect();
    let mut summary: BTreeMap<PlacementClass, ClassSummary> = BTreeMap::new();
    for (i, &a) in cpus.iter().enumerate() {
        summary
            .entry(PlacementClass::SameCpu)
            .or_insert(ClassSummary {
                class: PlacementClass::SameCpu,
                pairs: 0,
                example: (a, a),
            });
        for (j, &b) in cpus.iter().enumerate().skip(i + 1) {
            let class = classes[i][j];
            summary
                .entry(class)
                .or_insert(ClassSummary {
                    class,
                    pairs: 0,
                    example: (a, b),
                })
                .pairs += 1;
        }
    }
    (
        summary.into_values().collect(),
        PlacementMatrix { cpus, classes },
    )
}
