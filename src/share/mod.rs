//! `share`: how much CPU a CPU-bound program gets beside noisy neighbours, against the
//! fair-share model.
//!
//! Field notes C measured sysbench cpu in one VM while another VM ran `stress-ng -c N`, and
//! found the throughput fell exactly as "physical cores / running vCPUs" predicts. This
//! experiment reproduces that inside one machine: T workers run a deterministic kernel alone,
//! then beside B burners, and each worker's rate is divided by its rate alone. Next to every
//! measured share stands the model's, and the two things that can make them differ without any
//! local neighbour: steal time (a neighbour outside this VM takes the physical CPU; it shows up
//! as `steal`, not as a process) and the cgroup's CFS quota (throttled periods).
//!
//! Each configuration is repeated, round-robin with the alone run, so drift hits all of them
//! alike; the interval is over repeats. Workers and burners are threads of this process, so
//! nothing outlives it.

pub mod cgroup;
pub mod command;
mod experiment;
pub mod model;
mod render;
mod run;

pub use crate::load::OTHER_LOAD_NOISY_CPUS;
pub use experiment::Share;
pub use run::measure;

use crate::cpulist::CpuSet;
use crate::error::bad_input;
use crate::machine::{Conditions, Machine};
use crate::stats::MeanCi;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What to measure. Build one with [`ShareSettings::single`], [`ShareSettings::sweep`] or
/// [`ShareSettings::quick`], or field by field; [`ShareSettings::check`] validates it.
#[derive(Clone, Debug, PartialEq)]
pub struct ShareSettings {
    /// Worker thread counts to measure (each also measured alone).
    pub threads: Vec<usize>,
    /// Burner counts to measure beside each worker count (0 is implied: the alone run).
    pub burners: Vec<usize>,
    /// Burner duty cycle, in percent (1..=100).
    pub duty_pct: f64,
    /// Length of one burner busy/sleep cycle.
    pub duty_period: Duration,
    /// Pin burners round-robin to these CPUs; `None` lets the scheduler place them.
    pub burner_cpus: Option<CpuSet>,
    /// Length of one measured run.
    pub duration: Duration,
    /// Runs per configuration (for the confidence interval).
    pub repeats: usize,
    /// Upper bound of the prime search: the size of one work unit.
    pub max_prime: u64,
    /// Look for other load on the allowed CPUs before measuring.
    pub check_load: bool,
}

/// The largest `--max-prime`: 100 times sysbench's 10000. A unit is checked for the stop flag
/// only between units, so one far longer than a run would keep the run going past its end.
pub const MAX_PRIME: u64 = 1_000_000;

impl ShareSettings {
    /// T workers beside B busy burners, with the defaults for everything else.
    pub fn single(threads: usize, burners: usize) -> Self {
        Self {
            threads: vec![threads],
            burners: vec![burners],
            duty_pct: 100.0,
            duty_period: Duration::from_millis(10),
            burner_cpus: None,
            duration: Duration::from_secs(1),
            repeats: 3,
            max_prime: 10_000,
            check_load: true,
        }
    }

    /// Every worker count 1..=allowed CPUs beside every burner count 1..=allowed CPUs.
    pub fn sweep(machine: &Machine) -> Self {
        let n = machine.allowed.len().max(1);
        Self {
            threads: (1..=n).collect(),
            burners: (1..=n).collect(),
            ..Self::single(1, 1)
        }
    }

    /// The fair-share check the doctor runs: as many workers and busy burners as allowed CPUs
    /// (model: 50%), short runs.
    pub fn quick(machine: &Machine) -> Self {
        let n = machine.allowed.len().max(1);
        Self {
            duration: Duration::from_millis(500),
            ..Self::single(n, n)
        }
    }

    /// Rejects settings that cannot be run, with one line naming the fix (exit 2).
    pub fn check(&self, machine: &Machine) -> Result<()> {
        if self.threads.is_empty() || self.threads.contains(&0) {
            return Err(bad_input("--threads must be at least 1"));
        }
        if self.threads.iter().chain(&self.burners).any(|&n| n > 1024) {
            return Err(bad_input("--threads and --burners are limited to 1024"));
        }
        if !(self.duty_pct > 0.0 && self.duty_pct <= 100.0) {
            return Err(bad_input("--duty must be a percentage in 1..=100"));
        }
        crate::units::flag_count("repeats", self.repeats, 1, crate::units::MAX_REPEATS)?;
        if self.duration < Duration::from_millis(10) || self.duration > Duration::from_secs(600) {
            return Err(bad_input("--duration must be between 0.01 and 600 seconds"));
        }
        if self.duty_period.is_zero() {
            return Err(bad_input("the burner duty period must be positive"));
        }
        if !(3..=MAX_PRIME).contains(&self.max_prime) {
            return Err(bad_input(format!(
                "--max-prime {}: give 3 to {MAX_PRIME} (10000 is sysbench's); a larger work \
                 unit would not finish within a run",
                self.max_prime
            )));
        }
        // Burner flags beside no burner at all were dropped without a word.
        let no_burner = self.burners.iter().all(|&b| b == 0);
        if no_burner && (self.burner_cpus.is_some() || self.duty_pct != 100.0) {
            return Err(bad_input(
                "--burner-cpus and --duty shape the burners, and --burners 0 runs none; give \
                 --burners 1 or more, or leave them out",
            ));
        }
        if let Some(c) = &self.burner_cpus {
            if c.is_empty() {
                return Err(bad_input("--burner-cpus is empty; name at least one CPU"));
            }
            crate::affinity::validate(c, &machine.topology, &machine.allowed)?;
        }
        Ok(())
    }
}

/// The result of `cpulab share`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShareReport {
    /// Kernel, CPUs, load before the run, and notes that qualify the figures.
    pub conditions: Conditions,
    /// The work unit: one sysbench-cpu-style event, primality of 3..=max_prime by trial division.
    pub max_prime: u64,
    /// CPUs the model shares out: allowed CPUs, or the cgroup quota in CPUs when smaller.
    pub usable_cpus: f64,
    /// Why `usable_cpus` is what it is.
    pub usable_cpus_from: String,
    /// The workers' CPU cgroup (quota and throttling); `None` when unreadable (see notes).
    pub cgroup: Option<cgroup::CgroupCpu>,
    /// Burner duty cycle in percent.
    pub duty_pct: f64,
    /// CPUs burners were pinned to, round-robin; `None` = placed by the scheduler.
    pub burner_cpus: Option<CpuSet>,
    /// Requested length of each run, in seconds (rates divide by the measured interval).
    pub requested_duration_s: f64,
    /// Runs per configuration.
    pub repeats: usize,
    /// One entry per (workers, burners) configuration; burners = 0 is the alone baseline.
    pub configs: Vec<ShareConfig>,
}

/// One (workers, burners) configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShareConfig {
    /// Worker threads.
    pub threads: usize,
    /// Burner threads beside them (0 = the alone baseline).
    pub burners: usize,
    /// Model: fraction of one CPU each worker gets (max-min fair share).
    pub model_cpu_share: f64,
    /// Model: each worker's throughput relative to the same workers alone.
    pub model_relative: f64,
    /// Measured: mean worker throughput relative to the alone runs' mean (mean of repeats).
    /// For burners = 0 this is the alone runs against themselves: their own noise around 1.
    pub relative: Option<MeanCi>,
    /// Measured minus model relative share, in percentage points.
    pub deviation_pp: Option<f64>,
    /// Lowest and highest single-worker relative share over all runs (fairness between workers).
    pub worker_relative_min: Option<f64>,
    /// See `worker_relative_min`.
    pub worker_relative_max: Option<f64>,
    /// Work units per second per worker (mean of repeats of the per-run worker mean).
    pub worker_rate_per_s: Option<MeanCi>,
    /// CPU time each worker got, as a fraction of its interval (from its thread CPU clock).
    pub worker_cpu_share: Option<MeanCi>,
    /// CPU time each burner got, as a fraction of the run; `None` without burners.
    pub burner_cpu_share: Option<MeanCi>,
    /// Steal time on the allowed CPUs during the runs, in percent.
    pub steal_pct: Option<MeanCi>,
    /// CPUs' worth of time other processes took on the allowed CPUs during the runs (busy
    /// time from /proc/stat minus this process's CPU time): local competition the model
    /// does not include.
    pub other_load_cpus: Option<MeanCi>,
    /// Cgroup throttling summed over the runs; `None` when the cgroup is unreadable.
    pub throttle: Option<cgroup::ThrottleDelta>,
    /// Raw per-run figures.
    pub runs: Vec<ShareRun>,
}

/// One measured run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShareRun {
    /// From opening the start gate to the last worker stopping, as measured, in seconds.
    pub interval_s: f64,
    /// Complete work units per worker.
    pub worker_events: Vec<u64>,
    /// Work units per second per worker (events / that worker's own measured interval).
    pub worker_rate_per_s: Vec<f64>,
    /// Each worker's rate relative to the mean per-worker rate of the alone runs.
    pub worker_relative: Vec<f64>,
    /// Each worker's CPU time / its interval.
    pub worker_cpu_share: Vec<f64>,
    /// Each burner's CPU time / the run interval.
    pub burner_cpu_share: Vec<f64>,
    /// Mean steal on the allowed CPUs, in percent; `None` when /proc/stat is unreadable.
    pub steal_pct: Option<f64>,
    /// CPUs' worth of time other processes used on the allowed CPUs during this run.
    pub other_load_cpus: Option<f64>,
    /// Cgroup throttling during this run.
    pub throttle: Option<cgroup::ThrottleDelta>,
}
