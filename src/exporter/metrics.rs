//! One scrape's figures ([`Frame`]) and their exposition, encoded by the official
//! `prometheus-client` crate in the Prometheus text format or in OpenMetrics.
//!
//! Nothing here reads the machine: a frame is built from one snapshot of each reader, then
//! encoded. Encoding an owned snapshot is what keeps a histogram whole: its `_count`, its
//! `+Inf` bucket and its buckets all come from the same values, so a scrape that races an
//! update of the kernel's maps can never show a `_count` that differs from `+Inf`
//! ([`histogram_buckets`] repairs a snapshot whose count lags its buckets).

use super::doctor::DoctorFigures;
use super::process::ProcessFigures;
use super::vms::{Counts, VmFigures};
use crate::wakeups::{ClassCounts, LATENCY_BOUNDS_NS, Snapshot};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::collections::BTreeMap;

/// Metric name prefix.
pub const PREFIX: &str = "cpulab";

/// Everything one scrape publishes.
#[derive(Clone, Debug, Default)]
pub struct Frame {
    /// The placement classes that exist on this host (`same-cpu` first); each target is
    /// published with exactly these, zeros included, so its series exist from the start.
    pub classes: Vec<String>,
    /// The wakeup counts, when a source is attached.
    pub wakeups: Option<Snapshot>,
    /// How the wakeups are counted (`bpf`, `perf`, `fake`, `none`).
    pub mechanism: String,
    /// cpuidle state entries summed over CPUs, by state name (halts, in a guest).
    pub idle_entries: BTreeMap<String, u64>,
    /// /proc/interrupts rows summed over CPUs, by kind (`RES`, `CAL`, ... and `device`).
    pub interrupts: BTreeMap<String, u64>,
    /// The machine facts that decide wakeup costs, as `(label, value)`.
    pub machine: Vec<(String, String)>,
    /// The active probe's last result, when it is on and has run.
    pub probe: Option<ProbeFigures>,
    /// The newest doctor findings of this host from the history, and why there are none.
    pub doctor: DoctorFigures,
    /// The exporter's own health.
    pub health: Health,
    /// The exporter's own process (`process_*`).
    pub process: ProcessFigures,
    /// The KVM VMs on this host, their vCPUs' run and run-queue wait (`vms`), when read.
    pub vms: Option<VmFigures>,
    /// The mechanism asked for (`bpf` for `auto`) and why it was not used (`none`, or a kind of
    /// [`crate::wakeups`]'s fallback reason).
    pub preferred: String,
    pub fallback: String,
}

/// One collector's part of one scrape, as node_exporter's `node_scrape_collector_*`.
#[derive(Clone, Debug, PartialEq)]
pub struct CollectorRun {
    /// `wakeups`, `machine`, `idle`, `interrupts`, `probe`, `doctor`, `process`.
    pub collector: &'static str,
    /// Read everything it publishes.
    pub success: bool,
    pub duration_s: f64,
}

/// The last active probe.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProbeFigures {
    /// Per placement class measured: (class, p50 round trip s, p99 round trip s).
    pub round_trips: Vec<(String, f64, f64)>,
    /// When it finished, seconds since the Unix epoch.
    pub finished_unix_s: f64,
    /// Probes run and failed since the exporter started.
    pub runs: u64,
    pub failures: u64,
    /// Whether the last probe gave round trips, and how long it took.
    pub last_ok: bool,
    pub last_duration_s: f64,
}

/// The exporter's own counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Health {
    /// Scrapes served (this one included).
    pub scrapes: u64,
    /// Seconds the previous scrape took to collect and encode.
    pub last_scrape_duration_s: f64,
    /// Snapshots the source failed to give.
    pub source_errors: u64,
    /// Connections closed unserved because the connection cap was reached.
    pub connections_evicted: u64,
    /// The series budget, and series in this exposition (filled by [`encode`]).
    pub series_budget: usize,
    pub series: usize,
    /// Targets folded into `other` by the exporter to keep within the budget.
    pub targets_folded: u64,
    /// Each collector's part of this scrape.
    pub collectors: Vec<CollectorRun>,
    /// Read errors since start, by (collector, kind).
    pub read_errors: BTreeMap<(&'static str, &'static str), u64>,
}

/// The exposition formats a scraper may ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Prometheus,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// Series each watched target adds on a host with `classes` placement classes: two wakeup
/// counters (idle and busy destination) and a histogram (buckets, `+Inf`, `_sum`, `_count`)
/// per class.
pub fn series_per_target(classes: usize) -> usize {
    classes * (2 + LATENCY_BOUNDS_NS.len() + 3)
}

/// Encodes a frame; the series count in its health is the count of samples in the output.
pub fn encode(frame: &Frame, format: Format) -> String {
    let first = encode_once(frame, format);
    let mut f = frame.clone();
    f.health.series = count_samples(&first);
    encode_once(&f, format)
}

/// Sample lines of an exposition (every line that is not a comment).
pub fn count_samples(text: &str) -> usize {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count()
}

fn encode_once(frame: &Frame, format: Format) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(ProcessCollector(frame.process.clone())));
    registry
        .sub_registry_with_prefix(PREFIX)
        .register_collector(Box::new(FrameCollector(frame.clone())));
    let mut out = String::new();
    // invariant: writing into a String cannot fail, and every label set is well formed.
    let r = match format {
        Format::Prometheus => {
            prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
        }
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry),
    };
    debug_assert!(r.is_ok());
    out
}

/// Non-cumulative `(upper bound s, count)` pairs ending with `+Inf`, and the count: the count
/// is at least the sum of the finite buckets, so `+Inf` always equals it.
pub fn histogram_buckets(c: &ClassCounts) -> (Vec<(f64, u64)>, u64) {
    let mut out = Vec::with_capacity(LATENCY_BOUNDS_NS.len() + 1);
    let mut finite = 0u64;
    for (i, bound) in LATENCY_BOUNDS_NS.iter().enumerate() {
        let n = c.buckets.get(i).copied().unwrap_or(0);
        finite = finite.saturating_add(n);
        out.push((*bound as f64 / 1e9, n));
    }
    let count = c.count.max(finite);
    out.push((f64::INFINITY, count - finite));
    (out, count)
}

#[derive(Debug)]
struct FrameCollector(Frame);

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Collector for FrameCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let f = &self.0;
        if let Some(snap) = &f.wakeups {
            encode_wakeups(snap, &f.classes, &mut enc)?;
            encode_source(snap, &mut enc)?;
            if !snap.programs.is_empty() {
                encode_program_costs(&snap.programs, &mut enc)?;
            }
        }
        encode_system(f, &mut enc)?;
        if let Some(v) = &f.vms {
            encode_vms(v, &mut enc)?;
        }
        encode_doctor(&f.doctor, &mut enc)?;
        if let Some(p) = &f.probe {
            encode_probe(p, &mut enc)?;
        }
        encode_health(f, &mut enc)
    }
}

/// The wakeups of each target by class and destination, and their latency histograms.
fn encode_wakeups(
    snap: &Snapshot,
    classes: &[String],
    enc: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let empty = ClassCounts::default();
    let mut m = enc.encode_descriptor(
        "wakeups",
        "Wakeups of a watched target by placement class from its waker (same CPU, or \
         how far away) and whether the destination CPU was idle",
        None,
        MetricType::Counter,
    )?;
    for t in &snap.targets {
        for class in classes {
            let c = t.classes.get(class).unwrap_or(&empty);
            for (dest, n) in [("idle", c.to_idle), ("busy", c.to_busy)] {
                let l = labels(&[("target", &t.target), ("class", class), ("dest", dest)]);
                m.encode_family(&l)?
                    .encode_counter::<NoLabelSet, _, u64>(&n, None)?;
            }
        }
    }
    let mut m = enc.encode_descriptor(
        "wakeup_latency",
        "Wakeup-to-run latency of a watched target by placement class (exp2 buckets; \
         estimated from a weighted sample when cpulab_exporter_latency_sample is above 1, \
         and from the time attached when cpulab_exporter_attached_ratio is below 1)",
        Some(&Unit::Seconds),
        MetricType::Histogram,
    )?;
    for t in &snap.targets {
        for class in classes {
            let c = t.classes.get(class).unwrap_or(&empty);
            let (buckets, count) = histogram_buckets(c);
            let l = labels(&[("target", &t.target), ("class", class)]);
            m.encode_family(&l)?.encode_histogram::<NoLabelSet>(
                c.sum_ns as f64 / 1e9,
                count,
                &buckets,
                None,
            )?;
        }
    }
    Ok(())
}

/// How the wakeup source counts: its sampling, its attached time, what it saw and lost.
fn encode_source(snap: &Snapshot, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let help = format!(
        "Latencies timed: every wakeup while the waking CPU has made at most {} watched \
         wakeups this tick, one in this many beyond them, each counted this many times in the \
         histogram (1: every wakeup; --latency-sample)",
        crate::wakeups::EXACT_PER_TICK
    );
    enc.encode_descriptor("exporter_latency_sample", &help, None, MetricType::Gauge)?
        .encode_gauge(&i64::from(snap.latency_sample.max(1)))?;
    enc.encode_descriptor(
        "exporter_attached_ratio",
        "Share of the time the wakeup programs are attached (1 / --attach-every): below \
         1, the wakeup counts and latencies are what they saw divided by it, estimates",
        None,
        MetricType::Gauge,
    )?
    .encode_gauge(&(1.0 / f64::from(snap.attach_every.max(1))))?;
    enc.encode_descriptor(
        "exporter_attached",
        "Time the wakeup programs have been attached",
        Some(&Unit::Seconds),
        MetricType::Counter,
    )?
    .encode_counter::<NoLabelSet, _, u64>(&(snap.attached_ns as f64 / 1e9), None)?;
    for (name, help, v) in [
        (
            "exporter_events_seen",
            "Scheduler events the wakeup programs ran on",
            snap.events_seen,
        ),
        (
            "exporter_events_lost",
            "Scheduler events the wakeup programs could not count",
            snap.events_lost,
        ),
        (
            "exporter_targets_dropped",
            "Tasks counted under target=\"other\" because the target cap was reached",
            snap.targets_dropped,
        ),
    ] {
        enc.encode_descriptor(name, help, None, MetricType::Counter)?
            .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
    }
    Ok(())
}

/// What each in-kernel program has cost (`--bpf-program-costs`).
fn encode_program_costs(
    programs: &[crate::wakeups::ProgramCost],
    enc: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(
        "exporter_bpf_program_runs",
        "Runs of each in-kernel program since the exporter started \
         (--bpf-program-costs)",
        None,
        MetricType::Counter,
    )?;
    for p in programs {
        m.encode_family(&labels(&[("program", &p.program)]))?
            .encode_counter::<NoLabelSet, _, u64>(&p.runs, None)?;
    }
    let mut m = enc.encode_descriptor(
        "exporter_bpf_program_run",
        "Time the kernel measured in each in-kernel program, the timing included \
         (--bpf-program-costs)",
        Some(&Unit::Seconds),
        MetricType::Counter,
    )?;
    for p in programs {
        m.encode_family(&labels(&[("program", &p.program)]))?
            .encode_counter::<NoLabelSet, _, f64>(&(p.run_ns as f64 / 1e9), None)?;
    }
    Ok(())
}

/// The system's counters (idle states, interrupts) and the machine facts.
fn encode_system(f: &Frame, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(
        "idle_state_entries",
        "Entries into each cpuidle state, summed over CPUs (in a guest, the halting states \
         count halts)",
        None,
        MetricType::Counter,
    )?;
    for (state, n) in &f.idle_entries {
        m.encode_family(&labels(&[("state", state)]))?
            .encode_counter::<NoLabelSet, _, u64>(n, None)?;
    }
    let mut m = enc.encode_descriptor(
        "interrupts",
        "Interrupts from /proc/interrupts summed over CPUs, by kind (RES rescheduling IPIs, \
         CAL function-call IPIs, LOC timer; device IRQs summed as device)",
        None,
        MetricType::Counter,
    )?;
    for (kind, n) in &f.interrupts {
        m.encode_family(&labels(&[("kind", kind)]))?
            .encode_counter::<NoLabelSet, _, u64>(n, None)?;
    }
    enc.encode_descriptor(
        "machine",
        "Machine facts that decide what a wakeup costs",
        None,
        MetricType::Info,
    )?
    .encode_info(&f.machine)?;
    Ok(())
}

/// The three counters of some vCPU threads, by `labels`: run, run-queue wait, migrations.
struct CountFamilies<'a> {
    names: [&'static str; 3],
    help: [&'a str; 3],
}

fn encode_counts(
    fam: &CountFamilies,
    rows: &[(Labels, Counts)],
    enc: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    for (i, name) in fam.names.iter().enumerate() {
        let unit = (i < 2).then_some(Unit::Seconds);
        let mut m = enc.encode_descriptor(name, fam.help[i], unit.as_ref(), MetricType::Counter)?;
        for (l, c) in rows {
            match i {
                0 => m
                    .encode_family(l)?
                    .encode_counter::<NoLabelSet, _, f64>(&(c.run_ns as f64 / 1e9), None)?,
                1 => m
                    .encode_family(l)?
                    .encode_counter::<NoLabelSet, _, f64>(&(c.wait_ns as f64 / 1e9), None)?,
                _ => {
                    if let Some(n) = c.migrations {
                        m.encode_family(l)?
                            .encode_counter::<NoLabelSet, _, u64>(&n, None)?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// The KVM VMs of this host: how many, and per VM (per vCPU for the `--vm` ones) what its vCPU
/// threads ran and waited for a host CPU since the exporter first saw them.
fn encode_vms(v: &VmFigures, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    if let Some(n) = v.count {
        enc.encode_descriptor(
            "vms",
            "KVM VMs on this host: processes holding an anon_inode:kvm-vm fd (0 without KVM); \
             absent when some processes could not be inspected (cpulab_vms_not_inspected)",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&(n as i64))?;
    }
    if v.off.is_some() {
        return Ok(());
    }
    enc.encode_descriptor(
        "vms_not_inspected",
        "Processes whose fds the exporter could not read, so VMs they may run are not counted \
         and cpulab_vms is left out",
        None,
        MetricType::Gauge,
    )?
    .encode_gauge(&(v.not_inspected as i64))?;
    if let Some(a) = v.migrations_available {
        enc.encode_descriptor(
            "vm_vcpu_migrations_available",
            "Whether the kernel counts a thread's migrations (se.nr_migrations in \
             /proc/PID/task/TID/sched, CONFIG_SCHED_DEBUG): 0 means the migration counters are \
             absent, never 0",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&i64::from(a))?;
    }
    for (name, help, pick) in [
        (
            "vm_vcpus",
            "vCPUs of a VM (its kvm-vcpu fds; vm=\"other\": of the VMs beyond --max-vms)",
            0,
        ),
        (
            "vm_vcpus_measured",
            "vCPU threads of a VM found and counted now (a vCPU in guest mode is found when it \
             next halts, exits or is preempted; its counters count from then)",
            1,
        ),
    ] {
        let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for s in &v.vms {
            let n = if pick == 0 { s.vcpus } else { s.measured };
            m.encode_family(&labels(&[("vm", &s.vm)]))?
                .encode_gauge(&i64::from(n))?;
        }
    }
    let rows: Vec<(Labels, Counts)> = v
        .vms
        .iter()
        .filter_map(|s| Some((labels(&[("vm", &s.vm)]), s.counts?)))
        .collect();
    let vm = CountFamilies {
        names: ["vm_vcpu_run", "vm_vcpu_wait", "vm_vcpu_migrations"],
        help: [
            "Time a VM's vCPU threads ran on a host CPU since the exporter first saw each \
             (/proc/PID/task/TID/schedstat)",
            "Time a VM's vCPU threads waited on a host run queue, runnable and not running, \
             since the exporter first saw each: what its guest sees as steal; divide its rate \
             by cpulab_vm_vcpus_measured for the steal per vCPU",
            "Migrations of a VM's vCPU threads between host CPUs since the exporter first saw \
             each (se.nr_migrations); absent where the kernel does not count them \
             (cpulab_vm_vcpu_migrations_available 0)",
        ],
    };
    encode_counts(&vm, &rows, enc)?;
    let rows: Vec<(Labels, Counts)> = v
        .vms
        .iter()
        .filter_map(|s| Some((s, s.per_vcpu.as_ref()?)))
        .flat_map(|(s, per)| {
            per.iter()
                .map(|(i, c)| (labels(&[("vm", &s.vm), ("vcpu", &i.to_string())]), *c))
        })
        .collect();
    let vcpu = CountFamilies {
        names: ["vcpu_run", "vcpu_wait", "vcpu_migrations"],
        help: [
            "Time one vCPU thread of a VM named by --vm ran on a host CPU since the exporter \
             first saw it (vcpu: its index)",
            "Time one vCPU thread of a VM named by --vm waited on a host run queue since the \
             exporter first saw it: its guest's steal on that vCPU",
            "Migrations of one vCPU thread of a VM named by --vm since the exporter first saw \
             it; absent where the kernel does not count them",
        ],
    };
    encode_counts(&vcpu, &rows, enc)?;
    encode_vm_kvm(v, enc)
}

/// KVM's own events per VM, from the BPF programs on its tracepoints: present only for VMs
/// whose every vCPU thread read has them (where the programs do not run, absent, and
/// `cpulab_vm_kvm_events_available` 0); exits only where KVM traces them.
fn encode_vm_kvm(v: &VmFigures, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let Some(available) = v.kvm_available else {
        return Ok(());
    };
    enc.encode_descriptor(
        "vm_kvm_events_available",
        "Whether KVM's events are counted per VM (BPF programs on KVM's tracepoints, \
         --kvm-events): 0 means every cpulab_vm_halts_total, polls, IPIs and exits series is \
         absent, never 0 (the exporter logs why at start)",
        None,
        MetricType::Gauge,
    )?
    .encode_gauge(&i64::from(available))?;
    let rows: Vec<(Labels, super::vms::KvmCounts)> = v
        .vms
        .iter()
        .filter_map(|s| Some((labels(&[("vm", &s.vm)]), s.counts?.kvm?)))
        .collect();
    type Pick = fn(&super::vms::KvmCounts) -> Option<f64>;
    let families: [(&str, &str, bool, Pick); 7] = [
        (
            "vm_halts",
            "Halts of a VM's vCPUs that ended (kvm:kvm_vcpu_wakeup), since the exporter first saw \
             each vCPU thread",
            false,
            |k| Some(k.halts as f64),
        ),
        (
            "vm_halt_polls_won",
            "Halts of a VM's vCPUs that KVM's halt polling ended without the thread blocking",
            false,
            |k| Some(k.polls_won as f64),
        ),
        (
            "vm_halt_poll_success",
            "CPU time KVM's halt polling spent in the halts it won (their time in \
             kvm:kvm_vcpu_wakeup: KVM's own halt_poll_success_ns). The lost polls' time \
             (halt_poll_fail_ns) is not published: no tracepoint times the poll of a halt that \
             slept, and KVM's own statistics are its VMM's alone to read",
            true,
            |k| Some(k.polls_won_ns as f64 / 1e9),
        ),
        (
            "vm_halts_slept",
            "Halts of a VM's vCPUs in which the thread blocked (after polling its whole window, \
             if it had one)",
            false,
            |k| Some(k.slept as f64),
        ),
        (
            "vm_halts_slept",
            "Time of the halts in which a VM's vCPU threads blocked: the poll window, then the \
             sleep",
            true,
            |k| Some(k.slept_ns as f64 / 1e9),
        ),
        (
            "vm_ipis_sent",
            "IPIs a VM's vCPUs sent (kvm:kvm_apic_ipi, one per ICR write)",
            false,
            |k| Some(k.ipis as f64),
        ),
        (
            "vm_exits",
            "Exits of a VM's vCPUs to KVM (kvm:kvm_exit); absent where KVM does not trace them \
             (a KVM that runs guests without VMX/SVM, such as kvm_pvm)",
            false,
            |k| k.exits.map(|n| n as f64),
        ),
    ];
    for (name, help, seconds, pick) in families {
        let unit = seconds.then_some(Unit::Seconds);
        if !rows.iter().any(|(_, k)| pick(k).is_some()) {
            continue;
        }
        let mut m = enc.encode_descriptor(name, help, unit.as_ref(), MetricType::Counter)?;
        for (l, k) in &rows {
            match pick(k) {
                Some(x) if seconds => m
                    .encode_family(l)?
                    .encode_counter::<NoLabelSet, _, f64>(&x, None)?,
                // A count, exact below 2^53.
                Some(x) => m
                    .encode_family(l)?
                    .encode_counter::<NoLabelSet, _, u64>(&(x as u64), None)?,
                None => {}
            }
        }
    }
    Ok(())
}

/// The active probe's last round trips and its run counts.
fn encode_probe(p: &ProbeFigures, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    for (name, help, pick) in [
        (
            "probe_round_trip_p50",
            "Median round trip of cpulab's pipe pingpong between two pinned threads, by \
             placement class, from the last active probe",
            0usize,
        ),
        (
            "probe_round_trip_p99",
            "99th percentile round trip of cpulab's pipe pingpong between two pinned \
             threads, by placement class, from the last active probe",
            1,
        ),
    ] {
        let mut m = enc.encode_descriptor(name, help, Some(&Unit::Seconds), MetricType::Gauge)?;
        for (class, p50, p99) in &p.round_trips {
            let v = if pick == 0 { p50 } else { p99 };
            m.encode_family(&labels(&[("class", class)]))?
                .encode_gauge(v)?;
        }
    }
    enc.encode_descriptor(
        "probe_last_run_timestamp",
        "When the last active probe finished",
        Some(&Unit::Seconds),
        MetricType::Gauge,
    )?
    .encode_gauge(&p.finished_unix_s)?;
    for (name, help, v) in [
        ("probe_runs", "Active probes run", p.runs),
        ("probe_failures", "Active probes that failed", p.failures),
    ] {
        enc.encode_descriptor(name, help, None, MetricType::Counter)?
            .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
    }
    Ok(())
}

/// The exporter's own health.
fn encode_health(f: &Frame, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let h = &f.health;
    enc.encode_descriptor(
        "exporter",
        "The exporter itself: how wakeups are counted",
        None,
        MetricType::Info,
    )?
    .encode_info(&labels(&[
        ("mechanism", &f.mechanism),
        ("version", env!("CPULAB_VERSION")),
    ]))?;
    encode_self(f, enc)?;
    for (name, help, v) in [
        ("exporter_scrapes", "Scrapes served", h.scrapes),
        (
            "exporter_source_errors",
            "Scrapes whose wakeup snapshot failed",
            h.source_errors,
        ),
        (
            "exporter_connections_evicted",
            "Connections closed before their request because the connection cap was reached",
            h.connections_evicted,
        ),
        (
            "exporter_targets_folded",
            "Targets the exporter folded into target=\"other\" to stay within the series budget",
            h.targets_folded,
        ),
    ] {
        enc.encode_descriptor(name, help, None, MetricType::Counter)?
            .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
    }
    enc.encode_descriptor(
        "exporter_last_scrape_duration",
        "Time the previous scrape took to collect and encode",
        Some(&Unit::Seconds),
        MetricType::Gauge,
    )?
    .encode_gauge(&h.last_scrape_duration_s)?;
    for (name, help, v) in [
        (
            "exporter_doctor_findings_dropped",
            "Findings of the newest doctor run left unpublished: beyond the findings cap, \
             repeating an id, or unreadable",
            f.doctor.run.as_ref().map_or(0, |r| r.dropped as i64),
        ),
        (
            "exporter_series",
            "Series in this exposition",
            h.series as i64,
        ),
        (
            "exporter_series_budget",
            "Most series this exporter publishes (--series-budget)",
            h.series_budget as i64,
        ),
    ] {
        enc.encode_descriptor(name, help, None, MetricType::Gauge)?
            .encode_gauge(&v)?;
    }
    Ok(())
}

/// What the exporter knows of itself: its build, how wakeups are counted and why, each
/// collector's part of this scrape, and its read errors.
fn encode_self(f: &Frame, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let h = &f.health;
    enc.encode_descriptor(
        "exporter_build",
        "The exporter's build: its version",
        None,
        MetricType::Info,
    )?
    .encode_info(&labels(&[("version", env!("CPULAB_PKG_VERSION"))]))?;
    enc.encode_descriptor(
        "exporter_mechanism",
        "How wakeups are counted, the mechanism asked for (bpf for --mechanism auto), and why \
         it was not used (none, permission, no_btf, unsupported_kernel, verifier, other)",
        None,
        MetricType::Info,
    )?
    .encode_info(&labels(&[
        ("mechanism", &f.mechanism),
        ("preferred", &f.preferred),
        ("fallback", &f.fallback),
    ]))?;
    let mut m = enc.encode_descriptor(
        "exporter_collector_success",
        "Whether a collector read everything it publishes in this scrape (1) or not (0, its \
         series missing or partial; cpulab_exporter_read_errors_total says why)",
        None,
        MetricType::Gauge,
    )?;
    for c in &h.collectors {
        m.encode_family(&labels(&[("collector", c.collector)]))?
            .encode_gauge(&i64::from(c.success))?;
    }
    let mut m = enc.encode_descriptor(
        "exporter_collector_duration",
        "Time a collector took in this scrape (the probe: its last run)",
        Some(&Unit::Seconds),
        MetricType::Gauge,
    )?;
    for c in &h.collectors {
        m.encode_family(&labels(&[("collector", c.collector)]))?
            .encode_gauge(&c.duration_s)?;
    }
    let mut m = enc.encode_descriptor(
        "exporter_read_errors",
        "Readings a collector could not make, by kind (not_found, permission, parse, io); \
         what they would have given is left out, never published as 0",
        None,
        MetricType::Counter,
    )?;
    for ((collector, kind), n) in &h.read_errors {
        m.encode_family(&labels(&[("collector", collector), ("kind", kind)]))?
            .encode_counter::<NoLabelSet, _, u64>(n, None)?;
    }
    Ok(())
}

/// `process_*`, as the Prometheus client libraries name and define them; a figure not read is
/// left out.
#[derive(Debug)]
struct ProcessCollector(ProcessFigures);

impl Collector for ProcessCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let p = &self.0;
        if let Some(v) = p.cpu_seconds {
            enc.encode_descriptor(
                "process_cpu",
                "Total user and system CPU time spent in seconds.",
                Some(&Unit::Seconds),
                MetricType::Counter,
            )?
            .encode_counter::<NoLabelSet, _, f64>(&v, None)?;
        }
        let gauges = [
            (
                "process_resident_memory",
                "Resident memory size in bytes.",
                Some(Unit::Bytes),
                p.resident_bytes.map(|v| v as f64),
            ),
            (
                "process_virtual_memory",
                "Virtual memory size in bytes.",
                Some(Unit::Bytes),
                p.virtual_bytes.map(|v| v as f64),
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                None,
                p.open_fds.map(|v| v as f64),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                None,
                p.max_fds.map(|v| v as f64),
            ),
            (
                "process_start_time",
                "Start time of the process since unix epoch in seconds.",
                Some(Unit::Seconds),
                p.start_time_s,
            ),
        ];
        for (name, help, unit, v) in gauges {
            if let Some(v) = v {
                enc.encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?
                    .encode_gauge(&v)?;
            }
        }
        Ok(())
    }
}

/// The doctor's findings: why there are or are none, and the newest run's findings.
fn encode_doctor(d: &DoctorFigures, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    enc.encode_descriptor(
        "doctor_history",
        "Whether the newest doctor findings of this host were read from the history: state ok, \
         off (--no-history), missing (no history file yet), no-doctor-run, or unreadable",
        None,
        MetricType::Info,
    )?
    .encode_info(&labels(&[("state", d.state.as_str())]))?;
    let Some(run) = &d.run else {
        return Ok(());
    };
    enc.encode_descriptor(
        "doctor_run",
        "The newest doctor run of this host in the history: its id (cpulab history show ID) \
         and mode",
        None,
        MetricType::Info,
    )?
    .encode_info(&labels(&[
        ("history_id", &run.history_id.to_string()),
        ("mode", &run.mode),
    ]))?;
    enc.encode_descriptor(
        "doctor_last_run_timestamp",
        "When the newest doctor run of this host in the history started",
        Some(&Unit::Seconds),
        MetricType::Gauge,
    )?
    .encode_gauge(&run.started_unix_s)?;
    let mut m = enc.encode_descriptor(
        "doctor_finding",
        "A finding of the newest doctor run of this host, by id and severity: 1 while that run \
         is the newest; its size is cpulab_doctor_finding_ratio",
        None,
        MetricType::Gauge,
    )?;
    for x in &run.findings {
        m.encode_family(&labels(&[("id", &x.id), ("severity", x.severity.as_str())]))?
            .encode_gauge(&1i64)?;
    }
    let mut m = enc.encode_descriptor(
        "doctor_finding_ratio",
        "Size of a finding of the newest doctor run: its worse figure over its better one \
         (dimensionless, at least 1), for the findings whose effect is a ratio",
        None,
        MetricType::Gauge,
    )?;
    for x in &run.findings {
        if let Some(r) = x.ratio {
            m.encode_family(&labels(&[("id", &x.id)]))?
                .encode_gauge(&r)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wakeups::TargetCounts;

    fn class(buckets: &[(usize, u64)], count: u64) -> ClassCounts {
        let mut b = vec![0; LATENCY_BOUNDS_NS.len()];
        for &(i, n) in buckets {
            b[i] = n;
        }
        ClassCounts {
            to_idle: 3,
            to_busy: 1,
            buckets: b,
            count,
            sum_ns: 40_000,
        }
    }

    fn frame() -> Frame {
        let mut classes = BTreeMap::new();
        classes.insert("same-cpu".to_string(), class(&[(0, 2), (3, 1)], 4));
        Frame {
            classes: vec!["same-cpu".into(), "shared-llc".into()],
            wakeups: Some(Snapshot {
                targets: vec![TargetCounts {
                    target: "postgres".into(),
                    classes,
                }],
                events_seen: 10,
                events_lost: 0,
                targets_dropped: 0,
                programs: Vec::new(),
                latency_sample: 8,
                attach_every: 1,
                attached_ns: 0,
            }),
            mechanism: "fake".into(),
            idle_entries: [("haltpoll".to_string(), 7)].into_iter().collect(),
            interrupts: [("RES".to_string(), 5)].into_iter().collect(),
            machine: vec![("kernel".into(), "6.1.0".into())],
            probe: None,
            doctor: DoctorFigures::default(),
            health: Health::default(),
            process: ProcessFigures::default(),
            vms: None,
            preferred: "bpf".into(),
            fallback: "none".into(),
        }
    }

    fn sample(text: &str, prefix: &str) -> Vec<u64> {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect()
    }

    #[test]
    fn count_equals_inf_bucket_even_when_the_count_lags_the_buckets() {
        // A racy read: buckets already hold 5 latencies, the count says 4.
        let c = class(&[(0, 2), (3, 3)], 4);
        let (b, count) = histogram_buckets(&c);
        assert_eq!(b.len(), LATENCY_BOUNDS_NS.len() + 1);
        assert_eq!(b.iter().map(|x| x.1).sum::<u64>(), count);
        assert_eq!(count, 5);
        let mut f = frame();
        f.wakeups.as_mut().unwrap().targets[0]
            .classes
            .insert("same-cpu".into(), c);
        for format in [Format::Prometheus, Format::OpenMetrics] {
            let t = encode(&f, format);
            // The encoders order the labels differently: match each part.
            let inf: Vec<u64> = t
                .lines()
                .filter(|l| l.starts_with("cpulab_wakeup_latency_seconds_bucket{"))
                .filter(|l| {
                    ["le=\"+Inf\"", "target=\"postgres\"", "class=\"same-cpu\""]
                        .iter()
                        .all(|p| l.contains(p))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
                .collect();
            let cnt = sample(
                &t,
                "cpulab_wakeup_latency_seconds_count{target=\"postgres\",class=\"same-cpu\"}",
            );
            assert_eq!(inf, vec![5], "{t}");
            assert_eq!(cnt, vec![5]);
        }
    }

    #[test]
    fn program_costs_are_published_only_when_measured_in_seconds() {
        let mut f = frame();
        let t = encode(&f, Format::Prometheus);
        assert!(!t.contains("bpf_program"), "{t}");
        f.wakeups.as_mut().unwrap().programs = vec![crate::wakeups::ProgramCost {
            program: "sched_waking".into(),
            runs: 4,
            run_ns: 1_500_000_000,
        }];
        for format in [Format::Prometheus, Format::OpenMetrics] {
            let t = encode(&f, format);
            assert_eq!(
                sample(
                    &t,
                    "cpulab_exporter_bpf_program_runs_total{program=\"sched_waking\"}"
                ),
                vec![4],
                "{t}"
            );
            let secs: Vec<f64> = t
                .lines()
                .filter(|l| {
                    l.starts_with(
                        "cpulab_exporter_bpf_program_run_seconds_total{program=\"sched_waking\"}",
                    )
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
                .collect();
            assert_eq!(secs, vec![1.5], "{t}");
        }
    }

    #[test]
    fn buckets_are_exp2_seconds_from_about_1us_to_about_1s() {
        let (b, _) = histogram_buckets(&ClassCounts::default());
        assert!((b[0].0 - 1.024e-6).abs() < 1e-12);
        assert!(b.windows(2).all(|w| w[1].0 > w[0].0));
        let last_finite = b[b.len() - 2].0;
        assert!((1.0..1.1).contains(&last_finite));
    }

    #[test]
    fn every_host_class_is_published_for_every_target_zeros_included() {
        let t = encode(&frame(), Format::Prometheus);
        for class in ["same-cpu", "shared-llc"] {
            for dest in ["idle", "busy"] {
                let line = format!(
                    "cpulab_wakeups_total{{target=\"postgres\",class=\"{class}\",dest=\"{dest}\"}}"
                );
                assert_eq!(sample(&t, &line).len(), 1, "{line}\n{t}");
            }
        }
        assert_eq!(
            sample(
                &t,
                "cpulab_wakeups_total{target=\"postgres\",class=\"shared-llc\",dest=\"idle\"}"
            ),
            vec![0]
        );
    }

    #[test]
    fn series_gauge_counts_the_samples_and_matches_the_arithmetic() {
        let f = frame();
        let t = encode(&f, Format::Prometheus);
        let n = count_samples(&t);
        assert_eq!(sample(&t, "cpulab_exporter_series "), vec![n as u64]);
        let mut no_targets = f.clone();
        no_targets.wakeups.as_mut().unwrap().targets.clear();
        let base = count_samples(&encode(&no_targets, Format::Prometheus));
        assert_eq!(n - base, series_per_target(2));
    }

    #[test]
    fn openmetrics_ends_with_eof_and_names_counters_with_total() {
        let t = encode(&frame(), Format::OpenMetrics);
        assert!(t.ends_with("# EOF\n"));
        assert!(t.contains("# TYPE cpulab_wakeups counter"));
        assert!(t.contains("cpulab_wakeups_total{"));
        assert!(t.contains("# UNIT cpulab_wakeup_latency_seconds seconds"));
        assert!(t.contains("cpulab_machine_info{kernel=\"6.1.0\"} 1"));
        let p = encode(&frame(), Format::Prometheus);
        assert!(!p.contains("# EOF"));
        assert!(p.contains("# TYPE cpulab_wakeups_total counter"));
    }

    #[test]
    fn no_source_publishes_no_wakeup_series() {
        let mut f = frame();
        f.wakeups = None;
        let t = encode(&f, Format::Prometheus);
        assert!(!t.contains("cpulab_wakeups_total"));
        assert!(!t.contains("cpulab_exporter_latency_sample"));
        assert!(!t.contains("cpulab_exporter_attached"));
        assert!(t.contains("cpulab_interrupts_total{kind=\"RES\"} 5"));
    }

    #[test]
    fn the_latency_sampling_is_published_beside_the_histogram() {
        let mut f = frame();
        let t = encode(&f, Format::Prometheus);
        assert_eq!(sample(&t, "cpulab_exporter_latency_sample "), [8]);
        assert!(t.contains("at most 8 watched wakeups"), "{t}");
        // A source that times every wakeup says 1, however it wrote it.
        if let Some(w) = f.wakeups.as_mut() {
            w.latency_sample = 0;
        }
        let t = encode(&f, Format::Prometheus);
        assert_eq!(sample(&t, "cpulab_exporter_latency_sample "), [1]);
    }

    #[test]
    fn the_attached_share_and_time_are_published_beside_the_counts() {
        let mut f = frame();
        if let Some(w) = f.wakeups.as_mut() {
            w.attach_every = 4;
            w.attached_ns = 2_500_000_000;
        }
        let t = encode(&f, Format::Prometheus);
        assert!(t.contains("cpulab_exporter_attached_ratio 0.25\n"), "{t}");
        assert!(
            t.contains("cpulab_exporter_attached_seconds_total 2.5\n"),
            "{t}"
        );
        assert!(t.contains("# TYPE cpulab_exporter_attached_seconds_total counter"));
        // Always attached, however the source wrote it.
        if let Some(w) = f.wakeups.as_mut() {
            w.attach_every = 0;
        }
        let t = encode(&f, Format::Prometheus);
        assert!(t.contains("cpulab_exporter_attached_ratio 1.0\n"), "{t}");
    }

    #[test]
    fn process_figures_follow_the_client_libraries_and_one_not_read_is_absent() {
        let mut f = frame();
        f.process = ProcessFigures {
            cpu_seconds: Some(1.5),
            resident_bytes: Some(4096),
            virtual_bytes: None,
            open_fds: Some(7),
            max_fds: None,
            start_time_s: Some(1.0e9),
        };
        for format in [Format::Prometheus, Format::OpenMetrics] {
            let t = encode(&f, format);
            for line in [
                "process_cpu_seconds_total 1.5\n",
                "process_resident_memory_bytes 4096",
                "process_open_fds 7",
                "process_start_time_seconds 1000000000",
            ] {
                assert!(t.contains(line), "{line}\n{t}");
            }
            assert!(!t.contains("process_virtual_memory_bytes"), "{t}");
            assert!(!t.contains("process_max_fds"), "{t}");
            assert!(!t.contains("cpulab_process"), "{t}");
        }
        let p = encode(&f, Format::Prometheus);
        assert!(
            p.contains("# TYPE process_cpu_seconds_total counter"),
            "{p}"
        );
        assert!(
            p.contains("# TYPE process_resident_memory_bytes gauge"),
            "{p}"
        );
    }

    #[test]
    fn each_collector_and_error_kind_is_one_series() {
        let mut f = frame();
        f.health.collectors = ["wakeups", "idle"]
            .map(|collector| CollectorRun {
                collector,
                success: collector == "wakeups",
                duration_s: 0.25,
            })
            .to_vec();
        f.health.read_errors = [(("idle", "permission"), 2), (("idle", "parse"), 1)]
            .into_iter()
            .collect();
        let t = encode(&f, Format::Prometheus);
        for line in [
            "cpulab_exporter_collector_success{collector=\"wakeups\"} 1\n",
            "cpulab_exporter_collector_success{collector=\"idle\"} 0\n",
            "cpulab_exporter_collector_duration_seconds{collector=\"idle\"} 0.25\n",
            "cpulab_exporter_read_errors_total{collector=\"idle\",kind=\"permission\"} 2\n",
            "cpulab_exporter_read_errors_total{collector=\"idle\",kind=\"parse\"} 1\n",
        ] {
            assert!(t.contains(line), "{line}\n{t}");
        }
        assert_eq!(sample(&t, "cpulab_exporter_collector_success{").len(), 2);
        assert_eq!(sample(&t, "cpulab_exporter_read_errors_total{").len(), 2);
    }

    #[test]
    fn only_lines_that_are_neither_empty_nor_comments_are_samples() {
        let t = "# HELP x An x.\n# TYPE x counter\nx_total 1\n\ny{a=\"b\"} 2\n# EOF\n";
        assert_eq!(count_samples(t), 2);
        assert_eq!(count_samples("# EOF\n\n"), 0);
    }

    #[test]
    fn each_format_names_its_own_content_type() {
        assert_eq!(
            Format::Prometheus.content_type(),
            "text/plain; version=0.0.4; charset=utf-8"
        );
        assert_eq!(
            Format::OpenMetrics.content_type(),
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        );
    }

    #[test]
    fn the_latency_sum_is_the_class_sum_in_seconds() {
        // The class holds 40 us of latencies in all.
        let t = encode(&frame(), Format::Prometheus);
        let sums: Vec<f64> = t
            .lines()
            .filter(|l| {
                l.starts_with(
                    "cpulab_wakeup_latency_seconds_sum{target=\"postgres\",class=\"same-cpu\"}",
                )
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        assert_eq!(sums, [4e-5], "{t}");
    }

    fn vm_figures() -> VmFigures {
        use super::super::vms::VmSeries;
        let c = |run_ns, wait_ns, migrations| Counts {
            run_ns,
            wait_ns,
            migrations,
            kvm: None,
        };
        VmFigures {
            off: None,
            count: Some(3),
            not_inspected: 0,
            migrations_available: Some(true),
            kvm_available: None,
            vms: vec![
                VmSeries {
                    vm: "db".into(),
                    vcpus: 2,
                    measured: 2,
                    counts: Some(c(1_500_000_000, 250_000_000, Some(3))),
                    per_vcpu: Some(
                        [
                            (0, c(1_000_000_000, 50_000_000, Some(1))),
                            (1, c(500_000_000, 200_000_000, Some(2))),
                        ]
                        .into(),
                    ),
                },
                VmSeries {
                    vm: "web (42)".into(),
                    vcpus: 4,
                    measured: 0,
                    counts: None,
                    per_vcpu: None,
                },
                VmSeries {
                    vm: "other".into(),
                    vcpus: 1,
                    measured: 1,
                    counts: Some(c(2_000_000_000, 0, None)),
                    per_vcpu: None,
                },
            ],
        }
    }

    #[test]
    fn vms_publish_cumulative_seconds_per_vm_and_per_vcpu_only_for_the_listed_one() {
        let mut f = frame();
        f.vms = Some(vm_figures());
        for format in [Format::Prometheus, Format::OpenMetrics] {
            let t = encode(&f, format);
            for line in [
                "cpulab_vms 3\n",
                "cpulab_vms_not_inspected 0\n",
                "cpulab_vm_vcpu_migrations_available 1\n",
                "cpulab_vm_vcpus{vm=\"db\"} 2\n",
                "cpulab_vm_vcpus_measured{vm=\"db\"} 2\n",
                "cpulab_vm_vcpus{vm=\"web (42)\"} 4\n",
                "cpulab_vm_vcpus_measured{vm=\"web (42)\"} 0\n",
                "cpulab_vm_vcpu_run_seconds_total{vm=\"db\"} 1.5\n",
                "cpulab_vm_vcpu_wait_seconds_total{vm=\"db\"} 0.25\n",
                "cpulab_vm_vcpu_migrations_total{vm=\"db\"} 3\n",
                "cpulab_vm_vcpu_run_seconds_total{vm=\"other\"} 2.0\n",
                "cpulab_vcpu_wait_seconds_total{vm=\"db\",vcpu=\"1\"} 0.2\n",
                "cpulab_vcpu_migrations_total{vm=\"db\",vcpu=\"0\"} 1\n",
            ] {
                assert!(t.contains(line), "{line}\n{t}");
            }
            // A VM none of whose threads was read has no counter, never a 0; other's threads
            // have no migration count, so other has none.
            assert!(!t.contains("_total{vm=\"web (42)\""), "{t}");
            assert!(
                !t.contains("cpulab_vm_vcpu_migrations_total{vm=\"other\""),
                "{t}"
            );
            // Per vCPU only for db.
            let per_vcpu: Vec<&str> = t
                .lines()
                .filter(|l| l.starts_with("cpulab_vcpu_"))
                .collect();
            assert_eq!(per_vcpu.len(), 6, "{t}");
            assert!(per_vcpu.iter().all(|l| l.contains("vm=\"db\"")), "{t}");
        }
        let p = encode(&f, Format::Prometheus);
        assert!(
            p.contains("# TYPE cpulab_vm_vcpu_wait_seconds_total counter"),
            "{p}"
        );
        assert!(p.contains("# TYPE cpulab_vm_vcpus gauge"), "{p}");
    }

    #[test]
    fn kvm_events_are_published_per_vm_where_counted_and_absent_where_not() {
        use super::super::vms::KvmCounts;
        let mut f = frame();
        let mut v = vm_figures();
        // Before the programs run anywhere: no KVM series at all.
        f.vms = Some(v.clone());
        let t = encode(&f, Format::Prometheus);
        assert!(
            !t.contains("kvm_events_available") && !t.contains("cpulab_vm_halts"),
            "{t}"
        );
        v.kvm_available = Some(true);
        if let Some(c) = v.vms[0].counts.as_mut() {
            c.kvm = Some(KvmCounts {
                halts: 30,
                polls_won: 20,
                polls_won_ns: 2_000_000,
                slept: 10,
                slept_ns: 500_000_000,
                ipis: 31,
                exits: None,
            });
        }
        f.vms = Some(v.clone());
        for format in [Format::Prometheus, Format::OpenMetrics] {
            let t = encode(&f, format);
            for line in [
                "cpulab_vm_kvm_events_available 1\n",
                "cpulab_vm_halts_total{vm=\"db\"} 30\n",
                "cpulab_vm_halt_polls_won_total{vm=\"db\"} 20\n",
                "cpulab_vm_halt_poll_success_seconds_total{vm=\"db\"} 0.002\n",
                "cpulab_vm_halts_slept_total{vm=\"db\"} 10\n",
                "cpulab_vm_halts_slept_seconds_total{vm=\"db\"} 0.5\n",
                "cpulab_vm_ipis_sent_total{vm=\"db\"} 31\n",
            ] {
                assert!(t.contains(line), "{line}\n{t}");
            }
            // Exits not traced: no exit series; the VM without KVM counts has none either.
            assert!(!t.contains("cpulab_vm_exits"), "{t}");
            assert!(!t.contains("cpulab_vm_halts_total{vm=\"other\"}"), "{t}");
        }
        // Programs refused: the gauge says 0, and no series stands in.
        v.kvm_available = Some(false);
        if let Some(c) = v.vms[0].counts.as_mut() {
            c.kvm = None;
        }
        f.vms = Some(v);
        let t = encode(&f, Format::Prometheus);
        assert!(t.contains("cpulab_vm_kvm_events_available 0\n"), "{t}");
        assert!(!t.lines().any(|l| l.starts_with("cpulab_vm_halt")), "{t}");
    }

    #[test]
    fn vms_not_all_inspected_have_no_count_and_a_host_without_kvm_only_a_zero() {
        let mut f = frame();
        let mut v = vm_figures();
        v.count = None;
        v.not_inspected = 7;
        v.migrations_available = Some(false);
        f.vms = Some(v);
        let t = encode(&f, Format::Prometheus);
        assert!(!t.lines().any(|l| l.starts_with("cpulab_vms ")), "{t}");
        assert!(t.contains("cpulab_vms_not_inspected 7\n"), "{t}");
        assert!(t.contains("cpulab_vm_vcpu_migrations_available 0\n"), "{t}");
        f.vms = Some(VmFigures {
            off: Some("no KVM on this host".into()),
            count: Some(0),
            ..VmFigures::default()
        });
        let t = encode(&f, Format::Prometheus);
        let vm_lines: Vec<&str> = t.lines().filter(|l| l.starts_with("cpulab_vm")).collect();
        assert_eq!(vm_lines, ["cpulab_vms 0"], "{t}");
    }

    #[test]
    fn the_probe_publishes_each_class_p50_and_p99_apart() {
        let mut f = frame();
        let t = encode(&f, Format::Prometheus);
        assert!(!t.contains("cpulab_probe"), "{t}");
        f.probe = Some(ProbeFigures {
            round_trips: vec![("same-cpu".into(), 0.25, 0.75)],
            finished_unix_s: 1.5e9,
            runs: 3,
            failures: 1,
            last_ok: true,
            last_duration_s: 0.5,
        });
        let t = encode(&f, Format::Prometheus);
        for line in [
            "cpulab_probe_round_trip_p50_seconds{class=\"same-cpu\"} 0.25\n",
            "cpulab_probe_round_trip_p99_seconds{class=\"same-cpu\"} 0.75\n",
            "cpulab_probe_last_run_timestamp_seconds 1500000000.0\n",
            "cpulab_probe_runs_total 3\n",
            "cpulab_probe_failures_total 1\n",
        ] {
            assert!(t.contains(line), "{line}\n{t}");
        }
    }

    #[test]
    fn the_newest_doctor_run_is_published_with_its_findings_and_ratios() {
        use super::super::doctor::{DoctorRun, FindingFigure, State};
        use crate::doctor::findings::Severity;
        let mut f = frame();
        let t = encode(&f, Format::Prometheus);
        assert!(
            t.contains("cpulab_doctor_history_info{state=\"off\"} 1\n"),
            "{t}"
        );
        assert!(!t.contains("cpulab_doctor_finding"), "{t}");
        f.doctor = DoctorFigures {
            state: State::Ok,
            run: Some(DoctorRun {
                history_id: 42,
                started_unix_s: 1_700_000_000,
                mode: "quick".into(),
                findings: vec![
                    FindingFigure {
                        id: "cross-cpu-wakeup".into(),
                        severity: Severity::High,
                        ratio: Some(3.5),
                    },
                    FindingFigure {
                        id: "no-idle-halt".into(),
                        severity: Severity::Low,
                        ratio: None,
                    },
                ],
                dropped: 2,
            }),
        };
        let t = encode(&f, Format::Prometheus);
        for line in [
            "cpulab_doctor_history_info{state=\"ok\"} 1\n",
            "cpulab_doctor_run_info{history_id=\"42\",mode=\"quick\"} 1\n",
            "cpulab_doctor_last_run_timestamp_seconds 1700000000\n",
            "cpulab_doctor_finding{id=\"cross-cpu-wakeup\",severity=\"high\"} 1\n",
            "cpulab_doctor_finding{id=\"no-idle-halt\",severity=\"low\"} 1\n",
            "cpulab_doctor_finding_ratio{id=\"cross-cpu-wakeup\"} 3.5\n",
            "cpulab_exporter_doctor_findings_dropped 2\n",
        ] {
            assert!(t.contains(line), "{line}\n{t}");
        }
        assert!(
            !t.contains("cpulab_doctor_finding_ratio{id=\"no-idle-halt\"}"),
            "{t}"
        );
    }
}
