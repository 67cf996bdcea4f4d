//! Drift: hosts whose machine facts (`cpulab_machine_info`) changed in the window, which facts,
//! and whether the host's placement cost moved with the change.
//!
//! The cost test is `cpulab history check`'s ([`crate::history::check::split_at`], the same
//! code): the host's cost points before the change against those after it, Welch's t-test (or
//! a prediction interval when one point stands after), a move when p < 0.01 and the means
//! differ by at least `--threshold`. The split is where the facts changed, not searched for.
//! A point less than the rules' rate range (5 minutes) after the change mixes both sides, so
//! it is left out.

use super::client::{Prometheus, Series};
use super::queries::{self, RULE_RANGE_S, Window};
use crate::history::check;
use anyhow::Result;
use serde::Serialize;

/// A fact that changed, with the trial that would put it back where cpulab knows the setting.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FactChange {
    pub fact: String,
    pub before: String,
    pub after: String,
    /// The doctor rules that tie this fact to wakeup figures (as `history check` ranks causes).
    pub rules: Vec<&'static str>,
    pub try_command: Option<String>,
}

/// Whether the host's placement cost moved with the change.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CostMove {
    /// `moved`, `did-not-move` or `not-testable`.
    pub verdict: &'static str,
    pub points_before: usize,
    pub points_after: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before_mean_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_mean_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p_value: Option<f64>,
    /// `welch` or `prediction`, as `history check` names them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test: Option<&'static str>,
    pub note: String,
}

/// One host whose facts changed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Drift {
    pub instance: String,
    pub job: String,
    /// Sets of facts seen in the window (2 for one change).
    pub fact_sets: usize,
    /// When the newest set was first seen (to within the step of the facts' query).
    pub changed_at_unix_s: f64,
    pub changed_at_utc: String,
    /// The facts that differ between the newest set and the one before it.
    pub changes: Vec<FactChange>,
    pub cost: CostMove,
}

/// The fingerprint fact (`cpulab history`'s name) behind a `cpulab_machine_info` label.
fn fingerprint_fact(label: &str) -> Option<&'static str> {
    Some(match label {
        "guest_halt_poll_ns" => "haltpoll.guest_halt_poll_ns",
        "idle_driver" => "cpuidle.driver",
        "virtualization" => "hypervisor",
        "mitigations" => "mitigations",
        "cpufreq_governor" => "cpufreq.governor",
        "boot_options" => "cmdline",
        "smt" => "smt.control",
        _ => return None,
    })
}

/// The facts that differ between two label sets (pure).
pub fn changes(before: &Series, after: &Series) -> Vec<FactChange> {
    queries::FACTS
        .iter()
        .filter_map(|f| {
            let (b, a) = (before.labels.get(*f)?, after.labels.get(*f)?);
            (a != b).then(|| {
                let fp = fingerprint_fact(f);
                FactChange {
                    fact: f.to_string(),
                    before: b.clone(),
                    after: a.clone(),
                    rules: fp.map_or_else(Vec::new, |x| check::rules_linking(x, "rtt_ns")),
                    try_command: fp
                        .filter(|_| b != "none")
                        .and_then(|x| check::try_command(x, b, "pingpong")),
                }
            })
        })
        .collect()
}

fn mean(x: &[f64]) -> Option<f64> {
    (!x.is_empty()).then(|| x.iter().sum::<f64>() / x.len() as f64)
}

/// Tests the cost `points` (time, value) at `changed_at` (pure).
pub fn cost_move(points: &[(f64, f64)], changed_at: f64, threshold_pct: f64) -> CostMove {
    let ok = |v: &f64| v.is_finite();
    let before: Vec<f64> = points
        .iter()
        .filter(|(t, v)| *t < changed_at && ok(v))
        .map(|p| p.1)
        .collect();
    let after: Vec<f64> = points
        .iter()
        .filter(|(t, v)| *t >= changed_at + RULE_RANGE_S && ok(v))
        .map(|p| p.1)
        .collect();
    let (mb, ma) = (mean(&before), mean(&after));
    let mut m = CostMove {
        verdict: "not-testable",
        points_before: before.len(),
        points_after: after.len(),
        before_mean_s: mb,
        after_mean_s: ma,
        change_pct: mb
            .zip(ma)
            .filter(|(b, _)| *b != 0.0)
            .map(|(b, a)| (a / b - 1.0) * 100.0),
        p_value: None,
        test: None,
        note: String::new(),
    };
    if before.len() < 2 || after.is_empty() {
        m.note = format!(
            "{} cost point(s) before the change and {} from 5 minutes after it (a nearer one \
             mixes both sides); the test needs 2 before and 1 after",
            before.len(),
            after.len()
        );
        return m;
    }
    let values: Vec<f64> = before.iter().chain(&after).copied().collect();
    match check::split_at(&values, before.len(), threshold_pct) {
        Some(s) => {
            m.verdict = "moved";
            m.p_value = Some(s.p_value);
            m.test = Some(s.test);
            m.note = format!("p = {:.2e} < 0.01 and beyond {threshold_pct}%", s.p_value);
        }
        None => {
            m.verdict = "did-not-move";
            m.note = format!("no move beyond {threshold_pct}% at p < 0.01 (history check's test)");
        }
    }
    m
}

/// Asks for the hosts whose facts changed and tests each one's cost.
pub fn query(p: &Prometheus, w: Window, s: &super::Settings, end: f64) -> Result<Vec<Drift>> {
    let start = end - w.seconds as f64;
    // A fine step for one host's facts, so a short-lived set is seen (11,000 points at most).
    let fact_step = (w.seconds as f64 / 10_000.0).ceil().max(1.0);
    let mut out = Vec::new();
    for h in p.instant(&queries::drifted(w, s.limit), end)? {
        let get = |k: &str| h.labels.get(k).cloned().unwrap_or_default();
        let (instance, job) = (get("instance"), get("job"));
        let mut sets = p.range(&queries::facts_of(&instance, &job), start, end, fact_step)?;
        sets.retain(|x| !x.points.is_empty());
        sets.sort_by(|a, b| a.points[0].0.total_cmp(&b.points[0].0));
        let [.., before, after] = sets.as_slice() else {
            continue;
        };
        let changed_at = after.points[0].0;
        let cost = p.range(
            &queries::host_cost_of(&instance, &job),
            start,
            end,
            w.step_s as f64,
        )?;
        let points = cost.first().map_or(&[][..], |c| c.points.as_slice());
        out.push(Drift {
            fact_sets: sets.len(),
            changed_at_unix_s: changed_at,
            changed_at_utc: crate::history::when::utc(changed_at as i64),
            changes: changes(before, after),
            cost: cost_move(points, changed_at, s.threshold_pct),
            instance,
            job,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(&str, &str)]) -> Series {
        Series {
            labels: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            points: vec![(0.0, 1.0)],
        }
    }

    #[test]
    fn the_changed_fact_is_named_with_the_trial_that_puts_it_back() {
        let b = set(&[("guest_halt_poll_ns", "200000"), ("kernel", "6.1")]);
        let a = set(&[("guest_halt_poll_ns", "0"), ("kernel", "6.1")]);
        let c = changes(&b, &a);
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].before.as_str(), c[0].after.as_str()), ("200000", "0"));
        assert!(c[0].rules.contains(&"cross-cpu-wakeup"), "{c:?}");
        assert_eq!(
            c[0].try_command.as_deref(),
            Some("cpulab try haltpoll.guest_halt_poll_ns=200000 --measure pingpong")
        );
    }

    #[test]
    fn the_cost_test_is_history_checks_at_the_change() {
        // Hourly points: 6 before the change at t = 6 h, the one 5 minutes after it left out.
        let at = 6.0 * 3600.0;
        let before = [10.0, 10.2, 9.9, 10.1, 10.0, 9.8];
        let mut pts: Vec<(f64, f64)> = before
            .iter()
            .enumerate()
            .map(|(i, v)| (i as f64 * 3600.0, *v))
            .collect();
        pts.push((at + 60.0, 1000.0));
        pts.extend([
            (at + 3600.0, 20.0),
            (at + 7200.0, 20.3),
            (at + 10800.0, 19.8),
        ]);
        let m = cost_move(&pts, at, 5.0);
        assert_eq!(m.verdict, "moved");
        assert_eq!((m.points_before, m.points_after), (6, 3));
        assert_eq!(m.test, Some("welch"));
        // Welch's test worked by hand here (the p from statrs's Student's t), not by the code
        // under test: the p-value is that of the points before and from 5 minutes after.
        use statrs::distribution::{ContinuousCDF, StudentsT};
        let after = [20.0, 20.3, 19.8];
        let mean = |x: &[f64]| x.iter().sum::<f64>() / x.len() as f64;
        let var = |x: &[f64]| {
            let m = mean(x);
            x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (x.len() - 1) as f64
        };
        let (vb, va) = (var(&before) / 6.0, var(&after) / 3.0);
        let t = (mean(&after) - mean(&before)) / (vb + va).sqrt();
        let df = (vb + va).powi(2) / (vb.powi(2) / 5.0 + va.powi(2) / 2.0);
        let p = 2.0 * StudentsT::new(0.0, 1.0, df).unwrap().sf(t.abs());
        let got = m.p_value.unwrap();
        assert!((got - p).abs() <= 1e-6 * p, "{got} vs {p}");
        // Within the noise: no move.
        let flat: Vec<(f64, f64)> = before
            .iter()
            .chain(&[10.1, 9.9])
            .enumerate()
            .map(|(i, v)| (i as f64 * 3600.0, *v))
            .collect();
        assert_eq!(cost_move(&flat, at, 5.0).verdict, "did-not-move");
        // Too few points on a side: said, with the counts.
        let m = cost_move(&pts[..7], at, 5.0);
        assert_eq!(m.verdict, "not-testable");
        assert_eq!(m.points_after, 0);
        assert!(m.note.contains("needs 2 before and 1 after"), "{}", m.note);
    }
}
