//! `cpulab doctor --try`: each remedy that is a setting carries its `cpulab try` line; after the
//! battery, the doctor runs those trials (default measurement, 3 rounds per side) and writes
//! what they measured into the remedy.

use super::compare::Comparison;
use super::parse::parse_changes;
use super::precision::Goal;
use super::render::fmt;
use super::setting::Roots;
use super::{Trial, TrialReport, TrialSettings, measure};
use crate::doctor::findings::{Finding, TriedFigure};
use crate::experiment::{Experiment, Level, Progress};
use crate::machine::Machine;
use anyhow::Result;
use std::path::Path;

/// The comparisons `measured_line` speaks of, as data: the headline first, then each cost.
pub fn measured_figures(r: &TrialReport) -> Vec<TriedFigure> {
    let figure = |c: &Comparison| TriedFigure {
        label: c.label.clone(),
        unit: c.unit,
        baseline: c.baseline.clone(),
        changed: c.changed.clone(),
        ratio: c.ratio.clone(),
        verdict: c.verdict.as_str().to_string(),
        cost: is_cost(c),
    };
    headline(r)
        .into_iter()
        .chain(r.trial.comparisons.iter().filter(|c| is_cost(c)))
        .map(figure)
        .collect()
}

fn is_cost(c: &Comparison) -> bool {
    c.is_cost()
}

/// The comparison a remedy's measured line leads with: the non-cost figure surest to differ.
fn headline(r: &TrialReport) -> Option<&Comparison> {
    r.trial
        .comparisons
        .iter()
        .filter(|c| !is_cost(c))
        .min_by(|a, b| {
            a.p_value
                .unwrap_or(1.0)
                .total_cmp(&b.p_value.unwrap_or(1.0))
        })
}

/// "measured here: 48.2 us -> 5.9 us, 0.12x [0.10, 0.14], better; cost 0.196 CPU-s/s of polling".
pub fn measured_line(r: &TrialReport) -> String {
    let mut s = match headline(r) {
        Some(c) => format!(
            "measured here ({}): {} -> {}{}, {}",
            c.label,
            fmt(c.unit, c.baseline.mean),
            fmt(c.unit, c.changed.mean),
            c.ratio
                .as_ref()
                .map(|x| format!(", {:.2}x [{:.2}, {:.2}]", x.mean, x.ci95_low, x.ci95_high))
                .unwrap_or_default(),
            super::render::verdict_text(c)
        ),
        None => "measured here: no comparable figure".into(),
    };
    for c in r.trial.comparisons.iter().filter(|c| is_cost(c)) {
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

/// The goal of a remedy's trial: to see the change its finding predicts (held to
/// [`TRIAL_TARGET`]), else the standalone default; three rounds a side first.
pub fn goal_for(m: &crate::doctor::findings::Magnitude) -> Goal {
    let mut goal = Goal::default_with(3);
    if let (Some(p), Some(t)) = (m.predicted_change(), m.trial_target()) {
        goal.target_rel = t;
        goal.target_from = format!(
            "the finding's {:.1}x, a {:.0}% change{}",
            m.ratio.unwrap_or(1.0),
            p * 100.0,
            if p != t {
                format!(", held to {:.0}%", t * 100.0)
            } else {
                String::new()
            }
        );
    }
    goal
}

/// Runs the trial of every remedy that carries a `cpulab try` line (each distinct line once).
pub fn try_remedies(
    machine: &Machine,
    root: &Path,
    findings: &mut [Finding],
    quiet: bool,
) -> Result<()> {
    let mut done: Vec<(String, String, Vec<TriedFigure>)> = Vec::new();
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
            if let Some((_, m, figures)) = done.iter().find(|(l, _, _)| *l == line) {
                r.measured = Some(m.clone());
                r.measured_figures = figures.clone();
                continue;
            }
            crate::output::status(quiet, &format!("doctor --try: {line}"));
            let (args, each) = super::recorded::change_words(&line);
            let roots = Roots::new(root, None);
            let (measured, figures) = match parse_changes(&roots, &args) {
                Ok((changes, skipped)) => {
                    let subject = changes[0].setting.subject();
                    let s = TrialSettings {
                        root: root.to_path_buf(),
                        changes,
                        skipped,
                        goal: goal_for(&f.magnitude),
                        measure: measure::default_for(subject),
                        measure_label: measure::describe_default(subject),
                        keep: false,
                        each,
                        command: line.clone(),
                    };
                    match Trial::run(machine, &s, &Progress::new(&sink)) {
                        Ok(rep) => (measured_line(&rep), measured_figures(&rep)),
                        Err(e) if e.is::<crate::signals::Interrupted>() => return Err(e),
                        Err(e) => (format!("not measured: {e:#}"), Vec::new()),
                    }
                }
                Err(e) => (format!("not measured: {e:#}"), Vec::new()),
            };
            done.push((line, measured.clone(), figures.clone()));
            r.measured = Some(measured);
            r.measured_figures = figures;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored `try --json` of a command printing a request rate near 518,000/s (a script, not
    /// a server: the figures only need to be shaped like a real run's).
    fn stored() -> TrialReport {
        serde_json::from_str(include_str!("../../tests/fixtures/try-rate.json")).unwrap()
    }

    #[test]
    fn a_measured_remedy_carries_its_figures_as_numbers() {
        let r = stored();
        let figures = measured_figures(&r);
        let line = measured_line(&r);
        let head = &figures[0];
        assert!(!head.cost);
        assert!(line.contains(&head.label), "{line}");
        // The headline is the stored comparison surest to differ (wall time, p 0.38 against
        // the request rate's 0.42), each side the one measured on that side: its mean and
        // interval those of the rounds stored beside it, not the other side's.
        assert_eq!(head.label, "command wall time");
        crate::testing::assert_mean_ci_of(
            "baseline",
            &head.baseline,
            &[0.003292731, 0.002941928, 0.002940576],
        );
        crate::testing::assert_mean_ci_of(
            "changed",
            &head.changed,
            &[0.002947816, 0.003054336, 0.002719887],
        );
        let v = serde_json::to_value(head).unwrap();
        assert!(v["baseline"]["mean"].is_number() && v["changed"]["mean"].is_number());
        assert_eq!(v["verdict"], head.verdict.as_str());
    }

    fn magnitude(ratio: Option<f64>) -> crate::doctor::findings::Magnitude {
        crate::doctor::findings::Magnitude {
            text: String::new(),
            ratio,
            worse: None,
            better: None,
            unit: "ns".into(),
        }
    }

    /// A finding's ratio R predicts a change of 1 - 1/R of the worse figure; the trial sets
    /// out to see it, held to 2%..50%.
    #[test]
    fn a_remedys_trial_aims_at_the_change_its_finding_predicts() {
        assert_eq!(magnitude(Some(1.0)).predicted_change(), None);
        assert_eq!(magnitude(Some(f64::NAN)).predicted_change(), None);
        assert!((magnitude(Some(1.25)).predicted_change().unwrap() - 0.2).abs() < 1e-12);
        let g = goal_for(&magnitude(Some(1.25)));
        assert!((g.target_rel - 0.2).abs() < 1e-12);
        assert!(
            g.target_from.contains("1.2x") && g.target_from.contains("20%"),
            "{}",
            g.target_from
        );
        assert_eq!(g.min_rounds, 3);
        // 23.2x predicts 96%: held to half.
        let g = goal_for(&magnitude(Some(23.2)));
        assert_eq!(g.target_rel, 0.5);
        assert!(g.target_from.contains("held to 50%"), "{}", g.target_from);
        // 1.01x predicts 1%: held to 2%.
        assert_eq!(goal_for(&magnitude(Some(1.01))).target_rel, 0.02);
        // No ratio: the standalone default.
        assert_eq!(goal_for(&magnitude(None)), Goal::default_with(3));
    }
}
