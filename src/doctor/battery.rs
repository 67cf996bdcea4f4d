//! Which experiments the doctor runs, for how long, and running them.
//!
//! The battery is chosen from what the machine has: wakeup round trips for every placement
//! class it offers (blocking and spinning, plus unpinned), the messaging throughput test when
//! there are two CPUs to spread over, the essential OS costs, a quick share check, parallel
//! scaling only where SMT siblings or shared-L2 modules give threads something to contend for,
//! and the real application presets only when asked. The whole run has a budget per mode
//! (default 30 s, `--quick` 15 s, probe included), and every stage a deadline from it: its
//! share of the time left, in proportion to its planned seconds, so time a stage leaves unused
//! goes to the later ones. A stage sizes its work to its deadline and stops there with what it
//! has, saying so (`stage_times` in the JSON: planned and actual seconds, and what was cut).
//! Issue 22: the messaging stage sized its runs from one calibration of the fastest placement
//! and once took 51 s of a 30 s budget under load. A stage that fails is recorded as skipped
//! with its reason: one broken experiment never hides the others.
//! Around every stage the doctor samples steal time, and around the parallel ones the idle time
//! of the CPUs it may not use; around the whole battery, the cgroup's throttling counters.

use super::measurements::{Measurements, Skipped, StageTime};
use super::messaging::{self, Placement};
pub use super::mode::{Budget, Deadline, Mode};
use super::progress::Progress;
use super::stages;
use crate::counters::SystemSnapshot;
use crate::machine::Machine;
use crate::probe::cgroup;
use crate::signals;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Validated doctor settings.
#[derive(Clone, Debug)]
pub struct DoctorSettings {
    pub mode: Mode,
    /// Application presets to run (`pgbench`, `http`).
    pub presets: Vec<String>,
    /// A live application to watch (`--pid`, `--comm`).
    pub watch: Option<crate::watch::Target>,
    /// Watch the CPUs for other load before the battery (`--no-load-check` turns it off, and
    /// the rules then have no other-load figure to judge by).
    pub check_load: bool,
}

/// One experiment of the battery.
#[derive(Clone, Debug, PartialEq)]
pub enum Stage {
    Wakeup,
    Messaging(Vec<Placement>),
    OsCost,
    Share,
    Scale,
    Preset(String),
    /// A watch of the live application, for so many seconds.
    Watch(crate::watch::Target, f64),
}

impl Stage {
    pub fn name(&self) -> String {
        match self {
            Stage::Wakeup => "wakeup round trips (pingpong)".into(),
            Stage::Messaging(_) => "messaging throughput".into(),
            Stage::OsCost => "OS primitive costs (oscost)".into(),
            Stage::Share => "share check".into(),
            Stage::Scale => "parallel scaling (scale)".into(),
            Stage::Preset(p) => format!("preset {p} (pair)"),
            Stage::Watch(t, _) => format!("watch of {} (watch)", t.describe()),
        }
    }

    /// Whether the stage keeps every allowed CPU busy (to see idle forbidden CPUs).
    fn parallel(&self) -> bool {
        matches!(self, Stage::Messaging(_) | Stage::Share | Stage::Scale)
    }
}

/// The battery for this machine, each stage with its expected seconds, and what was left out.
pub fn plan(machine: &Machine, s: &DoctorSettings) -> (Vec<(Stage, f64)>, Vec<Skipped>) {
    let b = s.mode.budget();
    let allowed = &machine.allowed;
    let n = allowed.len().max(1) as f64;
    let mut stages = Vec::new();
    let mut skipped = Vec::new();
    // Ordered pairs when the machine is small enough to show a matrix, else one per class.
    let pairs = if allowed.len() <= 4 {
        n * n
    } else {
        machine.topology.representative_pairs(allowed).len() as f64
    };
    let spin_pairs = (pairs - n).max(1.0);
    stages.push((
        Stage::Wakeup,
        (pairs + spin_pairs + 2.0) * (b.wakeup_max_s * 0.6 + 0.1),
    ));
    let first = allowed.first().unwrap_or(0);
    let mut placements = vec![Placement::Packed(first)];
    if allowed.len() >= 2 {
        placements.push(Placement::Spread(allowed.clone()));
        placements.push(Placement::Os(allowed.clone()));
    } else {
        skipped.push(Skipped {
            what: "messaging throughput spread over CPUs".into(),
            reason: format!("only one CPU ({allowed}) may be used: nothing to spread over"),
        });
    }
    let msg_s =
        placements.len() as f64 * b.messaging_repetitions as f64 * (b.messaging_run_s + 0.05);
    stages.push((Stage::Messaging(placements), msg_s));
    stages.push((Stage::OsCost, b.oscost_s));
    stages.push((
        Stage::Share,
        2.0 * b.share_repetitions as f64 * b.share_run_s,
    ));
    let topo = &machine.topology;
    let l2_modules =
        topo.cache_groups(2).iter().filter(|g| g.len() > 1).count() > 0 && !topo.smt_active();
    if topo.smt_active() || l2_modules {
        // Three sweeps of compact and scatter at three counts at most (1, the question
        // count, all): the same seconds on 2 CPUs as on 64.
        let counts = stages::scale_counts(machine).len() as f64;
        stages.push((
            Stage::Scale,
            3.0 * 2.0 * counts * b.scale_run_s * stages::SCALE_RUN_OVERHEAD,
        ));
    } else {
        skipped.push(Skipped {
            what: "parallel scaling by placement policy".into(),
            reason: "no SMT siblings or shared-L2 modules among the usable CPUs: threads have no core to contend for".into(),
        });
    }
    for p in &s.presets {
        stages.push((
            Stage::Preset(p.clone()),
            4.0 * (b.preset_run_s + 0.5) * 4.0 + 3.0,
        ));
    }
    if let Some(t) = &s.watch {
        // First, so the application is seen before the battery loads the machine.
        let secs = match s.mode {
            Mode::Quick => 2.0,
            Mode::Default => 5.0,
            Mode::Thorough => 10.0,
        };
        // Its deadline covers setting the watch up: about 2 s for a debug build here.
        stages.insert(0, (Stage::Watch(t.clone(), secs), secs + WATCH_SETUP_S));
    }
    (stages, skipped)
}

/// The battery stopped early: which signal, during which stage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interruption {
    /// Signal number (2 for SIGINT, 15 for SIGTERM).
    pub signal: i32,
    /// `SIGINT`, `SIGTERM`, `SIGHUP`.
    pub name: String,
    /// The stage that was running or about to start; it and every later stage are missing.
    pub during: String,
}

impl Interruption {
    /// The exit status a shell would show: 128 + signal.
    pub fn exit_code(&self) -> i32 {
        128 + self.signal
    }
}

fn interruption(stage: &Stage) -> Option<Interruption> {
    let signal = signals::pending()?;
    Some(Interruption {
        signal,
        name: signals::name(signal).to_string(),
        during: stage.name(),
    })
}

/// Seconds planned for opening the watch (BTF, loading and attaching the programs) and
/// closing it, besides its window: a whole `cpulab watch --duration 500ms` took 2.6 and 2.9 s
/// (debug build, load average 7, the 2-vCPU KVM guest), process start and exit included.
const WATCH_SETUP_S: f64 = 2.0;

/// Seconds kept back at the end of the budget for judging and printing.
const FINISH_S: f64 = 0.5;

/// Each stage's deadline from the time left: its planned share of what the stages from it on
/// planned (pure). Later stages get back what earlier ones did not use.
pub fn allot(left_s: f64, planned: &[f64], i: usize) -> f64 {
    let rest: f64 = planned[i..].iter().sum();
    if rest <= 0.0 {
        return 0.0;
    }
    (left_s.max(0.0) * planned[i] / rest).min(left_s.max(0.0))
}

/// Runs the planned battery, each stage to its deadline, all within `end`. An interrupt
/// (SIGINT, SIGTERM, SIGHUP) stops it at once: the running stage tears its processes down and
/// no later stage starts; what was measured before is kept, and the interruption returned.
// Long: one loop whose state (measurements, deadlines, interruption) every stage's arm fills.
pub fn run(
    machine: &Machine,
    s: &DoctorSettings,
    stages_planned: &[(Stage, f64)],
    progress: &Progress,
    end: Instant,
) -> (Measurements, Option<Interruption>) {
    let planned: Vec<f64> = stages_planned.iter().map(|(_, e)| *e).collect();
    let mut stopped = None;
    let b = s.mode.budget();
    let mut m = Measurements::default();
    let forbidden = machine.topology.online.difference(&machine.allowed);
    let limits_before = cgroup::read_cpu_limits(&cgroup::Layout::read(&machine.root)).into_value();
    let t0 = Instant::now();
    let mut forbidden_idle: Vec<f64> = Vec::new();
    for (i, (stage, est)) in stages_planned.iter().enumerate() {
        if let Some(i) = interruption(stage) {
            stopped = Some(i);
            break;
        }
        progress.step(&stage.name());
        let left = end.saturating_duration_since(Instant::now()).as_secs_f64() - FINISH_S;
        let planned_s = allot(left, &planned, i);
        let deadline = Deadline::after(planned_s);
        let before = SystemSnapshot::take(&machine.root);
        let started = Instant::now();
        let (outcome, cut) = measure_stage(machine, s, &b, stage, progress, deadline, &mut m);
        let actual_s = started.elapsed().as_secs_f64();
        if let Some(c) = &cut {
            progress.warn(&format!(
                "note: {} stopped at its deadline: {c}",
                stage.name()
            ));
        }
        m.stage_times.push(StageTime {
            stage: stage.name(),
            planned_s,
            actual_s,
            cut_short: cut,
        });
        let after = SystemSnapshot::take(&machine.root);
        // A stage that ended because of a signal (or whose children a terminal's Ctrl-C
        // killed) is not a skipped experiment: the whole run stops here.
        if let Some(i) = interruption(stage) {
            stopped = Some(i);
            break;
        }
        if let Err(e) = outcome {
            progress.warn(&format!("warning: {} not measured: {e:#}", stage.name()));
            m.skipped.push(Skipped {
                what: stage.name(),
                reason: format!("{e:#}"),
            });
        } else if started.elapsed() > Duration::from_millis(300) {
            let d = before.delta(&after, &machine.allowed);
            if !d.cpu_time.is_empty() {
                m.counters.steal_samples_pct.push(d.steal_pct());
            }
            if stage.parallel() && !forbidden.is_empty() {
                let f = before.delta(&after, &forbidden);
                if !f.cpu_time.is_empty() {
                    forbidden_idle.push(
                        f.cpu_time.values().map(|c| c.idle_pct).sum::<f64>()
                            / f.cpu_time.len() as f64,
                    );
                }
            }
        }
        progress.done(*est);
    }
    m.counters.interval_s = t0.elapsed().as_secs_f64();
    if !forbidden_idle.is_empty() {
        m.counters.disallowed_idle_pct =
            Some(forbidden_idle.iter().sum::<f64>() / forbidden_idle.len() as f64);
    }
    let limits_after = cgroup::read_cpu_limits(&cgroup::Layout::read(&machine.root)).into_value();
    if let (Some(a), Some(z)) = (limits_before, limits_after) {
        let d = |k: &str| Some(z.stat.get(k)?.saturating_sub(*a.stat.get(k)?));
        m.counters.cfs_periods = d("nr_periods");
        m.counters.cfs_throttled_periods = d("nr_throttled");
        m.counters.cfs_throttled_s = match (a.throttled_ns, z.throttled_ns) {
            (Some(x), Some(y)) => Some(y.saturating_sub(x) as f64 / 1e9),
            _ => None,
        };
    }
    (m, stopped)
}

/// Runs one stage into `m`; its outcome, and what was cut short at the deadline.
fn measure_stage(
    machine: &Machine,
    s: &DoctorSettings,
    b: &Budget,
    stage: &Stage,
    progress: &Progress,
    deadline: Deadline,
    m: &mut Measurements,
) -> (Result<()>, Option<String>) {
    let mut cut: Option<String> = None;
    let mut keep = |c: Option<String>| cut = c;
    let outcome = match stage {
        Stage::Wakeup => stages::wakeup(machine, b, progress, deadline).map(|(w, c)| {
            m.wakeup = w;
            keep(c)
        }),
        Stage::Messaging(p) => {
            let plan = messaging::Plan {
                groups: 2,
                senders: 4,
                run_time: Duration::from_secs_f64(b.messaging_run_s),
                repetitions: b.messaging_repetitions,
            };
            messaging::run(machine, p, &plan, deadline, || {}).map(|(t, c)| {
                m.throughput = t;
                keep(c)
            })
        }
        Stage::OsCost => stages::oscost(machine, s.mode, progress, deadline).map(|(o, c)| {
            m.oscost = Some(o);
            keep(c)
        }),
        Stage::Share => stages::share(machine, b, progress, deadline).map(|(x, c)| {
            m.share = Some(x);
            keep(c)
        }),
        Stage::Scale => stages::scale(machine, b, progress, deadline).map(|(x, c)| {
            m.scaling = x;
            keep(c)
        }),
        Stage::Watch(t, secs) => {
            stages::watch(machine, t, *secs, progress, deadline).map(|(x, c)| {
                m.app_watch = Some(x);
                keep(c)
            })
        }
        Stage::Preset(p) => {
            stages::preset(machine, p, s.mode, progress).map(|x| m.presets.extend(x))
        }
    };
    (outcome, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stage_gets_its_share_of_the_time_left() {
        let planned = [10.0, 5.0, 5.0];
        // 40 s left for 20 planned: each stage twice its plan, never more than is left.
        assert_eq!(allot(40.0, &planned, 0), 20.0);
        // The first took 25 s of its 20: the later ones share the 15 left.
        assert_eq!(allot(15.0, &planned, 1), 7.5);
        assert_eq!(allot(7.5, &planned, 2), 7.5);
        assert_eq!(
            allot(-3.0, &planned, 2),
            0.0,
            "a budget already spent gives nothing"
        );
    }

    #[test]
    fn the_budgets_are_the_promised_ones() {
        assert_eq!(Mode::Quick.total_s(), 15.0);
        assert_eq!(Mode::Default.total_s(), 30.0);
    }

    fn fixture(name: &str) -> Machine {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        Machine::detect(&root).unwrap()
    }

    fn scale_planned(m: &Machine, mode: Mode) -> Option<f64> {
        let s = DoctorSettings {
            mode,
            presets: Vec::new(),
            watch: None,
            check_load: false,
        };
        plan(m, &s)
            .0
            .iter()
            .find(|(st, _)| *st == Stage::Scale)
            .map(|(_, secs)| *secs)
    }

    /// Issue 30: the scale stage planned 3 x n x 0.5 s, 24 s on 16 CPUs, and every stage was
    /// cut to fit. It now runs three counts whatever the CPU count: 1, where compact doubles up
    /// the most against scatter, and all.
    #[test]
    fn the_scale_stage_plans_the_same_seconds_on_any_cpu_count() {
        let big = fixture("intel-2s");
        assert_eq!(big.allowed.len(), 32);
        assert_eq!(stages::scale_counts(&big), vec![1, 16, 32]);
        let b = Mode::Default.budget();
        let want = 3.0 * 2.0 * 3.0 * b.scale_run_s * stages::SCALE_RUN_OVERHEAD;
        assert_eq!(scale_planned(&big, Mode::Default), Some(want));
        let quick = scale_planned(&big, Mode::Quick).unwrap();
        assert!(quick < want, "{quick}");
        // No SMT and no shared L2: no scale stage at all.
        assert_eq!(scale_planned(&fixture("kvm-guest"), Mode::Default), None);
    }
}
