//! The ranking: hosts and their targets by what placement costs a wakeup, each with the
//! figures that explain it. [`query`] asks Prometheus (bounded by the `topk` of the ranking);
//! [`build`] is pure.

use super::client::{Prometheus, Sample};
use super::queries::{self, Window};
use super::{Reading, drift::Drift, findings::HostFindings};
use anyhow::Result;
use serde::Serialize;
use std::collections::BTreeMap;

/// A host's target (`instance`, `job`, `target`).
pub type Key = (String, String, String);

/// One ranked target.
#[derive(Clone, Debug, Serialize)]
pub struct Ranked {
    pub rank: usize,
    pub instance: String,
    pub job: String,
    pub target: String,
    /// Placement cost: the expected extra wait per wakeup, in seconds.
    pub cost_s: Reading,
    /// Share of the target's wakeups placed on another CPU than the waker's.
    pub cross_share: Reading,
    /// Mean wakeup-to-run latency of those wakeups, and of the same-CPU ones, in seconds.
    pub cross_latency_s: Reading,
    pub same_latency_s: Reading,
    pub wakeups_per_s: Reading,
    /// The host's halts (idle entries that are not polling) and IPIs per watched wakeup.
    pub halts_per_wakeup: Reading,
    pub ipis_per_wakeup: Reading,
    /// The active probe's cross-CPU over same-CPU round trip (p50).
    pub probe_cross_over_same: Reading,
    /// The host's doctor findings (`id (severity)`), from its newest doctor run.
    pub findings: Vec<String>,
    /// What to run on the host to look closer.
    pub look_closer: Vec<String>,
}

/// A ranked target's cost over the window, for its chart.
#[derive(Clone, Debug, Serialize)]
pub struct CostSeries {
    pub instance: String,
    pub job: String,
    pub target: String,
    /// (Unix seconds, seconds per wakeup), one per step where it had a value.
    pub points: Vec<(f64, f64)>,
}

/// The cost of each ranked target at every step of the window (one range query on their hosts).
pub fn series(
    p: &Prometheus,
    w: Window,
    ranked: &[Ranked],
    (start, end): (f64, f64),
) -> Result<Vec<CostSeries>> {
    let hosts = hosts_of_ranked(ranked);
    if hosts.is_empty() {
        return Ok(Vec::new());
    }
    let all = p.range(&queries::cost_of(&hosts), start, end, w.step_s as f64)?;
    let mut out = Vec::new();
    for r in ranked {
        let get = |k: &str| -> &str { r_label(k, r) };
        if let Some(s) = all.iter().find(|s| {
            ["instance", "job", "target"]
                .iter()
                .all(|k| s.labels.get(*k).map(String::as_str) == Some(get(k)))
        }) {
            out.push(CostSeries {
                instance: r.instance.clone(),
                job: r.job.clone(),
                target: r.target.clone(),
                points: s
                    .points
                    .iter()
                    .copied()
                    .filter(|p| p.1.is_finite())
                    .collect(),
            });
        }
    }
    Ok(out)
}

fn r_label<'a>(k: &str, r: &'a Ranked) -> &'a str {
    match k {
        "instance" => &r.instance,
        "job" => &r.job,
        _ => &r.target,
    }
}

/// A target that woke in the window but has no cost.
#[derive(Clone, Debug, Serialize)]
pub struct Unranked {
    pub instance: String,
    pub job: String,
    pub target: String,
    pub wakeups_per_s: f64,
    pub not_available: String,
}

fn label(s: &Sample, name: &str) -> String {
    s.labels.get(name).cloned().unwrap_or_default()
}

fn key(s: &Sample) -> Key {
    (label(s, "instance"), label(s, "job"), label(s, "target"))
}

/// Samples by their target.
pub fn by_target(samples: &[Sample]) -> BTreeMap<Key, f64> {
    samples.iter().map(|s| (key(s), s.value)).collect()
}

/// Samples by their host.
pub fn by_host(samples: &[Sample]) -> BTreeMap<(String, String), f64> {
    samples
        .iter()
        .map(|s| ((label(s, "instance"), label(s, "job")), s.value))
        .collect()
}

/// What [`build`] reads: each figure's samples, by target or by host.
#[derive(Debug, Default)]
pub struct Inputs {
    pub cost: Vec<Sample>,
    pub cost_sd: BTreeMap<Key, f64>,
    pub cost_n: BTreeMap<Key, f64>,
    pub share: BTreeMap<Key, f64>,
    pub cross: BTreeMap<Key, f64>,
    pub same: BTreeMap<Key, f64>,
    pub wakeups: BTreeMap<Key, f64>,
    pub halts: BTreeMap<(String, String), f64>,
    pub ipis: BTreeMap<(String, String), f64>,
    pub probe: BTreeMap<(String, String), f64>,
    /// The worst success of each host's `idle` and `interrupts` collectors in the window.
    pub collectors: BTreeMap<(String, String, String), f64>,
}

/// The instances of these samples, each once.
pub fn hosts_of(samples: &[Sample]) -> Vec<String> {
    let set: std::collections::BTreeSet<String> =
        samples.iter().map(|s| label(s, "instance")).collect();
    set.into_iter().collect()
}

/// The instances of a ranking, each once.
pub fn hosts_of_ranked(r: &[Ranked]) -> Vec<String> {
    let set: std::collections::BTreeSet<String> = r.iter().map(|x| x.instance.clone()).collect();
    set.into_iter().collect()
}

/// Every figure of the ranked targets' hosts (their series only).
fn figures(p: &Prometheus, w: Window, cost: Vec<Sample>, at: f64) -> Result<Inputs> {
    let hosts = hosts_of(&cost);
    if hosts.is_empty() {
        return Ok(Inputs::default());
    }
    let get = |f: &str, rule: &str| p.instant(&queries::of_hosts(f, rule, w, &hosts), at);
    let t = |f: &str, rule: &str| -> Result<BTreeMap<Key, f64>> { Ok(by_target(&get(f, rule)?)) };
    let h = |rule: &str| -> Result<BTreeMap<(String, String), f64>> {
        Ok(by_host(&get("avg_over_time", rule)?))
    };
    Ok(Inputs {
        cost_sd: t("stddev_over_time", queries::COST)?,
        cost_n: t("count_over_time", queries::COST)?,
        share: t("avg_over_time", queries::SHARE)?,
        cross: t("avg_over_time", queries::CROSS_MEAN)?,
        same: t("avg_over_time", queries::SAME_MEAN)?,
        wakeups: t("avg_over_time", queries::WAKEUPS)?,
        halts: h(queries::HALTS)?,
        ipis: h(queries::IPIS)?,
        probe: h(queries::PROBE)?,
        collectors: p
            .instant(&queries::collectors_of(w, &hosts), at)?
            .iter()
            .map(|s| {
                let host = (label(s, "instance"), label(s, "job"));
                ((host.0, host.1, label(s, "collector")), s.value)
            })
            .collect(),
        cost,
    })
}

/// Asks for the ranking and the targets without a cost.
pub fn query(
    p: &Prometheus,
    w: Window,
    limit: usize,
    at: f64,
) -> Result<(Vec<Ranked>, Vec<Unranked>)> {
    let inputs = figures(p, w, p.instant(&queries::top(w, limit), at)?, at)?;
    let without = p.instant(&queries::without_cost(w, limit), at)?;
    let (same, cross) = if without.is_empty() {
        Default::default()
    } else {
        let hosts = hosts_of(&without);
        let n = |rule| -> Result<BTreeMap<Key, f64>> {
            let q = queries::of_hosts("count_over_time", rule, w, &hosts);
            Ok(by_target(&p.instant(&q, at)?))
        };
        (n(queries::SAME_MEAN)?, n(queries::CROSS_MEAN)?)
    };
    Ok((build(&inputs), unranked(&without, &same, &cross)))
}

/// The ranking, costliest first (pure).
pub fn build(i: &Inputs) -> Vec<Ranked> {
    let mut cost: Vec<&Sample> = i.cost.iter().filter(|s| s.value.is_finite()).collect();
    cost.sort_by(|a, b| b.value.total_cmp(&a.value).then(key(a).cmp(&key(b))));
    cost.iter()
        .enumerate()
        .map(|(n, s)| {
            let k = key(s);
            let host = (k.0.clone(), k.1.clone());
            let get = |m: &BTreeMap<Key, f64>| m.get(&k).copied();
            let hget = |m: &BTreeMap<(String, String), f64>| m.get(&host).copied();
            Ranked {
                rank: n + 1,
                cost_s: Reading {
                    mean: Some(s.value),
                    stddev: get(&i.cost_sd),
                    points: get(&i.cost_n).map(|v| v as u64),
                    not_available: None,
                },
                cross_share: Reading::of(get(&i.share), "no wakeups in the window"),
                cross_latency_s: Reading::of(
                    get(&i.cross),
                    "no cross-CPU wakeups timed in the window",
                ),
                same_latency_s: Reading::of(get(&i.same), "no same-CPU wakeups timed"),
                wakeups_per_s: Reading::of(get(&i.wakeups), "no wakeups in the window"),
                halts_per_wakeup: Reading::of(hget(&i.halts), &why_missing(i, &host, "idle")),
                ipis_per_wakeup: Reading::of(hget(&i.ipis), &why_missing(i, &host, "interrupts")),
                probe_cross_over_same: Reading::of(
                    hget(&i.probe),
                    "the active probe does not run on this host (exporter --probe-interval)",
                ),
                findings: Vec::new(),
                look_closer: Vec::new(),
                instance: k.0,
                job: k.1,
                target: k.2,
            }
        })
        .collect()
}

/// Why a host figure read by `collector` is missing: the collector failed, or the host has
/// nothing to count.
fn why_missing(i: &Inputs, host: &(String, String), collector: &str) -> String {
    let k = (host.0.clone(), host.1.clone(), collector.to_string());
    let nothing = if collector == "idle" {
        "the host has no halting idle state (no cpuidle states, or only polling ones)"
    } else {
        "the host counted no rescheduling or function-call IPIs"
    };
    match i.collectors.get(&k) {
        Some(v) if *v == 0.0 => format!(
            "the exporter's {collector} collector failed in the window \
             (cpulab_exporter_read_errors_total{{collector=\"{collector}\"}} says why)"
        ),
        Some(_) => nothing.to_string(),
        None => format!("the exporter published no {collector} collector status"),
    }
}

fn unranked(
    samples: &[Sample],
    same: &BTreeMap<Key, f64>,
    cross: &BTreeMap<Key, f64>,
) -> Vec<Unranked> {
    let mut out: Vec<Unranked> = samples
        .iter()
        .map(|s| {
            let k = key(s);
            let why = if !same.contains_key(&k) {
                "no same-CPU wakeup timed in the window: no baseline to compare the cross-CPU \
                 ones with"
            } else if !cross.contains_key(&k) {
                "its cross-CPU wakeups were counted but none timed (a wakeup of a task still on a \
                 CPU waits for nothing and is not timed)"
            } else {
                "its same-CPU and cross-CPU latencies never had a value at the same step"
            };
            Unranked {
                wakeups_per_s: s.value,
                not_available: why.to_string(),
                instance: k.0,
                job: k.1,
                target: k.2,
            }
        })
        .collect();
    out.sort_by(|a, b| b.wakeups_per_s.total_cmp(&a.wakeups_per_s));
    out
}

/// The target as `cpulab doctor --comm` takes it, when it is a command name.
fn comm_of(target: &str) -> Option<&str> {
    let is_comm = !target.contains('/')
        && !target.ends_with(".service")
        && !target.ends_with(".scope")
        && target != "other"
        && target.len() <= 15;
    is_comm.then_some(target)
}

/// Adds each host's findings and the commands to look closer (pure).
pub fn with_findings(mut ranked: Vec<Ranked>, f: &HostFindings, drift: &[Drift]) -> Vec<Ranked> {
    for r in &mut ranked {
        let host = (r.instance.clone(), r.job.clone());
        r.findings = f.get(&host).cloned().unwrap_or_default();
        let doctor = match comm_of(&r.target) {
            Some(c) => format!("cpulab doctor --comm {c}"),
            None => "cpulab doctor".to_string(),
        };
        r.look_closer = vec![doctor, "cpulab remedy".to_string()];
        let tries = drift
            .iter()
            .filter(|d| d.instance == r.instance && d.job == r.job)
            .flat_map(|d| d.changes.iter().filter_map(|c| c.try_command.clone()));
        r.look_closer.extend(tries);
    }
    ranked
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(instance: &str, target: &str, v: f64) -> Sample {
        Sample {
            labels: [
                ("instance", instance),
                ("job", "cpulab"),
                ("target", target),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            value: v,
        }
    }

    #[test]
    fn costliest_first_and_a_missing_figure_is_not_zero() {
        let k = |i: &str, t: &str| (i.to_string(), "cpulab".to_string(), t.to_string());
        let i = Inputs {
            cost: vec![
                sample("a", "pg", 3e-6),
                sample("b", "pg", 4e-5),
                sample("c", "x", 0.0),
            ],
            share: [(k("b", "pg"), 0.75)].into(),
            halts: [(("b".into(), "cpulab".into()), 0.5)].into(),
            ..Inputs::default()
        };
        let r = build(&i);
        let order: Vec<&str> = r.iter().map(|r| r.instance.as_str()).collect();
        assert_eq!(order, ["b", "a", "c"]);
        assert_eq!(r.iter().map(|r| r.rank).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(r[0].cross_share.mean, Some(0.75));
        assert_eq!(r[0].halts_per_wakeup.mean, Some(0.5));
        assert_eq!(r[1].halts_per_wakeup.mean, None);
        assert!(r[1].halts_per_wakeup.not_available.is_some());
        // A cost of 0 (nothing crossed CPUs) is measured, and ranked last.
        assert_eq!(r[2].cost_s.mean, Some(0.0));
    }

    #[test]
    fn the_doctor_line_names_a_command_but_not_a_unit() {
        assert_eq!(comm_of("postgres"), Some("postgres"));
        assert_eq!(comm_of("postgresql.service"), None);
        assert_eq!(comm_of("k8s/uid/abc"), None);
        assert_eq!(comm_of("other"), None);
    }
}
