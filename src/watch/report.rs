//! The result of a watch: this struct is its JSON schema.
//!
//! Every rate is divided by the interval actually watched, not the one asked for (Ctrl-C or the
//! target's exit end it early). Each class keeps its raw latency histogram as bucketed counts,
//! so a later comparison can test differences instead of trusting percentiles. The co-location
//! estimate is kept apart from the measurements and says that it is one: it multiplies two
//! measured figures under an assumption (that a co-located wakeup would cost what this window's
//! same-CPU wakeups cost), and comes with the `cpulab try` line that measures it instead.

use super::analyze::{Analysis, ByClass, ClassAcc, PlacementChecks};
use super::ring::EventSpec;
use super::targets::Target;
use crate::counters::SystemSnapshot;
use crate::cpulist::CpuSet;
use crate::experiment::{Direction, Figure, Unit};
use crate::machine::Conditions;
use crate::topology::PlacementClass;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// One bucket of a latency histogram: `count` wakeups took at most `le_ns` (and more than the
/// previous bucket's bound).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    pub le_ns: u64,
    pub count: u64,
}

/// Wakeup-to-run latency of one class, ns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Wakeups whose switch-in was seen (the rest were already running or queued).
    pub samples: u64,
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// Raw distribution, power-of-two buckets from 1 us.
    pub histogram: Vec<Bucket>,
}

/// Wakeups placed in one class relative to the waker's CPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassReport {
    pub class: PlacementClass,
    pub wakeups: u64,
    /// Share of the row's wakeups, 0..1.
    pub share: f64,
    pub wakeups_per_s: f64,
    /// Wakeups whose CPU was idle when they were placed (switched in straight from the idle
    /// task; with `bpf-counts`, the CPU's state at `sched_wakeup`). None: not available, the
    /// result was written before cpulab recorded it (never read as zero).
    #[serde(default)]
    pub to_idle: Option<u64>,
    pub latency: Option<Latency>,
}

/// One process (or, watching the whole machine, every process of one name).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessReport {
    pub name: String,
    /// The figures marked "None: not measured" need per-event records: with
    /// `--mechanism bpf-counts` (counts kept in the kernel) they are None (JSON null), never 0.
    pub pids: Option<Vec<i32>>,
    /// None: not measured.
    pub threads: Option<usize>,
    pub wakeups: u64,
    pub wakeups_per_s: f64,
    /// Nearest class first.
    pub classes: Vec<ClassReport>,
    /// Time runnable but not running (after wakeups and after preemption), per second watched.
    pub runq_wait_s_per_s: f64,
    /// None: not measured.
    pub on_cpu_s_per_s: Option<f64>,
    /// None: not measured.
    pub migrations: Option<u64>,
    /// None: not measured.
    pub migrations_per_s: Option<f64>,
    /// None: not measured.
    pub cpus_used: Option<CpuSet>,
}

/// One waker -> wakee edge of the wakeup graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairReport {
    pub waker: String,
    /// 0 when the wakeups came from interrupt context.
    pub waker_pid: i32,
    pub wakee: String,
    pub wakee_pid: i32,
    pub wakeups: u64,
    pub wakeups_per_s: f64,
    pub classes: Vec<ClassReport>,
    /// The CPU the waker woke from most often.
    pub waker_cpu: Option<u32>,
}

/// Halts and IPIs on the CPUs involved, from /proc and /sys around the window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VmReport {
    pub cpus: CpuSet,
    /// Idle-state entries (halts), POLL excluded.
    pub halts: Option<u64>,
    /// Interrupt counts by type (RES: rescheduling IPIs, CAL: function-call IPIs, ...).
    pub interrupts: BTreeMap<String, u64>,
    /// Halts and each interrupt type per wakeup of the watched processes.
    pub per_wakeup: BTreeMap<String, f64>,
    pub steal_pct: f64,
    /// `/sys/module/haltpoll/parameters/guest_halt_poll_ns` (None: no haltpoll module).
    pub guest_halt_poll_ns: Option<u64>,
    /// Why that parameter acts on nothing here (the haltpoll cpuidle driver is not in use), so
    /// the vCPUs halt at once whatever it says; absent when it acts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_halt_poll_inert: Option<String>,
    pub unavailable: Vec<String>,
}

/// An ESTIMATE, not a measurement: what co-locating the top pair might change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    pub pair: String,
    /// Wakeups per second of the pair that crossed CPUs.
    pub cross_wakeups_per_s: f64,
    /// Mean latency of those cross-CPU wakeups, measured here.
    pub cross_latency_ns: f64,
    /// Mean latency of the pair's own same-CPU wakeups, measured here (never other processes').
    pub same_cpu_latency_ns: f64,
    /// Same-CPU wakeups of the pair that were timed: the baseline's size (at least
    /// [`MIN_TIMED_FOR_ESTIMATE`]). None: a result written before cpulab recorded it.
    #[serde(default)]
    pub same_cpu_timed: Option<u64>,
    /// (cross - same) x cross wakeups/s: seconds of wakeup latency per second saved (negative:
    /// co-locating would add). Never beyond the wakee's threads in magnitude: each thread waits
    /// at most one second per second.
    pub latency_saved_s_per_s: f64,
    /// The trial that measures it instead.
    pub verify: String,
}

/// Fewest timed wakeups of the pair, cross-CPU and same-CPU each, that the estimate compares:
/// the mean of fewer is mostly the one wakeup that waited behind something else.
pub const MIN_TIMED_FOR_ESTIMATE: u64 = 30;

/// One event on one CPU: what the kernel counted against the records that reached cpulab.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuDelivery {
    pub cpu: u32,
    /// The event's own count (`read(2)` of its descriptor); None when it could not be read.
    pub counted: Option<u64>,
    /// Records of it that reached cpulab.
    pub delivered: u64,
}

/// Switches into and out of the idle task delivered on one CPU. They alternate, so they differ
/// by at most one when the kernel delivers every switch; on some kernels and CPUs the switch out
/// of idle is neither counted nor delivered, and wakeups onto that idle CPU cannot be timed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IdleSwitches {
    pub cpu: u32,
    pub to_idle: u64,
    pub from_idle: u64,
}

impl IdleSwitches {
    /// Switches out of idle the kernel did not deliver (nor count), at least.
    pub fn missing_from_idle(&self) -> u64 {
        self.to_idle.saturating_sub(self.from_idle + 1)
    }
}

/// One event: counted by the kernel, delivered to cpulab, per CPU and in all.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    pub event: String,
    /// A record per event (else only counted, by design).
    pub sampled: bool,
    pub counted: Option<u64>,
    pub delivered: u64,
    pub per_cpu: Vec<CpuDelivery>,
}

impl Delivery {
    /// Sampled events the kernel counted but did not deliver (lost or never written).
    pub fn missing(&self) -> u64 {
        match (self.sampled, self.counted) {
            (true, Some(c)) => c.saturating_sub(self.delivered),
            _ => 0,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WatchReport {
    pub conditions: Conditions,
    pub target: String,
    pub mechanism: String,
    pub requested_s: f64,
    /// Seconds actually watched; every rate divides by this.
    pub interval_s: f64,
    pub ended: String,
    /// How the command of `watch -- COMMAND` ended (its exit status, a signal, or stopped by
    /// cpulab when the window ended); null without a command.
    #[serde(default)]
    pub command: Option<super::targets::CommandEnd>,
    /// Scheduler events analysed (all tasks, before filtering).
    pub events: u64,
    /// Records the kernel said it dropped (PERF_RECORD_LOST: the reader fell behind).
    pub lost_events: u64,
    /// Records lost per CPU's ring (CPUs with none are left out).
    #[serde(default)]
    pub lost_by_cpu: BTreeMap<u32, u64>,
    pub torn_bytes: u64,
    /// Per event: counted by the kernel against delivered to cpulab.
    #[serde(default)]
    pub delivery: Vec<Delivery>,
    /// Set when an event the figures need (sched_waking, sched_switch) was counted but not
    /// delivered for more than a small share: every figure is then a lower bound.
    #[serde(default)]
    pub incomplete: Option<String>,
    /// Per CPU: switches into and out of the idle task delivered.
    #[serde(default)]
    pub idle_switches: Vec<IdleSwitches>,
    /// How each wakeup's CPU was found and how the sources agreed. None: not available, the
    /// result was written before cpulab recorded it, or not measured (`bpf-counts`, whose
    /// `pairs` are None too); never read as zeros.
    #[serde(default)]
    pub placement: Option<PlacementChecks>,
    /// By wakeups, most first.
    pub processes: Vec<ProcessReport>,
    /// Top waker -> wakee pairs by wakeups. None: not measured (`--mechanism bpf-counts` keeps
    /// no per-event record to tell who woke whom), never an empty graph.
    pub pairs: Option<Vec<PairReport>>,
    pub vm: VmReport,
    pub estimate: Option<Estimate>,
    /// Why there is no estimate, in one line (absent when there is one, and in results written
    /// before cpulab said why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_estimate: Option<String>,
}

pub struct Inputs<'a> {
    pub mechanism: String,
    /// Figures came from per-event records; false: from counts kept in the kernel
    /// (`--mechanism bpf-counts`), which measure no pids, threads, pairs, on-CPU time,
    /// migrations or CPUs used.
    pub per_event: bool,
    pub delivery: Vec<Delivery>,
    pub lost_by_cpu: BTreeMap<u32, u64>,
    pub idle_switches: Vec<IdleSwitches>,
    pub conditions: Conditions,
    pub target: &'a Target,
    pub requested_s: f64,
    pub interval_s: f64,
    pub ended: String,
    pub command: Option<super::targets::CommandEnd>,
    pub lost: u64,
    pub torn: u64,
    pub analysis: &'a Analysis<'a>,
    pub before: &'a SystemSnapshot,
    pub after: &'a SystemSnapshot,
    pub root: &'a Path,
}

fn latency(acc: &ClassAcc) -> Option<Latency> {
    let h = &acc.latency;
    if h.is_empty() {
        return None;
    }
    let histogram = h
        .iter_log(1000, 2.0)
        .filter(|v| v.count_since_last_iteration() > 0)
        .map(|v| Bucket {
            le_ns: v.value_iterated_to(),
            count: v.count_since_last_iteration(),
        })
        .collect();
    Some(Latency {
        samples: h.len(),
        mean_ns: h.mean(),
        p50_ns: h.value_at_quantile(0.5),
        p90_ns: h.value_at_quantile(0.9),
        p99_ns: h.value_at_quantile(0.99),
        max_ns: h.max(),
        histogram,
    })
}

fn classes(m: &ByClass, interval_s: f64) -> (u64, Vec<ClassReport>) {
    let total: u64 = m.values().map(|c| c.wakeups).sum();
    let v = m
        .iter()
        .map(|(class, acc)| ClassReport {
            class: *class,
            wakeups: acc.wakeups,
            share: acc.wakeups as f64 / total.max(1) as f64,
            wakeups_per_s: acc.wakeups as f64 / interval_s,
            to_idle: Some(acc.to_idle),
            latency: latency(acc),
        })
        .collect();
    (total, v)
}

const TOP_PAIRS: usize = 10;
const TOP_PROCESSES: usize = 25;

/// One row per watched process (per process name when the whole machine is watched), the
/// busiest [`TOP_PROCESSES`] first.
fn process_rows(
    a: &super::analyze::Analysis<'_>,
    target: &Target,
    dt: f64,
    per_event: bool,
) -> Vec<ProcessReport> {
    // Whole machine: one row per process name; otherwise one row per process.
    let mut rows: BTreeMap<String, (Vec<i32>, super::analyze::ProcessAcc)> = BTreeMap::new();
    for (tgid, p) in &a.processes {
        let key = match target {
            Target::All => p.comm.clone(),
            _ => format!("{}\u{0}{tgid}", p.comm),
        };
        let (pids, acc) = rows.entry(key).or_default();
        pids.push(*tgid);
        acc.comm.clone_from(&p.comm);
        acc.threads.extend(&p.threads);
        for (c, x) in &p.classes {
            match acc.classes.get_mut(c) {
                Some(e) => e.merge(x),
                None => {
                    acc.classes.insert(*c, x.clone());
                }
            }
        }
        acc.runq_wait_ns += p.runq_wait_ns;
        acc.on_cpu_ns += p.on_cpu_ns;
        acc.migrations += p.migrations;
        acc.cpus.extend(&p.cpus);
    }
    let mut processes: Vec<ProcessReport> = rows
        .into_values()
        .map(|(pids, p)| {
            let (wakeups, classes) = classes(&p.classes, dt);
            ProcessReport {
                name: p.comm,
                pids: per_event.then_some(pids),
                threads: per_event.then_some(p.threads.len()),
                wakeups,
                wakeups_per_s: wakeups as f64 / dt,
                classes,
                runq_wait_s_per_s: p.runq_wait_ns as f64 / 1e9 / dt,
                on_cpu_s_per_s: per_event.then(|| p.on_cpu_ns as f64 / 1e9 / dt),
                migrations: per_event.then_some(p.migrations),
                migrations_per_s: per_event.then(|| p.migrations as f64 / dt),
                cpus_used: per_event.then(|| CpuSet::from_iter_u32(p.cpus.iter().copied())),
            }
        })
        .collect();
    processes.sort_by(|x, y| y.wakeups.cmp(&x.wakeups).then(x.name.cmp(&y.name)));
    processes.truncate(TOP_PROCESSES);
    processes
}

pub fn build(i: Inputs<'_>) -> WatchReport {
    let a = i.analysis;
    let dt = i.interval_s.max(1e-9);
    let processes = process_rows(a, i.target, dt, i.per_event);

    let mut pairs: Vec<PairReport> = a
        .pairs
        .iter()
        .map(|((waker_pid, wakee_pid), p)| {
            let (wakeups, classes) = classes(&p.classes, dt);
            PairReport {
                waker: p.waker_comm.clone(),
                waker_pid: *waker_pid,
                wakee: p.wakee_comm.clone(),
                wakee_pid: *wakee_pid,
                wakeups,
                wakeups_per_s: wakeups as f64 / dt,
                classes,
                waker_cpu: p
                    .waker_cpus
                    .iter()
                    .max_by_key(|(_, n)| **n)
                    .map(|(c, _)| *c),
            }
        })
        .collect();
    pairs.sort_by(|x, y| {
        y.wakeups
            .cmp(&x.wakeups)
            .then((x.waker_pid, x.wakee_pid).cmp(&(y.waker_pid, y.wakee_pid)))
    });
    pairs.truncate(TOP_PAIRS);
    let pairs = i.per_event.then_some(pairs);

    let total_wakeups: u64 = processes.iter().map(|p| p.wakeups).sum();
    let vm = vm(&i, &a.cpus_involved, total_wakeups);
    let found = match &pairs {
        Some(pairs) => estimate(pairs, &processes),
        None => Err("who woke whom is not measured by bpf-counts (no per-event record)".into()),
    };
    let (estimate, no_estimate) = match found {
        Ok(e) => (Some(e), None),
        Err(why) => (None, Some(why)),
    };
    WatchReport {
        conditions: i.conditions,
        target: i.target.describe(),
        incomplete: incomplete(&i.delivery),
        mechanism: i.mechanism,
        delivery: i.delivery,
        lost_by_cpu: i.lost_by_cpu,
        idle_switches: i.idle_switches,
        placement: i.per_event.then(|| a.checks.clone()),
        requested_s: i.requested_s,
        interval_s: i.interval_s,
        ended: i.ended,
        command: i.command,
        events: a.events,
        lost_events: i.lost,
        torn_bytes: i.torn,
        processes,
        pairs,
        vm,
        estimate,
        no_estimate,
    }
}

/// Per event (in [`super::EVENT_NAMES`] order, as `specs`), the kernel's counts per CPU against
/// the records delivered.
pub fn delivery(
    counts: &[(u32, Vec<Option<u64>>)],
    tally: &super::Tally,
    specs: &[EventSpec],
) -> Vec<Delivery> {
    super::EVENT_NAMES
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let per_cpu: Vec<CpuDelivery> = counts
                .iter()
                .map(|(cpu, c)| CpuDelivery {
                    cpu: *cpu,
                    counted: c.get(i).copied().flatten(),
                    delivered: tally.delivered.get(cpu).map_or(0, |d| d[i]),
                })
                .collect();
            let counted = per_cpu.iter().map(|c| c.counted).sum::<Option<u64>>();
            Delivery {
                event: name.to_string(),
                sampled: specs.get(i).is_some_and(|s| s.sampled),
                counted,
                delivered: per_cpu.iter().map(|c| c.delivered).sum(),
                per_cpu,
            }
        })
        .collect()
}

/// Share of a needed event that may go undelivered before the figures are called incomplete.
pub const INCOMPLETE_SHARE: f64 = 0.01;

/// Why the figures are incomplete (a needed event counted but not delivered beyond
/// [`INCOMPLETE_SHARE`]), or None.
pub fn incomplete(delivery: &[Delivery]) -> Option<String> {
    let short: Vec<String> = delivery
        .iter()
        .filter(|d| d.event == "sched_waking" || d.event == "sched_switch")
        .filter(|d| {
            d.counted
                .is_some_and(|c| d.missing() as f64 > INCOMPLETE_SHARE * c.max(1) as f64)
        })
        .map(|d| {
            format!(
                "{} counted {}, delivered {}",
                d.event,
                d.counted.unwrap_or(0),
                d.delivered
            )
        })
        .collect();
    (!short.is_empty()).then(|| {
        format!(
            "INCOMPLETE: the kernel did not deliver every event the figures need ({}): every count is a lower bound",
            short.join("; ")
        )
    })
}

fn vm(i: &Inputs<'_>, involved: &std::collections::BTreeSet<u32>, wakeups: u64) -> VmReport {
    let cpus = CpuSet::from_iter_u32(involved.iter().copied());
    let d = i.before.delta(i.after, &cpus);
    let interrupts: BTreeMap<String, u64> = crate::counters::KEY_INTERRUPTS
        .iter()
        .filter(|k| d.interrupts.contains_key(**k))
        .map(|k| (k.to_string(), d.interrupt_total(k)))
        .collect();
    let mut per_wakeup = d.per_op(wakeups);
    if let Some(h) = per_wakeup.remove("idle_entries") {
        per_wakeup.insert("halts".into(), h);
    }
    let poll = i
        .root
        .join("sys/module/haltpoll/parameters/guest_halt_poll_ns");
    VmReport {
        cpus,
        halts: (!d.idle_entries.is_empty()).then(|| d.idle_entries_total()),
        interrupts,
        per_wakeup,
        steal_pct: d.steal_pct(),
        guest_halt_poll_ns: std::fs::read_to_string(poll)
            .ok()
            .and_then(|t| t.trim().parse().ok()),
        guest_halt_poll_inert: crate::probe::idle::haltpoll_inert(i.root),
        unavailable: d.unavailable,
    }
}

/// Mean latency, wakeups/s and timed count of the same-CPU (or the other) classes; when fewer
/// than half of those wakeups were timed (the rest had no delivered switch-in), the timed and
/// total counts instead: a mean of the few that were is not that of the wakeups.
fn mean_latency(classes: &[ClassReport], same: bool) -> Result<(f64, f64, u64), (u64, u64)> {
    let (mut n, mut wakeups, mut sum, mut per_s) = (0u64, 0u64, 0.0, 0.0);
    for c in classes {
        if (c.class == PlacementClass::SameCpu) != same {
            continue;
        }
        per_s += c.wakeups_per_s;
        wakeups += c.wakeups;
        if let Some(l) = &c.latency {
            n += l.samples;
            sum += l.mean_ns * l.samples as f64;
        }
    }
    if n > 0 && 2 * n >= wakeups {
        Ok((sum / n as f64, per_s, n))
    } else {
        Err((n, wakeups))
    }
}

/// The estimate for the first pair that allows one, or why none does (the top pair's reason).
fn estimate(pairs: &[PairReport], processes: &[ProcessReport]) -> Result<Estimate, String> {
    let mut first_why = None;
    for top in pairs
        .iter()
        .filter(|p| p.waker_pid != 0 && p.waker_pid != p.wakee_pid)
    {
        match pair_estimate(top, processes) {
            Ok(e) => return Ok(e),
            Err(why) => {
                first_why.get_or_insert(why);
            }
        }
    }
    Err(first_why.unwrap_or_else(|| "no pair of two processes woke each other here".into()))
}

/// One pair's estimate: its cross-CPU wakeups against its own same-CPU ones (never another
/// process's, whose wakeups wait behind other work), both timed often enough, and within the
/// physical bound (the wakee's threads wait at most one second per second each).
fn pair_estimate(top: &PairReport, processes: &[ProcessReport]) -> Result<Estimate, String> {
    let name = format!(
        "{} ({}) -> {} ({})",
        top.waker, top.waker_pid, top.wakee, top.wakee_pid
    );
    // The pair's mean latency of one side (same-CPU or cross-CPU), or why it cannot be taken.
    let side = |same: bool| {
        let what = if same { "same-CPU" } else { "cross-CPU" };
        match mean_latency(&top.classes, same) {
            Ok((_, _, n)) | Err((n, _)) if n < MIN_TIMED_FOR_ESTIMATE => Err(format!(
                "{name} had {n} {what} wakeups timed, fewer than {MIN_TIMED_FOR_ESTIMATE} to take a mean from"
            )),
            Ok(m) => Ok(m),
            Err((n, wakeups)) => Err(format!(
                "{name}: only {n} of its {wakeups} {what} wakeups were timed, fewer than half, so their mean is not that of the wakeups"
            )),
        }
    };
    let (cross_ns, cross_per_s, _) = side(false)?;
    let (same_ns, _, same_n) = side(true)?;
    let cpu = top
        .waker_cpu
        .ok_or_else(|| format!("{name}: the waker's CPU was not seen"))?;
    let threads = processes
        .iter()
        .find(|p| p.pids.as_ref().is_some_and(|v| v.contains(&top.wakee_pid)))
        .and_then(|p| p.threads)
        .filter(|t| *t > 0)
        .ok_or_else(|| {
            format!("{name}: the wakee's threads were not counted, so no bound holds")
        })?;
    let bound = threads as f64;
    let now = cross_ns * cross_per_s / 1e9;
    let co_located = same_ns * cross_per_s / 1e9;
    if now > bound {
        return Err(format!(
            "{name}: its cross-CPU wakeups add up to {now:.2} s of waiting per second, more than its {threads} thread(s) have: the figures disagree"
        ));
    }
    if co_located > bound {
        return Err(format!(
            "{name}: {cross_per_s:.0} wakeups/s at the same-CPU {} each would wait {co_located:.2} s per second, more than its {threads} thread(s) have: that rate could not hold co-located",
            crate::units::fmt_ns(same_ns)
        ));
    }
    Ok(Estimate {
        pair: name,
        cross_wakeups_per_s: cross_per_s,
        cross_latency_ns: cross_ns,
        same_cpu_latency_ns: same_ns,
        same_cpu_timed: Some(same_n),
        latency_saved_s_per_s: now - co_located,
        verify: format!("cpulab try pid:{}.affinity={cpu}", top.wakee_pid),
    })
}

/// The mechanism line of `--mechanism bpf-counts`, which the session writes and a read-back
/// recognises by its opening words.
pub(crate) const COUNTS_MECHANISM: &str = "in-kernel aggregation only (the exporter's programs on sched_waking, \
    sched_wakeup, sched_switch: counts and exp2 latency buckets per target and class in per-CPU \
    maps, no per-event record): latency percentiles are bucket upper bounds, run-queue wait is \
    the wakeup-to-run part only; pids, threads, pairs, on-CPU time, migrations and CPUs used need \
    per-event records and are not measured (null in JSON, `-` in text)";

/// Headline figures: per process, wakeups/s, the same-CPU share and each class's p50/p99.
/// A saved `--mechanism bpf-counts` result read back: builds before its unmeasured figures were
/// left absent wrote them as zeros (threads 0, on-CPU 0, migrations 0, no pairs, placement
/// checks of 0). That mechanism keeps no per-event record, so whatever such a file holds there
/// was never measured: it reads as absent, as today's results write it.
pub fn counts_only_read_back(mut r: WatchReport) -> WatchReport {
    // Every build names the mechanism with the same opening words.
    let whole = COUNTS_MECHANISM;
    let opening = whole.split_once(" (").map_or(whole, |(opening, _)| opening);
    if !r.mechanism.starts_with(opening) {
        return r;
    }
    for p in &mut r.processes {
        p.pids = None;
        p.threads = None;
        p.on_cpu_s_per_s = None;
        p.migrations = None;
        p.migrations_per_s = None;
        p.cpus_used = None;
    }
    r.pairs = None;
    r.placement = None;
    r
}

pub fn figures(r: &WatchReport) -> Vec<Figure> {
    let mut out = Vec::new();
    // Two processes of one name (both ends of `pingpong --processes`) need distinct paths, or
    // compare pairs one's figure with the other's: the second is `name#2`, in report order.
    let mut seen: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for p in &r.processes {
        let n = seen.entry(p.name.as_str()).or_insert(0);
        *n += 1;
        let id = if *n == 1 {
            p.name.clone()
        } else {
            format!("{}#{n}", p.name)
        };
        out.push(Figure::single(
            format!("wakeups_per_s[process={id}]"),
            format!("{id}: wakeups per second"),
            Unit::PerSecond,
            Direction::Neither,
            p.wakeups_per_s,
        ));
        let same = p
            .classes
            .iter()
            .find(|c| c.class == PlacementClass::SameCpu)
            .map_or(0.0, |c| c.share);
        out.push(Figure::single(
            format!("same_cpu_share[process={id}]"),
            format!("{id}: share of wakeups on the waker's CPU"),
            Unit::Share,
            Direction::Neither,
            same,
        ));
        for c in &p.classes {
            if let Some(l) = &c.latency {
                for (q, v) in [("p50", l.p50_ns), ("p99", l.p99_ns)] {
                    out.push(Figure::single(
                        format!("wakeup_latency_{q}_ns[process={id},class={}]", c.class),
                        format!("{id}: wakeup-to-run {q}, {}", c.class),
                        Unit::Nanoseconds,
                        Direction::LowerIsBetter,
                        v as f64,
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(class: PlacementClass, wakeups: u64, timed: u64, mean_ns: f64) -> ClassReport {
        ClassReport {
            class,
            wakeups,
            share: 0.5,
            wakeups_per_s: wakeups as f64,
            to_idle: Some(0),
            latency: (timed > 0).then(|| Latency {
                samples: timed,
                mean_ns,
                p50_ns: mean_ns as u64,
                p90_ns: mean_ns as u64,
                p99_ns: mean_ns as u64,
                max_ns: mean_ns as u64,
                histogram: vec![],
            }),
        }
    }

    /// A one-second window: each class's wakeups are its wakeups per second.
    fn pair(classes: Vec<ClassReport>) -> PairReport {
        PairReport {
            waker: "a".into(),
            waker_pid: 10,
            wakee: "b".into(),
            wakee_pid: 20,
            wakeups: classes.iter().map(|c| c.wakeups).sum(),
            wakeups_per_s: classes.iter().map(|c| c.wakeups_per_s).sum(),
            classes,
            waker_cpu: Some(0),
        }
    }

    fn process(pid: i32, threads: usize, classes: Vec<ClassReport>) -> ProcessReport {
        ProcessReport {
            name: "b".into(),
            pids: Some(vec![pid]),
            threads: Some(threads),
            wakeups: classes.iter().map(|c| c.wakeups).sum(),
            wakeups_per_s: 0.0,
            classes,
            runq_wait_s_per_s: 0.0,
            on_cpu_s_per_s: Some(0.5),
            migrations: Some(0),
            migrations_per_s: Some(0.0),
            cpus_used: Some(CpuSet::from_iter_u32([0, 1])),
        }
    }

    /// The case that once printed "would add about 15.35 s of wakeup latency per second": a
    /// pair with only cross-CPU wakeups, judged against other processes' 13 same-CPU wakeups
    /// that waited behind a build. Now it refuses, and says it had no same-CPU baseline.
    #[test]
    fn other_processes_same_cpu_wakeups_are_no_baseline() {
        let p = pair(vec![class(
            PlacementClass::SharedLlc,
            10_675,
            10_600,
            28_570.0,
        )]);
        let others = process(30, 1, vec![class(PlacementClass::SameCpu, 13, 13, 1.47e6)]);
        let why = estimate(&[p], &[process(20, 1, vec![]), others]).unwrap_err();
        assert!(
            why.contains("0 same-CPU wakeups timed, fewer than 30"),
            "{why}"
        );
    }

    #[test]
    fn a_thin_baseline_of_the_pair_itself_is_refused() {
        let p = pair(vec![
            class(PlacementClass::SameCpu, 13, 13, 5_000.0),
            class(PlacementClass::SharedLlc, 1_000, 1_000, 20_000.0),
        ]);
        let why = estimate(&[p], &[process(20, 1, vec![])]).unwrap_err();
        assert!(why.contains("13 same-CPU wakeups timed"), "{why}");
    }

    /// Enough timed wakeups, but fewer than half of the side's: the reason says so, not that
    /// too few were timed.
    #[test]
    fn a_side_mostly_untimed_is_refused_for_that_reason() {
        let p = pair(vec![
            class(PlacementClass::SameCpu, 1_000, 100, 5_000.0),
            class(PlacementClass::SharedLlc, 1_000, 1_000, 20_000.0),
        ]);
        let why = estimate(&[p], &[process(20, 1, vec![])]).unwrap_err();
        assert!(
            why.contains("only 100 of its 1000 same-CPU wakeups were timed, fewer than half"),
            "{why}"
        );
    }

    /// Same-CPU latency times the pair's rate beyond the wakee's threads' wall time: no figure,
    /// since one thread cannot wait more than a second per second.
    #[test]
    fn an_estimate_beyond_the_wakees_wall_time_is_refused() {
        let p = pair(vec![
            class(PlacementClass::SameCpu, 100, 100, 1.47e6),
            class(PlacementClass::SharedLlc, 10_000, 10_000, 28_570.0),
        ]);
        let why = estimate(std::slice::from_ref(&p), &[process(20, 1, vec![])]).unwrap_err();
        assert!(why.contains("more than its 1 thread(s) have"), "{why}");
        // With no thread count for the wakee there is no bound, and no estimate either.
        let why = estimate(&[p], &[]).unwrap_err();
        assert!(why.contains("threads were not counted"), "{why}");
    }

    #[test]
    fn an_estimate_from_the_pairs_own_wakeups_is_within_its_bound() {
        let p = pair(vec![
            class(PlacementClass::SameCpu, 200, 200, 5_000.0),
            class(PlacementClass::SharedLlc, 10_000, 9_000, 20_000.0),
        ]);
        let e = estimate(&[p], &[process(20, 1, vec![])]).unwrap();
        assert_eq!(e.same_cpu_timed, Some(200));
        // (20 us - 5 us) x 10,000/s = 0.15 s per second saved.
        assert!((e.latency_saved_s_per_s - 0.15).abs() < 1e-9, "{e:?}");
        assert!(e.latency_saved_s_per_s.abs() <= 1.0);
        assert_eq!(e.verify, "cpulab try pid:20.affinity=0");
    }

    /// `--mechanism bpf-counts` fills one row per target with its classes alone: the figures
    /// that need per-event records are absent (null in JSON, no figure for compare), never 0.
    /// They were once 0: threads 0, on-CPU 0 s/s, migrations 0/s.
    #[test]
    fn counts_only_rows_leave_what_they_did_not_measure_absent() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kvm-guest");
        let topo = crate::topology::Topology::read(Path::new(root)).unwrap();
        let mut a = super::super::analyze::Analysis::new(&topo);
        let mut acc = super::super::analyze::ProcessAcc {
            comm: "app".into(),
            ..Default::default()
        };
        let mut c = ClassAcc::new();
        c.wakeups = 100;
        acc.classes.insert(PlacementClass::SameCpu, c);
        a.processes.insert(-1, acc);
        let target = Target::All;
        let counts = process_rows(&a, &target, 1.0, false);
        let p = &counts[0];
        assert_eq!(p.wakeups, 100);
        assert_eq!(
            (p.pids.clone(), p.threads, p.on_cpu_s_per_s, p.migrations),
            (None, None, None, None)
        );
        assert_eq!((p.migrations_per_s, p.cpus_used.clone()), (None, None));
        let v = serde_json::to_value(p).unwrap();
        for k in [
            "pids",
            "threads",
            "on_cpu_s_per_s",
            "migrations",
            "migrations_per_s",
            "cpus_used",
        ] {
            assert!(v[k].is_null(), "{k}: {v}");
        }
        let flat = crate::compare::walk::flatten(&serde_json::json!({ "processes": [v] }));
        let names: Vec<&String> = flat.figures.keys().collect();
        assert!(
            names.iter().all(|n| !n.contains("threads")
                && !n.contains("on_cpu")
                && !n.contains("migrations")),
            "{names:?}"
        );
        // The event path measures them, a counted zero included.
        let events = process_rows(&a, &target, 1.0, true);
        assert_eq!(events[0].threads, Some(0));
        assert_eq!(events[0].migrations, Some(0));
        assert_eq!(events[0].pids, Some(vec![-1]));
    }
}
