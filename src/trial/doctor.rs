//! `cpulab doctor --try`: each remedy that is a setting carries its `cpulab try` line; after the
//! battery, the doctor runs those trials (default measurement, 3 rounds per side) and writes
//! what they measured into the remedy.

use super::render::fmt;
use super::setting::{Roots, parse_changes};
use super::{Trial, TrialReport, TrialSettings, measure};
use crate::doctor::findings::Finding;
use crate::experiment::{Experiment, Level, Progress};
use crate::machine::Machine;
use anyhow::Result;
use std::path::Path;

/// "measured here: 48.2 us -> 5.9 us, 0.12x [0.10, 0.14], better; cost 0.196 CPU-s/s of polling".
pub fn measured_line(r: &TrialReport) -> String {
    let main = r
        .trial
        .comparisons
        .iter()
        .filter(|c| !c.name.starts_with("cost."))
        .min_by(|a, b| {
            a.p_value
                .unwrap_or(1.0)
                .total_cmp(&b.p_value.unwrap_or(1.0))
        });
    let mut s = match main {
        Some(c) => format!(
            "measured here ({}): {} -> {}{}, {}",
            c.label,
            fmt(c.unit, c.baseline.mean),
            fmt(c.unit, c.changed.mean),
            c.ratio
                .as_ref()
                .map(|x| format!(", {:.2}x [{:.2}, {:.2}]", x.mean, x.ci95_low, x.ci95_high))
                .unwrap_or_default(),
            c.verdict.as_str()
        ),
        None => "measured here: no comparable figure".into(),
    };
    for c in r
        .trial
        .comparisons
        .iter()
        .filter(|c| c.name.starts_with("cost."))
    {
        s += &format!(
            "; cost {} -> {} ({})",
            fmt(c.unit, c.baseline.mean),
            fmt(c.unit, c.changed.mean),
            c.label
        );
    }
    if r.conditions.noisy {
        s += "; other load during some rounds";
    }
    s
}

/// Runs the trial of every remedy that carries a `cpulab try` line (each distinct line once).
pub fn try_remedies(
    machine: &Machine,
    root: &Path,
    findings: &mut [Finding],
    quiet: bool,
) -> Result<()> {
    let mut done: Vec<(String, String)> = Vec::new();
    let sink = move |level: Level, msg: &str| {
        if level != Level::Step {
            crate::output::status(quiet, &format!("try: {msg}"));
        }
    };
    for f in findings.iter_mut() {
        for r in f.remedies.iter_mut() {
            let Some(line) = r.try_command.clone() else {
                continue;
            };
            // A line with a placeholder (`pid:<pid>.affinity`) is for the user to fill in.
            if line.contains('<') {
                continue;
            }
            if let Some((_, m)) = done.iter().find(|(l, _)| *l == line) {
                r.measured = Some(m.clone());
                continue;
            }
            crate::output::status(quiet, &format!("doctor --try: {line}"));
            let words = shell_words::split(&line).unwrap_or_default();
            let each = words.iter().any(|w| w == "--each");
            let args: Vec<String> = words
                .into_iter()
                .skip(2)
                .filter(|w| w != "--each")
                .collect();
            let roots = Roots::new(root, None);
            let measured = match parse_changes(&roots, &args) {
                Ok((changes, skipped)) => {
                    let subject = changes[0].setting.subject();
                    let s = TrialSettings {
                        root: root.to_path_buf(),
                        changes,
                        skipped,
                        rounds: 3,
                        measure: measure::default_for(subject),
                        measure_label: measure::describe_default(subject),
                        keep: false,
                        each,
                        command: line.clone(),
                    };
                    match Trial::run(machine, &s, &Progress::new(&sink)) {
                        Ok(rep) => measured_line(&rep),
                        Err(e) if e.is::<crate::pair::signals::Interrupted>() => return Err(e),
                        Err(e) => format!("not measured: {e:#}"),
                    }
                }
                Err(e) => format!("not measured: {e:#}"),
            };
            done.push((line, measured.clone()));
            r.measured = Some(measured);
        }
    }
    Ok(())
}
