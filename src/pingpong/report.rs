//! The result of `cpulab pingpong`: this struct *is* the JSON schema.
//!
//! Every run keeps its raw batch means so a later `compare` can test whether two results
//! differ, its histogram percentiles, the counters that explain it, and where its ends ran when
//! the scheduler placed them.

use super::clock::Timer;
use super::measure::EndedBy;
use super::observe::RunCounters;
use super::settings::{Endpoints, Method, PingpongSettings};
use crate::cpulist::CpuSet;
use crate::machine::Conditions;
use crate::stats::{MeanCi, Percentiles};
use crate::topology::PlacementClass;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Everything one `pingpong` invocation measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PingpongReport {
    /// Machine, time, allowed CPUs, background load and anything that qualifies the figures.
    pub conditions: Conditions,
    /// The settings the runs were taken with.
    pub settings: PingpongSettings,
    /// CPUs the experiment used (the `--cpus` set, or every CPU this process may use).
    pub cpus: CpuSet,
    /// The counter read once per round trip (`tsc` ticks are converted to nanoseconds with the
    /// ratio measured against CLOCK_MONOTONIC over each run).
    pub timer: Timer,
    /// One entry per method and placement measured, in the order they ran.
    pub runs: Vec<PingpongRun>,
    /// Method and placement combinations not measured, each with the reason.
    pub skipped: Vec<SkippedRun>,
}

/// One method at one placement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PingpongRun {
    /// How the ends woke each other.
    pub method: Method,
    /// Two threads or two processes.
    pub endpoints: Endpoints,
    /// How far apart the two CPUs are (`unpinned` when the scheduler chose).
    pub placement: PlacementClass,
    /// CPU the initiator was pinned to; `None` when it was free.
    pub cpu_a: Option<u32>,
    /// CPU the responder was pinned to; `None` when it was free.
    pub cpu_b: Option<u32>,
    /// Percentiles of individual round trips, in nanoseconds.
    pub rtt: Percentiles,
    /// Mean round trip in nanoseconds with its 95% CI, computed over the batch means.
    pub mean_rtt_ns: MeanCi,
    /// Round trips per second over the measured time.
    pub round_trips_per_s: f64,
    /// Round trips timed.
    pub round_trips: u64,
    /// Seconds the timed round trips took (batch boundaries excluded).
    pub measured_s: f64,
    /// Untimed round trips before the first batch.
    pub warmup_round_trips: u64,
    /// Round trips per batch (sized from the warm-up to last about `batch_s`).
    pub batch_round_trips: u64,
    /// Mean round trip of each batch, in nanoseconds: the raw samples of `mean_rtt_ns`.
    pub batch_means_ns: Vec<f64>,
    /// Whether the run reached the CI target or ran out of time.
    pub ended_by: EndedBy,
    /// This run's p50 divided by the lowest p50 among the runs of the same method.
    pub p50_ratio_to_fastest: f64,
    /// Where the ends actually ran; only for runs with a free end (unpinned or half-pinned).
    pub where_ran: Option<WhereRan>,
    /// Counters over the measured window, totals and per round trip.
    pub counters: RunCounters,
    /// The work after each wakeup (`--touch`), timed apart; absent without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub touch: Option<Touch>,
}

/// The initiator's work after each wakeup (`--touch`): a private buffer written once per
/// 64-byte line as soon as the pong wakes it, timed apart from the round trip.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Touch {
    /// Size of the buffer.
    pub bytes: u64,
    /// Mean time of the work after one wakeup, with its 95% CI over the batch means.
    pub mean_ns: MeanCi,
    /// Mean of each batch, in nanoseconds: the raw samples of `mean_ns`.
    pub batch_means_ns: Vec<f64>,
}

impl PingpongRun {
    /// `0:1`; `1:*` or `*:0` when one end is free; `any` when both are.
    pub fn cpus_label(&self) -> String {
        cpus_label(self.cpu_a, self.cpu_b)
    }
}

/// The initiator:responder label of a placement: `0:1`; `1:*` or `*:0` when one end is free;
/// `any` when both are (as results before half-pinned pairs named it).
pub fn cpus_label(a: Option<u32>, b: Option<u32>) -> String {
    let end = |c: Option<u32>| c.map_or("*".to_string(), |c| c.to_string());
    match (a, b) {
        (None, None) => "any".to_string(),
        _ => format!("{}:{}", end(a), end(b)),
    }
}

/// Where the two ends of a run with a free end were seen, sampled with `sched_getcpu()` once per
/// batch (the responder publishes its CPU after every answer; the initiator reads it).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WhereRan {
    /// Number of samples (one per batch).
    pub samples: u64,
    /// Samples per CPU for the initiator.
    pub initiator_cpus: BTreeMap<u32, u64>,
    /// Samples per CPU for the responder.
    pub responder_cpus: BTreeMap<u32, u64>,
    /// Samples in which both ends were on the same CPU.
    pub same_cpu_samples: u64,
    /// `same_cpu_samples / samples` (0..1).
    pub same_cpu_share: f64,
    /// CPU migrations of the initiator in the window (from /proc, else perf).
    pub initiator_migrations: Option<u64>,
    /// CPU migrations of the responder in the window.
    pub responder_migrations: Option<u64>,
}

/// A combination that was not measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SkippedRun {
    /// The method.
    pub method: Method,
    /// The placement class it would have had.
    pub placement: PlacementClass,
    /// Initiator CPU; `None` when unpinned.
    pub cpu_a: Option<u32>,
    /// Responder CPU; `None` when unpinned.
    pub cpu_b: Option<u32>,
    /// Why it was not measured (or why it failed).
    pub reason: String,
}

/// Sets every run's `p50_ratio_to_fastest` against the fastest run of its method.
pub fn fill_ratios(runs: &mut [PingpongRun]) {
    let mut fastest: BTreeMap<Method, u64> = BTreeMap::new();
    for r in runs.iter() {
        let f = fastest.entry(r.method).or_insert(u64::MAX);
        *f = (*f).min(r.rtt.p50_ns);
    }
    for r in runs.iter_mut() {
        let f = fastest.get(&r.method).copied().unwrap_or(0);
        r.p50_ratio_to_fastest = if f == 0 {
            1.0
        } else {
            r.rtt.p50_ns as f64 / f as f64
        };
    }
}

/// The headline figures: each run's mean round trip over its batch means, lower is better.
pub fn figures(r: &PingpongReport) -> Vec<crate::experiment::Figure> {
    use crate::experiment::{Direction, Figure, Unit};
    r.runs
        .iter()
        .filter_map(|run| {
            Figure::from_samples(
                format!(
                    "rtt_ns[method={},placement={},cpus={}]",
                    run.method.as_str(),
                    run.placement.as_str(),
                    run.cpus_label()
                ),
                format!(
                    "{} round trip, {} ({})",
                    run.method.as_str(),
                    run.placement.as_str(),
                    run.cpus_label()
                ),
                Unit::Nanoseconds,
                Direction::LowerIsBetter,
                run.batch_means_ns.clone(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpus_label_names_the_pinned_ends_and_keeps_any_for_unpinned() {
        assert_eq!(cpus_label(Some(0), Some(1)), "0:1");
        assert_eq!(cpus_label(Some(1), None), "1:*");
        assert_eq!(cpus_label(None, Some(0)), "*:0");
        // Figure names of older results say `cpus=any`; history and compare match on them.
        assert_eq!(cpus_label(None, None), "any");
    }
}
