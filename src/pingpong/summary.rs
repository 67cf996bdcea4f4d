//! A pingpong run condensed to the figures a reader of many runs needs: round trip with its
//! interval and batch means, counters per round trip over both CPUs, steal, and where unpinned
//! ends ran. The doctor's rules, the pingpong page and the doctor's page all read this shape.

use super::{Method, PingpongReport, PingpongRun};
use crate::stats::MeanCi;
use crate::topology::PlacementClass;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One wakeup round-trip run (from `pingpong`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WakeupRun {
    /// `pipe`, `unix`, `tcp`, `futex`, `eventfd`, `spin`.
    pub method: String,
    /// Blocking wakeup (false for spinning on a shared cache line).
    pub blocking: bool,
    pub class: PlacementClass,
    /// The two CPUs, `"0:1"`; `"1:*"` or `"*:0"` when one end was free; `null` when both were.
    pub cpus: Option<String>,
    /// Round-trip time: mean and 95% interval over batch means.
    pub rtt_ns: MeanCi,
    pub p50_ns: f64,
    pub p99_ns: f64,
    /// Raw per-batch mean round-trip times, in nanoseconds.
    pub batch_means_ns: Vec<f64>,
    /// Counters per round trip over both CPUs: `idle_entries`, `irq_RES`, `irq_CAL`,
    /// `voluntary_switches`, ...
    pub per_round_trip: BTreeMap<String, f64>,
    /// Mean steal on the CPUs used during the run, percent.
    pub steal_pct: f64,
    /// Other load was seen on the CPUs before the run.
    pub noisy: bool,
    /// Unpinned or half-pinned only: share of the run both ends spent on one CPU (0..1), when recorded.
    pub same_cpu_share: Option<f64>,
    /// Unpinned or half-pinned only: CPU migrations of both ends per second.
    pub migrations_per_s: Option<f64>,
    /// Busy neighbours (spinning threads, one per other usable CPU) running beside this run;
    /// absent for a run on an otherwise idle machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbour_load: Option<usize>,
}

impl WakeupRun {
    /// The run's first pinned CPU: 0 of `"0:1"`, 1 of `"1:*"`, 0 of `"*:0"`; `None` when
    /// neither end was pinned.
    pub fn pinned_cpu(&self) -> Option<u32> {
        self.cpus
            .as_deref()?
            .split(':')
            .find_map(|c| c.parse().ok())
    }

    /// Inter-processor interrupts (rescheduling and function-call) per round trip, when counted.
    pub fn ipis(&self) -> Option<f64> {
        let keys = ["irq_RES", "irq_CAL"];
        keys.iter()
            .any(|k| self.per_round_trip.contains_key(*k))
            .then(|| {
                keys.iter()
                    .map(|k| self.per_round_trip.get(*k).copied().unwrap_or(0.0))
                    .sum()
            })
    }
}

/// Every run of a pingpong report.
pub fn wakeup_runs(r: &PingpongReport) -> Vec<WakeupRun> {
    r.runs
        .iter()
        .map(|x| wakeup_run(x, r.conditions.noisy))
        .collect()
}

fn wakeup_run(r: &PingpongRun, noisy: bool) -> WakeupRun {
    let c = &r.counters;
    let mut per = c.per_rt.clone();
    let both = |a: Option<f64>, b: Option<f64>| Some(a? + b?);
    if let Some(v) = both(
        c.initiator.voluntary_switches_per_rt,
        c.responder.voluntary_switches_per_rt,
    ) {
        per.insert("voluntary_switches".into(), v);
    }
    if let Some(v) = both(
        c.initiator.involuntary_switches_per_rt,
        c.responder.involuntary_switches_per_rt,
    ) {
        per.insert("involuntary_switches".into(), v);
    }
    let w = r.where_ran.as_ref();
    let migrations = w.and_then(|w| Some(w.initiator_migrations? + w.responder_migrations?));
    WakeupRun {
        method: r.method.as_str().to_string(),
        blocking: r.method != Method::Spin,
        class: r.placement,
        cpus: (r.cpu_a.is_some() || r.cpu_b.is_some()).then(|| r.cpus_label()),
        rtt_ns: r.mean_rtt_ns.clone(),
        p50_ns: r.rtt.p50_ns as f64,
        p99_ns: r.rtt.p99_ns as f64,
        batch_means_ns: r.batch_means_ns.clone(),
        per_round_trip: per,
        steal_pct: c.system.steal_pct(),
        noisy,
        same_cpu_share: w.map(|w| w.same_cpu_share),
        migrations_per_s: migrations
            .filter(|_| c.window_s > 0.0)
            .map(|m| m as f64 / c.window_s),
        neighbour_load: None,
    }
}
