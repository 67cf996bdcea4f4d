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
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
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
    /// Why the preferred mechanism was not used, where this one is a fallback (`auto` when BPF
    /// did not load): said at start-up and kept for the operator, never thrown away.
    fn fallback_reason(&self) -> Option<&str> {
        None
    }
    /// Sums the counts kept so far.
    fn snapshot(&mut self) -> anyhow::Result<Snapshot>;
    /// Where the programs are attached one second in every `n` (`SourceOptions::attach_every`):
    /// `n` and the wall-clock time the first attached second began. None when always attached.
    fn attach_windows(&self) -> Option<(u32, std::time::SystemTime)> {
        None
    }
}

/// How the scheduler's wakeups are read: one type for `cpulab watch`, `doctor --comm` and the
/// exporter. It names the kernel facility; the [`Shape`] a consumer needs (every event, or counts)
/// decides what that facility is asked for, and [`plan`] turns the two into the ways to try, in
/// order. (Plain comments on the variants: doc comments would change `--help`'s layout.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mechanism {
    // BPF where it loads here, else perf (the reason is kept and said).
    #[default]
    Auto,
    // eBPF programs: per-event records on the raw tracepoints for a watch (tracepoint programs
    // where raw ones cannot be used), counts aggregated in the kernel for the exporter.
    Bpf,
    // eBPF programs on the tracepoints copying each tracefs record (per-event only).
    BpfTracepoint,
    // perf_event_open rings with in-kernel filters; counts are aggregated in user space. On KVM
    // guests it misses the records emitted while an idle vCPU is woken.
    Perf,
    // The in-kernel aggregation alone, also for a watch: counts and latency buckets per target
    // and class, no per-event record.
    BpfCounts,
    // A test double with made-up counts, labelled mechanism="fake" (tests only, hidden).
    Fake,
}

/// What a consumer needs of the wakeups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Every event, decoded (a watch's full report: pairs, threads, on-CPU time).
    Events,
    /// Cumulative counts and latency buckets per target and class ([`Snapshot`]).
    Counts,
}

/// One concrete way of reading the wakeups, as [`plan`] lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// The in-kernel aggregation (`crate::watch::source::BpfSource`).
    CountsBpf,
    /// perf rings aggregated in user space (`crate::watch::perf_source::PerfSource`).
    CountsPerf,
    /// The test double.
    CountsFake,
    /// BPF programs on the raw tracepoints (BTF-typed where the kernel takes them).
    EventsRaw,
    /// BPF programs on the tracepoints, copying tracefs records.
    EventsTracepoint,
    /// perf's per-CPU sample rings.
    EventsPerf,
}

impl Way {
    /// Whether this way uses BPF programs (a refusal to load any skips the others).
    pub fn is_bpf(self) -> bool {
        matches!(
            self,
            Way::CountsBpf | Way::EventsRaw | Way::EventsTracepoint
        )
    }
}

impl Mechanism {
    /// Every mechanism, in the order `--help` lists them.
    pub const ALL: [Mechanism; 6] = [
        Mechanism::Auto,
        Mechanism::Bpf,
        Mechanism::BpfTracepoint,
        Mechanism::Perf,
        Mechanism::BpfCounts,
        Mechanism::Fake,
    ];

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Auto => "auto",
            Mechanism::Bpf => "bpf",
            Mechanism::BpfTracepoint => "bpf-tracepoint",
            Mechanism::Perf => "perf",
            Mechanism::BpfCounts => "bpf-counts",
            Mechanism::Fake => "fake",
        }
    }

    /// The mechanism named `name`, if any.
    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The mechanisms a consumer that needs `shape` takes: `bpf-tracepoint` has no counts, and
    /// the test double no events.
    pub fn accepted(shape: Shape) -> Vec<Mechanism> {
        Mechanism::ALL
            .into_iter()
            .filter(|m| plan(*m, shape, false).is_ok())
            .collect()
    }

    /// The `--mechanism` flag's parser for a consumer that needs `shape`: only the names it
    /// takes are offered (the test double hidden), so a wrong one is clap's usage error.
    pub fn value_parser(shape: Shape) -> impl clap::builder::TypedValueParser<Value = Mechanism> {
        use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
        let values: Vec<PossibleValue> = Mechanism::accepted(shape)
            .into_iter()
            .map(|m| PossibleValue::new(m.name()).hide(m == Mechanism::Fake))
            .collect();
        PossibleValuesParser::new(values).try_map(|s: String| {
            Mechanism::from_name(&s).ok_or_else(|| format!("no mechanism `{s}`"))
        })
    }
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The ways to try, in order, for `mechanism` and a consumer that needs `shape` (pure): the
/// first that opens is used; a later one is a fallback. `perf_only`: the caller needs perf's
/// own records (a ring dump for the parser's fixtures). An `Err` is the one line for a pair
/// that cannot be served.
pub fn plan(mechanism: Mechanism, shape: Shape, perf_only: bool) -> Result<Vec<Way>, String> {
    use Mechanism as M;
    use Way as W;
    Ok(match (shape, mechanism) {
        (Shape::Counts, M::Auto) => vec![W::CountsBpf, W::CountsPerf],
        (Shape::Counts, M::Bpf | M::BpfCounts) => vec![W::CountsBpf],
        (Shape::Counts, M::Perf) => vec![W::CountsPerf],
        (Shape::Counts, M::Fake) => vec![W::CountsFake],
        (Shape::Counts, M::BpfTracepoint) => {
            return Err(
                "--mechanism bpf-tracepoint reads every event and counts nothing in the kernel;                  counts come from auto, bpf or perf"
                    .into(),
            );
        }
        (Shape::Events, M::Fake) => {
            return Err(
                "--mechanism fake is the exporter's test double and has no events; use auto,                  bpf, bpf-tracepoint, perf or bpf-counts"
                    .into(),
            );
        }
        (Shape::Events, M::BpfCounts) => vec![W::CountsBpf],
        (Shape::Events, _) if perf_only => vec![W::EventsPerf],
        (Shape::Events, M::Auto) => vec![W::EventsRaw, W::EventsTracepoint, W::EventsPerf],
        (Shape::Events, M::Bpf) => vec![W::EventsRaw, W::EventsTracepoint],
        (Shape::Events, M::BpfTracepoint) => vec![W::EventsTracepoint],
        (Shape::Events, M::Perf) => vec![W::EventsPerf],
    })
}

/// With latency sampling on (see [`SourceOptions::latency_sample`]), the first this many
/// target wakeups of each tick on a CPU are all timed: the contract the in-kernel programs keep
/// and the exporter's help states.
pub const EXACT_PER_TICK: u32 = 8;

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
    /// How the counts are read ([`plan`] with [`Shape::Counts`]).
    pub mechanism: Mechanism,
    /// Have the kernel time the in-kernel programs (`BPF_ENABLE_STATS`, while the source is
    /// open; needs CAP_SYS_ADMIN) and report each one's cost in snapshots.
    pub program_costs: bool,
    /// Latency sampling of the in-kernel aggregation: 0 or 1 times every wakeup; a power of two
    /// `n` times the first [`EXACT_PER_TICK`] of each tick per CPU and one in `n` beyond them,
    /// weighted (see `crate::watch::bpf::aggregate::Layout::sample`). It samples no count.
    pub latency_sample: u32,
    /// Attach the wakeup programs one second in every this many (0 or 1: always), and count
    /// what they see that many times: estimates, at a share of the cost (each program's
    /// dispatch on every scheduler event included). In-kernel aggregation only.
    pub attach_every: u32,
    /// Without named targets: what names a process group (`crate::watch::groups`).
    pub group_by: GroupBy,
    /// The test double only (`--mechanism fake`): each placement class's share of the made-up
    /// wakeups, nearest class first (empty: every class alike), so a fleet of fake hosts has
    /// known, different placement mixes.
    pub fake_weights: Vec<u64>,
}

/// How a watch of the whole machine names the process groups it ranks (`--group-by`): the
/// systemd unit or container read from the process's cgroup path, the path itself, or the
/// command name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupBy {
    /// The innermost container or systemd unit of the cgroup path, else the command name.
    #[default]
    Auto,
    /// The innermost systemd unit (`.service`, `.scope`), else the command name.
    Unit,
    /// The container (docker, podman, containerd, cri-o, Kubernetes), else the command name.
    Container,
    /// The cgroup path under the cgroup root.
    Cgroup,
    /// The command name.
    Comm,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_tries_bpf_first_and_falls_back_only_under_auto() {
        use Way::*;
        let p = |m, shape| plan(m, shape, false).unwrap();
        assert_eq!(p(Mechanism::Auto, Shape::Counts), [CountsBpf, CountsPerf]);
        assert_eq!(p(Mechanism::Bpf, Shape::Counts), [CountsBpf]);
        assert_eq!(p(Mechanism::BpfCounts, Shape::Counts), [CountsBpf]);
        assert_eq!(p(Mechanism::Perf, Shape::Counts), [CountsPerf]);
        assert_eq!(p(Mechanism::Fake, Shape::Counts), [CountsFake]);
        assert_eq!(
            p(Mechanism::Auto, Shape::Events),
            [EventsRaw, EventsTracepoint, EventsPerf]
        );
        assert_eq!(
            p(Mechanism::Bpf, Shape::Events),
            [EventsRaw, EventsTracepoint]
        );
        assert_eq!(
            p(Mechanism::BpfTracepoint, Shape::Events),
            [EventsTracepoint]
        );
        assert_eq!(p(Mechanism::Perf, Shape::Events), [EventsPerf]);
        // A watch may ask for the exporter's counts alone.
        assert_eq!(p(Mechanism::BpfCounts, Shape::Events), [CountsBpf]);
        // A ring dump is perf's records, whatever was asked; the counts have no ring.
        for m in [Mechanism::Auto, Mechanism::Bpf, Mechanism::Perf] {
            assert_eq!(plan(m, Shape::Events, true).unwrap(), [EventsPerf], "{m}");
        }
        assert_eq!(
            plan(Mechanism::BpfCounts, Shape::Events, true).unwrap(),
            [CountsBpf]
        );
        // Every plan's last way is the only one that is not a fallback: perf, or what was
        // asked for; and no plan mixes counts into an events request except bpf-counts.
        for m in Mechanism::ALL {
            for shape in [Shape::Events, Shape::Counts] {
                if let Ok(ways) = plan(m, shape, false) {
                    assert!(!ways.is_empty(), "{m} {shape:?}");
                    let counts = ways
                        .iter()
                        .filter(|w| matches!(w, CountsBpf | CountsPerf | CountsFake))
                        .count();
                    let want = if shape == Shape::Counts || m == Mechanism::BpfCounts {
                        ways.len()
                    } else {
                        0
                    };
                    assert_eq!(counts, want, "{m} {shape:?}");
                }
            }
        }
    }

    #[test]
    fn each_consumer_takes_only_the_mechanisms_that_can_serve_it() {
        assert_eq!(
            Mechanism::accepted(Shape::Events),
            [
                Mechanism::Auto,
                Mechanism::Bpf,
                Mechanism::BpfTracepoint,
                Mechanism::Perf,
                Mechanism::BpfCounts
            ]
        );
        assert_eq!(
            Mechanism::accepted(Shape::Counts),
            [
                Mechanism::Auto,
                Mechanism::Bpf,
                Mechanism::Perf,
                Mechanism::BpfCounts,
                Mechanism::Fake
            ]
        );
        for (m, shape) in [
            (Mechanism::BpfTracepoint, Shape::Counts),
            (Mechanism::Fake, Shape::Events),
        ] {
            let e = plan(m, shape, false).unwrap_err();
            assert!(e.starts_with(&format!("--mechanism {m} ")), "{e}");
            assert!(!e.contains('\n'));
        }
        for m in Mechanism::ALL {
            assert_eq!(Mechanism::from_name(m.name()), Some(m));
        }
        assert_eq!(Mechanism::from_name("ebpf"), None);
        assert!(Way::CountsBpf.is_bpf() && Way::EventsTracepoint.is_bpf());
        assert!(!Way::EventsPerf.is_bpf() && !Way::CountsPerf.is_bpf());
        assert!(!Way::CountsFake.is_bpf());
    }

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
