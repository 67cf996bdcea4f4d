//! `cpulab history check`: did the newest run of each kind get worse, and what changed with it?
//!
//! **The series.** For the newest run of a kind, the earlier runs of that kind on the same
//! hardware key (CPU model, topology, virtualisation), the last `window` of them, oldest first;
//! each run gives each figure one value (its mean). Runs are the unit because run-to-run
//! variation (another boot, another day, other neighbours) is the noise a history has to rise
//! above; the batches inside one run are less varied than that.
//!
//! **The test** ([`split`]), fit for few runs: the series is split where one shift of the mean
//! fits it best (least squares: *before* has at least two runs, *after* ends with the newest),
//! and the two sides are tested: Welch's t-test when *after* has two runs or more, a prediction
//! interval of *before* when the newest run stands alone (`t = (x - mean) / (sd * sqrt(1 +
//! 1/n))`, n - 1 degrees of freedom). It is reported when p < [`ALPHA`] (stricter than a single
//! comparison's 0.05, since the split was chosen by looking at the series) **and** the means differ by
//! at least the minimum effect (`--threshold`, 5% by default), so a tight but tiny move, or a
//! wide one inside the noise, raises no alarm. The same history always gives the same answer.
//!
//! **The cause.** The fingerprint facts of the last run before the split and the first run after
//! it are compared; each fact that differs is named, ranked by how many of cpulab's own doctor
//! rules tie that fact to this figure ([`LINKS`], read from `src/doctor/rules/`), with the
//! `cpulab try` line that puts the earlier value back for a measured A/B where `try` knows the
//! setting. No fact changed: the check says so and names what the fingerprint cannot see.

use super::fingerprint::{self, Changed};
use super::store::{Filter, Run, Store};
use crate::experiment::{Direction, Figure, Unit};
use anyhow::Result;
use serde::Serialize;
use std::collections::BTreeMap;

/// Significance level of a change in a series.
pub const ALPHA: f64 = 0.01;

/// What the fingerprint cannot see: said whenever figures moved and no fact did.
pub const UNSEEN: &str = "no configuration change in the fingerprint between these runs; what it \
cannot see: other guests on the host (neighbours), steal and the host's own load, the host's \
settings and firmware, thermal state, and the workload's own input";

/// The check's settings.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Settings {
    /// Runs of the series, the newest included.
    pub window: usize,
    /// The minimum effect, in percent of the earlier mean.
    pub threshold_pct: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            window: 20,
            threshold_pct: 5.0,
        }
    }
}

/// Where a series changed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Split {
    /// Index of the first value after the change.
    pub at: usize,
    pub before_mean: f64,
    pub after_mean: f64,
    pub p_value: f64,
    /// `welch` or `prediction` (the newest run alone against the earlier ones).
    pub test: &'static str,
}

fn mean_sd(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let m = x.iter().sum::<f64>() / n;
    let var = if x.len() > 1 {
        x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (m, var.sqrt())
}

fn t_p(t: f64, df: f64) -> f64 {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    if !t.is_finite() {
        return 0.0;
    }
    StudentsT::new(0.0, 1.0, df.max(1.0))
        .map(|d| 2.0 * (1.0 - d.cdf(t.abs())))
        .unwrap_or(1.0)
}

fn test(before: &[f64], after: &[f64]) -> (f64, &'static str) {
    let (mb, sb) = mean_sd(before);
    let (ma, sa) = mean_sd(after);
    if after.len() == 1 {
        let se = sb * (1.0 + 1.0 / before.len() as f64).sqrt();
        let p = if se == 0.0 {
            if ma == mb { 1.0 } else { 0.0 }
        } else {
            t_p((ma - mb) / se, before.len() as f64 - 1.0)
        };
        return (p, "prediction");
    }
    let (vb, va) = (sb * sb / before.len() as f64, sa * sa / after.len() as f64);
    let se = (vb + va).sqrt();
    let p = if se == 0.0 {
        if ma == mb { 1.0 } else { 0.0 }
    } else {
        // Welch-Satterthwaite degrees of freedom.
        let df = (vb + va).powi(2)
            / (vb.powi(2) / (before.len() as f64 - 1.0) + va.powi(2) / (after.len() as f64 - 1.0))
                .max(f64::MIN_POSITIVE);
        t_p((ma - mb) / se, df)
    };
    (p, "welch")
}

/// Sum of squared deviations from the mean.
pub fn sse(x: &[f64]) -> f64 {
    let m = x.iter().sum::<f64>() / x.len() as f64;
    x.iter().map(|v| (v - m).powi(2)).sum()
}

/// Where a single shift of the mean fits `values` best: the split leaving at least `min_before`
/// and `min_after` values that minimises the two segments' squared deviations (the
/// least-squares estimate of one change point). On a tie, the later split.
pub fn best_split(values: &[f64], min_before: usize, min_after: usize) -> Option<usize> {
    let n = values.len();
    (min_before..=n.checked_sub(min_after)?)
        .map(|at| (at, sse(&values[..at]) + sse(&values[at..])))
        .fold(None, |best: Option<(usize, f64)>, (at, e)| match best {
            Some((_, b)) if b < e => best,
            _ => Some((at, e)),
        })
        .map(|(at, _)| at)
}

/// The change in `values` that ends with the last one, if its best split passes the test and
/// the minimum effect (pure, deterministic).
pub fn split(values: &[f64], threshold_pct: f64) -> Option<Split> {
    split_at(values, best_split(values, 2, 1)?, threshold_pct)
}

/// The same test at a split known from elsewhere (`cpulab fleet`: where a machine fact
/// changed): a change when the two sides pass the test and the minimum effect (pure).
pub fn split_at(values: &[f64], at: usize, threshold_pct: f64) -> Option<Split> {
    if at < 2 || at >= values.len() {
        return None;
    }
    let (before, after) = values.split_at(at);
    let (mb, _) = mean_sd(before);
    let (ma, _) = mean_sd(after);
    if mb == 0.0 || ((ma / mb - 1.0) * 100.0).abs() < threshold_pct {
        return None;
    }
    let (p, name) = test(before, after);
    (p < ALPHA).then_some(Split {
        at,
        before_mean: mb,
        after_mean: ma,
        p_value: p,
        test: name,
    })
}

/// Figure name prefixes (the name before `[`) by what they measure.
const WAKEUP: &[&str] = &[
    "rtt_ns",
    "p50_ns",
    "p99_ns",
    "messages_per_s",
    "per_s",
    "metric",
    "idle_entries_per_round_trip",
    "irq_RES_per_round_trip",
    "irq_CAL_per_round_trip",
];
const ENTRY_COSTS: &[&str] = &["cost_ns"];
const FREQUENCY: &[&str] = &[
    "cold_mhz",
    "warm_mhz",
    "ramp_up_s",
    "cold_speed",
    "warm_speed",
    "cost_ns",
];
const PARALLEL: &[&str] = &["speedup", "share", "time_s", "relative", "cfs_throttled_s"];

/// Which doctor rule ties which fact (by name prefix) to which figures: read from what each rule
/// in `src/doctor/rules/` uses (its probe facts and its measurements). A fact linked to a figure
/// by more rules ranks first among the facts that changed with it.
pub const LINKS: &[(&str, &[&str], &str)] = &[
    ("haltpoll.", WAKEUP, "cross-cpu-wakeup"),
    ("haltpoll.", WAKEUP, "environment"),
    ("kvm.halt_poll_ns", WAKEUP, "cross-cpu-wakeup"),
    ("cpuidle.driver", WAKEUP, "cross-cpu-wakeup"),
    ("cpuidle.driver", WAKEUP, "environment"),
    ("cpuidle.disabled_states", WAKEUP, "environment"),
    ("hypervisor", WAKEUP, "cross-cpu-wakeup"),
    ("hypervisor", WAKEUP, "load-makes-it-faster"),
    ("hypervisor", ENTRY_COSTS, "kernel-entry-cost"),
    ("mitigations", ENTRY_COSTS, "kernel-entry-cost"),
    ("vulnerability.", ENTRY_COSTS, "kernel-entry-cost"),
    ("cmdline", ENTRY_COSTS, "kernel-entry-cost"),
    ("cpufreq.governor", FREQUENCY, "frequency-ramp"),
    ("cpufreq.governor", WAKEUP, "environment"),
    ("cpufreq.epp", FREQUENCY, "frequency-ramp"),
    // tuned sets the governor and the energy preference (field notes D).
    ("tuned.profile", FREQUENCY, "frequency-ramp"),
    ("cgroup.cpu_quota_cpus", PARALLEL, "cpu-quota-throttling"),
    ("cpus.allowed", PARALLEL, "restricted-cpu-set"),
    ("cpus.allowed", WAKEUP, "app-placement"),
    ("cpus.allowed", WAKEUP, "load-makes-it-faster"),
    ("smt.control", PARALLEL, "parallel-contention"),
];

fn family(figure: &str) -> &str {
    figure.split('[').next().unwrap_or(figure)
}

/// The doctor rules that tie `fact` to `figure`.
pub fn rules_linking(fact: &str, figure: &str) -> Vec<&'static str> {
    let fam = family(figure);
    LINKS
        .iter()
        .filter(|(prefix, figures, _)| {
            (fact == *prefix || (prefix.ends_with('.') && fact.starts_with(prefix)))
                && figures.contains(&fam)
        })
        .map(|(_, _, rule)| *rule)
        .collect()
}

/// The `cpulab try` line that puts `fact` back to `before` for a measured A/B, where try knows
/// the setting; `kind` picks the measurement when `try --measure` runs it (one of the
/// registry's experiments that are subcommands).
pub fn try_command(fact: &str, before: &str, kind: &str) -> Option<String> {
    let one_file = fact.starts_with("haltpoll.")
        || fact.starts_with("kernel.sched_")
        || fact.starts_with("sched.")
        || fact == "smt.control";
    // A governor or preference that differed between policies has no one value to put back.
    let per_policy = matches!(fact, "cpufreq.governor" | "cpufreq.epp") && !before.contains(',');
    let setting = if one_file || per_policy {
        format!("{fact}={before}")
    } else if fact == "cpufreq.boost" {
        format!("cpufreq.boost={}", if before == "true" { 1 } else { 0 })
    } else if fact == "tuned.profile" {
        format!("tuned:{before}")
    } else {
        return None;
    };
    // The kinds `try --measure NAME` runs are the registry's experiments that are subcommands
    // (what `try` is handed as its catalogue), so a new experiment is measured here too.
    let measure = if crate::registry::command_named(kind).is_some() {
        format!(" --measure {kind}")
    } else {
        String::new()
    };
    Some(format!("cpulab try {setting}{measure}"))
}

/// A changed fact named as a possible cause.
#[derive(Clone, Debug, Serialize)]
pub struct Cause {
    #[serde(flatten)]
    pub change: Changed,
    /// The doctor rules that tie this fact to this figure (its rank: more first).
    pub rules: Vec<&'static str>,
    /// The trial that would confirm it, where `cpulab try` knows the setting.
    pub try_command: Option<String>,
}

/// Whether the move is a regression.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Worse,
    Better,
    /// Neither direction is better for this figure.
    Changed,
}

/// A figure whose series changed.
#[derive(Clone, Debug, Serialize)]
pub struct Change {
    pub figure: String,
    pub label: String,
    pub unit: Unit,
    pub direction: Direction,
    pub verdict: Verdict,
    /// Change of the mean, after against before, in percent of before.
    pub change_pct: f64,
    #[serde(flatten)]
    pub split: Split,
    /// The runs on either side of the change.
    pub last_before: i64,
    pub first_after: i64,
    pub runs_before: usize,
    pub runs_after: usize,
    /// Facts that changed between `last_before` and `first_after`, most often linked first.
    pub causes: Vec<Cause>,
    /// Set when no fact changed.
    pub no_configuration_change: Option<String>,
    /// Runs of this figure's series whose conditions say background load may have spoiled
    /// them: a change they take part in may be the load's rather than the configuration's.
    pub noisy_runs: Vec<i64>,
}

/// The check of one kind's newest run.
#[derive(Clone, Debug, Serialize)]
pub struct KindCheck {
    pub kind: String,
    pub hardware_key: String,
    pub newest_run: i64,
    /// Runs in the series, the newest included.
    pub runs: usize,
    pub changes: Vec<Change>,
    /// Why nothing was tested, when so.
    pub note: Option<String>,
}

/// The whole check.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub settings: Settings,
    pub method: String,
    pub kinds: Vec<KindCheck>,
    /// Figures worse beyond the threshold: `kind figure`.
    pub regressions: Vec<String>,
}

pub const METHOD: &str = "each figure's per-run means over the newest run's series (same kind, \
same hardware key), split where one shift of the mean fits best (least squares; before has at \
least 2 runs, after ends with the newest); Welch's t-test on the two sides, or a prediction \
interval when the newest run stands alone; a change when p < 0.01 and the means differ by at \
least the threshold";

/// One run with what the check reads of it.
#[derive(Clone, Debug)]
pub struct Point {
    pub run: Run,
    pub facts: fingerprint::Facts,
    pub figures: Vec<Figure>,
}

/// Checks one series (oldest first, the newest last) (pure).
pub fn check_series(points: &[Point], settings: &Settings) -> Vec<Change> {
    let Some(newest) = points.last() else {
        return Vec::new();
    };
    let kind = newest.run.kind.as_str();
    let mut out = Vec::new();
    for fig in &newest.figures {
        // The figure's value in every run that has it, in order.
        let series: Vec<(usize, f64)> = points
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                p.figures
                    .iter()
                    .find(|f| f.name == fig.name)
                    .map(|f| (i, f.value))
            })
            .filter(|(_, v)| v.is_finite())
            .collect();
        let values: Vec<f64> = series.iter().map(|(_, v)| *v).collect();
        let noisy_runs: Vec<i64> = series
            .iter()
            .filter(|(i, _)| points[*i].run.noisy)
            .map(|(i, _)| points[*i].run.id)
            .collect();
        let Some(s) = split(&values, settings.threshold_pct) else {
            continue;
        };
        let (ib, ia) = (series[s.at - 1].0, series[s.at].0);
        let change_pct = (s.after_mean / s.before_mean - 1.0) * 100.0;
        let verdict = match fig.direction {
            Direction::Neither => Verdict::Changed,
            Direction::LowerIsBetter if change_pct > 0.0 => Verdict::Worse,
            Direction::HigherIsBetter if change_pct < 0.0 => Verdict::Worse,
            _ => Verdict::Better,
        };
        let mut causes: Vec<Cause> = fingerprint::changed(&points[ib].facts, &points[ia].facts)
            .into_iter()
            .map(|c| Cause {
                rules: rules_linking(&c.fact, &fig.name),
                try_command: c
                    .before
                    .as_deref()
                    .and_then(|b| try_command(&c.fact, b, kind)),
                change: c,
            })
            .collect();
        // Most rules first; equal ones keep the facts' name order (stable sort).
        causes.sort_by_key(|c| std::cmp::Reverse(c.rules.len()));
        out.push(Change {
            figure: fig.name.clone(),
            label: fig.label.clone(),
            unit: fig.unit,
            direction: fig.direction,
            verdict,
            change_pct,
            last_before: points[ib].run.id,
            first_after: points[ia].run.id,
            runs_before: s.at,
            runs_after: values.len() - s.at,
            no_configuration_change: causes.is_empty().then(|| UNSEEN.to_string()),
            causes,
            split: s,
            noisy_runs,
        });
    }
    // Regressions first, the largest first.
    out.sort_by(|a, b| {
        (a.verdict != Verdict::Worse)
            .cmp(&(b.verdict != Verdict::Worse))
            .then(b.change_pct.abs().total_cmp(&a.change_pct.abs()))
    });
    out
}

/// Reads the series of the newest run of every kind (or of `kind`) and checks each.
pub fn run(store: &Store, kind: Option<&str>, settings: &Settings) -> Result<Report> {
    let all = store.list(&Filter {
        kind: kind.map(String::from),
        ..Default::default()
    })?;
    let mut newest: BTreeMap<&str, &Run> = BTreeMap::new();
    for r in &all {
        newest.insert(&r.kind, r);
    }
    let mut kinds = Vec::new();
    let mut regressions = Vec::new();
    for (k, last) in newest {
        let mut series: Vec<&Run> = all
            .iter()
            .filter(|r| r.kind == k && r.hardware_key == last.hardware_key)
            .collect();
        let skip = series.len().saturating_sub(settings.window.max(3));
        series.drain(..skip);
        let points: Vec<Point> = series
            .iter()
            .map(|r| {
                Ok(Point {
                    run: (*r).clone(),
                    facts: store.facts(r.id)?,
                    figures: store.figures(r.id)?,
                })
            })
            .collect::<Result<_>>()?;
        let note = (points.len() < 3).then(|| {
            format!(
                "{} run(s) on this hardware: a change needs at least 2 earlier runs",
                points.len()
            )
        });
        let changes = check_series(&points, settings);
        for c in &changes {
            if c.verdict == Verdict::Worse {
                regressions.push(format!("{k} {}", c.figure));
            }
        }
        kinds.push(KindCheck {
            kind: k.to_string(),
            hardware_key: last.hardware_key.clone(),
            newest_run: last.id,
            runs: points.len(),
            changes,
            note,
        });
    }
    Ok(Report {
        settings: *settings,
        method: METHOD.to_string(),
        kinds,
        regressions,
    })
}

/// A figure's value in its unit, for people.
pub fn fmt_value(unit: Unit, v: f64) -> String {
    match unit {
        Unit::Nanoseconds => crate::output::fmt_ns(v),
        Unit::Share => format!("{:.1}%", v * 100.0),
        _ if v.abs() >= 100.0 => format!("{v:.0}{}", unit.suffix()),
        // A rate far below one (interrupts per round trip) keeps three significant digits.
        _ if v != 0.0 && v.abs() < 0.01 => format!("{v:.2e}{}", unit.suffix()),
        _ => format!("{v:.3}{}", unit.suffix()),
    }
}

/// The check for people: the changes that share a split and the same named facts are one
/// block, so a cause that moved twenty figures is said once.
pub fn render(r: &Report) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for k in &r.kinds {
        let _ = writeln!(
            s,
            "{}: newest run @{}, {} run(s) on {}",
            k.kind, k.newest_run, k.runs, k.hardware_key
        );
        if let Some(n) = &k.note {
            let _ = writeln!(s, "  {n}");
            continue;
        }
        if k.changes.is_empty() {
            let _ = writeln!(
                s,
                "  no change beyond noise and the {}% threshold",
                r.settings.threshold_pct
            );
        }
        for (_, changes) in &blocks_of(&k.changes) {
            render_block(&mut s, changes);
        }
    }
    if !r.regressions.is_empty() {
        let _ = writeln!(
            s,
            "\n{} regression(s) beyond the {}% threshold",
            r.regressions.len(),
            r.settings.threshold_pct
        );
    }
    s
}

/// The changes grouped by the runs they fall between and their causes, in the order of each
/// group's first (most important) change.
fn blocks_of(changes: &[Change]) -> Vec<(String, Vec<&Change>)> {
    let mut blocks: Vec<(String, Vec<&Change>)> = Vec::new();
    for c in changes {
        let key = format!(
            "{}>{}:{}",
            c.last_before,
            c.first_after,
            c.causes
                .iter()
                .map(|x| format!("{}{:?}", x.change, x.rules))
                .collect::<Vec<_>>()
                .join(";")
        );
        match blocks.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(c),
            None => blocks.push((key, vec![c])),
        }
    }
    blocks
}

/// One group of changes: the figures, the runs under load, and what changed with them.
fn render_block(s: &mut String, changes: &[&Change]) {
    use std::fmt::Write;
    let first = changes[0];
    let _ = writeln!(
        s,
        "  from run @{} on ({} run(s) before, {} after):",
        first.first_after, first.runs_before, first.runs_after
    );
    for c in changes {
        let word = match c.verdict {
            Verdict::Worse => "WORSE",
            Verdict::Better => "better",
            Verdict::Changed => "changed",
        };
        let _ = writeln!(
            s,
            "    {word} {:+.1}%  {}  {} -> {}  ({} p={:.1e})",
            c.change_pct,
            c.figure,
            fmt_value(c.unit, c.split.before_mean),
            fmt_value(c.unit, c.split.after_mean),
            c.split.test,
            c.split.p_value
        );
    }
    let mut noisy: Vec<i64> = changes
        .iter()
        .flat_map(|c| c.noisy_runs.iter().copied())
        .collect();
    noisy.sort_unstable();
    noisy.dedup();
    if !noisy.is_empty() {
        let ids: Vec<String> = noisy.iter().map(|i| format!("@{i}")).collect();
        let _ = writeln!(
            s,
            "    under background load (their conditions say so): {}; the change may \
             be the load's, not the configuration's: measure again on a quiet machine",
            ids.join(", ")
        );
    }
    if let Some(n) = &first.no_configuration_change {
        let _ = writeln!(s, "    {n}");
        return;
    }
    let line: Vec<String> = first.causes.iter().map(|x| x.change.to_string()).collect();
    let _ = writeln!(s, "    changed with it: {}", line.join("; "));
    for x in &first.causes {
        let rules = if x.rules.is_empty() {
            "no doctor rule ties it to these figures".to_string()
        } else {
            format!("doctor rules: {}", x.rules.join(", "))
        };
        let _ = writeln!(s, "    - {} ({rules})", x.change);
        if let Some(t) = &x.try_command {
            let _ = writeln!(s, "      confirm: {t}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(kernel: &str, governor: &str, mitigations: &str) -> fingerprint::Facts {
        [
            ("kernel", kernel),
            ("cpufreq.governor", governor),
            ("mitigations", mitigations),
            ("smt.control", "on"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into()
    }

    fn point(id: i64, f: fingerprint::Facts, rtt: f64, cost: f64) -> Point {
        let fig = |name: &str, v: f64| {
            Figure::from_samples(
                name,
                name,
                Unit::Nanoseconds,
                Direction::LowerIsBetter,
                vec![v * 0.99, v, v * 1.01],
            )
            .unwrap()
        };
        Point {
            run: Run {
                id,
                time_unix_s: id * 3600,
                kind: "doctor".into(),
                host_key: "h".into(),
                hardware_key: "hw".into(),
                command_line: "cpulab doctor".into(),
                noisy: false,
            },
            facts: f,
            figures: vec![
                fig("rtt_ns[method=pipe,class=shared-llc,cpus=0:1]", rtt),
                fig("cost_ns[name=syscall_getppid]", cost),
            ],
        }
    }

    /// A change whose runs were taken under background load says so, with their ids, in the
    /// JSON and in the text; the same change on quiet runs does not.
    #[test]
    fn a_change_on_runs_under_load_names_them() {
        let series = |noisy_after: bool| -> Vec<Point> {
            (0..8)
                .map(|i| {
                    let k = if i < 5 { 1.0 } else { 1.3 };
                    let mut p = point(
                        i,
                        facts("6.1", "performance", "auto"),
                        40_000.0 * k * noise(i),
                        100.0 * noise(i),
                    );
                    p.run.noisy = noisy_after && i >= 5;
                    p
                })
                .collect()
        };
        let report = |points: &[Point]| Report {
            settings: Settings::default(),
            method: METHOD.into(),
            kinds: vec![KindCheck {
                kind: "doctor".into(),
                hardware_key: "hw".into(),
                newest_run: 7,
                runs: points.len(),
                changes: check_series(points, &Settings::default()),
                note: None,
            }],
            regressions: Vec::new(),
        };
        let loaded = series(true);
        let c = check_series(&loaded, &Settings::default());
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].noisy_runs, [5, 6, 7]);
        let text = render(&report(&loaded));
        assert!(
            text.contains("under background load (their conditions say so): @5, @6, @7"),
            "{text}"
        );
        let quiet = series(false);
        assert!(
            check_series(&quiet, &Settings::default())[0]
                .noisy_runs
                .is_empty()
        );
        assert!(!render(&report(&quiet)).contains("background load"));
    }

    #[test]
    fn small_rates_keep_their_digits() {
        assert_eq!(
            fmt_value(Unit::PerOperation, 0.000021),
            format!("2.10e-5{}", Unit::PerOperation.suffix())
        );
        assert_eq!(
            fmt_value(Unit::PerOperation, 0.0),
            format!("0.000{}", Unit::PerOperation.suffix())
        );
    }

    /// Deterministic noise of about +-2%.
    fn noise(i: i64) -> f64 {
        [1.0, 1.018, 0.985, 1.007, 0.992, 1.013, 0.981, 1.004][i as usize % 8]
    }

    /// Field notes D: the same job 13% slower after CentOS 6 -> 7; the kernel, the governor
    /// and the mitigations changed with it.
    #[test]
    fn field_notes_d_finds_the_regression_and_names_the_three_facts() {
        let mut points = Vec::new();
        for i in 0..6 {
            points.push(point(
                i,
                facts("2.6.32", "performance", "off"),
                40_000.0 * noise(i),
                100.0 * noise(i + 3),
            ));
        }
        for i in 6..9 {
            points.push(point(
                i,
                facts("3.10", "powersave", "auto"),
                40_000.0 * 1.13 * noise(i),
                100.0 * 1.13 * noise(i + 3),
            ));
        }
        let changes = check_series(&points, &Settings::default());
        assert_eq!(changes.len(), 2, "{changes:#?}");
        for c in &changes {
            assert_eq!(c.verdict, Verdict::Worse);
            assert!((c.change_pct - 13.0).abs() < 2.0, "{}", c.change_pct);
            assert_eq!((c.last_before, c.first_after), (5, 6));
            let named: Vec<&str> = c.causes.iter().map(|x| x.change.fact.as_str()).collect();
            for f in ["kernel", "cpufreq.governor", "mitigations"] {
                assert!(named.contains(&f), "{named:?}");
            }
            assert!(!named.contains(&"smt.control"));
        }
        // The syscall cost: mitigations and the governor each have a rule, the kernel none.
        let cost = changes
            .iter()
            .find(|c| c.figure.starts_with("cost_ns"))
            .unwrap();
        assert_eq!(cost.causes.last().unwrap().change.fact, "kernel");
        let gov = cost
            .causes
            .iter()
            .find(|c| c.change.fact == "cpufreq.governor")
            .unwrap();
        assert_eq!(
            gov.try_command.as_deref(),
            Some("cpulab try cpufreq.governor=performance")
        );
        assert_eq!(
            gov.change.to_string(),
            "cpufreq.governor performance -> powersave"
        );
    }

    #[test]
    fn the_same_shift_with_no_fact_changed_says_no_configuration_change() {
        let points: Vec<Point> = (0..9)
            .map(|i| {
                let k = if i < 6 { 1.0 } else { 1.13 };
                point(
                    i,
                    facts("3.10", "powersave", "auto"),
                    40_000.0 * k * noise(i),
                    100.0 * k * noise(i + 3),
                )
            })
            .collect();
        let changes = check_series(&points, &Settings::default());
        assert_eq!(changes.len(), 2);
        for c in changes {
            assert!(c.causes.is_empty());
            assert!(
                c.no_configuration_change
                    .unwrap()
                    .starts_with("no configuration change")
            );
        }
    }

    #[test]
    fn noise_alone_raises_no_alarm() {
        let points: Vec<Point> = (0..20)
            .map(|i| {
                point(
                    i,
                    facts("3.10", "powersave", "auto"),
                    40_000.0 * noise(i),
                    100.0 * noise(i * 3 + 1),
                )
            })
            .collect();
        assert!(check_series(&points, &Settings::default()).is_empty());
        // Nor does a tight move smaller than the minimum effect.
        let mut p = points.clone();
        for x in p.iter_mut().skip(15) {
            for f in &mut x.figures {
                f.value *= 1.03;
            }
        }
        assert!(check_series(&p, &Settings::default()).is_empty());
    }

    #[test]
    fn a_per_second_cost_that_grows_is_a_regression() {
        // migrations_per_s reads like a rate; its type says more is worse.
        let mk = |i: i64, v: f64| Point {
            figures: vec![Figure::single(
                "migrations_per_s[method=pipe,class=unpinned,cpus=unpinned]",
                "migrations",
                Unit::PerSecond,
                Direction::LowerIsBetter,
                v,
            )],
            ..point(i, facts("6.1", "performance", "auto"), 1.0, 1.0)
        };
        let points: Vec<Point> = (0..8)
            .map(|i| mk(i, if i < 5 { 100.0 } else { 300.0 } * noise(i)))
            .collect();
        let c = check_series(&points, &Settings::default());
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].verdict, Verdict::Worse);
    }

    #[test]
    fn try_lines_only_for_settings_try_knows() {
        assert_eq!(
            try_command("haltpoll.guest_halt_poll_ns", "0", "pingpong").as_deref(),
            Some("cpulab try haltpoll.guest_halt_poll_ns=0 --measure pingpong")
        );
        assert_eq!(
            try_command("tuned.profile", "throughput-performance", "doctor").as_deref(),
            Some("cpulab try tuned:throughput-performance")
        );
        assert_eq!(try_command("kernel", "2.6.32", "doctor"), None);
        assert_eq!(try_command("mitigations", "off", "doctor"), None);
    }

    /// `--measure NAME` exactly for the kinds `try --measure` accepts: every experiment of the
    /// registry that is a subcommand, and no other kind (doctor, probe, sim, try).
    #[test]
    fn the_measured_kinds_are_the_registrys() {
        use crate::experiment::erased::Catalogue;
        let names = crate::registry::Registry.names();
        assert!(
            names.contains(&"bursty") && names.contains(&"pingpong"),
            "{names:?}"
        );
        for e in crate::registry::ENTRIES {
            let kind = e.kind.as_str();
            let line = try_command("smt.control", "on", kind).unwrap_or_default();
            assert_eq!(
                line.ends_with(&format!(" --measure {kind}")),
                names.contains(&kind),
                "{kind}: {line}"
            );
        }
    }

    /// The ranking table names only rules the doctor has (its `Rule::id`s), and `environment`,
    /// the module that words a wakeup's mechanism and cure by environment: a renamed or
    /// removed rule fails here instead of silently ranking nothing.
    #[test]
    fn every_rule_in_the_ranking_table_is_a_doctor_rule() {
        let ids: Vec<&str> = crate::doctor::rules::all().iter().map(|r| r.id()).collect();
        for (fact, figures, rule) in LINKS {
            assert!(
                ids.contains(rule) || *rule == "environment",
                "{fact}: `{rule}` is not a doctor rule ({ids:?})"
            );
            assert!(!figures.is_empty(), "{fact} -> {rule}");
        }
    }

    /// The mean, the sample standard deviation (n - 1) and the squared deviations, worked by
    /// hand: 1, 2, 3, 6 has mean 3 and squared deviations 4 + 1 + 0 + 9 = 14; one value has no
    /// spread (not a division by zero).
    #[test]
    fn mean_sd_and_sse_of_literal_values() {
        assert_eq!(
            mean_sd(&[1.0, 2.0, 3.0, 6.0]),
            (3.0, (14.0f64 / 3.0).sqrt())
        );
        assert_eq!(mean_sd(&[5.0]), (5.0, 0.0));
        assert_eq!(sse(&[1.0, 2.0, 3.0, 6.0]), 14.0);
        assert_eq!(sse(&[5.0]), 0.0);
    }

    /// The two-sided p-value against the t distribution's closed forms: with 2 degrees of
    /// freedom p = 1 - t / sqrt(2 + t^2), with 1 (Cauchy) p = 1 - 2 atan(t) / pi, and fewer
    /// degrees of freedom than 1 are read as 1. A t of 0 is p = 1; an infinite t is p = 0.
    #[test]
    fn t_p_against_the_closed_forms() {
        let t = 3f64.sqrt();
        let two = 1.0 - t / (2.0 + t * t).sqrt();
        assert!((t_p(t, 2.0) - two).abs() < 1e-12, "{}", t_p(t, 2.0));
        assert!((t_p(-t, 2.0) - two).abs() < 1e-12);
        assert!((t_p(1.0, 1.0) - 0.5).abs() < 1e-12, "{}", t_p(1.0, 1.0));
        assert!((t_p(1.0, 0.25) - 0.5).abs() < 1e-12);
        assert!((t_p(0.0, 4.0) - 1.0).abs() < 1e-12);
        assert_eq!(t_p(f64::INFINITY, 4.0), 0.0);
        assert_eq!(t_p(f64::NAN, 4.0), 0.0);
    }

    /// The newest run alone against a prediction interval of the earlier ones: 2, 4, 6 (mean 4,
    /// sd 2) against 8 is t = 4 / (2 sqrt(1 + 1/3)) = sqrt(3) with 2 degrees of freedom, so
    /// p = 1 - sqrt(3/5). With no spread, an equal value is p = 1 and any other p = 0.
    #[test]
    fn the_newest_run_alone_is_tested_against_a_prediction_interval() {
        let (p, name) = test(&[2.0, 4.0, 6.0], &[8.0]);
        assert_eq!(name, "prediction");
        assert!((p - (1.0 - (3.0f64 / 5.0).sqrt())).abs() < 1e-12, "{p}");
        assert_eq!(test(&[2.0, 2.0, 2.0], &[2.0]), (1.0, "prediction"));
        assert_eq!(test(&[2.0, 2.0, 2.0], &[3.0]), (0.0, "prediction"));
    }

    /// Two runs or more after the split: Welch's test, worked by hand. 0, 3, 6 (mean 3,
    /// variance 9, n 3: 9/3 = 3) against 7, 9, 11, 13, 15 (mean 11, variance 10, n 5: 10/5 = 2):
    /// t = 8 / sqrt(5), df = 25 / (9/2 + 4/4) = 50/11. With no spread on either side, equal
    /// means are p = 1 and others p = 0.
    #[test]
    fn two_runs_after_are_tested_by_welch_worked_by_hand() {
        use statrs::distribution::{ContinuousCDF, StudentsT};
        let t = 8.0 / 5f64.sqrt();
        let d = StudentsT::new(0.0, 1.0, 50.0 / 11.0).unwrap();
        let want = 2.0 * (1.0 - d.cdf(t));
        let (p, name) = test(&[0.0, 3.0, 6.0], &[7.0, 9.0, 11.0, 13.0, 15.0]);
        assert_eq!(name, "welch");
        assert!((p - want).abs() < 1e-12, "{p} against {want}");
        assert!(p > 0.01 && p < 0.05, "{p}");
        assert_eq!(test(&[2.0, 2.0], &[2.0, 2.0, 2.0]), (1.0, "welch"));
        assert_eq!(test(&[2.0, 2.0], &[3.0, 3.0]), (0.0, "welch"));
    }

    /// The least-squares split: where the step is (1, 1, 1 | 5, 5 is at 3, not at 2 or 4),
    /// the later one on a tie (a flat series splits at its last allowed place), the bounds on
    /// each side, and none when the series is too short for them.
    #[test]
    fn best_split_finds_the_step_and_prefers_the_later_tie() {
        assert_eq!(best_split(&[1.0, 1.0, 1.0, 5.0, 5.0], 2, 1), Some(3));
        assert_eq!(best_split(&[1.0, 1.0, 5.0, 5.0, 5.0], 2, 1), Some(2));
        assert_eq!(best_split(&[3.0, 3.0, 3.0, 3.0], 2, 1), Some(3));
        assert_eq!(best_split(&[3.0, 3.0, 3.0, 3.0], 2, 2), Some(2));
        assert_eq!(best_split(&[1.0, 2.0], 2, 1), None);
        assert_eq!(best_split(&[1.0], 2, 2), None);
    }

    /// `split_at`: at least two runs before and one after; a zero mean before has no percent;
    /// the minimum effect is met exactly (4 -> 5 is 25.0%, exact in binary) or missed; a large
    /// move inside the noise is no change; and what a change says (the means, p, the test).
    #[test]
    fn split_at_bounds_threshold_and_result() {
        let v = [4.0, 4.0, 4.0, 5.0, 5.0];
        let want = Split {
            at: 3,
            before_mean: 4.0,
            after_mean: 5.0,
            p_value: 0.0,
            test: "welch",
        };
        assert_eq!(split_at(&v, 3, 25.0), Some(want));
        assert_eq!(split_at(&v, 3, 25.000_001), None);
        assert_eq!(split_at(&v, 3, 30.0), None);
        assert_eq!(
            split_at(&[4.0, 4.0, 5.0, 5.0, 5.0], 2, 5.0).map(|s| s.at),
            Some(2)
        );
        assert_eq!(split_at(&v, 5, 5.0), None);
        assert_eq!(split_at(&v, 6, 5.0), None);
        let one = [4.0, 5.0, 5.0, 5.0, 5.0];
        assert_eq!(split_at(&one, 1, 5.0), None);
        assert_eq!(split_at(&one, 0, 5.0), None);
        let last = [4.0, 4.0, 4.0, 4.0, 5.0];
        assert_eq!(split_at(&last, 4, 5.0).map(|s| s.test), Some("prediction"));
        assert_eq!(split_at(&[0.0, 0.0, 1.0, 1.0], 2, 5.0), None);
        // 2, 4, 6 against 8: 100% more, but p = 0.23.
        assert_eq!(split_at(&[2.0, 4.0, 6.0, 8.0], 3, 5.0), None);
        // split finds the step by itself.
        assert_eq!(split(&v, 5.0).map(|s| s.at), Some(3));
    }

    /// Which doctor rules tie a fact to a figure: a prefix ending in `.` matches the facts under
    /// it, any other prefix only itself; the figure's name counts before its `[`.
    #[test]
    fn rules_linking_matches_prefixes_and_figure_families() {
        assert_eq!(
            rules_linking("haltpoll.guest_halt_poll_ns", "rtt_ns[method=pipe]"),
            ["cross-cpu-wakeup", "environment"]
        );
        assert_eq!(
            rules_linking("kvm.halt_poll_ns", "p99_ns"),
            ["cross-cpu-wakeup"]
        );
        assert!(rules_linking("kvm.halt_poll_ns_grow", "rtt_ns[x=1]").is_empty());
        assert!(rules_linking("haltpoll.guest_halt_poll_ns", "cost_ns[name=x]").is_empty());
        assert_eq!(
            rules_linking("cpus.allowed", "speedup[threads=2]"),
            ["restricted-cpu-set"]
        );
        assert_eq!(
            rules_linking("mitigations", "cost_ns[name=syscall_getppid]"),
            ["kernel-entry-cost"]
        );
    }

    /// Every form of try line: one file written back (`haltpoll.`, `kernel.sched_`, `sched.`,
    /// `smt.control`), a governor or preference only with one value, boost as 0 or 1, a tuned
    /// profile; `--measure` only for a kind that is an experiment's subcommand.
    #[test]
    fn try_lines_of_every_form() {
        let t = |fact: &str, before: &str, kind: &str| try_command(fact, before, kind);
        assert_eq!(
            t("kernel.sched_migration_cost_ns", "500000", "doctor").as_deref(),
            Some("cpulab try kernel.sched_migration_cost_ns=500000")
        );
        assert_eq!(
            t("sched.autogroup", "1", "doctor").as_deref(),
            Some("cpulab try sched.autogroup=1")
        );
        assert_eq!(
            t("smt.control", "off", "pingpong").as_deref(),
            Some("cpulab try smt.control=off --measure pingpong")
        );
        assert_eq!(t("smt.control_x", "off", "doctor"), None);
        assert_eq!(
            t("cpufreq.epp", "performance", "doctor").as_deref(),
            Some("cpulab try cpufreq.epp=performance")
        );
        assert_eq!(
            t("cpufreq.governor", "performance,powersave", "doctor"),
            None
        );
        assert_eq!(
            t("cpufreq.boost", "true", "doctor").as_deref(),
            Some("cpulab try cpufreq.boost=1")
        );
        assert_eq!(
            t("cpufreq.boost", "false", "doctor").as_deref(),
            Some("cpulab try cpufreq.boost=0")
        );
        assert_eq!(t("cpus.allowed", "0-3", "pingpong"), None);
    }

    fn figs_point(i: i64, figs: &[(&str, Direction, f64)]) -> Point {
        Point {
            figures: figs
                .iter()
                .map(|(n, d, v)| Figure::single(*n, *n, Unit::PerSecond, *d, *v))
                .collect(),
            ..point(i, facts("6.1", "performance", "auto"), 1.0, 1.0)
        }
    }

    /// The verdict follows the figure's direction (less of a cost is better, less of a rate
    /// worse, neither is "changed"); regressions come first, the largest first, then the
    /// others by size; each change counts the runs on its sides. A figure that did not move
    /// is not listed.
    #[test]
    fn verdicts_follow_the_direction_and_regressions_come_first() {
        use Direction::{HigherIsBetter as Up, LowerIsBetter as Down, Neither};
        let moves: [(&str, Direction, f64); 7] = [
            ("a_ns", Down, 1.3),
            ("b_per_s", Up, 1.6),
            ("c_ns", Down, 1.1),
            ("d_per_s", Up, 0.8),
            ("e_ns", Down, 0.7),
            ("f", Neither, 1.5),
            ("g_ns", Down, 1.0),
        ];
        let points: Vec<Point> = (0..8)
            .map(|i| {
                let figs: Vec<(&str, Direction, f64)> = moves
                    .iter()
                    .map(|(n, d, k)| (*n, *d, 1000.0 * if i < 5 { 1.0 } else { *k } * noise(i)))
                    .collect();
                figs_point(i, &figs)
            })
            .collect();
        let c = check_series(&points, &Settings::default());
        let got: Vec<(&str, Verdict)> = c.iter().map(|x| (x.figure.as_str(), x.verdict)).collect();
        assert_eq!(
            got,
            [
                ("a_ns", Verdict::Worse),
                ("d_per_s", Verdict::Worse),
                ("c_ns", Verdict::Worse),
                ("b_per_s", Verdict::Better),
                ("f", Verdict::Changed),
                ("e_ns", Verdict::Better),
            ]
        );
        for x in &c {
            assert_eq!((x.runs_before, x.runs_after), (5, 3), "{}", x.figure);
            assert_eq!((x.last_before, x.first_after), (4, 5), "{}", x.figure);
        }
    }

    /// A figure missing from some runs: its series skips them, so the runs on either side of
    /// the change are the runs that have it, and the counts are its values'.
    #[test]
    fn a_figure_missing_from_some_runs_counts_only_the_runs_that_have_it() {
        let points: Vec<Point> = (0..10)
            .map(|i| {
                let v = 1000.0 * if i < 6 { 1.0 } else { 1.3 } * noise(i);
                // Runs 1 and 6 did not measure it.
                let figs: &[(&str, Direction, f64)] = if i == 1 || i == 6 {
                    &[]
                } else {
                    &[("a_ns", Direction::LowerIsBetter, v)]
                };
                figs_point(i, figs)
            })
            .collect();
        let c = check_series(&points, &Settings::default());
        assert_eq!(c.len(), 1, "{c:#?}");
        assert_eq!((c[0].last_before, c[0].first_after), (5, 7));
        assert_eq!((c[0].runs_before, c[0].runs_after), (5, 3));
    }

    /// Each arm of a value for people: nanoseconds in their unit, a share in percent, a
    /// hundred or more without decimals (exactly 100 included), a rate under 0.01 in
    /// exponent form (either sign; exactly 0.01 is not under), anything else with three.
    #[test]
    fn fmt_value_arms_and_their_edges() {
        assert_eq!(fmt_value(Unit::Nanoseconds, 1500.0), "1.50 us");
        assert_eq!(fmt_value(Unit::Share, 0.5), "50.0%");
        assert_eq!(fmt_value(Unit::PerSecond, 100.0), "100/s");
        assert_eq!(fmt_value(Unit::PerSecond, -250.0), "-250/s");
        assert_eq!(fmt_value(Unit::PerSecond, 99.5), "99.500/s");
        assert_eq!(fmt_value(Unit::PerSecond, 5.0), "5.000/s");
        assert_eq!(fmt_value(Unit::PerOperation, 0.01), "0.010/op");
        assert_eq!(fmt_value(Unit::PerOperation, -0.001), "-1.00e-3/op");
    }

    fn kind_check(points: &[Point]) -> KindCheck {
        let last = &points[points.len() - 1].run;
        KindCheck {
            kind: last.kind.clone(),
            hardware_key: last.hardware_key.clone(),
            newest_run: last.id,
            runs: points.len(),
            changes: check_series(points, &Settings::default()),
            note: None,
        }
    }

    fn shifted(i: i64, f: fingerprint::Facts) -> Point {
        let k = if i < 6 { 1.0 } else { 1.13 };
        point(i, f, 40_000.0 * k * noise(i), 100.0 * k * noise(i + 3))
    }

    /// The text: changes between the same runs with the same causes are one block (said
    /// once), changes with different rules tying the causes are two; a kind with a note says
    /// only that; a kind with no change says so; the regressions are counted at the end, and
    /// not when there are none.
    #[test]
    fn render_groups_blocks_and_counts_regressions() {
        let same: Vec<Point> = (0..9)
            .map(|i| shifted(i, facts("3.10", "powersave", "auto")))
            .collect();
        let notes: Vec<Point> = (0..9)
            .map(|i| {
                let f = if i < 6 {
                    facts("2.6.32", "performance", "off")
                } else {
                    facts("3.10", "powersave", "auto")
                };
                shifted(i, f)
            })
            .collect();
        let flat: Vec<Point> = (0..9)
            .map(|i| point(i, facts("3.10", "powersave", "auto"), 40_000.0, 100.0))
            .collect();
        let mut noted = kind_check(&flat[..2]);
        noted.note =
            Some("2 run(s) on this hardware: a change needs at least 2 earlier runs".into());
        let report = |kinds: Vec<KindCheck>, regressions: Vec<String>| Report {
            settings: Settings::default(),
            method: METHOD.into(),
            kinds,
            regressions,
        };
        let text = render(&report(
            vec![kind_check(&same)],
            vec!["doctor rtt_ns".into()],
        ));
        assert!(
            text.starts_with("doctor: newest run @8, 9 run(s) on hw\n"),
            "{text}"
        );
        assert_eq!(
            text.matches("from run @6 on (6 run(s) before, 3 after):")
                .count(),
            1,
            "{text}"
        );
        assert_eq!(text.matches("    WORSE +").count(), 2, "{text}");
        assert_eq!(text.matches(UNSEEN).count(), 1, "{text}");
        assert!(
            text.ends_with("\n1 regression(s) beyond the 5% threshold\n"),
            "{text}"
        );

        let text = render(&report(vec![kind_check(&notes)], Vec::new()));
        assert_eq!(text.matches("from run @6 on").count(), 2, "{text}");
        assert!(
            text.contains(
                "    - cpufreq.governor performance -> powersave (doctor rules: frequency-ramp)\n      \
                 confirm: cpulab try cpufreq.governor=performance\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "    - kernel 2.6.32 -> 3.10 (no doctor rule ties it to these figures)\n"
            ),
            "{text}"
        );
        assert!(!text.contains("regression(s)"), "{text}");

        let text = render(&report(vec![noted, kind_check(&flat)], Vec::new()));
        assert_eq!(
            text,
            "doctor: newest run @1, 2 run(s) on hw\n  \
             2 run(s) on this hardware: a change needs at least 2 earlier runs\n\
             doctor: newest run @8, 9 run(s) on hw\n  \
             no change beyond noise and the 5% threshold\n"
        );
    }

    fn new_run(kind: &str, t: i64, hw: &str, v: f64) -> super::super::store::NewRun {
        super::super::store::NewRun {
            time_unix_s: t,
            kind: kind.into(),
            fingerprint: fingerprint::Fingerprint {
                host_key: "h".into(),
                hardware_key: hw.into(),
                facts: facts("6.1", "performance", "auto"),
            },
            command_line: format!("cpulab {kind}"),
            noisy: false,
            figures: vec![Figure::single(
                "rtt_ns",
                "rtt",
                Unit::Nanoseconds,
                Direction::LowerIsBetter,
                v,
            )],
            document: serde_json::json!({ "kind": kind }),
        }
    }

    /// `run` on a stored history: each kind's newest run against the earlier runs of that kind
    /// on its hardware only (a run on other hardware, or of another kind, is not in the
    /// series), a note under three runs and none at three, the regressions by kind, and a
    /// kind asked for alone.
    #[test]
    fn run_reads_each_kinds_series_on_its_hardware() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("h.sqlite")).unwrap();
        let runs = [
            ("pingpong", 1, "hw", 100.0),
            ("pingpong", 2, "hw", 101.0),
            ("pingpong", 3, "other", 500.0),
            ("doctor", 4, "hw", 7.0),
            ("pingpong", 5, "hw", 99.0),
            ("bursty", 6, "hw", 10.0),
            ("bursty", 7, "hw", 10.0),
            ("pingpong", 8, "hw", 100.0),
            ("bursty", 9, "hw", 10.0),
            ("doctor", 10, "hw", 7.0),
            ("pingpong", 11, "hw", 130.0),
        ];
        for (kind, t, hw, v) in runs {
            store.insert(&new_run(kind, t, hw, v)).unwrap();
        }
        let r = run(&store, None, &Settings::default()).unwrap();
        let got: Vec<(&str, usize, Option<&str>, usize)> = r
            .kinds
            .iter()
            .map(|k| (k.kind.as_str(), k.runs, k.note.as_deref(), k.changes.len()))
            .collect();
        assert_eq!(
            got,
            [
                ("bursty", 3, None, 0),
                (
                    "doctor",
                    2,
                    Some("2 run(s) on this hardware: a change needs at least 2 earlier runs"),
                    0
                ),
                ("pingpong", 5, None, 1),
            ]
        );
        assert_eq!(r.regressions, ["pingpong rtt_ns"]);
        let c = &r.kinds[2].changes[0];
        assert_eq!((c.split.before_mean, c.split.after_mean), (100.0, 130.0));
        let only = run(&store, Some("doctor"), &Settings::default()).unwrap();
        assert_eq!(only.kinds.len(), 1);
        assert_eq!(only.kinds[0].kind, "doctor");
        assert!(only.regressions.is_empty());
    }
}
