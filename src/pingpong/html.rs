//! The pingpong page and the wakeup charts the doctor's page shares: the placement matrix, each
//! placement as bars with their intervals, and the counters per round trip that name the
//! mechanism. Charts are drawn from [`WakeupRun`]s, the pingpong runs condensed.

use super::PingpongReport;
use super::summary::{WakeupRun, wakeup_runs};
use crate::report::html::{self, chart, section};
use crate::report::svg::{self, Bar};
use crate::units::fmt_ns;
use maud::{Markup, html};
use std::collections::BTreeMap;

/// The blocking method the matrix and counters are drawn for: pipe when measured.
fn main_method(runs: &[WakeupRun]) -> Option<String> {
    runs.iter()
        .find(|w| w.blocking && w.method == "pipe")
        .or_else(|| runs.iter().find(|w| w.blocking))
        .map(|w| w.method.clone())
}

fn pair(w: &WakeupRun) -> Option<(u32, u32)> {
    let (a, b) = w.cpus.as_deref()?.split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Heatmap of the mean round trip for every measured ordered pair of CPUs.
pub fn placement_matrix(runs: &[WakeupRun]) -> Markup {
    let Some(method) = main_method(runs) else {
        return html! {};
    };
    let cells: BTreeMap<(u32, u32), f64> = runs
        .iter()
        .filter(|w| w.method == method && w.blocking)
        .filter_map(|w| Some((pair(w)?, w.rtt_ns.mean)))
        .collect();
    if cells.is_empty() {
        return html! {};
    }
    let mut cpus: Vec<u32> = cells.keys().flat_map(|(a, b)| [*a, *b]).collect();
    cpus.sort_unstable();
    cpus.dedup();
    let names: Vec<String> = cpus.iter().map(|c| format!("cpu{c}")).collect();
    let grid: Vec<Vec<Option<f64>>> = cpus
        .iter()
        .map(|a| cpus.iter().map(|b| cells.get(&(*a, *b)).copied()).collect())
        .collect();
    let svg = svg::heatmap(
        &format!("Mean {method} round trip by CPU pair"),
        &names,
        &names,
        &grid,
        &fmt_ns,
        ("waker", "woken (responder) CPU"),
    );
    section(
        "Placement matrix",
        "Blocking round trip between every pair of CPUs measured (row: the initiating end, \
         column: the responding end). The diagonal is both ends on one CPU; darker is slower.",
        chart(svg),
    )
}

/// Bars with 95% whiskers for every placement, one chart per method.
pub fn placement_bars(runs: &[WakeupRun]) -> Markup {
    let mut methods: Vec<(String, bool)> = runs
        .iter()
        .map(|w| (w.method.clone(), w.blocking))
        .collect();
    methods.sort();
    methods.dedup();
    let charts = html! {
        @for (m, blocking) in &methods {
            (chart(method_bars(runs, m, *blocking)))
        }
    };
    section(
        "Round trip by placement class",
        "Mean round trip with its 95% confidence interval (whiskers) for each placement; the \
         fastest is highlighted. Spinning round trips move only a cache line; blocking ones pay \
         a wakeup.",
        charts,
    )
}

fn method_bars(runs: &[WakeupRun], m: &str, blocking: bool) -> String {
    let rs: Vec<&WakeupRun> = runs.iter().filter(|w| w.method == m).collect();
    let fastest = rs.iter().map(|w| w.rtt_ns.mean).fold(f64::MAX, f64::min);
    let bars: Vec<Bar> = rs
        .iter()
        .map(|w| Bar {
            label: format!("{} {}", w.class, w.cpus.as_deref().unwrap_or("(os)")),
            value: w.rtt_ns.mean,
            ci: Some((w.rtt_ns.ci95_low, w.rtt_ns.ci95_high)),
            accent: w.rtt_ns.mean == fastest,
        })
        .collect();
    let kind = if blocking { "blocking" } else { "spinning" };
    svg::bars(
        &format!("{m} ({kind}) round trip by placement"),
        &bars,
        &fmt_ns,
    )
}

/// Idle entries and IPIs per round trip for each blocking run: the mechanism.
pub fn counters(runs: &[WakeupRun]) -> Markup {
    let Some(method) = main_method(runs) else {
        return html! {};
    };
    let rs: Vec<&WakeupRun> = runs
        .iter()
        .filter(|w| w.method == method && w.blocking)
        .collect();
    if rs.iter().all(|w| w.per_round_trip.is_empty()) {
        return html! {};
    }
    let cats: Vec<String> = rs
        .iter()
        .map(|w| format!("{} {}", w.class, w.cpus.as_deref().unwrap_or("os")))
        .collect();
    let get = |k: &str| {
        rs.iter()
            .map(|w| w.per_round_trip.get(k).copied().unwrap_or(0.0))
            .collect::<Vec<_>>()
    };
    let mut series = vec![("idle entries (halts)".to_string(), get("idle_entries"))];
    series.push((
        "IPIs (RES+CAL)".into(),
        rs.iter().map(|w| w.ipis().unwrap_or(0.0)).collect(),
    ));
    if rs
        .iter()
        .any(|w| w.per_round_trip.contains_key("voluntary_switches"))
    {
        // Voluntary and involuntary together: on one CPU the woken end often preempts the waker
        // before it blocks, which the kernel counts as involuntary.
        let (v, inv) = (get("voluntary_switches"), get("involuntary_switches"));
        series.push((
            "context switches".into(),
            v.iter().zip(&inv).map(|(a, b)| a + b).collect(),
        ));
    }
    let svg = svg::grouped(
        &format!("Counters per {method} round trip"),
        &cats,
        &series,
        &|v| format!("{v:.1}"),
    );
    section(
        "Counters per round trip",
        "Summed over both CPUs. About one halt and one IPI per CPU per round trip means every \
         wakeup goes through an idle exit (in a VM: through the hypervisor); none means the cost \
         is elsewhere.",
        chart(svg),
    )
}

/// Every wakeup chart, in reading order.
pub fn charts(runs: &[WakeupRun]) -> Markup {
    html! {
        (placement_matrix(runs))
        (placement_bars(runs))
        (counters(runs))
    }
}

/// The page of a saved `pingpong` result.
pub fn page(r: &PingpongReport) -> String {
    let runs = wakeup_runs(r);
    let skipped: Vec<(String, String)> = r
        .skipped
        .iter()
        .map(|s| (format!("{} {}", s.method, s.placement), s.reason.clone()))
        .collect();
    html::page(
        "cpulab pingpong",
        html::facts_line(&r.conditions),
        html! {
            (charts(&runs))
            (html::conditions(&r.conditions, &skipped))
        },
    )
}
