//! The probe as a page for people: the notable facts first, then one block per section.
//!
//! Rendering returns a string and does no I/O, so it can be tested and reused by the doctor.
//! Unavailable readings are shown in place with their reason, never dropped: an absent line is
//! information too (a VM without cpufreq, a container without debugfs).

use super::Probe;
use super::mitigations::VulnState;
use super::reading::Reading;
use crate::cpulist::CpuSet;
use crate::output::Style;
use std::collections::BTreeMap;
use std::fmt::Write;

const LABEL: usize = 22;

fn row(s: &mut String, label: &str, value: &str) {
    let _ = writeln!(s, "  {label:<LABEL$} {value}");
}

fn head(s: &mut String, st: &Style, title: &str) {
    let _ = writeln!(s, "\n{}", st.bold(title));
}

fn map_line(m: &BTreeMap<String, String>) -> String {
    if m.is_empty() {
        return "none".to_string();
    }
    m.iter()
        .map(|(k, v)| {
            if v.is_empty() {
                k.clone()
            } else {
                format!("{k}={v}")
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
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
    idle(&mut s, st, p);
    freq(&mut s, st, p);
    mitigations(&mut s, st, p);
    sched(&mut s, st, p);
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

fn idle(s: &mut String, st: &Style, p: &Probe) {
    let i = &p.idle;
    head(s, st, "Idle");
    row(
        s,
        "driver / governor",
        &format!(
            "{} / {}",
            i.driver.show(|d| d.clone()),
            i.governor.show(|d| d.clone())
        ),
    );
    match &i.states {
        Reading::Value(states) => {
            for x in states {
                row(
                    s,
                    &format!("state{} (cpu{})", x.index, i.states_cpu),
                    &format!(
                        "{:<14} exit {:>4} us, residency {:>5} us{}  {}",
                        x.name,
                        x.latency_us.map_or("?".into(), |v| v.to_string()),
                        x.residency_us.map_or("?".into(), |v| v.to_string()),
                        if x.disabled { ", disabled" } else { "" },
                        st.dim(&x.desc)
                    ),
                );
            }
        }
        r => row(s, "states", &r.show(|_| String::new())),
    }
    for d in &i.per_cpu_differences {
        row(s, "", &st.yellow(d));
    }
    let hp = show_map(&i.haltpoll);
    row(
        s,
        "guest halt polling",
        &if i.halt_poll_ns() == Some(0) {
            st.yellow(&hp)
        } else {
            hp
        },
    );
    row(s, "cpuidle_haltpoll", &show_map(&i.cpuidle_haltpoll));
    row(s, "kvm (host side)", &show_map(&i.kvm_host_halt_poll));
    if i.kvm_host_halt_poll.is_value() && p.is_vm() {
        row(
            s,
            "",
            &st.dim("kvm is loaded in this guest: these govern nested guests, not this one"),
        );
    }
    row(s, "boot options", &map_line(&i.cmdline));
}

fn freq(s: &mut String, st: &Style, p: &Probe) {
    let f = &p.freq;
    head(s, st, "Frequency");
    match &f.policies {
        Reading::Value(ps) => {
            // Identical policies (one per CPU under intel_pstate) are shown once.
            let mut groups: Vec<(String, CpuSet, Vec<u64>)> = Vec::new();
            for x in ps {
                let mhz = |k: Option<u64>| k.map_or("?".into(), |k| format!("{}", k / 1000));
                let key = format!(
                    "{} / {}: {}-{} MHz (hw {}-{}){}",
                    x.driver.as_deref().unwrap_or("?"),
                    x.governor.as_deref().unwrap_or("?"),
                    mhz(x.min_khz),
                    mhz(x.max_khz),
                    mhz(x.cpuinfo_min_khz),
                    mhz(x.cpuinfo_max_khz),
                    x.energy_performance_preference
                        .as_ref()
                        .map_or(String::new(), |e| format!(", EPP {e}"))
                );
                let cpus = x.cpus.clone().unwrap_or_default();
                match groups.iter_mut().find(|g| g.0 == key) {
                    Some(g) => {
                        g.1 = g.1.iter().chain(cpus.iter()).collect();
                        g.2.extend(x.cur_khz);
                    }
                    None => groups.push((key, cpus, x.cur_khz.into_iter().collect())),
                }
            }
            for (key, cpus, cur) in groups {
                let now = match (cur.iter().min(), cur.iter().max()) {
                    (Some(a), Some(b)) if a == b => format!(", now {} MHz", a / 1000),
                    (Some(a), Some(b)) => format!(", now {}-{} MHz", a / 1000, b / 1000),
                    _ => String::new(),
                };
                row(s, &format!("CPUs {cpus}"), &format!("{key}{now}"));
            }
        }
        r => row(s, "cpufreq", &st.yellow(&r.show(|_| String::new()))),
    }
    row(
        s,
        "boost",
        &f.boost
            .show(|b| if *b { "on".into() } else { "off".into() }),
    );
    row(s, "intel_pstate", &f.intel_pstate.show(|v| v.clone()));
    row(s, "amd_pstate", &f.amd_pstate.show(|v| v.clone()));
    row(
        s,
        "platform profile",
        &f.platform_profile.show(|v| v.clone()),
    );
}

fn mitigations(s: &mut String, st: &Style, p: &Probe) {
    let m = &p.mitigations;
    head(s, st, "Mitigations");
    row(s, "boot options", &map_line(&m.cmdline));
    match &m.vulnerabilities {
        Reading::Value(all) => {
            let mut fine = Vec::new();
            for (name, v) in all {
                let text = match v.state {
                    VulnState::Vulnerable => st.red(&v.text),
                    VulnState::Mitigated => st.yellow(&v.text),
                    VulnState::Unknown => v.text.clone(),
                    VulnState::NotAffected => {
                        fine.push(name.as_str());
                        continue;
                    }
                };
                let _ = writeln!(s, "  {name}: {text}");
            }
            if !fine.is_empty() {
                let _ = writeln!(
                    s,
                    "  {}",
                    st.dim(&format!("not affected: {}", fine.join(", ")))
                );
            }
        }
        r => row(s, "vulnerabilities", &r.show(|_| String::new())),
    }
}

fn sched(s: &mut String, st: &Style, p: &Probe) {
    let x = &p.sched;
    head(s, st, "Scheduler and limits");
    row(s, "kernel", &x.kernel.show(|k| k.clone()));
    match &x.tunables {
        Reading::Value(t) => {
            let m: BTreeMap<String, String> = t
                .iter()
                .map(|(k, v)| (k.clone(), v.show(|v| v.clone())))
                .collect();
            row(s, "sysctl", &map_line(&m));
        }
        r => row(s, "sysctl", &r.show(|_| String::new())),
    }
    row(s, "debugfs sched", &show_map(&x.debug_tunables));
    row(s, "tuned profile", &x.tuned_profile.show(|t| t.clone()));
    row(
        s,
        "cgroup version",
        x.cgroup.version.as_deref().unwrap_or("none mounted"),
    );
    let cpu = x.cgroup.cpu.show(|c| {
        let quota = match (c.quota_cpus, c.period_us) {
            (Some(q), Some(p)) => format!("quota {q:.2} CPUs per {} ms", p / 1000),
            (None, Some(p)) => format!("no quota (period {} ms)", p / 1000),
            _ => "no quota".to_string(),
        };
        let w = c
            .weight
            .map(|w| format!("weight {w}"))
            .or(c.shares.map(|v| format!("shares {v}")));
        format!(
            "{} {}: {quota}, {}, throttled in {} of {} periods",
            c.version,
            c.dir,
            w.unwrap_or_else(|| "no weight".into()),
            c.nr_throttled.map_or("?".into(), |n| n.to_string()),
            c.stat
                .get("nr_periods")
                .map_or("?".into(), |n| n.to_string())
        )
    });
    row(s, "cgroup cpu", &cpu);
    if let Some(c) = x.cgroup.cpu.value()
        && let Some((q, dir)) = &c.effective_quota
    {
        row(
            s,
            "tightest quota",
            &st.yellow(&format!("{q:.2} CPUs at {dir}")),
        );
    }
}
