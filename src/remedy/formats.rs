//! The formats `cpulab remedy` writes, which change each can carry, and the one place a
//! format is chosen for a remedy ([`form`]).

use super::{Context, Form};
use crate::doctor::findings::{Change, Site};
use serde::Serialize;

/// A deployment format (`--format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// systemd drop-ins and `systemctl set-property --runtime`.
    Systemd,
    /// `modprobe.d` files and the module's parameter now, through `/sys/module`.
    Modprobe,
    /// `sysctl.d` files.
    Sysctl,
    /// The kernel command line: an `/etc/default/grub.d/` snippet and the `grubby` line.
    Cmdline,
    /// A tuned child profile that includes the active one.
    Tuned,
    /// One Ansible playbook for every remedy, by tag, with its undo.
    Ansible,
    /// `docker update --cpuset-cpus` (or `--cpus`) on the running container, and a compose
    /// file's `cpuset` (or `cpus`) for its next start.
    Containers,
    /// The kubelet's static CPU manager and a pod spec with exclusive CPUs.
    Kubernetes,
    /// libvirt `<cputune>` for the hypervisor host, and `virsh` on a KVM host `cpulab host` watched.
    Libvirt,
    /// `taskset -p -c` per vCPU thread of a VM on this KVM host that libvirt does not run.
    Taskset,
}

impl Format {
    pub const ALL: [Format; 10] = [
        Self::Systemd,
        Self::Modprobe,
        Self::Sysctl,
        Self::Cmdline,
        Self::Tuned,
        Self::Ansible,
        Self::Containers,
        Self::Kubernetes,
        Self::Libvirt,
        Self::Taskset,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Systemd => "systemd",
            Self::Modprobe => "modprobe",
            Self::Sysctl => "sysctl",
            Self::Cmdline => "cmdline",
            Self::Tuned => "tuned",
            Self::Ansible => "ansible",
            Self::Containers => "containers",
            Self::Kubernetes => "kubernetes",
            Self::Libvirt => "libvirt",
            Self::Taskset => "taskset",
        }
    }

    /// The formats of a `--format` list (`systemd,cmdline`, or `all`); `Err` names the first
    /// unknown one with the choices.
    pub fn parse_list(list: &str) -> Result<Vec<Format>, String> {
        let mut out = Vec::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if name == "all" {
                return Ok(Self::ALL.to_vec());
            }
            let f = Self::ALL
                .into_iter()
                .find(|f| f.as_str() == name)
                .ok_or_else(|| {
                    format!(
                        "--format {name}: unknown format; choose from {} or all",
                        Self::ALL.map(Format::as_str).join(", ")
                    )
                })?;
            if !out.contains(&f) {
                out.push(f);
            }
        }
        if out.is_empty() {
            return Err("--format is empty; give one or more of the formats, or all".into());
        }
        out.sort();
        Ok(out)
    }
}

/// Why `format` cannot carry `change`, or `None` when it can.
pub fn unfit(format: Format, change: &Change, site: Site) -> Option<&'static str> {
    use Change::*;
    use Format::*;
    let host = site == Site::Host;
    match (format, change) {
        (
            Libvirt,
            HostVcpuPin {
                domain: Some(_), ..
            },
        )
        | (Taskset, HostVcpuPin { domain: None, .. }) => None,
        (Libvirt, HostVcpuPin { .. }) => Some(
            "libvirt does not run this VM (its process sits in no machine.slice): the taskset form pins its threads",
        ),
        (Taskset, HostVcpuPin { .. }) => Some(
            "libvirt runs this VM: its vCPUs are pinned through libvirt (the libvirt form), which keeps them in the domain's definition; taskset behind its back lasts until the domain restarts",
        ),
        (Taskset, _) => {
            Some("taskset pins the vCPU threads of a VM on its KVM host; this change is not one")
        }
        (_, HostVcpuPin { .. }) => Some(
            "a VM's vCPU threads are pinned on its KVM host, through libvirt or taskset: see those forms",
        ),
        (Libvirt, VcpuPin { .. }) => None,
        (_, VcpuPin { .. }) => {
            Some("a vCPU's placement is the hypervisor host's: see the libvirt form")
        }
        (Libvirt, _) => {
            Some("libvirt carries a guest's vCPU placement; this change is made inside a machine")
        }
        (Kubernetes | Containers, _) if host => {
            Some("a change for the hypervisor host, not for a container or a pod")
        }
        (Systemd, Pin { .. } | CpuWeight { .. } | CpuQuota { .. }) => None,
        (Systemd, _) => {
            Some("systemd units carry placement, weight and quota; this is a kernel setting")
        }
        (Modprobe, ModuleParam { .. }) => None,
        (Modprobe, _) => Some("modprobe.d carries module parameters only"),
        (Sysctl, Change::Sysctl { .. }) => None,
        (Sysctl, _) => Some("sysctl.d carries /proc/sys settings only"),
        (Cmdline, ModuleParam { .. } | BootOptions { .. } | Governor { .. }) => None,
        (Cmdline, _) => Some("not a kernel boot option"),
        (Tuned, _) if host => Some(
            "a change for the hypervisor host; tuned on the host can carry it, but this profile is for the machine the doctor ran on",
        ),
        (
            Tuned,
            ModuleParam { .. }
            | BootOptions { .. }
            | Change::Sysctl { .. }
            | Governor { .. }
            | IdleLatency { .. },
        ) => None,
        (Tuned, _) => {
            Some("tuned tunes the machine, not one service's placement (use the systemd form)")
        }
        (Containers, Pin { .. } | CpuQuota { .. }) | (Kubernetes, Pin { .. }) => None,
        (Kubernetes, CpuQuota { .. }) => Some(
            "a pod's quota is its limits.cpu, which the doctor cannot name: raise or remove it in the pod spec",
        ),
        (Containers | Kubernetes, _) => {
            Some("a kernel or machine setting is the node's, not a container's or a pod's")
        }
        (Ansible, _) => None,
    }
}

/// `changes` in `format`: the files and commands, or why the format does not fit.
pub fn form(
    format: Format,
    id: &str,
    changes: &[Change],
    site: Site,
    ctx: &Context,
) -> Result<Form, String> {
    let fitting: Vec<&Change> = changes
        .iter()
        .filter(|c| unfit(format, c, site).is_none())
        .collect();
    if fitting.is_empty() {
        let reason = changes
            .iter()
            .find_map(|c| unfit(format, c, site))
            .unwrap_or("nothing to write");
        return Err(reason.to_string());
    }
    let dir = format!("{id}/{}", format.as_str());
    let mut form = match format {
        Format::Systemd => super::systemd::form(&dir, &fitting, ctx),
        Format::Modprobe => super::kernel::modprobe(&dir, &fitting, ctx),
        Format::Sysctl => super::kernel::sysctl(&dir, &fitting, ctx),
        Format::Cmdline => super::kernel::cmdline(&dir, id, &fitting, ctx),
        Format::Tuned => super::tuned::form(&dir, id, &fitting, ctx),
        Format::Containers => super::containers::docker(&dir, &fitting, ctx)?,
        Format::Kubernetes => super::containers::kubernetes(&dir, &fitting, ctx)?,
        Format::Libvirt => super::libvirt::form(&dir, &fitting, ctx),
        Format::Taskset => super::taskset::form(&dir, &fitting, ctx),
        _ => {
            return Err(format!(
                "{} is not written yet by this cpulab",
                format.as_str()
            ));
        }
    };
    if site == Site::Host {
        form.notes.insert(
            0,
            "for the hypervisor host, not this guest: its administrator applies it there".into(),
        );
    }
    Ok(form)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_format_list_is_parsed_sorted_and_unknown_names_are_refused() {
        assert_eq!(
            Format::parse_list("cmdline, systemd,cmdline").unwrap(),
            [Format::Systemd, Format::Cmdline]
        );
        assert_eq!(Format::parse_list("all").unwrap().len(), 10);
        let e = Format::parse_list("systemd,helm").unwrap_err();
        assert!(
            e.starts_with("--format helm: unknown format; choose from systemd, "),
            "{e}"
        );
        assert!(Format::parse_list(" , ").is_err());
    }

    #[test]
    fn a_kubernetes_form_of_a_kernel_cost_is_skipped_with_its_reason() {
        let c = Change::BootOptions {
            options: vec!["mitigations=off".into()],
        };
        let e = form(
            Format::Kubernetes,
            "01-x",
            std::slice::from_ref(&c),
            Site::ThisMachine,
            &Context::default(),
        )
        .unwrap_err();
        assert!(
            e.contains("the node's, not a container's or a pod's"),
            "{e}"
        );
        assert!(unfit(Format::Cmdline, &c, Site::ThisMachine).is_none());
        assert!(
            unfit(
                Format::Libvirt,
                &Change::VcpuPin {
                    vcpus: 2,
                    one_node: false
                },
                Site::Host
            )
            .is_none()
        );
    }
}
