//! CPU load made on purpose: workers that count deterministic work units, and burners that only
//! take CPU time. `share` runs both; pair, scale, oscost and the doctor use the burners, the
//! CPU-time clocks or the start gate, so they live here rather than inside `share`.
//!
//! The work unit is sysbench cpu's event: check every number from 3 to `max_prime` for
//! primality by trial division. It touches no memory beyond registers, so its rate depends only
//! on how much CPU time the thread gets and how fast the core runs; that is what makes "rate
//! relative to alone" a measure of CPU share. Each worker times its own interval, from the start
//! gate to the end of its last event, and divides by that, never by the requested duration.
//!
//! A burner at duty `d` spins until it has used `d * period` of *its own CPU time*, then sleeps
//! `(1 - d) * period`. Counting CPU time rather than wall time makes its demand `d` CPUs
//! whatever it competes with, which is what the fair-share model assumes.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// CPUs' worth of other load during a run above which the result is marked noisy.
pub const OTHER_LOAD_NOISY_CPUS: f64 = 0.1;

/// One sysbench-cpu event: the number of primes in 3..=max_prime, by trial division.
pub fn prime_event(max_prime: u64) -> u64 {
    let mut n = 0;
    for c in 3..=max_prime {
        let t = (c as f64).sqrt() as u64;
        let mut l = 2;
        while l <= t {
            if c % l == 0 {
                break;
            }
            l += 1;
        }
        if l > t {
            n += 1;
        }
    }
    n
}

/// CPU time used so far by the calling thread, in seconds.
pub fn thread_cpu_s() -> f64 {
    cpu_clock_s(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Reads a CPU-time clock (the calling thread's, or another thread's from
/// `pthread_getcpuclockid`). Zero if the clock cannot be read.
pub fn cpu_clock_s(clock: libc::clockid_t) -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::from_raw(clock))
        .map_or(0.0, |ts| ts.tv_sec() as f64 + ts.tv_nsec() as f64 * 1e-9)
}

/// CPU time used so far by the whole process (every thread), in seconds.
pub fn process_cpu_s() -> f64 {
    cpu_clock_s(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPUs' worth of time that something other than this process used on the CPUs of `delta`
/// during its interval: their busy time minus `own_cpu_s`, the process's CPU time over the
/// same interval. `None` without per-CPU times. Tick-granular (1/USER_HZ per CPU).
pub fn other_load_cpus(delta: &crate::counters::SystemDelta, own_cpu_s: f64) -> Option<f64> {
    if delta.cpu_time.is_empty() || delta.interval_s <= 0.0 {
        return None;
    }
    let busy: f64 = delta.cpu_time.values().map(|c| c.busy_pct() / 100.0).sum();
    Some((busy - own_cpu_s / delta.interval_s).max(0.0))
}

/// The CPU-time clock of another thread, if the system provides one.
pub fn thread_clock(thread: libc::pthread_t) -> Option<libc::clockid_t> {
    let mut id: libc::clockid_t = 0;
    // SAFETY: nix wraps clock_getcpuclockid (processes) but not pthread_getcpuclockid (threads).
    // `thread` is a live thread (the caller holds its join handle); `id` is writable.
    (unsafe { libc::pthread_getcpuclockid(thread, &mut id) } == 0).then_some(id)
}

/// A start line that threads wait at until it opens. Unlike a barrier it can always be opened,
/// also on an error path with fewer threads than planned, so no thread is left waiting for a
/// sibling that never started.
#[derive(Debug, Default)]
pub struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    pub fn new() -> Self {
        Self::default()
    }

    /// Blocks until [`Gate::open`] has been called (returns at once after that).
    pub fn wait(&self) {
        let mut g = self.open.lock().unwrap_or_else(|e| e.into_inner());
        while !*g {
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    pub fn open(&self) {
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cv.notify_all();
    }
}

/// What one worker did during its interval.
#[derive(Clone, Copy, Debug, Default)]
pub struct WorkerOutcome {
    /// Complete events.
    pub events: u64,
    /// From the start gate to the end of the last event, as this thread measured it.
    pub interval_s: f64,
    /// CPU time the thread used in that interval.
    pub cpu_s: f64,
}

/// Runs prime events from the gate's opening until `stop` is set.
pub fn run_worker(start: &Gate, stop: &AtomicBool, max_prime: u64) -> WorkerOutcome {
    start.wait();
    let t0 = Instant::now();
    let c0 = thread_cpu_s();
    let mut events = 0u64;
    while !stop.load(Ordering::Relaxed) {
        black_box(prime_event(black_box(max_prime)));
        events += 1;
    }
    WorkerOutcome {
        events,
        interval_s: t0.elapsed().as_secs_f64(),
        cpu_s: thread_cpu_s() - c0,
    }
}

/// A burner's duty cycle.
#[derive(Clone, Copy, Debug)]
pub struct Duty {
    /// Fraction of the period spent busy, 0 < fraction <= 1.
    pub fraction: f64,
    /// One busy + sleep cycle.
    pub period: Duration,
}

/// Spins (and sleeps, below 100% duty) until `stop` is set. Pins itself first when asked.
pub fn run_burner(stop: &AtomicBool, duty: Duty, cpu: Option<u32>) {
    if let Some(c) = cpu {
        // Validated against the allowed set before any thread started; if the kernel still
        // refuses, the burner runs unpinned rather than not at all.
        let _ = crate::affinity::pin_self(c);
    }
    let busy_s = duty.fraction * duty.period.as_secs_f64();
    let sleep = duty.period.mul_f64((1.0 - duty.fraction).max(0.0));
    let mut x = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if duty.fraction >= 1.0 {
            for _ in 0..4096 {
                x = black_box(x.wrapping_add(1));
            }
            continue;
        }
        let until = thread_cpu_s() + busy_s;
        while thread_cpu_s() < until && !stop.load(Ordering::Relaxed) {
            for _ in 0..4096 {
                x = black_box(x.wrapping_add(1));
            }
        }
        std::thread::sleep(sleep);
    }
    black_box(x);
}

/// Busy neighbours: normal-priority threads that spin at 100% (like `stress-ng -c N -l 100`)
/// until dropped. Each is pinned to its CPU when one is given, else left to the scheduler.
/// They are threads of this process, so they end with it whatever happens to it.
pub struct BusyNeighbours {
    stop: std::sync::Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl BusyNeighbours {
    /// One spinning thread per entry of `cpus` (`None`: unpinned).
    pub fn start(cpus: &[Option<u32>]) -> Self {
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let duty = Duty {
            fraction: 1.0,
            period: Duration::from_millis(100),
        };
        let threads = cpus
            .iter()
            .map(|&cpu| {
                let stop = stop.clone();
                std::thread::spawn(move || run_burner(&stop, duty, cpu))
            })
            .collect();
        Self { stop, threads }
    }

    /// How many are spinning.
    pub fn len(&self) -> usize {
        self.threads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }
}

impl Drop for BusyNeighbours {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_neighbours_use_cpu_time_and_stop_when_dropped() {
        let before = process_cpu_s();
        let n = BusyNeighbours::start(&[None]);
        assert_eq!(n.len(), 1);
        std::thread::sleep(Duration::from_millis(100));
        drop(n);
        let used = process_cpu_s() - before;
        assert!(used > 0.0, "a spinning thread used no CPU time");
        // drop() joined every thread: none is left spinning.
    }

    #[test]
    fn prime_event_counts_primes() {
        // Primes in 3..=100: 24 (25 below 100, minus 2).
        assert_eq!(prime_event(100), 24);
        assert_eq!(prime_event(10), 3);
    }

    #[test]
    fn worker_counts_and_measures_its_own_interval() {
        let b = Gate::new();
        let stop = AtomicBool::new(false);
        let out = std::thread::scope(|s| {
            let h = s.spawn(|| run_worker(&b, &stop, 1000));
            b.open();
            std::thread::sleep(Duration::from_millis(30));
            stop.store(true, Ordering::Relaxed);
            h.join().unwrap()
        });
        assert!(out.events > 0);
        // It ran at least one event, so it used CPU time; one thread cannot use more CPU time
        // than the time that passed (its CPU clock is read a few microseconds after the wall
        // clock: a millisecond of slack).
        assert!(out.interval_s > 0.0 && out.cpu_s > 0.0, "{out:?}");
        assert!(out.cpu_s <= out.interval_s + 1e-3, "{out:?}");
    }
}
