//! Counters around the measured window, per endpoint and per CPU in use.
//!
//! Snapshots are taken right before the first timed batch and right after the last, never
//! around the warm-up, and every rate is divided by the interval between the snapshots and by
//! the round trips inside it. Per round trip is where the mechanism shows: a blocking same-CPU
//! round trip costs one voluntary context switch per endpoint; a cross-vCPU one adds about one
//! idle entry (a halt) and one IPI per round trip on a guest that halts at once.

use crate::counters::perf::PerfCounters;
use crate::counters::{SystemDelta, SystemSnapshot, TaskDelta, TaskSnapshot};
use crate::cpulist::CpuSet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A kernel task whose counters are read: a thread (`tid`) of `pid`, or a whole process.
#[derive(Clone, Copy, Debug)]
pub struct TaskRef {
    pub pid: i32,
    pub tid: Option<i32>,
}

impl TaskRef {
    /// The id perf and the scheduler know the task by.
    pub fn id(&self) -> i32 {
        self.tid.unwrap_or(self.pid)
    }
}

/// What one endpoint did during the measured window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EndpointCounters {
    /// Kernel task id the counters were read from (a thread id, or the child's pid).
    pub task_id: i32,
    /// Context switches, migrations and CPU time from /proc; `None` when unreadable.
    pub task: Option<TaskDelta>,
    /// Why `task` is missing.
    pub task_unavailable: Option<String>,
    /// Voluntary context switches per round trip (a blocking wait is one).
    pub voluntary_switches_per_rt: Option<f64>,
    /// Involuntary context switches (preemptions) per round trip.
    pub involuntary_switches_per_rt: Option<f64>,
    /// perf counters by `perf stat` name (software, and hardware where available); empty
    /// unless perf counters were asked for (`--perf`).
    pub perf: BTreeMap<String, u64>,
    /// The same perf counts per round trip.
    pub perf_per_rt: BTreeMap<String, f64>,
    /// perf events that could not be opened, with the reason.
    pub perf_unavailable: BTreeMap<String, String>,
}

impl EndpointCounters {
    /// Voluntary plus involuntary switches per round trip.
    pub fn switches_per_rt(&self) -> Option<f64> {
        Some(self.voluntary_switches_per_rt? + self.involuntary_switches_per_rt?)
    }
}

/// Counters of one run over its measured window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunCounters {
    /// Seconds between the snapshots around the measured round trips: the divisor of every
    /// per-second figure.
    pub window_s: f64,
    /// Round trips completed inside the window: the divisor of every per-round-trip figure.
    pub round_trips: u64,
    /// The side that sends pings and times round trips.
    pub initiator: EndpointCounters,
    /// The side that answers.
    pub responder: EndpointCounters,
    /// Per-CPU time shares, interrupts by type and idle entries on the CPUs in use.
    pub system: SystemDelta,
    /// Idle entries (halts) per round trip, summed over the CPUs in use.
    pub idle_entries_per_rt: Option<f64>,
    /// Rescheduling plus function-call IPIs (RES + CAL) per round trip, over the CPUs in use.
    pub ipis_per_rt: Option<f64>,
    /// Idle entries and each key interrupt type (`irq_RES`, `irq_CAL`, ...) per round trip.
    pub per_rt: BTreeMap<String, f64>,
    /// The same counts per second of the window.
    pub per_s: BTreeMap<String, f64>,
}

/// Open counters for one run: perf events on both endpoints, the CPUs to watch.
pub struct Observer {
    root: PathBuf,
    cpus: CpuSet,
    tasks: [TaskRef; 2],
    perf: [Option<PerfCounters>; 2],
}

/// Snapshots taken at the start of the window.
pub struct Window {
    system: SystemSnapshot,
    tasks: [Result<TaskSnapshot, String>; 2],
    perf: [BTreeMap<String, u64>; 2],
}

impl Observer {
    /// `tasks` are the initiator and the responder; `cpus` the CPUs whose counters matter;
    /// `perf` opens perf events on both tasks (they add work to every context switch).
    pub fn open(root: &Path, cpus: CpuSet, tasks: [TaskRef; 2], perf: bool) -> Self {
        let perf = tasks.map(|t| perf.then(|| PerfCounters::open(t.id(), false)));
        Self {
            root: root.to_path_buf(),
            cpus,
            tasks,
            perf,
        }
    }

    fn perf_reads(&self) -> [BTreeMap<String, u64>; 2] {
        [0, 1].map(|i| self.perf[i].as_ref().map(|p| p.read()).unwrap_or_default())
    }

    fn task_snapshots(&self) -> [Result<TaskSnapshot, String>; 2] {
        self.tasks
            .map(|t| TaskSnapshot::take(&self.root, t.pid, t.tid))
    }

    /// Snapshots at the start of the window (machine first, the tasks last).
    pub fn begin(&self) -> Window {
        let system = SystemSnapshot::take(&self.root);
        let tasks = self.task_snapshots();
        let perf = self.perf_reads();
        Window {
            system,
            tasks,
            perf,
        }
    }

    /// Snapshots at the end (tasks first, the machine last) and the deltas.
    pub fn end(&self, w: Window, round_trips: u64) -> RunCounters {
        let perf_after = self.perf_reads();
        let tasks_after = self.task_snapshots();
        let system = w
            .system
            .delta(&SystemSnapshot::take(&self.root), &self.cpus);
        let [initiator, responder] = [0, 1].map(|i| {
            endpoint(
                self.tasks[i].id(),
                &w.tasks[i],
                &tasks_after[i],
                &w.perf[i],
                &perf_after[i],
                self.perf[i].as_ref(),
                round_trips,
            )
        });
        let per_rt = system.per_op(round_trips);
        let per_s = per_rt
            .iter()
            .filter(|_| system.interval_s > 0.0)
            .map(|(k, v)| (k.clone(), v * round_trips as f64 / system.interval_s))
            .collect();
        let ipis_per_rt = (system.interrupts.contains_key("RES")
            || system.interrupts.contains_key("CAL"))
        .then(|| per_rt.get("irq_RES").unwrap_or(&0.0) + per_rt.get("irq_CAL").unwrap_or(&0.0))
        .filter(|_| round_trips > 0);
        RunCounters {
            window_s: system.interval_s,
            round_trips,
            initiator,
            responder,
            idle_entries_per_rt: per_rt.get("idle_entries").copied(),
            ipis_per_rt,
            per_rt,
            per_s,
            system,
        }
    }
}

fn endpoint(
    task_id: i32,
    before: &Result<TaskSnapshot, String>,
    after: &Result<TaskSnapshot, String>,
    perf_before: &BTreeMap<String, u64>,
    perf_after: &BTreeMap<String, u64>,
    perf: Option<&PerfCounters>,
    round_trips: u64,
) -> EndpointCounters {
    let per_rt = |v: u64| (round_trips > 0).then(|| v as f64 / round_trips as f64);
    let (task, task_unavailable) = match (before, after) {
        (Ok(b), Ok(a)) => (Some(b.delta(a)), None),
        (Err(e), _) | (_, Err(e)) => (None, Some(e.clone())),
    };
    let perf_delta: BTreeMap<String, u64> = perf_after
        .iter()
        .map(|(k, a)| {
            let b = perf_before.get(k).copied().unwrap_or(0);
            (k.clone(), a.saturating_sub(b))
        })
        .collect();
    EndpointCounters {
        task_id,
        voluntary_switches_per_rt: task.and_then(|t| per_rt(t.voluntary_switches)),
        involuntary_switches_per_rt: task.and_then(|t| per_rt(t.involuntary_switches)),
        task,
        task_unavailable,
        perf_per_rt: perf_delta
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), per_rt(*v)?)))
            .collect(),
        perf: perf_delta,
        perf_unavailable: perf.map(|p| p.unavailable.clone()).unwrap_or_default(),
    }
}
