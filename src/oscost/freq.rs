//! Effective frequency, cold and warm, without cpufreq.
//!
//! Field notes D: switching the governor from `powersave` to `performance` took a batch job
//! from 168 s to 159 s although powersave reaches full speed under sustained load: bursty work
//! pays the ramp-up each time it wakes. Inside a VM there is usually no cpufreq to ask, so the
//! speed is measured directly: a chain of dependent 64-bit multiplies, each waiting for the
//! last (3 cycles each on every x86-64 core from Nehalem and Zen on, and no renamer removes
//! them, unlike the dependent add-immediates a Golden Cove core folds five at a time). It is
//! timed in short slices (100 us) starting right after ~200 ms of sleep (cold: the median of
//! the first three slices) and continuing through ~1 s of sustained load (warm). The report
//! gives the cold and warm loop rates, their ratio, and the ramp-up time: when the rolling
//! median of the slices first reaches 95% of the warm rate.
//!
//! A loop rate is not a frequency. It becomes one only through [`super::clock`]: a calibration
//! that times the multiply chain beside an add chain and the TSC and checks the result against
//! what the CPU can run at; the MHz figures exist only when that check accepts the clock. A
//! hypervisor that preempts the vCPU makes slices slow (steal), which looks like a low clock;
//! the rolling median keeps single interrupted slices from passing for a ramp.

use super::clock::{self, ChainRates, ClockCheck, ClockRefs};
use crate::stats::{MeanCi, percentile};
use serde::{Deserialize, Serialize};
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

/// Dependent multiplies per timed chunk (a few microseconds at any plausible clock).
const CHUNK: u64 = 4096;
/// Calibration: rounds of each chain, and operations per round (about 1 ms each).
const CALIBRATION_ROUNDS: usize = 7;
const CALIBRATION_OPS: u64 = 1 << 20;
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
    /// Cycles one loop iteration takes when the clock check accepts the clock (3 for the
    /// multiply chain); `None` when the loop rate is no clock.
    #[serde(default)]
    pub cycles_per_iteration: Option<f64>,
    /// The clock check: the calibration chains, the TSC, what the kernel and CPUID report, and
    /// whether the measured clock is accepted.
    #[serde(default)]
    pub clock: Option<ClockCheck>,
    /// Cold clock in MHz (cold rate x cycles per iteration), only when the clock is accepted.
    #[serde(default)]
    pub cold_mhz: Option<MeanCi>,
    /// Warm clock in MHz, only when the clock is accepted.
    #[serde(default)]
    pub warm_mhz: Option<MeanCi>,
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

/// `iters` dependent adds (rounded down to a multiple of 8).
#[cfg(target_arch = "x86_64")]
fn add_chain(mut x: u64, iters: u64) -> u64 {
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

/// `iters` dependent 64-bit multiplies by an odd constant (rounded down to a multiple of 8):
/// each waits for the last, 3 cycles apart.
#[cfg(target_arch = "x86_64")]
fn chain(mut x: u64, iters: u64) -> u64 {
    let mut n = (iters / 8).max(1);
    let k: u64 = 0x9E37_79B9_7F4A_7C15;
    // SAFETY: registers only; no memory, no stack.
    unsafe {
        std::arch::asm!(
            "2:",
            "imul {x}, {k}", "imul {x}, {k}", "imul {x}, {k}", "imul {x}, {k}",
            "imul {x}, {k}", "imul {x}, {k}", "imul {x}, {k}", "imul {x}, {k}",
            "dec {n}",
            "jnz 2b",
            x = inout(reg) x,
            n = inout(reg) n,
            k = in(reg) k,
            options(nomem, nostack),
        );
    }
    black_box(n);
    x
}

#[cfg(not(target_arch = "x86_64"))]
fn add_chain(mut x: u64, iters: u64) -> u64 {
    for _ in 0..iters {
        x = black_box(x).wrapping_add(1);
    }
    x
}

#[cfg(not(target_arch = "x86_64"))]
fn chain(mut x: u64, iters: u64) -> u64 {
    for _ in 0..iters {
        x = black_box(x).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    x
}

/// Operations a chain call really ran.
fn ran(iters: u64) -> u64 {
    if cfg!(target_arch = "x86_64") {
        (iters / 8).max(1) * 8
    } else {
        iters
    }
}

fn tsc() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC is unprivileged on Linux x86_64 (CR4.TSD is clear for user space).
        Some(unsafe { core::arch::x86_64::_rdtsc() })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// Times both chains in alternating rounds, and the TSC over the multiply rounds; each rate is
/// the fastest round's (preemption only slows a round).
pub fn calibrate() -> ChainRates {
    let (mut add, mut imul, mut tscs) = (0f64, 0f64, Vec::new());
    let mut x = 1u64;
    for _ in 0..CALIBRATION_ROUNDS {
        let t = Instant::now();
        x = add_chain(x, CALIBRATION_OPS);
        add = add.max(ran(CALIBRATION_OPS) as f64 / t.elapsed().as_nanos().max(1) as f64);
        let (t, c) = (Instant::now(), tsc());
        x = chain(x | 1, CALIBRATION_OPS);
        let ns = t.elapsed().as_nanos().max(1) as f64;
        imul = imul.max(ran(CALIBRATION_OPS) as f64 / ns);
        if let (Some(a), Some(b)) = (c, tsc()) {
            tscs.push(b.wrapping_sub(a) as f64 / ns);
        }
    }
    black_box(x);
    ChainRates {
        add_per_ns: add,
        imul_per_ns: imul,
        tsc_per_ns: percentile(&tscs, 0.5),
    }
}

/// Runs the probe on the calling thread (pin it first); `root` is where the kernel's and
/// CPUID's account of the clock is read.
pub fn run(s: &FreqSettings, root: &Path) -> FreqReport {
    // A signal ends the trials early; the caller reports the interruption.
    let trials: Vec<FreqTrial> = (0..s.trials)
        .map_while(|_| crate::signals::pending().is_none().then(|| trial(s)))
        .collect();
    // Right after the warm window: the clock is at its sustained speed.
    let check = clock::judge(
        calibrate(),
        ClockRefs::read(root),
        cfg!(target_arch = "x86_64"),
    );
    report(s, trials, Some(check))
}

/// The report from the trials and the clock check (pure).
pub fn report(s: &FreqSettings, trials: Vec<FreqTrial>, check: Option<ClockCheck>) -> FreqReport {
    let pick = |f: &dyn Fn(&FreqTrial) -> Option<f64>| -> Option<MeanCi> {
        let v: Vec<f64> = trials.iter().filter_map(f).collect();
        MeanCi::of(&v)
    };
    let cycles = check
        .as_ref()
        .filter(|c| c.accepted)
        .map(|_| clock::IMUL_LATENCY_CYCLES);
    let mhz = |f: &dyn Fn(&FreqTrial) -> f64| {
        cycles
            .and_then(|c| MeanCi::of(&trials.iter().map(|t| f(t) * c * 1000.0).collect::<Vec<_>>()))
    };
    FreqReport {
        unit: "loop iterations (dependent multiplies) per ns: a loop rate, MHz only through the clock check".into(),
        method: if cfg!(target_arch = "x86_64") {
            "x86_64 asm: 8 dependent `imul r64, r64` per loop iteration, timed in chunks of 4096"
        } else {
            "portable loop of dependent multiplies through black_box (latency unknown: no clock)"
        }
        .into(),
        cycles_per_iteration: cycles,
        cold_mhz: mhz(&|t| t.cold_per_ns),
        warm_mhz: mhz(&|t| t.warm_per_ns),
        clock: check,
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
        x = chain(x | 1, CHUNK);
        iters += ran(CHUNK);
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
    fn the_chains_run_exactly_what_they_are_asked() {
        // Rounded down to a multiple of 8 on x86_64 (eight operations per loop iteration).
        assert_eq!(add_chain(5, 800), 5 + ran(800));
        assert_eq!(ran(CHUNK), CHUNK);
        let k: u64 = 0x9E37_79B9_7F4A_7C15;
        let want = (0..ran(80)).fold(3u64, |x, _| x.wrapping_mul(k));
        assert_eq!(
            chain(3, 80),
            want,
            "80 dependent multiplies, none folded away"
        );
    }

    #[test]
    fn the_calibration_is_physical() {
        let r = calibrate();
        assert!(r.add_per_ns > 0.0 && r.imul_per_ns > 0.0);
        // A multiply never completes faster than an add on a dependent chain.
        assert!(r.imul_per_ns <= r.add_per_ns * 1.1, "{r:?}");
        if let Some(t) = r.tsc_per_ns {
            assert!(t > 0.0);
        }
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
        let r = run(&s, Path::new("/"));
        assert_eq!(r.trials.len(), 2);
        let c = r.clock.as_ref().unwrap();
        assert_eq!(
            c.accepted,
            r.cold_mhz.is_some(),
            "MHz only from an accepted clock"
        );
        assert!(c.used_mhz.is_none_or(|m| m > 0.0));
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
        let each: Vec<f64> = r.trials.iter().map(|t| t.cold_per_ns).collect();
        crate::testing::assert_mean_ci_of("cold rate", &cold, &each);
    }
}
