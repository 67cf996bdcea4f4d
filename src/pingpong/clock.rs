//! The cheapest trustworthy clock for the timed loop.
//!
//! The clock is read once per round trip, on the critical path: whatever it costs is added to
//! every figure. A vDSO `clock_gettime` costs ~25-35 ns in this project's KVM guest, the TSC
//! ~10-17 ns: on a 3 us same-CPU round trip that is the difference between ~1% and ~0.5% of
//! overhead. The TSC is used only where the kernel itself trusts it (x86-64 with `tsc` as the
//! current clocksource: constant rate, synchronised across CPUs); ticks are converted to
//! nanoseconds with the ratio measured over the whole run against CLOCK_MONOTONIC. Anywhere
//! else the loop reads CLOCK_MONOTONIC directly and a tick is a nanosecond.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Which counter timed the round trips.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Timer {
    /// The x86 time-stamp counter (the kernel's clocksource is `tsc`).
    Tsc,
    /// `clock_gettime(CLOCK_MONOTONIC)`.
    Monotonic,
}

impl Timer {
    /// The TSC when the kernel uses it as its clocksource on x86-64, else CLOCK_MONOTONIC.
    pub fn detect(root: &Path) -> Self {
        let tsc = crate::probe::virt::read_clocksource(root)
            .value()
            .is_some_and(|s| s == "tsc");
        if cfg!(target_arch = "x86_64") && tsc {
            Timer::Tsc
        } else {
            Timer::Monotonic
        }
    }

    /// The current tick count.
    #[inline(always)]
    pub fn ticks(self) -> u64 {
        match self {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: rdtsc has no preconditions on x86-64.
            Timer::Tsc => unsafe { core::arch::x86_64::_rdtsc() },
            _ => monotonic_ns(),
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to write; CLOCK_MONOTONIC always exists on Linux. Raw
    // libc on purpose: this is read once per round trip on the timed path, and a wrapper's
    // error conversion would add its cost to every figure.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A pair of readings (ticks, nanoseconds) taken together, to convert ticks to nanoseconds.
#[derive(Clone, Copy, Debug)]
pub struct Mark {
    ticks: u64,
    ns: u64,
}

impl Mark {
    pub fn now(timer: Timer) -> Self {
        Self {
            ticks: timer.ticks(),
            ns: monotonic_ns(),
        }
    }

    /// Nanoseconds per tick between `self` and a later mark (exactly 1 for CLOCK_MONOTONIC).
    pub fn ns_per_tick(&self, later: &Mark, timer: Timer) -> f64 {
        let ticks = later.ticks.saturating_sub(self.ticks);
        match timer {
            Timer::Monotonic => 1.0,
            Timer::Tsc if ticks == 0 => 1.0,
            Timer::Tsc => later.ns.saturating_sub(self.ns) as f64 / ticks as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_advance_across_a_sleep() {
        let t = Timer::detect(Path::new("/"));
        let a = Mark::now(t);
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = Mark::now(t);
        // A sleep never returns early: the monotonic clock moved at least 2 ms, and the
        // timer's ticks moved forward with it.
        assert!(b.ns - a.ns >= 2_000_000, "{a:?} {b:?}");
        assert!(b.ticks > a.ticks, "{a:?} {b:?}");
    }

    #[test]
    fn ticks_convert_by_the_measured_ratio() {
        let a = Mark { ticks: 1000, ns: 0 };
        let b = Mark {
            ticks: 4000,
            ns: 1000,
        };
        assert_eq!(a.ns_per_tick(&b, Timer::Tsc), 1000.0 / 3000.0);
        assert_eq!(a.ns_per_tick(&b, Timer::Monotonic), 1.0);
        assert_eq!(
            a.ns_per_tick(&a, Timer::Tsc),
            1.0,
            "no ticks: no ratio to divide by"
        );
    }

    #[test]
    fn the_tsc_only_where_the_kernel_trusts_it() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("sys/devices/system/clocksource/clocksource0");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("current_clocksource"), "kvm-clock\n").unwrap();
        assert_eq!(Timer::detect(t.path()), Timer::Monotonic);
        std::fs::write(dir.join("current_clocksource"), "tsc\n").unwrap();
        let want = if cfg!(target_arch = "x86_64") {
            Timer::Tsc
        } else {
            Timer::Monotonic
        };
        assert_eq!(Timer::detect(t.path()), want);
        assert_eq!(Timer::detect(&t.path().join("none")), Timer::Monotonic);
    }
}
