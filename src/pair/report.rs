//! The result of a pair experiment (this struct *is* the JSON schema) and its text rendering.
//!
//! Each placement gets the mean of its runs with a 95% interval (Student's t over the runs, which
//! are independent: each is a fresh client), its ratio to the best placement, and the mean of
//! every per-transaction cost. The raw runs stay in the JSON, with all their counters, so a later
//! `cpulab compare` can test significance run by run.

use crate::machine::Conditions;
use crate::pair::placement::Placement;
use crate::pair::runner::RunResult;
use crate::stats::MeanCi;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;

/// What ran, and how.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExperimentInfo {
    /// `pgbench`, `http`, `redis`, or `null` for a generic pair.
    pub preset: Option<String>,
    /// Workload and options in words (`select1, -c 1 -j 1`).
    pub workload: Option<String>,
    /// The server, as found (`PostgreSQL 15.10 (/usr/lib/postgresql/15/bin/postgres)`).
    pub server: String,
    /// The server's command line (empty for a server built into cpulab).
    pub server_command: Vec<String>,
    /// The client command of the first measured run.
    pub client_command: Vec<String>,
    /// Parser that read the client's figure (`pgbench`, `ab`, `wrk`, `custom`, ...).
    pub metric_parser: String,
    /// Unit of every `value` and `metric` (`tps`, `requests/s`).
    pub metric_unit: String,
    /// True for throughput (more is better), false for a cost such as latency.
    pub higher_is_better: bool,
    /// Seconds per client run when cpulab chooses it (presets); `null` for a generic client.
    pub duration_s: Option<u32>,
    /// Runs per placement.
    pub repeat: usize,
    /// How placements change the server: it is restarted with the new affinity set before exec
    /// whenever its CPUs change, so its whole tree is placed from its first fork.
    pub server_strategy: String,
    /// Times the server was started.
    pub server_starts: usize,
    /// Whether one discarded client run followed every server start.
    pub warmup: bool,
    /// Busy neighbours (unpinned spinning threads) that ran beside every measured run; absent
    /// when none did.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub neighbour_load: usize,
}

/// One placement's figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlacementResult {
    /// Where server and client ran.
    pub placement: Placement,
    /// Mean of the runs' values with its 95% confidence interval.
    pub metric: MeanCi,
    /// How many times worse than the best placement (1.00 = the best; 4.0 = a quarter of its
    /// throughput).
    pub ratio_to_best: f64,
    /// Mean over the runs of each per-transaction cost (see `RunResult::per_transaction`).
    pub per_transaction: BTreeMap<String, f64>,
    /// Mean steal time on the CPUs in use during the runs, in percent.
    pub steal_pct: f64,
    /// CPUs the server tree was seen on (tells where an unpinned server ran).
    pub server_cpus_seen: Option<crate::cpulist::CpuSet>,
    /// Every run, raw.
    pub runs: Vec<RunResult>,
}

/// The whole experiment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairReport {
    /// Machine, kernel, allowed CPUs, the background-load check and anything that qualifies
    /// the figures.
    pub conditions: Conditions,
    /// What ran, and how.
    pub experiment: ExperimentInfo,
    /// Placements in the order they were planned (nearest first, unpinned last).
    pub placements: Vec<PlacementResult>,
    /// Label of the best placement.
    pub best: String,
    /// Anything that qualifies the figures.
    pub notes: Vec<String>,
}

/// Summarises the runs of one placement. `None` when it has no run.
pub fn summarise(placement: Placement, runs: Vec<RunResult>) -> Option<PlacementResult> {
    let values: Vec<f64> = runs.iter().map(|r| r.value).collect();
    let metric = MeanCi::of(&values)?;
    let mut per_transaction: BTreeMap<String, f64> = BTreeMap::new();
    for r in &runs {
        for (k, v) in &r.per_transaction {
            *per_transaction.entry(k.clone()).or_insert(0.0) += v / runs.len() as f64;
        }
    }
    let steal_pct = runs.iter().map(|r| r.system.steal_pct()).sum::<f64>() / runs.len() as f64;
    let seen: crate::cpulist::CpuSet = runs
        .iter()
        .filter_map(|r| r.server.as_ref())
        .flat_map(|s| s.cpus_seen.iter())
        .collect();
    Some(PlacementResult {
        placement,
        metric,
        ratio_to_best: 1.0,
        per_transaction,
        steal_pct,
        server_cpus_seen: (!seen.is_empty()).then_some(seen),
        runs,
    })
}

/// Fills `ratio_to_best` and returns the best placement's label.
pub fn rank(results: &mut [PlacementResult], higher_is_better: bool) -> String {
    let better = |a: f64, b: f64| if higher_is_better { a > b } else { a < b };
    let Some(best) = results
        .iter()
        .map(|r| r.metric.mean)
        .reduce(|a, b| if better(b, a) { b } else { a })
    else {
        return String::new();
    };
    let mut label = String::new();
    for r in results.iter_mut() {
        let m = r.metric.mean;
        r.ratio_to_best = match (higher_is_better, m > 0.0 && best > 0.0) {
            (_, false) => f64::NAN,
            (true, true) => best / m,
            (false, true) => m / best,
        };
        if m == best && label.is_empty() {
            label = r.placement.label.clone();
        }
    }
    label
}

fn group(v: f64) -> String {
    if !v.is_finite() {
        return "-".to_string();
    }
    let s = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0.0 { format!("-{out}") } else { out }
}

fn fig(v: Option<&f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "-".to_string())
}

/// The human page.
pub fn render(r: &PairReport, style: &crate::output::Style) -> String {
    let e = &r.experiment;
    let mut s = String::new();
    let _ = writeln!(s, "{}", style.bold(&format!("cpulab pair: {}", e.server)));
    if let Some(w) = &e.workload {
        let _ = writeln!(s, "workload: {w}");
    }
    let _ = writeln!(s, "client:   {}", e.client_command.join(" "));
    let per_run = e
        .duration_s
        .map(|d| format!("{d} s"))
        .unwrap_or_else(|| "as the client decides".into());
    let _ = writeln!(
        s,
        "runs:     {} per placement, {per_run} each, interleaved; server started {} times\n",
        e.repeat, e.server_starts
    );
    let unit = &e.metric_unit;
    let _ = writeln!(
        s,
        "{:<22} {:>18} {:>7}  {:>8} {:>8} {:>8} {:>8} {:>9}",
        "placement",
        format!("{unit} ±95%"),
        "x best",
        "srv cs",
        "cli cs",
        "halts",
        "IPIs",
        "srv CPU"
    );
    let _ = writeln!(
        s,
        "{:<22} {:>18} {:>7}  {:>8} {:>8} {:>8} {:>8} {:>9}",
        "", "", "", "/tx", "/tx", "/tx", "/tx", "us/tx"
    );
    for p in &r.placements {
        let t = &p.per_transaction;
        let ipis = ["irq_RES", "irq_CAL"]
            .iter()
            .filter_map(|k| t.get(*k))
            .sum::<f64>();
        let ratio = format!("{:.2}", p.ratio_to_best);
        let ratio = if p.placement.label == r.best {
            style.green(&ratio)
        } else {
            ratio
        };
        let _ = writeln!(
            s,
            "{:<22} {:>18} {:>7}  {:>8} {:>8} {:>8} {:>8} {:>9}",
            p.placement.label,
            format!(
                "{} ±{}",
                group(p.metric.mean),
                group(p.metric.ci95_half_width)
            ),
            ratio,
            fig(t.get("server_context_switches"), 2),
            fig(t.get("client_context_switches"), 2),
            fig(t.get("idle_entries"), 2),
            format!("{ipis:.2}"),
            fig(t.get("server_cpu_us"), 1),
        );
    }
    let _ = writeln!(
        s,
        "\n{}",
        style.dim(
            "cs = context switches, halts = idle-state entries, IPIs = rescheduling + function-call \
             interrupts, all per transaction on the CPUs in use; x best = times slower than the best."
        )
    );
    for n in r.conditions.notes.iter().chain(&r.notes) {
        let _ = writeln!(s, "{} {n}", style.yellow("note:"));
    }
    s
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_grouping() {
        assert_eq!(group(66012.4), "66,012");
        assert_eq!(group(999.0), "999");
        assert_eq!(group(1234567.0), "1,234,567");
        assert_eq!(group(f64::NAN), "-");
    }
}
