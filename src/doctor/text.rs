//! The doctor's report for people: findings first, most important first, each with its
//! magnitude, evidence, mechanism and remedies; then the measurements behind them.

use super::DoctorReport;
use super::findings::{Finding, Severity};
use super::measurements::{
    Measurements, OsCosts, PresetRun, ScalePoint, ShareCheck, Skipped, ThroughputRun,
};
use super::rules::rule::plain_ci;
use crate::output::{Style, fmt_ns};
use crate::units::thousands;
use comfy_table::{Table, presets};

const WIDTH: usize = 100;

/// Wraps `text` to `WIDTH` columns, every line indented by `indent` spaces; a text that
/// starts with "- " hangs its continuation lines under the first word.
pub fn wrap(text: &str, indent: usize) -> String {
    let hang = if text.starts_with("- ") { 2 } else { 0 };
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let ind = if out.is_empty() {
            indent
        } else {
            indent + hang
        };
        if !line.is_empty() && ind + line.len() + 1 + word.len() > WIDTH {
            out += &format!("{}{line}\n", " ".repeat(ind));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line += word;
    }
    if !line.is_empty() {
        let ind = if out.is_empty() {
            indent
        } else {
            indent + hang
        };
        out += &format!("{}{line}\n", " ".repeat(ind));
    }
    out
}

fn table(header: Vec<&str>) -> Table {
    let mut t = Table::new();
    t.load_style(presets::NOTHING);
    t.set_header(header);
    t
}

fn severity(s: &Style, v: Severity) -> String {
    let tag = format!("[{}]", v.as_str().to_uppercase());
    match v {
        Severity::High => s.red(&tag),
        Severity::Medium => s.yellow(&tag),
        Severity::Low => tag,
    }
}

/// One finding, numbered.
pub fn finding(s: &Style, n: usize, f: &Finding) -> String {
    finding_in(s, n, f, true)
}

/// One finding, numbered; `guest` words where a remedy is done for a VM or a bare machine.
pub fn finding_in(s: &Style, n: usize, f: &Finding, guest: bool) -> String {
    let mut out = format!(
        "{n}. {} {}   {}\n",
        severity(s, f.severity),
        s.bold(&f.title),
        // Confidence is in the named cause; "uncertain" is about whether the effect recurs:
        // two different things, said as two.
        s.dim(&format!(
            "confidence: {}{}",
            f.confidence.as_str(),
            if f.uncertain.is_some() {
                "; may not recur (below)"
            } else {
                ""
            }
        ))
    );
    out += &wrap(&f.magnitude.text, 3);
    if let Some(why) = &f.uncertain {
        out += &wrap(&format!("MAY NOT RECUR: {why}"), 3);
    }
    out += &format!("   {}\n", s.bold("Evidence"));
    for e in &f.evidence {
        out += &wrap(
            &format!("- {}: {}  [{}]", e.label, e.in_words(), e.source),
            5,
        );
    }
    out += &format!("   {}\n", s.bold("Mechanism"));
    out += &wrap(&f.mechanism, 5);
    out += &format!("   {}\n", s.bold("What to do"));
    for r in &f.remedies {
        out += &format!("     $ {}\n", r.command);
        if r.site == super::findings::Site::Host || !r.who.is_empty() {
            out += &wrap(&format!("Where: {}", r.where_who(guest)), 7);
        }
        out += &wrap(&r.effect, 7);
        out += &wrap(&format!("Cost: {}", r.cost_caveat), 7);
        if let Some(t) = &r.try_command {
            out += &wrap(&format!("Measure it here: {t}"), 7);
        }
        if let Some(m) = &r.measured {
            out += &wrap(m, 7);
        }
    }
    out
}

fn per(map: &std::collections::BTreeMap<String, f64>, key: &str) -> String {
    map.get(key).map_or("-".into(), |v| format!("{v:.2}"))
}

/// The measurements behind the findings, as tables.
pub fn measurements(s: &Style, m: &Measurements) -> String {
    let mut out = wakeup_table(s, m);
    out += &throughput_table(s, &m.throughput);
    if let Some(o) = &m.oscost {
        out += &oscost_table(s, o);
    }
    if let Some(sh) = &m.share {
        out += &share_check(s, sh);
    }
    out += &scaling_table(s, &m.scaling);
    out += &presets_table(s, &m.presets);
    out += &battery_lines(m);
    out += &not_measured(s, &m.skipped);
    out
}

/// The wakeup round trips, one row per run, against the same-CPU run of its method.
fn wakeup_table(s: &Style, m: &Measurements) -> String {
    if m.wakeup.is_empty() {
        return String::new();
    }
    let mut out = format!("{}\n", s.bold("Wakeup round trips"));
    let mut t = table(vec![
        "method",
        "class",
        "cpus",
        "mean (95% CI)",
        "p50",
        "p99",
        "vs same-cpu",
        "halts/rt",
        "IPIs/rt",
        "same CPU",
    ]);
    for w in &m.wakeup {
        let base = m.wakeup(&w.method, crate::topology::PlacementClass::SameCpu);
        let shared = w
            .same_cpu_share
            .map_or("-".into(), |x| format!("{:.0}%", x * 100.0));
        let ipis = super::rules::wakeup_ipis(w).map_or("-".into(), |v| format!("{v:.2}"));
        t.add_row(vec![
            w.method.clone(),
            w.class.to_string(),
            match (&w.cpus, w.neighbour_load) {
                (Some(c), _) => c.clone(),
                (None, Some(n)) => format!("any, {n} busy"),
                (None, None) => "any".into(),
            },
            format!(
                "{} ±{}",
                fmt_ns(w.rtt_ns.mean),
                fmt_ns(w.rtt_ns.ci95_half_width)
            ),
            fmt_ns(w.p50_ns),
            fmt_ns(w.p99_ns),
            base.map_or("-".into(), |b| {
                format!("{:.2}x", w.rtt_ns.mean / b.rtt_ns.mean)
            }),
            per(&w.per_round_trip, "idle_entries"),
            ipis,
            shared,
        ]);
    }
    out += &format!("{t}\n\n");
    out
}

/// The messaging throughput, one row per placement.
fn throughput_table(s: &Style, throughput: &[ThroughputRun]) -> String {
    if throughput.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "{}\n",
        s.bold("Messaging throughput (many tasks communicating)")
    );
    let mut t = table(vec![
        "placement",
        "cpus",
        "messages/s (95% CI)",
        "halts/msg",
        "IPIs/msg",
    ]);
    for r in throughput {
        let ipis = ["irq_RES", "irq_CAL"]
            .iter()
            .filter_map(|k| r.per_message.get(*k))
            .sum::<f64>();
        t.add_row(vec![
            r.placement.clone(),
            r.cpus.to_string(),
            format!(
                "{} ±{}",
                thousands(r.messages_per_s.mean),
                thousands(r.messages_per_s.ci95_half_width)
            ),
            per(&r.per_message, "idle_entries"),
            format!("{ipis:.3}"),
        ]);
    }
    out += &format!("{t}\n\n");
    out
}

/// The OS primitives' costs and the speed after idle and under load.
fn oscost_table(s: &Style, o: &OsCosts) -> String {
    let mut out = format!("{}\n", s.bold("OS primitive costs"));
    let mut t = table(vec!["primitive", "cost (95% CI)"]);
    // Long words go under the table, so its columns stay the width of its figures.
    let mut notes = Vec::new();
    for p in &o.primitives {
        let mark = match crate::doctor::rules::primitive_spoiled(p) {
            Some(why) => {
                notes.push(format!("{}: not judged, because {why}.", p.name));
                " (not judged, below)"
            }
            None => "",
        };
        t.add_row(vec![
            p.name.clone(),
            format!(
                "{} ±{}{mark}",
                fmt_ns(p.cost_ns.mean),
                fmt_ns(p.cost_ns.ci95_half_width)
            ),
        ]);
    }
    if let Some(f) = &o.frequency {
        // A loop rate is not a frequency: MHz only when the clock check accepted it.
        let unit = if f.clock_mhz {
            "MHz"
        } else {
            "loop iterations per us (no clock)"
        };
        t.add_row(vec![
            "speed after idle".into(),
            format!("{:.0} {unit}", f.cold_mhz.mean),
        ]);
        t.add_row(vec![
            "speed under load".into(),
            format!("{:.0} {unit}", f.warm_mhz.mean),
        ]);
        if let Some(c) = &f.clock {
            notes.push(format!("Clock check: {}.", c.verdict));
        }
    }
    out += &format!("{t}\n");
    for n in notes {
        out += &wrap(&n, 2);
    }
    out += "\n";
    out
}

/// The share check in words, and what a share above 1 beyond noise means.
fn share_check(s: &Style, sh: &ShareCheck) -> String {
    let mut out = format!("{}\n", s.bold("Share check"));
    out += &wrap(
        &format!(
            "{} CPU-bound workers side by side each ran at {} the speed of one worker alone; fair-share model {:.2}; steal {:.1}%",
            sh.workers,
            plain_ci(&sh.share),
            sh.model_share,
            sh.steal_pct
        ),
        2,
    );
    if sh.share.ci95_low > 1.0 {
        // No worker can get more than its CPU: a ratio above 1 beyond noise means the
        // single-worker baseline itself ran slow, which this guest cannot see the cause of.
        out += &wrap(
            "above 1 beyond noise: the one-worker baseline ran slower than each worker of the \
             group, so the speed of a vCPU varied during the check (the host's frequency or \
             its other load); compare `cpulab share` runs before drawing conclusions",
            2,
        );
    }
    out += "\n";
    out
}

/// The parallel speedups, one row per workload, policy and thread count.
fn scaling_table(s: &Style, scaling: &[ScalePoint]) -> String {
    if scaling.is_empty() {
        return String::new();
    }
    let mut out = format!("{}\n", s.bold("Parallel scaling"));
    let mut t = table(vec![
        "workload",
        "policy",
        "threads",
        "speedup (95% CI)",
        "contended groups",
    ]);
    for p in scaling {
        t.add_row(vec![
            p.workload.clone(),
            p.policy.clone(),
            p.threads.to_string(),
            format!("{:.2} ±{:.2}", p.speedup.mean, p.speedup.ci95_half_width),
            p.contended_groups.map_or("-".into(), |c| c.to_string()),
        ]);
    }
    out += &format!("{t}\n\n");
    out
}

/// The applications' rates, one row per workload and placement.
fn presets_table(s: &Style, presets: &[PresetRun]) -> String {
    if presets.is_empty() {
        return String::new();
    }
    let mut out = format!("{}\n", s.bold("Applications"));
    let mut t = table(vec!["workload", "placement", "per second (95% CI)"]);
    for p in presets {
        t.add_row(vec![
            p.workload.clone(),
            p.placement.clone(),
            format!(
                "{} ±{}",
                thousands(p.per_s.mean),
                thousands(p.per_s.ci95_half_width)
            ),
        ]);
    }
    out += &format!("{t}\n\n");
    out
}

/// Steal and cgroup throttling during the battery, and each stage's time against its deadline.
fn battery_lines(m: &Measurements) -> String {
    let mut out = String::new();
    let c = &m.counters;
    if let Some(st) = crate::stats::MeanCi::of(&c.steal_samples_pct) {
        out += &format!(
            "Steal during the battery: {:.1}% (over {} experiments)\n",
            st.mean, st.n
        );
    }
    if let (Some(p @ 1..), Some(t)) = (c.cfs_periods, c.cfs_throttled_periods) {
        out += &format!("cgroup quota: {t} of {p} periods throttled during the battery\n");
    }
    if !m.stage_times.is_empty() {
        let line = m
            .stage_times
            .iter()
            .map(|t| format!("{} {:.1} of {:.1} s", t.stage, t.actual_s, t.planned_s))
            .collect::<Vec<_>>()
            .join("; ");
        out += &wrap(&format!("Stage times (taken of deadline): {line}"), 0);
        for t in m.stage_times.iter().filter(|t| t.cut_short.is_some()) {
            out += &wrap(
                &format!(
                    "- {} stopped at its deadline: {}",
                    t.stage,
                    t.cut_short.as_deref().unwrap_or_default()
                ),
                2,
            );
        }
    }
    out
}

/// What was not measured, and why.
fn not_measured(s: &Style, skipped: &[Skipped]) -> String {
    if skipped.is_empty() {
        return String::new();
    }
    let mut out = format!("\n{}\n", s.bold("Not measured"));
    for k in skipped {
        out += &wrap(&format!("- {}: {}", k.what, k.reason), 2);
    }
    out
}

/// The whole report.
pub fn render(r: &DoctorReport) -> String {
    let s = Style::new();
    let f = &r.facts;
    let host = match (&f.hypervisor, &f.container) {
        (Some(h), _) => format!("{h} guest"),
        (None, Some(c)) => format!("{c} container"),
        _ => "bare metal (no hypervisor seen)".into(),
    };
    let mut out = format!(
        "{} on {}: {}, kernel {}, CPUs {} usable of {} online; {:.0} s ({} run, budget {:.0} s)\n",
        s.bold("cpulab doctor"),
        r.conditions.hostname,
        host,
        r.conditions.kernel,
        f.allowed_cpus,
        f.online_cpus,
        r.duration_s,
        r.mode.as_str(),
        r.mode.total_s()
    );
    if let Some(model) = &f.cpu_model {
        out += &format!("{}\n", s.dim(model));
    }
    if let Some(src) = &r.replayed_from {
        out += &wrap(
            &format!("REPLAYED: nothing was measured in this run; the figures are from {src}"),
            0,
        );
    }
    if let Some(i) = &r.interrupted {
        out += &s.red(&format!(
            "INTERRUPTED by {} during {}: partial result; that stage and every later one were not measured\n",
            i.name, i.during
        ));
    }
    out += "\n";
    if r.findings.is_empty() {
        out += &s.green("No finding: every effect the doctor measured is within its noise or below the size worth acting on.\n");
        out += &wrap(
            "Wakeups, placement, sharing, quota, power and kernel-entry costs look healthy for this machine under these conditions. The measurements are below.",
            0,
        );
    } else {
        out += &s.bold(&format!(
            "FINDINGS ({}), most important first\n\n",
            r.findings.len()
        ));
        for (i, x) in r.findings.iter().enumerate() {
            out += &finding_in(&s, i + 1, x, r.facts.hypervisor.is_some());
            out += "\n";
        }
    }
    out += &format!("\n{}\n\n", s.bold("MEASUREMENTS"));
    out += &measurements(&s, &r.measurements);
    if r.conditions.noisy || !r.conditions.notes.is_empty() {
        out += &format!("\n{}\n", s.bold("Conditions"));
        for n in &r.conditions.notes {
            out += &wrap(&format!("- {n}"), 2);
        }
    }
    out
}
