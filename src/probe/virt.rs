//! Virtualisation: is this a VM, whose, with which paravirtual features, and is it a container.
//!
//! In a VM every cross-vCPU wakeup may cost a halt exit and an IPI through the hypervisor, and
//! the topology shown is the one the hypervisor chose, not the physical one. Three witnesses
//! are asked, because each can be missing: CPUID (x86 only), `/sys/hypervisor/type` (Xen and a
//! few others) and DMI (`sys_vendor`, `product_name`; absent in microVMs such as Firecracker).
//! The conclusion names the witness it rests on.
//!
//! Containers share the host kernel, so they change nothing about wakeup mechanics but often
//! restrict the CPUs (cpuset) and time (quota) a process gets; the probe records the evidence
//! for one. A marker file alone (`/.dockerenv`) is weak evidence: root filesystems built from
//! container images keep it, so the probe says when that is all it found.

use super::cpuid::{self, CpuidFacts};
use super::reading::{Reading, Reason, read_trim};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The virtualisation section of the probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Virt {
    /// What CPUID says: hypervisor bit, signature, KVM features.
    pub cpuid: Reading<CpuidFacts>,
    /// `/sys/hypervisor/type` (e.g. `xen`).
    pub sys_hypervisor_type: Reading<String>,
    /// `/sys/class/dmi/id/sys_vendor` (e.g. `QEMU`, `Microsoft Corporation`).
    pub dmi_sys_vendor: Reading<String>,
    /// `/sys/class/dmi/id/product_name` (e.g. `KVM`, `Virtual Machine`, `HVM domU`).
    pub dmi_product_name: Reading<String>,
    /// The hypervisor this machine runs under, or `None` on bare metal (or when no witness
    /// could tell).
    pub hypervisor: Option<String>,
    /// Which witness the conclusion rests on.
    pub evidence: Vec<String>,
    /// Evidence that this process runs in a container.
    pub container: Container,
    /// The current clocksource (`kvm-clock`, `hyperv_clocksource_tsc_page`, `xen`, `tsc`):
    /// each hypervisor's paravirtual clock names it.
    #[serde(default = "not_recorded")]
    pub clocksource: Reading<String>,
    /// Loaded modules that only a given hypervisor's guests load (`hv_vmbus`, `xen_netfront`,
    /// `vmw_vmci`, `virtio_pci`, ...), from `/sys/module`.
    #[serde(default)]
    pub guest_modules: Vec<String>,
}

fn not_recorded() -> Reading<String> {
    Reading::unavailable(
        Reason::Absent,
        "not recorded by the cpulab that wrote this result",
    )
}

/// Guest drivers that name their hypervisor when loaded (built-in drivers show in
/// `/sys/module` too when they have parameters; absence proves nothing).
pub const GUEST_MODULES: &[(&str, &str)] = &[
    ("hv_vmbus", "Microsoft Hyper-V"),
    ("hv_netvsc", "Microsoft Hyper-V"),
    ("hv_storvsc", "Microsoft Hyper-V"),
    ("hv_utils", "Microsoft Hyper-V"),
    ("xen_netfront", "Xen"),
    ("xen_blkfront", "Xen"),
    ("xen_evtchn", "Xen"),
    ("vmw_vmci", "VMware"),
    ("vmw_balloon", "VMware"),
    ("vmxnet3", "VMware"),
    ("vmw_pvscsi", "VMware"),
    ("virtio_pci", "KVM"),
    ("cpuidle_haltpoll", "KVM"),
];

/// The kernel's current clocksource below `root`: the one reader of it (the probe, oscost's
/// platform record and pingpong's timer all ask here).
pub fn read_clocksource(root: &Path) -> Reading<String> {
    read_trim(&root.join("sys/devices/system/clocksource/clocksource0/current_clocksource"))
}

/// The hypervisor a clocksource name belongs to (pure).
pub fn hypervisor_from_clocksource(cs: &str) -> Option<&'static str> {
    match cs {
        "kvm-clock" => Some("KVM"),
        "xen" => Some("Xen"),
        c if c.starts_with("hyperv_clocksource") => Some("Microsoft Hyper-V"),
        "vmware-tsc" => Some("VMware"),
        _ => None,
    }
}

/// Evidence that this process runs in a container.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Container {
    /// True when any evidence was found.
    pub detected: bool,
    /// The runtime the evidence names (`docker`, `podman`, `kubernetes`, `lxc`, ...).
    pub runtime: Option<String>,
    /// True when the only evidence is a marker file, which image-built root filesystems keep.
    pub marker_only: bool,
    /// Each piece of evidence, and each witness that could not be read.
    pub evidence: Vec<String>,
}

/// Names the hypervisor from DMI strings (pure).
pub fn hypervisor_from_dmi(vendor: &str, product: &str) -> Option<String> {
    let v = vendor.to_ascii_lowercase();
    let p = product.to_ascii_lowercase();
    let name = if p.contains("kvm") || v.contains("qemu") {
        "KVM/QEMU"
    } else if p.contains("vmware") || v.contains("vmware") {
        "VMware"
    } else if p.contains("virtualbox") || v.contains("innotek") {
        "VirtualBox"
    } else if p.contains("hvm domu") || v.contains("xen") {
        "Xen"
    } else if v.contains("microsoft") && p.contains("virtual machine") {
        "Microsoft Hyper-V"
    } else if p.contains("google compute engine") {
        "KVM (Google Compute Engine)"
    } else if v.contains("amazon ec2") || p.contains("amazon ec2") {
        "KVM/Nitro (Amazon EC2)"
    } else if p.contains("openstack") || v.contains("openstack") {
        "KVM (OpenStack)"
    } else {
        return None;
    };
    Some(name.to_string())
}

/// Container runtime named by a `/proc/1/cgroup` text, if any (pure).
pub fn runtime_from_cgroup(text: &str) -> Option<&'static str> {
    let t = text.to_ascii_lowercase();
    [
        ("kubepods", "kubernetes"),
        ("libpod", "podman"),
        ("docker", "docker"),
        ("containerd", "containerd"),
        ("lxc", "lxc"),
        ("machine.slice/systemd-nspawn", "systemd-nspawn"),
    ]
    .into_iter()
    .find(|(k, _)| t.contains(k))
    .map(|(_, v)| v)
}

/// The `container=` variable in a NUL-separated environment block (pure).
pub fn container_from_environ(block: &[u8]) -> Option<String> {
    block
        .split(|&b| b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok())
        .find_map(|kv| kv.strip_prefix("container="))
        .map(str::to_string)
}

impl Virt {
    pub fn read(root: &Path, live: bool) -> Self {
        let cpuid = cpuid::read(root, live);
        let sys_hypervisor_type = read_trim(&root.join("sys/hypervisor/type"));
        let dmi_sys_vendor = read_trim(&root.join("sys/class/dmi/id/sys_vendor"));
        let dmi_product_name = read_trim(&root.join("sys/class/dmi/id/product_name"));
        let mut evidence = Vec::new();
        let mut hypervisor = None;
        if let Some(f) = cpuid.value() {
            if let Some(v) = &f.vendor {
                let v = match (&f.kvm, v.as_str()) {
                    (Some(_), "Microsoft Hyper-V") => "KVM (with Hyper-V emulation)".to_string(),
                    _ => v.clone(),
                };
                evidence.push(format!("CPUID 0x40000000 signature names {v}"));
                hypervisor = Some(v);
            } else if f.hypervisor_bit {
                evidence.push("CPUID hypervisor bit set, no signature".to_string());
                hypervisor = Some("unknown".to_string());
            } else {
                evidence.push("CPUID hypervisor bit clear".to_string());
            }
        }
        if let Some(t) = sys_hypervisor_type.value().filter(|t| !t.is_empty()) {
            evidence.push(format!("/sys/hypervisor/type is {t}"));
            hypervisor.get_or_insert_with(|| t.clone());
        }
        let dmi = hypervisor_from_dmi(
            dmi_sys_vendor.value().map_or("", |s| s),
            dmi_product_name.value().map_or("", |s| s),
        );
        if let Some(d) = dmi {
            evidence.push(format!("DMI names {d}"));
            hypervisor.get_or_insert(d);
        }
        let clocksource = read_clocksource(root);
        if let Some(h) = clocksource
            .value()
            .and_then(|c| hypervisor_from_clocksource(c))
        {
            evidence.push(format!(
                "clocksource {} belongs to {h}",
                clocksource.value().map_or("", |s| s)
            ));
        }
        let guest_modules: Vec<String> = GUEST_MODULES
            .iter()
            .filter(|(m, _)| root.join("sys/module").join(m).is_dir())
            .map(|(m, _)| m.to_string())
            .collect();
        for m in &guest_modules {
            if let Some((_, h)) = GUEST_MODULES.iter().find(|(n, _)| n == m) {
                evidence.push(format!("module {m} ({h} guest driver) is loaded"));
            }
        }
        Self {
            cpuid,
            sys_hypervisor_type,
            dmi_sys_vendor,
            dmi_product_name,
            hypervisor: hypervisor.filter(|h| !h.is_empty()),
            evidence,
            container: read_container(root),
            clocksource,
            guest_modules,
        }
    }

    /// True when any witness says this is a virtual machine.
    pub fn is_vm(&self) -> bool {
        self.hypervisor.is_some()
    }

    /// True under KVM (directly or with Hyper-V emulation).
    pub fn is_kvm(&self) -> bool {
        self.cpuid.value().is_some_and(|f| f.kvm.is_some())
            || self
                .hypervisor
                .as_deref()
                .is_some_and(|h| h.contains("KVM"))
    }

    /// A KVM paravirtual feature by kernel name (`pv_send_ipi`, `poll_control`, ...); `None`
    /// when CPUID could not tell.
    pub fn kvm_feature(&self, name: &str) -> Option<bool> {
        self.cpuid
            .value()
            .and_then(|f| f.kvm.as_ref())
            .map(|k| k.has(name))
    }
}

fn read_container(root: &Path) -> Container {
    let mut evidence = Vec::new();
    let mut runtime: Option<String> = None;
    let mut strong = false;
    for (file, rt) in [(".dockerenv", "docker"), ("run/.containerenv", "podman")] {
        if root.join(file).exists() {
            evidence.push(format!("/{file} exists"));
            runtime.get_or_insert(rt.to_string());
        }
    }
    match read_trim(&root.join("run/systemd/container")) {
        Reading::Value(v) if !v.is_empty() => {
            evidence.push(format!("/run/systemd/container says {v}"));
            runtime = Some(v);
            strong = true;
        }
        _ => {}
    }
    match read_trim(&root.join("proc/1/cgroup")) {
        Reading::Value(t) => {
            if let Some(rt) = runtime_from_cgroup(&t) {
                evidence.push(format!("/proc/1/cgroup names {rt}"));
                runtime = Some(rt.to_string());
                strong = true;
            }
        }
        r => evidence.push(format!("/proc/1/cgroup {}", r.show(|_| String::new()))),
    }
    let environ = root.join("proc/1/environ");
    match std::fs::read(&environ) {
        Ok(block) => {
            if let Some(c) = container_from_environ(&block) {
                evidence.push(format!("container={c} in the environment of pid 1"));
                runtime = Some(c);
                strong = true;
            }
        }
        Err(e) => {
            let r: Reading<()> = super::reading::from_io(&environ, &e);
            if r.why().is_some_and(|w| w.reason != Reason::Absent) {
                evidence.push(format!("pid 1 environment {}", r.show(|_| String::new())));
            }
        }
    }
    let found = runtime.is_some();
    Container {
        detected: found,
        runtime,
        marker_only: found && !strong,
        evidence,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_hypervisors_from_dmi() {
        assert_eq!(
            hypervisor_from_dmi("QEMU", "Standard PC (Q35 + ICH9, 2009)").as_deref(),
            Some("KVM/QEMU")
        );
        assert_eq!(
            hypervisor_from_dmi("Microsoft Corporation", "Virtual Machine").as_deref(),
            Some("Microsoft Hyper-V")
        );
        assert_eq!(
            hypervisor_from_dmi("Xen", "HVM domU").as_deref(),
            Some("Xen")
        );
        assert_eq!(hypervisor_from_dmi("Dell Inc.", "PowerEdge R740"), None);
    }

    #[test]
    fn finds_container_runtimes() {
        assert_eq!(
            runtime_from_cgroup("0::/kubepods/besteffort/pod1/abc"),
            Some("kubernetes")
        );
        assert_eq!(
            runtime_from_cgroup("12:cpu:/docker/0123abcd"),
            Some("docker")
        );
        assert_eq!(runtime_from_cgroup("0::/init.scope\n1:cpu:/"), None);
        assert_eq!(
            container_from_environ(b"PATH=/bin\0container=podman\0HOME=/").as_deref(),
            Some("podman")
        );
        assert_eq!(container_from_environ(b"PATH=/bin\0"), None);
    }
}
