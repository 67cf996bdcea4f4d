//! `cpulab watch`: what placement costs a running application, observed without restarting it.
//!
//! Every other experiment starts its own processes; a DBA with a production PostgreSQL cannot.
//! A watch attaches to the kernel's scheduler tracepoints for a window ([`ring`]), decodes the
//! records with layouts read from the running kernel ([`crate::bpf::format`], [`events`]), follows each
//! wakeup of the watched tasks from waker to switch-in ([`analyze`]), and reports per process
//! how its wakeups were placed (same CPU as the waker, or which class away) and what each class
//! cost in wakeup-to-run latency ([`report`], [`render`]). The VM mechanism around the window
//! (halts, rescheduling and call-function IPIs, steal, guest halt polling) comes from the same
//! /proc and /sys counters the other experiments read, sampled before and after.
//!
//! It only observes: where tracefs is not mounted, it is mounted to read the tracepoint layouts
//! in a private mount namespace of one thread, which no other process sees and which ends with
//! that thread ([`crate::bpf::tracefs`]), the perf events are closed on every exit path (they
//! are descriptors), and the child of `watch -- COMMAND` ends with cpulab.

pub mod analyze;
pub mod bpf;
pub use crate::bpf::btf;
pub mod command;
pub mod events;
pub mod fake;
pub mod follow;
pub mod groups;
pub mod held;
pub mod ledger;
pub mod mechanism;
pub mod open;
pub mod perf_source;
pub mod rank;
pub mod render;
pub mod report;
pub mod ring;
pub mod session;
pub mod slots;
pub mod source;
pub mod targets;

use crate::experiment::{Experiment, Figure, LoadWatch, Progress};
use crate::machine::{Conditions, Machine};
use crate::output::Style;
use crate::report::envelope::Kind;
use anyhow::Result;
pub use mechanism::Tally;
pub use open::open_source;
pub use report::WatchReport;
pub use session::Session;
use std::path::PathBuf;
use std::time::Duration;
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

pub use crate::wakeups::Mechanism;

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

/// The one line for a user who may not load BPF programs.
pub const BPF_PERMISSION_LINE: &str = "cpulab watch --mechanism bpf needs to load BPF programs: run as root, or grant CAP_BPF and CAP_PERFMON: setcap cap_bpf,cap_perfmon+ep $(which cpulab)";
/// The one line for a user who asked for bpf-tracepoint and may not use it.
pub const BPF_TRACEPOINT_PERMISSION_LINE: &str = "cpulab watch --mechanism bpf-tracepoint needs root (it reads the tracepoints' layouts from tracefs); without root, grant CAP_BPF and CAP_PERFMON and use --mechanism bpf: setcap cap_bpf,cap_perfmon+ep $(which cpulab)";

/// Watches for the settings' window (or until Ctrl-C or SIGTERM, or the target is gone): one
/// [`Session`] opened, enabled, read every poll interval, and closed into its report.
pub fn measure(
    machine: &Machine,
    s: &WatchSettings,
    conditions: Conditions,
    progress: &Progress,
) -> Result<WatchReport> {
    let mut session = Session::open(machine, s, progress)?;
    session.enable_under(conditions, progress)?;
    while session.read()?.is_none() {
        std::thread::sleep(session.poll_interval());
    }
    session.close()
}

/// `cpulab watch` as an experiment, so `report` and `compare` handle its results.
pub struct Watch;

impl Experiment for Watch {
    type Settings = WatchSettings;
    type Report = WatchReport;
    const KIND: Kind = Kind::Experiment("watch");

    /// None: the load a watch sees is what it observes, not something to check for first.
    fn load_watch(_: &Machine, _: &WatchSettings) -> Result<Option<LoadWatch>> {
        Ok(None)
    }

    fn measure(
        machine: &Machine,
        settings: &WatchSettings,
        conditions: Conditions,
        progress: &Progress,
    ) -> Result<WatchReport> {
        measure(machine, settings, conditions, progress)
    }

    fn conditions(report: &WatchReport) -> &Conditions {
        &report.conditions
    }

    fn figures(report: &WatchReport) -> Vec<Figure> {
        report::figures(report)
    }

    fn read_back(report: WatchReport) -> WatchReport {
        report::counts_only_read_back(report)
    }

    fn render_text(report: &WatchReport, style: &Style) -> String {
        render::text(report, style)
    }

    fn render_html(report: &WatchReport) -> String {
        render::html(report)
    }
}
