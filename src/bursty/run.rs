//! Running the duty cycle: calibrate the work on a warm CPU, then per run the warm reference and
//! the bursts after each sleep.

use super::{BurstyReport, BurstyRun, BurstySettings};
use crate::experiment::Progress;
use crate::machine::{Conditions, Machine};
use crate::stats::percentile;
use anyhow::{Context, Result};
use nix::time::{ClockId, clock_gettime};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// The work: a dependent chain of multiply-adds the compiler cannot fold away.
pub fn work(iterations: u64) -> u64 {
    let mut x = black_box(0x9e37_79b9_7f4a_7c15_u64);
    for _ in 0..iterations {
        x = black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
    }
    x
}

/// This thread's CPU time in nanoseconds.
fn thread_cpu_ns() -> f64 {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as f64 * 1e9 + t.tv_nsec() as f64)
        .unwrap_or(f64::NAN)
}

/// Iterations that take `target` on this CPU once it is warm: spin ~100 ms first, then scale
/// from a timed batch.
fn calibrate(target: Duration) -> u64 {
    let warm_until = Instant::now() + Duration::from_millis(100);
    let mut n = 1_000_u64;
    while Instant::now() < warm_until {
        work(n);
    }
    loop {
        let t = Instant::now();
        work(n);
        let took = t.elapsed();
        if took >= Duration::from_millis(20) || n >= 1 << 40 {
            let per_iter = took.as_secs_f64() / n as f64;
            return ((target.as_secs_f64() / per_iter) as u64).max(1);
        }
        n *= 2;
    }
}

/// Summary of one run's samples (`None` when there are none).
pub fn summarise(
    burst_ns: Vec<f64>,
    burst_cpu_ns: Vec<f64>,
    warm_ns: Vec<f64>,
) -> Option<BurstyRun> {
    let mean_ns =
        (!burst_ns.is_empty()).then(|| burst_ns.iter().sum::<f64>() / burst_ns.len() as f64)?;
    let (p50_ns, warm_p50_ns) = (percentile(&burst_ns, 0.50)?, percentile(&warm_ns, 0.50)?);
    Some(BurstyRun {
        p50_ns,
        p99_ns: percentile(&burst_ns, 0.99)?,
        mean_ns,
        warm_p50_ns,
        slowdown: p50_ns / warm_p50_ns,
        burst_ns,
        burst_cpu_ns,
        warm_ns,
    })
}

fn one_run(s: &BurstySettings, iterations: u64) -> Option<BurstyRun> {
    // The warm reference: a tenth of the run, at least 10 bursts, back to back.
    let warm_until = Instant::now() + s.duration / 10;
    let mut warm_ns = Vec::new();
    while warm_ns.len() < 10 || Instant::now() < warm_until {
        let t = Instant::now();
        work(iterations);
        warm_ns.push(t.elapsed().as_nanos() as f64);
    }
    let (mut burst_ns, mut burst_cpu_ns) = (Vec::new(), Vec::new());
    let end = Instant::now() + s.duration;
    while Instant::now() < end || burst_ns.len() < 2 {
        std::thread::sleep(s.sleep);
        let (t, cpu) = (Instant::now(), thread_cpu_ns());
        work(iterations);
        burst_cpu_ns.push(thread_cpu_ns() - cpu);
        burst_ns.push(t.elapsed().as_nanos() as f64);
    }
    summarise(burst_ns, burst_cpu_ns, warm_ns)
}

/// Measures `s.repeats` runs on the calling thread under `conditions`, its affinity the
/// allowed set meanwhile.
pub fn measure(
    machine: &Machine,
    s: &BurstySettings,
    conditions: Conditions,
    progress: &Progress,
) -> Result<BurstyReport> {
    let cpus = s.cpus.clone().unwrap_or_else(|| machine.allowed.clone());
    let saved = crate::affinity::get(0)?;
    crate::affinity::set(0, &cpus)?;
    progress.step("calibrating the work on a warm CPU");
    let iterations = calibrate(s.work);
    let mut runs = Vec::new();
    for i in 0..s.repeats {
        progress.step(&format!("run {}/{}", i + 1, s.repeats));
        runs.extend(one_run(s, iterations));
    }
    crate::affinity::set(0, &saved).context("restoring this thread's CPU affinity")?;
    let of =
        |f: fn(&BurstyRun) -> f64| super::nonnegative_ci(&runs.iter().map(f).collect::<Vec<_>>());
    Ok(BurstyReport {
        settings: s.clone(),
        conditions,
        iterations,
        p50_ns: of(|x| x.p50_ns),
        p99_ns: of(|x| x.p99_ns),
        mean_ns: of(|x| x.mean_ns),
        warm_p50_ns: of(|x| x.warm_p50_ns),
        slowdown: of(|x| x.slowdown),
        runs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_orders_percentiles_and_keeps_samples() {
        let r = summarise(vec![3.0, 1.0, 2.0, 10.0], vec![1.0; 4], vec![1.0, 1.0]).unwrap();
        assert!(r.p50_ns <= r.p99_ns);
        assert_eq!(r.mean_ns, 4.0);
        assert_eq!(r.p50_ns, 2.0);
        assert_eq!(r.slowdown, 2.0);
        assert_eq!(r.burst_ns.len(), 4);
        assert!(summarise(vec![], vec![], vec![1.0]).is_none());
    }

    #[test]
    fn more_iterations_cost_more_cpu_time() {
        let t = thread_cpu_ns();
        work(1_000_000);
        let one = thread_cpu_ns() - t;
        let t = thread_cpu_ns();
        work(0);
        let none = thread_cpu_ns() - t;
        assert!(one > none, "{one} vs {none}");
    }
}
