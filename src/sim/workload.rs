//! What the guests run: CPU-bound threads, request/response pairs, fork-join work.
//!
//! Each workload of the field notes reduces to tasks that alternate between running a burst of
//! work and blocking on another task, and the model needs only three shapes of that: a CPU-bound
//! thread that never blocks (sysbench cpu, stress-ng; field notes C), a client and a server that
//! hand one request back and forth with fixed service times (pgbench -c 1, ab -c 1; field notes
//! A and B), and workers that pull chunks of a shared pool until it is empty (work-stealing
//! Fibonacci; field notes E). Service times are inputs, taken from a same-vCPU measurement;
//! everything the placement adds on top of them is what the simulator predicts.

use crate::error::bad_input;
use anyhow::Result;
use serde::{Deserialize, Serialize};

/// One workload inside a VM, as a scenario file writes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum WorkloadSpec {
    /// CPU-bound threads; throughput is work units per second.
    Cpu {
        threads: u32,
        /// CPU time of one work unit at full speed, microseconds.
        #[serde(default = "default_unit_us")]
        unit_us: f64,
        /// Pin thread i to the i-th of these vCPUs (round robin), like `taskset` in the guest.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        vcpus: Option<Vec<u32>>,
    },
    /// One client and one server exchanging one request at a time (pgbench -c 1, ab -c 1).
    Pair {
        /// Client CPU time per transaction, microseconds.
        client_us: f64,
        /// Server CPU time per transaction, microseconds.
        server_us: f64,
        /// vCPU the client is pinned to; unpinned when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client_vcpu: Option<u32>,
        /// vCPU the server is pinned to; unpinned when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server_vcpu: Option<u32>,
    },
    /// Workers pulling equal chunks from one pool until it is empty (work-stealing fork-join).
    ForkJoin {
        threads: u32,
        /// Total CPU time of the job at full speed, milliseconds.
        work_ms: f64,
        /// CPU time of one chunk, microseconds.
        #[serde(default = "default_chunk_us")]
        chunk_us: f64,
    },
}

/// Threads one workload may have: far more than any field-notes VM, small enough to simulate.
pub const MAX_THREADS: u32 = 4096;

fn default_unit_us() -> f64 {
    1000.0
}

fn default_chunk_us() -> f64 {
    1000.0
}

impl WorkloadSpec {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Cpu { .. } => "cpu",
            Self::Pair { .. } => "pair",
            Self::ForkJoin { .. } => "fork-join",
        }
    }

    /// Rejects what cannot run in a VM of `vcpus` vCPUs (one line, exit 2).
    pub fn check(&self, vcpus: u32, vm: &str) -> Result<()> {
        let pos = |v: f64, what: &str| -> Result<()> {
            if v.is_finite() && v > 0.0 && v <= 1e9 {
                Ok(())
            } else {
                Err(bad_input(format!(
                    "VM {vm}: {what} = {v} must be a positive number"
                )))
            }
        };
        let threads_ok = |n: u32| -> Result<()> {
            if (1..=MAX_THREADS).contains(&n) {
                Ok(())
            } else {
                Err(bad_input(format!(
                    "VM {vm}: threads = {n}; give 1 to {MAX_THREADS}"
                )))
            }
        };
        let vcpu_ok = |v: Option<u32>, what: &str| -> Result<()> {
            match v {
                Some(i) if i >= vcpus => Err(bad_input(format!(
                    "VM {vm}: {what} = {i}, but the VM has vCPUs 0-{}",
                    vcpus - 1
                ))),
                _ => Ok(()),
            }
        };
        match self {
            Self::Cpu {
                threads,
                unit_us,
                vcpus: list,
            } => {
                threads_ok(*threads)?;
                pos(*unit_us, "unit_us")?;
                if let Some(l) = list {
                    if l.is_empty() {
                        return Err(bad_input(format!("VM {vm}: vcpus = [] names no vCPU")));
                    }
                    for &i in l {
                        vcpu_ok(Some(i), "vcpus")?;
                    }
                }
            }
            Self::Pair {
                client_us,
                server_us,
                client_vcpu,
                server_vcpu,
            } => {
                pos(*client_us, "client_us")?;
                pos(*server_us, "server_us")?;
                vcpu_ok(*client_vcpu, "client_vcpu")?;
                vcpu_ok(*server_vcpu, "server_vcpu")?;
            }
            Self::ForkJoin {
                threads,
                work_ms,
                chunk_us,
            } => {
                threads_ok(*threads)?;
                pos(*work_ms, "work_ms")?;
                pos(*chunk_us, "chunk_us")?;
                if work_ms * 1000.0 / chunk_us > 1e7 {
                    return Err(bad_input(format!(
                        "VM {vm}: work_ms / chunk_us makes more than 10 million chunks; \
                         use larger chunks"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// What a task does when its burst ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Counts a unit and runs another.
    Cpu,
    /// Counts a transaction, wakes its server and blocks.
    Client { peer: u32 },
    /// Wakes its client and blocks.
    Server { peer: u32 },
    /// Counts a chunk and takes the next from its workload's pool, or stops.
    Worker,
}

/// What one workload did over a run (raw counts; rates are derived in the report).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    /// Units, transactions or chunks completed.
    pub units: u64,
    /// Chunks left in a fork-join pool.
    pub pool: u64,
    /// Time the last chunk finished (fork-join), ns.
    pub finished_at: Option<u64>,
    /// Work done at full-speed-equivalent, ns (for the conservation check).
    pub work_ns: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_outside_the_vm_are_bad_input() {
        let w = WorkloadSpec::Pair {
            client_us: 5.0,
            server_us: 10.0,
            client_vcpu: Some(4),
            server_vcpu: Some(0),
        };
        let e = w.check(4, "vm1").unwrap_err();
        assert!(format!("{e}").contains("vCPUs 0-3"));
        assert!(w.check(5, "vm1").is_ok());
        let f = WorkloadSpec::ForkJoin {
            threads: 0,
            work_ms: 1.0,
            chunk_us: 1.0,
        };
        assert!(f.check(4, "vm1").is_err());
        let many = WorkloadSpec::Cpu {
            threads: MAX_THREADS + 1,
            unit_us: 1.0,
            vcpus: None,
        };
        assert!(format!("{}", many.check(4, "vm1").unwrap_err()).contains("1 to 4096"));
    }
}
