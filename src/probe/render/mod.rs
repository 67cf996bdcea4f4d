//! The probe as a page for people: the notable facts first, then one block per section.
//!
//! Rendering returns a string and does no I/O, so it can be tested and reused by the doctor.
//! Unavailable readings are shown in place with their reason, never dropped: an absent line is
//! information too (a VM without cpufreq, a container without debugfs).

mod tuning;

use super::Probe;
use super::reading::Reading;
use crate::output::Style;
use std::collections::BTreeMap;
use std::fmt::Write;

const LABEL: usize = 22;

/// The probe as a self-contained page: the fingerprint as `cpulab probe` prints it, and its
/// conditions.
pub fn page(p: &Probe) -> String {
    use crate::report::html;
    let plain = Style { on: false };
    let body = maud::html! {
        section {
            h2 { "Machine fingerprint" }
            pre { (render(p, &plain)) }
        }
        (html::conditions(&p.conditions, &[]))
    };
    html::page("cpulab probe", html::facts_line(&p.conditions), body)
}

/// A saved probe, as the registry lists it (its command is the built-in `cpulab probe`).
impl crate::experiment::erased::Listed for Probe {
    const KIND: crate::report::envelope::Kind = crate::report::envelope::Kind::Probe;

    fn render_document(doc: &serde_json::Value, style: &Style) -> anyhow::Result<(String, String)> {
        render_document(doc, style)
    }

    fn figures_of_document(
        doc: &serde_json::Value,
    ) -> anyhow::Result<Vec<crate::experiment::Figure>> {
        figures_of_document(doc)
    }
}

/// Text and page of a loaded probe document (the registry's renderer).
pub fn render_document(doc: &serde_json::Value, style: &Style) -> anyhow::Result<(String, String)> {
    let p = typed(doc)?;
    Ok((render(&p, style), page(&p)))
}

/// The typed figures of a loaded probe document (the registry's reader).
pub fn figures_of_document(
    doc: &serde_json::Value,
) -> anyhow::Result<Vec<crate::experiment::Figure>> {
    Ok(typed(doc)?.figures())
}

fn typed(doc: &serde_json::Value) -> anyhow::Result<Probe> {
    serde_json::from_value(doc.clone()).map_err(|e| {
        crate::error::bad_input(format!(
            "this probe result does not match its schema ({e}); write it again with `cpulab probe --json`"
        ))
    })
}

fn row(s: &mut String, label: &str, value: &str) {
    let _ = writeln!(s, "  {label:<LABEL$} {value}");
}

fn head(s: &mut String, st: &Style, title: &str) {
    let _ = writeln!(s, "\n{}", st.bold(title));
}

fn map_line(m: &BTreeMap<String, String>) -> String {
    crate::probe::cmdline::options_line(m)
}

fn show_map(r: &Reading<BTreeMap<String, String>>) -> String {
    r.show(map_line)
}

fn kib(k: u64) -> String {
    if k >= 1024 && k.is_multiple_of(1024) {
        format!("{} MiB", k / 1024)
    } else if k >= 1024 {
        format!("{:.2} MiB", k as f64 / 1024.0)
    } else {
        format!("{k} KiB")
    }
}

/// Renders the whole page.
pub fn render(p: &Probe, st: &Style) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} {}, {} CPUs, {}, kernel {}",
        st.bold("cpulab probe:"),
        p.cpu_model.show(|m| m.clone()),
        p.topology.online.len(),
        p.virt
            .hypervisor
            .as_ref()
            .map_or("bare metal".to_string(), |h| format!("{h} guest")),
        p.kernel()
    );
    if !p.live {
        let _ = writeln!(s, "{}", st.dim(&format!("(fixture root {})", p.root)));
    }
    head(&mut s, st, "Notable");
    for n in &p.notable {
        let _ = writeln!(s, "  - {n}");
    }
    topology(&mut s, st, p);
    virt(&mut s, st, p);
    kvm_host(&mut s, st, p);
    tuning::idle(&mut s, st, p);
    tuning::freq(&mut s, st, p);
    tuning::mitigations(&mut s, st, p);
    tuning::sched(&mut s, st, p);
    head(&mut s, st, "Counters");
    let c = &p.counters;
    row(
        &mut s,
        "perf_event_paranoid",
        &c.perf_event_paranoid.show(|v| v.to_string()),
    );
    row(
        &mut s,
        "software counters",
        &c.software.show(|_| st.green("yes")),
    );
    row(
        &mut s,
        "hardware counters",
        &c.hardware.show(|_| st.green("yes")),
    );
    s
}

fn topology(s: &mut String, st: &Style, p: &Probe) {
    let t = &p.topology;
    head(s, st, "Topology");
    row(s, "online CPUs", &t.online.to_string());
    let mut allowed = t.allowed.to_string();
    if let Some(a) = t.affinity.value() {
        let _ = write!(allowed, " (affinity {a}");
    } else {
        allowed.push_str(" (");
    }
    let _ = write!(
        allowed,
        "{}cgroup cpuset {})",
        if t.affinity.is_value() { ", " } else { "" },
        t.cgroup_cpuset.show(|c| c.cpus.to_string())
    );
    row(s, "allowed CPUs", &allowed);
    if let Some(iso) = t.isolated.value().filter(|i| !i.is_empty()) {
        row(s, "isolated CPUs", &st.yellow(&iso.to_string()));
    }
    let nodes: Vec<String> = t
        .nodes
        .iter()
        .map(|(n, c)| format!("node{n} {c}"))
        .collect();
    row(
        s,
        "packages / dies",
        &format!("{} / {}", t.packages, t.dies),
    );
    row(
        s,
        "NUMA nodes",
        &if nodes.is_empty() {
            "none exposed".into()
        } else {
            nodes.join(", ")
        },
    );
    row(
        s,
        "cores / threads",
        &format!(
            "{} cores, {} thread(s) per core{}",
            t.cores,
            t.threads_per_core,
            t.smt_control
                .value()
                .map_or(String::new(), |c| format!(" (SMT control {c})"))
        ),
    );
    for c in &t.caches {
        let kind = match c.kind.as_str() {
            "Data" => "d",
            "Instruction" => "i",
            _ => "",
        };
        row(
            s,
            &format!("L{}{kind} cache", c.level),
            &format!(
                "{} {}, {} instance(s)",
                c.size_kib.map_or("?".to_string(), kib),
                c.shared_by,
                c.instances.len()
            ),
        );
    }
    if !t.modules.is_empty() {
        let m: Vec<String> = t.modules.iter().map(|m| m.to_string()).collect();
        row(s, "L2 modules", &m.join("  "));
    }
    let l: Vec<String> = t.llc_domains.iter().map(|m| m.to_string()).collect();
    row(s, "LLC domains", &l.join("  "));
    let _ = writeln!(
        s,
        "  {}",
        st.dim("placement classes (pairs of allowed CPUs, a pair to try)")
    );
    for c in &t.classes {
        let pairs = if c.pairs == 0 {
            String::new()
        } else {
            format!("{} pair(s)", c.pairs)
        };
        let _ = writeln!(
            s,
            "    {:<16} {:<8} {pairs}",
            c.class.as_str(),
            format!("{}:{}", c.example.0, c.example.1)
        );
    }
}

/// This machine as a KVM host, where it is one.
fn kvm_host(s: &mut String, st: &Style, p: &Probe) {
    let k = &p.kvm;
    head(s, st, "KVM host");
    let Some(module) = &k.module else {
        row(
            s,
            "module",
            "none loaded (no kvm_intel, kvm_amd or kvm_pvm in /sys/module)",
        );
        return;
    };
    row(
        s,
        "module",
        &if k.guest_code_emulated() {
            format!("{module} (runs guests without VMX/SVM, emulating their instructions)")
        } else {
            module.clone()
        },
    );
    let n = |v: Option<u64>| v.map_or("not available".to_string(), |v| v.to_string());
    let ro = match k.halt_poll_ns_writable {
        Some(false) => " (read-only: mode 0444, fixed at module load)",
        _ => "",
    };
    row(s, "halt_poll_ns", &format!("{}{ro}", n(k.halt_poll_ns)));
    row(
        s,
        "grow / start / shrink",
        &format!(
            "{} / {} / {}",
            n(k.halt_poll_ns_grow),
            n(k.halt_poll_ns_grow_start),
            n(k.halt_poll_ns_shrink)
        ),
    );
    row(
        s,
        "nx_huge_pages",
        k.nx_huge_pages.as_deref().unwrap_or("not available"),
    );
    let dev = match &k.dev_kvm {
        None => "not checked (a fixture tree)".to_string(),
        Some(crate::probe::kvm::DevKvm::Usable) => {
            "usable: `cpulab host bench` can run its guests here".into()
        }
        Some(crate::probe::kvm::DevKvm::Unusable { why }) => st.yellow(why),
    };
    row(s, "/dev/kvm", &dev);
}

fn virt(s: &mut String, st: &Style, p: &Probe) {
    let v = &p.virt;
    head(s, st, "Virtualisation");
    row(
        s,
        "hypervisor",
        &v.hypervisor.clone().unwrap_or_else(|| "none found".into()),
    );
    row(s, "evidence", &v.evidence.join("; "));
    match &v.cpuid {
        Reading::Value(f) => {
            if let Some(k) = &f.kvm {
                let on: Vec<&str> = k
                    .features
                    .iter()
                    .filter(|(_, b)| **b)
                    .map(|(n, _)| n.as_str())
                    .collect();
                let off: Vec<&str> = k
                    .features
                    .iter()
                    .filter(|(_, b)| !**b)
                    .map(|(n, _)| n.as_str())
                    .collect();
                row(s, "KVM features", &on.join(" "));
                row(s, "KVM lacks", &st.yellow(&off.join(" ")));
                row(
                    s,
                    "realtime hint",
                    if k.realtime_hint { "set" } else { "not set" },
                );
            }
        }
        r => row(s, "CPUID", &r.show(|_| String::new())),
    }
    row(
        s,
        "/sys/hypervisor",
        &v.sys_hypervisor_type.show(|t| t.clone()),
    );
    row(
        s,
        "DMI",
        &format!(
            "{} / {}",
            v.dmi_sys_vendor.show(|t| t.clone()),
            v.dmi_product_name.show(|t| t.clone())
        ),
    );
    let c = &v.container;
    let cont = match (&c.runtime, c.marker_only) {
        (None, _) => "none found".to_string(),
        (Some(r), true) => format!("{r}? marker only"),
        (Some(r), false) => r.clone(),
    };
    row(s, "container", &cont);
    if !c.evidence.is_empty() {
        row(s, "", &st.dim(&c.evidence.join("; ")));
    }
}
