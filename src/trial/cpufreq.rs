//! cpufreq policies: governor, energy-performance preference, min and max frequency, written to
//! every policy (`cpufreq.governor=performance`) or the policies of the CPUs after `@`.
//! Frequency is the host's business inside most VMs: there these say so and are not tried.

use super::ops::{Op, read_file_value};
use super::setting::{Availability, Cost, Permanent, Roots, Setting, Subject};
use super::values::{online, split_cpus};
use crate::cpulist::CpuSet;
use crate::error::bad_input;
use anyhow::Result;
use std::path::PathBuf;

pub struct PolicyKnob {
    roots: Roots,
    what: &'static str,
    file: &'static str,
}

const GOVERNORS: &[&str] = &[
    "performance",
    "powersave",
    "schedutil",
    "ondemand",
    "conservative",
    "userspace",
];

impl PolicyKnob {
    pub fn new(roots: &Roots, what: &str) -> Option<Self> {
        let (what, file) = match what {
            "governor" => ("governor", "scaling_governor"),
            "epp" => ("epp", "energy_performance_preference"),
            "min_khz" => ("min_khz", "scaling_min_freq"),
            "max_khz" => ("max_khz", "scaling_max_freq"),
            _ => return None,
        };
        Some(Self {
            roots: roots.clone(),
            what,
            file,
        })
    }

    /// Policy directories covering `cpus`.
    fn policies(&self, cpus: &CpuSet) -> Vec<PathBuf> {
        let base = self.roots.path("sys/devices/system/cpu/cpufreq");
        let mut out: Vec<PathBuf> = std::fs::read_dir(&base)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("policy"))
            })
            .filter(|p| {
                read_file_value(&p.join("affected_cpus"))
                    .ok()
                    .and_then(|t| CpuSet::parse_list(&t.replace(' ', ","), false).ok())
                    .is_some_and(|c| !c.intersection(cpus).is_empty())
            })
            .collect();
        out.sort();
        out
    }

    fn offered(&self, policy: &std::path::Path) -> Option<Vec<String>> {
        let f = match self.what {
            "governor" => "scaling_available_governors",
            "epp" => "energy_performance_available_preferences",
            _ => return None,
        };
        read_file_value(&policy.join(f))
            .ok()
            .map(|t| t.split_whitespace().map(String::from).collect())
    }
}

impl Setting for PolicyKnob {
    fn name(&self) -> String {
        format!("cpufreq.{}", self.what)
    }
    fn about(&self) -> String {
        match self.what {
            "governor" => "cpufreq governor of every policy [@CPUS]",
            "epp" => "energy_performance_preference of every policy [@CPUS]",
            "min_khz" => "lowest frequency the governor may pick, kHz [@CPUS]",
            _ => "highest frequency the governor may pick, kHz [@CPUS]",
        }
        .into()
    }
    fn current(&self) -> Result<String> {
        let mut vals: Vec<String> = self
            .policies(&online(&self.roots))
            .iter()
            .filter_map(|p| read_file_value(&p.join(self.file)).ok())
            .collect();
        vals.dedup();
        if vals.is_empty() {
            anyhow::bail!("not exposed");
        }
        Ok(vals.join(" / "))
    }
    fn availability(&self) -> Availability {
        let pols = self.policies(&online(&self.roots));
        if pols.is_empty() {
            return Availability::NotHere(
                "no cpufreq policies (cpufreq is not exposed here; inside a VM the host controls frequency)".into(),
            );
        }
        if !pols[0].join(self.file).exists() {
            return Availability::NotHere(format!("the cpufreq driver has no {}", self.file));
        }
        Availability::Changeable
    }
    fn validate(&self, value: &str) -> Result<String> {
        let (v, cpus) = split_cpus(value, &online(&self.roots))?;
        let pols = self.policies(&cpus);
        let Some(first) = pols.first() else {
            return Err(bad_input(format!(
                "{}: no cpufreq policy covers those CPUs",
                self.name()
            )));
        };
        match self.what {
            "governor" | "epp" => {
                let offered = self.offered(first).unwrap_or_else(|| {
                    if self.what == "governor" {
                        GOVERNORS.iter().map(|s| s.to_string()).collect()
                    } else {
                        [
                            "default",
                            "performance",
                            "balance_performance",
                            "balance_power",
                            "power",
                        ]
                        .map(String::from)
                        .to_vec()
                    }
                });
                if !offered.iter().any(|o| o == &v) {
                    return Err(bad_input(format!(
                        "{}={v}: this machine does not offer it; choose one of {}",
                        self.name(),
                        offered.join(", ")
                    )));
                }
            }
            _ => {
                let khz: u64 = v.parse().map_err(|_| {
                    bad_input(format!("{}={v}: not a whole number of kHz", self.name()))
                })?;
                let lim = |f: &str| {
                    read_file_value(&first.join(f))
                        .ok()
                        .and_then(|t| t.parse::<u64>().ok())
                };
                if let (Some(lo), Some(hi)) = (lim("cpuinfo_min_freq"), lim("cpuinfo_max_freq"))
                    && (khz < lo || khz > hi)
                {
                    return Err(bad_input(format!(
                        "{}={v}: out of range; this CPU runs {lo} to {hi} kHz",
                        self.name()
                    )));
                }
            }
        }
        Ok(value.to_string())
    }
    fn plan(&self, value: &str) -> Result<Vec<Op>> {
        let (v, cpus) = split_cpus(value, &online(&self.roots))?;
        Ok(self
            .policies(&cpus)
            .into_iter()
            .map(|p| Op::file(p.join(self.file), v.clone()))
            .collect())
    }
    fn cost(&self) -> Cost {
        Cost::Unmeasured
    }
    fn subject(&self) -> Subject {
        Subject::Frequency
    }
    fn permanent(&self, value: &str) -> Permanent {
        let (v, _) =
            split_cpus(value, &online(&self.roots)).unwrap_or((value.into(), CpuSet::new()));
        match self.what {
            "governor" | "epp" => {
                let key = if self.what == "governor" {
                    "governor"
                } else {
                    "energy_performance_preference"
                };
                Permanent {
                    form: "tuned profile".into(),
                    file: Some("/etc/tuned/cpulab/tuned.conf".into()),
                    text: format!("[main]\ninclude=throughput-performance\n\n[cpu]\n{key}={v}\n"),
                }
            }
            _ => super::values::unit(&self.name(), value, &self.plan(value).unwrap_or_default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::trial::changes::change;
    use crate::trial::setting::Roots;

    #[test]
    fn governor_on_a_copy_of_a_two_socket_server() {
        let d = crate::trial::testing::copy_fixture("intel-2s");
        let r = Roots::new(d.path(), None);
        let c = change(&r, "cpufreq.governor", "performance", None).unwrap();
        let ops = c.setting.plan(&c.value).unwrap();
        assert_eq!(ops.len(), 32, "one write per policy");
        assert!(
            c.setting
                .permanent("performance")
                .text
                .contains("governor=performance")
        );
        let e = change(&r, "cpufreq.governor", "turbo-mode", None).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        let e = change(&r, "cpufreq.max_khz", "9000000", None).unwrap_err();
        assert!(format!("{e:#}").contains("out of range"), "{e:#}");
        assert_eq!(
            change(&r, "cpufreq.epp", "performance@0-1", None)
                .unwrap()
                .setting
                .plan("performance@0-1")
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn not_exposed_in_the_guest() {
        let d = crate::trial::testing::copy_fixture("kvm-guest");
        let r = Roots::new(d.path(), None);
        let e = change(&r, "cpufreq.governor", "performance", None).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(format!("{e:#}").contains("not exposed"), "{e:#}");
    }
}
