//! Frequency: how fast a CPU runs when work arrives, and how quickly it gets there.
//!
//! A CPU that was idle comes back at a low clock under `powersave` or `schedutil` and ramps up;
//! a ping-pong that leaves both CPUs half idle may never reach full speed, while a same-CPU
//! one keeps a single CPU busy and fast. This is the "OS upgrade regression" of the field
//! notes: the governor alone moved a batch job from 168 s to 159 s. Most VMs hide cpufreq
//! altogether (the host decides), and the probe says so rather than inventing a figure.

use super::reading::{Reading, Reason, read_dir_names, read_trim};
use crate::cpulist::CpuSet;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One cpufreq policy (a group of CPUs that change frequency together).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// `policyN`.
    pub name: String,
    /// CPUs in the policy (`affected_cpus`).
    pub cpus: Option<CpuSet>,
    /// `scaling_driver` (intel_pstate, acpi-cpufreq, amd-pstate).
    pub driver: Option<String>,
    /// `scaling_governor` (performance, powersave, schedutil).
    pub governor: Option<String>,
    /// Limits set by the governor or administrator, kHz.
    pub min_khz: Option<u64>,
    /// Upper limit, kHz.
    pub max_khz: Option<u64>,
    /// Hardware limits, kHz.
    pub cpuinfo_min_khz: Option<u64>,
    /// Highest hardware frequency, kHz.
    pub cpuinfo_max_khz: Option<u64>,
    /// The frequency at the moment of the probe, kHz (a snapshot, not a measurement).
    pub cur_khz: Option<u64>,
    /// `energy_performance_preference` (intel_pstate / amd-pstate active mode).
    pub energy_performance_preference: Option<String>,
}

/// The frequency section of the probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Freq {
    /// Every cpufreq policy, or why there are none (typical in VMs: not exposed).
    pub policies: Reading<Vec<Policy>>,
    /// Turbo/boost enabled: `cpufreq/boost`, or the inverse of `intel_pstate/no_turbo`.
    pub boost: Reading<bool>,
    /// `intel_pstate/status`: active, passive, off.
    pub intel_pstate: Reading<String>,
    /// `amd_pstate/status`: active, passive, guided, disable.
    pub amd_pstate: Reading<String>,
    /// `/sys/firmware/acpi/platform_profile` (low-power, balanced, performance).
    pub platform_profile: Reading<String>,
}

fn read_policy(dir: &Path, name: &str) -> Policy {
    let text = |f: &str| read_trim(&dir.join(f)).into_value();
    let num = |f: &str| text(f).and_then(|t| t.parse().ok());
    Policy {
        name: name.to_string(),
        cpus: text("affected_cpus")
            .map(|t| t.split_whitespace().collect::<Vec<_>>().join(","))
            .and_then(|t| CpuSet::parse_list(&t, true).ok()),
        driver: text("scaling_driver"),
        governor: text("scaling_governor"),
        min_khz: num("scaling_min_freq"),
        max_khz: num("scaling_max_freq"),
        cpuinfo_min_khz: num("cpuinfo_min_freq"),
        cpuinfo_max_khz: num("cpuinfo_max_freq"),
        cur_khz: num("scaling_cur_freq"),
        energy_performance_preference: text("energy_performance_preference"),
    }
}

impl Freq {
    pub fn read(root: &Path, is_vm: bool) -> Self {
        let cpu = root.join("sys/devices/system/cpu");
        let dir = cpu.join("cpufreq");
        // An absent cpufreq directory and an empty one mean the same: nothing to control.
        let names = match read_dir_names(&dir) {
            Reading::Unavailable { unavailable: u } if u.reason == Reason::Absent => {
                Reading::Value(Vec::new())
            }
            r => r,
        };
        let policies = names.and_then(|names| {
            let mut v: Vec<Policy> = names
                .iter()
                .filter(|n| n.starts_with("policy"))
                .map(|n| read_policy(&dir.join(n), n))
                .collect();
            v.sort_by_key(|p| p.name[6..].parse::<u32>().unwrap_or(u32::MAX));
            if v.is_empty() {
                let why = if is_vm {
                    "no cpufreq policies: the hypervisor does not expose frequency control"
                } else {
                    "no cpufreq policies: no cpufreq driver is loaded"
                };
                Reading::unavailable(Reason::NotExposed, format!("{why} ({})", dir.display()))
            } else {
                Reading::Value(v)
            }
        });
        let boost = match read_trim(&dir.join("boost")) {
            Reading::Value(v) => Reading::Value(v == "1"),
            absent => match read_trim(&cpu.join("intel_pstate/no_turbo")) {
                Reading::Value(v) => Reading::Value(v == "0"),
                _ => absent.map(|_| false),
            },
        };
        Self {
            policies,
            boost,
            intel_pstate: read_trim(&cpu.join("intel_pstate/status")),
            amd_pstate: read_trim(&cpu.join("amd_pstate/status")),
            platform_profile: read_trim(&root.join("sys/firmware/acpi/platform_profile")),
        }
    }

    /// True when cpufreq policies are visible.
    pub fn exposed(&self) -> bool {
        self.policies.value().is_some_and(|p| !p.is_empty())
    }

    /// The distinct governors in use.
    pub fn governors(&self) -> Vec<String> {
        let mut g: Vec<String> = self
            .policies
            .value()
            .map(|p| p.iter().filter_map(|p| p.governor.clone()).collect())
            .unwrap_or_default();
        g.sort();
        g.dedup();
        g
    }
}
