//! Mitigations: what the kernel does on every entry and exit to defend against CPU flaws, and
//! the boot options that change it or take CPUs away from the scheduler.
//!
//! Page-table isolation, retpolines, buffer clearing and IBPB make system calls, context
//! switches and VM exits dearer, so they scale exactly the costs cpulab measures (the field
//! notes' CentOS 6 to 7 regression was mostly this). `nosmt`, `isolcpus` and `nohz_full` change
//! which CPUs exist for the scheduler. Each entry of `/sys/devices/system/cpu/vulnerabilities`
//! is kept verbatim and classified by its first word.

use super::cmdline::Cmdline;
use super::reading::{Reading, read_dir_names, read_trim};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The state one vulnerability file reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VulnState {
    /// `Mitigation: ...`: the kernel pays a cost to defend.
    Mitigated,
    /// `Vulnerable...`: affected and not (fully) defended.
    Vulnerable,
    /// `Not affected`.
    NotAffected,
    /// Anything else (e.g. `Unknown: ...`).
    Unknown,
}

/// One entry of the vulnerabilities directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vulnerability {
    /// Classified from the first word of `text`.
    pub state: VulnState,
    /// The kernel's text, verbatim.
    pub text: String,
}

/// Classifies a vulnerability line by its first word (pure).
pub fn parse_vulnerability(text: &str) -> Vulnerability {
    let t = text.trim();
    let state = if t.starts_with("Mitigation") {
        VulnState::Mitigated
    } else if t.starts_with("Vulnerable") {
        VulnState::Vulnerable
    } else if t.starts_with("Not affected") {
        VulnState::NotAffected
    } else {
        VulnState::Unknown
    };
    Vulnerability {
        state,
        text: t.to_string(),
    }
}

/// The mitigations section of the probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mitigations {
    /// Every entry of `/sys/devices/system/cpu/vulnerabilities`, by file name.
    pub vulnerabilities: Reading<BTreeMap<String, Vulnerability>>,
    /// Boot options about mitigations, SMT and CPU isolation (`mitigations=`, `pti=`, `nosmt`,
    /// `isolcpus=`, `nohz_full=`, `spectre_v2=`, ...), as given.
    pub cmdline: BTreeMap<String, String>,
}

/// Boot options that switch a mitigation on or off (a subset of [`NAMES`]).
const MITIGATION_OPTIONS: &[&str] = &[
    "mitigations",
    "pti",
    "nopti",
    "spectre_v2",
    "spectre_v2_user",
    "spectre_bhi",
    "nospectre_v1",
    "nospectre_v2",
    "spec_store_bypass_disable",
    "nospec_store_bypass_disable",
    "spec_rstack_overflow",
    "retbleed",
    "mds",
    "tsx_async_abort",
    "l1tf",
    "srbds",
    "mmio_stale_data",
    "gather_data_sampling",
    "reg_file_data_sampling",
];

/// Boot option names the mitigations section records.
const NAMES: &[&str] = &[
    "mitigations",
    "nosmt",
    "pti",
    "nopti",
    "nospectre_v1",
    "nospectre_v2",
    "spectre_v2",
    "spectre_v2_user",
    "spectre_bhi",
    "spec_store_bypass_disable",
    "nospec_store_bypass_disable",
    "spec_rstack_overflow",
    "retbleed",
    "mds",
    "tsx_async_abort",
    "mmio_stale_data",
    "l1tf",
    "srbds",
    "gather_data_sampling",
    "reg_file_data_sampling",
    "kvm.nx_huge_pages",
    "isolcpus",
    "nohz_full",
    "nohz",
    "rcu_nocbs",
    "irqaffinity",
    "maxcpus",
    "nr_cpus",
];

impl Mitigations {
    pub fn read(root: &Path, cmdline: &Cmdline) -> Self {
        let dir = root.join("sys/devices/system/cpu/vulnerabilities");
        let vulnerabilities = read_dir_names(&dir).map(|names| {
            names
                .into_iter()
                .filter_map(|n| {
                    let v = read_trim(&dir.join(&n)).into_value()?;
                    Some((n, parse_vulnerability(&v)))
                })
                .collect()
        });
        Self {
            vulnerabilities,
            cmdline: cmdline.select(NAMES, &[]),
        }
    }

    fn with_state(&self, state: VulnState) -> Vec<(String, String)> {
        self.vulnerabilities
            .value()
            .map(|m| {
                m.iter()
                    .filter(|(_, v)| v.state == state)
                    .map(|(k, v)| (k.clone(), v.text.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Vulnerabilities the kernel actively mitigates (each costs something), name and text.
    pub fn active(&self) -> Vec<(String, String)> {
        self.with_state(VulnState::Mitigated)
    }

    /// Vulnerabilities left open.
    pub fn vulnerable(&self) -> Vec<(String, String)> {
        self.with_state(VulnState::Vulnerable)
    }

    /// The boot options that switch mitigations, as written (`pti=off`, `nopti`), by name.
    pub fn mitigation_options(&self) -> Vec<String> {
        self.cmdline
            .iter()
            .filter(|(k, _)| MITIGATION_OPTIONS.contains(&k.as_str()))
            .map(|(k, v)| match v.as_str() {
                "" => k.clone(),
                v => format!("{k}={v}"),
            })
            .collect()
    }

    /// e.g. "3 mitigated, 4 vulnerable, 12 not affected" (and ", 1 other" when some entry is
    /// neither); `None` when the vulnerabilities directory could not be read.
    pub fn summary(&self) -> Option<String> {
        let v = self.vulnerabilities.value()?;
        let n = |s: VulnState| v.values().filter(|x| x.state == s).count();
        let mut out = format!(
            "{} mitigated, {} vulnerable, {} not affected",
            n(VulnState::Mitigated),
            n(VulnState::Vulnerable),
            n(VulnState::NotAffected)
        );
        if n(VulnState::Unknown) > 0 {
            out.push_str(&format!(", {} other", n(VulnState::Unknown)));
        }
        Some(out)
    }

    /// The `mitigations=` boot option, if given (`off`, `auto`, `auto,nosmt`).
    pub fn mode(&self) -> Option<&str> {
        self.cmdline.get("mitigations").map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_by_first_word() {
        let m = parse_vulnerability("Mitigation: Retpolines; STIBP: disabled; RSB filling\n");
        assert_eq!(m.state, VulnState::Mitigated);
        assert_eq!(
            parse_vulnerability("Vulnerable: Clear CPU buffers attempted, no microcode").state,
            VulnState::Vulnerable
        );
        assert_eq!(
            parse_vulnerability("Not affected").state,
            VulnState::NotAffected
        );
        assert_eq!(
            parse_vulnerability("Unknown: no mitigations").state,
            VulnState::Unknown
        );
    }

    #[test]
    fn summary_and_mitigation_options() {
        let m = Mitigations {
            vulnerabilities: Reading::Value(BTreeMap::from([
                ("meltdown".into(), parse_vulnerability("Not affected")),
                (
                    "spectre_v2".into(),
                    parse_vulnerability("Mitigation: Retpolines; STIBP: disabled"),
                ),
                ("retbleed".into(), parse_vulnerability("Vulnerable")),
            ])),
            cmdline: super::super::cmdline::parse_cmdline(
                "mitigations=auto,no_guest_host console=ttyS0 nopti isolcpus=1 -- mds=off",
            )
            .select(NAMES, &[]),
        };
        assert_eq!(
            m.summary().as_deref(),
            Some("1 mitigated, 1 vulnerable, 1 not affected")
        );
        assert_eq!(
            m.mitigation_options(),
            vec!["mitigations=auto,no_guest_host", "nopti"],
            "isolcpus is no mitigation, and mds=off belongs to init"
        );
    }
}
