//! The timed loop on the initiator's side: warm-up, batches, adaptive stopping.
//!
//! The loop reads the clock once per round trip: the end of one round trip is the start of the
//! next, so the only work between two readings besides the round trip itself is recording one
//! histogram value. Round trips are grouped in batches of about `batch_s`; the batch means are
//! the samples of the confidence interval (method of batch means, see `stats`), because
//! neighbouring round trips are correlated while batches of thousands are nearly independent.
//! Between batches the loop may sample where the ends run and decides whether to stop: once the
//! interval is narrow enough (after a minimum number of batches), or when the time is up.
//! That work happens between clock readings that do not count, so it never lands in a figure.

use super::transport::Initiator;
use crate::stats::MeanCi;
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

/// The raw outcome of the timed loop.
pub struct Measured {
    /// Every timed round trip, in nanoseconds.
    pub histogram: Histogram<u64>,
    pub batch_means_ns: Vec<f64>,
    pub batch_round_trips: u64,
    pub round_trips: u64,
    /// Sum of the batches' durations: the time the round trips took, boundaries excluded.
    pub measured_s: f64,
    pub ended_by: EndedBy,
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
    Ok((n, batch.clamp(1.0, 10_000_000.0) as u64))
}

/// The timed batches. `between_batches` runs after each batch, outside the timed intervals.
pub fn measure(
    ini: &mut dyn Initiator,
    limits: &LoopLimits,
    batch_round_trips: u64,
    between_batches: &mut dyn FnMut(),
) -> Result<Measured> {
    // 1 ns to 100 s at 3 significant digits: ~100 KiB, enough for any round trip.
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 100_000_000_000, 3)
        .context("cannot allocate the latency histogram")?;
    let mut batch_means_ns = Vec::new();
    let mut measured_ns = 0u128;
    let start = Instant::now();
    let mut prev = start;
    let ended_by = loop {
        let batch_start = prev;
        for _ in 0..batch_round_trips {
            ini.round_trip().context("round trip")?;
            let now = Instant::now();
            histogram.saturating_record(now.duration_since(prev).as_nanos() as u64);
            prev = now;
        }
        let batch_ns = prev.duration_since(batch_start).as_nanos();
        measured_ns += batch_ns;
        batch_means_ns.push(batch_ns as f64 / batch_round_trips as f64);
        between_batches();
        if let Some(why) = should_stop(&batch_means_ns, prev.duration_since(start), limits) {
            break why;
        }
        prev = Instant::now();
    };
    Ok(Measured {
        histogram,
        round_trips: batch_round_trips * batch_means_ns.len() as u64,
        batch_means_ns,
        batch_round_trips,
        measured_s: measured_ns as f64 / 1e9,
        ended_by,
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

    #[test]
    fn wide_intervals_run_until_time_is_up() {
        let noisy: Vec<f64> = (0..20)
            .map(|i| if i % 2 == 0 { 10.0 } else { 90.0 })
            .collect();
        assert_eq!(should_stop(&noisy, Duration::ZERO, &limits(0.02)), None);
    }
}
