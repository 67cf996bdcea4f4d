//! Text and HTML of a watch result.
//!
//! The text leads with what an operator acts on: per process, where its wakeups landed and what
//! each placement cost; then the wakeup graph's top edges; then the VM mechanism; then the
//! estimate, marked as one, with the trial that would measure it. Lost events are printed
//! whenever there were any, because every count above is then a lower bound.

use super::report::{ClassReport, VmReport, WatchReport};
use crate::output::{Style, fmt_ns};
use maud::{Markup, html};
use std::fmt::Write;

/// Why a figure of a saved result is not available: the result predates it.
const OLDER: &str = "the result was written before cpulab recorded it";

/// The share of a class's wakeups that found their CPU idle, or `-` when the result predates
/// the count (never 0%).
fn onto_idle(c: &ClassReport) -> String {
    match c.to_idle {
        Some(n) => format!("{:.0}%", 100.0 * n as f64 / c.wakeups.max(1) as f64),
        None => "-".into(),
    }
}

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
    if let Some(end) = &r.command {
        let _ = writeln!(s, "command: {}", end.describe());
    }
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
    if let Some(why) = &r.incomplete {
        let _ = writeln!(s, "{}", style.yellow(why));
    }
    for line in delivery_lines(r) {
        let _ = writeln!(s, "{line}");
    }
    let _ = writeln!(s, "{}", placement_line(r));
    if r.processes.is_empty() {
        let _ = writeln!(
            s,
            "no wakeups of the watched tasks were seen: none woke in the window, or none ran \
             (names are matched whole, as in `ps -e -o comm`)"
        );
    }
    processes_text(&mut s, r, style);
    pairs_text(&mut s, r, style);
    vm_text(&mut s, &r.vm, style);
    estimate_text(&mut s, r, style);
    for n in &r.conditions.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

/// Each watched process and its wakeups by class.
fn processes_text(s: &mut String, r: &WatchReport, style: &Style) {
    for p in &r.processes {
        let _ = writeln!(
            s,
            "\n{}  pids {}  threads {}  {:.0} wakeups/s  run-queue wait {:.3} s/s  on-CPU {}  migrations {}  CPUs {}",
            style.bold(&p.name),
            p.pids.as_deref().map_or(NOT.into(), short_pids),
            or_not(p.threads.map(|t| t.to_string())),
            p.wakeups_per_s,
            p.runq_wait_s_per_s,
            or_not(p.on_cpu_s_per_s.map(|v| format!("{v:.3} s/s"))),
            or_not(p.migrations_per_s.map(|v| format!("{v:.0}/s"))),
            or_not(p.cpus_used.as_ref().map(|c| c.to_string()))
        );
        for c in &p.classes {
            let _ = writeln!(s, "  {}", class_line(c));
        }
    }
}

/// A figure `--mechanism bpf-counts` does not measure, in text.
const NOT: &str = "-";

/// Why the figures shown as [`NOT`] are absent, for the page and the text.
const NOT_MEASURED: &str = "pids, threads, on-CPU time, migrations, CPUs used and who woke whom: \
    not measured by bpf-counts (they need per-event records)";

fn or_not(v: Option<String>) -> String {
    v.unwrap_or_else(|| NOT.into())
}

/// The top waker -> wakee pairs and their classes, or why there are none.
fn pairs_text(s: &mut String, r: &WatchReport, style: &Style) {
    let Some(pairs) = &r.pairs else {
        let _ = writeln!(s, "\n{NOT_MEASURED}");
        return;
    };
    if !pairs.is_empty() {
        let _ = writeln!(s, "\n{}", style.bold("top waker -> wakee pairs"));
        for p in pairs {
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
}

/// The VM mechanism around the window: halts and IPIs per wakeup, steal, guest halt polling.
fn vm_text(s: &mut String, vm: &VmReport, style: &Style) {
    let cpus = if vm.cpus.is_empty() {
        "none: no wakeup of the watched tasks was seen".to_string()
    } else {
        vm.cpus.to_string()
    };
    let _ = writeln!(s, "\n{} (CPUs {cpus})", style.bold("VM mechanism"));
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
        match (vm.guest_halt_poll_ns, &vm.guest_halt_poll_inert) {
            (Some(ns), None) => format!("guest_halt_poll_ns={ns}"),
            (Some(ns), Some(why)) => format!("off: guest_halt_poll_ns={ns}, but {why}"),
            (None, _) => "off: no haltpoll module".into(),
        }
    );
    for u in &vm.unavailable {
        let _ = writeln!(s, "  unavailable: {u}");
    }
}

/// The co-location estimate (labelled as an estimate), or why there is none.
fn estimate_text(s: &mut String, r: &WatchReport, style: &Style) {
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
            let why = r.no_estimate.as_deref().unwrap_or(
                "no pair had its cross-CPU and same-CPU wakeups timed (at least half of each) here",
            );
            let _ = writeln!(s, "\nno co-location estimate: {why}");
        }
    }
}

/// "counted N, delivered M" for each sampled event where they differ, and the one plain
/// sentence about sched_wakeup, whose records on the target CPU the kernel often does not
/// deliver (cpulab does not need them).
pub fn delivery_lines(r: &WatchReport) -> Vec<String> {
    let mut out = Vec::new();
    for d in &r.delivery {
        let Some(counted) = d.counted else {
            out.push(format!("{}: its count could not be read", d.event));
            continue;
        };
        if !d.sampled {
            out.push(format!(
                "{}: counted {counted} (not sampled: placement comes from sched_waking, migrations and switch-in)",
                d.event
            ));
        } else if d.event == "sched_wakeup" && counted != d.delivered {
            out.push(format!(
                "sched_wakeup: counted {counted}, delivered {}: the kernel does not deliver the records it emits on an idle target CPU; they only check placements",
                d.delivered
            ));
        } else if counted != d.delivered {
            let cpus: Vec<String> = d
                .per_cpu
                .iter()
                .filter(|c| c.counted.is_some_and(|n| n != c.delivered))
                .map(|c| format!("CPU {} {}/{}", c.cpu, c.delivered, c.counted.unwrap_or(0)))
                .collect();
            out.push(format!(
                "{}: counted {counted}, delivered {} ({})",
                d.event,
                d.delivered,
                cpus.join(", ")
            ));
        }
    }
    for i in &r.idle_switches {
        let missing = i.missing_from_idle();
        if missing > 0 {
            out.push(format!(
                "sched_switch on CPU {}: {} switches into idle but {} out of it delivered; the kernel counts and delivers none of the other {missing}, so wakeups onto that idle CPU are counted and placed but not timed",
                i.cpu, i.to_idle, i.from_idle
            ));
        }
    }
    out
}

/// Where the wakeups' CPUs came from and how the independent sources agreed.
pub fn placement_line(r: &WatchReport) -> String {
    let Some(c) = &r.placement else {
        if r.pairs.is_none() {
            return "placement: not measured by bpf-counts (it checks per-event records)".into();
        }
        return format!("placement: not available ({OLDER})");
    };
    let mut s = format!(
        "placement: {} by the wakeup's migration, {} on the CPU last run on, {} where first seen running, {} already runnable",
        c.from_migration, c.from_last_cpu, c.from_switch_in, c.already_runnable
    );
    let timed = c.switch_in_agrees + c.switch_in_differs;
    if timed > 0 {
        let _ = write!(s, "; switched in there {} of {timed}", c.switch_in_agrees);
    }
    if c.switch_in_missing > 0 {
        let _ = write!(
            s,
            "; {} seen running without a delivered switch-in (not timed)",
            c.switch_in_missing
        );
    }
    let checked = c.wakeup_agrees + c.wakeup_differs;
    if checked > 0 {
        let _ = write!(
            s,
            "; sched_wakeup's target agreed {} of {checked}",
            c.wakeup_agrees
        );
    }
    if c.unplaced > 0 {
        let _ = write!(s, "; {} not placed (never seen on a CPU)", c.unplaced);
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

/// A class's latency distribution as inline bars, with the p50, p99 and max beside it.
fn distribution(c: &ClassReport) -> (String, String, String, Markup) {
    let Some(l) = &c.latency else {
        return ("-".into(), "-".into(), "-".into(), html! {});
    };
    let top = l
        .histogram
        .iter()
        .map(|x| x.count)
        .max()
        .unwrap_or(1)
        .max(1);
    let bars = html! {
        @for x in &l.histogram {
            span title={ "≤ " (fmt_ns(x.le_ns as f64)) ": " (x.count) }
                style={ "display:inline-block;width:6px;background:#4a7;height:" (1 + 30 * x.count / top) "px" } {}
        }
    };
    (
        fmt_ns(l.p50_ns as f64),
        fmt_ns(l.p99_ns as f64),
        fmt_ns(l.max_ns as f64),
        bars,
    )
}

/// A page with the process table, the graph's edges and each class's distribution as bars.
pub fn html(r: &WatchReport) -> String {
    let body = html! {
        p {
            (r.target) " for " (format!("{:.2}", r.interval_s)) " s (" (r.ended) "); "
            (r.events) " events, " (r.lost_events) " lost."
        }
        @if let Some(end) = &r.command {
            p { "Command: " (end.describe()) "." }
        }
        @if let Some(why) = &r.incomplete {
            p { strong { (why) } }
        }
        @let lines = delivery_lines(r);
        @if !lines.is_empty() {
            h2 { "Events counted and delivered" }
            ul { @for l in &lines { li { (l) } } }
        }
        h2 { "Processes" }
        table {
            tr {
                th { "process" } th { "class" } th { "share" } th { "wakeups/s" }
                th title="share of the class's wakeups whose CPU was idle" { "onto idle" }
                th { "p50" } th { "p99" } th { "max" } th { "distribution" }
            }
            @for p in &r.processes {
                @for c in &p.classes {
                    @let (p50, p99, max, bars) = distribution(c);
                    tr {
                        td { (p.name) }
                        td { (c.class) }
                        td { (format!("{:.1}%", c.share * 100.0)) }
                        td { (format!("{:.0}", c.wakeups_per_s)) }
                        @if c.to_idle.is_some() {
                            td { (onto_idle(c)) }
                        } @else {
                            td title=(format!("not available: {OLDER}")) { "-" }
                        }
                        td { (p50) } td { (p99) } td { (max) }
                        td { (bars) }
                    }
                }
            }
        }
        h2 { "Wakeup graph: top edges" }
        @if r.pairs.is_none() {
            p { (NOT_MEASURED) "." }
        }
        table {
            tr { th { "waker" } th { "wakee" } th { "wakeups/s" } th { "placement" } }
            @for p in r.pairs.iter().flatten() {
                @let mix: Vec<String> = p
                    .classes
                    .iter()
                    .map(|c| format!("{} {:.0}%", c.class, c.share * 100.0))
                    .collect();
                tr {
                    td { (p.waker) " (" (p.waker_pid) ")" }
                    td { (p.wakee) " (" (p.wakee_pid) ")" }
                    td { (format!("{:.0}", p.wakeups_per_s)) }
                    td { (mix.join(", ")) }
                }
            }
        }
        @if let Some(e) = &r.estimate {
            h2 { "ESTIMATE (not measured)" }
            p {
                "Co-locating " (e.pair) ": " (format!("{:.4}", e.latency_saved_s_per_s))
                " s of wakeup latency per second. Verify with " code { (e.verify) } "."
            }
        } @else if let Some(why) = &r.no_estimate {
            p { "No co-location estimate: " (why) }
        }
    };
    crate::report::html::page("cpulab watch", html! { h1 { "cpulab watch" } }, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpulist::CpuSet;

    /// A class saved before `to_idle` existed reads it as not available, and shows `-`, never
    /// 0%; a counted zero still shows 0%.
    #[test]
    fn a_class_without_to_idle_reads_not_available_and_shows_no_zero() {
        let old: ClassReport = serde_json::from_str(
            r#"{"class": "shared-llc", "wakeups": 160, "share": 0.5, "wakeups_per_s": 159.7,
                "latency": null}"#,
        )
        .unwrap();
        assert_eq!(old.to_idle, None);
        assert_eq!(onto_idle(&old), "-");
        let counted = ClassReport {
            to_idle: Some(0),
            ..old.clone()
        };
        assert_eq!(onto_idle(&counted), "0%");
        let some = ClassReport {
            to_idle: Some(40),
            ..old
        };
        assert_eq!(onto_idle(&some), "25%");
    }

    #[test]
    fn the_vm_lines_say_what_was_not_seen_and_what_acts_on_nothing() {
        let style = Style { on: false };
        let mut vm = VmReport {
            guest_halt_poll_ns: Some(200000),
            ..VmReport::default()
        };
        let mut s = String::new();
        vm_text(&mut s, &vm, &style);
        // No wakeup seen: no CPU list to show, and that is said rather than left blank.
        assert!(s.contains("(CPUs none: no wakeup"), "{s}");
        assert!(
            s.contains("guest halt polling: guest_halt_poll_ns=200000\n"),
            "{s}"
        );
        // Without the haltpoll cpuidle driver the window polls nothing: polling is off.
        vm.cpus = CpuSet::from_iter_u32([0, 1]);
        vm.guest_halt_poll_inert = Some("the haltpoll cpuidle driver is not in use".into());
        let mut s = String::new();
        vm_text(&mut s, &vm, &style);
        assert!(s.contains("(CPUs 0-1)"), "{s}");
        assert!(
            s.contains("guest halt polling: off: guest_halt_poll_ns=200000, but the haltpoll"),
            "{s}"
        );
        vm.guest_halt_poll_ns = None;
        let mut s = String::new();
        vm_text(&mut s, &vm, &style);
        assert!(
            s.contains("guest halt polling: off: no haltpoll module"),
            "{s}"
        );
    }
}
