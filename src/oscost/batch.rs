//! Timing a primitive in batches: calibrate the batch size, warm up, then time many batches.
//!
//! One operation is too short to time on its own (a vDSO clock read is tens of nanoseconds,
//! about what reading the clock costs), so each sample is a batch of operations long enough
//! that the clock reads around it vanish, divided by the operations in it. Consecutive batches
//! are close to independent, so their per-operation means give the interval (method of batch
//! means, see `stats`). Every batch's figure is kept, so two runs can later be compared with a
//! significance test rather than by eye.

use super::OpCost;
use crate::stats::{MeanCi, percentile};
use anyhow::{Result, bail};
use std::time::Duration;

/// What one batch measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchOutcome {
    /// Time taken by the operations alone.
    pub elapsed: Duration,
    /// Change of the primitive's verification counter during the batch, if it has one.
    pub counted: Option<u64>,
}

/// One OS primitive, measured `ops` at a time.
pub trait Primitive {
    /// Stable name: the key that makes two results comparable.
    fn name(&self) -> &'static str;
    /// What one operation is, in words.
    fn what(&self) -> String;
    /// Runs `ops` operations and returns how long they took.
    fn batch(&mut self, ops: u64) -> Result<BatchOutcome>;
    /// The largest batch worth running (memory or process limits).
    fn max_ops(&self) -> u64 {
        1 << 24
    }
    /// The counter `batch` reports and what a sane value per operation is.
    fn counter(&self) -> Option<(&'static str, &'static str)> {
        None
    }
}

/// Calibrates, warms up and times `batches` batches of `p` of about `target` each.
pub fn measure(p: &mut dyn Primitive, batches: usize, target: Duration) -> OpCost {
    match measure_inner(p, batches, target) {
        Ok(c) => c,
        Err(e) => OpCost::unavailable(p.name(), p.what(), format!("{e:#}")),
    }
}

fn measure_inner(p: &mut dyn Primitive, batches: usize, target: Duration) -> Result<OpCost> {
    let ops = calibrate(p, target)?;
    p.batch(ops)?; // warm-up: caches, page tables, lazily created kernel objects
    let mut samples = Vec::with_capacity(batches);
    let mut counted_total: Option<u64> = Some(0);
    for _ in 0..batches {
        // Interrupted: this primitive is unavailable, and the caller stops before the next.
        crate::signals::check()?;
        let b = p.batch(ops)?;
        samples.push(b.elapsed.as_nanos() as f64 / ops as f64);
        counted_total = match (counted_total, b.counted) {
            (Some(t), Some(c)) => Some(t + c),
            _ => None,
        };
    }
    let Some(mean) = MeanCi::of(&samples) else {
        bail!("no usable batch timings");
    };
    let counted = match (p.counter(), counted_total) {
        (Some((counter, expected)), Some(total)) => Some(super::Counted {
            counter: counter.to_string(),
            per_op: total as f64 / (ops as f64 * batches as f64),
            expected: expected.to_string(),
        }),
        _ => None,
    };
    Ok(OpCost {
        name: p.name().to_string(),
        what: p.what(),
        unit: "ns/op".to_string(),
        ops_per_batch: ops,
        per_op_ns: Some(mean),
        median_ns: percentile(&samples, 0.5),
        min_ns: samples.iter().copied().reduce(f64::min),
        batch_samples_ns: samples,
        counted,
        unavailable: None,
    })
}

/// The number of operations per batch that takes about `target`: start at one and grow
/// geometrically, jumping by the measured rate once a batch is long enough to trust.
/// Expensive primitives (fork + exec at a millisecond) reach the target in a few steps.
fn calibrate(p: &mut dyn Primitive, target: Duration) -> Result<u64> {
    let max = p.max_ops().max(1);
    let mut ops = 1u64;
    for _ in 0..40 {
        // The faster of two tries: one preemption must not pass for a long enough batch.
        let t = p.batch(ops)?.elapsed.min(p.batch(ops)?.elapsed);
        if t >= target || ops >= max {
            return Ok(ops);
        }
        let next = if t >= Duration::from_micros(200) {
            (ops as f64 * target.as_secs_f64() / t.as_secs_f64()).ceil() as u64
        } else {
            ops * 4
        };
        ops = next.clamp(ops + 1, max);
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A primitive whose cost is a known sleep per batch, so calibration can be checked.
    struct Sleeper;
    impl Primitive for Sleeper {
        fn name(&self) -> &'static str {
            "sleeper"
        }
        fn what(&self) -> String {
            "test".into()
        }
        fn counter(&self) -> Option<(&'static str, &'static str)> {
            Some(("naps", "1 per op"))
        }
        fn batch(&mut self, ops: u64) -> Result<BatchOutcome> {
            Ok(BatchOutcome {
                elapsed: Duration::from_micros(10) * ops as u32,
                counted: Some(ops),
            })
        }
    }

    struct Broken;
    impl Primitive for Broken {
        fn name(&self) -> &'static str {
            "broken"
        }
        fn what(&self) -> String {
            "fails".into()
        }
        fn batch(&mut self, _: u64) -> Result<BatchOutcome> {
            bail!("not on this system")
        }
    }

    #[test]
    fn batches_are_sized_and_kept() {
        let c = measure(&mut Sleeper, 5, Duration::from_millis(1));
        assert_eq!(c.batch_samples_ns.len(), 5);
        assert!(c.ops_per_batch >= 100, "{}", c.ops_per_batch);
        assert!((c.per_op_ns.unwrap().mean - 10_000.0).abs() < 1e-6);
        assert_eq!(c.counted.unwrap().per_op, 1.0);
    }

    #[test]
    fn a_failing_primitive_is_reported_unavailable_with_the_same_shape() {
        let c = measure(&mut Broken, 5, Duration::from_millis(1));
        assert_eq!(c.name, "broken");
        assert!(c.per_op_ns.is_none());
        assert!(c.unavailable.unwrap().contains("not on this system"));
    }
}
