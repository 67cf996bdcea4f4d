//! `scale`: parallel speedup by thread count and placement policy.
//!
//! A parallel program's speedup is not a property of the program alone: field notes E's
//! work-stealing Fibonacci scaled near-ideally with one thread per module and lost up to 38%
//! when the same 16 threads doubled up modules on one socket. This experiment runs a fork-join
//! workload (or a memory-bound triad) at 1..N threads under each placement policy, repeats the
//! whole sweep (so outside load spreads over every point instead of bending one), and reports speedup and efficiency against the same policy's single
//! thread, next to how many SMT cores and L2 modules the placement doubled up, both planned
//! (from the pinned CPUs) and observed (from per-CPU utilisation during the run).
//!
//! Speedup is a ratio of two means, so its interval combines both relative errors in
//! quadrature (first-order propagation of error for a quotient).

pub mod answer;
pub mod command;
pub mod contention;
mod experiment;
pub mod policy;
mod render;
mod run;
#[cfg(test)]
pub(crate) mod test_topologies;
pub mod workload;

pub use contention::Contention;
pub use experiment::Scale;
pub use policy::Policy;
pub use run::measure;

use crate::cpulist::CpuSet;
use crate::error::bad_input;
use crate::machine::{Conditions, Machine};
use crate::stats::MeanCi;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Which parallel workload runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// Recursive Fibonacci with `rayon::join` (compute-bound, work stealing).
    Fib,
    /// STREAM triad over arrays larger than the LLCs (memory-bound).
    Triad,
}

/// What to measure; see [`ScaleSettings::quick`]. [`ScaleSettings::check`] validates it.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleSettings {
    /// Which workload runs.
    pub workload: Workload,
    /// Policies to measure, in order.
    pub policies: Vec<Policy>,
    /// Thread counts (1 is always added: it is the baseline).
    pub threads: Vec<usize>,
    /// Target length of one single-thread run (fib is sized, triad passes counted, to match).
    pub duration: Duration,
    /// Runs per point at least; more sweeps follow until [`answer`] says the question is
    /// answered or one more would pass `max_time`.
    pub repeats: usize,
    /// Time limit for the sweeps after the first `repeats`.
    pub max_time: Duration,
    /// Relative half-width of the speedup intervals that answers the question (0.10 = ±10%).
    pub target_rel: f64,
    /// Fibonacci argument; `None` calibrates it to `duration`.
    pub fib_n: Option<u32>,
    /// Below this argument the recursion runs serially.
    pub fib_cutoff: u32,
    /// Triad array size in MiB (each of three); `None` = 4x the LLCs' total, 64..=1024 MiB.
    pub triad_mib: Option<u64>,
    /// Look for other load on the allowed CPUs before measuring.
    pub check_load: bool,
}

impl ScaleSettings {
    /// Fib at 1..=allowed CPUs threads under os, compact and scatter; short runs.
    pub fn quick(machine: &Machine) -> Self {
        Self {
            workload: Workload::Fib,
            policies: vec![Policy::Os, Policy::Compact, Policy::Scatter],
            threads: (1..=machine.allowed.len().max(1)).collect(),
            duration: Duration::from_millis(300),
            repeats: 3,
            max_time: Duration::from_secs(60),
            target_rel: answer::DEFAULT_TARGET,
            fib_n: None,
            fib_cutoff: 18,
            triad_mib: None,
            check_load: true,
        }
    }

    /// Rejects settings that cannot be run, with one line naming the fix (exit 2).
    pub fn check(&self, machine: &Machine) -> Result<()> {
        let max = 4 * machine.allowed.len().max(1);
        if self.threads.is_empty() || self.threads.contains(&0) {
            return Err(bad_input(
                "--threads must list counts of at least 1, e.g. 1,2,4",
            ));
        }
        if let Some(&n) = self.threads.iter().find(|&&n| n > max) {
            return Err(bad_input(format!(
                "{n} threads is more than 4x the {} allowed CPUs; use at most {max}",
                machine.allowed.len()
            )));
        }
        if self.policies.is_empty() {
            return Err(bad_input(
                "--policy needs at least one of os, compact, scatter",
            ));
        }
        for p in &self.policies {
            if let Policy::Explicit(list) = p {
                if list.is_empty() {
                    return Err(bad_input("--order is empty; name at least one CPU"));
                }
                let set = CpuSet::from_iter_u32(list.iter().copied());
                crate::affinity::validate(&set, &machine.topology, &machine.allowed)?;
            }
        }
        // At least two: an interval needs two runs.
        crate::units::flag_count("repeats", self.repeats, 2, crate::units::MAX_REPEATS)?;
        if self.duration < Duration::from_millis(1) || self.duration > Duration::from_secs(600) {
            return Err(bad_input(
                "--duration must be between 0.001 and 600 seconds",
            ));
        }
        if !(self.target_rel > 0.0 && self.target_rel < 1.0) {
            return Err(bad_input(
                "--target-ci must be a percentage above 0 and below 100, e.g. `10`",
            ));
        }
        if self.fib_n.is_some_and(|n| !(2..=60).contains(&n)) {
            return Err(bad_input("--fib-n must be in 2..=60"));
        }
        if self.triad_mib.is_some_and(|m| !(1..=16384).contains(&m)) {
            return Err(bad_input("--triad-mib must be in 1..=16384"));
        }
        Ok(())
    }
}

fn one() -> f64 {
    1.0
}

impl ScalePoint {
    /// Each run's speedup over a single-thread run of `base_time_s`: the work it did, in
    /// single-thread runs, per time against the single thread's.
    pub fn speedup_samples(&self, base_time_s: f64) -> Vec<f64> {
        self.time_samples_s
            .iter()
            .filter(|t| **t > 0.0)
            .map(|t| base_time_s * self.work_rel / t)
            .collect()
    }
}

/// The result of `cpulab scale`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScaleReport {
    /// Kernel, CPUs, load before the run, and notes that qualify the figures.
    pub conditions: Conditions,
    /// `fib` or `triad`.
    pub workload: Workload,
    /// What one run does, in words.
    pub work: String,
    /// Fibonacci argument (fib only).
    pub fib_n: Option<u32>,
    /// Serial below this argument (fib only).
    pub fib_cutoff: Option<u32>,
    /// Size of each of the three triad arrays, in MiB (triad only).
    pub triad_array_mib: Option<f64>,
    /// Triad passes per run (triad only).
    pub triad_passes: Option<u32>,
    /// Sum of the distinct last-level caches, in KiB, when sysfs gives sizes.
    pub llc_total_kib: Option<u64>,
    /// Unit of `throughput`: `runs/s` (fib) or `GB/s` (triad, 1 GB = 1e9 bytes).
    pub throughput_unit: String,
    /// Runs per point.
    pub repeats: usize,
    /// One entry per policy, in the order asked.
    pub policies: Vec<PolicyResult>,
    /// Whether the runs answered the question (compact and scatter apart, or every interval
    /// within the target), or why not and what would; `None` in results saved before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<answer::Answer>,
}

/// Every thread count under one policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyResult {
    /// `os`, `compact`, `scatter` or `explicit`.
    pub policy: String,
    /// The CPU list of an explicit policy.
    pub explicit_cpus: Option<Vec<u32>>,
    /// One entry per thread count, 1 first.
    pub points: Vec<ScalePoint>,
    /// Worker threads that could not be pinned, with the reason.
    pub pin_failures: Vec<String>,
}

/// One thread count under one policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScalePoint {
    /// Worker threads in the pool.
    pub threads: usize,
    /// CPU of each worker thread in order; `None` when the OS placed them.
    pub cpus: Option<Vec<u32>>,
    /// The work of one run at this count, in single-thread runs (fib grows its argument with
    /// the thread count so a run stays about `--duration` long; 1 for triad, and in results
    /// saved before the work grew).
    #[serde(default = "one")]
    pub work_rel: f64,
    /// Fibonacci argument of a run at this count (fib only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fib_n: Option<u32>,
    /// Wall time of one run, in seconds.
    pub time_s: MeanCi,
    /// Every run's wall time, in seconds.
    pub time_samples_s: Vec<f64>,
    /// Runs per second (fib) or GB/s (triad).
    pub throughput: MeanCi,
    /// Mean single-thread time / mean time at this count, same policy.
    pub speedup: Option<MeanCi>,
    /// speedup / threads: 1 is perfect scaling.
    pub efficiency: Option<MeanCi>,
    /// Cores and modules doubled up by the pinned CPUs (`None` for the os policy).
    pub planned: Option<Contention>,
    /// Cores and modules with both halves busy by utilisation during the runs.
    pub observed: Option<Contention>,
    /// Mean busy percent (user+system+irq) per allowed CPU during the runs.
    pub busy_pct: BTreeMap<u32, f64>,
    /// Mean steal on the allowed CPUs during the runs, in percent.
    pub steal_pct: Option<f64>,
    /// CPUs' worth of time other processes used on the allowed CPUs during the runs (busy
    /// time minus this process's CPU time): competition that bends the curve.
    pub other_load_cpus: Option<f64>,
}
