//! The published figures the model is checked against, as data, each with its source.
//!
//! These are quoted from `docs/field-notes.md`, never computed: a figure here is published, and
//! it is printed as published, with its section. Keeping them in one typed table means a test can
//! find every figure validate uses and every figure has exactly one spelling.

use serde::{Deserialize, Serialize};

/// Which investigation of the field notes a figure comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Section {
    A,
    B,
    C,
    D,
    E,
    /// "Reproduced on this project's machines".
    ThisMachine,
    /// Not published: measured by `cpulab host bench` (table H), the result named beside it.
    HostBench,
}

impl Section {
    pub fn cite(self) -> &'static str {
        match self {
            Self::A => "field notes A",
            Self::B => "field notes B",
            Self::C => "field notes C",
            Self::D => "field notes D",
            Self::E => "field notes E",
            Self::ThisMachine => "field notes, this project's machines",
            Self::HostBench => "measured by cpulab host bench",
        }
    }
}

/// One published figure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Figure {
    pub id: &'static str,
    pub section: Section,
    pub what: &'static str,
    pub value: f64,
    pub unit: &'static str,
}

const fn fig(
    id: &'static str,
    section: Section,
    what: &'static str,
    value: f64,
    unit: &'static str,
) -> Figure {
    Figure {
        id,
        section,
        what,
        value,
        unit,
    }
}

use Section::*;

/// Every published figure validate uses.
pub const FIGURES: &[Figure] = &[
    fig(
        "a.select1.same",
        A,
        "pgbench SELECT 1, same vCPU, transactions in 180 s",
        6_507_144.0,
        "txn",
    ),
    fig(
        "a.select1.diff",
        A,
        "pgbench SELECT 1, different vCPU, transactions in 180 s",
        1_787_641.0,
        "txn",
    ),
    fig("a.s.idle", A, "pgbench -S, guest idle", 7_486.0, "tps"),
    fig(
        "a.perf.ipc.same",
        A,
        "perf stat on the backend for 10 s, client on the same vCPU: instructions per cycle",
        0.48,
        "IPC",
    ),
    fig(
        "a.perf.ipc.diff",
        A,
        "perf stat on the backend for 10 s, client on a different vCPU: instructions per cycle",
        0.40,
        "IPC",
    ),
    fig(
        "a.s.stress",
        A,
        "pgbench -S, stress-ng -c 3 beside it",
        15_681.0,
        "tps",
    ),
    fig("a.s.vcpus1", A, "pgbench -S, 1 vCPU", 17_842.0, "tps"),
    fig("a.s.vcpus2", A, "pgbench -S, 2 vCPUs", 7_485.0, "tps"),
    fig("a.s.vcpus3", A, "pgbench -S, 3 vCPUs", 7_523.0, "tps"),
    fig("a.s.vcpus4", A, "pgbench -S, 4 vCPUs", 7_486.0, "tps"),
    fig(
        "b.httpd.classic.same",
        B,
        "Apache + ab -c 1, classic, same vCPU",
        3_192.0,
        "req/s",
    ),
    fig(
        "b.httpd.classic.diff",
        B,
        "Apache + ab -c 1, classic, different vCPU",
        3_051.0,
        "req/s",
    ),
    fig(
        "b.httpd.root.same",
        B,
        "Apache + ab -c 1, root, same vCPU",
        2_947.0,
        "req/s",
    ),
    fig(
        "b.httpd.root.diff",
        B,
        "Apache + ab -c 1, root, different vCPU",
        1_855.0,
        "req/s",
    ),
    fig(
        "b.pg.classic.same",
        B,
        "pgbench SELECT 1, classic, same vCPU",
        30_747.0,
        "tps",
    ),
    fig(
        "b.pg.classic.diff",
        B,
        "pgbench SELECT 1, classic, different vCPU",
        19_519.0,
        "tps",
    ),
    fig(
        "b.pg.root.same",
        B,
        "pgbench SELECT 1, root, same vCPU",
        29_655.0,
        "tps",
    ),
    fig(
        "b.pg.root.diff",
        B,
        "pgbench SELECT 1, root, different vCPU",
        5_663.0,
        "tps",
    ),
    fig(
        "c.1.alone",
        C,
        "sysbench cpu, 1 thread, VM1 alone",
        1_271.0,
        "events/s",
    ),
    fig(
        "c.1.idle",
        C,
        "sysbench cpu, 1 thread, VM2 idle",
        1_264.0,
        "events/s",
    ),
    fig(
        "c.1.busy3",
        C,
        "sysbench cpu, 1 thread, VM2 3 busy",
        1_153.0,
        "events/s",
    ),
    fig(
        "c.1.busy4",
        C,
        "sysbench cpu, 1 thread, VM2 4 busy",
        925.0,
        "events/s",
    ),
    fig(
        "c.4.alone",
        C,
        "sysbench cpu, 4 threads, VM1 alone",
        4_683.0,
        "events/s",
    ),
    fig(
        "c.4.idle",
        C,
        "sysbench cpu, 4 threads, VM2 idle",
        4_665.0,
        "events/s",
    ),
    fig(
        "c.4.busy3",
        C,
        "sysbench cpu, 4 threads, VM2 3 busy",
        2_628.0,
        "events/s",
    ),
    fig(
        "c.4.busy4",
        C,
        "sysbench cpu, 4 threads, VM2 4 busy",
        2_302.0,
        "events/s",
    ),
    fig("e.gap", E, "8+8 beat 0+16 by up to", 0.38, "fraction"),
    fig(
        "e.overhead",
        E,
        "virtualisation overhead vs bare metal",
        0.24,
        "fraction",
    ),
    fig(
        "e.module_aware",
        E,
        "one core per module: near-ideal scaling to 16 threads (read as speedup/threads = 1)",
        1.0,
        "speedup/threads",
    ),
    fig(
        "m.pipe.same",
        ThisMachine,
        "perf bench sched pipe, same CPU",
        5.0,
        "us",
    ),
    fig(
        "m.pipe.cross",
        ThisMachine,
        "perf bench sched pipe, cross CPU",
        42.0,
        "us",
    ),
    fig(
        "m.pg.same",
        ThisMachine,
        "pgbench SELECT 1, same vCPU",
        66_000.0,
        "tps",
    ),
    fig(
        "m.pg.diff",
        ThisMachine,
        "pgbench SELECT 1, different vCPU",
        16_500.0,
        "tps",
    ),
    fig(
        "m.pg.unpinned",
        ThisMachine,
        "pgbench SELECT 1, server unpinned",
        16_000.0,
        "tps",
    ),
    fig(
        "m.pg.busy",
        ThisMachine,
        "pgbench SELECT 1, busy loop on the other vCPU",
        66_000.0,
        "tps",
    ),
    fig(
        "m.pg.poll",
        ThisMachine,
        "pgbench SELECT 1, different vCPU, guest_halt_poll_ns=100000",
        59_500.0,
        "tps",
    ),
];

/// The figure `id`. Panics on an unknown id: ids are literals in this crate, checked by a test.
pub fn get(id: &str) -> Figure {
    // invariant: every id validate asks for is in FIGURES (tested below).
    *FIGURES
        .iter()
        .find(|f| f.id == id)
        .unwrap_or_else(|| panic!("no published figure {id}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_values_positive() {
        for (i, f) in FIGURES.iter().enumerate() {
            assert!(f.value > 0.0, "{}", f.id);
            assert!(FIGURES[i + 1..].iter().all(|g| g.id != f.id), "{}", f.id);
        }
    }
}
