//! Scenario files: a host, its hypervisor and costs, and configurations of VMs to compare.
//!
//! A "what if" is a list of configurations that differ in one thing ("1 vCPU instead of 4",
//! "the neighbour busy on 4 vCPUs", "halt polling on", "8-8 instead of 0-16"), so a scenario
//! names the host once and each `[[config]]` says what it changes: its own hypervisor, its own
//! cost overrides (merged over the scenario's), and its VMs. The built-in scenarios of
//! [`super::builtin`] are values of these same types, so `cpulab sim builtin NAME --toml` prints
//! a file a user can edit and run. Everything is checked here, once: the engine below trusts it.

use super::host::{Host, HostShape, mask_of};
use super::hypervisor::HvKind;
use super::params::Costs;
use super::workload::WorkloadSpec;
use crate::error::bad_input;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A scenario file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Simulated time per configuration, milliseconds.
    #[serde(default = "default_duration_ms")]
    pub duration_ms: f64,
    pub hypervisor: HvKind,
    pub host: HostShape,
    /// Cost overrides for every configuration (fields of [`Costs`]).
    #[serde(default)]
    pub params: toml::Table,
    #[serde(rename = "config")]
    pub configs: Vec<ConfigSpec>,
}

fn default_duration_ms() -> f64 {
    2000.0
}

/// The longest simulated time per configuration: 1000 s, far beyond any field-notes run.
pub const MAX_DURATION_MS: f64 = 1e6;

/// vCPUs of one configuration, all VMs together.
pub const MAX_VCPUS: u64 = 256;

/// One configuration to simulate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hypervisor: Option<HvKind>,
    /// Cost overrides for this configuration only.
    #[serde(default, skip_serializing_if = "toml::Table::is_empty")]
    pub params: toml::Table,
    pub vm: Vec<VmSpec>,
}

/// One VM.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmSpec {
    pub name: String,
    pub vcpus: u32,
    /// Physical CPUs its vCPUs may run on (taskset syntax); all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcpus: Option<String>,
    #[serde(default)]
    pub workload: Vec<WorkloadSpec>,
}

/// A configuration checked and ready to simulate.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub name: String,
    pub host: Host,
    pub hypervisor: HvKind,
    pub costs: Costs,
    /// Each VM with the mask of physical CPUs it may use.
    pub vms: Vec<(VmSpec, u64)>,
}

/// Reads and parses a scenario file; any problem is one line and exit 2.
pub fn load(path: &Path) -> Result<Scenario> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad_input(format!("cannot read scenario {}: {e}", path.display())))?;
    parse(&text, &path.display().to_string())
}

/// Parses scenario text; `name` names it in messages.
pub fn parse(text: &str, name: &str) -> Result<Scenario> {
    toml::from_str(text).map_err(|e| {
        let msg = e.message().trim().replace('\n', " ");
        let at = e
            .span()
            .map(|s| {
                let line = text[..s.start.min(text.len())].lines().count().max(1);
                format!(" (line {line})")
            })
            .unwrap_or_default();
        bad_input(format!(
            "scenario {name}: {msg}{at}; see `cpulab sim builtin c-fair-share --toml` for the format"
        ))
    })
}

/// The costs of `base` with a table of overrides merged in.
pub fn merge_costs(base: &Costs, over: &toml::Table, what: &str) -> Result<Costs> {
    if over.is_empty() {
        return Ok(base.clone());
    }
    let mut table = toml::Table::try_from(base)
        .map_err(|e| bad_input(format!("{what}: cannot merge parameters: {e}")))?;
    for (k, v) in over {
        let v = match v {
            toml::Value::Integer(i) => toml::Value::Float(*i as f64),
            other => other.clone(),
        };
        table.insert(k.clone(), v);
    }
    let c: Costs = toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| {
            bad_input(format!(
                "{what}: {}; parameters are the fields of `cpulab sim list --params`",
                e.message().trim().replace('\n', " ")
            ))
        })?;
    c.check()?;
    Ok(c)
}

impl Scenario {
    /// Checks everything and resolves each configuration, starting from `base` costs (the
    /// defaults, or a calibration) with the scenario's and the configuration's overrides.
    pub fn resolve(&self, base: &Costs) -> Result<Vec<Resolved>> {
        super::params::in_range(
            &format!("scenario {}: duration_ms", self.name),
            self.duration_ms,
            1.0..=MAX_DURATION_MS,
            "1 to 1000000 milliseconds (1 ms to 1000 s simulated)",
        )?;
        if self.configs.is_empty() {
            return Err(bad_input(format!(
                "scenario {} has no [[config]]; add at least one",
                self.name
            )));
        }
        let host = Host::new(&self.host)?;
        let costs = merge_costs(base, &self.params, &format!("scenario {}", self.name))?;
        let mut out = Vec::new();
        for c in &self.configs {
            let what = format!("config {:?}", c.name);
            let costs = merge_costs(&costs, &c.params, &what)?;
            let mut vms = Vec::new();
            // Summed wide: a VM of 4294967295 vCPUs beside another must not overflow.
            let total: u64 = c.vm.iter().map(|v| u64::from(v.vcpus)).sum();
            if total > MAX_VCPUS {
                return Err(bad_input(format!(
                    "{what}: {total} vCPUs in all; give at most {MAX_VCPUS}"
                )));
            }
            for vm in &c.vm {
                if vm.vcpus == 0 {
                    return Err(bad_input(format!(
                        "{what}: VM {} has vcpus = 0; give 1 to {MAX_VCPUS}",
                        vm.name
                    )));
                }
                let mask = match &vm.pcpus {
                    Some(list) => {
                        mask_of(list, host.len(), &format!("{what}, VM {} pcpus", vm.name))?
                    }
                    None => host.all_mask(),
                };
                for w in &vm.workload {
                    w.check(vm.vcpus, &vm.name, self.duration_ms)?;
                }
                vms.push((vm.clone(), mask));
            }
            out.push(Resolved {
                name: c.name.clone(),
                host: host.clone(),
                hypervisor: c.hypervisor.unwrap_or(self.hypervisor),
                costs,
                vms,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"
name = "what if"
hypervisor = "kvm"
[host]
packages = 1
modules_per_package = 2
[params]
guest_poll_ns = 100000
[[config]]
name = "pair"
params = { ipi_ns = 1 }
[[config.vm]]
name = "db"
vcpus = 2
[[config.vm.workload]]
kind = "pair"
client_us = 5
server_us = 10
server_vcpu = 0
"#;

    #[test]
    fn a_file_resolves_with_merged_costs() {
        let s = parse(TEXT, "t.toml").unwrap();
        let r = s.resolve(&Costs::default()).unwrap();
        assert_eq!(r[0].costs.guest_poll_ns, 100_000.0);
        assert_eq!(r[0].costs.ipi_ns, 1.0);
        assert_eq!(r[0].costs.halt_exit_ns, Costs::default().halt_exit_ns);
        assert_eq!(r[0].vms[0].1, 0b11);
    }

    #[test]
    fn bad_files_are_one_line_of_bad_input() {
        for (text, want) in [
            ("name = 1", "invalid type"),
            (
                &TEXT.replace("server_vcpu = 0", "server_vcpu = 7"),
                "vCPUs 0-1",
            ),
            (&TEXT.replace("ipi_ns = 1", "ipi = 1"), "unknown field"),
            (&TEXT.replace("kvm", "vmware"), "unknown variant"),
            (
                &TEXT.replace("modules_per_package = 2", "modules_per_package = 99"),
                "give 1 to 64",
            ),
            (
                &TEXT.replace("packages = 1", "packages = 4294967295"),
                "host packages = 4294967295 is out of range; give 1 to 64",
            ),
            (
                &TEXT.replace("guest_poll_ns = 100000", "guest_poll_ns = 1e300"),
                "guest_poll_ns = 1e300 is out of range; give 0 to 1e9 nanoseconds",
            ),
            (
                &TEXT.replace(
                    "hypervisor = \"kvm\"",
                    "hypervisor = \"kvm\"\nduration_ms = 1e-300",
                ),
                "duration_ms = 1e-300 is out of range; give 1 to 1000000 milliseconds",
            ),
            (
                &TEXT.replace("vcpus = 2", "vcpus = 4294967295"),
                "4294967295 vCPUs in all; give at most 256",
            ),
            (
                &format!("{TEXT}[[config.vm]]\nname = \"big\"\nvcpus = 4294967295\n"),
                "4294967297 vCPUs in all; give at most 256",
            ),
        ] {
            let e = parse(text, "t.toml").and_then(|s| s.resolve(&Costs::default()));
            let e = e.unwrap_err();
            let m = format!("{e:#}");
            assert_eq!(crate::error::exit_code(&e), 2, "{m}");
            assert!(m.contains(want), "{m}");
            assert!(!m.contains('\n'), "{m}");
        }
    }

    #[test]
    fn scenarios_round_trip_through_toml() {
        let s = parse(TEXT, "t.toml").unwrap();
        let text = toml::to_string(&s).unwrap();
        assert_eq!(parse(&text, "again").unwrap(), s);
    }
}
