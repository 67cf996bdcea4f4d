//! Text and HTML of a watch result.
//!
//! The text leads with what an operator acts on: per process, where its wakeups landed and what
//! each placement cost; then the wakeup graph's top edges; then the VM mechanism; then the
//! estimate, marked as one, with the trial that would measure it. Lost events are printed
//! whenever there were any, because every count above is then a lower bound.

use super::report::{ClassReport, WatchReport};
use crate::output::{Style, fmt_ns};
use std::fmt::Write;

fn class_line(c: &ClassReport) -> String {
    let lat = match &c.latency {
        Some(l) => format!(
            "p50 {}  p90 {}  p99 {}  max {}  ({} timed)",
            fmt_ns(l.p50_ns as f64),
            fmt_ns(l.p90_ns as f64),
            fmt_ns(l.p99_ns as f64),
            fmt_ns(l.max_ns as f64),
            l.samples
        ),
        None => "no switch-in seen".into(),
    };
    format!(
        "{:<14} {:>5.1}%  {:>10.0}/s  {lat}",
        c.class.as_str(),
        c.share * 100.0,
        c.wakeups_per_s
    )
}

pub fn text(r: &WatchReport, style: &Style) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} {} for {:.2} s ({}), {} scheduler events",
        style.bold("watch:"),
        r.target,
        r.interval_s,
        r.ended,
        r.events
    );
    if r.lost_events > 0 {
        let _ = writeln!(
            s,
            "{}",
            style.yellow(&format!(
                "LOST {} events: the reader fell behind; every count below is a lower bound",
                r.lost_events
            ))
        );
    }
    if r.processes.is_empty() {
        let _ = writeln!(s, "no wakeups of the watched tasks were seen");
    }
    for p in &r.processes {
        let _ = writeln!(
            s,
            "\n{}  pids {}  threads {}  {:.0} wakeups/s  run-queue wait {:.3} s/s  on-CPU {:.3} s/s  migrations {:.0}/s  CPUs {}",
            style.bold(&p.name),
            short_pids(&p.pids),
            p.threads,
            p.wakeups_per_s,
            p.runq_wait_s_per_s,
            p.on_cpu_s_per_s,
            p.migrations_per_s,
            p.cpus_used
        );
        for c in &p.classes {
            let _ = writeln!(s, "  {}", class_line(c));
        }
    }
    if !r.pairs.is_empty() {
        let _ = writeln!(s, "\n{}", style.bold("top waker -> wakee pairs"));
        for p in &r.pairs {
            let _ = writeln!(
                s,
                "  {} ({}) -> {} ({}): {:.0} wakeups/s",
                p.waker, p.waker_pid, p.wakee, p.wakee_pid, p.wakeups_per_s
            );
            for c in &p.classes {
                let _ = writeln!(s, "    {}", class_line(c));
            }
        }
    }
    let vm = &r.vm;
    let _ = writeln!(s, "\n{} (CPUs {})", style.bold("VM mechanism"), vm.cpus);
    let per: Vec<String> = vm
        .per_wakeup
        .iter()
        .map(|(k, v)| format!("{k} {v:.2}"))
        .collect();
    let _ = writeln!(
        s,
        "  per wakeup: {}",
        if per.is_empty() {
            "unavailable".to_string()
        } else {
            per.join(", ")
        }
    );
    let _ = writeln!(
        s,
        "  steal {:.1}%  guest halt polling: {}",
        vm.steal_pct,
        match vm.guest_halt_poll_ns {
            Some(ns) => format!("guest_halt_poll_ns={ns}"),
            None => "no haltpoll driver".into(),
        }
    );
    for u in &vm.unavailable {
        let _ = writeln!(s, "  unavailable: {u}");
    }
    match &r.estimate {
        Some(e) => {
            let _ = writeln!(
                s,
                "\n{} co-locating {}: its {:.0} cross-CPU wakeups/s took {} on average, same-CPU wakeups here {}; \
                 co-located, that would {} about {:.4} s of wakeup latency per second. Verify: {}",
                style.yellow("ESTIMATE (not measured):"),
                e.pair,
                e.cross_wakeups_per_s,
                fmt_ns(e.cross_latency_ns),
                fmt_ns(e.same_cpu_latency_ns),
                if e.latency_saved_s_per_s >= 0.0 {
                    "save"
                } else {
                    "add"
                },
                e.latency_saved_s_per_s.abs(),
                e.verify
            );
        }
        None => {
            let _ = writeln!(
                s,
                "\nno co-location estimate: the top pair needs both cross-CPU and same-CPU wakeups timed here"
            );
        }
    }
    for n in &r.conditions.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

fn short_pids(p: &[i32]) -> String {
    let v: Vec<String> = p.iter().take(6).map(|p| p.to_string()).collect();
    if p.len() > 6 {
        format!("{},... ({})", v.join(","), p.len())
    } else {
        v.join(",")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A page with the process table, the graph's edges and each class's distribution as bars.
pub fn html(r: &WatchReport) -> String {
    let mut b = String::new();
    let _ = write!(
        b,
        "<p>{} for {:.2} s ({}); {} events, {} lost.</p>",
        esc(&r.target),
        r.interval_s,
        esc(&r.ended),
        r.events,
        r.lost_events
    );
    let _ = write!(
        b,
        "<h2>Processes</h2><table><tr><th>process</th><th>class</th><th>share</th><th>wakeups/s</th><th>p50</th><th>p99</th><th>max</th><th>distribution</th></tr>"
    );
    for p in &r.processes {
        for c in &p.classes {
            let (p50, p99, max, bars) = match &c.latency {
                Some(l) => {
                    let top = l
                        .histogram
                        .iter()
                        .map(|x| x.count)
                        .max()
                        .unwrap_or(1)
                        .max(1);
                    let bars: String = l
                        .histogram
                        .iter()
                        .map(|x| {
                            format!(
                                "<span title=\"&le; {}: {}\" style=\"display:inline-block;width:6px;background:#4a7;height:{}px\"></span>",
                                fmt_ns(x.le_ns as f64),
                                x.count,
                                1 + 30 * x.count / top
                            )
                        })
                        .collect();
                    (
                        fmt_ns(l.p50_ns as f64),
                        fmt_ns(l.p99_ns as f64),
                        fmt_ns(l.max_ns as f64),
                        bars,
                    )
                }
                None => ("-".into(), "-".into(), "-".into(), String::new()),
            };
            let _ = write!(
                b,
                "<tr><td>{}</td><td>{}</td><td>{:.1}%</td><td>{:.0}</td><td>{p50}</td><td>{p99}</td><td>{max}</td><td>{bars}</td></tr>",
                esc(&p.name),
                c.class,
                c.share * 100.0,
                c.wakeups_per_s
            );
        }
    }
    b.push_str("</table><h2>Wakeup graph: top edges</h2><table><tr><th>waker</th><th>wakee</th><th>wakeups/s</th><th>placement</th></tr>");
    for p in &r.pairs {
        let mix: Vec<String> = p
            .classes
            .iter()
            .map(|c| format!("{} {:.0}%", c.class, c.share * 100.0))
            .collect();
        let _ = write!(
            b,
            "<tr><td>{} ({})</td><td>{} ({})</td><td>{:.0}</td><td>{}</td></tr>",
            esc(&p.waker),
            p.waker_pid,
            esc(&p.wakee),
            p.wakee_pid,
            p.wakeups_per_s,
            mix.join(", ")
        );
    }
    b.push_str("</table>");
    if let Some(e) = &r.estimate {
        let _ = write!(
            b,
            "<h2>ESTIMATE (not measured)</h2><p>Co-locating {}: {:.4} s of wakeup latency per second. Verify with <code>{}</code>.</p>",
            esc(&e.pair),
            e.latency_saved_s_per_s,
            esc(&e.verify)
        );
    }
    crate::report::html::page(
        "cpulab watch",
        maud::PreEscaped("<h1>cpulab watch</h1>".to_string()),
        maud::PreEscaped(b),
    )
}
