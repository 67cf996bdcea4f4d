//! What `cpulab host bench` measured: the result struct *is* the JSON schema
//! (docs/json.md, "host-bench").

use crate::machine::Conditions;
use crate::stats::{MeanCi, Percentiles};
use crate::topology::PlacementClass;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::settings::BenchSettings;

/// The KVM the guests ran on, as far as this host shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KvmHost {
    /// `kvm_intel`, `kvm_amd`, `kvm_pvm`, or `None` when no vendor module is listed in
    /// /sys/module.
    pub module: Option<String>,
    /// Whether guest instructions are emulated by KVM (kvm_pvm): KVM's own work is real, the
    /// guest's instruction time is the emulator's.
    pub guest_code_emulated: bool,
    /// `/sys/module/kvm/parameters/halt_poll_ns`: the limit a VM has unless it sets its own.
    pub module_halt_poll_ns: Option<u64>,
    /// Whether that parameter is writable here (it is mode 0444 on some hosts even for root);
    /// `None` where the parameter could not be read.
    pub halt_poll_ns_writable: Option<bool>,
    /// The TSC frequency the guests' `rdtsc` counts at (`KVM_GET_TSC_KHZ`).
    pub tsc_khz: u32,
}

/// Which guest exchange a point ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Exchange {
    /// An IPI, both vCPUs halting between messages.
    Halt,
    /// A shared word, no IPI and no halt.
    Spin,
    /// The waiting side polls for a window, then halts.
    Poll,
}

impl Exchange {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Halt => "halt",
            Self::Spin => "spin",
            Self::Poll => "poll",
        }
    }
}

/// KVM's counts for one vCPU over a point's windows, per round trip (`None`: this KVM does not
/// report that statistic).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VcpuCounts {
    pub vcpu: u32,
    /// Every KVM statistic read, its increase per round trip.
    pub per_round_trip: BTreeMap<String, f64>,
    /// The vCPU thread's on-CPU time, CPU-seconds per second (schedstat).
    pub on_cpu_share: Option<f64>,
    /// Its run-queue wait, seconds per second: what a guest sees as steal.
    pub run_queue_share: Option<f64>,
    /// Time KVM spent polling before halting (`halt_poll_success_ns` + `halt_poll_fail_ns`),
    /// CPU-seconds per second.
    pub polling_share: Option<f64>,
    /// Statistics that read lower at a window's end than at its start (a counter never should):
    /// left out of `per_round_trip`, named here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub went_backwards: Vec<String>,
}

/// One measured point: an exchange, a placement of its two vCPU threads, a halt-poll limit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub exchange: Exchange,
    pub placement: PlacementClass,
    /// Where the vCPU threads were allowed to run: `0:1`, or the CPU set both shared.
    pub cpus: String,
    /// The VM's own halt-poll limit; `None`: the module's `halt_poll_ns`.
    pub halt_poll_limit_ns: Option<u64>,
    /// The polling exchange's window (guest TSC time before it halts).
    pub poll_window_ns: Option<u64>,
    /// Round trips of the bare exchange (the starting side only counts) over the host clock,
    /// one per window.
    pub rtt_ns_per_window: Vec<f64>,
    /// Their mean and 95% interval.
    pub rtt_ns: Option<MeanCi>,
    /// Round trips timed inside the guest (`rdtsc` stamps, consecutive differences), from the
    /// stamped window.
    pub guest_rtt: Option<Percentiles>,
    pub guest_rtt_mean_ns: Option<f64>,
    /// The stamped window's guest-timed mean over its host-counted round trip (its time over
    /// its round trips): 1 when the two clocks agree.
    pub guest_over_host: Option<f64>,
    /// The stamped window's round trip over the host clock.
    #[serde(default)]
    pub stamped_rtt_ns: Option<f64>,
    /// The stamped round trip over the bare one (`rtt_ns`): what stamping costs the exchange.
    #[serde(default)]
    pub stamping_cost: Option<f64>,
    /// Stamps the host read too late to keep (the ring had wrapped past them).
    pub stamps_lost: u64,
    pub round_trips: u64,
    pub vcpus: Vec<VcpuCounts>,
}

/// One row of the halt-poll sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepRow {
    pub point: Point,
    /// Polls won among halts (`halt_successful_poll / halt_exits`, both vCPUs).
    pub polls_won_share: Option<f64>,
    /// The round trip saved against polling off (limit 0), with its interval.
    pub saved_ns: Option<MeanCi>,
    /// CPU the two vCPUs burnt polling, CPU-seconds per second.
    pub polling_cpu: Option<f64>,
}

/// The halt-poll sweep: this VM's limit set to each value in turn, nothing on the host changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sweep {
    pub rows: Vec<SweepRow>,
    /// The smallest limit whose round trip is within 10% of the sweep's best: where the curve
    /// bends. `None` when no row has a round trip.
    pub bend_ns: Option<u64>,
}

/// Case C at the hypervisor level: two VMs of burners sharing the same host CPUs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShareRow {
    /// Busy vCPUs of VM1 and of VM2.
    pub vm1_vcpus: u32,
    pub vm2_vcpus: u32,
    pub host_cpus: u32,
    /// VM1's loop rate beside VM2 over its rate alone, one per window pair.
    pub vm1_share_samples: Vec<f64>,
    pub vm1_share: Option<MeanCi>,
    pub vm2_share: Option<MeanCi>,
    /// The same share from the run time each VM's burners counted themselves (their TSC, gaps
    /// over 100 us left out): CPUs together over CPUs alone. It does not move with how fast
    /// the host runs guest code, which a loop rate does (on this project's emulating KVM by
    /// up to 10% between two VMs on one CPU). `None` in results from before it was counted.
    #[serde(default)]
    pub vm1_ran_share: Option<MeanCi>,
    #[serde(default)]
    pub vm2_ran_share: Option<MeanCi>,
    /// The model: host CPUs shared evenly by the running vCPUs, over what the VM had alone.
    pub vm1_model: f64,
    pub vm2_model: f64,
    /// Whether the running vCPUs divide evenly over the CPUs (the rows the model must meet
    /// within 3 points).
    pub even: bool,
}

/// A difference of two points' round trips, which does not depend on how fast this KVM runs
/// guest instructions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    pub name: String,
    pub label: String,
    pub ns: MeanCi,
}

/// A vCPU woken by its own local APIC timer (TSC-deadline mode) after each halt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimerPoint {
    /// How far ahead each deadline was armed.
    pub period_ns: u64,
    /// The VM's own halt-poll limit; `None`: the module's.
    pub halt_poll_limit_ns: Option<u64>,
    /// The host CPU the vCPU thread ran on.
    pub cpu: String,
    pub wakes: u64,
    /// Each window's length over its wakes: the period plus how late each wake came plus the
    /// guest's loop.
    pub achieved_period_ns_per_window: Vec<f64>,
    pub achieved_period_ns: Option<MeanCi>,
    /// How late each wake came past its deadline, read by the guest's `rdtsc` when it resumed.
    pub lateness: Option<Percentiles>,
    pub lateness_mean_ns: Option<f64>,
    pub stamps_lost: u64,
    /// KVM's counts per wake.
    pub vcpu: VcpuCounts,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostBenchReport {
    pub settings: BenchSettings,
    pub conditions: Conditions,
    pub kvm: KvmHost,
    pub points: Vec<Point>,
    pub sweep: Option<Sweep>,
    pub share: Vec<ShareRow>,
    pub differences: Vec<Difference>,
    /// The timer-wake part; absent from results written before it existed.
    #[serde(default)]
    pub timer: Vec<TimerPoint>,
}
