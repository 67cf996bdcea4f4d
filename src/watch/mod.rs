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
pub const PERMISSION_LINE: &str = "cpulab watch needs to read scheduler tracepoints: run as root, or grant CAP_PERFMON: setcap cap_perfmon+ep $(which cpulab), or sysctl kernel.perf_event_paranoid=-1";

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
}

impl Default for WatchSettings {
    fn default() -> Self {
        Self {
            target: Target::All,
            command: None,
            duration_s: 10.0,
            ring_pages: 1024,
            dump_records: None,
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
const POLL: Duration = Duration::from_millis(10);

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
    let tracefs = targets::Tracefs::open().map_err(|e| {
        if root_user {
            anyhow::anyhow!(e)
        } else {
            bad_input(PERMISSION_LINE)
        }
    })?;
    let fmt = |n: &str| {
        tracefs.format(n).map_err(|e| {
            if root_user {
                anyhow::anyhow!("reading the layout of sched:{n}: {e}")
            } else {
                bad_input(PERMISSION_LINE)
            }
        })
    };
    let decoder = Decoder::new(
        &fmt("sched_waking")?,
        &fmt("sched_wakeup")?,
        &fmt("sched_switch")?,
        &fmt("sched_migrate_task")?,
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    drop(tracefs);

    let cpus = machine.topology.online.to_vec();
    // 4 MiB per CPU, but at most ~64 MiB in all on large machines (a power of two per ring).
    let budget = (16384 / cpus.len().max(1)).max(16);
    let pages = s.ring_pages.min(1 << budget.ilog2());
    let mut tracer = ring::Tracer::open(&decoder.ids, &cpus, pages).map_err(|e| {
        if is_denied(&e) {
            bad_input(PERMISSION_LINE)
        } else {
            anyhow::anyhow!("perf_event_open of the scheduler tracepoints: {e}")
        }
    })?;

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let _ = signal_hook::flag::register(sig, stop.clone());
    }
    let mut conditions = Conditions::now(machine);
    let before = crate::counters::SystemSnapshot::take(&machine.root);
    let started = Instant::now();
    tracer.enable()?;
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
    let (mut lost, mut torn) = (0u64, 0u64);
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
        let cutoff = if finished {
            u64::MAX
        } else {
            monotonic_ns().saturating_sub(SETTLE_NS)
        };
        if started.elapsed() > Duration::from_millis(300)
            && let Some(path) = dump.take()
        {
            let bytes = tracer.drain_bytes();
            std::fs::write(&path, whole_records(&bytes, 32 * 1024))
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            ring::parse_records(&bytes, |r| collect(&decoder, r, &mut pending, &mut lost));
        }
        torn += tracer.drain(|r| collect(&decoder, r, &mut pending, &mut lost)) as u64;
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
        std::thread::sleep(POLL.min(deadline.saturating_duration_since(Instant::now())));
    }
    let interval_s = started.elapsed().as_secs_f64();
    drop(tracer);
    drop(child);
    let after = crate::counters::SystemSnapshot::take(&machine.root);
    if lost > 0 {
        conditions.noisy = true;
        conditions.notes.push(format!(
            "{lost} scheduler events were lost (the reader fell behind): counts are lower bounds"
        ));
    }
    Ok(report::build(report::Inputs {
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

fn collect(d: &Decoder, r: ring::RawRecord<'_>, out: &mut Vec<Timed>, lost: &mut u64) {
    match r {
        ring::RawRecord::Sample {
            tid,
            time_ns,
            cpu,
            raw,
            ..
        } => {
            if let Some(event) = d.decode(tid, cpu, raw) {
                out.push(Timed { time_ns, event });
            }
        }
        ring::RawRecord::Lost(n) => *lost += n,
    }
}

/// `cpulab watch` as an experiment, so `report` and `compare` handle its results.
pub struct Watch;

impl Experiment for Watch {
    type Settings = WatchSettings;
    type Report = WatchReport;
    const KIND: Kind = Kind::Watch;

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
