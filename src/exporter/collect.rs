//! What a scrape reads: the wakeup source's cumulative snapshot, the system's halt and IPI
//! counters (the same readers as every experiment: `counters::SystemSnapshot`), the machine
//! facts probed once at start, the active probe's last result, and the exporter's own health.
//!
//! The source is opened by `crate::watch::open_source`, the front door of every wakeup source.
//! Everything is read under one
//! lock per scrape, so two scrapes at once see consistent counters.

use super::doctor::Reader;
use super::metrics::{self, Format, Frame, Health, ProbeFigures};
use super::server::Stats;
use crate::counters::SystemSnapshot;
use crate::wakeups::{ClassCounts, Snapshot, Source, TargetCounts};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The label of the target that collects everything beyond the cap.
pub const OTHER: &str = "other";

/// Keeps at most `named` targets with their own label; the rest (and any `other` the source
/// gave) are summed into one `other`. Returns how many were folded.
pub fn fit(mut snap: Snapshot, named: usize) -> (Snapshot, u64) {
    let (mut own, rest): (Vec<_>, Vec<_>) = snap.targets.drain(..).partition(|t| t.target != OTHER);
    let mut other: Vec<TargetCounts> = rest;
    let folded = own.len().saturating_sub(named) as u64;
    if own.len() > named {
        other.extend(own.drain(named..));
    }
    if !other.is_empty() {
        let mut sum = TargetCounts {
            target: OTHER.into(),
            classes: BTreeMap::new(),
        };
        for t in other {
            for (class, c) in t.classes {
                add(sum.classes.entry(class).or_default(), &c);
            }
        }
        own.push(sum);
    }
    snap.targets = own;
    (snap, folded)
}

fn add(into: &mut ClassCounts, c: &ClassCounts) {
    into.to_idle += c.to_idle;
    into.to_busy += c.to_busy;
    into.count += c.count;
    into.sum_ns += c.sum_ns;
    if into.buckets.len() < c.buckets.len() {
        into.buckets.resize(c.buckets.len(), 0);
    }
    for (a, b) in into.buckets.iter_mut().zip(&c.buckets) {
        *a += b;
    }
}

/// Sums per-CPU counters by name (cpuidle states by state name, interrupts by kind).
pub fn system_totals(s: &SystemSnapshot) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    let mut idle = BTreeMap::new();
    for states in s.idle.iter().flat_map(|m| m.values()) {
        for st in states {
            *idle.entry(st.name.clone()).or_insert(0u64) += st.usage;
        }
    }
    let irqs = s
        .interrupts
        .iter()
        .flat_map(|m| m.iter())
        .map(|(k, per_cpu)| (k.clone(), per_cpu.values().sum()))
        .collect();
    (idle, irqs)
}

/// The exporter's state between scrapes.
pub struct Collector {
    pub root: PathBuf,
    pub classes: Vec<String>,
    pub machine: Vec<(String, String)>,
    pub mechanism: String,
    /// Targets with their own label, `other` aside.
    pub named: usize,
    pub series_budget: usize,
    pub probe: Arc<Mutex<Option<ProbeFigures>>>,
    pub stats: Arc<Stats>,
    inner: Mutex<Inner>,
}

struct Inner {
    source: Option<Box<dyn Source>>,
    doctor: Reader,
    health: Health,
}

impl Collector {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        root: PathBuf,
        classes: Vec<String>,
        machine: Vec<(String, String)>,
        source: Option<Box<dyn Source>>,
        named: usize,
        series_budget: usize,
        probe: Arc<Mutex<Option<ProbeFigures>>>,
        stats: Arc<Stats>,
        doctor: Reader,
    ) -> Self {
        let mechanism = source
            .as_ref()
            .map_or("none".to_string(), |s| s.mechanism().to_string());
        Self {
            root,
            classes,
            machine,
            mechanism,
            named,
            series_budget,
            probe,
            stats,
            inner: Mutex::new(Inner {
                source,
                doctor,
                health: Health {
                    series_budget,
                    ..Health::default()
                },
            }),
        }
    }

    /// One scrape: read everything, encode in `format`.
    pub fn scrape(&self, format: Format) -> String {
        let started = Instant::now();
        let Ok(mut inner) = self.inner.lock() else {
            return String::new();
        };
        let wakeups = match inner.source.as_mut().map(|s| s.snapshot()) {
            None => None,
            Some(Ok(s)) => {
                let (s, folded) = fit(s, self.named);
                inner.health.targets_folded += folded;
                Some(s)
            }
            Some(Err(_)) => {
                inner.health.source_errors += 1;
                None
            }
        };
        let (idle_entries, interrupts) = system_totals(&SystemSnapshot::take(&self.root));
        let (doctor, warning) = inner.doctor.current(started);
        if let Some(w) = warning {
            eprintln!("cpulab exporter: {w}");
        }
        inner.health.scrapes += 1;
        inner.health.connections_evicted = self.stats.evicted.load(Ordering::Relaxed);
        let frame = Frame {
            classes: self.classes.clone(),
            wakeups,
            mechanism: self.mechanism.clone(),
            idle_entries,
            interrupts,
            machine: self.machine.clone(),
            probe: self.probe.lock().ok().and_then(|p| p.clone()),
            doctor,
            health: inner.health.clone(),
        };
        let text = metrics::encode(&frame, format);
        inner.health.last_scrape_duration_s = started.elapsed().as_secs_f64();
        text
    }

    /// Detaches the source (its drop closes the programs).
    pub fn close(&self) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.source = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(name: &str, idle: u64) -> TargetCounts {
        let c = ClassCounts {
            to_idle: idle,
            to_busy: 1,
            buckets: vec![1, 0],
            count: 1,
            sum_ns: 5,
        };
        TargetCounts {
            target: name.into(),
            classes: [("same-cpu".to_string(), c)].into_iter().collect(),
        }
    }

    #[test]
    fn fit_folds_the_extra_targets_and_the_sources_other_into_one_other() {
        let snap = Snapshot {
            targets: vec![
                target("a", 1),
                target(OTHER, 10),
                target("b", 2),
                target("c", 4),
            ],
            ..Snapshot::default()
        };
        let (s, folded) = fit(snap, 1);
        assert_eq!(folded, 2);
        let names: Vec<_> = s.targets.iter().map(|t| t.target.as_str()).collect();
        assert_eq!(names, ["a", OTHER]);
        let o = &s.targets[1].classes["same-cpu"];
        assert_eq!(o.to_idle, 16);
        assert_eq!(o.to_busy, 3);
        assert_eq!(o.buckets, vec![3, 0]);
    }

    #[test]
    fn fit_keeps_a_snapshot_within_the_cap_as_it_is() {
        let snap = Snapshot {
            targets: vec![target("a", 1), target("b", 2)],
            ..Snapshot::default()
        };
        let (s, folded) = fit(snap.clone(), 2);
        assert_eq!(folded, 0);
        assert_eq!(s, snap);
    }

    #[test]
    fn system_totals_sum_over_cpus() {
        use crate::counters::{IdleStateCount, parse};
        let state = |name: &str, usage| IdleStateCount {
            name: name.into(),
            usage,
            time_us: 0,
        };
        let irq = "           CPU0       CPU1\n  1:  5  6  IO-APIC\nRES:  3  4  Rescheduling interrupts\n";
        let s = SystemSnapshot {
            at: Instant::now(),
            cpu_times: None,
            interrupts: Some(parse::parse_interrupts(irq)),
            idle: Some(
                [
                    (0, vec![state("poll", 1), state("haltpoll", 10)]),
                    (1, vec![state("poll", 2), state("haltpoll", 20)]),
                ]
                .into_iter()
                .collect(),
            ),
            unavailable: vec![],
        };
        let (idle, irqs) = system_totals(&s);
        assert_eq!(idle["haltpoll"], 30);
        assert_eq!(idle["poll"], 3);
        assert_eq!(irqs["RES"], 7);
        assert_eq!(irqs["device"], 11);
    }
}
