//! CPU topology and the placement class of every pair of CPUs.
//!
//! What a wakeup or a shared cache line costs depends on how far apart two CPUs are: the same
//! CPU, two hardware threads of one core, two cores sharing an L2 (an AMD "module"), two cores
//! sharing the last-level cache, the same NUMA node, or different nodes. The *placement class*
//! names that distance; every experiment in cpulab reports its results by class.
//!
//! The topology is read from sysfs below a root directory (`/` on a live machine, a fixture tree
//! in tests). Inside a VM it is the topology the hypervisor chose to show, which may not match the
//! physical one: the probe says so next to it.

use crate::cpulist::CpuSet;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

/// How far apart two CPUs are, nearest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlacementClass {
    /// Both ends on one logical CPU: every wakeup is a local context switch.
    SameCpu,
    /// Two hardware threads of one core: they share the core's L1, L2 and execution units.
    SmtSibling,
    /// Two cores sharing an L2 cache (an AMD Bulldozer/Piledriver module, Intel E-core cluster).
    SharedL2,
    /// Two cores sharing only the last-level cache.
    SharedLlc,
    /// Same NUMA node, different last-level caches (EPYC CCXs in NPS1).
    SameNode,
    /// Different packages that the kernel reports in one NUMA node (or with no NUMA at all).
    CrossPackage,
    /// Different NUMA nodes.
    CrossNode,
    /// The operating system chooses; each end is free to run anywhere allowed.
    Unpinned,
}

impl PlacementClass {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SameCpu => "same-cpu",
            Self::SmtSibling => "smt-sibling",
            Self::SharedL2 => "shared-l2",
            Self::SharedLlc => "shared-llc",
            Self::SameNode => "same-node",
            Self::CrossPackage => "cross-package",
            Self::CrossNode => "cross-node",
            Self::Unpinned => "unpinned",
        }
    }
}

impl fmt::Display for PlacementClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One cache as sysfs describes it (`cpuN/cache/indexM`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cache {
    pub level: u32,
    /// `Data`, `Instruction` or `Unified`.
    pub kind: String,
    /// Size as sysfs prints it, in KiB when known.
    pub size_kib: Option<u64>,
    /// CPUs sharing this cache.
    pub shared_cpus: CpuSet,
}

/// One logical CPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cpu {
    pub id: u32,
    pub package: u32,
    pub die: u32,
    pub core_id: u32,
    /// NUMA node, if the kernel exposes nodes.
    pub node: Option<u32>,
    /// Hardware threads of this CPU's core, itself included.
    pub smt_siblings: CpuSet,
    pub caches: Vec<Cache>,
}

impl Cpu {
    /// CPUs sharing this CPU's unified (or data) cache at `level`, if it has one.
    pub fn sharing_at(&self, level: u32) -> Option<&CpuSet> {
        self.caches
            .iter()
            .filter(|c| c.level == level && c.kind != "Instruction")
            .map(|c| &c.shared_cpus)
            .next()
    }

    pub fn llc_level(&self) -> Option<u32> {
        self.caches
            .iter()
            .filter(|c| c.kind != "Instruction")
            .map(|c| c.level)
            .max()
    }

    pub fn llc(&self) -> Option<&CpuSet> {
        self.llc_level().and_then(|l| self.sharing_at(l))
    }
}

/// The machine's online CPUs and how they relate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    pub online: CpuSet,
    pub cpus: Vec<Cpu>,
    /// NUMA nodes and their CPUs; empty when the kernel exposes none.
    pub nodes: BTreeMap<u32, CpuSet>,
}

/// A representative pair for one placement class.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassPair {
    pub class: PlacementClass,
    pub a: u32,
    pub b: u32,
}

fn read_trim(path: &Path) -> Result<String> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .with_context(|| format!("cannot read {}", path.display()))
}

fn read_u32(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Parses a cache size as sysfs prints it: `48K`, `1280K`, `32M`.
pub fn parse_cache_size_kib(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, mult) = match t.chars().last()? {
        'K' => (&t[..t.len() - 1], 1),
        'M' => (&t[..t.len() - 1], 1024),
        'G' => (&t[..t.len() - 1], 1024 * 1024),
        _ => (t, 1),
    };
    digits.parse::<u64>().ok().map(|v| v * mult)
}

/// The true hardware threads among the siblings sysfs lists. Linux reports the two cores of an
/// AMD Bulldozer-family module (Opteron 6300, FX) as thread siblings, yet each has its own L1
/// data cache and integer core; SMT threads always share the L1d. So when the L1d is known,
/// siblings that do not share it are module partners (placement class `shared-l2`), not threads.
pub fn hardware_threads(id: u32, siblings: CpuSet, caches: &[Cache]) -> CpuSet {
    let Some(l1d) = caches
        .iter()
        .find(|c| c.level == 1 && c.kind == "Data")
        .map(|c| &c.shared_cpus)
    else {
        return siblings;
    };
    let mut threads = siblings.intersection(l1d);
    threads.insert(id);
    threads
}

impl Topology {
    /// Reads the topology under `root` (`/` for the live machine).
    pub fn read(root: &Path) -> Result<Self> {
        let cpu_dir = root.join("sys/devices/system/cpu");
        let online_text = read_trim(&cpu_dir.join("online"))?;
        let online = CpuSet::parse_list(&online_text, true)
            .with_context(|| format!("bad CPU list in {}", cpu_dir.join("online").display()))?;

        let mut nodes = BTreeMap::new();
        let node_dir = root.join("sys/devices/system/node");
        if let Ok(entries) = std::fs::read_dir(&node_dir) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if let Some(n) = name
                    .strip_prefix("node")
                    .and_then(|n| n.parse::<u32>().ok())
                    && let Ok(list) = std::fs::read_to_string(e.path().join("cpulist"))
                    && let Ok(set) = CpuSet::parse_list(&list, true)
                {
                    nodes.insert(n, set);
                }
            }
        }

        let mut cpus = Vec::new();
        for id in online.iter() {
            let d = cpu_dir.join(format!("cpu{id}"));
            let t = d.join("topology");
            let smt_siblings = ["core_cpus_list", "thread_siblings_list"]
                .iter()
                .find_map(|f| {
                    std::fs::read_to_string(t.join(f))
                        .ok()
                        .and_then(|s| CpuSet::parse_list(&s, true).ok())
                })
                .unwrap_or_else(|| CpuSet::from_iter_u32([id]));
            let mut caches = Vec::new();
            if let Ok(entries) = std::fs::read_dir(d.join("cache")) {
                let mut dirs: Vec<_> = entries
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
                    .map(|e| e.path())
                    .collect();
                dirs.sort();
                for c in dirs {
                    let (Some(level), Ok(kind), Ok(shared)) = (
                        read_u32(&c.join("level")),
                        read_trim(&c.join("type")),
                        read_trim(&c.join("shared_cpu_list")),
                    ) else {
                        continue;
                    };
                    let Ok(shared_cpus) = CpuSet::parse_list(&shared, true) else {
                        continue;
                    };
                    let size_kib = std::fs::read_to_string(c.join("size"))
                        .ok()
                        .and_then(|s| parse_cache_size_kib(&s));
                    caches.push(Cache {
                        level,
                        kind,
                        size_kib,
                        shared_cpus,
                    });
                }
            }
            let smt_siblings = hardware_threads(id, smt_siblings, &caches);
            let node = nodes
                .iter()
                .find(|(_, set)| set.contains(id))
                .map(|(n, _)| *n);
            cpus.push(Cpu {
                id,
                package: read_u32(&t.join("physical_package_id")).unwrap_or(0),
                die: read_u32(&t.join("die_id")).unwrap_or(0),
                core_id: read_u32(&t.join("core_id")).unwrap_or(id),
                node,
                smt_siblings,
                caches,
            });
        }
        Ok(Self {
            online,
            cpus,
            nodes,
        })
    }

    pub fn cpu(&self, id: u32) -> Option<&Cpu> {
        self.cpus.iter().find(|c| c.id == id)
    }

    /// The placement class of CPUs `a` and `b`. Unknown CPUs are treated as far apart.
    pub fn class(&self, a: u32, b: u32) -> PlacementClass {
        if a == b {
            return PlacementClass::SameCpu;
        }
        let (Some(ca), Some(cb)) = (self.cpu(a), self.cpu(b)) else {
            return PlacementClass::CrossNode;
        };
        if ca.smt_siblings.contains(b) {
            return PlacementClass::SmtSibling;
        }
        let llc = ca.llc_level();
        // An L2 only counts as "shared-l2" when it is not also the last level: on a machine whose
        // L2 is the LLC, sharing it is sharing the LLC.
        if llc.is_some_and(|l| l > 2) && ca.sharing_at(2).is_some_and(|s| s.contains(b)) {
            return PlacementClass::SharedL2;
        }
        if ca.llc().is_some_and(|s| s.contains(b)) {
            return PlacementClass::SharedLlc;
        }
        match (ca.node, cb.node) {
            (Some(na), Some(nb)) if na != nb => PlacementClass::CrossNode,
            _ if ca.package != cb.package => PlacementClass::CrossPackage,
            _ => PlacementClass::SameNode,
        }
    }

    /// The placement classes a wakeup between two of `cpus` can land in, nearest first:
    /// `same-cpu` and the class of every pair (what the exporter publishes and the wakeup
    /// sources count, one list for all of them).
    pub fn classes_among(&self, cpus: &[u32]) -> Vec<PlacementClass> {
        let mut set = std::collections::BTreeSet::from([PlacementClass::SameCpu]);
        for &a in cpus {
            for &b in cpus {
                set.insert(self.class(a, b));
            }
        }
        set.into_iter().collect()
    }

    /// One representative pair per placement class present among `allowed`, nearest class
    /// first. The pair uses the lowest-numbered CPUs that show the class, so results are
    /// reproducible from run to run.
    pub fn representative_pairs(&self, allowed: &CpuSet) -> Vec<ClassPair> {
        let mut found: BTreeMap<PlacementClass, (u32, u32)> = BTreeMap::new();
        let list = allowed.to_vec();
        for (i, &a) in list.iter().enumerate() {
            found.entry(PlacementClass::SameCpu).or_insert((a, a));
            for &b in &list[i + 1..] {
                found.entry(self.class(a, b)).or_insert((a, b));
            }
        }
        found
            .into_iter()
            .map(|(class, (a, b))| ClassPair { class, a, b })
            .collect()
    }

    /// Packages, cores and the like, counted for display.
    pub fn packages(&self) -> usize {
        let mut p: Vec<u32> = self.cpus.iter().map(|c| c.package).collect();
        p.sort_unstable();
        p.dedup();
        p.len()
    }

    pub fn cores(&self) -> usize {
        let mut c: Vec<String> = self
            .cpus
            .iter()
            .map(|c| c.smt_siblings.to_string())
            .collect();
        c.sort();
        c.dedup();
        c.len()
    }

    /// Distinct cache-sharing groups at `level` (e.g. L2 modules, L3 domains).
    pub fn cache_groups(&self, level: u32) -> Vec<CpuSet> {
        let mut g: Vec<CpuSet> = self
            .cpus
            .iter()
            .filter_map(|c| c.sharing_at(level).cloned())
            .collect();
        g.sort();
        g.dedup();
        g
    }

    pub fn smt_active(&self) -> bool {
        self.cpus.iter().any(|c| c.smt_siblings.len() > 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(level: u32, kind: &str, cpus: &str) -> Cache {
        Cache {
            level,
            kind: kind.to_string(),
            size_kib: None,
            shared_cpus: CpuSet::parse_list(cpus, false).unwrap(),
        }
    }

    #[test]
    fn module_partners_with_separate_l1d_are_not_threads() {
        let sib = CpuSet::parse_list("0-1", false).unwrap();
        // Piledriver module: own L1d, shared L1i and L2.
        let module = [
            cache(1, "Data", "0"),
            cache(1, "Instruction", "0-1"),
            cache(2, "Unified", "0-1"),
        ];
        assert_eq!(hardware_threads(0, sib.clone(), &module).to_string(), "0");
        // Hyper-threads share the L1d.
        let smt = [cache(1, "Data", "0-1"), cache(2, "Unified", "0-1")];
        assert_eq!(hardware_threads(0, sib.clone(), &smt).to_string(), "0-1");
        // No cache information: trust sysfs.
        assert_eq!(hardware_threads(0, sib, &[]).to_string(), "0-1");
    }

    #[test]
    fn cache_sizes_parse_with_units() {
        assert_eq!(parse_cache_size_kib("48K\n"), Some(48));
        assert_eq!(parse_cache_size_kib("32M"), Some(32 * 1024));
        assert_eq!(parse_cache_size_kib("x"), None);
    }
}
