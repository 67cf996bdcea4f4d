//! The placement-aware wakeup engine behind `cpulab pingpong`.
//!
//! Two endpoints (threads, or processes) pass a token back and forth over one transport while
//! pinned to two CPUs, for every placement class the machine has. The round-trip time is the
//! price of a wakeup at that distance: on bare metal a few microseconds more across cores than
//! on one core; in a VM whose idle vCPUs halt, several times more, because every cross-vCPU
//! wakeup pays a halt exit and an inter-processor interrupt through the hypervisor. The counters
//! read around each run (context switches per endpoint, idle entries and IPIs per CPU, per round
//! trip) name that mechanism instead of leaving it to guesswork.
//!
//! Layout: `settings` (validated input), `plan` (which runs), `transport` (one file per method
//! behind two small traits), `runner` (pin, barrier, time; threads or a forked child),
//! `measure` (the timed loop and adaptive stopping), `observe` (counters around the window),
//! `report` (the result, which is the JSON schema) and `render` (the terminal view).

mod child;
mod clock;
pub mod command;
pub mod html;
mod measure;
mod observe;
mod plan;
pub mod render;
mod report;
mod run;
mod runner;
mod settings;
pub mod summary;
mod transport;

pub use clock::Timer;
pub use measure::EndedBy;
pub use observe::{EndpointCounters, RunCounters};
pub use report::{PingpongReport, PingpongRun, SkippedRun, WhereRan};
pub use settings::{Endpoints, Method, PairSpec, PingpongSettings, Placement, parse_pairs};

use crate::cpulist::CpuSet;
use crate::error::bad_input;
use crate::experiment::{Experiment, Figure, LoadWatch, Progress};
use crate::machine::{Conditions, Machine};
use anyhow::{Result, bail};
use measure::LoopLimits;
use std::time::Duration;

/// Why perf counters are off unless asked for.
pub const PERF_OFF: &str = "perf counters were not opened (ask with --perf): a perf event on a \
     task adds work to each of its context switches, which inflates blocking round trips; \
     context switches and migrations come from /proc, which costs nothing";

/// The CPUs the settings allow (the allowed set unless they name some); none is bad input.
fn cpus_of(machine: &Machine, settings: &PingpongSettings) -> Result<CpuSet> {
    let cpus = settings
        .cpus
        .clone()
        .unwrap_or_else(|| machine.allowed.clone());
    if cpus.is_empty() {
        bail!("no CPUs to run on");
    }
    Ok(cpus)
}

/// The CPUs the planned runs use, watched for other load for `load_check_s` (0: no check).
pub fn load_watch(machine: &Machine, settings: &PingpongSettings) -> Result<LoadWatch> {
    let cpus = cpus_of(machine, settings)?;
    let (planned, _) = plan::plan(&machine.topology, &cpus, &settings.methods, &settings.pairs);
    let window = seconds("load_check_s", settings.load_check_s)?;
    Ok(LoadWatch {
        cpus: planned
            .iter()
            .flat_map(|p| plan::cpus_in_use(p.placement, &cpus).to_vec())
            .collect(),
        window,
        enabled: !window.is_zero(),
    })
}

/// Runs every method at every placement the settings name, and reports them with their
/// counters and `conditions`. `progress` receives one step per run, notes and warnings.
pub fn measure(
    machine: &Machine,
    settings: &PingpongSettings,
    mut conditions: Conditions,
    progress: &Progress,
) -> Result<PingpongReport> {
    let cpus = cpus_of(machine, settings)?;
    let limits = LoopLimits {
        warmup: seconds("warmup_s", settings.warmup_s)?,
        max_time: seconds("max_time_s", settings.max_time_s)?,
        target_ci_rel: settings.target_ci_rel,
        min_batches: settings.min_batches,
        batch: seconds("batch_s", settings.batch_s)?,
    };
    let (planned, mut skipped) =
        plan::plan(&machine.topology, &cpus, &settings.methods, &settings.pairs);
    if cpus.len() == 1 {
        let note = format!(
            "only one CPU ({cpus}) is available: only the same-cpu and unpinned placements can \
             be measured, and unpinned ends share that CPU"
        );
        progress.note(&note);
        conditions.notes.push(note);
    }
    let timer = Timer::detect(&machine.root);
    let mut runs = Vec::new();
    let mut failures = Vec::new();
    for (i, p) in planned.iter().enumerate() {
        // An interrupt stops the whole command (the doctor included), not just this run.
        crate::signals::check()?;
        let (a, b) = plan::cpus_of(p.placement);
        let where_ = report::cpus_label(a, b);
        progress.step(&format!(
            "[{}/{}] {} {} ({where_})",
            i + 1,
            planned.len(),
            p.method,
            p.class
        ));
        let spec = runner::RunSpec {
            root: &machine.root,
            planned: *p,
            endpoints: settings.endpoints,
            cpus: &cpus,
            limits,
            perf_counters: settings.perf_counters,
            timer,
            touch_bytes: settings.touch_bytes,
        };
        match run::run_one(&spec) {
            Ok(r) => runs.push(r),
            Err(e) => {
                progress.warn(&format!("{} {} failed: {e:#}", p.method, p.class));
                failures.push(format!("{e:#}"));
                skipped.push(SkippedRun {
                    method: p.method,
                    placement: p.class,
                    cpu_a: a,
                    cpu_b: b,
                    reason: format!("failed: {e:#}"),
                });
            }
        }
    }
    if runs.is_empty()
        && let Some(f) = failures.first()
    {
        bail!("every run failed; the first: {f}");
    }
    report::fill_ratios(&mut runs);
    note_unavailable(&mut conditions, &runs);
    if !settings.perf_counters {
        conditions.notes.push(PERF_OFF.to_string());
    }
    Ok(PingpongReport {
        conditions,
        settings: settings.clone(),
        cpus,
        timer,
        runs,
        skipped,
    })
}

/// A settings field as a duration; negative or non-finite values are bad input, not a panic.
fn seconds(field: &str, s: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| bad_input(format!("pingpong setting {field} = {s} is not a duration")))
}

/// Counters that could not be read, said once in the conditions rather than per run.
fn note_unavailable(conditions: &mut Conditions, runs: &[PingpongRun]) {
    let Some(r) = runs.first() else { return };
    for u in &r.counters.system.unavailable {
        conditions.notes.push(format!("counter unavailable: {u}"));
    }
    for (event, why) in &r.counters.initiator.perf_unavailable {
        conditions
            .notes
            .push(format!("perf event {event} unavailable: {why}"));
    }
    if let Some(why) = &r.counters.initiator.task_unavailable {
        conditions
            .notes
            .push(format!("per-thread counters unavailable: {why}"));
    }
}

/// The pingpong experiment behind the common interface.
pub struct Pingpong;

impl Experiment for Pingpong {
    type Settings = PingpongSettings;
    type Report = PingpongReport;
    const KIND: crate::report::envelope::Kind =
        crate::report::envelope::Kind::Experiment("pingpong");

    fn load_watch(machine: &Machine, settings: &PingpongSettings) -> Result<Option<LoadWatch>> {
        load_watch(machine, settings).map(Some)
    }

    fn measure(
        machine: &Machine,
        settings: &PingpongSettings,
        conditions: Conditions,
        progress: &Progress,
    ) -> Result<PingpongReport> {
        measure(machine, settings, conditions, progress)
    }

    fn conditions(report: &PingpongReport) -> &crate::machine::Conditions {
        &report.conditions
    }

    fn figures(report: &PingpongReport) -> Vec<Figure> {
        report::figures(report)
    }

    fn render_text(report: &PingpongReport, style: &crate::output::Style) -> String {
        render::render(report, style)
    }

    fn render_html(report: &PingpongReport) -> String {
        html::page(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The doctor's path: settings built in code, no command line.
    #[test]
    fn runs_from_settings_built_in_code() {
        let machine = Machine::detect(Path::new("/")).unwrap();
        let cpu = machine.allowed.first().unwrap();
        let mut s = PingpongSettings::quick(
            &[Method::Eventfd],
            PairSpec::List(vec![Placement::Pinned { a: cpu, b: cpu }]),
            0.05,
        );
        s.warmup_s = 0.01;
        s.load_check_s = 0.0;
        let lines = std::cell::RefCell::new(Vec::new());
        let sink = |_, l: &str| lines.borrow_mut().push(l.to_string());
        let r = Pingpong::run(&machine, &s, &Progress::new(&sink)).unwrap();
        assert_eq!(r.runs.len(), 1);
        assert_eq!(
            r.runs[0].placement,
            crate::topology::PlacementClass::SameCpu
        );
        assert!(lines.borrow().iter().any(|l| l.contains("eventfd")));
    }

    /// `--processes` pins the calling thread for the run and must give its affinity back.
    #[test]
    fn two_processes_leave_the_callers_affinity_as_it_was() {
        let machine = Machine::detect(Path::new("/")).unwrap();
        let before = crate::affinity::get(0).unwrap();
        let cpu = machine.allowed.first().unwrap();
        let s = PingpongSettings {
            endpoints: Endpoints::Processes,
            pairs: PairSpec::List(vec![
                Placement::Pinned { a: cpu, b: cpu },
                Placement::Unpinned,
            ]),
            warmup_s: 0.01,
            max_time_s: 0.05,
            load_check_s: 0.0,
            ..PingpongSettings::default()
        };
        let r = Pingpong::run(&machine, &s, &Progress::new(&crate::experiment::silent)).unwrap();
        assert_eq!(r.runs.len(), 2);
        assert!(r.runs[1].where_ran.as_ref().unwrap().samples > 0);
        assert_eq!(crate::affinity::get(0).unwrap(), before);
        // A half-pinned pair pins the calling thread as the initiator too.
        let s = PingpongSettings {
            pairs: PairSpec::List(vec![Placement::ResponderUnpinned { a: cpu }]),
            ..s
        };
        let r = Pingpong::run(&machine, &s, &Progress::new(&crate::experiment::silent)).unwrap();
        let w = r.runs[0].where_ran.as_ref().unwrap();
        assert_eq!(w.initiator_cpus.keys().copied().collect::<Vec<_>>(), [cpu]);
        assert_eq!(crate::affinity::get(0).unwrap(), before);
    }

    #[test]
    fn nonsense_durations_are_bad_input_not_panics() {
        let machine = Machine::detect(Path::new("/")).unwrap();
        let s = PingpongSettings {
            warmup_s: -1.0,
            ..PingpongSettings::default()
        };
        let e =
            Pingpong::run(&machine, &s, &Progress::new(&crate::experiment::silent)).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
    }
}
