//! The facts worth reading first, in words.
//!
//! A probe page is long; most of it is context. These lines pick out what changes placement
//! costs and say what follows from each, in the order a performance engineer would want them:
//! the hypervisor and idle behaviour (the largest effects the field notes found), then the
//! topology's classes, restrictions, frequency, mitigations, limits and counters. They state
//! what was read and its known consequence; nothing here is a measured figure.

use super::Probe;
use crate::output::fmt_ns;

pub fn notable(p: &Probe) -> Vec<String> {
    let mut out = Vec::new();
    virt_and_idle(p, &mut out);
    topology(p, &mut out);
    limits(p, &mut out);
    freq(p, &mut out);
    mitigations(p, &mut out);
    counters(p, &mut out);
    out
}

fn virt_and_idle(p: &Probe, out: &mut Vec<String>) {
    let guest = p.virt.hypervisor.as_ref().map(|h| format!("{h} guest"));
    let idle = &p.idle;
    match (guest.as_deref(), idle.is_haltpoll(), idle.halt_poll_ns()) {
        (Some(g), true, Some(0)) => {
            out.push(format!(
                "{g}, haltpoll idle with guest_halt_poll_ns=0: every idle vCPU halts at once, so \
                 a wakeup sent to another vCPU pays a halt exit and an IPI through the hypervisor"
            ));
            // arch/x86/kernel/kvm.c: enabling guest halt polling writes MSR_KVM_POLL_CONTROL=0.
            if p.virt.kvm_feature("poll_control") == Some(true) {
                out.push(
                    "with KVM poll control, the haltpoll driver has also turned off the host's \
                     halt polling for this guest: nobody polls, a halted vCPU sleeps in the host \
                     until the IPI arrives"
                        .to_string(),
                );
            }
        }
        (Some(g), true, Some(ns)) => out.push(format!(
            "{g}, haltpoll idle polling up to {} before halting: wakeups within that window \
             avoid a halt exit",
            fmt_ns(ns as f64)
        )),
        (Some(g), _, _) => out.push(format!(
            "{g}: cross-vCPU wakeups go through the hypervisor (idle driver {})",
            idle.driver.show(|d| d.clone())
        )),
        (None, _, _) => {}
    }
    if let Some(v) = idle.cmdline.get("idle") {
        out.push(format!(
            "idle={v} on the kernel command line overrides the cpuidle driver"
        ));
    }
    if !p.is_vm()
        && let Some(lat) = idle.deepest_latency_us().filter(|&l| l >= 20)
    {
        out.push(format!(
            "deepest enabled idle state exits in {lat} us: a wakeup sent to a CPU idle that long \
             pays it"
        ));
    }
    if let Some(k) = p.virt.cpuid.value().and_then(|f| f.kvm.as_ref()) {
        let names = [
            ("pv_send_ipi", "PV IPI"),
            ("pv_sched_yield", "PV sched yield"),
            ("poll_control", "poll control"),
            ("steal_time", "steal time"),
        ];
        let has: Vec<&str> = names
            .iter()
            .filter(|(b, _)| k.has(b))
            .map(|(_, n)| *n)
            .collect();
        let lacks: Vec<&str> = names
            .iter()
            .filter(|(b, _)| !k.has(b))
            .map(|(_, n)| *n)
            .collect();
        out.push(format!(
            "KVM paravirtual features: {}{}; realtime hint {}",
            if has.is_empty() {
                "none of note".to_string()
            } else {
                has.join(", ")
            },
            if lacks.is_empty() {
                String::new()
            } else {
                format!("; missing {}", lacks.join(", "))
            },
            if k.realtime_hint {
                "set (vCPUs are not preempted)"
            } else {
                "not set"
            }
        ));
    }
    let c = &p.virt.container;
    if c.detected {
        let rt = c.runtime.as_deref().unwrap_or("unknown");
        out.push(if c.marker_only {
            format!(
                "container marker for {rt} found ({}), but nothing else suggests a container",
                c.evidence.join("; ")
            )
        } else {
            format!("running in a {rt} container: CPUs and CPU time may be limited by its cgroup")
        });
    }
}

fn topology(p: &Probe, out: &mut Vec<String>) {
    let t = &p.topology;
    let classes: Vec<String> = t.classes.iter().map(|c| c.class.to_string()).collect();
    let smt = if t.threads_per_core > 1 {
        format!("{} threads per core", t.threads_per_core)
    } else {
        "no SMT".to_string()
    };
    out.push(format!(
        "{} CPUs in {} package(s), {} NUMA node(s), {} core(s), {smt}, {} LLC domain(s){}: \
         placement classes {}",
        t.online.len(),
        t.packages,
        t.nodes.len().max(1),
        t.cores,
        t.llc_domains.len(),
        if t.modules.is_empty() {
            String::new()
        } else {
            format!(", {} L2 modules", t.modules.len())
        },
        classes.join(", ")
    ));
    if t.allowed.len() < t.online.len() {
        out.push(format!(
            "this process may use only CPUs {} of online {}",
            t.allowed, t.online
        ));
    }
    if let Some(iso) = t.isolated.value().filter(|s| !s.is_empty()) {
        out.push(format!(
            "CPUs {iso} are isolated from the scheduler (isolcpus)"
        ));
    }
    if let Some(nf) = p.mitigations.cmdline.get("nohz_full") {
        out.push(format!(
            "nohz_full={nf}: those CPUs skip the tick when running one task"
        ));
    }
}

fn limits(p: &Probe, out: &mut Vec<String>) {
    if let Some(c) = p.sched.cgroup.cpu.value()
        && let Some((q, dir)) = &c.effective_quota
    {
        out.push(format!(
            "cgroup CPU quota of {q:.2} CPUs (set at {dir}); throttled in {} of {} periods so far",
            c.nr_throttled.unwrap_or(0),
            c.stat.get("nr_periods").copied().unwrap_or(0)
        ));
    }
    if let Some(t) = p.sched.tuned_profile.value() {
        out.push(format!(
            "tuned profile {t} is active: it may have set governor and scheduler tunables"
        ));
    }
}

fn freq(p: &Probe, out: &mut Vec<String>) {
    let f = &p.freq;
    if !f.exposed() {
        if p.is_vm() {
            out.push(
                "CPU frequency is the host's business: cpufreq is not exposed to this guest"
                    .to_string(),
            );
        }
        return;
    }
    let slow: Vec<String> = f
        .governors()
        .into_iter()
        .filter(|g| ["powersave", "ondemand", "conservative", "schedutil"].contains(&g.as_str()))
        .collect();
    if !slow.is_empty() {
        out.push(format!(
            "cpufreq governor {}: CPUs that were idle come back at a lower clock, so bursty work \
             pays the ramp",
            slow.join(", ")
        ));
    }
}

fn mitigations(p: &Probe, out: &mut Vec<String>) {
    let m = &p.mitigations;
    if m.mode() == Some("off") {
        out.push(
            "mitigations=off: no speculative-execution defences on entry and exit".to_string(),
        );
    }
    let active = m.active();
    if !active.is_empty() {
        let names: Vec<&str> = active.iter().map(|(n, _)| n.as_str()).collect();
        out.push(format!(
            "{} mitigation(s) active ({}): system calls, context switches and VM exits cost more",
            active.len(),
            names.join(", ")
        ));
    }
    if m.cmdline.contains_key("nosmt") {
        out.push("nosmt: hardware threads are disabled".to_string());
    }
}

fn counters(p: &Probe, out: &mut Vec<String>) {
    if let Some(why) = p.counters.hardware.why()
        && p.live
    {
        out.push(format!(
            "hardware perf counters unavailable ({}): cycles and IPC cannot be measured here",
            why.reason.as_str()
        ));
    }
}
