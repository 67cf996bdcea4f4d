//! Text and HTML of a [`WatchReport`]. Both return strings and do no I/O.

use super::report::{ClassStats, WatchReport};
use crate::output::{Style, fmt_ns};
use std::fmt::Write;

fn class_line(c: &ClassStats) -> String {
    format!(
        "{:<12} {:>5.1}%  {:>8}  p50 {:>9}  p90 {:>9}  p99 {:>9}  max {:>9}",
        c.class.as_str(),
        c.share * 100.0,
        c.wakeups,
        fmt_ns(c.latency.p50_ns as f64),
        fmt_ns(c.latency.p90_ns as f64),
        fmt_ns(c.latency.p99_ns as f64),
        fmt_ns(c.latency.max_ns as f64),
    )
}

pub fn text(r: &WatchReport, style: &Style) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}",
        style.bold(&format!(
            "cpulab watch: {} for {:.2} s (ended by {})",
            r.target, r.window_s, r.ended_by
        ))
    );
    let _ = writeln!(
        s,
        "{} scheduler events, {} lost{}",
        r.events,
        r.lost_records,
        if r.lost_records > 0 {
            style.yellow(" (figures undercount)")
        } else {
            String::new()
        }
    );
    for g in r.groups.iter().take(12) {
        let _ = writeln!(
            s,
            "\n{}  {:.0} wakeups/s, {} threads, CPUs {}, {} migrations, run-queue wait {} \
             ({:.1}% of the window), on CPU {}",
            style.bold(&g.name),
            g.wakeups_per_s,
            g.threads,
            g.cpus_used,
            g.migrations,
            fmt_ns(g.run_queue_wait_ns as f64),
            g.run_queue_wait_ns as f64 / (r.window_s * 1e9) * 100.0,
            fmt_ns(g.on_cpu_ns as f64),
        );
        for c in &g.classes {
            let _ = writeln!(s, "  {}", class_line(c));
        }
        if g.unattributed_wakeups > 0 {
            let _ = writeln!(
                s,
                "  {} wakeups whose waker fell before the window",
                g.unattributed_wakeups
            );
        }
    }
    if !r.pairs.is_empty() {
        let _ = writeln!(s, "\n{}", style.bold("top waker -> wakee pairs"));
        for p in r.pairs.iter().take(5) {
            let _ = writeln!(
                s,
                "{} -> {}: {:.0} wakeups/s",
                p.waker, p.wakee, p.wakeups_per_s
            );
            for c in &p.classes {
                let _ = writeln!(s, "  {}", class_line(c));
            }
        }
    }
    let m = &r.mechanism;
    let _ = writeln!(s, "\n{} (CPUs {})", style.bold("VM mechanism"), m.cpus);
    let opt = |v: Option<f64>, unit: &str| match v {
        Some(v) => format!("{v:.2}{unit}"),
        None => "unavailable".to_string(),
    };
    let _ = writeln!(
        s,
        "halts (idle entries) per wakeup {}, IPIs per wakeup {} ({}), steal {}",
        opt(m.idle_entries_per_wakeup, ""),
        opt(m.ipis_per_wakeup, ""),
        m.ipis
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        opt(m.steal_pct, "%"),
    );
    let _ = writeln!(
        s,
        "cpuidle driver {}, guest_halt_poll_ns {}",
        m.cpuidle_driver.as_deref().unwrap_or("unavailable"),
        m.guest_halt_poll_ns
            .map(|v| v.to_string())
            .unwrap_or_else(|| "unavailable".into())
    );
    if let Some(e) = &r.estimate {
        let _ = writeln!(
            s,
            "\n{} co-locating {} -> {}: {:.0} crossing wakeups/s at {} mean vs {} on one CPU: \
             about {} of waiting saved per second.\n  {}\n  verify: {}",
            style.yellow("estimate:"),
            e.waker,
            e.wakee,
            e.cross_wakeups_per_s,
            fmt_ns(e.cross_latency_mean_ns),
            fmt_ns(e.same_cpu_latency_mean_ns),
            fmt_ns(e.saved_wait_ns_per_s),
            e.caveat,
            e.try_command
        );
    }
    if r.estimate.is_none()
        && r.pairs.iter().any(|p| {
            p.classes
                .iter()
                .any(|c| c.class != crate::topology::PlacementClass::SameCpu)
        })
    {
        let _ = writeln!(
            s,
            "\nno co-location estimate: fewer than 100 same-CPU wakeups in the window to compare \
             with; `cpulab pingpong --pairs 0:0,0:1` measures both here"
        );
    }
    for n in &r.conditions.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A bar per histogram bucket, log-spaced in latency, one row per class.
fn histogram_svg(c: &ClassStats) -> String {
    let h = &c.latency.histogram;
    let maxc = h.iter().map(|b| b[1]).max().unwrap_or(1).max(1) as f64;
    let (w, ht) = (400.0, 60.0);
    let lo = (h.first().map(|b| b[0]).unwrap_or(1).max(1) as f64).ln();
    let hi = (h.last().map(|b| b[0]).unwrap_or(2).max(2) as f64)
        .ln()
        .max(lo + 1.0);
    let mut s = format!("<svg width=\"{w}\" height=\"{ht}\">");
    for b in h {
        let x = ((b[0].max(1) as f64).ln() - lo) / (hi - lo) * (w - 4.0);
        let y = b[1] as f64 / maxc * ht;
        let _ = write!(
            s,
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"3\" height=\"{y:.1}\" fill=\"#47a\"/>",
            ht - y
        );
    }
    s.push_str("</svg>");
    s
}

pub fn html(r: &WatchReport) -> String {
    let mut s = String::from(
        "<!doctype html><meta charset=\"utf-8\"><title>cpulab watch</title>\
         <style>body{font-family:sans-serif;max-width:70em;margin:auto}td,th{padding:2px 8px;\
         text-align:right}</style>",
    );
    let _ = write!(
        s,
        "<h1>cpulab watch: {}</h1><p>{:.2} s, ended by {}; {} events, {} lost.</p>",
        esc(&r.target),
        r.window_s,
        esc(&r.ended_by),
        r.events,
        r.lost_records
    );
    let table = |s: &mut String, classes: &[ClassStats]| {
        s.push_str(
            "<table><tr><th>class</th><th>share</th><th>wakeups</th><th>p50</th>\
                    <th>p90</th><th>p99</th><th>max</th><th>distribution (log latency)</th></tr>",
        );
        for c in classes {
            let _ = write!(
                s,
                "<tr><td>{}</td><td>{:.1}%</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td>{}</td><td>{}</td></tr>",
                c.class,
                c.share * 100.0,
                c.wakeups,
                fmt_ns(c.latency.p50_ns as f64),
                fmt_ns(c.latency.p90_ns as f64),
                fmt_ns(c.latency.p99_ns as f64),
                fmt_ns(c.latency.max_ns as f64),
                histogram_svg(c)
            );
        }
        s.push_str("</table>");
    };
    s.push_str("<h2>Waker → wakee graph</h2><ul>");
    for p in &r.pairs {
        let _ = write!(
            s,
            "<li><b>{}</b> → <b>{}</b>: {:.0} wakeups/s",
            esc(&p.waker),
            esc(&p.wakee),
            p.wakeups_per_s
        );
        table(&mut s, &p.classes);
        s.push_str("</li>");
    }
    s.push_str("</ul><h2>Processes</h2>");
    for g in &r.groups {
        let _ = write!(
            s,
            "<h3>{}</h3><p>{:.0} wakeups/s, CPUs {}, {} migrations, run-queue wait {}</p>",
            esc(&g.name),
            g.wakeups_per_s,
            g.cpus_used,
            g.migrations,
            fmt_ns(g.run_queue_wait_ns as f64)
        );
        table(&mut s, &g.classes);
    }
    if let Some(e) = &r.estimate {
        let _ = write!(
            s,
            "<h2>Estimate</h2><p>Co-locating {} → {}: about {} of waiting saved per second \
             ({}). Verify: <code>{}</code></p>",
            esc(&e.waker),
            esc(&e.wakee),
            fmt_ns(e.saved_wait_ns_per_s),
            esc(&e.caveat),
            esc(&e.try_command)
        );
    }
    s
}
