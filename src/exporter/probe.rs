//! The optional active probe: every `--probe-interval`, a short pipe pingpong between two
//! pinned threads at the same CPU and one CPU apart, through cpulab's pingpong engine, so a
//! fleet sees what crossing CPUs costs on each host now, with or without an application.
//!
//! Bounded: [`settings`] gives each placement 2 ms of warm-up and 10 ms of timed round trips,
//! about 25 ms of work per probe; the interval is at least 10 s, so the probe costs at most
//! a quarter of a percent of one CPU.

use super::metrics::ProbeFigures;
use crate::experiment::{Experiment, Progress, silent};
use crate::machine::Machine;
use crate::pingpong::{self, Method, PairSpec, PingpongSettings, Placement};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Shortest interval accepted, in seconds.
pub const MIN_INTERVAL_S: u64 = 10;

/// The pairs probed: the first allowed CPU with itself and with the next allowed CPU.
pub fn pairs(machine: &Machine) -> Vec<Placement> {
    let cpus = machine.allowed.to_vec();
    let mut out = Vec::new();
    if let Some(&a) = cpus.first() {
        out.push(Placement::Pinned { a, b: a });
        if let Some(&b) = cpus.get(1) {
            out.push(Placement::Pinned { a, b });
        }
    }
    out
}

/// The bounded pingpong settings of one probe.
pub fn settings(pairs: Vec<Placement>) -> PingpongSettings {
    PingpongSettings {
        methods: vec![Method::Pipe],
        pairs: PairSpec::List(pairs),
        warmup_s: 0.002,
        max_time_s: 0.010,
        target_ci_rel: 0.0,
        min_batches: 5,
        batch_s: 0.002,
        load_check_s: 0.0,
        perf_counters: false,
        ..PingpongSettings::default()
    }
}

/// Runs one probe and folds it into `last`.
pub fn run_once(machine: &Machine, last: &Mutex<Option<ProbeFigures>>) {
    let sink = silent;
    let s = settings(pairs(machine));
    let t0 = Instant::now();
    let result = pingpong::Pingpong::run(machine, &s, &Progress::new(&sink));
    let Ok(mut slot) = last.lock() else { return };
    let mut fig = slot.take().unwrap_or_default();
    fig.runs += 1;
    fig.last_duration_s = t0.elapsed().as_secs_f64();
    fig.last_ok = matches!(&result, Ok(report) if !report.runs.is_empty());
    match result {
        Ok(report) if !report.runs.is_empty() => {
            fig.round_trips = report
                .runs
                .iter()
                .map(|r| {
                    (
                        r.placement.as_str().to_string(),
                        r.rtt.p50_ns as f64 / 1e9,
                        r.rtt.p99_ns as f64 / 1e9,
                    )
                })
                .collect();
            fig.finished_unix_s = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
        }
        _ => fig.failures += 1,
    }
    *slot = Some(fig);
}

/// Starts the probe thread: the first probe at once, then every `interval` until `stop`.
pub fn start(
    machine: Machine,
    interval: Duration,
    last: Arc<Mutex<Option<ProbeFigures>>>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("cpulab-probe".into())
        .spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                run_once(&machine, &last);
                let until = Instant::now() + interval;
                while !stop.load(Ordering::SeqCst) && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_is_bounded_to_tens_of_milliseconds_of_work() {
        let s = settings(vec![
            Placement::Pinned { a: 0, b: 0 },
            Placement::Pinned { a: 0, b: 1 },
        ]);
        let per_pair = s.warmup_s + s.max_time_s;
        assert!(per_pair * 2.0 <= 0.05, "{per_pair}");
        assert_eq!(s.load_check_s, 0.0);
        assert!(!s.perf_counters);
    }
}
