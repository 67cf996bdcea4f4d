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

    /// Rejects what cannot run in a VM of `vcpus` vCPUs for `duration_ms` (one line, exit 2):
    /// each time within its range ([`MIN_WORK_US`] to one second of CPU time; a job within
    /// [`MAX_WORK_MS`]), and no more bursts per task than the engine can simulate the same day.
    pub fn check(&self, vcpus: u32, vm: &str, duration_ms: f64) -> Result<()> {
        let work_us = |v: f64, what: &str| -> Result<()> {
            crate::sim::params::in_range(
                &format!("VM {vm}: {what}"),
                v,
                MIN_WORK_US..=MAX_WORK_US,
                "0.01 to 1000000 microseconds (10 ns to one second)",
            )
        };
        // The bursts one task runs in the simulated time, at most (each ends in one or more
        // events); a burst of 10 ns over 1000 s would be 1e11 of them and never finish.
        let bursts = |burst_us: f64, what: &str| -> Result<()> {
            let n = duration_ms * 1e3 / burst_us;
            if n > MAX_BURSTS {
                return Err(bad_input(format!(
                    "VM {vm}: {what} over duration_ms = {} makes {} bursts per task; the \
                     simulator runs at most 1e8: give more work per burst or a shorter duration_ms",
                    crate::units::fmt_given(duration_ms),
                    crate::units::fmt_given(n.round())
                )));
            }
            Ok(())
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
                    vcpus.saturating_sub(1)
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
                work_us(*unit_us, "unit_us")?;
                bursts(*unit_us, "unit_us")?;
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
                work_us(*client_us, "client_us")?;
                work_us(*server_us, "server_us")?;
                bursts(client_us + server_us, "client_us + server_us")?;
                vcpu_ok(*client_vcpu, "client_vcpu")?;
                vcpu_ok(*server_vcpu, "server_vcpu")?;
            }
            Self::ForkJoin {
                threads,
                work_ms,
                chunk_us,
            } => {
                threads_ok(*threads)?;
                crate::sim::params::in_range(
                    &format!("VM {vm}: work_ms"),
                    *work_ms,
                    MIN_WORK_US / 1e3..=MAX_WORK_MS,
                    "0.00001 to 1000000 milliseconds (10 ns to 1000 s)",
                )?;
                work_us(*chunk_us, "chunk_us")?;
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

/// The shortest burst of work: 10 ns, a few instructions. The field-notes pairs are 0.5 us and
/// up; a shorter burst only multiplies events.
pub const MIN_WORK_US: f64 = 0.01;
/// The longest burst of work: one second of CPU time.
pub const MAX_WORK_US: f64 = 1e6;
/// The most work of one fork-join job: 1000 s of CPU time (a simulated run lasts at most that).
pub const MAX_WORK_MS: f64 = 1e6;
/// The most bursts one task may run in the simulated time.
const MAX_BURSTS: f64 = 1e8;

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
        let e = w.check(4, "vm1", 1000.0).unwrap_err();
        assert!(format!("{e}").contains("vCPUs 0-3"));
        assert!(w.check(5, "vm1", 1000.0).is_ok());
        let f = WorkloadSpec::ForkJoin {
            threads: 0,
            work_ms: 1.0,
            chunk_us: 1.0,
        };
        assert!(f.check(4, "vm1", 1000.0).is_err());
        let many = WorkloadSpec::Cpu {
            threads: MAX_THREADS + 1,
            unit_us: 1.0,
            vcpus: None,
        };
        assert!(format!("{}", many.check(4, "vm1", 1000.0).unwrap_err()).contains("1 to 4096"));
    }

    /// Every time has a range, quoted short; once `unit_us = 1e-300` ran without end and a
    /// huge one was printed in full.
    #[test]
    fn work_times_outside_their_range_are_one_line_naming_field_value_and_range() {
        let cpu = |unit_us: f64| WorkloadSpec::Cpu {
            threads: 1,
            unit_us,
            vcpus: None,
        };
        assert!(cpu(0.01).check(1, "vm1", 1000.0).is_ok());
        assert!(cpu(1e6).check(1, "vm1", 1000.0).is_ok());
        for bad in [
            0.0,
            -1.0,
            1e-300,
            0.009,
            1e6 + 1.0,
            1e300,
            f64::NAN,
            f64::INFINITY,
        ] {
            let e = cpu(bad).check(1, "vm1", 1000.0).unwrap_err();
            let m = format!("{e:#}");
            assert_eq!(crate::error::exit_code(&e), 2, "{m}");
            assert!(m.starts_with("VM vm1: unit_us = "), "{m}");
            assert!(m.contains("give 0.01 to 1000000 microseconds"), "{m}");
            assert!(m.len() < 150, "{m}");
        }
        let pair = |client_us: f64| WorkloadSpec::Pair {
            client_us,
            server_us: 10.0,
            client_vcpu: None,
            server_vcpu: None,
        };
        let m = format!("{:#}", pair(1e300).check(1, "db", 1000.0).unwrap_err());
        assert!(m.contains("client_us = 1e300 is out of range"), "{m}");
        let fj = WorkloadSpec::ForkJoin {
            threads: 2,
            work_ms: 1e300,
            chunk_us: 1000.0,
        };
        let m = format!("{:#}", fj.check(2, "e", 1000.0).unwrap_err());
        assert!(m.contains("work_ms = 1e300 is out of range"), "{m}");
    }

    /// Short bursts over a long simulated time would never finish: refused before the engine
    /// starts, naming both.
    #[test]
    fn more_bursts_than_the_engine_runs_are_refused() {
        let cpu = WorkloadSpec::Cpu {
            threads: 1,
            unit_us: 0.01,
            vcpus: None,
        };
        assert!(cpu.check(1, "vm1", 1000.0).is_ok(), "1e8 bursts: the most");
        let m = format!("{:#}", cpu.check(1, "vm1", 1e6).unwrap_err());
        assert!(m.contains("makes 1e11 bursts per task"), "{m}");
    }
}
