//! What the doctor measured, in the shape its rules read.
//!
//! Each experiment module (`pingpong`, `pair`, `share`, `scale`, `oscost`) has its own result
//! type; the doctor condenses each into the few figures its rules need, every one with its raw
//! samples so `cpulab compare` can test two doctor runs against each other. Keeping the rules on
//! these small types (rather than on the modules' full reports) is what lets them be unit-tested
//! on hand-built inputs, and lets an experiment's report grow without touching a rule.
//! `doctor::adapt` is the only code that knows both sides (pingpong condenses its own).

use crate::cpulist::CpuSet;
use crate::stats::MeanCi;
use crate::topology::PlacementClass;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Probe facts the rules use as context. A fact never makes a finding on its own.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Facts {
    /// Hypervisor vendor seen by the guest (`KVM`, `Microsoft Hv`, ...); `None` on bare metal
    /// or when it could not be told.
    pub hypervisor: Option<String>,
    /// Container runtime, when inside one.
    pub container: Option<String>,
    /// cpuidle driver (`haltpoll`, `intel_idle`, `acpi_idle`, ...).
    pub cpuidle_driver: Option<String>,
    /// `/sys/module/haltpoll/parameters/guest_halt_poll_ns`, when the module is loaded.
    pub guest_halt_poll_ns: Option<u64>,
    /// KVM poll control is offered: with the haltpoll driver the guest then turns the host's
    /// halt polling off for itself.
    pub kvm_poll_control: bool,
    /// cpufreq governor, `None` when the VM does not expose cpufreq.
    pub cpufreq_governor: Option<String>,
    /// Energy-performance preference, when exposed.
    pub energy_perf_preference: Option<String>,
    /// Active mitigations: (vulnerability, state) for every entry that is not "Not affected".
    pub mitigations: Vec<(String, String)>,
    /// cgroup CPU quota in CPUs (quota / period), `None` when unlimited.
    pub cpu_quota_cpus: Option<f64>,
    /// The cgroup the quota applies to, for remedies.
    pub cgroup_path: Option<String>,
    /// cgroup version (1 or 2), for remedies.
    pub cgroup_version: Option<u8>,
    pub online_cpus: CpuSet,
    pub allowed_cpus: CpuSet,
    /// This process's affinity mask, when read (live machine only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity_cpus: Option<CpuSet>,
    /// The CPUs the cgroup cpuset allows, and the file that says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpuset_cpus: Option<CpuSet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpuset_file: Option<String>,
    pub smt_active: bool,
    /// Groups of CPUs sharing an L2 that is not the last level (AMD modules), when any.
    pub shared_l2_groups: usize,
    /// CPU model name.
    pub cpu_model: Option<String>,
    /// Whether hardware perf counters can be opened, with the reason when not.
    pub hardware_counters: Option<String>,
    /// Where this runs, from what the guest can see: decides the mechanism words and remedies.
    #[serde(default)]
    pub environment: Environment,
    /// What the environment was told from (CPUID, DMI, clocksource, guest modules).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub environment_evidence: Vec<String>,
    /// The deepest enabled idle state of the first usable CPU: name and exit latency in us.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deepest_idle_state: Option<(String, u64)>,
    /// The active tuned profile, when tuned is installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tuned_profile: Option<String>,
}

/// One wakeup round-trip run (from `pingpong`): condensed by the experiment itself.
pub use crate::pingpong::summary::WakeupRun;

/// A throughput test where many tasks communicate, under one placement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThroughputRun {
    /// Which test (`messaging`).
    pub test: String,
    /// `packed` (every task on one CPU), `spread` (tasks across the allowed CPUs), `os`.
    pub placement: String,
    pub cpus: CpuSet,
    pub messages_per_s: MeanCi,
    /// Raw per-repetition rates.
    pub samples_per_s: Vec<f64>,
    /// Counters per message (idle entries, IPIs, switches).
    pub per_message: BTreeMap<String, f64>,
}

/// The cost of one OS primitive (from `oscost`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrimitiveCost {
    /// `syscall_getppid`, `clock_gettime`, `pipe_round_trip_same_cpu`, `context_switch_yield`,
    /// `thread_create_join`, ... (the names `cpulab oscost` uses).
    pub name: String,
    pub cost_ns: MeanCi,
    pub samples_ns: Vec<f64>,
    /// The fastest batch's cost: interference only adds time, so this is the cost with the
    /// least of it.
    pub min_ns: Option<f64>,
}

/// Effective frequency of a dependent loop timed cold (after idle) and warm (after load): in
/// MHz when the clock check accepted the loop as a clock, else the loop rate (iterations per
/// us), whose cold/warm ratio alone is meaningful.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FrequencyRamp {
    pub cold_mhz: MeanCi,
    pub warm_mhz: MeanCi,
    pub cold_samples_mhz: Vec<f64>,
    pub warm_samples_mhz: Vec<f64>,
    /// Time until the loop reached 95% of its warm speed, when measured.
    pub ramp_up_ms: Option<f64>,
    /// True when the clock check accepted the loop as a clock, so the MHz figures are clock
    /// MHz (false: only the ratio is meaningful).
    pub clock_mhz: bool,
    /// The clock check: what converting time to cycles uses, and why.
    #[serde(default)]
    pub clock: Option<crate::oscost::clock::ClockCheck>,
}

/// OS primitive costs and the frequency ramp.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OsCosts {
    pub primitives: Vec<PrimitiveCost>,
    pub frequency: Option<FrequencyRamp>,
}

impl OsCosts {
    pub fn get(&self, name: &str) -> Option<&PrimitiveCost> {
        self.primitives.iter().find(|p| p.name == name)
    }
}

/// The quick share check: CPU-bound workers, one per allowed CPU, against one worker alone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShareCheck {
    pub workers: usize,
    /// Each worker's throughput relative to one worker running alone, per repetition (0..1+).
    pub share_samples: Vec<f64>,
    pub share: MeanCi,
    /// The fair-share model's prediction given the other load seen: min(1, cpus / (workers +
    /// busy tasks)).
    pub model_share: f64,
    /// Other runnable load on the CPUs (in CPUs' worth) seen during the check.
    pub other_load_cpus: f64,
    /// Mean steal during the check, percent.
    pub steal_pct: f64,
}

/// One point of a parallel scaling curve (from `scale`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScalePoint {
    /// `fib`, `triad`.
    pub workload: String,
    /// `os`, `compact`, `scatter`.
    pub policy: String,
    pub threads: usize,
    pub speedup: MeanCi,
    pub speedup_samples: Vec<f64>,
    /// SMT cores or L2 modules with both halves busy.
    pub contended_groups: Option<usize>,
}

/// A real application preset under one placement (from `pair`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PresetRun {
    /// `pgbench`, `http`.
    pub preset: String,
    /// What ran: `pgbench SELECT 1`, `apache2 + ab -c 1`.
    pub workload: String,
    /// Placement label: `same-cpu`, `shared-llc`, `server-pinned`, `unpinned`, ...
    pub placement: String,
    pub class: Option<PlacementClass>,
    pub per_s: MeanCi,
    pub samples_per_s: Vec<f64>,
    /// Counters per transaction.
    pub per_transaction: BTreeMap<String, f64>,
}

/// System counters over the whole battery.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunCounters {
    /// Seconds the battery took (measured).
    pub interval_s: f64,
    /// Steal percent on the allowed CPUs, one sample per experiment.
    pub steal_samples_pct: Vec<f64>,
    /// cgroup throttling during the battery: periods, throttled periods, throttled seconds.
    pub cfs_periods: Option<u64>,
    pub cfs_throttled_periods: Option<u64>,
    pub cfs_throttled_s: Option<f64>,
    /// Idle percent of online CPUs this process may not use, while the parallel tests ran.
    pub disallowed_idle_pct: Option<f64>,
    /// Busy percent per allowed CPU from other programs before the battery (the watched
    /// application's share taken out: it is the patient, not a neighbour).
    pub other_busy_pct: BTreeMap<u32, f64>,
    /// Percent of one CPU the watched application (`--pid`/`--comm`) used before the battery.
    #[serde(default)]
    pub patient_busy_pct: Option<f64>,
}

/// One stage's share of the budget and what it used.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageTime {
    /// The stage's name, as progress and `skipped` name it.
    pub stage: String,
    /// Seconds the budget gave it: its deadline, counted from its start.
    pub planned_s: f64,
    /// Seconds it took (measured).
    pub actual_s: f64,
    /// Set when the stage stopped at its deadline with part of its work: what it kept and
    /// what it left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_short: Option<String>,
}

/// Something the battery did not run, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    pub what: String,
    pub reason: String,
}

/// One process of the live application the doctor watched (`--pid`, `--comm`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WatchedProcess {
    pub name: String,
    pub pids: Vec<i32>,
    /// The cgroup its first pid lives in, as /proc/<pid>/cgroup names it (the v2 path, or the
    /// v1 cpuset hierarchy's); filled by the doctor's watch stage.
    #[serde(default)]
    pub cgroup: Option<String>,
    /// The systemd unit it runs in, from the same file (absent where it runs in none, and in
    /// results written before cpulab read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    pub wakeups_per_s: f64,
    /// Share of its wakeups placed on another CPU than the waker's, 0..1.
    pub cross_share: f64,
    pub cross_wakeups_per_s: f64,
}

/// The watch of the live application, condensed for the rules.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AppWatch {
    pub target: String,
    pub interval_s: f64,
    /// Seconds opening the mechanism took (BTF, loading and attaching the programs) before the
    /// window began; the stage's deadline covers it (measured). Absent in older results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_s: Option<f64>,
    /// Set when the kernel did not deliver the events the figures need: lower bounds.
    pub incomplete: Option<String>,
    /// Most wakeups first.
    pub processes: Vec<WatchedProcess>,
}

impl AppWatch {
    pub fn from_report(r: &crate::watch::WatchReport) -> Self {
        let processes = r
            .processes
            .iter()
            .map(|p| {
                let cross: Vec<_> = p
                    .classes
                    .iter()
                    .filter(|c| c.class != PlacementClass::SameCpu)
                    .collect();
                WatchedProcess {
                    name: p.name.clone(),
                    // Empty when not measured (`bpf-counts`): no pid to pin or name.
                    pids: p.pids.clone().unwrap_or_default(),
                    wakeups_per_s: p.wakeups_per_s,
                    cross_share: cross.iter().map(|c| c.share).sum(),
                    cross_wakeups_per_s: cross.iter().map(|c| c.wakeups_per_s).sum(),
                    cgroup: None,
                    unit: None,
                }
            })
            .collect();
        Self {
            target: r.target.clone(),
            interval_s: r.interval_s,
            setup_s: None,
            incomplete: r.incomplete.clone(),
            processes,
        }
    }
}

/// Everything the doctor measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Measurements {
    pub wakeup: Vec<WakeupRun>,
    pub throughput: Vec<ThroughputRun>,
    pub oscost: Option<OsCosts>,
    pub share: Option<ShareCheck>,
    pub scaling: Vec<ScalePoint>,
    pub presets: Vec<PresetRun>,
    pub counters: RunCounters,
    pub skipped: Vec<Skipped>,
    /// The live application's wakeups (`doctor --pid` / `--comm`).
    #[serde(default)]
    pub app_watch: Option<AppWatch>,
    /// Every stage's deadline and the time it took, in run order.
    #[serde(default)]
    pub stage_times: Vec<StageTime>,
}

impl Measurements {
    /// The wakeup run of `method` and `class` without busy neighbours (the first one, when
    /// several pairs share a class).
    pub fn wakeup(&self, method: &str, class: PlacementClass) -> Option<&WakeupRun> {
        self.wakeup
            .iter()
            .find(|w| w.method == method && w.class == class && w.neighbour_load.is_none())
    }

    /// The unpinned run of `method` with busy neighbours beside it, when measured.
    pub fn unpinned_with_neighbours(&self, method: &str) -> Option<&WakeupRun> {
        self.wakeup.iter().find(|w| {
            w.method == method
                && w.class == PlacementClass::Unpinned
                && w.neighbour_load.is_some_and(|n| n > 0)
        })
    }

    pub fn throughput(&self, placement: &str) -> Option<&ThroughputRun> {
        self.throughput.iter().find(|t| t.placement == placement)
    }
}

/// The environments the field notes met, plus bare metal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Environment {
    /// Microsoft Hyper-V guest (Azure too): no haltpoll driver; the host's scheduler type
    /// decides the cross-VP penalty (field notes A, B).
    HyperV,
    /// Xen guest: the credit/credit2 scheduler, module and SMT contention (field notes E).
    Xen,
    /// VMware ESXi guest.
    Vmware,
    /// KVM guest idling through the haltpoll cpuidle driver (guest halt polling available).
    KvmHaltpoll,
    /// KVM guest without haltpoll (typical of clouds): no guest polling knob to turn.
    KvmNoHaltpoll,
    /// Another hypervisor, or one that does not say which.
    OtherVm,
    /// No hypervisor seen: deep C-states and the frequency governor are the cost.
    BareMetal,
    /// Not recorded (a result written before environments were told apart).
    #[default]
    Unknown,
}

impl Environment {
    /// From the probe facts the doctor keeps.
    pub fn detect(f: &Facts) -> Self {
        let Some(h) = f.hypervisor.as_deref() else {
            return Self::BareMetal;
        };
        // KVM that emulates Hyper-V's interface names both; the host is KVM.
        if h.contains("KVM") {
            return if f.cpuidle_driver.as_deref() == Some("haltpoll") {
                Self::KvmHaltpoll
            } else {
                Self::KvmNoHaltpoll
            };
        }
        if h.contains("Hyper-V") || h.contains("Microsoft") {
            Self::HyperV
        } else if h.to_ascii_lowercase().contains("xen") {
            Self::Xen
        } else if h.contains("VMware") {
            Self::Vmware
        } else {
            Self::OtherVm
        }
    }

    pub fn is_vm(self) -> bool {
        !matches!(self, Self::BareMetal | Self::Unknown)
    }

    /// In words, for reports.
    pub fn describe(self) -> &'static str {
        match self {
            Self::HyperV => "Microsoft Hyper-V guest (Azure included)",
            Self::Xen => "Xen guest",
            Self::Vmware => "VMware guest",
            Self::KvmHaltpoll => "KVM guest with the haltpoll cpuidle driver",
            Self::KvmNoHaltpoll => "KVM guest without guest halt polling",
            Self::OtherVm => "virtual machine (hypervisor not identified)",
            Self::BareMetal => "bare metal",
            Self::Unknown => "unknown",
        }
    }
}
