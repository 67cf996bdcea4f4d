//! The only code that knows both the experiments' reports and the doctor's measurements.
//!
//! Each function condenses one module's result into the small types the rules read
//! ([`super::measurements`]). When an experiment's report grows, only its adapter changes.

use super::measurements::Facts;
use crate::probe::Probe;

/// The probe facts the rules use as context.
pub fn facts(p: &Probe) -> Facts {
    let t = &p.topology;
    let policies = p.freq.policies.value();
    let first_policy = policies.and_then(|v| v.first());
    let limits = p.sched.cgroup.cpu.value();
    Facts {
        hypervisor: p.virt.hypervisor.clone(),
        container: p.virt.container.detected.then(|| {
            p.virt
                .container
                .runtime
                .clone()
                .unwrap_or_else(|| "container".into())
        }),
        cpuidle_driver: p.idle.driver.value().cloned(),
        guest_halt_poll_ns: p.halt_poll_ns(),
        kvm_poll_control: p.virt.kvm_feature("poll_control") == Some(true),
        cpufreq_governor: first_policy.and_then(|x| x.governor.clone()),
        energy_perf_preference: first_policy.and_then(|x| x.energy_performance_preference.clone()),
        mitigations: p.mitigations.active(),
        cpu_quota_cpus: p.cpu_quota_cpus(),
        cgroup_path: limits.map(|l| l.dir.clone()),
        cgroup_version: p
            .sched
            .cgroup
            .version
            .as_deref()
            .and_then(|v| v.trim_start_matches('v').parse().ok()),
        online_cpus: t.online.clone(),
        allowed_cpus: t.allowed.clone(),
        smt_active: t.threads_per_core > 1,
        shared_l2_groups: t.modules.len(),
        cpu_model: p.cpu_model.value().cloned(),
        hardware_counters: Some(if p.counters.hardware_available() {
            "available".to_string()
        } else {
            p.counters
                .hardware
                .why()
                .map(|u| format!("unavailable: {}", u.detail))
                .unwrap_or_else(|| "unavailable".into())
        }),
    }
}

/// A saved `pingpong` result as conditions and wakeup measurements, when it parses.
pub fn pingpong_value(
    _doc: &serde_json::Value,
) -> Option<(
    crate::machine::Conditions,
    super::measurements::Measurements,
)> {
    None
}
