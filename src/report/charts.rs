//! The doctor's measurements as charts: the placement matrix, each placement class as bars
//! with their intervals, the counters per round trip, messaging throughput, OS costs, the share
//! check, scaling curves and the application presets. Each returns HTML (a heading, a chart and
//! a line of explanation), or nothing when that measurement is absent.

use super::svg::{self, Bar, esc};
use crate::doctor::measurements::{Measurements, WakeupRun};
use crate::doctor::rules::{thousands, wakeup_ipis};
use crate::output::fmt_ns;
use std::collections::BTreeMap;

fn section(title: &str, note: &str, charts: &str) -> String {
    format!(
        "<section><h2>{}</h2><p class=\"note\">{}</p>{charts}</section>\n",
        esc(title),
        esc(note)
    )
}

fn ns(v: f64) -> String {
    fmt_ns(v)
}

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
pub fn placement_matrix(runs: &[WakeupRun]) -> String {
    let Some(method) = main_method(runs) else {
        return String::new();
    };
    let cells: BTreeMap<(u32, u32), f64> = runs
        .iter()
        .filter(|w| w.method == method && w.blocking)
        .filter_map(|w| Some((pair(w)?, w.rtt_ns.mean)))
        .collect();
    if cells.is_empty() {
        return String::new();
    }
    let mut cpus: Vec<u32> = cells.keys().flat_map(|(a, b)| [*a, *b]).collect();
    cpus.sort_unstable();
    cpus.dedup();
    let names: Vec<String> = cpus.iter().map(|c| format!("cpu{c}")).collect();
    let grid: Vec<Vec<Option<f64>>> = cpus
        .iter()
        .map(|a| cpus.iter().map(|b| cells.get(&(*a, *b)).copied()).collect())
        .collect();
    let chart = svg::heatmap(
        &format!("Mean {method} round trip by CPU pair"),
        &names,
        &names,
        &grid,
        &ns,
        ("waker", "woken (responder) CPU"),
    );
    section(
        "Placement matrix",
        "Blocking round trip between every pair of CPUs measured (row: the initiating end, column: the responding end). The diagonal is both ends on one CPU; darker is slower.",
        &chart,
    )
}

/// Bars with 95% whiskers for every placement, one chart per method.
pub fn placement_bars(runs: &[WakeupRun]) -> String {
    let mut methods: Vec<(String, bool)> = runs
        .iter()
        .map(|w| (w.method.clone(), w.blocking))
        .collect();
    methods.dedup();
    methods.sort();
    methods.dedup();
    let mut charts = String::new();
    for (m, blocking) in methods {
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
        charts += &svg::bars(&format!("{m} ({kind}) round trip by placement"), &bars, &ns);
    }
    section(
        "Round trip by placement class",
        "Mean round trip with its 95% confidence interval (whiskers) for each placement; the fastest is highlighted. Spinning round trips move only a cache line; blocking ones pay a wakeup.",
        &charts,
    )
}

/// Idle entries and IPIs per round trip for each blocking run: the mechanism.
pub fn counters(runs: &[WakeupRun]) -> String {
    let Some(method) = main_method(runs) else {
        return String::new();
    };
    let rs: Vec<&WakeupRun> = runs
        .iter()
        .filter(|w| w.method == method && w.blocking)
        .collect();
    if rs.iter().all(|w| w.per_round_trip.is_empty()) {
        return String::new();
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
        rs.iter().map(|w| wakeup_ipis(w).unwrap_or(0.0)).collect(),
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
    let chart = svg::grouped(
        &format!("Counters per {method} round trip"),
        &cats,
        &series,
        &|v| format!("{v:.1}"),
    );
    section(
        "Counters per round trip",
        "Summed over both CPUs. About one halt and one IPI per CPU per round trip means every wakeup goes through an idle exit (in a VM: through the hypervisor); none means the cost is elsewhere.",
        &chart,
    )
}

pub fn throughput(m: &Measurements) -> String {
    if m.throughput.is_empty() {
        return String::new();
    }
    let best = m
        .throughput
        .iter()
        .map(|t| t.messages_per_s.mean)
        .fold(0.0, f64::max);
    let bars: Vec<Bar> = m
        .throughput
        .iter()
        .map(|t| Bar {
            label: format!("{} (CPUs {})", t.placement, t.cpus),
            value: t.messages_per_s.mean,
            ci: Some((t.messages_per_s.ci95_low, t.messages_per_s.ci95_high)),
            accent: t.messages_per_s.mean == best,
        })
        .collect();
    section(
        "Many tasks communicating",
        "Messages per second with 16 threads exchanging 100-byte messages through pipes (hackbench-like), packed on one CPU, spread over the usable CPUs, or placed by the scheduler. Throughput can favour spreading where latency favours co-location.",
        &svg::bars("Messages per second by placement", &bars, &|v| thousands(v)),
    )
}

pub fn oscost(m: &Measurements) -> String {
    let Some(o) = &m.oscost else {
        return String::new();
    };
    // Microsecond primitives and millisecond ones on one axis would hide the former.
    let bar = |p: &&crate::doctor::measurements::PrimitiveCost| Bar {
        label: p.name.replace('_', " "),
        value: p.cost_ns.mean,
        ci: Some((p.cost_ns.ci95_low, p.cost_ns.ci95_high)),
        accent: false,
    };
    let (fast, slow): (Vec<_>, Vec<_>) =
        o.primitives.iter().partition(|p| p.cost_ns.mean < 10_000.0);
    let mut charts = String::new();
    for (title, group) in [
        (
            "Cost per operation: entering the kernel and switching",
            fast,
        ),
        (
            "Cost per operation: creating tasks and mapping memory",
            slow,
        ),
    ] {
        if !group.is_empty() {
            charts += &svg::bars(title, &group.iter().map(bar).collect::<Vec<_>>(), &ns);
        }
    }
    if let Some(f) = &o.frequency {
        let b = |label: &str, c: &crate::stats::MeanCi| Bar {
            label: label.into(),
            value: c.mean,
            ci: Some((c.ci95_low, c.ci95_high)),
            accent: false,
        };
        charts += &svg::bars(
            "Effective speed of a dependent loop (MHz-equivalent)",
            &[
                b("after idle (cold)", &f.cold_mhz),
                b("under load (warm)", &f.warm_mhz),
            ],
            &|v| format!("{v:.0}"),
        );
    }
    section(
        "Operating-system costs",
        "What entering the kernel, switching tasks and creating them costs here; kernels, mitigations and virtualisation change these.",
        &charts,
    )
}

pub fn share(m: &Measurements) -> String {
    let Some(s) = &m.share else {
        return String::new();
    };
    let bars = [
        Bar {
            label: "measured share".into(),
            value: s.share.mean,
            ci: Some((s.share.ci95_low, s.share.ci95_high)),
            accent: true,
        },
        Bar {
            label: "fair-share model".into(),
            value: s.model_share,
            ci: None,
            accent: false,
        },
    ];
    section(
        "Share of a CPU",
        &format!(
            "{} CPU-bound workers, one per usable CPU, each against one worker alone; steal during the check {:.1}%.",
            s.workers, s.steal_pct
        ),
        &svg::bars("Share of a CPU per worker", &bars, &|v| {
            format!("{:.0}%", v * 100.0)
        }),
    )
}

pub fn scaling(m: &Measurements) -> String {
    if m.scaling.is_empty() {
        return String::new();
    }
    let mut charts = String::new();
    let mut workloads: Vec<&str> = m.scaling.iter().map(|p| p.workload.as_str()).collect();
    workloads.sort_unstable();
    workloads.dedup();
    for w in workloads {
        let mut by_policy: BTreeMap<&str, Vec<svg::Point>> = BTreeMap::new();
        for p in m.scaling.iter().filter(|p| p.workload == w) {
            by_policy.entry(&p.policy).or_default().push((
                p.threads as f64,
                p.speedup.mean,
                Some((p.speedup.ci95_low, p.speedup.ci95_high)),
            ));
        }
        let series: Vec<(String, Vec<svg::Point>)> = by_policy
            .into_iter()
            .map(|(k, mut v)| {
                v.sort_by(|a, b| a.0.total_cmp(&b.0));
                (k.to_string(), v)
            })
            .collect();
        charts += &svg::lines(
            &format!("{w}: speedup by thread count"),
            &series,
            ("threads", "speedup"),
            true,
        );
    }
    section(
        "Parallel scaling",
        "Speedup over one thread for each placement policy; the dashed line is ideal scaling.",
        &charts,
    )
}

pub fn presets(m: &Measurements) -> String {
    if m.presets.is_empty() {
        return String::new();
    }
    let mut charts = String::new();
    let mut workloads: Vec<&str> = m.presets.iter().map(|p| p.workload.as_str()).collect();
    workloads.dedup();
    for w in workloads {
        let rs: Vec<_> = m.presets.iter().filter(|p| p.workload == w).collect();
        let best = rs.iter().map(|p| p.per_s.mean).fold(0.0, f64::max);
        let bars: Vec<Bar> = rs
            .iter()
            .map(|p| Bar {
                label: p.placement.clone(),
                value: p.per_s.mean,
                ci: Some((p.per_s.ci95_low, p.per_s.ci95_high)),
                accent: p.per_s.mean == best,
            })
            .collect();
        charts += &svg::bars(&format!("{w}: transactions per second"), &bars, &|v| {
            thousands(v)
        });
    }
    section(
        "Real applications",
        "The real programs under each placement (cpulab pair).",
        &charts,
    )
}

/// Every chart the measurements allow, in reading order.
pub fn all(m: &Measurements) -> String {
    [
        placement_matrix(&m.wakeup),
        placement_bars(&m.wakeup),
        counters(&m.wakeup),
        throughput(m),
        presets(m),
        scaling(m),
        oscost(m),
        share(m),
    ]
    .concat()
}
