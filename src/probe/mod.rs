//! The machine fingerprint: everything that decides what placement costs, read from /sys, /proc
//! and CPUID.
//!
//! Every later measurement is explained in the terms this module establishes: the placement
//! class of a pair of CPUs, whether a wakeup crosses a hypervisor, what an idle CPU does, how
//! fast it runs, what the kernel pays on every entry, and what limits the scheduler works
//! under. The doctor reuses [`probe`] to decide which experiments to run and to name causes.
//!
//! Reading is separate from parsing: each section has pure `parse_*` functions tested on
//! literal text, and a reader that takes the root directory, so fixture trees under
//! `tests/fixtures/` stand in for machines we do not have. Nothing here fails as a whole: a
//! file that cannot be read becomes a [`Reading::Unavailable`] with its reason and the probe
//! goes on. One file per section.

pub mod cgroup;
pub mod cmdline;
pub mod counters;
pub mod cpuid;
pub mod freq;
pub mod idle;
pub mod kvm;
pub mod memory;
pub mod mitigations;
mod notable;
pub mod reading;
mod render;
pub mod sched;
pub mod topo;
pub mod virt;

pub use reading::{Reading, Reason, Unavailable};
pub use render::{figures_of_document, page, render, render_document};

use crate::machine::{Conditions, Machine};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The whole fingerprint; this struct is the JSON schema of `cpulab probe --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// The directory /sys and /proc were read under (`/` for the live machine).
    pub root: String,
    /// True when `root` is `/`: CPUID, affinity and perf counters describe this machine.
    pub live: bool,
    /// When and where the probe ran.
    pub conditions: Conditions,
    /// The facts that matter most for placement costs, most important first, in words.
    pub notable: Vec<String>,
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: Reading<String>,
    /// The kernel command line, verbatim.
    pub cmdline: Reading<String>,
    /// CPUs, caches, nodes and the placement class of every pair.
    pub topology: topo::TopologyView,
    /// Hypervisor, paravirtual features, container evidence.
    pub virt: virt::Virt,
    /// cpuidle driver, states and halt polling.
    pub idle: idle::Idle,
    /// cpufreq policies, boost, pstate drivers.
    pub freq: freq::Freq,
    /// CPU vulnerability mitigations and related boot options.
    pub mitigations: mitigations::Mitigations,
    /// Kernel, scheduler tunables, tuned, cgroup CPU limits.
    pub sched: sched::Sched,
    /// Which perf counters can be opened.
    pub counters: counters::Counters,
    /// This machine as a KVM host: the module, its halt-polling parameters, `/dev/kvm`.
    /// Absent from results written before it existed.
    #[serde(default)]
    pub kvm: kvm::KvmFacts,
}

/// The first `model name` line of /proc/cpuinfo (pure).
pub fn parse_cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim() == "model name")
        .map(|(_, v)| v.trim().to_string())
}

/// Probes `machine` (its root decides live or fixture). Never fails: what cannot be read is
/// recorded as unavailable.
pub fn probe(machine: &Machine) -> Probe {
    let root: &Path = &machine.root;
    let live = root == Path::new("/");
    let cmdline_text = reading::read_trim(&root.join("proc/cmdline"));
    let cmdline = cmdline_text
        .value()
        .map(|t| cmdline::parse_cmdline(t))
        .unwrap_or_default();
    let layout = cgroup::Layout::read(root);
    let topology = topo::TopologyView::read(machine, &layout, live);
    let virt = virt::Virt::read(root, live);
    let allowed = topology.allowed.to_vec();
    let idle = idle::Idle::read(root, &allowed, &cmdline);
    let freq = freq::Freq::read(root, virt.is_vm());
    let mitigations = mitigations::Mitigations::read(root, &cmdline);
    let sched = sched::Sched::read(root, &layout);
    let counters = counters::Counters::read(root, live);
    let kvm = kvm::KvmFacts::read_live(root, live);
    let mut conditions = Conditions::now(machine);
    if !live {
        conditions.notes.push(format!(
            "read from the fixture root {}: kernel and hostname above are the live machine's",
            root.display()
        ));
    }
    if topology.allowed.len() < machine.allowed.len() {
        conditions.notes.push(format!(
            "restricted CPU set: the cgroup cpuset allows CPUs {} of online {}",
            topology.allowed, topology.online
        ));
    }
    conditions.allowed_cpus = topology.allowed.clone();
    let cpu_model = reading::read_parsed(&root.join("proc/cpuinfo"), parse_cpu_model);
    let mut p = Probe {
        root: root.display().to_string(),
        live,
        conditions,
        notable: Vec::new(),
        cpu_model,
        cmdline: cmdline_text,
        topology,
        virt,
        idle,
        freq,
        mitigations,
        sched,
        counters,
        kvm,
    };
    p.notable = notable::notable(&p);
    p
}

impl Probe {
    /// True when any witness says this is a virtual machine.
    pub fn is_vm(&self) -> bool {
        self.virt.is_vm()
    }

    /// The guest halt-poll window in ns, where the haltpoll driver's module is loaded.
    pub fn halt_poll_ns(&self) -> Option<u64> {
        self.idle.halt_poll_ns()
    }

    /// The tightest cgroup CPU quota in CPUs, if any.
    pub fn cpu_quota_cpus(&self) -> Option<f64> {
        self.sched.cpu_quota_cpus()
    }

    /// The probe's typed figures: the settings and sizes it read that a reader of many probes
    /// follows over time. None is better or worse in itself (a setting is judged by what it
    /// does to a measurement), so each says `Neither`, and each is one reading, never tested
    /// for noise.
    pub fn figures(&self) -> Vec<crate::experiment::Figure> {
        use crate::experiment::{Direction::Neither, Figure, Unit};
        let mut out = vec![
            Figure::single(
                "online_cpus",
                "online CPUs",
                Unit::Count,
                Neither,
                self.topology.online.len() as f64,
            ),
            Figure::single(
                "allowed_cpus",
                "CPUs this process may use",
                Unit::Count,
                Neither,
                self.topology.allowed.len() as f64,
            ),
        ];
        let optional = [
            (
                "guest_halt_poll_ns",
                "guest halt-poll window",
                Unit::Nanoseconds,
                self.halt_poll_ns().map(|v| v as f64),
            ),
            (
                "cpu_quota_cpus",
                "cgroup CPU quota, in CPUs",
                Unit::CpuSecondsPerSecond,
                self.cpu_quota_cpus(),
            ),
            (
                "deepest_idle_exit_ns",
                "exit latency of the deepest enabled idle state",
                Unit::Nanoseconds,
                self.idle.deepest_latency_us().map(|us| us as f64 * 1e3),
            ),
        ];
        for (name, label, unit, v) in optional {
            if let Some(v) = v {
                out.push(Figure::single(name, label, unit, Neither, v));
            }
        }
        out
    }

    /// The kernel version of the probed machine (falls back to the live kernel).
    pub fn kernel(&self) -> &str {
        self.sched
            .kernel
            .value()
            .map_or(self.conditions.kernel.as_str(), |s| s.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_model_is_the_first_model_name() {
        let text = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel\t\t: 1\nmodel name\t: AMD Opteron(tm) Processor 6376\n\nprocessor\t: 1\nmodel name\t: other\n";
        assert_eq!(
            parse_cpu_model(text).as_deref(),
            Some("AMD Opteron(tm) Processor 6376")
        );
        assert_eq!(parse_cpu_model("processor : 0\n"), None);
    }
}
