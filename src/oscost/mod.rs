//! `oscost`: what the operating system's primitives cost here, in nanoseconds per operation.
//!
//! Field notes D: an upgrade from CentOS 6 to 7 made a batch job 14% slower; vmstat showed more
//! system time and UnixBench lost every test but Dhrystone. Kernel updates, mitigations and
//! virtualisation change the price of entering the kernel, switching, creating processes and
//! faulting pages, and the only fair comparison is the same measurement before and after. So
//! every run measures the same list of primitives, in the same order, under the same names,
//! with every batch's figure kept: two reports compare entry by entry with a significance test.
//! A primitive that cannot run here keeps its place in the list with the reason.
//!
//! Everything runs pinned to one CPU (the calling thread's affinity is restored afterwards), so
//! no figure includes a migration or a cross-CPU wakeup. The effective-frequency probe
//! (`freq`) runs last, on the same CPU.

pub mod batch;
pub mod clock;
pub mod command;
mod experiment;
pub mod freq;
pub mod platform;
pub mod primitives;
mod render;
pub mod switch;

pub use experiment::Oscost;

use crate::error::bad_input;
use crate::experiment::{LoadWatch, Progress};
use crate::machine::{Conditions, Machine};
use crate::stats::MeanCi;
use anyhow::Result;
use batch::Primitive;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What to measure. [`OscostSettings::standard`] and [`OscostSettings::quick`] are ready-made.
#[derive(Clone, Debug, PartialEq)]
pub struct OscostSettings {
    /// CPU to pin to; `None` = the first allowed CPU.
    pub cpu: Option<u32>,
    /// Timed batches per primitive.
    pub batches: usize,
    /// Approximate length of one batch.
    pub batch_target: Duration,
    /// The effective-frequency probe; `None` skips it.
    pub frequency: Option<freq::FreqSettings>,
    /// Look for other load on the CPU before measuring.
    pub check_load: bool,
}

impl OscostSettings {
    pub fn standard() -> Self {
        Self {
            cpu: None,
            batches: 30,
            batch_target: Duration::from_millis(5),
            frequency: Some(freq::FreqSettings::standard()),
            check_load: true,
        }
    }

    /// Fewer, shorter batches and a shorter frequency probe (a few seconds in all).
    pub fn quick() -> Self {
        Self {
            cpu: None,
            batches: 10,
            batch_target: Duration::from_millis(2),
            frequency: Some(freq::FreqSettings::quick()),
            check_load: true,
        }
    }

    /// Rejects settings that cannot be run, with one line naming the fix (exit 2).
    pub fn check(&self, machine: &Machine) -> Result<()> {
        if let Some(c) = self.cpu {
            crate::affinity::validate(
                &crate::cpulist::CpuSet::from_iter_u32([c]),
                &machine.topology,
                &machine.allowed,
            )?;
        }
        if !(2..=10_000).contains(&self.batches) {
            return Err(bad_input("--batches must be in 2..=10000"));
        }
        if self.batch_target < Duration::from_micros(10)
            || self.batch_target > Duration::from_secs(10)
        {
            return Err(bad_input("--batch-ms must be between 0.01 and 10000"));
        }
        if let Some(f) = &self.frequency
            && (f.trials < 1 || f.slice.is_zero() || f.load < f.slice)
        {
            return Err(bad_input(
                "the frequency probe needs a trial and a load longer than a slice",
            ));
        }
        Ok(())
    }
}

/// The result of `cpulab oscost`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OscostReport {
    /// Kernel, CPUs, load before the run, and notes that qualify the figures.
    pub conditions: Conditions,
    /// Mitigations, clocksource, THP: what a comparison must hold equal or explain.
    pub platform: platform::OsPlatform,
    /// The CPU everything ran on.
    pub cpu: u32,
    /// Timed batches per primitive.
    pub batches: usize,
    /// Every primitive, always the same names in the same order.
    pub ops: Vec<OpCost>,
    /// The effective-frequency probe; `None` when skipped.
    pub frequency: Option<freq::FreqReport>,
}

/// One primitive's cost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpCost {
    /// Stable identifier (`syscall_getppid`, `pipe_round_trip_same_cpu`, ...).
    pub name: String,
    /// What one operation is.
    pub what: String,
    /// Always `ns/op`.
    pub unit: String,
    /// Operations per timed batch.
    pub ops_per_batch: u64,
    /// Mean nanoseconds per operation over the batches, with its 95% interval.
    pub per_op_ns: Option<MeanCi>,
    /// Median of the batches' per-operation figures, in ns.
    pub median_ns: Option<f64>,
    /// Fastest batch's per-operation figure, in ns.
    pub min_ns: Option<f64>,
    /// Every batch's nanoseconds per operation (batch time / ops_per_batch), in order.
    pub batch_samples_ns: Vec<f64>,
    /// A kernel counter read around the batches, per operation, as a check on what was
    /// measured (minor faults per page, switches per yield).
    pub counted: Option<Counted>,
    /// Why this primitive could not be measured here; `None` when it was.
    pub unavailable: Option<String>,
}

/// A verification counter, per operation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Counted {
    /// Which counter (`minor_faults`, `context_switches`, ...), from getrusage(RUSAGE_THREAD).
    pub counter: String,
    /// Its change over all timed batches divided by the operations in them.
    pub per_op: f64,
    /// What a sane value is.
    pub expected: String,
}

impl OpCost {
    /// An entry for a primitive that could not be measured, same shape as any other.
    pub fn unavailable(name: &str, what: String, reason: String) -> Self {
        Self {
            name: name.to_string(),
            what,
            unit: "ns/op".into(),
            ops_per_batch: 0,
            per_op_ns: None,
            median_ns: None,
            min_ns: None,
            batch_samples_ns: Vec::new(),
            counted: None,
            unavailable: Some(reason),
        }
    }
}

/// Restores the calling thread's affinity when dropped.
struct RestoreAffinity(Option<crate::cpulist::CpuSet>);

impl Drop for RestoreAffinity {
    fn drop(&mut self) {
        if let Some(set) = &self.0 {
            let _ = crate::affinity::set(0, set);
        }
    }
}

/// The CPU the primitives run on: the one the settings name, else the first allowed.
fn cpu_of(machine: &Machine, settings: &OscostSettings) -> Result<u32> {
    settings
        .cpu
        .or_else(|| machine.allowed.first())
        .ok_or_else(|| bad_input("no CPU is allowed to this process"))
}

/// That one CPU, watched for other load for 300 ms unless the settings say not to.
pub fn load_watch(machine: &Machine, settings: &OscostSettings) -> Result<LoadWatch> {
    Ok(LoadWatch {
        cpus: crate::cpulist::CpuSet::from_iter_u32([cpu_of(machine, settings)?]),
        window: Duration::from_millis(300),
        enabled: settings.check_load,
    })
}

/// Measures every primitive, then the frequency probe, pinned to one CPU, under `conditions`.
pub fn measure(
    machine: &Machine,
    settings: &OscostSettings,
    conditions: Conditions,
    progress: &Progress,
) -> Result<OscostReport> {
    let cpu = cpu_of(machine, settings)?;
    let _restore = RestoreAffinity(crate::affinity::get(0).ok());
    crate::affinity::pin_self(cpu)?;

    let mut ops = Vec::new();
    for name in PRIMITIVES {
        // A signal stops the run between primitives (and between batches, see `batch`).
        crate::signals::check()?;
        progress.step(&format!("oscost: {name}"));
        let cost = match make(name, cpu) {
            Ok(mut p) => batch::measure(p.as_mut(), settings.batches, settings.batch_target),
            Err(e) => OpCost::unavailable(name, String::new(), format!("{e:#}")),
        };
        ops.push(cost);
    }
    crate::signals::check()?;
    let frequency = settings.frequency.as_ref().map(|f| {
        progress.step("oscost: effective frequency, cold and warm");
        freq::run(f, &machine.root)
    });
    Ok(OscostReport {
        conditions,
        platform: platform::OsPlatform::read(&machine.root),
        cpu,
        batches: settings.batches,
        ops,
        frequency,
    })
}

/// Every primitive, in report order. Names are the comparison keys: never rename one.
pub const PRIMITIVES: &[&str] = &[
    "syscall_getppid",
    "clock_gettime",
    "pipe_round_trip_same_cpu",
    "context_switch_yield",
    "thread_create_join",
    "fork_exit_wait",
    "fork_exec_wait",
    "page_fault",
    "mmap_munmap_64k",
];

fn make(name: &str, cpu: u32) -> Result<Box<dyn Primitive>> {
    use primitives::*;
    Ok(match name {
        "syscall_getppid" => Box::new(Getppid),
        "clock_gettime" => Box::new(ClockGettime),
        "pipe_round_trip_same_cpu" => Box::new(switch::PipeRoundTrip::new(cpu)?),
        "context_switch_yield" => Box::new(switch::YieldSwitch::new(cpu)),
        "thread_create_join" => Box::new(ThreadCreate),
        "fork_exit_wait" => Box::new(ForkExit),
        "fork_exec_wait" => Box::new(ForkExec::new()?),
        "page_fault" => Box::new(PageFault),
        "mmap_munmap_64k" => Box::new(MmapMunmap),
        other => anyhow::bail!("unknown primitive {other}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_primitive_exists_under_its_own_name() {
        for name in PRIMITIVES {
            match make(name, 0) {
                Ok(p) => assert_eq!(p.name(), *name),
                // Only fork_exec may be missing (no /bin/true on the test system).
                Err(e) => assert_eq!(*name, "fork_exec_wait", "{e:#}"),
            }
        }
    }

    #[test]
    fn presets_are_valid() {
        let m = Machine::detect(std::path::Path::new("/")).unwrap();
        OscostSettings::standard().check(&m).unwrap();
        OscostSettings::quick().check(&m).unwrap();
    }
}
