//! The text and the page of a `cpulab host` window.

use super::kvm::KvmEvents;
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

const KVM_HEADER: [&str; 9] = [
    "VM",
    "vCPU",
    "halts/s",
    "polls won / lost",
    "polling CPU (won + lost)",
    "mean halt that slept",
    "IPIs sent/s",
    "poll window",
    "exits/s",
];

/// The CPU lost polls burnt at most (ns over the window), as a share of a CPU.
fn lost_cpu(bound_ns: Option<f64>, secs: f64) -> String {
    bound_ns.map_or("n/a".into(), |b| format!("<= {:.3}", b / secs / 1e9))
}

fn kvm_cells(k: &KvmEvents, lost_ns: Option<f64>, secs: f64) -> Vec<String> {
    vec![
        format!("{:.0}", k.halts as f64 / secs),
        format!(
            "{} / {}{}",
            k.polls_won,
            k.slept,
            k.won_share()
                .map_or(String::new(), |s| format!(" ({:.1}% won)", 100.0 * s))
        ),
        format!(
            "{:.3} + {} CPU",
            k.polls_won_ns as f64 / secs / 1e9,
            lost_cpu(lost_ns, secs)
        ),
        k.mean_sleep_ns().map_or(NA.into(), crate::units::fmt_ns),
        format!("{:.0}", k.ipis_sent as f64 / secs),
        k.poll_window_ns.map_or("unchanged".into(), |w| {
            format!(
                "{} (grew {}, shrank {})",
                crate::units::fmt_ns(w as f64),
                k.poll_window_grew,
                k.poll_window_shrank
            )
        }),
        k.exits
            .map_or("n/a".into(), |e| format!("{:.0}", e as f64 / secs)),
    ]
}

fn kvm_rows(r: &HostReport) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for vm in &r.vms {
        for c in &vm.vcpus {
            let mut row = vec![label(vm), c.vcpu.to_string()];
            match &c.kvm {
                Some(k) => row.extend(kvm_cells(k, super::lost_poll_ns(c, r), r.interval_s)),
                None => row.extend(std::iter::repeat_n(NA.to_string(), 7)),
            }
            rows.push(row);
        }
        if let Some(k) = &vm.kvm {
            let mut row = vec![label(vm), "all".into()];
            // The lost polls' bound is per vCPU (its own window and run time): the VM's is
            // their sum.
            let lost: Option<f64> = vm.vcpus.iter().map(|c| super::lost_poll_ns(c, r)).sum();
            let mut cells = kvm_cells(k, lost, r.interval_s);
            cells[5] = NA.into();
            row.extend(cells);
            rows.push(row);
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
        if r.vms
            .iter()
            .any(|v| v.vcpus.iter().any(|c| c.kvm.is_some()))
        {
            out += &format!(
                "\nKVM's events (its tracepoints), per vCPU thread and per VM\n{}\n",
                table(&KVM_HEADER, &kvm_rows(r))
            );
            out += &format!(
                "  {}\n",
                st.dim(
                    "polling CPU: the halts polling won, exactly (their time in kvm_vcpu_wakeup); the lost polls' at most: the smaller of each halt that slept polling its whole window (where kvm_halt_poll_ns said it) and the thread's run time less its polls won"
                )
            );
        }
        for l in program_cost_lines(r) {
            out += &format!("  {l}\n");
        }
        let cpus: Vec<String> = r
            .host_cpus
            .iter()
            .map(|c| {
                let others: Vec<String> = c
                    .others
                    .iter()
                    .map(|o| format!("{} ({}) {:.1}%", o.comm, o.tid, 100.0 * o.share))
                    .collect();
                format!(
                    "CPU {}: busy {}, of which {:.0}% running vCPUs of {}{}{}",
                    c.cpu,
                    pct(c.busy_share),
                    100.0 * c.guest_share,
                    c.vms.join(", "),
                    match c.steal_share {
                        Some(s) if s >= 0.005 =>
                            format!("; stolen by this host's own hypervisor {:.1}%", 100.0 * s),
                        _ => String::new(),
                    },
                    if others.is_empty() {
                        String::new()
                    } else {
                        format!("; besides them: {}", others.join(", "))
                    }
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

/// What each KVM program cost over the window, as the kernel timed it (`--bpf-program-costs`):
/// its runs, the mean time of one, and the CPU time of all of them as a share of one CPU.
pub fn program_cost_lines(r: &HostReport) -> Vec<String> {
    r.kvm_program_costs
        .iter()
        .map(|p| {
            let each = if p.runs > 0 {
                format!("{:.0} ns each on average", p.run_ns as f64 / p.runs as f64)
            } else {
                "never ran".to_string()
            };
            let share = if r.interval_s > 0.0 {
                format!(
                    ", {:.2}% of one CPU over the window",
                    100.0 * p.run_ns as f64 / (r.interval_s * 1e9)
                )
            } else {
                String::new()
            };
            format!(
                "BPF program on kvm:{}: {} runs, {each}{share} (the kernel's own timing of the program, not of the tracepoint around it)",
                p.program, p.runs
            )
        })
        .collect()
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
        @if r.vms.iter().any(|v| v.vcpus.iter().any(|c| c.kvm.is_some())) {
            section {
                h2 { "KVM's events" }
                (html::table(&KVM_HEADER, &kvm_rows(r), 2))
                @for l in program_cost_lines(r) { p { (l) } }
            }
        }
        section {
            h2 { "Not measured" }
            ul.plain { @for (w, y) in &r.not_measured { li { (w) ": " (y) } } }
        }
        (html::conditions(&r.conditions, &[]))
    };
    html::page("cpulab host", html::facts_line(&r.conditions), body)
}
