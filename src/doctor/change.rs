//! What a remedy changes, as data: the form `cpulab remedy` turns into the files a fleet
//! deploys (systemd drop-ins, `modprobe.d`, the kernel command line, tuned, Ansible, container
//! and Kubernetes settings, libvirt).
//!
//! A remedy's `command` is words for a person; its changes are what a generator reads, so no
//! generator ever parses a sentence. A rule fills them in with the values it knows (the CPUs it
//! measured on, the watched application's pids, units and cgroups), and leaves a name empty,
//! with the reason in [`Workload::unnamed`], where only the user knows it: a generator then
//! writes a placeholder with that reason, never a guessed unit.
//!
//! Saved results written before the field existed have no changes recorded (`None` on the
//! remedy): `cpulab remedy` says so and asks for a new doctor run rather than guess.

use serde::{Deserialize, Serialize};

/// The processes a placement change applies to, as the doctor saw them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// The watched processes' pids (`doctor --pid/--comm`); empty when none was watched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pids: Vec<i32>,
    /// Their systemd units (`postgresql@15-main.service`), read from their cgroups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<String>,
    /// Their cgroups below the root, as `/proc/PID/cgroup` names them (`/system.slice/x.service`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroups: Vec<String>,
    /// Why no unit is named, when none is (no process was watched; the process runs in no
    /// systemd unit). A generator writes a placeholder with this reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unnamed: Option<String>,
}

impl Workload {
    /// The watched application was not known: the user names it.
    pub fn unknown() -> Self {
        Self {
            unnamed: Some(
                "no application was watched; run `cpulab doctor --comm NAME` (or --pid) so the \
                 doctor reads its unit from its cgroup"
                    .into(),
            ),
            ..Self::default()
        }
    }
}

/// One change a remedy makes, in terms every deployment format can express.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Change {
    /// Run the workload on `cpus` only: its processes' affinity, its units' `CPUAffinity=` or
    /// `AllowedCPUs=`, its cgroups' cpuset, a container's `--cpuset-cpus`.
    Pin { cpus: String, workload: Workload },
    /// The CPU weight of the *other* work (`CPUWeight=`), so the workload wins the CPU.
    CpuWeight { weight: u32, workload: Workload },
    /// The workload's CPU quota in percent of one CPU (`CPUQuota=`, `cpu.max`).
    CpuQuota { percent: u32, workload: Workload },
    /// A kernel module's parameter: now through `/sys/module/MODULE/parameters/PARAM`, kept by
    /// `modprobe.d` for a loadable module and by the kernel command line
    /// (`MODULE.PARAM=VALUE`) for a built-in one.
    ModuleParam {
        module: String,
        param: String,
        value: String,
    },
    /// Options on the kernel command line (`idle=poll`, `cpuidle_haltpoll.force=1`): in effect
    /// after the next boot only.
    BootOptions { options: Vec<String> },
    /// A sysctl (`kernel.sched_autogroup_enabled`), under `/proc/sys`.
    Sysctl { key: String, value: String },
    /// The cpufreq governor of every CPU.
    Governor { governor: String },
    /// Idle states above this exit latency off (PM QoS; `cpupower idle-set -D`).
    IdleLatency { max_us: u32 },
    /// On the hypervisor host: each of the guest's `vcpus` vCPUs on a physical CPU of its own
    /// (libvirt `<vcpupin>`, `<emulatorpin>`). The host's CPU numbers are the host's to choose.
    /// With `one_node`, those CPUs and the guest's memory are all of one host NUMA node
    /// (libvirt `<numatune>`): for a finding that points at the guest's socket or node layout.
    VcpuPin {
        vcpus: u32,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        one_node: bool,
    },
    /// On this KVM host (a `cpulab host` finding): each vCPU thread of the VM `vm` (process
    /// `pid`) on the host CPU `cpulab host` chose for it, and its emulator threads on
    /// `emulator`. With `domain`, libvirt runs the VM and the pins go through `virsh` (live and
    /// in its definition); without, through `taskset` on the running threads.
    HostVcpuPin {
        vm: String,
        pid: i32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        domain: Option<String>,
        pins: Vec<crate::host::watch::findings::Pin>,
        emulator: String,
    },
}

impl Change {
    /// A short name for lists and file names (`pin`, `module-param`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Pin { .. } => "pin",
            Self::CpuWeight { .. } => "cpu-weight",
            Self::CpuQuota { .. } => "cpu-quota",
            Self::ModuleParam { .. } => "module-param",
            Self::BootOptions { .. } => "boot-options",
            Self::Sysctl { .. } => "sysctl",
            Self::Governor { .. } => "governor",
            Self::IdleLatency { .. } => "idle-latency",
            Self::VcpuPin { .. } => "vcpu-pin",
            Self::HostVcpuPin { .. } => "host-vcpu-pin",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_reads_back_with_its_kind_tag() {
        let c = Change::ModuleParam {
            module: "haltpoll".into(),
            param: "guest_halt_poll_ns".into(),
            value: "200000".into(),
        };
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["kind"], "module-param");
        assert_eq!(serde_json::from_value::<Change>(v).unwrap(), c);
        let p = Change::Pin {
            cpus: "0".into(),
            workload: Workload::unknown(),
        };
        let v = serde_json::to_value(&p).unwrap();
        assert!(v["workload"].get("pids").is_none());
        assert!(
            v["workload"]["unnamed"]
                .as_str()
                .unwrap()
                .contains("--comm")
        );
        assert_eq!(serde_json::from_value::<Change>(v).unwrap(), p);
    }
}
