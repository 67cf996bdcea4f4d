//! What a scrape reads, each part a collector timed and judged as node_exporter's are
//! (`cpulab_exporter_collector_success{collector}`): the wakeup source's cumulative snapshot
//! (`wakeups`), the machine facts re-read every `--facts-interval` (`machine`), the halts
//! (`idle`) and IPIs (`interrupts`) summed over CPUs, the KVM VMs of a hypervisor host and
//! their vCPUs' run and run-queue wait (`vms`, [`super::vms`]), the doctor's findings
//! (`doctor`), the exporter's own process (`process`) and the active probe's last result
//! (`probe`). A reading
//! that fails is left out and counted by kind, never published as 0.
//!
//! The source is opened by `crate::watch::open_source`, the front door of every wakeup source.
//! Everything is read under one
//! lock per scrape, so two scrapes at once see consistent counters.

use super::doctor::{DoctorFigures, Reader, State};
use super::facts::Facts;
use super::metrics::{self, CollectorRun, Format, Frame, Health, ProbeFigures};
use super::process::{ErrorKind, ReadError, read_text};
use super::server::Stats;
use super::vms::VmWatch;
use crate::wakeups::{ClassCounts, Snapshot, Source, TargetCounts};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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

/// What one collector read, and the readings it could not make.
pub type Read<T> = (T, Vec<ReadError>);

/// cpuidle state entries summed over CPUs by state name, read under `root`. A state whose
/// counter could not be read on some CPU is left out (a sum missing a CPU would look like a
/// counter reset), and so is everything when a state's name cannot be read. No cpuidle
/// directory is no error: the machine has no cpuidle driver, so nothing to count.
pub fn read_idle_totals(root: &Path) -> Read<BTreeMap<String, u64>> {
    let cpu_dir = root.join("sys/devices/system/cpu");
    let mut errors = Vec::new();
    let entries = match std::fs::read_dir(&cpu_dir) {
        Ok(rd) => rd,
        Err(e) => return (BTreeMap::new(), vec![ReadError::io(&cpu_dir, &e)]),
    };
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    let mut broken: Vec<String> = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name
            .strip_prefix("cpu")
            .and_then(|n| n.parse::<u32>().ok())
            .is_none()
        {
            continue;
        }
        let idle_dir = e.path().join("cpuidle");
        let states = match std::fs::read_dir(&idle_dir) {
            Ok(rd) => rd,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => {
                errors.push(ReadError::io(&idle_dir, &err));
                continue;
            }
        };
        for st in states.flatten() {
            if !st.file_name().to_string_lossy().starts_with("state") {
                continue;
            }
            let state = match read_text(&st.path().join("name")) {
                Ok(n) => n.trim().to_string(),
                Err(err) => {
                    errors.push(err);
                    return (BTreeMap::new(), errors);
                }
            };
            let usage_path = st.path().join("usage");
            match read_text(&usage_path).map(|t| t.trim().parse::<u64>()) {
                Ok(Ok(n)) => *totals.entry(state).or_insert(0) += n,
                Ok(Err(_)) => {
                    errors.push(ReadError::parse(&usage_path));
                    broken.push(state);
                }
                Err(err) => {
                    errors.push(err);
                    broken.push(state);
                }
            }
        }
    }
    totals.retain(|k, _| !broken.contains(k));
    (totals, errors)
}

/// `/proc/interrupts` under `root`, each row summed over CPUs by kind (device IRQs as
/// `device`); nothing when it cannot be read or holds no row.
pub fn read_interrupt_totals(root: &Path) -> Read<BTreeMap<String, u64>> {
    let path = root.join("proc/interrupts");
    let rows = match read_text(&path) {
        Ok(t) => crate::counters::parse::parse_interrupts(&t),
        Err(e) => return (BTreeMap::new(), vec![e]),
    };
    if rows.is_empty() {
        return (BTreeMap::new(), vec![ReadError::parse(&path)]);
    }
    let totals = rows
        .iter()
        .map(|(k, per_cpu)| (k.clone(), per_cpu.values().sum()))
        .collect();
    (totals, Vec::new())
}

/// The bounded kind of a wakeup source's fallback reason (pure): the words the loader and the
/// kernel put in it (`Source::fallback_reason`), never the text itself in a label.
pub fn fallback_kind(reason: &str) -> &'static str {
    let r = reason.to_ascii_lowercase();
    if r.contains("verifier:") {
        "verifier"
    } else if r.contains("btf") {
        "no_btf"
    } else if [
        "os error 1)",
        "os error 13)",
        "permission denied",
        "not permitted",
    ]
    .iter()
    .any(|w| r.contains(w))
    {
        "permission"
    } else if [
        "arguments here, not the",
        "os error 22)",
        "os error 38)",
        "os error 95)",
        "os error 2)",
        "not supported",
        "not implemented",
    ]
    .iter()
    .any(|w| r.contains(w))
    {
        "unsupported_kernel"
    } else {
        "other"
    }
}

/// The exporter's state between scrapes.
pub struct Collector {
    pub root: PathBuf,
    pub classes: Vec<String>,
    pub mechanism: String,
    /// The mechanism asked for (`bpf` for `auto`) and the kind of reason it was not used.
    pub preferred: String,
    pub fallback: String,
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
    facts: Facts,
    vms: VmWatch,
    health: Health,
}

/// Runs one collector, timing it and keeping its errors: counted by kind, the first of each
/// kind logged as a warning, later ones at debug.
fn run<T>(
    name: &'static str,
    health: &mut Health,
    runs: &mut Vec<CollectorRun>,
    f: impl FnOnce() -> Read<T>,
) -> T {
    let t0 = Instant::now();
    let (value, errors) = f();
    runs.push(CollectorRun {
        collector: name,
        success: errors.is_empty(),
        duration_s: t0.elapsed().as_secs_f64(),
    });
    for e in errors {
        let n = health
            .read_errors
            .entry((name, e.kind.as_str()))
            .or_insert(0);
        *n += 1;
        let text = format!(
            "collector {name}: {} ({}); what it gives is left out of this scrape",
            e.detail,
            e.kind.as_str()
        );
        if *n == 1 {
            log::warn!("{text}");
        } else {
            log::debug!("{text}");
        }
    }
    value
}

impl Collector {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        root: PathBuf,
        classes: Vec<String>,
        facts: Facts,
        source: Option<Box<dyn Source>>,
        named: usize,
        series_budget: usize,
        probe: Arc<Mutex<Option<ProbeFigures>>>,
        stats: Arc<Stats>,
        doctor: Reader,
        vms: VmWatch,
    ) -> Self {
        let mechanism = source
            .as_ref()
            .map_or("none".to_string(), |s| s.mechanism().to_string());
        let fallback = source
            .as_ref()
            .and_then(|s| s.fallback_reason())
            .map_or("none", fallback_kind)
            .to_string();
        // Only `auto` falls back, and only from the in-kernel aggregation to perf.
        let preferred = if source
            .as_ref()
            .is_some_and(|s| s.fallback_reason().is_some())
        {
            "bpf".to_string()
        } else {
            mechanism.clone()
        };
        Self {
            root,
            classes,
            preferred,
            mechanism,
            fallback,
            named,
            series_budget,
            probe,
            stats,
            inner: Mutex::new(Inner {
                source,
                doctor,
                facts,
                vms,
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
        let Ok(mut guard) = self.inner.lock() else {
            return String::new();
        };
        let inner = &mut *guard;
        let mut runs = Vec::new();
        let h = &mut inner.health;
        let wakeups = run("wakeups", h, &mut runs, || match inner.source.as_mut() {
            None => (None, Vec::new()),
            Some(src) => match src.snapshot() {
                Ok(s) => (Some(s), Vec::new()),
                Err(e) => (None, vec![source_error(&e)]),
            },
        });
        let wakeups = wakeups.map(|s| {
            let (s, folded) = fit(s, self.named);
            h.targets_folded += folded;
            s
        });
        if wakeups.is_none() && inner.source.is_some() {
            h.source_errors += 1;
        }
        let facts = &mut inner.facts;
        let machine = run("machine", h, &mut runs, || {
            let look = facts.look(started);
            for c in &look.changes {
                log::info!("{}", c.text());
            }
            (facts.labels().to_vec(), look.errors)
        });
        let idle_entries = run("idle", h, &mut runs, || read_idle_totals(&self.root));
        let interrupts = run("interrupts", h, &mut runs, || {
            read_interrupt_totals(&self.root)
        });
        let vm_watch = &mut inner.vms;
        let vms = vm_watch
            .publishes()
            .then(|| run("vms", h, &mut runs, || vm_watch.read()));
        let doctor = &mut inner.doctor;
        let doctor = run("doctor", h, &mut runs, || doctor_read(doctor, started));
        let process = run("process", h, &mut runs, || {
            super::process::read(
                Path::new("/proc/self"),
                Path::new("/proc/stat"),
                super::process::system_units(),
            )
        });
        let probe = self.probe.lock().ok().and_then(|p| p.clone());
        if let Some(p) = probe.as_ref().filter(|p| p.runs > 0) {
            runs.push(CollectorRun {
                collector: "probe",
                success: p.last_ok,
                duration_s: p.last_duration_s,
            });
        }
        h.scrapes += 1;
        h.connections_evicted = self.stats.evicted.load(Ordering::Relaxed);
        h.collectors = runs;
        let frame = Frame {
            classes: self.classes.clone(),
            wakeups,
            mechanism: self.mechanism.clone(),
            idle_entries,
            interrupts,
            machine,
            probe,
            doctor,
            health: h.clone(),
            process,
            vms,
            preferred: self.preferred.clone(),
            fallback: self.fallback.clone(),
        };
        let text = metrics::encode(&frame, format);
        h.last_scrape_duration_s = started.elapsed().as_secs_f64();
        text
    }

    /// Detaches the source (its drop closes the programs).
    pub fn close(&self) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.source = None;
        }
    }
}

/// A failed wakeup snapshot as a read error (its I/O kind where it has one).
fn source_error(e: &anyhow::Error) -> ReadError {
    ReadError {
        kind: e
            .downcast_ref::<std::io::Error>()
            .map_or(ErrorKind::Io, ErrorKind::of_io),
        detail: format!("the wakeup snapshot failed: {e:#}"),
    }
}

/// The doctor's findings; an unreadable history is a parse error (the reader warns once).
fn doctor_read(doctor: &mut Reader, now: Instant) -> Read<DoctorFigures> {
    let (figures, warning) = doctor.current(now);
    if let Some(w) = warning {
        // At error level, so `--quiet` (`--log.level error`) still says it once.
        log::error!("{w}");
    }
    let errors = if figures.state == State::Unreadable {
        vec![ReadError {
            kind: ErrorKind::Parse,
            detail: "the history holds no readable doctor run".into(),
        }]
    } else {
        Vec::new()
    };
    (figures, errors)
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
    fn idle_totals_sum_over_cpus_and_leave_out_a_state_not_read_everywhere() {
        let t = crate::testing::tree(&[
            ("sys/devices/system/cpu/cpu0/cpuidle/state0/name", "poll\n"),
            ("sys/devices/system/cpu/cpu0/cpuidle/state0/usage", "1\n"),
            (
                "sys/devices/system/cpu/cpu0/cpuidle/state1/name",
                "haltpoll\n",
            ),
            ("sys/devices/system/cpu/cpu0/cpuidle/state1/usage", "10\n"),
            ("sys/devices/system/cpu/cpu1/cpuidle/state0/name", "poll\n"),
            ("sys/devices/system/cpu/cpu1/cpuidle/state0/usage", "2\n"),
            (
                "sys/devices/system/cpu/cpu1/cpuidle/state1/name",
                "haltpoll\n",
            ),
            ("sys/devices/system/cpu/cpu1/cpuidle/state1/usage", "20\n"),
            ("sys/devices/system/cpu/online", "0-1\n"),
        ]);
        let (idle, errors) = read_idle_totals(t.path());
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(idle["haltpoll"], 30);
        assert_eq!(idle["poll"], 3);
        // cpu1's haltpoll counter unreadable: haltpoll is left out, not summed without it.
        std::fs::write(
            t.path()
                .join("sys/devices/system/cpu/cpu1/cpuidle/state1/usage"),
            "x",
        )
        .unwrap();
        let (idle, errors) = read_idle_totals(t.path());
        assert_eq!(idle.keys().collect::<Vec<_>>(), ["poll"]);
        assert_eq!(
            errors.iter().map(|e| e.kind).collect::<Vec<_>>(),
            [ErrorKind::Parse]
        );
        std::fs::remove_file(
            t.path()
                .join("sys/devices/system/cpu/cpu1/cpuidle/state1/usage"),
        )
        .unwrap();
        let (_, errors) = read_idle_totals(t.path());
        assert_eq!(errors[0].kind, ErrorKind::NotFound);
    }

    #[test]
    fn no_cpuidle_is_no_error_but_no_cpu_directory_is() {
        let t = crate::testing::tree(&[("sys/devices/system/cpu/cpu0/online", "1\n")]);
        let (idle, errors) = read_idle_totals(t.path());
        assert!(idle.is_empty() && errors.is_empty(), "{errors:?}");
        let empty = tempfile::tempdir().unwrap();
        let (idle, errors) = read_idle_totals(empty.path());
        assert!(idle.is_empty());
        assert_eq!(
            errors.iter().map(|e| e.kind).collect::<Vec<_>>(),
            [ErrorKind::NotFound]
        );
    }

    #[test]
    fn interrupts_sum_over_cpus_and_an_empty_file_is_a_parse_error() {
        let irq = "           CPU0       CPU1\n  1:  5  6  IO-APIC\nRES:  3  4  Rescheduling interrupts\n";
        let t = crate::testing::tree(&[("proc/interrupts", irq)]);
        let (irqs, errors) = read_interrupt_totals(t.path());
        assert!(errors.is_empty());
        assert_eq!(irqs["RES"], 7);
        assert_eq!(irqs["device"], 11);
        std::fs::write(t.path().join("proc/interrupts"), "").unwrap();
        let (irqs, errors) = read_interrupt_totals(t.path());
        assert!(irqs.is_empty());
        assert_eq!(errors[0].kind, ErrorKind::Parse);
        let (_, errors) = read_interrupt_totals(tempfile::tempdir().unwrap().path());
        assert_eq!(errors[0].kind, ErrorKind::NotFound);
    }

    #[test]
    fn fallback_reasons_fall_into_a_short_vocabulary() {
        // The texts the loaders write (watch/bpf/sys.rs, watch/mechanism.rs, std's io errors).
        for (reason, kind) in [
            ("Operation not permitted (os error 1)", "permission"),
            ("Permission denied (os error 13)", "permission"),
            (
                "Invalid argument (os error 22); verifier: R1 invalid mem access 'scalar'",
                "verifier",
            ),
            (
                "no kernel BTF (/sys/kernel/btf/vmlinux: No such file or directory (os error 2))",
                "no_btf",
            ),
            (
                "sched_switch passes 3 arguments here, not the 4 the raw-tracepoint program reads",
                "unsupported_kernel",
            ),
            (
                "Function not implemented (os error 38)",
                "unsupported_kernel",
            ),
            ("the target refresh thread panicked", "other"),
        ] {
            assert_eq!(fallback_kind(reason), kind, "{reason}");
        }
    }

    fn collector(root: &Path, every: std::time::Duration) -> Collector {
        let machine = crate::machine::Machine::detect(root).unwrap();
        let labels = super::super::machine_labels(&crate::probe::probe(&machine));
        let opts = crate::wakeups::SourceOptions {
            mechanism: crate::wakeups::Mechanism::Fake,
            comms: vec!["postgres".into()],
            max_targets: 4,
            ..Default::default()
        };
        let source = crate::watch::open_source(&machine, &opts).unwrap();
        Collector::new(
            root.to_path_buf(),
            super::super::host_classes(&machine),
            Facts::new(machine, labels, every, Instant::now()),
            Some(source),
            4,
            500,
            Arc::new(Mutex::new(None)),
            Arc::new(Stats::default()),
            Reader::new(
                crate::history::Location::Off,
                String::new(),
                super::super::doctor::REREAD,
            ),
            VmWatch::new(
                root,
                super::super::vms::looking(root, true),
                4,
                Vec::new(),
                Err("not in a test tree".into()),
            ),
        )
    }

    fn samples<'a>(text: &'a str, name: &str) -> Vec<(&'a str, f64)> {
        text.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
            .filter_map(|l| {
                let (series, v) = l.rsplit_once(' ')?;
                Some((series, v.parse().ok()?))
            })
            .collect()
    }

    #[test]
    fn every_collector_has_a_success_and_a_duration_every_scrape() {
        let d = crate::trial::testing::copy_fixture("kvm-guest");
        let c = collector(d.path(), std::time::Duration::from_secs(60));
        for _ in 0..2 {
            let t = c.scrape(Format::Prometheus);
            for name in [
                "wakeups",
                "machine",
                "idle",
                "interrupts",
                "doctor",
                "process",
                "vms",
            ] {
                let label = format!("{{collector=\"{name}\"}}");
                let ok = samples(&t, "cpulab_exporter_collector_success");
                let dur = samples(&t, "cpulab_exporter_collector_duration_seconds");
                assert_eq!(
                    ok.iter().filter(|(s, _)| s.ends_with(&label)).count(),
                    1,
                    "{name}\n{t}"
                );
                let d: Vec<f64> = dur
                    .iter()
                    .filter(|(s, _)| s.ends_with(&label))
                    .map(|x| x.1)
                    .collect();
                assert!(
                    d.len() == 1 && d[0] >= 0.0 && d[0].is_finite(),
                    "{name} {d:?}"
                );
            }
            // The fixture has no proc/interrupts and its cpuidle states no usage counters:
            // those collectors failed and say why (their series are absent, never 0); the
            // others read everything.
            for (name, ok) in [
                ("interrupts", 0),
                ("idle", 0),
                ("wakeups", 1),
                ("machine", 1),
                ("vms", 1),
            ] {
                let line =
                    format!("cpulab_exporter_collector_success{{collector=\"{name}\"}} {ok}");
                assert!(t.contains(&line), "{line}\n{t}");
            }
            assert!(!t.contains("cpulab_idle_state_entries_total{"), "{t}");
            assert!(!t.contains("cpulab_interrupts_total{"), "{t}");
            // The fixture has the kvm module and no process holding a VM: a count of 0.
            assert_eq!(samples(&t, "cpulab_vms"), [("cpulab_vms", 0.0)], "{t}");
            // Counters never go below zero; process_* are this process's.
            for l in t.lines().filter(|l| !l.starts_with('#')) {
                let v: f64 = l.rsplit(' ').next().unwrap().parse().unwrap();
                assert!(v >= 0.0, "{l}");
            }
            assert_eq!(samples(&t, "process_open_fds").len(), 1, "{t}");
        }
        let t = c.scrape(Format::Prometheus);
        assert_eq!(
            samples(&t, "cpulab_exporter_read_errors_total"),
            [
                // Two CPUs, two states each, three scrapes.
                (
                    "cpulab_exporter_read_errors_total{collector=\"idle\",kind=\"not_found\"}",
                    12.0
                ),
                (
                    "cpulab_exporter_read_errors_total{collector=\"interrupts\",kind=\"not_found\"}",
                    3.0
                )
            ]
        );
        assert!(t.contains("cpulab_exporter_mechanism_info{mechanism=\"fake\",preferred=\"fake\",fallback=\"none\"} 1"), "{t}");
        assert!(t.contains(&format!(
            "cpulab_exporter_build_info{{version=\"{}\"}} 1",
            env!("CPULAB_PKG_VERSION")
        )));
    }

    #[test]
    fn a_changed_fact_replaces_the_info_series_never_adds_one() {
        let d = crate::trial::testing::copy_fixture("kvm-guest");
        let c = collector(d.path(), std::time::Duration::ZERO);
        let info = |t: &str| -> Vec<String> {
            samples(t, "cpulab_machine_info")
                .into_iter()
                .map(|(s, _)| s.to_string())
                .collect()
        };
        let before = info(&c.scrape(Format::Prometheus));
        assert_eq!(before.len(), 1);
        assert!(
            !before[0].contains("guest_halt_poll_ns=\"424242\""),
            "{before:?}"
        );
        std::fs::write(
            d.path()
                .join("sys/module/haltpoll/parameters/guest_halt_poll_ns"),
            "424242\n",
        )
        .unwrap();
        for format in [Format::Prometheus, Format::OpenMetrics] {
            let after = info(&c.scrape(format));
            assert_eq!(after.len(), 1, "{after:?}");
            assert!(
                after[0].contains("guest_halt_poll_ns=\"424242\""),
                "{after:?}"
            );
        }
    }

    /// A perf source that `auto` fell back to, with the loader's words.
    struct FellBack;

    impl Source for FellBack {
        fn mechanism(&self) -> &str {
            "perf"
        }
        fn fallback_reason(&self) -> Option<&str> {
            Some("Permission denied (os error 13)")
        }
        fn snapshot(&mut self) -> anyhow::Result<Snapshot> {
            anyhow::bail!("the perf reader stopped")
        }
    }

    #[test]
    fn a_fallback_is_published_with_its_kind_and_a_failed_snapshot_as_a_failed_collector() {
        let d = crate::trial::testing::copy_fixture("kvm-guest");
        let machine = crate::machine::Machine::detect(d.path()).unwrap();
        let c = Collector::new(
            d.path().to_path_buf(),
            vec!["same-cpu".into()],
            Facts::new(
                machine,
                Vec::new(),
                std::time::Duration::from_secs(60),
                Instant::now(),
            ),
            Some(Box::new(FellBack)),
            4,
            500,
            Arc::new(Mutex::new(None)),
            Arc::new(Stats::default()),
            Reader::new(
                crate::history::Location::Off,
                String::new(),
                super::super::doctor::REREAD,
            ),
            VmWatch::new(
                d.path(),
                super::super::vms::looking(d.path(), true),
                4,
                Vec::new(),
                Err("not in a test tree".into()),
            ),
        );
        let t = c.scrape(Format::Prometheus);
        assert!(
            t.contains("cpulab_exporter_mechanism_info{mechanism=\"perf\",preferred=\"bpf\",fallback=\"permission\"} 1"),
            "{t}"
        );
        assert!(!t.contains("Permission denied"), "{t}");
        assert!(
            t.contains("cpulab_exporter_collector_success{collector=\"wakeups\"} 0"),
            "{t}"
        );
        assert!(
            t.contains("cpulab_exporter_read_errors_total{collector=\"wakeups\",kind=\"io\"} 1"),
            "{t}"
        );
        assert!(t.contains("cpulab_exporter_source_errors_total 1"), "{t}");
        assert!(!t.contains("cpulab_wakeups_total{"), "{t}");
    }
}
