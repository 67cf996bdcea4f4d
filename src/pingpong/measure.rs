//! The timed loop on the initiator's side: warm-up, batches, adaptive stopping.
//!
//! The loop reads the clock once per round trip: the end of one round trip is the start of the
//! next, so the only work between two readings besides the round trip itself is one store of
//! the tick difference into a preallocated batch buffer (the histogram is filled between
//! batches; see `clock` for why ticks rather than nanoseconds). Round trips are grouped in batches of about `batch_s`; the batch means are
//! the samples of the confidence interval (method of batch means, see `stats`), because
//! neighbouring round trips are correlated while batches of thousands are nearly independent.
//! Between batches the loop may sample where the ends run and decides whether to stop: once the
//! interval is narrow enough (after a minimum number of batches), or when the time is up.
//! That work happens between clock readings that do not count, so it never lands in a figure.

use super::clock::{Mark, Timer};
use super::transport::Initiator;
use crate::stats::{MeanCi, Percentiles};
use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Why a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndedBy {
    /// The 95% CI half-width reached the target fraction of the mean.
    Converged,
    /// `max_time_s` was reached first.
    MaxTime,
}

/// How long to run and when to stop.
#[derive(Clone, Copy, Debug)]
pub struct LoopLimits {
    pub warmup: Duration,
    pub max_time: Duration,
    pub target_ci_rel: f64,
    pub min_batches: usize,
    pub batch: Duration,
}

/// Most round trips in one batch: bounds the batch buffer (8 bytes each) for fast methods.
const MAX_BATCH: f64 = 65_536.0;

/// The raw outcome of the timed loop.
pub struct Measured {
    /// Percentiles of every timed round trip, in nanoseconds.
    pub rtt: Percentiles,
    pub batch_means_ns: Vec<f64>,
    pub batch_round_trips: u64,
    pub round_trips: u64,
    /// Sum of the batches' durations: the time the round trips took, boundaries excluded.
    pub measured_s: f64,
    pub ended_by: EndedBy,
    /// With work after each wakeup: its mean per round trip in each batch, in nanoseconds
    /// (empty without). Timed apart: none of it is in the round-trip figures.
    pub touch_batch_means_ns: Vec<f64>,
}

/// Untimed round trips for `warmup` (at least 16, which also proves the responder is in its
/// loop); returns how many ran and the batch length that makes a batch last about `batch`.
pub fn warm_up(ini: &mut dyn Initiator, limits: &LoopLimits) -> Result<(u64, u64)> {
    let start = Instant::now();
    let mut n = 0u64;
    while n < 16 || start.elapsed() < limits.warmup {
        ini.round_trip().context("round trip during warm-up")?;
        n += 1;
    }
    let per_rt = start.elapsed().as_secs_f64() / n as f64;
    let batch = (limits.batch.as_secs_f64() / per_rt.max(1e-9)).round();
    Ok((n, batch.clamp(1.0, MAX_BATCH) as u64))
}

/// The timed batches. `between_batches` runs after each batch, outside the timed intervals;
/// `work`, when given, is touched after each pong and timed apart.
pub fn measure(
    ini: &mut dyn Initiator,
    limits: &LoopLimits,
    batch_round_trips: u64,
    timer: Timer,
    mut work: Option<&mut [u64]>,
    between_batches: &mut dyn FnMut(),
) -> Result<Measured> {
    // 1 to 10^12 ticks (over 5 minutes at 3 GHz) at 3 significant digits: ~250 KiB.
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 1_000_000_000_000, 3)
        .context("cannot allocate the latency histogram")?;
    let mut buffer = vec![0u64; batch_round_trips as usize];
    let mut batch_means = Vec::new();
    let mut touch_means = Vec::new();
    let mut measured_ticks = 0u64;
    let start = Instant::now();
    let first = Mark::now(timer);
    let mut prev = timer.ticks();
    let ended_by = loop {
        let batch_start = prev;
        let touched = match work.as_deref_mut() {
            None => {
                ini.timed_laps(&mut buffer, timer, &mut prev)
                    .context("round trip")?;
                None
            }
            Some(w) => Some(
                ini.timed_laps_touching(&mut buffer, w, timer, &mut prev)
                    .context("round trip")?,
            ),
        };
        let batch_ticks = prev
            .wrapping_sub(batch_start)
            .saturating_sub(touched.unwrap_or(0));
        if let Some(t) = touched {
            touch_means.push(t as f64 / batch_round_trips as f64);
        }
        measured_ticks += batch_ticks;
        batch_means.push(batch_ticks as f64 / batch_round_trips as f64);
        for &t in &buffer {
            histogram.saturating_record(t.max(1));
        }
        between_batches();
        // The CI's relative width does not depend on the unit, so ticks will do here.
        if let Some(why) = should_stop(&batch_means, start.elapsed(), limits) {
            break why;
        }
        prev = timer.ticks();
    };
    let k = first.ns_per_tick(&Mark::now(timer), timer);
    Ok(Measured {
        rtt: Percentiles::from_histogram_scaled(&histogram, k),
        round_trips: batch_round_trips * batch_means.len() as u64,
        batch_means_ns: batch_means.iter().map(|m| m * k).collect(),
        batch_round_trips,
        measured_s: measured_ticks as f64 * k / 1e9,
        ended_by,
        touch_batch_means_ns: touch_means.iter().map(|m| m * k).collect(),
    })
}

/// Time is up, or enough batches and a narrow enough interval.
fn should_stop(batch_means: &[f64], elapsed: Duration, limits: &LoopLimits) -> Option<EndedBy> {
    if batch_means.len() >= limits.min_batches.max(2)
        && limits.target_ci_rel > 0.0
        && MeanCi::of(batch_means).is_some_and(|ci| ci.rel_half_width() <= limits.target_ci_rel)
    {
        return Some(EndedBy::Converged);
    }
    (elapsed >= limits.max_time).then_some(EndedBy::MaxTime)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(target: f64) -> LoopLimits {
        LoopLimits {
            warmup: Duration::ZERO,
            max_time: Duration::from_secs(1),
            target_ci_rel: target,
            min_batches: 10,
            batch: Duration::from_millis(5),
        }
    }

    #[test]
    fn stops_on_a_narrow_interval_only_after_enough_batches() {
        let steady = vec![100.0, 101.0, 99.0, 100.0, 100.5];
        assert_eq!(should_stop(&steady, Duration::ZERO, &limits(0.02)), None);
        let more: Vec<f64> = steady.iter().cycle().take(10).copied().collect();
        assert_eq!(
            should_stop(&more, Duration::ZERO, &limits(0.02)),
            Some(EndedBy::Converged)
        );
        // A zero target never converges: the run lasts max_time.
        assert_eq!(should_stop(&more, Duration::ZERO, &limits(0.0)), None);
        assert_eq!(
            should_stop(&more, Duration::from_secs(1), &limits(0.0)),
            Some(EndedBy::MaxTime)
        );
    }

    /// A transport that costs nothing: what remains is the loop's own cost per round trip
    /// (printed with `--nocapture`; never asserted, timings are not tests).
    struct Noop;
    impl Initiator for Noop {
        fn round_trip(&mut self) -> std::io::Result<()> {
            Ok(())
        }
        fn stop(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_loop_alone_yields_consistent_figures() {
        let l = LoopLimits {
            max_time: Duration::from_millis(50),
            ..limits(0.0)
        };
        let (_, batch) = warm_up(&mut Noop, &l).unwrap();
        let t = Timer::detect(std::path::Path::new("/"));
        let m = measure(&mut Noop, &l, batch, t, None, &mut || {}).unwrap();
        assert_eq!(m.ended_by, EndedBy::MaxTime);
        assert_eq!(m.round_trips, batch * m.batch_means_ns.len() as u64);
        assert_eq!(m.rtt.count, m.round_trips);
        assert!(m.rtt.min_ns <= m.rtt.p50_ns && m.rtt.p50_ns <= m.rtt.max_ns);
        assert!(m.touch_batch_means_ns.is_empty(), "no work, no figure");
        eprintln!(
            "loop cost per round trip with a no-op transport ({t:?}): {:.1} ns",
            m.measured_s * 1e9 / m.round_trips as f64
        );
    }

    #[test]
    fn work_after_each_wakeup_is_timed_apart_from_the_round_trip() {
        let l = LoopLimits {
            max_time: Duration::from_millis(50),
            ..limits(0.0)
        };
        let (_, batch) = warm_up(&mut Noop, &l).unwrap();
        let t = Timer::detect(std::path::Path::new("/"));
        let mut work = vec![0u64; 8 * 64];
        let m = measure(&mut Noop, &l, batch, t, Some(&mut work), &mut || {}).unwrap();
        assert_eq!(m.touch_batch_means_ns.len(), m.batch_means_ns.len());
        assert!(
            m.touch_batch_means_ns
                .iter()
                .all(|v| v.is_finite() && *v > 0.0)
        );
        // Each round trip wrote once to each of the 64 lines, and to nothing else.
        let rounds = m.round_trips;
        assert!(
            work.iter().step_by(8).all(|&w| w == rounds),
            "{:?}",
            &work[..16]
        );
        assert!(work.iter().enumerate().all(|(i, &w)| i % 8 == 0 || w == 0));
    }

    #[test]
    fn wide_intervals_run_until_time_is_up() {
        let noisy: Vec<f64> = (0..20)
            .map(|i| if i % 2 == 0 { 10.0 } else { 90.0 })
            .collect();
        assert_eq!(should_stop(&noisy, Duration::ZERO, &limits(0.02)), None);
    }
}
