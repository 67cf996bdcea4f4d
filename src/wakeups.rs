//! Cumulative wakeup counts: the one shape that the in-kernel aggregation of `watch` fills and
//! that its consumers read (`watch`'s report, the Prometheus exporter, `doctor --comm`).
//!
//! The BPF programs count and bucket in per-CPU maps; user space only sums the maps when asked,
//! so no per-event record has to cross to user space for these figures (rezolus and
//! ebpf_exporter keep their counts the same way). Every number here is a counter since the
//! programs were attached: it never decreases, so a consumer takes differences between two
//! snapshots, or hands them to Prometheus as `_total` counters and histograms.

use serde::Serialize;
use std::collections::BTreeMap;

/// Upper bounds of the wakeup-to-run latency buckets, in nanoseconds: powers of two from 1 us
/// (1,024 ns) to about 1 s (2^30 ns), the exp2 layout of runqlat and ebpf_exporter. A latency
/// above the last bound counts only in the implicit `+Inf` bucket (the `count`).
pub const LATENCY_BOUNDS_NS: [u64; 21] = {
    let mut b = [0u64; 21];
    let mut i = 0;
    while i < 21 {
        b[i] = 1u64 << (10 + i);
        i += 1;
    }
    b
};

/// Wakeups of one target landing at one placement class from their waker.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ClassCounts {
    /// Wakeups whose destination CPU was idle when the wakeup was placed.
    pub to_idle: u64,
    /// Wakeups whose destination CPU was running something else.
    pub to_busy: u64,
    /// Wakeup-to-run latencies, non-cumulative: `buckets[i]` counts latencies in
    /// `(LATENCY_BOUNDS_NS[i-1], LATENCY_BOUNDS_NS[i]]`; latencies above the last bound are
    /// counted only in `count`. Always `LATENCY_BOUNDS_NS.len()` long.
    pub buckets: Vec<u64>,
    /// Every latency observed (>= the sum of `buckets`). With latency sampling
    /// (`SourceOptions::latency_sample`), each timed latency counts its weight here, in its
    /// bucket and in the sum: an estimate of every wakeup's, which may exceed the wakeups.
    pub count: u64,
    /// Sum of the observed latencies, ns.
    pub sum_ns: u64,
}

impl ClassCounts {
    /// These counts times `n` (0 and 1 leave them as they are): the estimate of every wakeup
    /// from those seen while attached one second in every `n`.
    pub fn scaled(self, n: u32) -> ClassCounts {
        let n = u64::from(n.max(1));
        ClassCounts {
            to_idle: self.to_idle.saturating_mul(n),
            to_busy: self.to_busy.saturating_mul(n),
            buckets: self.buckets.iter().map(|b| b.saturating_mul(n)).collect(),
            count: self.count.saturating_mul(n),
            sum_ns: self.sum_ns.saturating_mul(n),
        }
    }
}

/// One watched target (a command name, a cgroup, or `other` for those beyond the cap), with
/// counts by placement class (`same-cpu`, then each class of `topology::PlacementClass` away).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TargetCounts {
    /// The target's label: a name, never a pid.
    pub target: String,
    pub classes: BTreeMap<String, ClassCounts>,
}

/// Everything the aggregation has counted since it was attached.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    pub targets: Vec<TargetCounts>,
    /// Scheduler events the programs ran on.
    pub events_seen: u64,
    /// Events the programs could not count (a full map, a failed look-up).
    pub events_lost: u64,
    /// Tasks that matched no target slot because the cap was reached (counted under `other`).
    pub targets_dropped: u64,
    /// What each in-kernel program has cost, when asked for (`SourceOptions::program_costs`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub programs: Vec<ProgramCost>,
    /// How the latencies were sampled (`SourceOptions::latency_sample`): 0 or 1 when every
    /// wakeup was timed, else one in this many beyond the first of each tick per CPU, weighted.
    pub latency_sample: u32,
    /// The programs were attached one second in every this many (`SourceOptions::attach_every`;
    /// 0 or 1: always), and every count above is what they counted times this: an estimate.
    pub attach_every: u32,
    /// Time the wakeup programs have been attached, ns (0 where not known: the perf fallback).
    pub attached_ns: u64,
}

/// One BPF program's runs and their kernel-measured run time, since statistics were turned on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProgramCost {
    /// The tracepoint it runs on (`sched_waking`, ...).
    pub program: String,
    pub runs: u64,
    pub run_ns: u64,
}

/// A source of cumulative snapshots: the in-kernel aggregation, or the perf fallback that
/// aggregates in user space (at a higher cost per event).
pub trait Source: Send {
    /// How the counts are collected (`bpf`, `perf`), for the `_info` metric and the docs.
    fn mechanism(&self) -> &str;
    /// Sums the counts kept so far.
    fn snapshot(&mut self) -> anyhow::Result<Snapshot>;
    /// Where the programs are attached one second in every `n` (`SourceOptions::attach_every`):
    /// `n` and the wall-clock time the first attached second began. None when always attached.
    fn attach_windows(&self) -> Option<(u32, std::time::SystemTime)> {
        None
    }
}

/// What to watch, as the exporter and `watch` take it from their flags.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceOptions {
    /// Command names (`comm`); each is one target labelled by its name.
    pub comms: Vec<String>,
    /// Process ids; each process is labelled by its command name, never by its pid.
    pub pids: Vec<i32>,
    /// cgroup v2 paths relative to the cgroup root, globs allowed (`system.slice/*.service`),
    /// re-read as services and containers come and go; each match is labelled by its path.
    pub cgroups: Vec<String>,
    /// At most this many targets get their own label; the rest count under `other`.
    pub max_targets: usize,
    /// `auto` (BPF, else perf), `bpf` or `perf`.
    pub mechanism: String,
    /// Have the kernel time the in-kernel programs (`BPF_ENABLE_STATS`, while the source is
    /// open; needs CAP_SYS_ADMIN) and report each one's cost in snapshots.
    pub program_costs: bool,
    /// Latency sampling of the in-kernel aggregation: 0 or 1 times every wakeup; a power of two
    /// `n` times the first few of each tick per CPU and one in `n` beyond them, weighted (see
    /// `crate::watch::bpf::aggregate::Layout::sample`). Counts are exact either way.
    pub latency_sample: u32,
    /// Attach the wakeup programs one second in every this many (0 or 1: always), and count
    /// what they see that many times: estimates, at a share of the cost (each program's
    /// dispatch on every scheduler event included). In-kernel aggregation only.
    pub attach_every: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_counts_are_n_times_each_figure_and_one_leaves_them() {
        let c = ClassCounts {
            to_idle: 3,
            to_busy: 5,
            buckets: vec![1, 0, 6],
            count: 8,
            sum_ns: 70_000,
        };
        let s = c.clone().scaled(4);
        assert_eq!(
            (s.to_idle, s.to_busy, s.count, s.sum_ns),
            (12, 20, 32, 280_000)
        );
        assert_eq!(s.buckets, vec![4, 0, 24]);
        // The histogram stays whole: what lies above the last bucket is scaled alike.
        assert_eq!(
            s.count - s.buckets.iter().sum::<u64>(),
            4,
            "the one above the last bound"
        );
        assert_eq!(c.clone().scaled(1), c);
        assert_eq!(c.clone().scaled(0), c, "0 is always attached too");
        let big = ClassCounts {
            count: u64::MAX / 2 + 1,
            ..Default::default()
        };
        assert_eq!(big.scaled(2).count, u64::MAX, "saturates, never wraps");
    }
}
