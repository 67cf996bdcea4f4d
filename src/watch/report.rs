//! The result of `cpulab watch`: this struct is the JSON schema.

use super::aggregate::{ByClass, GroupAgg, PairAgg};
use crate::cpulist::CpuSet;
use crate::machine::Conditions;
use crate::topology::PlacementClass;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A latency distribution, with its raw histogram.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub count: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
    /// The raw histogram: `[value_ns, count]` for every recorded bucket (3 significant figures).
    pub histogram: Vec<[u64; 2]>,
}

/// Wakeups of one placement class.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassStats {
    pub class: PlacementClass,
    pub wakeups: u64,
    /// Share of the attributed wakeups (0..1).
    pub share: f64,
    /// Wakeup-to-run latency: from `sched_waking` to the switch-in.
    pub latency: Latency,
}

/// One watched process (or process name, machine-wide).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupReport {
    /// `name[pid]`, or the process name when grouping machine-wide.
    pub name: String,
    /// Process ids seen in the group.
    pub pids: Vec<i32>,
    pub threads: usize,
    /// Wakeups whose waker was seen, by placement class of waker CPU -> wakeup target CPU.
    pub wakeups: u64,
    pub wakeups_per_s: f64,
    pub classes: Vec<ClassStats>,
    /// Wakeups whose `sched_waking` fell before the window (no waker, no class).
    pub unattributed_wakeups: u64,
    /// Time runnable but not running, summed over threads.
    pub run_queue_wait_ns: u64,
    /// Time on a CPU, summed over threads.
    pub on_cpu_ns: u64,
    pub migrations: u64,
    pub cpus_used: CpuSet,
}

/// Waker -> wakee.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairReport {
    pub waker: String,
    pub wakee: String,
    pub wakeups: u64,
    pub wakeups_per_s: f64,
    pub classes: Vec<ClassStats>,
    /// The wakee process woken most often, and the CPU its waker most often ran on.
    pub wakee_pid: i32,
    pub waker_cpu: u32,
}

/// The VM mechanism around the window, on the CPUs the watched tasks used.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mechanism {
    pub cpus: CpuSet,
    /// Entries into real idle states (halts in a guest), from cpuidle counters.
    pub idle_entries: Option<u64>,
    pub idle_entries_per_wakeup: Option<f64>,
    /// Inter-processor interrupts from /proc/interrupts (RES rescheduling, CAL function call).
    pub ipis: BTreeMap<String, u64>,
    pub ipis_per_wakeup: Option<f64>,
    pub steal_pct: Option<f64>,
    /// `/sys/module/haltpoll/parameters/guest_halt_poll_ns`, where the guest has it.
    pub guest_halt_poll_ns: Option<u64>,
    /// The cpuidle driver (`haltpoll`, `acpi_idle`, ...).
    pub cpuidle_driver: Option<String>,
    pub unavailable: Vec<String>,
}

/// What co-locating the top pair would change: an estimate, not a measurement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    pub waker: String,
    pub wakee: String,
    /// Wakeups per second of the pair that crossed CPUs.
    pub cross_wakeups_per_s: f64,
    /// Mean wakeup-to-run latency of those crossing wakeups, measured here.
    pub cross_latency_mean_ns: f64,
    /// Mean same-CPU wakeup latency, measured here (this pair, or every watched wakeup).
    pub same_cpu_latency_mean_ns: f64,
    /// Waiting saved per second if every crossing wakeup cost what a same-CPU one did.
    pub saved_wait_ns_per_s: f64,
    /// The command that measures it instead of estimating it.
    pub try_command: String,
    pub caveat: String,
}

/// Everything `cpulab watch` saw.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WatchReport {
    pub conditions: Conditions,
    /// What was watched, as given.
    pub target: String,
    /// The window actually watched, seconds.
    pub window_s: f64,
    /// Why the window ended: `duration`, `interrupted`, `targets exited`, `command exited`.
    pub ended_by: String,
    pub mechanism_used: String,
    pub events: u64,
    /// Records the kernel dropped because they were read too slowly: figures undercount by
    /// about this much.
    pub lost_records: u64,
    pub groups: Vec<GroupReport>,
    pub pairs: Vec<PairReport>,
    pub mechanism: Mechanism,
    pub estimate: Option<Estimate>,
}

pub fn latency(h: &hdrhistogram::Histogram<u64>) -> Latency {
    Latency {
        count: h.len(),
        p50_ns: h.value_at_quantile(0.5),
        p90_ns: h.value_at_quantile(0.9),
        p99_ns: h.value_at_quantile(0.99),
        max_ns: h.max(),
        mean_ns: h.mean(),
        histogram: h
            .iter_recorded()
            .map(|v| [v.value_iterated_to(), v.count_at_value()])
            .collect(),
    }
}

pub fn classes(b: &ByClass) -> (u64, Vec<ClassStats>) {
    let total: u64 = b.0.values().map(|c| c.latency_ns.len()).sum();
    let v =
        b.0.iter()
            .map(|(class, c)| ClassStats {
                class: *class,
                wakeups: c.latency_ns.len(),
                share: if total > 0 {
                    c.latency_ns.len() as f64 / total as f64
                } else {
                    0.0
                },
                latency: latency(&c.latency_ns),
            })
            .collect();
    (total, v)
}

pub fn group(name: &str, g: &GroupAgg, window_s: f64) -> GroupReport {
    let (wakeups, classes) = classes(&g.by_class);
    GroupReport {
        name: name.to_string(),
        pids: g.tgids.keys().copied().collect(),
        threads: g.threads.len(),
        wakeups,
        wakeups_per_s: wakeups as f64 / window_s,
        classes,
        unattributed_wakeups: g.unattributed,
        run_queue_wait_ns: g.rq_wait_ns,
        on_cpu_ns: g.on_cpu_ns,
        migrations: g.migrations,
        cpus_used: g.cpus.clone(),
    }
}

pub fn pair(waker: &str, wakee: &str, p: &PairAgg, window_s: f64) -> PairReport {
    let (wakeups, classes) = classes(&p.by_class);
    PairReport {
        waker: waker.to_string(),
        wakee: wakee.to_string(),
        wakeups,
        wakeups_per_s: wakeups as f64 / window_s,
        classes,
        wakee_pid: top(&p.wakee_tgids).unwrap_or(0),
        waker_cpu: top(&p.waker_cpus).unwrap_or(0),
    }
}

/// The estimate for the top pair with crossing wakeups; `same_cpu_fallback` is the mean
/// same-CPU latency over every watched wakeup, used when the pair never ran on one CPU.
pub fn estimate(p: &PairReport, same_cpu_fallback: Option<f64>) -> Option<Estimate> {
    let cross: Vec<&ClassStats> = p
        .classes
        .iter()
        .filter(|c| c.class != PlacementClass::SameCpu && c.wakeups > 0)
        .collect();
    let n: u64 = cross.iter().map(|c| c.wakeups).sum();
    if n == 0 || p.wakee_pid <= 0 {
        return None;
    }
    let cross_mean = cross
        .iter()
        .map(|c| c.latency.mean_ns * c.wakeups as f64)
        .sum::<f64>()
        / n as f64;
    let same = p
        .classes
        .iter()
        .find(|c| c.class == PlacementClass::SameCpu && c.wakeups > 0)
        .map(|c| c.latency.mean_ns)
        .or(same_cpu_fallback)?;
    let per_s = p.wakeups_per_s * n as f64 / p.wakeups.max(1) as f64;
    Some(Estimate {
        waker: p.waker.clone(),
        wakee: p.wakee.clone(),
        cross_wakeups_per_s: per_s,
        cross_latency_mean_ns: cross_mean,
        same_cpu_latency_mean_ns: same,
        saved_wait_ns_per_s: per_s * (cross_mean - same).max(0.0),
        try_command: format!("cpulab try pid:{}.affinity={}", p.wakee_pid, p.waker_cpu),
        caveat: "estimate from latencies measured in this window; it ignores that both ends then \
                 share one CPU (less parallelism), so measure it with the try line"
            .to_string(),
    })
}

fn top<K: Copy>(m: &BTreeMap<K, u64>) -> Option<K> {
    m.iter().max_by_key(|(_, n)| **n).map(|(k, _)| *k)
}
