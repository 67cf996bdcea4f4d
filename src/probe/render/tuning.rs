//! The tuning half of the page: idle, frequency, mitigations, scheduler and limits.

use super::{head, map_line, row, show_map};
use crate::cpulist::CpuSet;
use crate::output::Style;
use crate::probe::Probe;
use crate::probe::mitigations::VulnState;
use crate::probe::reading::Reading;
use std::collections::BTreeMap;
use std::fmt::Write;

pub fn idle(s: &mut String, st: &Style, p: &Probe) {
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
    if let Some(why) = &i.haltpoll_inert {
        row(s, "", &st.yellow(&format!("acts on nothing here: {why}")));
    }
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

pub fn freq(s: &mut String, st: &Style, p: &Probe) {
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

pub fn mitigations(s: &mut String, st: &Style, p: &Probe) {
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

pub fn sched(s: &mut String, st: &Style, p: &Probe) {
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
