//! Counters sampled around every run: snapshot before, snapshot after, divide by the interval
//! actually measured.
//!
//! A latency figure says *how much*; the counters say *why*. A cross-vCPU round trip that costs
//! one idle entry and one rescheduling or function-call IPI per side is paying for a halt exit and
//! an interrupt through the hypervisor; one that costs none is paying for cache distance. Each
//! reader degrades on its own: a file that cannot be read leaves its part empty and says why in
//! `unavailable`, and the rest is still reported. Deltas saturate at zero, so a counter reset or
//! a CPU going offline mid-run can never produce a negative count.

pub mod parse;
pub mod perf;

pub use parse::{CpuTimes, IdleStateCount};

use crate::cpulist::CpuSet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// Counters of the whole machine at one instant.
#[derive(Clone, Debug)]
pub struct SystemSnapshot {
    pub at: Instant,
    pub cpu_times: Option<BTreeMap<u32, CpuTimes>>,
    pub interrupts: Option<BTreeMap<String, BTreeMap<u32, u64>>>,
    /// cpuidle state counters per CPU.
    pub idle: Option<BTreeMap<u32, Vec<IdleStateCount>>>,
    pub unavailable: Vec<String>,
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {}", path.display(), e))
}

/// Reads cpuidle state counters for every CPU under `root`.
pub fn read_idle_counts(root: &Path) -> Result<BTreeMap<u32, Vec<IdleStateCount>>, String> {
    let cpu_dir = root.join("sys/devices/system/cpu");
    let entries = std::fs::read_dir(&cpu_dir).map_err(|e| format!("{}: {e}", cpu_dir.display()))?;
    let mut out = BTreeMap::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(id) = name.strip_prefix("cpu").and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(states) = std::fs::read_dir(e.path().join("cpuidle")) else {
            continue;
        };
        let mut dirs: Vec<_> = states
            .flatten()
            .map(|s| s.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("state"))
            })
            .collect();
        dirs.sort();
        // A count that cannot be read makes the whole reading unavailable, with the file
        // named: counted as 0 it would read as a CPU that never idled, and a partial sum would
        // undercount.
        let number = |p: &Path| -> Result<u64, String> {
            let text = read(p)?;
            text.trim()
                .parse()
                .map_err(|_| format!("{}: not a count ({:?})", p.display(), text.trim()))
        };
        let v = dirs
            .iter()
            .map(|d| {
                Ok(IdleStateCount {
                    name: read(&d.join("name"))
                        .map(|s| s.trim().to_string())
                        .unwrap_or_default(),
                    usage: number(&d.join("usage"))?,
                    time_us: number(&d.join("time"))?,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        out.insert(id, v);
    }
    if out.is_empty() {
        Err(format!(
            "no cpuidle states under {} (no cpuidle driver, or idle=poll)",
            cpu_dir.display()
        ))
    } else {
        Ok(out)
    }
}

impl SystemSnapshot {
    pub fn take(root: &Path) -> Self {
        let mut unavailable = Vec::new();
        let cpu_times = match read(&root.join("proc/stat")) {
            Ok(t) => Some(parse::parse_proc_stat(&t)),
            Err(e) => {
                unavailable.push(e);
                None
            }
        };
        let interrupts = match read(&root.join("proc/interrupts")) {
            Ok(t) => Some(parse::parse_interrupts(&t)),
            Err(e) => {
                unavailable.push(e);
                None
            }
        };
        let idle = match read_idle_counts(root) {
            Ok(v) => Some(v),
            Err(e) => {
                unavailable.push(e);
                None
            }
        };
        Self {
            at: Instant::now(),
            cpu_times,
            interrupts,
            idle,
            unavailable,
        }
    }

    /// What changed between `self` (before) and `after`, for the CPUs in `cpus`.
    pub fn delta(&self, after: &SystemSnapshot, cpus: &CpuSet) -> SystemDelta {
        let interval_s = after.at.duration_since(self.at).as_secs_f64();
        let mut cpu_time = BTreeMap::new();
        if let (Some(b), Some(a)) = (&self.cpu_times, &after.cpu_times) {
            for cpu in cpus.iter() {
                if let (Some(b), Some(a)) = (b.get(&cpu), a.get(&cpu)) {
                    cpu_time.insert(cpu, CpuTimeShares::between(b, a));
                }
            }
        }
        let mut interrupts: BTreeMap<String, BTreeMap<u32, u64>> = BTreeMap::new();
        if let (Some(b), Some(a)) = (&self.interrupts, &after.interrupts) {
            for (name, row) in a {
                let before = b.get(name);
                let d: BTreeMap<u32, u64> = cpus
                    .iter()
                    .filter_map(|c| {
                        let n = row.get(&c)?;
                        let p = before.and_then(|r| r.get(&c)).copied().unwrap_or(0);
                        Some((c, n.saturating_sub(p)))
                    })
                    .collect();
                interrupts.insert(name.clone(), d);
            }
        }
        let mut idle_entries = BTreeMap::new();
        let mut idle_states: BTreeMap<u32, Vec<IdleStateCount>> = BTreeMap::new();
        if let (Some(b), Some(a)) = (&self.idle, &after.idle) {
            for cpu in cpus.iter() {
                if let (Some(sb), Some(sa)) = (b.get(&cpu), a.get(&cpu)) {
                    let states: Vec<IdleStateCount> = sa
                        .iter()
                        .zip(sb)
                        .map(|(x, y)| IdleStateCount {
                            name: x.name.clone(),
                            usage: x.usage.saturating_sub(y.usage),
                            time_us: x.time_us.saturating_sub(y.time_us),
                        })
                        .collect();
                    // State 0 is POLL on x86: a busy loop, not a halt. Count real idle entries.
                    let entries = states
                        .iter()
                        .filter(|s| s.name != "POLL")
                        .map(|s| s.usage)
                        .sum();
                    idle_entries.insert(cpu, entries);
                    idle_states.insert(cpu, states);
                }
            }
        }
        let mut unavailable = self.unavailable.clone();
        for u in &after.unavailable {
            if !unavailable.contains(u) {
                unavailable.push(u.clone());
            }
        }
        SystemDelta {
            interval_s,
            cpus: cpus.clone(),
            cpu_time,
            interrupts,
            idle_entries,
            idle_states,
            unavailable,
        }
    }
}

/// Where each CPU's time went during the interval, in percent of that CPU's ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuTimeShares {
    pub user_pct: f64,
    pub system_pct: f64,
    pub irq_pct: f64,
    pub softirq_pct: f64,
    pub steal_pct: f64,
    pub iowait_pct: f64,
    pub idle_pct: f64,
    /// Clock ticks the interval covered on this CPU (the denominator).
    pub ticks: u64,
}

impl CpuTimeShares {
    pub fn between(b: &CpuTimes, a: &CpuTimes) -> Self {
        let d = |x: u64, y: u64| x.saturating_sub(y) as f64;
        let total = a.total().saturating_sub(b.total());
        let pct = |v: f64| {
            if total == 0 {
                0.0
            } else {
                100.0 * v / total as f64
            }
        };
        Self {
            user_pct: pct(d(a.user, b.user) + d(a.nice, b.nice)),
            system_pct: pct(d(a.system, b.system)),
            irq_pct: pct(d(a.irq, b.irq)),
            softirq_pct: pct(d(a.softirq, b.softirq)),
            steal_pct: pct(d(a.steal, b.steal)),
            iowait_pct: pct(d(a.iowait, b.iowait)),
            idle_pct: pct(d(a.idle, b.idle)),
            ticks: total,
        }
    }

    pub fn busy_pct(&self) -> f64 {
        self.user_pct + self.system_pct + self.irq_pct + self.softirq_pct
    }
}

/// System counters over a measured interval, restricted to the CPUs of interest.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SystemDelta {
    /// The interval actually measured, in seconds.
    pub interval_s: f64,
    pub cpus: CpuSet,
    pub cpu_time: BTreeMap<u32, CpuTimeShares>,
    /// Interrupt counts by type (`RES`, `CAL`, `TLB`, `LOC`, `device`, ...) and CPU.
    pub interrupts: BTreeMap<String, BTreeMap<u32, u64>>,
    /// Entries into real idle states (halts), per CPU; POLL excluded.
    pub idle_entries: BTreeMap<u32, u64>,
    pub idle_states: BTreeMap<u32, Vec<IdleStateCount>>,
    /// Counter sources that could not be read, with the reason.
    pub unavailable: Vec<String>,
}

/// Interrupt types that reveal the wakeup mechanism, reported per operation.
pub const KEY_INTERRUPTS: &[&str] = &["RES", "CAL", "TLB", "LOC", "IWI", "HYP", "PIW"];

impl SystemDelta {
    pub fn interrupt_total(&self, name: &str) -> u64 {
        self.interrupts
            .get(name)
            .map(|r| r.values().sum())
            .unwrap_or(0)
    }

    pub fn idle_entries_total(&self) -> u64 {
        self.idle_entries.values().sum()
    }

    /// Mean steal over the CPUs of interest, in percent.
    pub fn steal_pct(&self) -> f64 {
        if self.cpu_time.is_empty() {
            return 0.0;
        }
        self.cpu_time.values().map(|c| c.steal_pct).sum::<f64>() / self.cpu_time.len() as f64
    }

    /// Counts per operation (`ops` round trips, transactions, ...): idle entries and each key
    /// interrupt type, summed over the CPUs of interest. Empty when `ops` is zero.
    pub fn per_op(&self, ops: u64) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        if ops == 0 {
            return m;
        }
        if !self.idle_entries.is_empty() {
            m.insert(
                "idle_entries".to_string(),
                self.idle_entries_total() as f64 / ops as f64,
            );
        }
        for k in KEY_INTERRUPTS {
            if self.interrupts.contains_key(*k) {
                m.insert(
                    format!("irq_{k}"),
                    self.interrupt_total(k) as f64 / ops as f64,
                );
            }
        }
        m
    }
}

/// Per-task counters (a thread or a process).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskSnapshot {
    pub voluntary: u64,
    pub involuntary: u64,
    pub migrations: Option<u64>,
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    pub last_cpu: u32,
    /// Start time in clock ticks after boot: tells a reused thread id from the original.
    pub start_ticks: u64,
}

impl TaskSnapshot {
    /// Reads `/proc/<pid>` (or `/proc/<pid>/task/<tid>` when `tid` is given).
    pub fn take(root: &Path, pid: i32, tid: Option<i32>) -> Result<Self, String> {
        let dir = match tid {
            Some(t) => root.join(format!("proc/{pid}/task/{t}")),
            None => root.join(format!("proc/{pid}")),
        };
        let status = read(&dir.join("status"))?;
        let (voluntary, involuntary) = parse::parse_status_ctxt(&status)
            .ok_or_else(|| format!("{}: no context-switch counts", dir.display()))?;
        let stat = read(&dir.join("stat"))?;
        let st = parse::parse_proc_pid_stat(&stat)
            .ok_or_else(|| format!("{}: unparsable stat", dir.display()))?;
        let migrations = read(&dir.join("sched"))
            .ok()
            .and_then(|s| parse::parse_sched_migrations(&s));
        Ok(Self {
            voluntary,
            involuntary,
            migrations,
            utime_ticks: st.utime_ticks,
            stime_ticks: st.stime_ticks,
            last_cpu: st.processor,
            start_ticks: st.starttime_ticks,
        })
    }

    pub fn delta(&self, after: &TaskSnapshot) -> TaskDelta {
        let hz = clock_ticks_per_sec();
        TaskDelta {
            voluntary_switches: after.voluntary.saturating_sub(self.voluntary),
            involuntary_switches: after.involuntary.saturating_sub(self.involuntary),
            migrations: match (self.migrations, after.migrations) {
                (Some(b), Some(a)) => Some(a.saturating_sub(b)),
                _ => None,
            },
            user_s: after.utime_ticks.saturating_sub(self.utime_ticks) as f64 / hz,
            system_s: after.stime_ticks.saturating_sub(self.stime_ticks) as f64 / hz,
        }
    }
}

/// What one task did during the interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskDelta {
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    /// CPU migrations; `None` when the kernel has no `/proc/<pid>/sched`.
    pub migrations: Option<u64>,
    pub user_s: f64,
    pub system_s: f64,
}

impl TaskDelta {
    pub fn add(&mut self, o: &TaskDelta) {
        self.voluntary_switches += o.voluntary_switches;
        self.involuntary_switches += o.involuntary_switches;
        self.migrations = match (self.migrations, o.migrations) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.user_s += o.user_s;
        self.system_s += o.system_s;
    }
}

pub fn clock_ticks_per_sec() -> f64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(v)) if v > 0 => v as f64,
        _ => 100.0,
    }
}

/// Other load seen on the CPUs about to be used, measured while cpulab itself sleeps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadCheck {
    pub window_s: f64,
    /// Busy percent per CPU during the window (user + system + irq + softirq).
    pub busy_pct: BTreeMap<u32, f64>,
    /// CPU seconds cpulab itself and the processes it started used during the window (the
    /// previous run's children exiting, servers it keeps, its watchdog).
    #[serde(default)]
    pub own_cpu_s: f64,
    /// `busy_pct` less cpulab's own share: what other programs did. The noise verdict is taken
    /// on this.
    #[serde(default)]
    pub other_busy_pct: BTreeMap<u32, f64>,
    /// The other processes (kernel threads included) that used the most CPU in the window.
    #[serde(default)]
    pub busiest_others: Vec<OtherTask>,
    /// CPU seconds the watched application (`doctor --pid/--comm`: the patient) used during
    /// the window; part of `other_busy_pct`, which a neighbour verdict must take it out of.
    #[serde(default)]
    pub patient_cpu_s: f64,
    pub steal_pct: f64,
    /// True when some CPU in use was busier than the threshold: results may be spoiled.
    pub noisy: bool,
    /// Why, in words, when noisy.
    pub reason: Option<String>,
}

/// A process that is not cpulab's, and the CPU time it used during a load check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OtherTask {
    pub pid: i32,
    /// Its command name (`kdamond.0`, `rustc`).
    pub name: String,
    pub cpu_s: f64,
}

/// Busy share above which another program is taken to be competing for a CPU.
pub const NOISY_BUSY_PCT: f64 = 10.0;

/// Samples `/proc/stat` across a short sleep to see whether anything else is running on `cpus`.
pub fn check_background_load(root: &Path, cpus: &CpuSet, window: Duration) -> LoadCheck {
    check_background_load_beside(root, cpus, window, &|_, _| false)
}

/// CPU seconds the processes `pick` chooses (by pid and name) used between two tables.
pub fn cpu_s_of(
    before: &[(i32, String, parse::ProcStat)],
    after: &[(i32, String, parse::ProcStat)],
    pick: &dyn Fn(i32, &str) -> bool,
) -> f64 {
    busiest_others(before, after, usize::MAX)
        .iter()
        .filter(|t| pick(t.pid, &t.name))
        .fold(0.0, |s, t| s + t.cpu_s)
}

/// [`check_background_load`], also counting what the watched application (`is_patient`) used.
pub fn check_background_load_beside(
    root: &Path,
    cpus: &CpuSet,
    window: Duration,
    is_patient: &dyn Fn(i32, &str) -> bool,
) -> LoadCheck {
    let before = SystemSnapshot::take(root);
    let procs_before = process_table(root);
    std::thread::sleep(window);
    let procs_after = process_table(root);
    let after = SystemSnapshot::take(root);
    let (own_before, own_after) = (own_cpu_s_in(&procs_before), own_cpu_s_in(&procs_after));
    let busiest = busiest_others(&procs_before, &procs_after, 3);
    let patient_cpu_s = cpu_s_of(&procs_before, &procs_after, is_patient);
    let d = before.delta(&after, cpus);
    let busy_pct: BTreeMap<u32, f64> = d.cpu_time.iter().map(|(c, s)| (*c, s.busy_pct())).collect();
    let own_cpu_s = (own_after - own_before).max(0.0);
    let other_busy_pct = without_own(&busy_pct, own_cpu_s, d.interval_s);
    let busy: Vec<String> = other_busy_pct
        .iter()
        .filter(|(_, b)| **b > NOISY_BUSY_PCT)
        .map(|(c, b)| format!("cpu{c} {b:.0}% busy"))
        .collect();
    let steal = d.steal_pct();
    let mut reasons = busy;
    if !reasons.is_empty() && !busiest.is_empty() {
        let names: Vec<String> = busiest
            .iter()
            .map(|t| format!("{} (pid {}) {:.2} CPU-s", t.name, t.pid, t.cpu_s))
            .collect();
        reasons.push(format!("busiest: {}", names.join(", ")));
    }
    if steal > NOISY_BUSY_PCT {
        reasons.push(format!("{steal:.0}% steal"));
    }
    LoadCheck {
        window_s: d.interval_s,
        busy_pct,
        own_cpu_s,
        other_busy_pct,
        busiest_others: busiest,
        patient_cpu_s,
        steal_pct: steal,
        noisy: !reasons.is_empty(),
        reason: (!reasons.is_empty())
            .then(|| format!("other load before the run: {}", reasons.join(", "))),
    }
}

/// Per-CPU busy percentages less `own_s` CPU seconds of cpulab's own, taken from the busiest
/// CPUs first: /proc/stat does not say which CPU our time fell on, and this choice can only
/// clear as much as cpulab really used, so a CPU another program keeps busy stays busy.
pub fn without_own(
    busy_pct: &BTreeMap<u32, f64>,
    own_s: f64,
    interval_s: f64,
) -> BTreeMap<u32, f64> {
    let mut out = busy_pct.clone();
    if interval_s <= 0.0 {
        return out;
    }
    let mut left_pct = own_s / interval_s * 100.0;
    let mut order: Vec<u32> = out.keys().copied().collect();
    order.sort_by(|a, b| out[b].total_cmp(&out[a]));
    for c in order {
        if left_pct <= 0.0 {
            break;
        }
        if let Some(v) = out.get_mut(&c) {
            let take = v.min(left_pct);
            *v -= take;
            left_pct -= take;
        }
    }
    out
}

/// Every process under `root`/proc: pid, command name, and its stat fields.
pub fn process_table(root: &Path) -> Vec<(i32, String, parse::ProcStat)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(root.join("proc")) else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(root.join(format!("proc/{pid}/stat"))) else {
            continue;
        };
        let name = match (text.find('('), text.rfind(')')) {
            (Some(a), Some(b)) if a < b => text[a + 1..b].to_string(),
            _ => String::new(),
        };
        if let Some(st) = parse::parse_proc_pid_stat(&text) {
            out.push((pid, name, st));
        }
    }
    out
}

/// This process and every live descendant in `table`, through parent links.
fn own_tree(table: &[(i32, String, parse::ProcStat)]) -> Vec<i32> {
    let mut tree = vec![std::process::id() as i32];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            table
                .iter()
                .filter(|(_, _, s)| s.ppid == parent)
                .map(|(p, _, _)| *p),
        );
        i += 1;
    }
    tree
}

fn ticks(s: &parse::ProcStat) -> u64 {
    s.utime_ticks + s.stime_ticks + s.reaped_children_ticks
}

/// CPU seconds used so far by this process (every thread, ended ones included), the children
/// it has reaped, and every live descendant with the children they reaped: cpulab's own load.
/// Descendants are found through parent links in `proc/*/stat` under `root`.
pub fn own_tree_cpu_s(root: &Path) -> f64 {
    own_cpu_s_in(&process_table(root))
}

fn own_cpu_s_in(table: &[(i32, String, parse::ProcStat)]) -> f64 {
    let tree = own_tree(table);
    let t: u64 = table
        .iter()
        .filter(|(p, _, _)| tree.contains(p))
        .map(|(_, _, s)| ticks(s))
        .sum();
    t as f64 / clock_ticks_per_sec()
}

/// The processes not of cpulab's tree that used the most CPU between two tables (the same
/// process in both: same pid and start time), most first, at most `n`.
pub fn busiest_others(
    before: &[(i32, String, parse::ProcStat)],
    after: &[(i32, String, parse::ProcStat)],
    n: usize,
) -> Vec<OtherTask> {
    let tree = own_tree(after);
    let mut out: Vec<OtherTask> = after
        .iter()
        .filter(|(p, _, _)| !tree.contains(p))
        .filter_map(|(pid, name, a)| {
            let (_, _, b) = before
                .iter()
                .find(|(p, _, b)| p == pid && b.starttime_ticks == a.starttime_ticks)?;
            let used =
                (a.utime_ticks + a.stime_ticks).checked_sub(b.utime_ticks + b.stime_ticks)?;
            (used > 0).then(|| OtherTask {
                pid: *pid,
                name: name.clone(),
                cpu_s: used as f64 / clock_ticks_per_sec(),
            })
        })
        .collect();
    out.sort_by(|a, b| b.cpu_s.total_cmp(&a.cpu_s));
    out.truncate(n);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_time_is_taken_off_the_busiest_cpus_and_no_more() {
        let busy: BTreeMap<u32, f64> = [(0, 30.0), (1, 100.0)].into();
        // 0.1 s of our own in a 0.2 s window: 50 points off the busiest CPU.
        let o = without_own(&busy, 0.1, 0.2);
        assert_eq!(o[&1], 50.0);
        assert_eq!(o[&0], 30.0);
        // More of our own than the busiest CPU had: the rest comes off the next.
        let o = without_own(&busy, 0.25, 0.2);
        assert_eq!(o[&1], 0.0);
        assert!((o[&0] - 5.0).abs() < 1e-9);
        for v in without_own(&busy, 10.0, 0.2).values() {
            assert!(*v >= 0.0, "never negative");
        }
    }

    /// Regression (issue 8): the check counted cpulab's own work in the window (a previous
    /// run's processes exiting) as other load.
    #[test]
    fn our_own_work_during_the_window_is_not_other_load() {
        let root = Path::new("/");
        let cpus = crate::topology::Topology::read(root).unwrap().online;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let spinner = std::thread::spawn(move || {
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        let c = check_background_load(root, &cpus, Duration::from_millis(300));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        spinner.join().unwrap();
        assert!(
            c.own_cpu_s > 0.0,
            "a spinning thread of ours was seen: {c:?}"
        );
        let total = |m: &BTreeMap<u32, f64>| m.values().sum::<f64>();
        // What is left for others is the total less our share, never below zero per CPU.
        let ours_pct = c.own_cpu_s / c.window_s * 100.0;
        assert!(
            total(&c.other_busy_pct)
                <= total(&c.busy_pct) - ours_pct.min(total(&c.busy_pct)) + 1e-6
        );
        assert!(c.other_busy_pct.values().all(|v| *v >= 0.0));
    }

    #[test]
    fn the_busiest_others_leave_out_our_tree_and_new_processes() {
        let st = |ppid: i32, t: u64, start: u64| parse::ProcStat {
            state: 'S',
            ppid,
            utime_ticks: t,
            stime_ticks: 0,
            reaped_children_ticks: 0,
            starttime_ticks: start,
            processor: 0,
        };
        let me = std::process::id() as i32;
        let before = vec![
            (77, "kdamond.0".to_string(), st(2, 100, 5)),
            (900, "rustc".to_string(), st(1, 10, 50)),
            (me, "cpulab".to_string(), st(1, 0, 60)),
            (901, "sh".to_string(), st(me, 0, 70)),
            (902, "reused".to_string(), st(1, 0, 80)),
        ];
        let after = vec![
            (77, "kdamond.0".to_string(), st(2, 112, 5)),
            (900, "rustc".to_string(), st(1, 13, 50)),
            (me, "cpulab".to_string(), st(1, 30, 60)),
            (901, "sh".to_string(), st(me, 50, 70)),
            // The same pid, another process: not compared.
            (902, "reused".to_string(), st(1, 40, 81)),
        ];
        let b = busiest_others(&before, &after, 3);
        let names: Vec<&str> = b.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["kdamond.0", "rustc"]);
        assert!(b[0].cpu_s > b[1].cpu_s && b[1].cpu_s > 0.0);
        assert!(own_cpu_s_in(&after) > own_cpu_s_in(&before));
    }

    #[test]
    fn own_tree_counts_a_busy_child() {
        let children_s = || {
            let r = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
                .unwrap();
            let t = |v: nix::sys::time::TimeVal| v.tv_sec() as f64 + v.tv_usec() as f64 / 1e6;
            t(r.user_time()) + t(r.system_time())
        };
        let root = Path::new("/");
        let (before, kids_before) = (own_tree_cpu_s(root), children_s());
        let mut child = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"])
            .spawn()
            .unwrap();
        child.wait().unwrap();
        let (after, kids) = (own_tree_cpu_s(root), children_s() - kids_before);
        assert!(kids > 0.0, "the child used CPU time");
        // Whatever the kernel says the reaped child used is in our own tree's figure (to the
        // clock tick /proc/*/stat counts in).
        assert!(
            after - before + 2.0 / clock_ticks_per_sec() >= kids,
            "{after} - {before} < {kids}"
        );
    }

    #[test]
    fn deltas_never_go_negative() {
        let b = CpuTimes {
            user: 100,
            idle: 100,
            ..Default::default()
        };
        let a = CpuTimes {
            user: 90, // counter went backwards (CPU hot-unplugged and back)
            idle: 200,
            ..Default::default()
        };
        let s = CpuTimeShares::between(&b, &a);
        // The counter that went back counts as no time at all: not a negative share, and not
        // a wrapped 2^64 - 10 ticks that would make the CPU all user time.
        assert_eq!(s.user_pct, 0.0, "{s:?}");
        assert!(s.idle_pct > 0.0, "{s:?}");
        let t = TaskSnapshot {
            voluntary: 10,
            ..Default::default()
        }
        .delta(&TaskSnapshot::default());
        assert_eq!(t.voluntary_switches, 0);
    }

    #[test]
    fn live_snapshot_delta_is_well_formed() {
        let root = Path::new("/");
        let b = SystemSnapshot::take(root);
        std::thread::sleep(Duration::from_millis(20));
        let a = SystemSnapshot::take(root);
        let cpus = crate::topology::Topology::read(root).unwrap().online;
        let d = b.delta(&a, &cpus);
        assert!(d.interval_s > 0.0);
        for s in d.cpu_time.values() {
            assert!(s.busy_pct() >= 0.0 && s.busy_pct() <= 100.0 + 1e-9);
        }
    }
}

#[cfg(test)]
mod idle_count_tests {
    use super::*;

    fn state(root: &Path, cpu: u32, n: u32, usage: &str) {
        let d = root.join(format!("sys/devices/system/cpu/cpu{cpu}/cpuidle/state{n}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("name"), "HALT\n").unwrap();
        std::fs::write(d.join("usage"), usage).unwrap();
        std::fs::write(d.join("time"), "100\n").unwrap();
    }

    /// A count that does not read is never a 0: the reading is unavailable and names the file.
    #[test]
    fn an_unreadable_idle_count_makes_the_reading_unavailable_not_zero() {
        let dir = tempfile::tempdir().unwrap();
        state(dir.path(), 0, 0, "7\n");
        state(dir.path(), 1, 0, "9\n");
        let ok = read_idle_counts(dir.path()).unwrap();
        assert_eq!(ok.values().map(|v| v[0].usage).collect::<Vec<_>>(), [7, 9]);
        state(dir.path(), 1, 1, "garbage\n");
        let e = read_idle_counts(dir.path()).unwrap_err();
        assert!(e.contains("cpu1/cpuidle/state1/usage: not a count"), "{e}");
        std::fs::remove_file(
            dir.path()
                .join("sys/devices/system/cpu/cpu1/cpuidle/state1/usage"),
        )
        .unwrap();
        let e = read_idle_counts(dir.path()).unwrap_err();
        assert!(e.contains("state1/usage"), "{e}");
    }
}
