//! The text and the page of a `cpulab host` window.

use super::{HostReport, label};
use crate::host::text_table as table;
use crate::output::Style;
use crate::report::html;

const NA: &str = "-";

fn pct(v: Option<f64>) -> String {
    v.map_or(NA.into(), |v| format!("{:.1}%", 100.0 * v))
}

const VCPU_HEADER: [&str; 10] = [
    "VM",
    "vCPU",
    "thread",
    "host CPUs (share of its run time)",
    "moves",
    "on CPU",
    "run-queue wait",
    "slept/s, preempted/s",
    "affinity",
    "state",
];

fn vcpu_rows(r: &HostReport) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for vm in &r.vms {
        for c in &vm.vcpus {
            let cpus: Vec<String> = c
                .cpus
                .iter()
                .map(|(cpu, s)| format!("{cpu}: {:.0}%", 100.0 * s))
                .collect();
            let moves = match c.migrations {
                Some(m) => m.to_string(),
                None => format!(">= {} (seen)", c.moves_seen),
            };
            let aff = match (&c.affinity_start, &c.affinity_end) {
                (Some(a), Some(b)) if a != b => format!("{a} -> {b}"),
                (Some(a), _) => a.clone(),
                _ => NA.into(),
            };
            rows.push(vec![
                label(vm),
                c.vcpu.to_string(),
                match (&c.tid, &c.thread_name) {
                    (Some(t), Some(n)) => format!("{t} {n}"),
                    (Some(t), None) => t.to_string(),
                    _ => "not found".into(),
                },
                if cpus.is_empty() {
                    NA.into()
                } else {
                    cpus.join(", ")
                },
                moves,
                pct(c.on_cpu_share),
                pct(c.run_queue_share),
                c.switches.as_ref().map_or(NA.into(), |w| {
                    format!(
                        "{:.0}, {:.0}",
                        w.voluntary as f64 / r.interval_s,
                        w.involuntary as f64 / r.interval_s
                    )
                }),
                aff,
                c.state.map_or(NA.into(), |s| s.to_string()),
            ]);
        }
    }
    rows
}

const VM_HEADER: [&str; 5] = [
    "VM",
    "running vCPUs",
    "share of what they wanted",
    "model",
    "shares CPUs with",
];

fn vm_rows(r: &HostReport) -> Vec<Vec<String>> {
    r.vms
        .iter()
        .map(|v| {
            vec![
                label(v),
                v.running_vcpus.to_string(),
                pct(v.share),
                v.model.map_or(NA.into(), |m| format!("{:.1}%", 100.0 * m)),
                if v.shares_cpus_with.is_empty() {
                    "none".into()
                } else {
                    v.shares_cpus_with.join(", ")
                },
            ]
        })
        .collect()
}

pub fn render_text(r: &HostReport, st: &Style) -> String {
    let mut out = format!(
        "{} {} VMs over {:.2} s\n",
        st.bold("cpulab host:"),
        r.vms.len(),
        r.interval_s
    );
    if r.vms.is_empty() {
        out += "no VM found: no process here holds an anon_inode:kvm-vm fd\n";
    } else {
        out += &format!("\n{}\n", table(&VCPU_HEADER, &vcpu_rows(r)));
        out += &format!("\n{}\n", table(&VM_HEADER, &vm_rows(r)));
        let cpus: Vec<String> = r
            .host_cpus
            .iter()
            .map(|c| {
                format!(
                    "CPU {}: busy {}, of which {:.0}% running vCPUs of {}",
                    c.cpu,
                    pct(c.busy_share),
                    100.0 * c.guest_share,
                    c.vms.join(", ")
                )
            })
            .collect();
        for c in cpus {
            out += &format!("  {c}\n");
        }
    }
    for f in &r.findings {
        out += &format!("\n{} {}\n", st.bold(&format!("{}:", f.id)), f.vm);
        for e in &f.evidence {
            out += &format!("  - {e}\n");
        }
        let block = |title: &str, lines: &[super::findings::Argv]| -> String {
            if lines.is_empty() {
                return String::new();
            }
            let mut s = format!("  {title}:\n");
            for l in lines {
                s += &format!("    {}\n", super::findings::line(l));
            }
            s
        };
        out += &block("apply", &f.apply);
        out += &block("verify (each exits 0 once it holds)", &f.verify);
        out += &block("undo", &f.undo);
        if let Some(x) = &f.libvirt_cputune {
            out += "  libvirt (virsh edit DOMAIN):\n";
            for l in x.lines() {
                out += &format!("    {l}\n");
            }
        }
        for n in &f.notes {
            out += &format!("  {}\n", st.dim(&format!("note: {n}")));
        }
    }
    for (what, why) in &r.not_measured {
        out += &format!("{}\n", st.dim(&format!("not measured: {what}: {why}")));
    }
    for n in &r.conditions.notes {
        out += &format!("{}\n", st.dim(&format!("note: {n}")));
    }
    out
}

pub fn page(r: &HostReport) -> String {
    let body = maud::html! {
        section {
            h2 { "vCPUs" }
            (html::table(&VCPU_HEADER, &vcpu_rows(r), 4))
        }
        section {
            h2 { "VMs" }
            (html::table(&VM_HEADER, &vm_rows(r), 1))
        }
        section {
            h2 { "Not measured" }
            ul.plain { @for (w, y) in &r.not_measured { li { (w) ": " (y) } } }
        }
        (html::conditions(&r.conditions, &[]))
    };
    html::page("cpulab host", html::facts_line(&r.conditions), body)
}
