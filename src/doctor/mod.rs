//! `cpulab doctor`: the investigation of the field notes in one command.
//!
//! The doctor probes the machine, chooses a battery of experiments from what the machine has
//! ([`battery`]), condenses each result into [`measurements`], and hands those to the [`rules`],
//! which name causes as [`findings`]. Measuring and judging are kept apart so every rule is a
//! pure function that can be tested on hand-built inputs, and so a saved doctor result can be
//! rendered again (`cpulab report`) exactly as it was judged.
//!
//! The doctor only observes: it changes no setting, and every process it starts ends with it.

pub mod adapt;
pub mod battery;
pub mod change;
pub mod figures;
pub mod findings;
pub mod html;
pub mod measured;
pub mod measurements;
pub mod messaging;
pub mod mode;
pub mod progress;
pub mod rules;
mod stages;
pub mod text;

use crate::machine::{Conditions, Machine};
use battery::{DoctorSettings, Mode};
use findings::Finding;
use measurements::{Facts, Measurements};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// The result of `cpulab doctor`; with its envelope, the JSON schema of `doctor --json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DoctorReport {
    /// Machine, time, allowed CPUs, background load, and what qualifies the figures.
    pub conditions: Conditions,
    /// `quick`, `default` or `thorough`.
    pub mode: Mode,
    /// Seconds the whole doctor run took, probe included (measured).
    pub duration_s: f64,
    /// The full machine fingerprint, as `cpulab probe --json` writes it.
    pub probe: crate::probe::Probe,
    /// The probe facts the rules used.
    pub facts: Facts,
    /// Every measurement, with raw samples.
    pub measurements: Measurements,
    /// Findings, most important first; empty when no effect exceeded its noise.
    pub findings: Vec<Finding>,
    /// Set when a signal stopped the run: the measurements and findings are partial (the
    /// stage named and every later one are missing). Absent on a complete run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<battery::Interruption>,
    /// Set by `doctor --replay`: whose measurements these are. Nothing was measured in this
    /// run. Absent on a measured run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed_from: Option<String>,
}

/// Probes, measures and judges.
pub fn run(
    machine: &Machine,
    settings: &DoctorSettings,
    progress_visible: bool,
    quiet: bool,
) -> DoctorReport {
    let t0 = Instant::now();
    // An interrupt is recorded rather than fatal (the dispatcher installed the handlers): every
    // stage checks for it, tears its processes down, and the doctor reports what it measured
    // before it.
    let (stages, mut skipped) = battery::plan(machine, settings);
    let total: f64 = 1.0 + stages.iter().map(|(_, s)| s).sum::<f64>();
    let progress = progress::Progress::new(total, progress_visible, quiet);
    progress.step("probing the machine");
    let probe = crate::probe::probe(machine);
    let facts = adapt::facts(&probe);
    let mut conditions = probe.conditions.clone();
    let mut other_busy = Default::default();
    let mut patient_busy = None;
    if settings.check_load {
        progress.step("checking for other load");
        let patient = settings.watch.as_ref().map(patient);
        let check = crate::counters::check_background_load_beside(
            &machine.root,
            &machine.allowed,
            std::time::Duration::from_millis(300),
            &|pid, name| patient.as_ref().is_some_and(|p| p(pid, name)),
        );
        // The watched application is the patient: its load is no neighbour's.
        other_busy = crate::counters::without_own(
            &check.other_busy_pct,
            check.patient_cpu_s,
            check.window_s,
        );
        patient_busy = settings
            .watch
            .as_ref()
            .map(|_| check.patient_cpu_s / check.window_s.max(1e-9) * 100.0);
        conditions.record_load(check);
    } else {
        conditions.load_not_checked();
    }
    progress.done(1.0);
    let end = t0 + std::time::Duration::from_secs_f64(settings.mode.total_s());
    let (mut m, interrupted): (Measurements, _) =
        battery::run(machine, settings, &stages, &progress, end);
    m.counters.other_busy_pct = other_busy;
    m.counters.patient_busy_pct = patient_busy;
    skipped.append(&mut m.skipped);
    m.skipped = skipped;
    progress.finish();
    if let Some(i) = &interrupted {
        conditions.notes.insert(
            0,
            format!(
                "INTERRUPTED by {} during {}: this result is partial; that stage and every later \
                 one were not measured",
                i.name, i.during
            ),
        );
    }
    let findings = rules::evaluate(rules::Inputs {
        facts: &facts,
        m: &m,
    });
    // After the findings, so the warning names the ones the load may have changed.
    if let Some(n) = rules::paradox::other_load_note(&m, facts.hypervisor.is_some(), &findings) {
        conditions.notes.push(n);
    }
    DoctorReport {
        conditions,
        mode: settings.mode,
        duration_s: t0.elapsed().as_secs_f64(),
        probe,
        facts,
        measurements: m,
        findings,
        interrupted,
        replayed_from: None,
    }
}

/// Judges measurements taken before (`doctor --replay`) against `machine`'s facts: the rules of
/// this cpulab on a saved run's figures, nothing measured. The conditions are this probe's, with
/// a note saying whose figures they are.
pub fn replay(machine: &Machine, m: Measurements, mode: Mode, source: &str) -> DoctorReport {
    let t0 = Instant::now();
    let probe = crate::probe::probe(machine);
    let facts = adapt::facts(&probe);
    let mut conditions = probe.conditions.clone();
    conditions.notes.insert(
        0,
        format!(
            "REPLAYED: nothing was measured in this run; every figure is from {source}, judged \
             against the facts of {}",
            machine.root.display()
        ),
    );
    let findings = rules::evaluate(rules::Inputs {
        facts: &facts,
        m: &m,
    });
    if let Some(n) = rules::paradox::other_load_note(&m, facts.hypervisor.is_some(), &findings) {
        conditions.notes.push(n);
    }
    DoctorReport {
        conditions,
        mode,
        duration_s: t0.elapsed().as_secs_f64(),
        probe,
        facts,
        measurements: m,
        findings,
        interrupted: None,
        replayed_from: Some(source.to_string()),
    }
}

/// A predicate over a process's pid and command name.
type ProcessFilter = Box<dyn Fn(i32, &str) -> bool>;

/// Which processes are the watched application, by pid and command name.
fn patient(t: &crate::watch::Target) -> ProcessFilter {
    use crate::watch::Target;
    match t.clone() {
        Target::Pids(p) => Box::new(move |pid, _| p.contains(&pid)),
        Target::Comms(c) => Box::new(move |_, name| c.contains(name)),
        Target::Cgroup(dir) => {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            let p = crate::watch::targets::parse_procs(&procs);
            Box::new(move |pid, _| p.contains(&pid))
        }
        Target::Command(root) => Box::new(move |pid, _| pid == root),
        Target::All => Box::new(|_, _| false),
    }
}
