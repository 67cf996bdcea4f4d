//! The text and the page of a `host bench` result: one table builder per section, whose rows
//! serve both.

use super::report::{HostBenchReport, Point, ShareRow, Sweep};
use crate::host::text_table;
use crate::output::Style;
use crate::report::html;
use crate::stats::MeanCi;
use crate::units::fmt_ns;

const NA: &str = "-";

/// A time that may be negative (a saving that is a loss): its sign, then its size in its unit.
fn signed_ns(v: f64) -> String {
    if v < 0.0 {
        format!("-{}", fmt_ns(-v))
    } else {
        fmt_ns(v)
    }
}

fn ci_ns(m: &Option<MeanCi>) -> String {
    match m {
        Some(m) if m.n > 1 => format!("{} ± {}", signed_ns(m.mean), fmt_ns(m.ci95_half_width)),
        Some(m) => signed_ns(m.mean),
        None => NA.into(),
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or(NA.into(), |v| format!("{:.1}%", 100.0 * v))
}

/// A KVM count per round trip for each vCPU, `a + b`; `-` where this KVM does not report it.
fn per_trip(p: &Point, key: &str) -> String {
    let v: Vec<String> = p
        .vcpus
        .iter()
        .map(|v| {
            v.per_round_trip
                .get(key)
                .map_or(NA.into(), |x| format!("{x:.2}"))
        })
        .collect();
    if v.is_empty() {
        NA.into()
    } else {
        v.join(" + ")
    }
}

fn cpu_of(p: &Point, f: fn(&super::report::VcpuCounts) -> Option<f64>) -> String {
    let v: Vec<String> = p
        .vcpus
        .iter()
        .map(|v| f(v).map_or(NA.into(), |x| format!("{:.0}%", 100.0 * x)))
        .collect();
    v.join(" + ")
}

fn limit(p: &Point) -> String {
    p.halt_poll_limit_ns.map_or("module".into(), |v| {
        if v == 0 {
            "0 (off)".into()
        } else {
            fmt_ns(v as f64)
        }
    })
}

const POINT_HEADER: [&str; 13] = [
    "exchange",
    "vCPU threads",
    "placement",
    "halt-poll limit",
    "round trip ± 95% CI",
    "guest p50",
    "guest p99",
    "guest/host",
    "stamped/bare",
    "halts/rt",
    "IPIs/rt",
    "vCPU CPU",
    "polling CPU",
];

fn point_row(p: &Point) -> Vec<String> {
    let exchange = match p.poll_window_ns {
        Some(w) => format!("{} (window {})", p.exchange.as_str(), fmt_ns(w as f64)),
        None => p.exchange.as_str().into(),
    };
    vec![
        exchange,
        p.cpus.clone(),
        p.placement.to_string(),
        limit(p),
        ci_ns(&p.rtt_ns),
        p.guest_rtt
            .as_ref()
            .map_or(NA.into(), |g| fmt_ns(g.p50_ns as f64)),
        p.guest_rtt
            .as_ref()
            .map_or(NA.into(), |g| fmt_ns(g.p99_ns as f64)),
        p.guest_over_host.map_or(NA.into(), |r| format!("{r:.3}")),
        p.stamping_cost.map_or(NA.into(), |r| format!("{r:.3}")),
        per_trip(p, "halt_exits"),
        per_trip(p, "irq_injections"),
        cpu_of(p, |v| v.on_cpu_share),
        cpu_of(p, |v| v.polling_share),
    ]
}

const SWEEP_HEADER: [&str; 6] = [
    "halt-poll limit",
    "round trip ± 95% CI",
    "saved vs off",
    "polls won",
    "halts/rt",
    "polling CPU (both vCPUs)",
];

fn sweep_rows(s: &Sweep) -> Vec<Vec<String>> {
    s.rows
        .iter()
        .map(|r| {
            vec![
                limit(&r.point),
                ci_ns(&r.point.rtt_ns),
                ci_ns(&r.saved_ns),
                pct(r.polls_won_share),
                per_trip(&r.point, "halt_exits"),
                r.polling_cpu.map_or(NA.into(), |c| format!("{c:.2} CPU")),
            ]
        })
        .collect()
}

const SHARE_HEADER: [&str; 8] = [
    "busy vCPUs (VM1 + VM2)",
    "host CPUs",
    "VM1 share ± 95% CI (loops)",
    "VM1 run time ± 95% CI",
    "model",
    "VM2 share ± 95% CI (loops)",
    "VM2 run time ± 95% CI",
    "model ",
];

fn share_cell(m: &Option<MeanCi>) -> String {
    match m {
        Some(m) => format!("{:.3} ± {:.3}", m.mean, m.ci95_half_width),
        None => NA.into(),
    }
}

fn share_rows(rows: &[ShareRow]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|r| {
            vec![
                format!(
                    "{} + {}{}",
                    r.vm1_vcpus,
                    r.vm2_vcpus,
                    if r.even { "" } else { " (uneven)" }
                ),
                r.host_cpus.to_string(),
                share_cell(&r.vm1_share),
                share_cell(&r.vm1_ran_share),
                format!("{:.3}", r.vm1_model),
                share_cell(&r.vm2_share),
                share_cell(&r.vm2_ran_share),
                format!("{:.3}", r.vm2_model),
            ]
        })
        .collect()
}

const TIMER_HEADER: [&str; 8] = [
    "period",
    "halt-poll limit",
    "CPU",
    "achieved period ± 95% CI",
    "late p50",
    "late p99",
    "halts/wake",
    "polls won/wake",
];

fn timer_rows(r: &HostBenchReport) -> Vec<Vec<String>> {
    r.timer
        .iter()
        .map(|t| {
            let per = |k: &str| {
                t.vcpu
                    .per_round_trip
                    .get(k)
                    .map_or(NA.into(), |v| format!("{v:.2}"))
            };
            vec![
                fmt_ns(t.period_ns as f64),
                t.halt_poll_limit_ns.map_or("module".into(), |v| {
                    if v == 0 {
                        "0 (off)".into()
                    } else {
                        fmt_ns(v as f64)
                    }
                }),
                t.cpu.clone(),
                ci_ns(&t.achieved_period_ns),
                t.lateness
                    .as_ref()
                    .map_or(NA.into(), |l| fmt_ns(l.p50_ns as f64)),
                t.lateness
                    .as_ref()
                    .map_or(NA.into(), |l| fmt_ns(l.p99_ns as f64)),
                per("halt_exits"),
                per("halt_successful_poll"),
            ]
        })
        .collect()
}

fn kvm_line(r: &HostBenchReport) -> String {
    let k = &r.kvm;
    format!(
        "KVM {}{}, guest TSC {:.1} MHz, module halt_poll_ns {}{}",
        k.module.as_deref().unwrap_or("(no vendor module listed)"),
        if k.guest_code_emulated {
            " (guest instructions emulated)"
        } else {
            ""
        },
        f64::from(k.tsc_khz) / 1e3,
        k.module_halt_poll_ns
            .map_or("not available".into(), |v| fmt_ns(v as f64)),
        match k.halt_poll_ns_writable {
            Some(true) => "",
            Some(false) => " (read-only here)",
            None => " (whether it can be changed: not available)",
        }
    )
}

pub fn render_text(r: &HostBenchReport, st: &Style) -> String {
    let s = &r.settings;
    let mut out = format!(
        "{} {}\n{} windows of {} per point, after {} of warm-up\n",
        st.bold("cpulab host bench:"),
        kvm_line(r),
        s.repeats,
        fmt_ns(s.duration.as_nanos() as f64),
        fmt_ns(s.warmup.as_nanos() as f64),
    );
    if r.conditions.noisy {
        out += &st.yellow("warning: other load was seen before the run; figures may be spoiled\n");
    }
    if !r.points.is_empty() {
        out += &format!(
            "\n{}\n",
            st.bold("Exchanges: the bare round trip over the host clock; guest-timed percentiles (rdtsc) from a stamped window; KVM's counts per round trip, vCPU 0 + vCPU 1")
        );
        let rows: Vec<_> = r.points.iter().map(point_row).collect();
        out += &text_table(&POINT_HEADER, &rows);
        out.push('\n');
    }
    for d in &r.differences {
        out += &format!("  {}: {}\n", d.label, ci_ns(&Some(d.ns.clone())));
    }
    if let Some(sw) = &r.sweep {
        let first = sw
            .rows
            .first()
            .map_or(String::new(), |x| x.point.cpus.clone());
        out += &format!(
            "\n{}\n",
            st.bold(&format!(
                "Halt polling: this VM's own limit (KVM_CAP_HALT_POLL), halt ping-pong on {first}"
            ))
        );
        out += &text_table(&SWEEP_HEADER, &sweep_rows(sw));
        out.push('\n');
        out += &match sw.bend_ns {
            Some(b) => format!(
                "  the curve bends at {}: the smallest limit within 10% of the best round trip\n",
                if b == 0 { "0".into() } else { fmt_ns(b as f64) }
            ),
            None => "  no bend: no limit the sweep set has a round trip\n".into(),
        };
    }
    if !r.share.is_empty() {
        out += &format!(
            "\n{}\n",
            st.bold("Fair share: two VMs of busy vCPUs on the same CPUs, each VM's loop rate beside the other over its rate alone, and its run time as its vCPUs counted it (their TSC) beside the other over alone")
        );
        out += &text_table(&SHARE_HEADER, &share_rows(&r.share));
        out.push('\n');
    }
    if !r.timer.is_empty() {
        out += &format!(
            "\n{}\n",
            st.bold("Timer wake: a vCPU arms its TSC-deadline timer a period ahead and halts; how late each wake comes (guest rdtsc)")
        );
        out += &text_table(&TIMER_HEADER, &timer_rows(r));
        out.push('\n');
    }
    for n in &r.conditions.notes {
        out += &format!("{}\n", st.dim(&format!("note: {n}")));
    }
    out
}

pub fn page(r: &HostBenchReport) -> String {
    let points: Vec<_> = r.points.iter().map(point_row).collect();
    let body = maud::html! {
        p { (kvm_line(r)) }
        @if !points.is_empty() {
            section {
                h2 { "Exchanges" }
                p.note { "Round trip over the host clock with its 95% interval over windows; guest-timed percentiles from rdtsc stamps; KVM's counts per round trip, vCPU 0 + vCPU 1." }
                (html::table(&POINT_HEADER, &points, 4))
                ul.plain { @for d in &r.differences { li { (d.label) ": " (ci_ns(&Some(d.ns.clone()))) } } }
            }
        }
        @if let Some(sw) = &r.sweep {
            section {
                h2 { "Halt polling" }
                p.note { "This VM's own limit (KVM_CAP_HALT_POLL); nothing on the host changed." }
                (html::table(&SWEEP_HEADER, &sweep_rows(sw), 1))
            }
        }
        @if !r.share.is_empty() {
            section {
                h2 { "Fair share" }
                (html::table(&SHARE_HEADER, &share_rows(&r.share), 1))
            }
        }
        @if !r.timer.is_empty() {
            section {
                h2 { "Timer wake" }
                (html::table(&TIMER_HEADER, &timer_rows(r), 3))
            }
        }
        (html::conditions(&r.conditions, &[]))
    };
    html::page("cpulab host bench", html::facts_line(&r.conditions), body)
}
