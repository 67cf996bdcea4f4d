//! In-memory topologies of machines we do not have, for the pure placement tests.

use crate::cpulist::CpuSet;
use crate::topology::{Cache, Cpu, Topology};
use std::collections::BTreeMap;

fn cache(level: u32, cpus: impl IntoIterator<Item = u32>) -> Cache {
    Cache {
        level,
        kind: if level == 1 { "Data" } else { "Unified" }.into(),
        size_kib: Some(match level {
            1 => 16,
            2 => 2048,
            _ => 8192,
        }),
        shared_cpus: CpuSet::from_iter_u32(cpus),
    }
}

fn assemble(cpus: Vec<Cpu>) -> Topology {
    let mut nodes: BTreeMap<u32, CpuSet> = BTreeMap::new();
    for c in &cpus {
        if let Some(n) = c.node {
            nodes.entry(n).or_default().insert(c.id);
        }
    }
    Topology {
        online: cpus.iter().map(|c| c.id).collect(),
        cpus,
        nodes,
    }
}

/// Field notes E: 2x Opteron 6376, each package 16 cores in 8 modules of 2 cores sharing an L2;
/// one L3 and one NUMA node per package. CPUs 0-15 on package 0, 16-31 on package 1; module m
/// of a package holds its cores 2m and 2m+1.
pub fn opteron_modules() -> Topology {
    let cpus = (0..32u32)
        .map(|i| {
            let p = i / 16;
            let m = i / 2;
            Cpu {
                id: i,
                package: p,
                die: 0,
                core_id: i % 16,
                node: Some(p),
                smt_siblings: CpuSet::from_iter_u32([i]),
                caches: vec![
                    cache(1, [i]),
                    cache(2, [2 * m, 2 * m + 1]),
                    cache(3, p * 16..p * 16 + 16),
                ],
            }
        })
        .collect();
    assemble(cpus)
}

/// A 2-socket SMT server numbered the way Linux does: 2 packages x 4 cores x 2 threads; CPUs
/// 0-3 are package 0's cores, 4-7 package 1's, 8-15 their second hardware threads (sibling of
/// CPU c is c + 8). L1 and L2 per core, L3 and NUMA node per package.
pub fn two_socket_smt() -> Topology {
    let cpus = (0..16u32)
        .map(|i| {
            let first = i % 8;
            let p = first / 4;
            let core = [first, first + 8];
            let pkg = [p * 4, p * 4 + 1, p * 4 + 2, p * 4 + 3];
            let llc = pkg.iter().flat_map(|&c| [c, c + 8]);
            Cpu {
                id: i,
                package: p,
                die: 0,
                core_id: first % 4,
                node: Some(p),
                smt_siblings: CpuSet::from_iter_u32(core),
                caches: vec![cache(1, core), cache(2, core), cache(3, llc)],
            }
        })
        .collect();
    assemble(cpus)
}

/// This project's machine: 2 vCPUs, private L1 and L2, one shared L3, one node.
pub fn two_vcpu_guest() -> Topology {
    let cpus = (0..2u32)
        .map(|i| Cpu {
            id: i,
            package: 0,
            die: 0,
            core_id: i,
            node: Some(0),
            smt_siblings: CpuSet::from_iter_u32([i]),
            caches: vec![cache(1, [i]), cache(2, [i]), cache(3, [0, 1])],
        })
        .collect();
    assemble(cpus)
}

/// One package, one node, two LLCs (EPYC CCXs) of 4 cores each, no SMT, private L2.
pub fn two_ccx() -> Topology {
    let cpus = (0..8u32)
        .map(|i| {
            let ccx = i / 4;
            Cpu {
                id: i,
                package: 0,
                die: 0,
                core_id: i,
                node: Some(0),
                smt_siblings: CpuSet::from_iter_u32([i]),
                caches: vec![cache(1, [i]), cache(2, [i]), cache(3, ccx * 4..ccx * 4 + 4)],
            }
        })
        .collect();
    assemble(cpus)
}

/// Two packages (one NUMA node each), each with two LLCs (CCXs) of 2 cores; no SMT, private L2.
/// CPUs 0-3 on package 0 (LLCs 0-1 and 2-3), 4-7 on package 1 (4-5 and 6-7).
pub fn two_sockets_of_two_ccx() -> Topology {
    let cpus = (0..8u32)
        .map(|i| {
            let p = i / 4;
            let ccx = i / 2;
            Cpu {
                id: i,
                package: p,
                die: 0,
                core_id: i % 4,
                node: Some(p),
                smt_siblings: CpuSet::from_iter_u32([i]),
                caches: vec![cache(1, [i]), cache(2, [i]), cache(3, ccx * 2..ccx * 2 + 2)],
            }
        })
        .collect();
    assemble(cpus)
}
