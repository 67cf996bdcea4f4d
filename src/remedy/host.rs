//! A `cpulab host` result's findings as the offers [`super::plan_offers`] reads, so a KVM
//! host's pins go through the same deployments, formats and README as a doctor's remedies.
//!
//! A pinned finding (floating or stacked vCPUs) becomes the doctor's
//! [`Change::HostVcpuPin`]: the pins `cpulab host` chose from the host's topology, the emulator
//! threads' CPUs, and the libvirt domain when libvirt runs the VM (the libvirt form; otherwise
//! the taskset form). A module parameter a finding sets (`kvm`'s `halt_poll_ns`) becomes the
//! doctor's [`Change::ModuleParam`] (the modprobe form). A finding with neither (CPU contention)
//! is advice, listed as not deployable with its words.
//!
//! The result is this machine's own (`cpulab host` runs on the KVM host), so every remedy's
//! site is this machine. Pure.

use super::{Check, Offer};
use crate::cpulist::CpuSet;
use crate::doctor::findings::{Change, Remedy, Site};
use crate::host::watch::findings::{HostFinding, emulator_cpus};

/// The VM's process: recorded, or the `(PID)` its label ends with (results written before the
/// pid was recorded).
fn pid_of(f: &HostFinding) -> Option<i32> {
    f.pid.or_else(|| {
        f.vm.rsplit_once('(')
            .and_then(|(_, p)| p.strip_suffix(')'))
            .and_then(|p| p.parse().ok())
    })
}

/// The libvirt domain: recorded, or the one its own `virsh vcpupin` apply names (results written
/// before the domain was recorded).
fn domain_of(f: &HostFinding) -> Option<String> {
    f.domain.clone().or_else(|| {
        f.apply
            .iter()
            .find(|a| a.first().is_some_and(|w| w == "virsh"))
            .and_then(|a| a.get(2).cloned())
    })
}

/// The offers of `findings`, a `cpulab host` window on `hostname` whose CPUs allowed were
/// `allowed` (for the emulator threads of a result that did not record theirs).
pub fn offers(findings: &[HostFinding], hostname: &str, allowed: &CpuSet) -> Vec<Offer> {
    let all_pins: CpuSet = findings
        .iter()
        .flat_map(|f| f.pins.iter().map(|p| p.cpu))
        .collect();
    findings
        .iter()
        .map(|f| {
            let pid = pid_of(f);
            let mut changes = Vec::new();
            let mut words = Vec::new();
            let mut effect = Vec::new();
            if let (false, Some(pid)) = (f.pins.is_empty(), pid) {
                let emulator = f.emulator.clone().unwrap_or_else(|| {
                    let mine: CpuSet = f.pins.iter().map(|p| p.cpu).collect();
                    emulator_cpus(allowed, &all_pins, &mine).0.to_string()
                });
                let list: Vec<String> = f
                    .pins
                    .iter()
                    .map(|p| format!("vCPU {} on CPU {}", p.vcpu, p.cpu))
                    .collect();
                words.push(format!(
                    "pin each vCPU of {} to a host CPU of its own: {}; its emulator threads on {emulator}",
                    f.vm,
                    list.join(", ")
                ));
                effect.push(
                    "each vCPU thread runs only on the CPU `cpulab host` chose for it from the \
                     host's topology (one hardware thread per core first, a VM that fits in one \
                     last-level cache kept in it), so no two of its running vCPUs share a core \
                     or a module while a core is free"
                        .to_string(),
                );
                changes.push(Change::HostVcpuPin {
                    vm: f.vm.clone(),
                    pid,
                    domain: domain_of(f),
                    pins: f.pins.clone(),
                    emulator,
                });
            }
            for m in &f.module_params {
                words.push(format!("set {}.{}={}", m.module, m.param, m.value));
                effect.push(format!(
                    "{}'s {} is {} for every VM on this host",
                    m.module, m.param, m.value
                ));
                changes.push(Change::ModuleParam {
                    module: m.module.clone(),
                    param: m.param.clone(),
                    value: m.value.clone(),
                });
            }
            if changes.is_empty() {
                words.push(if f.notes.is_empty() {
                    "act by hand on the evidence".to_string()
                } else {
                    f.notes.join("; ")
                });
            }
            Offer {
                finding: f.id.clone(),
                buys: format!("{} on {}: {}", f.id, f.vm, f.evidence.join("; ")),
                remedy: Remedy {
                    command: words.join("; "),
                    effect: if effect.is_empty() {
                        "not a setting: see the finding's evidence".into()
                    } else {
                        effect.join("; ")
                    },
                    cost_caveat: if f.notes.is_empty() {
                        "the VM keeps to these CPUs: work the host would have moved elsewhere \
                         waits for them"
                            .into()
                    } else {
                        format!(
                            "the VM keeps to these CPUs: work the host would have moved \
                             elsewhere waits for them; {}",
                            f.notes.join("; ")
                        )
                    },
                    site: Site::ThisMachine,
                    who: if hostname.is_empty() {
                        "root on the KVM host".into()
                    } else {
                        format!("root on the KVM host {hostname}")
                    },
                    try_command: None,
                    measured: None,
                    measured_figures: Vec::new(),
                    changes: Some(changes),
                },
                check: Check::Host { pid },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::watch::findings::{ModuleParam, Pin};

    fn finding(id: &str, pins: Vec<Pin>, apply: Vec<Vec<String>>) -> HostFinding {
        HostFinding {
            id: id.into(),
            vm: "db1 (4242)".into(),
            pid: None,
            domain: None,
            evidence: vec!["vCPUs 0 and 1 ran mostly on CPUs 0 and 16: SMT siblings".into()],
            pins,
            apply,
            verify: vec![],
            undo: vec![],
            emulator: None,
            libvirt_cputune: None,
            module_params: vec![],
            notes: vec![],
        }
    }

    fn pins() -> Vec<Pin> {
        (0..2)
            .map(|v| Pin {
                vcpu: v,
                tid: 4250 + v as i32,
                cpu: v,
                before: "0-3".into(),
            })
            .collect()
    }

    /// A result written before the pid, the domain and the emulator were recorded still reads:
    /// the pid from the label, the domain from its virsh apply, the emulator's CPUs computed.
    #[test]
    fn an_older_host_finding_gives_its_pid_domain_and_emulator() {
        let virsh = vec![
            ["virsh", "vcpupin", "db1", "0", "0", "--live"]
                .map(String::from)
                .to_vec(),
        ];
        let o = offers(
            &[finding("stacked-vcpus", pins(), virsh)],
            "kvm1",
            &CpuSet::parse_list("0-3", false).unwrap(),
        );
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].check, Check::Host { pid: Some(4242) });
        assert!(o[0].buys.starts_with("stacked-vcpus on db1 (4242): "));
        let Some(changes) = &o[0].remedy.changes else {
            panic!("no changes")
        };
        assert_eq!(
            changes[0],
            Change::HostVcpuPin {
                vm: "db1 (4242)".into(),
                pid: 4242,
                domain: Some("db1".into()),
                pins: pins(),
                emulator: "2-3".into(),
            }
        );
    }

    #[test]
    fn a_module_parameter_is_the_doctors_change_and_advice_has_none() {
        let mut hp = finding("halt-poll", vec![], vec![]);
        hp.module_params.push(ModuleParam {
            module: "kvm".into(),
            param: "halt_poll_ns".into(),
            value: "50000".into(),
        });
        let mut advice = finding("cpu-contention", vec![], vec![]);
        advice.notes.push("weigh them".into());
        let o = offers(
            &[hp, advice],
            "",
            &CpuSet::parse_list("0-3", false).unwrap(),
        );
        assert_eq!(
            o[0].remedy.changes,
            Some(vec![Change::ModuleParam {
                module: "kvm".into(),
                param: "halt_poll_ns".into(),
                value: "50000".into()
            }])
        );
        assert_eq!(o[1].remedy.changes, Some(vec![]));
        assert_eq!(o[1].remedy.command, "weigh them");
    }
}
