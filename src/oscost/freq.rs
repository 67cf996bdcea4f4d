//! Effective frequency, cold and warm, without cpufreq.
//!
//! Field notes D: switching the governor from `powersave` to `performance` took a batch job
//! from 168 s to 159 s although powersave reaches full speed under sustained load: bursty work
//! pays the ramp-up each time it wakes. Inside a VM there is usually no cpufreq to ask, so the
//! speed is measured directly: a chain of dependent integer adds, each waiting for the last,
//! retires about one add per cycle on any out-of-order core, so adds per nanosecond is about
//! the clock in GHz. It is timed in short slices (100 us) starting right after ~200 ms of
//! sleep (cold: the median of the first three slices) and continuing through ~1 s of
//! sustained load (warm). The report gives the cold and warm rates, their ratio, and the
//! ramp-up time: when the rolling median of the slices first reaches 95% of the warm rate.
//!
//! The figure is labelled for what it is: loop iterations per ns, ~GHz only if the loop
//! retires one iteration per cycle. A hypervisor that preempts the vCPU makes slices slow
//! (steal), which looks like a low clock; the rolling median keeps single interrupted slices
//! from passing for a ramp.

use crate::stats::{MeanCi, percentile};
use serde::{Deserialize, Serialize};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Dependent adds per timed chunk (a few microseconds at any plausible clock).
const CHUNK: u64 = 16_384;
/// Slices kept raw at the start of each trial.
const HEAD_SLICES: usize = 100;
/// Slices in the rolling median used to find the end of the ramp.
const ROLLING: usize = 5;
/// Slices whose median is the cold rate: one interrupted slice must not pass for a ramp.
const COLD_SLICES: usize = 3;

/// How to run the frequency probe.
#[derive(Clone, Debug, PartialEq)]
pub struct FreqSettings {
    /// Cold-to-warm trials (each starts with the idle sleep).
    pub trials: usize,
    /// Sleep before each trial, so the CPU can drop its clock.
    pub idle: Duration,
    /// Sustained load after which the rate is taken as warm.
    pub load: Duration,
    /// Length of one timed slice.
    pub slice: Duration,
    /// Window after `load` whose median is the warm rate.
    pub warm_window: Duration,
}

impl FreqSettings {
    pub fn standard() -> Self {
        Self {
            trials: 3,
            idle: Duration::from_millis(200),
            load: Duration::from_secs(1),
            slice: Duration::from_micros(100),
            warm_window: Duration::from_millis(100),
        }
    }

    pub fn quick() -> Self {
        Self {
            trials: 2,
            load: Duration::from_millis(500),
            ..Self::standard()
        }
    }
}

/// The frequency probe's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FreqReport {
    /// What every `_per_ns` figure is.
    pub unit: String,
    /// The loop that was timed.
    pub method: String,
    /// True when the loop is the hand-written one-add-per-cycle chain (x86_64); false for the
    /// portable fallback, whose figures are not ~GHz.
    pub one_add_per_cycle_loop: bool,
    /// Length of one timed slice, in microseconds.
    pub slice_us: f64,
    /// Sleep before each trial, in seconds.
    pub idle_s: f64,
    /// Sustained load before the warm window, in seconds.
    pub load_s: f64,
    /// Median rate of the first three slices after idle, in loop iterations per ns.
    pub cold_per_ns: Option<MeanCi>,
    /// Median rate after sustained load, in loop iterations per ns.
    pub warm_per_ns: Option<MeanCi>,
    /// cold / warm: 1 means no ramp; 0.5 means bursty work starts at half speed.
    pub cold_to_warm_ratio: Option<MeanCi>,
    /// Time from the start of the load until the rolling median reached 95% of warm, in us;
    /// over the trials that reached it.
    pub ramp_up_us: Option<MeanCi>,
    /// Every trial, raw.
    pub trials: Vec<FreqTrial>,
}

/// One cold-to-warm trial.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FreqTrial {
    /// Median rate of the first three slices after idle, in loop iterations per ns.
    pub cold_per_ns: f64,
    /// Median rate of the slices in the warm window, in loop iterations per ns.
    pub warm_per_ns: f64,
    /// `None` when the rate never reached 95% of warm before the warm window.
    pub ramp_up_us: Option<f64>,
    /// Number of slices timed.
    pub slices: usize,
    /// The first slices' rates, raw, in loop iterations per ns.
    pub head_per_ns: Vec<f64>,
}

/// `iters` dependent adds (rounded down to a multiple of 8): one add per cycle.
#[cfg(target_arch = "x86_64")]
fn chain(mut x: u64, iters: u64) -> u64 {
    let mut n = (iters / 8).max(1);
    // SAFETY: registers only; no memory, no stack.
    unsafe {
        std::arch::asm!(
            "2:",
            "add {x}, 1", "add {x}, 1", "add {x}, 1", "add {x}, 1",
            "add {x}, 1", "add {x}, 1", "add {x}, 1", "add {x}, 1",
            "dec {n}",
            "jnz 2b",
            x = inout(reg) x,
            n = inout(reg) n,
            options(nomem, nostack),
        );
    }
    black_box(n);
    x
}

#[cfg(not(target_arch = "x86_64"))]
fn chain(mut x: u64, iters: u64) -> u64 {
    for _ in 0..iters {
        x = black_box(x).wrapping_add(1);
    }
    x
}

/// Runs the probe on the calling thread (pin it first).
pub fn run(s: &FreqSettings) -> FreqReport {
    let trials: Vec<FreqTrial> = (0..s.trials).map(|_| trial(s)).collect();
    let pick = |f: &dyn Fn(&FreqTrial) -> Option<f64>| -> Option<MeanCi> {
        let v: Vec<f64> = trials.iter().filter_map(f).collect();
        MeanCi::of(&v)
    };
    FreqReport {
        unit: "loop iterations per ns, ~GHz if the loop retires one iteration per cycle".into(),
        method: if cfg!(target_arch = "x86_64") {
            "x86_64 asm: 8 dependent `add reg, 1` per loop iteration, timed in chunks of 16384"
        } else {
            "portable loop of dependent adds through black_box (not one add per cycle)"
        }
        .into(),
        one_add_per_cycle_loop: cfg!(target_arch = "x86_64"),
        slice_us: s.slice.as_secs_f64() * 1e6,
        idle_s: s.idle.as_secs_f64(),
        load_s: s.load.as_secs_f64(),
        cold_per_ns: pick(&|t| Some(t.cold_per_ns)),
        warm_per_ns: pick(&|t| Some(t.warm_per_ns)),
        cold_to_warm_ratio: pick(&|t| (t.warm_per_ns > 0.0).then(|| t.cold_per_ns / t.warm_per_ns)),
        ramp_up_us: pick(&|t| t.ramp_up_us),
        trials,
    }
}

/// Sleep, then time slices through the load and the warm window.
fn trial(s: &FreqSettings) -> FreqTrial {
    std::thread::sleep(s.idle);
    let start = Instant::now();
    let end = s.load + s.warm_window;
    let mut series: Vec<(f64, f64)> = Vec::new();
    let (mut x, mut iters) = (0u64, 0u64);
    let mut slice_start = start;
    loop {
        x = chain(x, CHUNK);
        iters += CHUNK / 8 * 8;
        let now = Instant::now();
        let dt = now.duration_since(slice_start);
        if dt >= s.slice {
            let offset_us = slice_start.duration_since(start).as_secs_f64() * 1e6;
            series.push((offset_us, iters as f64 / dt.as_nanos() as f64));
            slice_start = now;
            iters = 0;
            if now.duration_since(start) >= end {
                break;
            }
        }
    }
    black_box(x);
    analyse(&series, s.load.as_secs_f64() * 1e6)
}

/// Cold rate (median of the first slices), warm rate (median from `warm_from_us` on), and the ramp-up time,
/// from (slice start offset in us, rate) pairs.
pub fn analyse(series: &[(f64, f64)], warm_from_us: f64) -> FreqTrial {
    let rates: Vec<f64> = series.iter().map(|s| s.1).collect();
    let warm: Vec<f64> = series
        .iter()
        .filter(|s| s.0 >= warm_from_us)
        .map(|s| s.1)
        .collect();
    let warm_per_ns = percentile(if warm.is_empty() { &rates } else { &warm }, 0.5).unwrap_or(0.0);
    let ramp_up_us = (0..series.len())
        .take_while(|&i| series[i].0 < warm_from_us)
        .find(|&i| {
            let w = &rates[i..(i + ROLLING).min(rates.len())];
            percentile(w, 0.5).is_some_and(|m| m >= 0.95 * warm_per_ns)
        })
        .map(|i| series[i].0);
    FreqTrial {
        cold_per_ns: percentile(&rates[..rates.len().min(COLD_SLICES)], 0.5).unwrap_or(0.0),
        warm_per_ns,
        ramp_up_us,
        slices: series.len(),
        head_per_ns: rates.iter().take(HEAD_SLICES).copied().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(rates: &[f64]) -> Vec<(f64, f64)> {
        rates
            .iter()
            .enumerate()
            .map(|(i, r)| (i as f64 * 100.0, *r))
            .collect()
    }

    #[test]
    fn a_flat_clock_has_no_ramp() {
        let mut r = [3.0; 50];
        r[0] = 1.0; // an interrupt in the first slice is not a cold clock
        let t = analyse(&series(&r), 4000.0);
        assert_eq!(t.ramp_up_us, Some(0.0));
        assert_eq!(t.cold_per_ns, 3.0);
        assert_eq!(t.warm_per_ns, 3.0);
    }

    #[test]
    fn a_ramp_is_found_where_the_rolling_median_arrives() {
        // 1.5 GHz for 2 ms, then 3 GHz; slow (interrupted) slices at 0.1 and 4 ms.
        let mut r = vec![1.5; 20];
        r.extend([3.0; 30]);
        r[1] = 0.5;
        r[40] = 0.5;
        let t = analyse(&series(&r), 4500.0);
        assert_eq!(t.cold_per_ns, 1.5);
        assert_eq!(t.warm_per_ns, 3.0);
        // The rolling median of 5 reaches 3.0 once 3 of the 5 slices are fast: slice 18.
        assert_eq!(t.ramp_up_us, Some(1800.0));
    }

    #[test]
    fn the_chain_adds_exactly_what_it_is_asked() {
        // Rounded down to a multiple of 8 on x86_64 (eight adds per loop iteration).
        let expect = |n: u64| {
            if cfg!(target_arch = "x86_64") {
                n / 8 * 8
            } else {
                n
            }
        };
        assert_eq!(chain(5, 800), 5 + expect(800));
        assert_eq!(chain(0, CHUNK), expect(CHUNK));
    }

    #[test]
    fn a_short_probe_keeps_every_trial_and_slice() {
        let s = FreqSettings {
            trials: 2,
            idle: Duration::from_millis(1),
            load: Duration::from_millis(5),
            slice: Duration::from_micros(100),
            warm_window: Duration::from_millis(2),
        };
        let r = run(&s);
        assert_eq!(r.trials.len(), 2);
        for t in &r.trials {
            // Each slice lasts at least `slice`, so the run cannot hold more than
            // (load + warm window) / slice of them, plus the one that crosses the end.
            assert!(t.slices >= 1 && t.slices <= 71, "{} slices", t.slices);
            assert_eq!(t.head_per_ns.len(), t.slices.min(HEAD_SLICES));
            assert!(t.head_per_ns.iter().all(|r| *r > 0.0));
            assert!(
                t.ramp_up_us.is_none_or(|u| u < 5000.0),
                "the ramp ends before the warm window"
            );
        }
        let cold = r.cold_per_ns.unwrap();
        assert_eq!(cold.n, 2, "one cold rate per trial");
        assert!(cold.ci95_low <= cold.mean && cold.mean <= cold.ci95_high);
    }
}
