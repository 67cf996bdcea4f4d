//! Counters of a whole process tree: the server with every process it forked, or the client.
//!
//! Two sources, because neither alone is exact everywhere:
//! - **perf with inherit**: a software counter opened on a task also counts every task it creates
//!   afterwards, and a child's count is folded into the parent's when it exits. Opened on every
//!   task of the server tree before the client starts, it counts the PostgreSQL backend that
//!   serves the client (forked when the client connects, gone by the time the run ends) exactly.
//!   It needs root or `perf_event_paranoid` <= 1.
//! - **/proc sampling**: every task's `status`, `stat` and `sched` (voluntary and involuntary
//!   switches, CPU time, migrations, last CPU), read at the start, every tick of the wait loop and
//!   at the end. Tasks born during the run start from zero (the kernel zeroes these at fork); a
//!   task that exits between two samples loses what it did after the last one, so for short-lived
//!   processes these figures are a lower bound. The client's switches and CPU time come instead
//!   from `wait4`'s resource usage, which is exact.
//!
//! The summary accessors prefer perf where it was available and say which source they used.

use crate::counters::{TaskSnapshot, perf::PerfCounters};
use crate::cpulist::CpuSet;
use crate::pair::proctable;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What to watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A process and all its descendants, with all their threads.
    Tree(i32),
    /// One thread (a server or client built into cpulab).
    Task { pid: i32, tid: i32 },
}

/// Beyond this many tasks perf counters are not opened (three descriptors each).
const PERF_MAX_TASKS: usize = 256;

/// Perf counts summed over the tree, including tasks that exited during the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PerfTreeCounts {
    /// Context switches of every task of the tree (perf `context-switches`).
    pub context_switches: u64,
    /// Moves between CPUs (perf `cpu-migrations`).
    pub cpu_migrations: u64,
    /// CPU time from the `task-clock` event, in seconds.
    pub task_clock_s: f64,
}

/// What a process tree did during one run. Every count is a delta over the run, never negative.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TreeCounters {
    /// Processes seen in the tree, including ones that started during the run.
    pub processes: usize,
    /// Threads seen in the tree.
    pub threads: usize,
    /// Switches because a task blocked (waiting for the other end, for I/O).
    pub voluntary_switches: u64,
    /// Switches because a task was preempted.
    pub involuntary_switches: u64,
    /// Moves between CPUs; `None` without `/proc/<pid>/sched`.
    pub migrations: Option<u64>,
    /// CPU time in user mode, in seconds (clock-tick resolution).
    pub user_s: f64,
    /// CPU time in the kernel, in seconds (clock-tick resolution).
    pub system_s: f64,
    /// CPUs the tree's tasks were seen on.
    pub cpus_seen: CpuSet,
    /// Where the figures above come from: `proc-sampled` (a lower bound for tasks that exited
    /// during the run) or `rusage` (exact, the client's own resource usage).
    pub source: String,
    /// Exact counts from perf with inherit, when perf events could be opened.
    pub perf: Option<PerfTreeCounts>,
    /// Why `perf` is missing.
    pub perf_unavailable: Option<String>,
}

impl TreeCounters {
    /// Context switches: perf's exact count when available, else voluntary + involuntary.
    pub fn context_switches(&self) -> u64 {
        self.perf
            .as_ref()
            .map(|p| p.context_switches)
            .unwrap_or(self.voluntary_switches + self.involuntary_switches)
    }

    pub fn migrations_best(&self) -> Option<u64> {
        self.perf
            .as_ref()
            .map(|p| p.cpu_migrations)
            .or(self.migrations)
    }

    /// CPU time in seconds: perf's task clock when available, else user + system.
    pub fn cpu_s(&self) -> f64 {
        self.perf
            .as_ref()
            .map(|p| p.task_clock_s)
            .unwrap_or(self.user_s + self.system_s)
    }
}

#[derive(Clone, Copy, Debug)]
struct Track {
    first: TaskSnapshot,
    last: TaskSnapshot,
}

/// Samples a tree during one run.
pub struct TreeWatch {
    target: Target,
    root: PathBuf,
    from_birth: bool,
    tasks: BTreeMap<(i32, u64), Track>,
    pids: BTreeSet<i32>,
    cpus: BTreeSet<u32>,
    perf: Vec<PerfCounters>,
    perf_unavailable: Option<String>,
    /// Tasks found by the last full scan, re-read at every sample.
    known: Vec<(i32, i32)>,
    next_scan: Instant,
}

/// How often the whole process table is scanned for new members of the tree. Between scans only
/// the known tasks are re-read (a few files each), which keeps sampling cheap; a process born
/// between scans loses nothing, since it is counted from zero when found.
const RESCAN: Duration = Duration::from_secs(1);
/// The first rescan comes sooner: the process serving the client (a PostgreSQL backend) is
/// forked when the client connects, just after the start.
const FIRST_RESCAN: Duration = Duration::from_millis(250);

impl TreeWatch {
    /// Takes the first sample and opens perf counters. With `from_birth` every task starts from
    /// zero (a client just spawned: all it did belongs to the run).
    pub fn start(root: &Path, target: Target, from_birth: bool, use_perf: bool) -> Self {
        let mut w = Self {
            target,
            root: root.to_path_buf(),
            from_birth,
            tasks: BTreeMap::new(),
            pids: BTreeSet::new(),
            cpus: BTreeSet::new(),
            perf: Vec::new(),
            perf_unavailable: None,
            known: Vec::new(),
            next_scan: Instant::now() + FIRST_RESCAN,
        };
        let tasks = w.list_tasks();
        if !use_perf {
            w.perf_unavailable = Some("not requested".to_string());
        } else if tasks.len() > PERF_MAX_TASKS {
            w.perf_unavailable = Some(format!("{} tasks: too many to count each", tasks.len()));
        } else {
            for &(_, tid) in &tasks {
                let c = PerfCounters::open(tid, true);
                let missing = c.unavailable.get("context-switches").cloned();
                if let Some(why) = missing {
                    w.perf_unavailable = Some(why);
                    w.perf.clear();
                    break;
                }
                w.perf.push(c);
            }
        }
        w.known = w.sample_tasks(&tasks, true);
        w
    }

    fn list_tasks(&self) -> Vec<(i32, i32)> {
        match self.target {
            Target::Task { pid, tid } => vec![(pid, tid)],
            Target::Tree(pid) => {
                let mut pids = vec![pid];
                pids.extend(proctable::descendants(&self.root, pid));
                pids.iter()
                    .flat_map(|&p| {
                        let dir = self.root.join(format!("proc/{p}/task"));
                        std::fs::read_dir(dir)
                            .into_iter()
                            .flatten()
                            .flatten()
                            .filter_map(move |e| Some((p, e.file_name().to_str()?.parse().ok()?)))
                    })
                    .collect()
            }
        }
    }

    /// Reads `tasks`; returns those still alive.
    fn sample_tasks(&mut self, tasks: &[(i32, i32)], first: bool) -> Vec<(i32, i32)> {
        let mut alive = Vec::with_capacity(tasks.len());
        for &(pid, tid) in tasks {
            let Some((snap, start)) = read_task(&self.root, pid, tid) else {
                continue; // exited since it was listed
            };
            alive.push((pid, tid));
            self.pids.insert(pid);
            self.cpus.insert(snap.last_cpu);
            let base = if first && !self.from_birth {
                snap
            } else {
                // Born during the run: the kernel started every counter at zero.
                TaskSnapshot {
                    migrations: snap.migrations.map(|_| 0),
                    ..TaskSnapshot::default()
                }
            };
            self.tasks
                .entry((tid, start))
                .and_modify(|t| t.last = snap)
                .or_insert(Track {
                    first: base,
                    last: snap,
                });
        }
        alive
    }

    /// Takes one more sample (call it regularly while the run goes on, and once at the end):
    /// re-reads the known tasks, and scans for new ones once a second.
    pub fn sample(&mut self) {
        self.sample_scan(false);
    }

    fn sample_scan(&mut self, full: bool) {
        if full || Instant::now() >= self.next_scan {
            self.known = self.list_tasks();
            self.next_scan = Instant::now() + RESCAN;
        }
        let known = std::mem::take(&mut self.known);
        let alive = self.sample_tasks(&known, false);
        self.known = alive;
    }

    /// The totals over the run.
    pub fn finish(mut self) -> TreeCounters {
        self.sample_scan(true);
        let mut c = TreeCounters {
            processes: self.pids.len(),
            threads: self.tasks.len(),
            cpus_seen: self.cpus.iter().copied().collect(),
            source: "proc-sampled".to_string(),
            migrations: Some(0),
            ..Default::default()
        };
        for t in self.tasks.values() {
            let d = t.first.delta(&t.last);
            c.voluntary_switches += d.voluntary_switches;
            c.involuntary_switches += d.involuntary_switches;
            c.migrations = c.migrations.zip(d.migrations).map(|(a, b)| a + b);
            c.user_s += d.user_s;
            c.system_s += d.system_s;
        }
        if self.perf.is_empty() {
            c.perf_unavailable = self.perf_unavailable.take();
        } else {
            let mut p = PerfTreeCounts::default();
            for counters in &self.perf {
                let r = counters.read();
                p.context_switches += r.get("context-switches").copied().unwrap_or(0);
                p.cpu_migrations += r.get("cpu-migrations").copied().unwrap_or(0);
                p.task_clock_s += r.get("task-clock").copied().unwrap_or(0) as f64 / 1e9;
            }
            c.perf = Some(p);
        }
        c
    }
}

/// One task's counters and its start time (to tell a reused thread id from the original).
fn read_task(root: &Path, pid: i32, tid: i32) -> Option<(TaskSnapshot, u64)> {
    let snap = TaskSnapshot::take(root, pid, Some(tid)).ok()?;
    Some((snap, snap.start_ticks))
}

/// Counters of a client from its `wait4` resource usage (exact, all threads and reaped children),
/// keeping what the samples found for the rest.
pub fn with_rusage(mut c: TreeCounters, ru: &libc::rusage) -> TreeCounters {
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    c.voluntary_switches = ru.ru_nvcsw.max(0) as u64;
    c.involuntary_switches = ru.ru_nivcsw.max(0) as u64;
    c.user_s = tv(ru.ru_utime).max(0.0);
    c.system_s = tv(ru.ru_stime).max(0.0);
    c.source = "rusage".to_string();
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_thread_counts_forward() {
        let root = Path::new("/");
        let pid = std::process::id() as i32;
        let tid = crate::affinity::gettid();
        let w = TreeWatch::start(root, Target::Task { pid, tid }, false, true);
        for _ in 0..5 {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let c = w.finish();
        assert_eq!(c.threads, 1);
        assert!(c.voluntary_switches >= 1, "five sleeps block at least once");
        if let Some(p) = &c.perf {
            assert!(p.context_switches >= 1);
        }
    }

    #[test]
    fn tree_includes_children_born_during_the_run() {
        let root = Path::new("/");
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "sleep 0.3; for i in 1 2 3; do sleep 0.01; done"])
            .spawn()
            .unwrap();
        let mut w = TreeWatch::start(root, Target::Tree(sh.id() as i32), false, true);
        for _ in 0..10 {
            std::thread::sleep(std::time::Duration::from_millis(20));
            w.sample();
        }
        let c = w.finish();
        sh.wait().unwrap();
        assert!(c.processes >= 2, "the shell and its first sleep: {c:?}");
    }
}
