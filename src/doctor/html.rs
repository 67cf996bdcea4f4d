//! The doctor's page: verdict, findings with their evidence and remedies, every chart the
//! measurements allow, conditions. Built from the primitives in `report::html` and the charts
//! of the experiments the doctor ran (the wakeup charts are pingpong's own).

use super::DoctorReport;
use super::findings::{Finding, Site};
use super::measurements::{Measurements, PrimitiveCost};
use crate::report::html::{self, chart, section};
use crate::report::svg::{self, Bar};
use crate::units::{fmt_ns, thousands};
use maud::{Markup, html};
use std::collections::BTreeMap;

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

fn finding(n: usize, f: &Finding, guest: bool) -> Markup {
    let sev = f.severity.as_str();
    html! {
        article class={ "finding " (sev) } {
            div.head {
                span class={ "sev " (sev) } { (sev) }
                h3 { (n) ". " (f.title) }
                span.conf { "confidence: " (f.confidence.as_str()) }
            }
            p.magnitude { (capitalise(&f.magnitude.text)) }
            @if let Some(why) = &f.uncertain {
                p.uncertain { "Uncertain: " (why) }
            }
            h4 { "Evidence" }
            table {
                tr { th { "what" } th { "value" } th { "source" } }
                @for e in &f.evidence {
                    tr { td { (e.label) } td { (e.in_words()) } td.src { (e.source) } }
                }
            }
            h4 { "Mechanism" }
            p { (f.mechanism) }
            h4 { "What to do" }
            @for r in &f.remedies {
                div.remedy {
                    code { (r.command) }
                    @if r.site == Site::Host || !r.who.is_empty() {
                        p.where { "Where: " (r.where_who(guest)) }
                    }
                    p { (r.effect) }
                    p.cost { "Cost: " (r.cost_caveat) }
                    @if let Some(t) = &r.try_command {
                        p.try { "Measure it here: " code.inline { (t) } }
                    }
                    @if let Some(m) = &r.measured {
                        p.measured { (capitalise(m)) }
                    }
                }
            }
        }
    }
}

fn bar(label: String, m: &crate::stats::MeanCi, accent: bool) -> Bar {
    Bar {
        label,
        value: m.mean,
        ci: Some((m.ci95_low, m.ci95_high)),
        accent,
    }
}

fn throughput(m: &Measurements) -> Markup {
    if m.throughput.is_empty() {
        return html! {};
    }
    let best = m
        .throughput
        .iter()
        .map(|t| t.messages_per_s.mean)
        .fold(0.0, f64::max);
    let bars: Vec<Bar> = m
        .throughput
        .iter()
        .map(|t| {
            bar(
                format!("{} (CPUs {})", t.placement, t.cpus),
                &t.messages_per_s,
                t.messages_per_s.mean == best,
            )
        })
        .collect();
    section(
        "Many tasks communicating",
        "Messages per second with 16 threads exchanging 100-byte messages through pipes \
         (hackbench-like), packed on one CPU, spread over the usable CPUs, or placed by the \
         scheduler. Throughput can favour spreading where latency favours co-location.",
        chart(svg::bars(
            "Messages per second by placement",
            &bars,
            &thousands,
        )),
    )
}

fn oscost(m: &Measurements) -> Markup {
    let Some(o) = &m.oscost else {
        return html! {};
    };
    let b = |p: &&PrimitiveCost| bar(p.name.replace('_', " "), &p.cost_ns, false);
    // Microsecond primitives and millisecond ones on one axis would hide the former.
    let (fast, slow): (Vec<_>, Vec<_>) =
        o.primitives.iter().partition(|p| p.cost_ns.mean < 10_000.0);
    let charts = html! {
        @for (title, group) in [
            ("Cost per operation: entering the kernel and switching", &fast),
            ("Cost per operation: creating tasks and mapping memory", &slow),
        ] {
            @if !group.is_empty() {
                (chart(svg::bars(title, &group.iter().map(b).collect::<Vec<_>>(), &fmt_ns)))
            }
        }
        @if let Some(f) = &o.frequency {
            (chart(svg::bars(
                if f.clock_mhz {
                    "Clock of a dependent multiply chain (MHz)"
                } else {
                    "Rate of a dependent loop (iterations per us; not a clock)"
                },
                &[
                    bar("after idle (cold)".into(), &f.cold_mhz, false),
                    bar("under load (warm)".into(), &f.warm_mhz, false),
                ],
                &|v| format!("{v:.0}"),
            )))
        }
    };
    section(
        "Operating-system costs",
        "What entering the kernel, switching tasks and creating them costs here; kernels, \
         mitigations and virtualisation change these.",
        charts,
    )
}

fn share(m: &Measurements) -> Markup {
    let Some(s) = &m.share else {
        return html! {};
    };
    let bars = [
        bar("measured share".into(), &s.share, true),
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
            "{} CPU-bound workers, one per usable CPU, each against one worker alone; steal \
             during the check {:.1}%.",
            s.workers, s.steal_pct
        ),
        chart(svg::bars("Share of a CPU per worker", &bars, &|v| {
            format!("{:.0}%", v * 100.0)
        })),
    )
}

fn scaling(m: &Measurements) -> Markup {
    let mut workloads: Vec<&str> = m.scaling.iter().map(|p| p.workload.as_str()).collect();
    workloads.sort_unstable();
    workloads.dedup();
    let charts = html! {
        @for w in &workloads {
            (chart(scaling_chart(m, w)))
        }
    };
    section(
        "Parallel scaling",
        "Speedup over one thread for each placement policy; the dashed line is ideal scaling.",
        charts,
    )
}

fn scaling_chart(m: &Measurements, w: &str) -> String {
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
    svg::lines(
        &format!("{w}: speedup by thread count"),
        &series,
        ("threads", "speedup"),
        true,
    )
}

fn presets(m: &Measurements) -> Markup {
    let mut workloads: Vec<&str> = m.presets.iter().map(|p| p.workload.as_str()).collect();
    workloads.dedup();
    let charts = html! {
        @for w in &workloads {
            (chart(preset_chart(m, w)))
        }
    };
    section(
        "Real applications",
        "The real programs under each placement (cpulab pair).",
        charts,
    )
}

fn preset_chart(m: &Measurements, w: &str) -> String {
    let rs: Vec<_> = m.presets.iter().filter(|p| p.workload == w).collect();
    let best = rs.iter().map(|p| p.per_s.mean).fold(0.0, f64::max);
    let bars: Vec<Bar> = rs
        .iter()
        .map(|p| bar(p.placement.clone(), &p.per_s, p.per_s.mean == best))
        .collect();
    svg::bars(&format!("{w}: transactions per second"), &bars, &thousands)
}

/// Every chart the measurements allow, in reading order.
pub fn charts(m: &Measurements) -> Markup {
    html! {
        (crate::pingpong::html::charts(&m.wakeup))
        (throughput(m))
        (presets(m))
        (scaling(m))
        (oscost(m))
        (share(m))
    }
}

/// The doctor's report: verdict, findings, charts, conditions.
pub fn page(r: &DoctorReport) -> String {
    let f = &r.facts;
    let host = f
        .hypervisor
        .as_ref()
        .map_or("bare metal (no hypervisor seen)".to_string(), |h| {
            format!("{h} guest")
        });
    let header = html! {
        p.facts {
            b { (r.conditions.hostname) } " · " (host) " · kernel " (r.conditions.kernel)
            " · CPUs " b { (f.allowed_cpus.to_string()) } " usable of "
            (f.online_cpus.to_string()) " online · "
            (f.cpu_model.as_deref().unwrap_or("CPU model unknown")) " · "
            (r.mode.as_str()) " run, " (format!("{:.0}", r.duration_s)) " s"
        }
    };
    let n = r.findings.len();
    let skipped: Vec<(String, String)> = r
        .measurements
        .skipped
        .iter()
        .map(|k| (k.what.clone(), k.reason.clone()))
        .collect();
    let body = html! {
        @if let Some(i) = &r.interrupted {
            p.verdict.bad {
                "Interrupted by " (i.name) " during " (i.during)
                ": partial result; that stage and every later one were not measured."
            }
        }
        @if r.findings.is_empty() {
            p.verdict.ok {
                "No finding: every effect the doctor measured is within its noise or below the \
                 size worth acting on."
            }
        } @else {
            p.verdict.bad {
                (n) " finding" @if n != 1 { "s" } ", most important first."
            }
            section {
                h2 { "Findings" }
                @for (i, x) in r.findings.iter().enumerate() {
                    (finding(i + 1, x, r.facts.hypervisor.is_some()))
                }
            }
        }
        (charts(&r.measurements))
        (html::conditions(&r.conditions, &skipped))
    };
    html::page("cpulab doctor", header, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::findings::{Confidence, Magnitude, Remedy, Severity};

    #[test]
    fn a_remedy_shows_its_try_line_and_what_it_measured() {
        let f = Finding {
            id: "cross-cpu-wakeup".into(),
            title: "Cross-vCPU wakeups are slow".into(),
            severity: Severity::of_ratio(8.0),
            magnitude: Magnitude {
                text: "cross-vCPU wakeups cost 8x".into(),
                ratio: Some(8.0),
                worse: None,
                better: None,
                unit: "ns".into(),
            },
            evidence: Vec::new(),
            mechanism: "halt exits".into(),
            remedies: vec![Remedy {
                measured: Some("measured here (pipe round trip): 56.6 us -> 7.0 us".into()),
                ..Remedy::new("echo 200000 > x", "polls", "CPU time")
                    .with_try("cpulab try haltpoll.guest_halt_poll_ns=200000")
            }],
            confidence: Confidence::from_agreeing(2),
            uncertain: None,
        };
        let page = finding(1, &f, true).into_string();
        assert!(
            page.contains("cpulab try haltpoll.guest_halt_poll_ns=200000"),
            "{page}"
        );
        assert!(
            page.contains("Measured here (pipe round trip): 56.6 us -&gt; 7.0 us"),
            "{page}"
        );
    }
}
