//! The report as one self-contained page (`--html FILE`): the window and hosts that answered,
//! the ranking, a chart of each ranked target's placement cost over the window, the findings,
//! the drift table and the hosts and VMs by what their guests wait. Built from `report::html`'s primitives and `report::svg`'s charts, so it
//! loads nothing from the network. Pure.

use super::notes::Footnotes;
use super::{Reading, Report};
use crate::report::{html as page, svg};
use crate::units::fmt_ns;
use maud::{Markup, html};

fn ranking(r: &Report) -> Markup {
    // Each reason a figure is missing is said once, below the table, and referred to by number.
    let mut notes = Footnotes::default();
    let rows: Vec<Vec<String>> = r
        .ranking
        .iter()
        .map(|x| {
            let mut cell = |f: &Reading, shown: String| notes.cell(f, shown);
            vec![
                x.rank.to_string(),
                x.instance.clone(),
                x.target.clone(),
                cell(&x.cost_s, x.cost_s.shown_as_time()),
                cell(
                    &x.cross_share,
                    x.cross_share
                        .mean
                        .map_or("n/a".into(), |m| format!("{:.0}%", m * 100.0)),
                ),
                cell(&x.cross_latency_s, x.cross_latency_s.shown_as_time()),
                cell(&x.same_latency_s, x.same_latency_s.shown_as_time()),
                cell(&x.wakeups_per_s, x.wakeups_per_s.shown_as_number(2)),
                cell(&x.halts_per_wakeup, x.halts_per_wakeup.shown_as_number(2)),
                cell(&x.ipis_per_wakeup, x.ipis_per_wakeup.shown_as_number(2)),
                cell(
                    &x.probe_cross_over_same,
                    x.probe_cross_over_same.shown_as_number(2),
                ),
                x.findings.join(", "),
            ]
        })
        .collect();
    let unranked: Vec<(&super::rank::Unranked, usize)> = r
        .without_cost
        .iter()
        .map(|u| (u, notes.number(&u.not_available)))
        .collect();
    html! {
        section {
            h2 { "Placement cost per wakeup" }
            p.note { (super::METHOD) "." }
            // The findings are words: they wrap, so the table stays within the page.
            (page::table_between(
                &["#", "host", "target", "cost", "cross", "cross latency", "same latency",
                  "wakeups/s", "halts/wakeup", "IPIs/wakeup", "probe cross/same", "findings"],
                &rows,
                3..11,
            ))
            @for (u, n) in &unranked {
                p.note { "Not ranked: " (u.instance) " " (u.target) ": no cost [" (n) "]." }
            }
            @for line in notes.lines() {
                p.note.footnote { (line) }
            }
        }
    }
}

fn charts(r: &Report) -> Markup {
    let start = r.window.start_unix_s;
    let charts = html! {
        @for s in &r.cost_series {
            @let pts: Vec<svg::Point> = s
                .points
                .iter()
                .map(|(t, v)| ((t - start) / 60.0, v * 1e6, None))
                .collect();
            (page::chart(svg::lines(
                &format!("{} {}: placement cost per wakeup", s.instance, s.target),
                &[(s.target.clone(), pts)],
                ("minutes into the window", "us per wakeup"),
                false,
            )))
        }
    };
    page::section(
        "Each ranked target over the window",
        "The recording rule's value at every step of the window (5-minute rates); a gap is a step \
         where the target did not wake.",
        charts,
    )
}

fn findings(r: &Report) -> Markup {
    let rows: Vec<Vec<String>> = r
        .findings
        .iter()
        .map(|g| {
            let shared: Vec<String> = g
                .shared_facts
                .iter()
                .map(|f| format!("{}={} ({} in the fleet)", f.fact, f.value, f.hosts_in_fleet))
                .collect();
            vec![
                g.id.clone(),
                g.severity.clone(),
                g.hosts.to_string(),
                shared.join(", "),
            ]
        })
        .collect();
    html! {
        section {
            h2 { "Doctor findings across the fleet" }
            @if rows.is_empty() { p.note { "No host publishes cpulab_doctor_finding." } }
            @else { (page::table(&["finding", "severity", "hosts", "facts they all share"], &rows, 4)) }
        }
    }
}

fn drift(r: &Report) -> Markup {
    let rows: Vec<Vec<String>> = r
        .drift
        .iter()
        .map(|d| {
            let facts: Vec<String> = d
                .changes
                .iter()
                .map(|c| format!("{}: {} -> {}", c.fact, c.before, c.after))
                .collect();
            let c = &d.cost;
            let means = match (c.before_mean_s, c.after_mean_s) {
                (Some(b), Some(a)) => format!("{} -> {}", fmt_ns(b * 1e9), fmt_ns(a * 1e9)),
                _ => String::new(),
            };
            vec![
                d.instance.clone(),
                d.changed_at_utc.clone(),
                facts.join("; "),
                format!("{} {means}", c.verdict),
                c.note.clone(),
            ]
        })
        .collect();
    html! {
        section {
            h2 { "Drift: machine facts that changed in the window" }
            @if rows.is_empty() { p.note { "No host's facts changed in the window." } }
            @else { (page::table(&["host", "changed at", "facts", "placement cost", "test"], &rows, 5)) }
        }
    }
}

fn vm_wait(r: &Report) -> Markup {
    use super::vms::shown_as_share;
    let v = &r.vm_wait;
    let mut notes = Footnotes::default();
    let hosts: Vec<Vec<String>> = v
        .hosts
        .iter()
        .map(|x| {
            let mut cell = |f: &Reading, shown: String| notes.cell(f, shown);
            vec![
                x.rank.to_string(),
                x.instance.clone(),
                cell(&x.wait_per_vcpu, shown_as_share(&x.wait_per_vcpu)),
                cell(&x.vcpus, x.vcpus.shown_as_number(1)),
            ]
        })
        .collect();
    let vms: Vec<Vec<String>> = v
        .vms
        .iter()
        .map(|x| {
            let mut cell = |f: &Reading, shown: String| notes.cell(f, shown);
            vec![
                x.rank.to_string(),
                x.instance.clone(),
                x.vm.clone(),
                cell(&x.wait_per_vcpu, shown_as_share(&x.wait_per_vcpu)),
                cell(&x.run_per_vcpu, shown_as_share(&x.run_per_vcpu)),
                cell(&x.vcpus, x.vcpus.shown_as_number(1)),
            ]
        })
        .collect();
    html! {
        section {
            h2 { "What guests wait for a host CPU" }
            p.note { "KVM hosts: each VM's vCPU threads' run-queue wait (what the guest sees as \
                      steal) and run time per vCPU measured, and each host's over all its VMs' \
                      vCPUs; mean ±sd of the recording rules' points over the window." }
            @if let Some(why) = &v.not_available { p.note { "Not available: " (why) } }
            @else if hosts.is_empty() && vms.is_empty() {
                p.note { "No host publishes cpulab_vm_* in the window (cpulab exporter on a KVM host)." }
            } @else {
                (page::table(&["#", "host", "wait/vCPU", "vCPUs"], &hosts, 2))
                (page::table(&["#", "host", "vm", "wait/vCPU", "run/vCPU", "vCPUs"], &vms, 3))
                @for line in notes.lines() { p.note.footnote { (line) } }
            }
        }
    }
}

/// The whole page.
pub fn render(r: &Report) -> String {
    let w = &r.window;
    let header = html! {
        p.facts {
            (r.prometheus) ", " (w.start_utc) " to " (w.end_utc) " (a point every " (w.step_s)
            " s); " (r.hosts_seen) " host(s) with cpulab series in the window, "
            (r.hosts_answering) " answering now; top " (r.limit) "."
        }
    };
    let body = html! {
        (ranking(r))
        (charts(r))
        (findings(r))
        (drift(r))
        (vm_wait(r))
    };
    page::page_with_provenance(
        "cpulab fleet",
        header,
        body,
        "Every figure was read from the Prometheus named above (its recording rules over the \
         window); the mean of the points with their standard deviation where shown.",
    )
}
