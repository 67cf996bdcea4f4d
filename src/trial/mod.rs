//! `cpulab try`: a measured what-if trial of a remedy, with a restore that survives SIGKILL.
//!
//! The doctor names causes and lists remedies; a remedy is only advice until it is measured on
//! the machine in question. A trial applies one or more settings ([`setting::Setting`]), and
//! measures baseline (A) and changed (B) rounds interleaved, ABAB..., so whatever drifts on the
//! host during the run falls on both sides. Each round runs an experiment through the common
//! interface ([`crate::experiment::erased::Runnable`]) and yields [`Figure`]s; the comparison
//! takes each figure's round-level values (one per round: samples within a round are correlated)
//! and tests them with Welch's t-test, giving each side's 95% interval, the ratio, a verdict, and
//! for "no difference" the smallest effect the run could have detected. The cost of a change
//! (polling CPU time, a process's CPU time) is just another per-round figure.
//!
//! Nothing is left changed: [`session`] journals every original value on disk before the first
//! write and restores it on success, error, panic and signals, and a watchdog restores it when
//! cpulab is SIGKILLed. See [`journal`] for the file and the lock.

pub mod affinity;
pub mod changes;
pub mod compare;
pub mod cpufreq;
pub mod cpuidle;
pub mod doctor;
pub mod journal;
pub mod knobs;
pub mod lockdown;
pub mod measure;
pub mod ops;
pub mod parse;
pub mod precision;
pub mod recorded;
pub mod render;
pub mod session;
pub mod setting;
pub mod tuned;
pub mod values;

#[cfg(test)]
pub mod testing;

use crate::experiment::erased::Runnable;
use crate::experiment::{Experiment, Figure, Progress};
use crate::machine::{Conditions, Machine};
use crate::report::envelope::Kind;
use anyhow::Result;
use compare::Comparison;
use serde::{Deserialize, Serialize};
use setting::{Change, Permanent};
use std::path::PathBuf;

/// Validated settings of a trial.
pub struct TrialSettings {
    /// Root of /sys and /proc (`/` on the live machine; a fixture copy in tests).
    pub root: PathBuf,
    pub changes: Vec<Change>,
    /// Profile items that were not tried, with the reason.
    pub skipped: Vec<String>,
    /// Rounds per side at least (`goal.min_rounds`, at least 3), the change the trial sets out
    /// to be able to see, and its time limit.
    pub goal: precision::Goal,
    pub measure: Box<dyn Runnable>,
    /// What `measure` is, in words.
    pub measure_label: String,
    /// Leave the changed values in place at the end.
    pub keep: bool,
    /// Also try each change alone (tuned profiles: which items matter here).
    pub each: bool,
    /// The command line, for the journal.
    pub command: String,
}

/// Which side a round measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Side {
    Baseline,
    Changed,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Baseline => "baseline",
            Side::Changed => "changed",
        }
    }
}

/// One round: its side and every figure it produced.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Round {
    pub index: usize,
    pub side: Side,
    /// Seconds since the trial started.
    pub started_s: f64,
    pub figures: Vec<Figure>,
    /// The experiment's own verdict on background load for this round.
    pub noisy: bool,
    /// The experiment's check for other load before this round, when it made one: which CPU
    /// was how busy, so a noisy round can be told from a quiet one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_before: Option<crate::counters::LoadCheck>,
}

/// One setting as tried.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChangeRecord {
    pub setting: String,
    /// The value before the trial (as `--list` shows it).
    pub before: String,
    pub value: String,
    /// The profile it came from, if any.
    pub from: Option<String>,
    /// The exact writes, as a person would type them.
    pub writes: Vec<String>,
    pub survives_reboot: bool,
    pub permanent: Permanent,
}

/// One A/B trial: rounds and the comparison of their figures.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrialRun {
    /// The settings changed in the B rounds.
    pub settings: Vec<String>,
    pub rounds: Vec<Round>,
    pub comparisons: Vec<Comparison>,
    /// How many rounds the target took, or why adding them stopped short (`None` in trials
    /// saved before rounds were added to reach a target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<precision::Outcome>,
}

/// How the trial ended for the machine.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Restore {
    /// Every original value written back and read back as journalled.
    pub restored: bool,
    /// `--keep`: the changed values were left in place on purpose.
    pub kept: bool,
    /// With `--keep`: the writes that undo the change.
    pub undo: Vec<String>,
    pub notes: Vec<String>,
}

/// The result of `cpulab try`; this struct is the JSON schema.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrialReport {
    pub conditions: Conditions,
    /// What each round measured.
    pub measure: String,
    pub changes: Vec<ChangeRecord>,
    /// Items of a profile not tried, with the reason.
    pub skipped: Vec<String>,
    pub rounds_per_side: usize,
    /// All changes together.
    pub trial: TrialRun,
    /// Each change alone (`--each`).
    pub items: Vec<TrialRun>,
    /// The finding-style summary, one paragraph per line.
    pub summary: Vec<String>,
    pub restore: Restore,
}

/// The experiment kind of `try`.
pub struct Trial;

fn run_trial(
    machine: &Machine,
    session: &mut session::Session,
    changes: &[&Change],
    s: &TrialSettings,
    progress: &Progress,
) -> Result<TrialRun> {
    let t0 = std::time::Instant::now();
    let plans: Vec<(String, Vec<ops::Op>)> = changes
        .iter()
        .map(|c| Ok((c.setting.name(), c.setting.plan(&c.value)?)))
        .collect::<Result<_>>()?;
    let mut costs: Vec<measure::CostSampler> = Vec::new();
    for c in changes {
        let cost = c.setting.cost();
        if !costs.iter().any(|k| k.is(cost)) {
            costs.push(measure::CostSampler::new(cost, &s.root));
        }
    }
    // Every write once before measuring, so a setting this machine refuses (a restricted
    // debugfs, a read-only sysctl) fails before any round rather than after the first.
    for (name, ops) in &plans {
        session.apply(name, ops)?;
    }
    session.revert()?;
    let goal = &s.goal;
    let plan = RoundPlan {
        machine,
        changes,
        settings: s,
        progress,
        t0,
    };
    let mut rounds = Vec::new();
    // The minimum, then one A/B pair at a time while a figure could not yet have seen the
    // target and another pair fits the time limit (`precision`: never on the difference).
    let stopped = loop {
        let index = rounds.len();
        let side = if index % 2 == 0 {
            Side::Baseline
        } else {
            Side::Changed
        };
        let of = if index < 2 * goal.min_rounds {
            format!("{}", 2 * goal.min_rounds)
        } else {
            format!("more for ±{:.0}%", goal.target_rel * 100.0)
        };
        progress.step(&format!("round {}/{of} ({})", index + 1, side.as_str()));
        rounds.push(measure_round(&plan, session, &mut costs, side, index)?);
        if side == Side::Baseline || rounds.len() < 2 * goal.min_rounds {
            continue;
        }
        let elapsed = t0.elapsed().as_secs_f64();
        let pair_s = elapsed / (rounds.len() / 2) as f64;
        let cs = compare::compare_rounds(&rounds);
        let short = cs.iter().filter(|c| goal.short_of(c)).count();
        if let precision::Next::Stop(why) = precision::next(short, elapsed, pair_s, goal.max_time_s)
        {
            break why;
        }
    };
    let per_side = rounds.len() / 2;
    let elapsed_s = t0.elapsed().as_secs_f64();
    let mut comparisons = compare::compare_rounds(&rounds);
    precision::judge(
        &mut comparisons,
        goal,
        per_side,
        elapsed_s / per_side.max(1) as f64,
    );
    Ok(TrialRun {
        settings: changes
            .iter()
            .map(|c| format!("{}={}", c.setting.name(), c.value))
            .collect(),
        precision: Some(precision::Outcome {
            goal: goal.clone(),
            rounds_per_side: per_side,
            stopped,
            elapsed_s,
            inconclusive: comparisons
                .iter()
                .filter(|c| c.verdict == compare::Verdict::Inconclusive)
                .count(),
        }),
        comparisons,
        rounds,
    })
}

/// What every round of one A/B trial shares.
struct RoundPlan<'a> {
    machine: &'a Machine,
    changes: &'a [&'a Change],
    settings: &'a TrialSettings,
    progress: &'a Progress<'a>,
    t0: std::time::Instant,
}

/// One round: the side's values written, a moment to settle, the experiment and the costs.
fn measure_round(
    plan: &RoundPlan,
    session: &mut session::Session,
    costs: &mut [measure::CostSampler],
    side: Side,
    index: usize,
) -> Result<Round> {
    let (changes, progress) = (plan.changes, plan.progress);
    crate::signals::check()?;
    match side {
        Side::Baseline => {
            session.revert()?;
        }
        Side::Changed => {
            // Planned again at each flip: a process's affinity covers the threads it
            // started since (each journalled before it is written); a revert gives such
            // threads the process's original mask (`journal::newcomers`).
            for c in changes {
                session.apply(&c.setting.name(), &c.setting.plan(&c.value)?)?;
            }
        }
    }
    // Let adaptive mechanisms (halt-poll growth, governors) settle on the new value.
    crate::signals::sleep(std::time::Duration::from_millis(200))?;
    let started_s = plan.t0.elapsed().as_secs_f64();
    costs.iter_mut().for_each(|c| c.begin());
    let out = plan.settings.measure.run(
        plan.machine,
        &crate::experiment::Progress::new(&|l, m| progress.emit(l, m)),
    )?;
    let mut figures = out.figures;
    figures.extend(costs.iter_mut().filter_map(|c| c.end()));
    let load_before = out
        .document
        .pointer("/conditions/load_before")
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    Ok(Round {
        index,
        side,
        started_s,
        figures,
        noisy: out.noisy,
        load_before,
    })
}

/// A saved trial, as the registry lists it: rendered and compared as the experiment it is;
/// its command is the built-in `cpulab try`.
impl crate::experiment::erased::Listed for Trial {
    const KIND: Kind = Kind::Try;

    fn render_document(
        doc: &serde_json::Value,
        style: &crate::output::Style,
    ) -> Result<(String, String)> {
        crate::experiment::erased::render_as::<Trial>(doc, style)
    }

    fn figures_of_document(doc: &serde_json::Value) -> Result<Vec<crate::experiment::Figure>> {
        crate::experiment::erased::figures_as::<Trial>(doc)
    }
}

/// A setting that acts on nothing here can only be shown to change nothing: said at the start
/// and beside the result, so "no difference" is not read as a verdict on it.
fn inert_notes(changes: &[Change]) -> Vec<String> {
    changes
        .iter()
        .filter_map(|c| match c.setting.availability() {
            setting::Availability::Inert(why) => Some(format!(
                "{} acts on nothing here ({why}): no difference is expected, so this trial is \
                 no verdict on what it does where it acts",
                c.setting.name()
            )),
            _ => None,
        })
        .collect()
}

/// What each change is: its setting, the value before, the value tried and the writes it takes.
fn change_records(changes: &[Change]) -> Vec<ChangeRecord> {
    changes
        .iter()
        .map(|c| ChangeRecord {
            setting: c.setting.name(),
            before: c
                .setting
                .current()
                .unwrap_or_else(|e| format!("unreadable ({e:#})")),
            value: c.value.clone(),
            from: c.from.clone(),
            writes: c
                .setting
                .plan(&c.value)
                .map(|ops| ops.iter().map(ops::Op::shell).collect())
                .unwrap_or_default(),
            survives_reboot: c.setting.survives_reboot(),
            permanent: c.setting.permanent(&c.value),
        })
        .collect()
}

/// The note naming the rounds that saw other programs' load before measuring, if any did.
fn noisy_rounds(trial: &TrialRun) -> Option<String> {
    let noisy: Vec<String> = trial
        .rounds
        .iter()
        .filter(|r| r.noisy)
        .map(|r| {
            let side = if r.side == Side::Baseline {
                "baseline"
            } else {
                "changed"
            };
            match r.load_before.as_ref().and_then(|l| l.reason.as_ref()) {
                Some(why) => format!("round {} ({side}, {why})", r.index + 1),
                None => format!("round {} ({side})", r.index + 1),
            }
        })
        .collect();
    (!noisy.is_empty()).then(|| {
        format!(
            "{} of {} rounds saw other programs' load before measuring (cpulab's own processes not counted): {}; figures may be spoiled",
            noisy.len(),
            trial.rounds.len(),
            noisy.join("; ")
        )
    })
}

impl Experiment for Trial {
    type Settings = TrialSettings;
    type Report = TrialReport;
    const KIND: Kind = Kind::Try;

    /// None: a trial checks every round for other load itself (a round's load is its own).
    fn load_watch(_: &Machine, _: &TrialSettings) -> Result<Option<crate::experiment::LoadWatch>> {
        Ok(None)
    }

    fn measure(
        machine: &Machine,
        s: &TrialSettings,
        mut conditions: Conditions,
        progress: &Progress,
    ) -> Result<TrialReport> {
        let changes = change_records(&s.changes);
        for note in inert_notes(&s.changes) {
            progress.note(&note);
            conditions.notes.push(note);
        }
        let mut session = session::Session::begin(&s.root, &s.command, progress)?;
        let all: Vec<&Change> = s.changes.iter().collect();
        let trial = run_trial(machine, &mut session, &all, s, progress)?;
        let mut items = Vec::new();
        if s.each && s.changes.len() > 1 {
            for c in &s.changes {
                session.revert()?;
                progress.note(&format!("trying {} alone", c.setting.name()));
                items.push(run_trial(machine, &mut session, &[c], s, progress)?);
            }
        }
        let mut restore = Restore::default();
        if s.keep {
            // Leave the B values in place: apply them once more (the last round may have been A).
            for c in &s.changes {
                session.apply(&c.setting.name(), &c.setting.plan(&c.value)?)?;
            }
            let kept = session.keep()?;
            restore.kept = true;
            restore.undo = kept
                .iter()
                .map(|e| {
                    ops::Op {
                        target: e.target.clone(),
                        value: e.original.clone(),
                    }
                    .shell()
                })
                .collect();
        } else {
            restore.notes = session.finish()?;
            restore.restored = true;
        }
        if let Some(note) = noisy_rounds(&trial) {
            conditions.noisy = true;
            conditions.notes.push(note);
        }
        let mut report = TrialReport {
            conditions,
            measure: s.measure_label.clone(),
            changes,
            skipped: s.skipped.clone(),
            rounds_per_side: trial.rounds.len() / 2,
            trial,
            items,
            summary: Vec::new(),
            restore,
        };
        report.summary = render::summary(&report);
        Ok(report)
    }

    fn conditions(r: &TrialReport) -> &Conditions {
        &r.conditions
    }

    /// Each compared figure on both sides (round-level samples), and the ratio.
    fn figures(r: &TrialReport) -> Vec<Figure> {
        compare::figures(&r.trial.comparisons)
    }

    fn render_text(r: &TrialReport, style: &crate::output::Style) -> String {
        render::text(r, style)
    }

    fn render_html(r: &TrialReport) -> String {
        render::html(r)
    }
}
