//! `cpulab watch`: what placement costs a running application, observed without restarting it.
//!
//! Every other experiment starts its own processes; a DBA with a production PostgreSQL cannot.
//! A watch attaches to the kernel's scheduler tracepoints for a window ([`ring`]), decodes the
//! records with layouts read from the running kernel ([`format`], [`events`]), follows each
//! wakeup of the watched tasks from waker to switch-in ([`analyze`]), and reports per process
//! how its wakeups were placed (same CPU as the waker, or which class away) and what each class
//! cost in wakeup-to-run latency ([`report`], [`render`]). The VM mechanism around the window
//! (halts, rescheduling and call-function IPIs, steal, guest halt polling) comes from the same
//! /proc and /sys counters the other experiments read, sampled before and after.
//!
//! It only observes: tracefs is mounted just long enough to read the tracepoint layouts when it
//! was not mounted, the perf events are closed on every exit path (they are descriptors), and
//! the child of `watch -- COMMAND` ends with cpulab.

pub mod analyze;
pub mod bpf;
pub mod btf;
pub mod command;
pub mod events;
pub mod format;
pub mod render;
pub mod report;
pub mod ring;
pub mod targets;

use crate::error::bad_input;
use crate::experiment::{Experiment, Figure, Progress};
use crate::machine::{Conditions, Machine};
use crate::output::Style;
use crate::report::envelope::Kind;
use analyze::Analysis;
use anyhow::Result;
use events::{Decoder, Timed};
pub use report::WatchReport;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
pub use targets::Target;

/// The one line for a user who may not open system-wide tracepoints.
pub const PERMISSION_LINE: &str = "cpulab watch needs to read scheduler tracepoints: run as root, or grant CAP_BPF and CAP_PERFMON for its BPF programs: setcap cap_bpf,cap_perfmon+ep $(which cpulab)";
/// The one line for a user who asked for perf and may not use it.
pub const PERF_PERMISSION_LINE: &str = "cpulab watch --mechanism perf needs root (it reads the tracepoints' layouts from tracefs); without root, grant CAP_BPF and CAP_PERFMON and use the default mechanism: setcap cap_bpf,cap_perfmon+ep $(which cpulab)";

/// Validated settings of a watch.
#[derive(Clone, Debug)]
pub struct WatchSettings {
    pub target: Target,
    /// `watch -- COMMAND ARGS`: started after tracing begins, watched with its descendants.
    pub command: Option<Vec<String>>,
    pub duration_s: f64,
    /// Data pages per CPU ring (a power of two).
    pub ring_pages: usize,
    /// Write one drain of the first CPU's ring here (fixtures for the parser's tests).
    pub dump_records: Option<PathBuf>,
    /// Also take a record of every `sched_wakeup` (else it is only counted): its target CPU
    /// then checks each placement, at the cost of one more record per wakeup.
    pub sample_wakeups: bool,
    /// Filter the tracepoints in the kernel to the watched tasks when the target allows it
    /// (`--comm`, `--pid`), so other tasks' events cost no record.
    pub kernel_filter: bool,
    /// How the tracepoints are read.
    pub mechanism: Mechanism,
}

/// How a watch reads the scheduler tracepoints. (Plain comments on the variants: doc comments
/// would turn `--help` into clap's long layout.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Mechanism {
    // BPF when it loads here, else perf (the reason is given).
    #[default]
    Auto,
    // eBPF programs on the scheduler's raw tracepoints (task fields at offsets from the
    // kernel's BTF), each writing a small record into one BPF ring buffer; where the raw
    // tracepoints cannot be used, tracepoint programs as bpf-tracepoint. Sees every event, also
    // those emitted while an idle vCPU is woken (needs root, or CAP_BPF and CAP_PERFMON).
    Bpf,
    // eBPF programs on the tracepoints (through perf) copying each tracefs record into one BPF
    // ring buffer: no BTF needed, but each event pays for building the tracepoint record.
    BpfTracepoint,
    // perf_event_open per-CPU sample rings with in-kernel filters (no BPF needed); on KVM
    // guests it misses the records emitted while an idle vCPU is woken.
    Perf,
}

impl Default for WatchSettings {
    fn default() -> Self {
        Self {
            target: Target::All,
            command: None,
            duration_s: 10.0,
            ring_pages: 1024,
            dump_records: None,
            sample_wakeups: false,
            kernel_filter: true,
            mechanism: Mechanism::Auto,
        }
    }
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn is_denied(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

/// Records newer than this may still be being written on another CPU: they wait for the next
/// drain so that events of different CPUs are analysed in time order.
const SETTLE_NS: u64 = 5_000_000;
/// How often the rings are drained: each ring holds about a second of records at a hundred
/// thousand events per second, so a drain every 100 ms wakes the reader (which competes with the
/// watched application for the same CPUs) only ten times a second; a ring found filling fast is
/// drained ten times as often.
const POLL: Duration = Duration::from_millis(20);

/// The tracepoints in the order they are opened (and counted): the ring's leader first.
pub const EVENT_NAMES: [&str; 4] = [
    "sched_waking",
    "sched_switch",
    "sched_migrate_task",
    "sched_wakeup",
];

/// A comm the kernel's filter grammar can hold as a string literal.
fn filterable_comm(c: &str) -> bool {
    !c.is_empty()
        && c.len() <= 15
        && c.chars()
            .all(|ch| ch.is_ascii_graphic() && !matches!(ch, '"' | '\\' | '*' | '?' | '['))
}

/// The in-kernel filter per event (in [`EVENT_NAMES`] order) that keeps only the watched tasks'
/// events, or `None` when the target cannot be said as a filter (a cgroup, a command and its
/// future children, the whole machine, too many threads). Returns the filters and a sentence for
/// the report saying what they keep.
pub fn kernel_filters(target: &Target, root: &std::path::Path) -> Option<([String; 4], String)> {
    let any = |fields: &[&str], values: &[String]| -> String {
        let mut terms = Vec::new();
        for f in fields {
            for v in values {
                terms.push(format!("{f} == {v}"));
            }
        }
        terms.join(" || ")
    };
    let (values, what) = match target {
        Target::Comms(c) if c.iter().all(|c| filterable_comm(c)) => (
            c.iter().map(|c| format!("\"{c}\"")).collect::<Vec<_>>(),
            "in-kernel filters keep the events of threads named as the watched processes (a thread \
             that renamed itself is not seen)"
                .to_string(),
        ),
        Target::Pids(pids) => {
            let mut tids = Vec::new();
            for pid in pids {
                let dir = root.join("proc").join(pid.to_string()).join("task");
                let entries = std::fs::read_dir(&dir).ok()?;
                for e in entries.flatten() {
                    tids.push(e.file_name().to_string_lossy().to_string());
                }
            }
            if tids.is_empty() || tids.len() > 64 {
                return None;
            }
            (
                tids,
                "in-kernel filters keep the events of the threads the watched processes had when \
                 the watch began (threads started later are not seen)"
                    .to_string(),
            )
        }
        _ => return None,
    };
    let pid = match target {
        Target::Pids(_) => ("pid", "prev_pid", "next_pid"),
        _ => ("comm", "prev_comm", "next_comm"),
    };
    Some((
        [
            any(&[pid.0], &values),
            any(&[pid.1, pid.2], &values),
            any(&[pid.0], &values),
            any(&[pid.0], &values),
        ],
        what,
    ))
}

/// Cuts `bytes` at the last whole record within `limit` bytes.
fn whole_records(bytes: &[u8], limit: usize) -> &[u8] {
    let mut at = 0;
    while at + 8 <= bytes.len() {
        let size = u16::from_ne_bytes([bytes[at + 6], bytes[at + 7]]) as usize;
        if size == 0 || at + size > limit.min(bytes.len()) {
            break;
        }
        at += size;
    }
    &bytes[..at]
}

/// Watches for the settings' window (or until Ctrl-C, or the target is gone).
pub fn run(machine: &Machine, s: &WatchSettings, progress: &Progress) -> Result<WatchReport> {
    let root_user = nix::unistd::geteuid().is_root();
    let denied_line = match s.mechanism {
        Mechanism::Bpf => BPF_PERMISSION_LINE,
        Mechanism::BpfTracepoint => BPF_TRACEPOINT_PERMISSION_LINE,
        Mechanism::Perf => PERF_PERMISSION_LINE,
        Mechanism::Auto => PERMISSION_LINE,
    };
    let cpus = machine.topology.online.to_vec();
    let want_bpf = s.mechanism != Mechanism::Perf && s.dump_records.is_none();
    // BPF first, unless perf was asked for (or a perf ring dump, a parser fixture); raw
    // tracepoints first of all: they need the kernel's BTF but not tracefs.
    let mut bpf_refused = None;
    let mut raw_refused: Option<String> = None;
    let mut typed_refused: Option<String> = None;
    let mut source = None;
    if want_bpf && s.mechanism != Mechanism::BpfTracepoint {
        match open_raw(&machine.root) {
            Ok((p, why)) => {
                typed_refused = why;
                source = Some(Source::Bpf(p, None));
            }
            Err(RawRefusal::Denied(_)) if s.mechanism == Mechanism::Bpf => {
                return Err(bad_input(BPF_PERMISSION_LINE));
            }
            Err(RawRefusal::Denied(e)) => bpf_refused = Some(e),
            Err(RawRefusal::Unusable(why)) => raw_refused = Some(why),
        }
    } else if want_bpf {
        raw_refused = Some("--mechanism bpf-tracepoint".into());
    }
    let mut filters = None;
    // What each event costs a record (all of them, with BPF); the ids are perf's concern.
    let mut specs: Vec<ring::EventSpec> = (0..4)
        .map(|_| ring::EventSpec {
            id: 0,
            sampled: true,
            filter: None,
        })
        .collect();
    let mut source = match source {
        Some(b) => b,
        None => {
            let formats = read_formats(root_user, denied_line)?;
            let decoder = Decoder::new(&formats[0], &formats[1], &formats[2], &formats[3])
                .map_err(|e| anyhow::anyhow!(e))?;
            let mut bpf = None;
            if want_bpf && bpf_refused.is_none() {
                match open_tracepoint_bpf(&formats, &machine.root) {
                    Ok(p) => {
                        if let Some(why) = raw_refused
                            .as_ref()
                            .filter(|_| s.mechanism != Mechanism::BpfTracepoint)
                        {
                            progress.note(&format!(
                                "BPF tracepoint programs instead of raw tracepoints: {why}"
                            ));
                        }
                        bpf = Some(p);
                    }
                    Err(e) if s.mechanism != Mechanism::Auto => {
                        return Err(if is_denied(&e) {
                            bad_input(denied_line)
                        } else {
                            bad_input(format!(
                                "--mechanism {}: the BPF programs did not load here ({e}); use --mechanism perf",
                                if s.mechanism == Mechanism::Bpf {
                                    "bpf"
                                } else {
                                    "bpf-tracepoint"
                                }
                            ))
                        });
                    }
                    Err(e) => bpf_refused = Some(e.to_string()),
                }
            }
            match bpf {
                Some(p) => Source::Bpf(p, Some(decoder)),
                None => {
                    if let Some(why) = &bpf_refused {
                        progress.note(&format!(
                            "reading the tracepoints with perf: BPF did not load ({why})"
                        ));
                    }
                    let (tracer, f, sp) = open_perf(machine, s, &decoder, &cpus)?;
                    filters = f;
                    specs = sp;
                    Source::Perf(tracer, decoder)
                }
            }
        }
    };

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let _ = signal_hook::flag::register(sig, stop.clone());
    }
    let mut conditions = Conditions::now(machine);
    let before = crate::counters::SystemSnapshot::take(&machine.root);
    let started = Instant::now();
    source.enable()?;
    let mut child = match &s.command {
        Some(argv) => Some(targets::Child::spawn(argv).map_err(bad_input)?),
        None => None,
    };
    let target = match &child {
        Some(c) => Target::Command(c.pid()),
        None => s.target.clone(),
    };
    let mut tasks = targets::LiveTasks::new(&machine.root, target.clone());
    let mut analysis = Analysis::new(&machine.topology);
    let mut pending: Vec<Timed> = Vec::new();
    let mut tally = Tally::default();
    let mut torn = 0u64;
    let mut dump = s.dump_records.clone();
    let deadline = started + Duration::from_secs_f64(s.duration_s);
    progress.step(&format!(
        "watching {} for {:.1} s",
        target.describe(),
        s.duration_s
    ));
    let mut ended = "window elapsed".to_string();
    let mut last_refresh = Instant::now();
    loop {
        let finished = if stop.load(Ordering::Relaxed) {
            ended = "interrupted: reporting what was seen".into();
            true
        } else if child.as_mut().is_some_and(|c| c.exited()) {
            ended = "command exited".into();
            true
        } else if let Target::Pids(p) = &target
            && p.iter()
                .all(|pid| !machine.root.join("proc").join(pid.to_string()).exists())
        {
            ended = "every watched process exited".into();
            true
        } else {
            Instant::now() >= deadline
        };
        if finished {
            // Stop the events before the last drain, so the counts read after it cover exactly
            // what could have been delivered.
            source.disable();
        }
        let cutoff = if finished {
            u64::MAX
        } else {
            monotonic_ns().saturating_sub(SETTLE_NS)
        };
        if started.elapsed() > Duration::from_millis(300)
            && let Source::Perf(tracer, decoder) = &mut source
            && let Some(path) = dump.take()
        {
            let bytes = tracer.drain_bytes();
            std::fs::write(&path, whole_records(&bytes, 32 * 1024))
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            let cpu = cpus.first().copied().unwrap_or(0);
            ring::parse_records(&bytes, |r| {
                collect(decoder, cpu, r, &mut pending, &mut tally)
            });
        }
        torn += source.drain(&mut pending, &mut tally);
        pending.sort_by_key(|t| t.time_ns);
        let ready = pending.partition_point(|t| t.time_ns <= cutoff);
        for ev in pending.drain(..ready) {
            analysis.feed(&ev, &mut tasks);
        }
        if finished {
            break;
        }
        if last_refresh.elapsed() > Duration::from_secs(1) {
            tasks.refresh();
            last_refresh = Instant::now();
        }
        // A ring an eighth full after one interval would overflow within a few more slow
        // intervals on a busy machine: drain it sooner.
        let poll = if source.last_fill() > 0.125 {
            POLL / 10
        } else {
            POLL
        };
        std::thread::sleep(poll.min(deadline.saturating_duration_since(Instant::now())));
    }
    let interval_s = started.elapsed().as_secs_f64();
    analysis.finish(&mut tasks);
    let counts = source.counts(&cpus, &mut tally);
    let bpf_kind = match &source {
        Source::Bpf(p, _) => Some(p.kind),
        Source::Perf(..) => None,
    };
    drop(source);
    drop(child);
    let after = crate::counters::SystemSnapshot::take(&machine.root);
    let lost: u64 = tally.lost.values().sum();
    let delivery = report::delivery(&counts, &tally, &specs);
    if report::incomplete(&delivery).is_some() {
        conditions.noisy = true;
    }
    let mechanism = match bpf_kind {
        Some(bpf::Kind::TypedRaw) => format!(
            "eBPF programs on the BTF-typed raw tracepoints (tp_btf) sched_waking, \
             sched_wakeup, sched_switch, sched_migrate_task, reading task fields with plain \
             loads, each writing a {}-byte record per event into one BPF ring buffer ({} MiB); \
             no in-kernel filter",
            bpf::RAW_RECORD,
            bpf::RING_BYTES >> 20
        ),
        Some(bpf::Kind::Raw) => format!(
            "eBPF programs on the raw tracepoints sched_waking, sched_wakeup, sched_switch, \
             sched_migrate_task (task fields read with bpf_probe_read_kernel at offsets from the \
             kernel's BTF), each writing a {}-byte record per event into one BPF ring buffer \
             ({} MiB); no in-kernel filter (BTF-typed programs not used: {})",
            bpf::RAW_RECORD,
            bpf::RING_BYTES >> 20,
            typed_refused.as_deref().unwrap_or("unknown")
        ),
        Some(bpf::Kind::Tracepoint) => format!(
            "eBPF programs on sched:sched_waking, sched_wakeup, sched_switch, \
             sched_migrate_task, each copying every record into one BPF ring buffer ({} MiB); \
             no in-kernel filter (raw tracepoints not used: {})",
            bpf::RING_BYTES >> 20,
            raw_refused.as_deref().unwrap_or("unknown")
        ),
        None => {
            let mut m = format!(
                "perf_event_open on every CPU: sched:sched_waking, sched_switch, sched_migrate_task \
             sampled; sched_wakeup {}",
                if s.sample_wakeups {
                    "sampled (a check of each placement)"
                } else {
                    "counted only"
                }
            );
            if let Some((_, what)) = &filters {
                m.push_str("; ");
                m.push_str(what);
            }
            if let Some(why) = &bpf_refused {
                m.push_str(&format!("; BPF not used: {why}"));
            }
            m
        }
    };
    Ok(report::build(report::Inputs {
        mechanism,
        delivery,
        lost_by_cpu: tally.lost.clone(),
        idle_switches: tally
            .idle
            .iter()
            .map(|(cpu, (to, from))| report::IdleSwitches {
                cpu: *cpu,
                to_idle: *to,
                from_idle: *from,
            })
            .collect(),
        conditions,
        target: &target,
        requested_s: s.duration_s,
        interval_s,
        ended,
        lost,
        torn,
        analysis: &analysis,
        before: &before,
        after: &after,
        root: &machine.root,
    }))
}

/// The one line for a user who may not load BPF programs.
pub const BPF_PERMISSION_LINE: &str = "cpulab watch --mechanism bpf needs to load BPF programs: run as root, or grant CAP_BPF and CAP_PERFMON: setcap cap_bpf,cap_perfmon+ep $(which cpulab)";
/// The one line for a user who asked for bpf-tracepoint and may not use it.
pub const BPF_TRACEPOINT_PERMISSION_LINE: &str = "cpulab watch --mechanism bpf-tracepoint needs root (it reads the tracepoints' layouts from tracefs); without root, grant CAP_BPF and CAP_PERFMON and use --mechanism bpf: setcap cap_bpf,cap_perfmon+ep $(which cpulab)";

/// The scheduler tracepoints' record layouts (and ids) from tracefs, mounted for the moment
/// if it is not (root only); a user who may not read them gets `denied_line`.
fn read_formats(root_user: bool, denied_line: &str) -> Result<[format::Format; 4]> {
    let tracefs = targets::Tracefs::open().map_err(|e| {
        if root_user {
            anyhow::anyhow!(e)
        } else {
            bad_input(denied_line)
        }
    })?;
    let fmt = |n: &str| {
        tracefs.format(n).map_err(|e| {
            if root_user {
                anyhow::anyhow!("reading the layout of sched:{n}: {e}")
            } else {
                bad_input(denied_line)
            }
        })
    };
    Ok([
        fmt("sched_waking")?,
        fmt("sched_wakeup")?,
        fmt("sched_switch")?,
        fmt("sched_migrate_task")?,
    ])
}

/// Why the raw-tracepoint programs were not loaded.
enum RawRefusal {
    /// Not allowed to load BPF programs at all.
    Denied(String),
    /// Not usable on this kernel (no BTF, other arguments, refused by the verifier).
    Unusable(String),
}

/// Loads the raw-tracepoint programs for the four tracepoints (in [`EVENT_NAMES`] order):
/// BTF-typed ones where the kernel takes them, else untyped ones (the second value says why
/// the typed ones were not used). Needs the kernel's BTF for the task fields, not tracefs.
fn open_raw(root: &std::path::Path) -> Result<(bpf::Programs, Option<String>), RawRefusal> {
    let possible = bpf::possible_cpus(root).ok_or_else(|| {
        RawRefusal::Unusable("cannot read /sys/devices/system/cpu/possible".into())
    })?;
    let (offsets, typed) = raw_offsets(root).map_err(RawRefusal::Unusable)?;
    let typed_refused = match &typed {
        // Any refusal of the typed programs (a verifier's EACCES included) leaves the untyped
        // ones to try: their refusal is the one that says whether BPF is allowed here.
        Some(ids) => match bpf::Programs::load_raw(&offsets, Some(ids), possible) {
            Ok(p) => return Ok((p, None)),
            Err(e) => format!("they did not load: {e}"),
        },
        None => "the kernel's BTF has no btf_trace typedefs for them".to_string(),
    };
    match bpf::Programs::load_raw(&offsets, None, possible) {
        Ok(p) => Ok((p, Some(typed_refused))),
        Err(e) if is_denied(&e) => Err(RawRefusal::Denied(e.to_string())),
        Err(e) => Err(RawRefusal::Unusable(format!(
            "raw tracepoints did not load: {e}"
        ))),
    }
}

/// Loads tracepoint programs for the four tracepoints, copying each tracefs record.
fn open_tracepoint_bpf(
    formats: &[format::Format; 4],
    root: &std::path::Path,
) -> std::io::Result<bpf::Programs> {
    let possible = bpf::possible_cpus(root)
        .ok_or_else(|| std::io::Error::other("cannot read /sys/devices/system/cpu/possible"))?;
    // EVENT_NAMES order: waking, switch, migrate, wakeup.
    let events: Vec<(u64, usize)> = [0, 2, 3, 1]
        .iter()
        .map(|&i| (formats[i].id, bpf::record_size(&formats[i])))
        .collect();
    bpf::Programs::load(&events, possible)
}

/// The task field offsets from the kernel's BTF, once its scheduler tracepoints are checked to
/// pass the arguments the raw-tracepoint programs read (see [`bpf::raw_program`]); with them,
/// the ids of the tracepoints' `btf_trace_<name>` typedefs (in [`EVENT_NAMES`] order) where the
/// BTF has all four, for BTF-typed programs.
fn raw_offsets(root: &std::path::Path) -> Result<(btf::TaskOffsets, Option<[u32; 4]>), String> {
    let path = root.join("sys/kernel/btf/vmlinux");
    // Mapped, not parsed whole: a handful of look-ups need no cache of every kernel type (which
    // took 22 MB and 0.16 CPU-s here).
    let kernel = btf_rs::Btf::from_file_with_backend(&path, btf_rs::Backend::Mmap)
        .map_err(|e| format!("no kernel BTF ({}: {e})", path.display()))?;
    // (tracepoint, arguments, which of them are task pointers)
    let expected: [(&str, usize, &[usize]); 4] = [
        ("sched_waking", 1, &[0]),
        ("sched_switch", 4, &[1, 2]),
        ("sched_migrate_task", 2, &[0]),
        ("sched_wakeup", 1, &[0]),
    ];
    for (name, n, tasks) in expected {
        let got = btf::tracepoint_args(&kernel, name)?;
        if got != n
            || !tasks
                .iter()
                .all(|&i| btf::tracepoint_arg_is_pointer(&kernel, name, i))
        {
            return Err(format!(
                "{name} passes {got} arguments here, not the {n} the raw-tracepoint program reads"
            ));
        }
    }
    let offsets = btf::task_offsets(&kernel)?;
    let ids: Option<Vec<u32>> = EVENT_NAMES
        .iter()
        .map(|n| btf::tracepoint_typedef_id(&kernel, n))
        .collect();
    Ok((offsets, ids.and_then(|v| v.try_into().ok())))
}

/// Opens the perf tracepoint events, with in-kernel filters where the target allows them.
#[allow(clippy::type_complexity)]
fn open_perf(
    machine: &Machine,
    s: &WatchSettings,
    decoder: &Decoder,
    cpus: &[u32],
) -> Result<(
    ring::Tracer,
    Option<([String; 4], String)>,
    Vec<ring::EventSpec>,
)> {
    // 4 MiB per CPU, but at most ~64 MiB in all on large machines (a power of two per ring).
    let budget = (16384 / cpus.len().max(1)).max(16);
    let pages = s.ring_pages.min(1 << budget.ilog2());
    let mut filters = if s.kernel_filter && s.command.is_none() {
        kernel_filters(&s.target, &machine.root)
    } else {
        None
    };
    let ids = [
        decoder.ids[0],
        decoder.ids[2],
        decoder.ids[3],
        decoder.ids[1],
    ];
    let spec_list = |filters: &Option<([String; 4], String)>| -> Vec<ring::EventSpec> {
        (0..4)
            .map(|i| ring::EventSpec {
                id: ids[i],
                sampled: i < 3 || s.sample_wakeups,
                filter: filters.as_ref().map(|(f, _)| f[i].clone()),
            })
            .collect()
    };
    let mut specs = spec_list(&filters);
    let mut opened = ring::Tracer::open(&specs, cpus, pages);
    if let Err(e) = &opened
        && filters.is_some()
        && !is_denied(e)
    {
        // A kernel that refuses the filter (an older filter grammar) is watched unfiltered.
        filters = None;
        specs = spec_list(&filters);
        opened = ring::Tracer::open(&specs, cpus, pages);
    }
    let tracer = opened.map_err(|e| {
        if is_denied(&e) {
            bad_input(if s.mechanism == Mechanism::Perf {
                PERF_PERMISSION_LINE
            } else {
                PERMISSION_LINE
            })
        } else {
            anyhow::anyhow!("perf_event_open of the scheduler tracepoints: {e}")
        }
    })?;
    Ok((tracer, filters, specs))
}

/// Where the records come from: perf's per-CPU rings, or the BPF programs' ring; with the
/// decoder of tracefs record layouts where the records are those (raw-tracepoint programs
/// write their own fixed records, and need no tracefs).
enum Source {
    Perf(ring::Tracer, Decoder),
    Bpf(bpf::Programs, Option<Decoder>),
}

impl Source {
    fn enable(&self) -> std::io::Result<()> {
        match self {
            Source::Perf(t, _) => t.enable(),
            Source::Bpf(p, _) => p.enable(),
        }
    }

    fn disable(&mut self) {
        match self {
            Source::Perf(t, _) => t.disable(),
            Source::Bpf(p, _) => p.disable(),
        }
    }

    /// Decodes every record read now into `out`; returns the bytes that did not form a record.
    fn drain(&mut self, out: &mut Vec<Timed>, tally: &mut Tally) -> u64 {
        match self {
            Source::Perf(t, d) => t.drain(|cpu, r| collect(d, cpu, r, out, tally)) as u64,
            Source::Bpf(p, d) => {
                p.drain(|r| {
                    let event = match d {
                        None => bpf::decode_raw(&r),
                        Some(d) => d.decode_slot(r.slot, r.tid, r.cpu, r.raw, false),
                    };
                    if let Some(event) = event {
                        tally.record(r.cpu, r.time_ns, event, out);
                    }
                });
                0
            }
        }
    }

    fn last_fill(&self) -> f64 {
        match self {
            Source::Perf(t, _) => t.last_fill,
            Source::Bpf(p, _) => p.last_fill,
        }
    }

    /// Per CPU, how many times each event fired (in [`EVENT_NAMES`] order); the BPF ring's
    /// drops go into the tally's losses.
    fn counts(&self, cpus: &[u32], tally: &mut Tally) -> Vec<(u32, Vec<Option<u64>>)> {
        match self {
            Source::Perf(t, _) => t.counts(),
            Source::Bpf(p, _) => match p.counts() {
                Ok(per_cpu) => cpus
                    .iter()
                    .map(|&cpu| {
                        let c = per_cpu.get(cpu as usize).copied().unwrap_or_default();
                        if c[bpf::DROPPED_SLOT as usize] > 0 {
                            *tally.lost.entry(cpu).or_default() += c[bpf::DROPPED_SLOT as usize];
                        }
                        (cpu, c[..4].iter().map(|v| Some(*v)).collect())
                    })
                    .collect(),
                Err(_) => cpus.iter().map(|&c| (c, vec![None; 4])).collect(),
            },
        }
    }
}

/// Records delivered, per ring CPU and event (in [`EVENT_NAMES`] order), and losses the
/// kernel reported per ring.
#[derive(Debug, Default)]
pub struct Tally {
    pub delivered: std::collections::BTreeMap<u32, [u64; 4]>,
    /// Per CPU: switches delivered into the idle task and out of it (they alternate, so the two
    /// differ by at most one when every switch is delivered).
    pub idle: std::collections::BTreeMap<u32, (u64, u64)>,
    pub lost: std::collections::BTreeMap<u32, u64>,
}

impl Tally {
    /// Counts one decoded event delivered from `cpu` and queues it for the analysis.
    fn record(&mut self, cpu: u32, time_ns: u64, event: events::Event, out: &mut Vec<Timed>) {
        let i = match event {
            events::Event::Waking { .. } => 0,
            events::Event::Switch { .. } => 1,
            events::Event::Migrate { .. } => 2,
            events::Event::Wakeup { .. } => 3,
        };
        self.delivered.entry(cpu).or_default()[i] += 1;
        if let events::Event::Switch {
            prev_tid, next_tid, ..
        } = event
        {
            let e = self.idle.entry(cpu).or_default();
            e.0 += u64::from(next_tid == 0);
            e.1 += u64::from(prev_tid == 0);
        }
        out.push(Timed { time_ns, event });
    }
}

fn collect(
    d: &Decoder,
    ring_cpu: u32,
    r: ring::RawRecord<'_>,
    out: &mut Vec<Timed>,
    tally: &mut Tally,
) {
    match r {
        ring::RawRecord::Sample {
            tid,
            time_ns,
            cpu,
            raw,
            ..
        } => {
            if let Some(event) = d.decode(tid, cpu, raw) {
                tally.record(ring_cpu, time_ns, event, out);
            }
        }
        ring::RawRecord::Lost(n) => *tally.lost.entry(ring_cpu).or_default() += n,
    }
}

/// `cpulab watch` as an experiment, so `report` and `compare` handle its results.
pub struct Watch;

impl Experiment for Watch {
    type Settings = WatchSettings;
    type Report = WatchReport;
    const KIND: Kind = Kind::Experiment("watch");

    fn run(
        machine: &Machine,
        settings: &WatchSettings,
        progress: &Progress,
    ) -> Result<WatchReport> {
        run(machine, settings, progress)
    }

    fn conditions(report: &WatchReport) -> &Conditions {
        &report.conditions
    }

    fn figures(report: &WatchReport) -> Vec<Figure> {
        report::figures(report)
    }

    fn render_text(report: &WatchReport, style: &Style) -> String {
        render::text(report, style)
    }

    fn render_html(report: &WatchReport) -> String {
        render::html(report)
    }
}
