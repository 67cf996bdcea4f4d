//! The test double behind the hidden `--mechanism fake`: counts that grow by a fixed pattern on
//! every snapshot, so the exporter's HTTP side, its encoding and a real Prometheus (and, later,
//! a fleet of such exporters) can be tested without BPF. Its figures are labelled
//! `mechanism="fake"` and are never shown as measurements. Opened through the same front door
//! as the real sources ([`super::open`]).

use crate::wakeups::{ClassCounts, Snapshot, Source, SourceOptions, TargetCounts};
use anyhow::Result;

/// The test double: `classes` are the host's, each target's counts grow by a fixed pattern.
pub struct FakeSource {
    targets: Vec<String>,
    classes: Vec<String>,
    /// Each class's weight, nearest first (1 where none is given).
    weights: Vec<u64>,
    snapshots: u64,
}

impl FakeSource {
    pub fn new(opts: &SourceOptions, classes: &[String]) -> Self {
        let mut targets: Vec<String> = opts.comms.clone();
        targets.extend(opts.cgroups.iter().cloned());
        if targets.is_empty() {
            targets.push("fake".into());
        }
        targets.truncate(opts.max_targets.max(1));
        let weights = (0..classes.len())
            .map(|i| opts.fake_weights.get(i).copied().unwrap_or(1))
            .collect();
        Self {
            targets,
            classes: classes.to_vec(),
            weights,
            snapshots: 0,
        }
    }
}

impl Source for FakeSource {
    fn mechanism(&self) -> &str {
        "fake"
    }

    fn snapshot(&mut self) -> Result<Snapshot> {
        self.snapshots += 1;
        let n = self.snapshots;
        let bounds = crate::wakeups::LATENCY_BOUNDS_NS.len();
        let targets = self
            .targets
            .iter()
            .map(|t| TargetCounts {
                target: t.clone(),
                classes: self
                    .classes
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        // Class i lands in bucket 2 + 2i and waits 4 us x 4^i on average:
                        // farther classes wait longer. Its weight scales its counts.
                        let w = n * self.weights[i];
                        let mut buckets = vec![0; bounds];
                        buckets[(2 + 2 * i).min(bounds - 1)] = 10 * w;
                        let counts = ClassCounts {
                            to_idle: 7 * w,
                            to_busy: 3 * w,
                            buckets,
                            count: 10 * w,
                            sum_ns: 10 * w * (4_000 << (2 * i)),
                        };
                        (c.clone(), counts)
                    })
                    .collect(),
            })
            .collect();
        Ok(Snapshot {
            targets,
            events_seen: 40 * n,
            events_lost: 0,
            targets_dropped: 0,
            programs: Vec::new(),
            latency_sample: 1,
            attach_every: 1,
            attached_ns: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fake_source_grows_by_its_pattern() {
        let opts = SourceOptions {
            comms: vec!["x".into()],
            max_targets: 4,
            ..SourceOptions::default()
        };
        let mut f = FakeSource::new(&opts, &["same-cpu".into(), "shared-llc".into()]);
        let a = f.snapshot().unwrap();
        let b = f.snapshot().unwrap();
        assert_eq!(a.targets.len(), 1);
        assert_eq!(a.targets[0].target, "x");
        let (ca, cb) = (
            &a.targets[0].classes["shared-llc"],
            &b.targets[0].classes["shared-llc"],
        );
        // Snapshot n: 7n to idle, 3n to busy, 10n timed in bucket 2 + 2i (i = 1 here).
        assert_eq!((ca.to_idle, ca.to_busy, ca.count), (7, 3, 10));
        assert_eq!((cb.to_idle, cb.to_busy, cb.count), (14, 6, 20));
        assert_eq!(cb.buckets[4], 20);
        assert_eq!(cb.buckets.iter().sum::<u64>(), cb.count);
        assert_eq!(cb.sum_ns, 20 * (4_000 << 2));
        assert_eq!((a.events_seen, b.events_seen), (40, 80));
    }

    #[test]
    fn weights_set_each_class_share() {
        let opts = SourceOptions {
            fake_weights: vec![3, 0],
            ..SourceOptions::default()
        };
        let classes = ["same-cpu".into(), "shared-llc".into(), "cross-node".into()];
        let s = FakeSource::new(&opts, &classes).snapshot().unwrap();
        let c = &s.targets[0].classes;
        // Given weights, then 1 for the classes beyond them.
        assert_eq!(c["same-cpu"].count, 30);
        assert_eq!(c["shared-llc"].count, 0);
        assert_eq!(c["cross-node"].count, 10);
        assert_eq!(c["cross-node"].sum_ns, 10 * 64_000);
    }
}
