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
        Self {
            targets,
            classes: classes.to_vec(),
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
                        // Class i lands in bucket 2 + 2i: farther classes wait longer.
                        let mut buckets = vec![0; bounds];
                        buckets[(2 + 2 * i).min(bounds - 1)] = 10 * n;
                        let counts = ClassCounts {
                            to_idle: 7 * n,
                            to_busy: 3 * n,
                            buckets,
                            count: 10 * n,
                            sum_ns: 10 * n * (4_000 << (2 * i)),
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
}
