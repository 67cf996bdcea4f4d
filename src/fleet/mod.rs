//! `cpulab fleet`: which hosts pay for placement, and what changed on them, read from the
//! Prometheus that scrapes their exporters.
//!
//! Nobody reads a thousand hosts' histograms, so the report answers the operator's questions in
//! cpulab's own words, with the figures that decide them:
//!
//! - **the ranking** ([`rank`]): per host and watched target, what placement costs a wakeup,
//!   the cross-CPU share times the cross-CPU latency excess over same-CPU (the recording rule
//!   `target:cpulab_placement_cost_seconds:mean_rate5m`), its mean and spread over the window,
//!   beside the halts and IPIs per wakeup that explain it and the active probe's cross/same
//!   ratio where it runs;
//! - **the findings** ([`findings`]): `cpulab_doctor_finding` grouped by id across the fleet,
//!   with the machine facts every host with that finding shares;
//! - **the drift** ([`drift`]): hosts whose `cpulab_machine_info` changed in the window, which
//!   fact, and whether their placement cost moved with it, tested as `cpulab history check`
//!   tests a series (`crate::history::check::split_at`, the same code) at the time of the change;
//! - **what guests wait** ([`vms`]): on KVM hosts, the hosts and the VMs on them by their
//!   vCPUs' run-queue wait per vCPU, what the guests see as steal;
//! - **where to look closer**: the commands to run on the host.
//!
//! It only reads: instant and range queries and the rules listing of the HTTP API. Every query
//! is bounded (`topk`, `--limit`) and reads the recording rules only ([`queries`]), so one run
//! costs a known number of series and samples on a large Prometheus (docs/fleet.md).
//!
//! A figure Prometheus does not hold is "not available" with the reason, never 0.

pub mod client;
pub mod drift;
pub mod findings;
pub mod html;
pub mod notes;
pub mod queries;
pub mod rank;
pub mod text;
pub mod vms;
pub mod webconfig;

use crate::error::bad_input;
use anyhow::Result;
use client::Prometheus;
use queries::Window;
use serde::Serialize;

/// The validated flags.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Seconds back from now the window starts.
    pub since_s: u64,
    /// Most targets ranked, hosts drifted, targets without a cost listed.
    pub limit: usize,
    /// The minimum effect of a drift, in percent (as `history check --threshold`).
    pub threshold_pct: f64,
}

/// A figure over the window: its mean and the spread of its points, or why there is none.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Reading {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean: Option<f64>,
    /// The points' standard deviation over the window (how much it moved).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stddev: Option<f64>,
    /// Points in the window (one per step where the rule had a value).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub points: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_available: Option<String>,
}

impl Reading {
    /// A latency or cost in seconds as people read it, with its spread when it has one; `n/a`
    /// without a mean (the reason is a footnote of the table).
    pub fn shown_as_time(&self) -> String {
        use crate::units::fmt_ns;
        match (self.mean, self.stddev) {
            (Some(m), Some(sd)) => format!("{} ±{}", fmt_ns(m * 1e9), fmt_ns(sd * 1e9)),
            (Some(m), None) => fmt_ns(m * 1e9),
            _ => "n/a".to_string(),
        }
    }

    /// The mean with `decimals` places, or `n/a`.
    pub fn shown_as_number(&self, decimals: usize) -> String {
        self.mean
            .map_or_else(|| "n/a".to_string(), |m| format!("{m:.decimals$}"))
    }

    pub fn of(mean: Option<f64>, why: &str) -> Self {
        match mean.filter(|m| m.is_finite()) {
            Some(m) => Self {
                mean: Some(m),
                ..Self::default()
            },
            None => Self::missing(why),
        }
    }

    pub fn missing(why: &str) -> Self {
        Self {
            not_available: Some(why.to_string()),
            ..Self::default()
        }
    }
}

/// The window the report covers.
#[derive(Clone, Debug, Serialize)]
pub struct WindowInfo {
    pub since_s: u64,
    pub start_unix_s: f64,
    pub end_unix_s: f64,
    pub start_utc: String,
    pub end_utc: String,
    /// The step of every figure's points.
    pub step_s: u64,
    /// How often the recording rules are evaluated (the group's interval).
    pub rule_interval_s: f64,
}

/// One query sent and the series it returned.
#[derive(Clone, Debug, Serialize)]
pub struct QueryCost {
    pub query: String,
    pub series: usize,
}

/// The whole report: what `--json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub prometheus: String,
    pub window: WindowInfo,
    /// Hosts (instance and job) with cpulab series in the window.
    pub hosts_seen: u64,
    /// Hosts whose exporter answered in the last 5 minutes.
    pub hosts_answering: u64,
    pub limit: usize,
    /// What the cost is and how each figure is taken.
    pub method: String,
    pub ranking: Vec<rank::Ranked>,
    /// Each ranked target's cost at every step of the window (the page's charts).
    pub cost_series: Vec<rank::CostSeries>,
    /// Targets that woke in the window without a cost to rank by, and why.
    pub without_cost: Vec<rank::Unranked>,
    pub findings: Vec<findings::FindingGroup>,
    pub drift: Vec<drift::Drift>,
    /// Hosts and VMs by what their guests wait for a host CPU (KVM hosts' exporters).
    pub vm_wait: vms::VmWaits,
    /// Every query sent, with the series it returned.
    pub queries: Vec<QueryCost>,
}

pub const METHOD: &str = "cost per wakeup = cross-CPU share x (mean cross-CPU wakeup-to-run \
latency - mean same-CPU latency), per host and target, from the recording rules' 5-minute rates; \
each figure is the mean of its points over the window at the step (stddev: their spread); halts \
and IPIs per wakeup are the whole host's over its watched wakeups";

/// The step of a window: 168 points (hourly over a week), never finer than the rules are
/// evaluated, at least a second.
pub fn step_for(since_s: u64, rule_interval_s: f64) -> u64 {
    (since_s / 168).max(rule_interval_s.ceil() as u64).max(1)
}

/// What the preflight found: the window (its step from the rules' interval), the rules'
/// interval, the hosts seen, and the first VM rule not loaded.
struct Preflight {
    window: Window,
    rule_interval_s: f64,
    hosts_seen: u64,
    vm_rule_missing: Option<&'static str>,
}

/// Checks the server has cpulab series and the recording rules.
fn preflight(p: &Prometheus, since_s: u64, end: f64) -> Result<Preflight> {
    let groups = p.rule_groups()?;
    let interval = groups
        .iter()
        .filter(|g| g.records.iter().any(|x| x == queries::COST))
        .map(|g| g.interval_s)
        .fold(0.0, f64::max);
    let w = Window {
        seconds: since_s,
        step_s: step_for(since_s, interval),
    };
    let seen = p.instant(&queries::hosts_seen(w), end)?;
    let hosts = seen.first().map_or(0.0, |s| s.value) as u64;
    if hosts == 0 {
        return Err(bad_input(format!(
            "--prometheus {}: no cpulab series in the last {since_s} s (no \
             cpulab_exporter_build_info); this Prometheus scrapes no cpulab exporter: add the \
             job of /usr/share/cpulab/prometheus/scrape.yml, or give the Prometheus that has it",
            p.base()
        )));
    }
    let missing: Vec<&str> = queries::RULES
        .iter()
        .copied()
        .filter(|r| !groups.iter().any(|g| g.records.iter().any(|x| x == r)))
        .collect();
    if let Some(first) = missing.first() {
        return Err(bad_input(format!(
            "--prometheus {}: the recording rule {first} is not loaded ({} of {} missing); add \
             /usr/share/cpulab/prometheus/cpulab.rules.yml (contrib/prometheus/) to its \
             rule_files and reload it",
            p.base(),
            missing.len(),
            queries::RULES.len()
        )));
    }
    let loaded = |r: &&str| groups.iter().any(|g| g.records.iter().any(|x| x == r));
    Ok(Preflight {
        window: w,
        rule_interval_s: interval,
        hosts_seen: hosts,
        vm_rule_missing: queries::VM_RULES.iter().find(|r| !loaded(r)).copied(),
    })
}

/// Queries `p` and builds the report.
pub fn run(p: &Prometheus, s: &Settings) -> Result<Report> {
    // Milliseconds, as every query states its times.
    let end = (crate::history::when::now_unix_s() * 1000.0).round() / 1000.0;
    let Preflight {
        window: w,
        rule_interval_s,
        hosts_seen,
        vm_rule_missing,
    } = preflight(p, s.since_s, end)?;
    let hosts_answering = p
        .instant(&queries::hosts_now(), end)?
        .first()
        .map_or(0.0, |x| x.value) as u64;
    let (ranking, without_cost) = rank::query(p, w, s.limit, end)?;
    let findings = findings::query(p, end)?;
    let drift = drift::query(p, w, s, end)?;
    let hosts = rank::hosts_of_ranked(&ranking);
    let ranking = rank::with_findings(ranking, &findings::of_hosts(p, &hosts, end)?, &drift);
    let start = end - s.since_s as f64;
    let cost_series = rank::series(p, w, &ranking, (start, end))?;
    let vm_wait = vms::query(p, w, s.limit, end, vm_rule_missing)?;
    Ok(Report {
        prometheus: p.base().to_string(),
        window: WindowInfo {
            since_s: s.since_s,
            start_unix_s: start,
            end_unix_s: end,
            start_utc: crate::history::when::utc(start as i64),
            end_utc: crate::history::when::utc(end as i64),
            step_s: w.step_s,
            rule_interval_s,
        },
        hosts_seen,
        hosts_answering,
        limit: s.limit,
        method: METHOD.to_string(),
        ranking,
        cost_series,
        without_cost,
        findings,
        drift,
        vm_wait,
        queries: p
            .log
            .borrow()
            .iter()
            .map(|(q, n)| QueryCost {
                query: q.clone(),
                series: *n,
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_week_is_read_hourly_and_never_finer_than_the_rules() {
        assert_eq!(step_for(7 * 86_400, 30.0), 3_600);
        assert_eq!(step_for(600, 30.0), 30);
        assert_eq!(step_for(600, 1.0), 3);
        assert_eq!(step_for(60, 0.0), 1);
    }

    #[test]
    fn a_missing_figure_says_why_and_is_never_zero() {
        let r = Reading::of(Some(f64::NAN), "no halting idle states");
        assert_eq!(r.mean, None);
        assert_eq!(r.not_available.as_deref(), Some("no halting idle states"));
        let j = serde_json::to_value(Reading::of(None, "x")).unwrap();
        assert_eq!(j, serde_json::json!({"not_available": "x"}));
        assert_eq!(Reading::of(Some(0.0), "x").mean, Some(0.0));
    }
}
