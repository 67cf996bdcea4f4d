//! The report for the terminal: the conditions first (window, hosts that answered), then the
//! ranking, the findings, the drift and where to look closer. Pure.

use super::notes::Footnotes;
use super::{Reading, Report};
use crate::units::fmt_ns;
use std::fmt::Write;

/// A share as a whole percentage, or `n/a`.
fn pct(r: &Reading) -> String {
    r.mean
        .map_or_else(|| "n/a".to_string(), |m| format!("{:.0}%", m * 100.0))
}

fn header(r: &Report, s: &mut String) {
    let w = &r.window;
    let _ = writeln!(
        s,
        "cpulab fleet: {} from {} to {} ({} s, a point every {} s; rules every {} s)",
        r.prometheus, w.start_utc, w.end_utc, w.since_s, w.step_s, w.rule_interval_s
    );
    let _ = writeln!(
        s,
        "{} host(s) with cpulab series in the window, {} answering now; top {} by placement cost",
        r.hosts_seen, r.hosts_answering, r.limit
    );
}

fn ranking(r: &Report, s: &mut String) {
    let _ = writeln!(
        s,
        "\nPlacement cost per wakeup (cross-CPU share x latency excess over same-CPU; mean ±sd \
         over the window)"
    );
    if r.ranking.is_empty() {
        let _ = writeln!(s, "  no target has a placement cost in the window");
    }
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::NOTHING);
    t.set_header([
        "#",
        "host",
        "target",
        "cost",
        "cross",
        "cross lat",
        "same lat",
        "wakeups/s",
        "halts/wk",
        "IPIs/wk",
        "probe x/s",
        "findings",
    ]);
    // Each reason a figure is missing is printed once, below, and referred to by number.
    let mut notes = Footnotes::default();
    for x in &r.ranking {
        let mut cell = |f: &Reading, shown: String| notes.cell(f, shown);
        t.add_row([
            x.rank.to_string(),
            x.instance.clone(),
            x.target.clone(),
            cell(&x.cost_s, x.cost_s.shown_as_time()),
            cell(&x.cross_share, pct(&x.cross_share)),
            cell(&x.cross_latency_s, x.cross_latency_s.shown_as_time()),
            cell(&x.same_latency_s, x.same_latency_s.shown_as_time()),
            cell(&x.wakeups_per_s, x.wakeups_per_s.shown_as_number(1)),
            cell(&x.halts_per_wakeup, x.halts_per_wakeup.shown_as_number(2)),
            cell(&x.ipis_per_wakeup, x.ipis_per_wakeup.shown_as_number(2)),
            cell(
                &x.probe_cross_over_same,
                x.probe_cross_over_same.shown_as_number(2),
            ),
            x.findings.len().to_string(),
        ]);
    }
    if !r.ranking.is_empty() {
        let _ = writeln!(s, "{t}");
    }
    for u in &r.without_cost {
        let n = notes.number(&u.not_available);
        let _ = writeln!(
            s,
            "  not ranked: {} {} ({:.1} wakeups/s): no cost [{n}]",
            u.instance, u.target, u.wakeups_per_s
        );
    }
    for line in notes.lines() {
        let _ = writeln!(s, "  {line}");
    }
}

fn findings(r: &Report, s: &mut String) {
    let _ = writeln!(
        s,
        "\nDoctor findings across the fleet (newest doctor run of each host)"
    );
    if r.findings.is_empty() {
        let _ = writeln!(s, "  none: no host publishes cpulab_doctor_finding");
    }
    for g in &r.findings {
        let shared: Vec<String> = g
            .shared_facts
            .iter()
            .filter(|f| f.hosts_in_fleet < r.hosts_answering)
            .map(|f| format!("{}={} ({} in the fleet)", f.fact, f.value, f.hosts_in_fleet))
            .collect();
        let all = if shared.is_empty() {
            String::new()
        } else {
            format!(", all with {}", shared.join(", "))
        };
        let _ = writeln!(s, "  {} ({}) on {} host(s){all}", g.id, g.severity, g.hosts);
    }
    for x in r.ranking.iter().filter(|x| !x.findings.is_empty()) {
        let _ = writeln!(s, "  {}: {}", x.instance, x.findings.join(", "));
    }
}

fn drift(r: &Report, s: &mut String) {
    let _ = writeln!(s, "\nDrift: machine facts that changed in the window");
    if r.drift.is_empty() {
        let _ = writeln!(s, "  none");
    }
    for d in &r.drift {
        let facts: Vec<String> = d
            .changes
            .iter()
            .map(|c| format!("{} {} -> {}", c.fact, c.before, c.after))
            .collect();
        let _ = writeln!(
            s,
            "  {} at {}: {}",
            d.instance,
            d.changed_at_utc,
            facts.join(", ")
        );
        let c = &d.cost;
        let means = match (c.before_mean_s, c.after_mean_s) {
            (Some(b), Some(a)) => format!(
                "{} -> {}{}, ",
                fmt_ns(b * 1e9),
                fmt_ns(a * 1e9),
                c.change_pct
                    .map_or(String::new(), |p| format!(" ({p:+.0}%)"))
            ),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "    placement cost {}: {means}{} point(s) before, {} after; {}",
            c.verdict, c.points_before, c.points_after, c.note
        );
    }
}

/// The hosts and VMs whose guests wait most for a host CPU.
fn vm_wait(r: &Report, s: &mut String) {
    use super::vms::shown_as_share;
    let _ = writeln!(
        s,
        "\nWhat guests wait for a host CPU (KVM hosts: vCPU run-queue wait per vCPU, the steal \
         the guest sees; mean ±sd over the window)"
    );
    let v = &r.vm_wait;
    if let Some(why) = &v.not_available {
        let _ = writeln!(s, "  not available: {why}");
        return;
    }
    if v.hosts.is_empty() && v.vms.is_empty() {
        let _ = writeln!(
            s,
            "  none: no host publishes cpulab_vm_* in the window (cpulab exporter on a KVM host)"
        );
        return;
    }
    let mut notes = Footnotes::default();
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::NOTHING);
    t.set_header(["#", "host", "wait/vCPU", "vCPUs"]);
    for x in &v.hosts {
        let mut cell = |f: &Reading, shown: String| notes.cell(f, shown);
        t.add_row([
            x.rank.to_string(),
            x.instance.clone(),
            cell(&x.wait_per_vcpu, shown_as_share(&x.wait_per_vcpu)),
            cell(&x.vcpus, x.vcpus.shown_as_number(1)),
        ]);
    }
    let _ = writeln!(s, "{t}");
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::NOTHING);
    t.set_header(["#", "host", "vm", "wait/vCPU", "run/vCPU", "vCPUs"]);
    for x in &v.vms {
        let mut cell = |f: &Reading, shown: String| notes.cell(f, shown);
        t.add_row([
            x.rank.to_string(),
            x.instance.clone(),
            x.vm.clone(),
            cell(&x.wait_per_vcpu, shown_as_share(&x.wait_per_vcpu)),
            cell(&x.run_per_vcpu, shown_as_share(&x.run_per_vcpu)),
            cell(&x.vcpus, x.vcpus.shown_as_number(1)),
        ]);
    }
    let _ = writeln!(s, "{t}");
    for line in notes.lines() {
        let _ = writeln!(s, "  {line}");
    }
}

fn look_closer(r: &Report, s: &mut String) {
    let _ = writeln!(s, "\nLook closer, on the host");
    let mut seen = std::collections::BTreeSet::new();
    for x in &r.ranking {
        if seen.insert((&x.instance, &x.target)) {
            let _ = writeln!(
                s,
                "  {} ({}): {}",
                x.instance,
                x.target,
                x.look_closer.join("; ")
            );
        }
    }
}

/// The whole report.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    header(r, &mut s);
    ranking(r, &mut s);
    findings(r, &mut s);
    drift(r, &mut s);
    vm_wait(r, &mut s);
    look_closer(r, &mut s);
    s
}
