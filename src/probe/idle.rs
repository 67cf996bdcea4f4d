//! Idle: what a CPU does when it has nothing to run, which is what a wakeup has to undo.
//!
//! A wakeup sent to a busy or polling CPU is cheap; one sent to a halted CPU pays the exit
//! latency of its idle state, and inside a VM a halt is a VM exit and the wakeup an IPI through
//! the hypervisor. So the idle driver and governor, each state's exit latency and target
//! residency, and the halt-polling knobs explain most of the gap between a same-CPU and a
//! cross-CPU round trip. `guest_halt_poll_ns` is the guest's poll window before it halts (0:
//! halt at once); the host's `kvm.halt_poll_ns` is how long the host polls a halted vCPU before
//! descheduling it. The latter is read only where a kvm module is loaded, which in a guest
//! means it governs *nested* guests, not this one.

use super::cmdline::Cmdline;
use super::reading::{Reading, read_dir_names, read_trim};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// One cpuidle state of one CPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdleState {
    /// `stateN` directory index: 0 is the shallowest.
    pub index: u32,
    /// State name (`POLL`, `C1`, `haltpoll idle`).
    pub name: String,
    /// The driver's description.
    pub desc: String,
    /// Exit latency in microseconds.
    pub latency_us: Option<u64>,
    /// Target residency in microseconds: the governor picks a state only for idle periods
    /// expected to last at least this long.
    pub residency_us: Option<u64>,
    /// Disabled by the administrator (`disable` = 1).
    pub disabled: bool,
}

/// The idle section of the probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Idle {
    /// cpuidle driver (`intel_idle`, `acpi_idle`, `haltpoll`, `none`).
    pub driver: Reading<String>,
    /// cpuidle governor (`menu`, `teo`, `ladder`, `haltpoll`).
    pub governor: Reading<String>,
    /// The CPU whose states are listed (the first allowed one).
    pub states_cpu: u32,
    /// Every idle state of `states_cpu`, shallowest first.
    pub states: Reading<Vec<IdleState>>,
    /// States that other allowed CPUs have disabled differently from `states_cpu`.
    pub per_cpu_differences: Vec<String>,
    /// `/sys/module/haltpoll/parameters/*`: the guest halt-polling window and its growth.
    pub haltpoll: Reading<BTreeMap<String, String>>,
    /// Why those parameters act on nothing here (see [`haltpoll_inert`]); absent when they act
    /// or there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub haltpoll_inert: Option<String>,
    /// `/sys/module/cpuidle_haltpoll/parameters/*` (e.g. `force`).
    pub cpuidle_haltpoll: Reading<BTreeMap<String, String>>,
    /// `/sys/module/kvm/parameters/halt_poll_ns*`: host-side polling for guests this kernel runs.
    pub kvm_host_halt_poll: Reading<BTreeMap<String, String>>,
    /// Idle-related boot options: `idle=`, `cpuidle.*`, `haltpoll.*`, `intel_idle.max_cstate`...
    pub cmdline: BTreeMap<String, String>,
}

/// Reads every file of a module's parameter directory whose name passes `keep`.
fn module_params(dir: &Path, keep: impl Fn(&str) -> bool) -> Reading<BTreeMap<String, String>> {
    read_dir_names(dir).map(|names| {
        names
            .into_iter()
            .filter(|n| keep(n))
            .filter_map(|n| Some((n.clone(), read_trim(&dir.join(&n)).into_value()?)))
            .collect()
    })
}

fn read_states(cpu_dir: &Path) -> Reading<Vec<IdleState>> {
    let dir = cpu_dir.join("cpuidle");
    read_dir_names(&dir).map(|names| {
        let mut v: Vec<IdleState> = names
            .iter()
            .filter_map(|n| {
                let index = n.strip_prefix("state")?.parse().ok()?;
                let d = dir.join(n);
                let text = |f: &str| read_trim(&d.join(f)).into_value();
                let num = |f: &str| text(f).and_then(|t| t.parse().ok());
                Some(IdleState {
                    index,
                    name: text("name").unwrap_or_default(),
                    desc: text("desc").unwrap_or_default(),
                    latency_us: num("latency"),
                    residency_us: num("residency"),
                    disabled: num("disable").is_some_and(|d: u64| d != 0),
                })
            })
            .collect();
        v.sort_by_key(|s| s.index);
        v
    })
}

/// Why the haltpoll governor's parameters (`guest_halt_poll_ns` and the rest) act on nothing
/// under `root`: the haltpoll cpuidle driver is not the one in use (it starts only where the
/// host asks for it, or with `force`), so idle never polls whatever they say. `None` when it
/// is in use.
pub fn haltpoll_inert(root: &Path) -> Option<String> {
    let driver = read_trim(&root.join("sys/devices/system/cpu/cpuidle/current_driver"))
        .into_value()
        .unwrap_or_else(|| "none".into());
    if driver == "haltpoll" {
        return None;
    }
    // A loadable module has an `initstate`; one built into the kernel does not, and cannot be
    // started after boot.
    let module = root.join("sys/module/cpuidle_haltpoll");
    let how = if module.is_dir() && !module.join("initstate").exists() {
        "it is built into this kernel, so only booting with cpuidle_haltpoll.force=1 starts it"
    } else {
        "boot with cpuidle_haltpoll.force=1, or where it is a module, \
         `modprobe cpuidle-haltpoll force=1`"
    };
    Some(format!(
        "the haltpoll cpuidle driver is not in use (current driver: {driver}), so idle never \
         polls whatever this says; {how}"
    ))
}

impl Idle {
    pub fn read(root: &Path, allowed: &[u32], cmdline: &Cmdline) -> Self {
        let cpu = root.join("sys/devices/system/cpu");
        let ci = cpu.join("cpuidle");
        let governor = match read_trim(&ci.join("current_governor")) {
            Reading::Value(v) => Reading::Value(v),
            _ => read_trim(&ci.join("current_governor_ro")),
        };
        let states_cpu = allowed.first().copied().unwrap_or(0);
        let states = read_states(&cpu.join(format!("cpu{states_cpu}")));
        let mut per_cpu_differences = Vec::new();
        if let Some(base) = states.value() {
            for &c in allowed.iter().skip(1) {
                let Some(other) = read_states(&cpu.join(format!("cpu{c}"))).into_value() else {
                    continue;
                };
                for (a, b) in base.iter().zip(&other) {
                    if a.disabled != b.disabled {
                        per_cpu_differences.push(format!(
                            "cpu{c} has {} {}",
                            b.name,
                            if b.disabled { "disabled" } else { "enabled" }
                        ));
                    }
                }
            }
        }
        let module = |m: &str| root.join("sys/module").join(m).join("parameters");
        let haltpoll = module_params(&module("haltpoll"), |_| true);
        Self {
            haltpoll_inert: haltpoll.is_value().then(|| haltpoll_inert(root)).flatten(),
            driver: read_trim(&ci.join("current_driver")),
            governor,
            states_cpu,
            states,
            per_cpu_differences,
            haltpoll,
            cpuidle_haltpoll: module_params(&module("cpuidle_haltpoll"), |_| true),
            kvm_host_halt_poll: module_params(&module("kvm"), |n| n.starts_with("halt_poll_ns")),
            cmdline: cmdline.select(
                &[
                    "idle",
                    "intel_idle.max_cstate",
                    "processor.max_cstate",
                    "intel_idle.states_off",
                ],
                &["cpuidle.", "cpuidle_haltpoll.", "haltpoll.", "idle_"],
            ),
        }
    }

    /// The guest's halt-poll window in ns (`guest_halt_poll_ns`), when the haltpoll module is
    /// loaded. `Some(0)` means every idle vCPU halts at once.
    pub fn halt_poll_ns(&self) -> Option<u64> {
        self.haltpoll
            .value()?
            .get("guest_halt_poll_ns")?
            .parse()
            .ok()
    }

    /// The host-side `kvm.halt_poll_ns`, where a kvm module is loaded in this kernel.
    pub fn kvm_host_halt_poll_ns(&self) -> Option<u64> {
        self.kvm_host_halt_poll
            .value()?
            .get("halt_poll_ns")?
            .parse()
            .ok()
    }

    /// True when the haltpoll cpuidle driver is in use.
    pub fn is_haltpoll(&self) -> bool {
        self.driver.value().is_some_and(|d| d == "haltpoll")
    }

    /// The deepest enabled state's exit latency, in microseconds.
    pub fn deepest_latency_us(&self) -> Option<u64> {
        self.states
            .value()?
            .iter()
            .filter(|s| !s.disabled)
            .filter_map(|s| s.latency_us)
            .max()
    }
}
