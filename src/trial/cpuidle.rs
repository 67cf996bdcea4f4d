//! Idle states (the `cpupower idle-set -D` equivalent) and scheduler features.
//!
//! `cpuidle.max_latency_us=N` disables every state whose exit latency is above N us;
//! `cpuidle.disable=NAME` disables the states of that name (or `stateK`), both on every online
//! CPU or on the CPUs after `@` (`cpuidle.disable=haltpoll@1`). A disabled state sends the idle
//! CPU to a shallower one (in a guest: the poll state), so the cost is polling time.

use super::ops::{Op, Target, feature_state, read_file_value};
use super::setting::{Availability, Cost, Permanent, Roots, Setting, Subject};
use super::values::{online, split_cpus, unit};
use crate::cpulist::CpuSet;
use crate::error::bad_input;
use anyhow::Result;
use std::path::PathBuf;

/// One idle state of one CPU.
#[derive(Clone, Debug)]
pub struct State {
    pub cpu: u32,
    pub index: u32,
    pub name: String,
    pub latency_us: u64,
    pub dir: PathBuf,
}

/// The idle states of `cpus`, read from sysfs.
pub fn states(roots: &Roots, cpus: &CpuSet) -> Vec<State> {
    let mut out = Vec::new();
    for cpu in cpus.iter() {
        for index in 0.. {
            let dir = roots.path(&format!(
                "sys/devices/system/cpu/cpu{cpu}/cpuidle/state{index}"
            ));
            if !dir.is_dir() {
                break;
            }
            out.push(State {
                cpu,
                index,
                name: read_file_value(&dir.join("name")).unwrap_or_default(),
                latency_us: read_file_value(&dir.join("latency"))
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
                dir,
            });
        }
    }
    out
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    MaxLatency,
    Disable,
}

pub struct IdleStates {
    roots: Roots,
    mode: Mode,
}

impl IdleStates {
    pub fn new(roots: &Roots, what: &str) -> Option<Self> {
        let mode = match what {
            "max_latency_us" => Mode::MaxLatency,
            "disable" => Mode::Disable,
            _ => return None,
        };
        Some(Self {
            roots: roots.clone(),
            mode,
        })
    }

    /// The states a value disables.
    fn chosen(&self, value: &str) -> Result<(Vec<State>, String)> {
        let (v, cpus) = split_cpus(value, &online(&self.roots))?;
        let all = states(&self.roots, &cpus);
        let picked: Vec<State> = match self.mode {
            Mode::MaxLatency => {
                let max: u64 = v.parse().map_err(|_| {
                    bad_input(format!(
                        "cpuidle.max_latency_us={value}: not a whole number of microseconds"
                    ))
                })?;
                all.into_iter().filter(|s| s.latency_us > max).collect()
            }
            Mode::Disable => {
                let names: Vec<&str> = v.split(',').map(str::trim).collect();
                let known: Vec<String> = all.iter().map(|s| s.name.clone()).collect();
                for n in &names {
                    if !all
                        .iter()
                        .any(|s| s.name == *n || format!("state{}", s.index) == *n)
                    {
                        let mut k = known.clone();
                        k.dedup();
                        return Err(bad_input(format!(
                            "cpuidle.disable={value}: no idle state `{n}` here; the states are {}",
                            k.join(", ")
                        )));
                    }
                }
                all.into_iter()
                    .filter(|s| {
                        names
                            .iter()
                            .any(|n| s.name == *n || format!("state{}", s.index) == *n)
                    })
                    .collect()
            }
        };
        Ok((picked, v))
    }
}

impl Setting for IdleStates {
    fn name(&self) -> String {
        match self.mode {
            Mode::MaxLatency => "cpuidle.max_latency_us".into(),
            Mode::Disable => "cpuidle.disable".into(),
        }
    }
    fn about(&self) -> String {
        match self.mode {
            Mode::MaxLatency => "disable idle states with exit latency above N us [@CPUS]".into(),
            Mode::Disable => "disable idle states by name or stateK [@CPUS]".into(),
        }
    }
    fn current(&self) -> Result<String> {
        let all = states(&self.roots, &online(&self.roots));
        let off: Vec<String> = all
            .iter()
            .filter(|s| read_file_value(&s.dir.join("disable")).is_ok_and(|v| v == "1"))
            .map(|s| format!("cpu{}:{}", s.cpu, s.name))
            .collect();
        Ok(if off.is_empty() {
            let mut names: Vec<String> = all
                .iter()
                .map(|s| format!("{}({}us)", s.name, s.latency_us))
                .collect();
            names.sort();
            names.dedup();
            format!("none disabled; states {}", names.join(" "))
        } else {
            format!("disabled: {}", off.join(" "))
        })
    }
    fn availability(&self) -> Availability {
        if states(&self.roots, &online(&self.roots)).is_empty() {
            Availability::NotHere("no cpuidle states in sysfs".into())
        } else {
            Availability::Changeable
        }
    }
    fn validate(&self, value: &str) -> Result<String> {
        let (picked, _) = self.chosen(value)?;
        if picked.is_empty() {
            return Err(bad_input(format!(
                "{}={value} disables no idle state here; nothing to try",
                self.name()
            )));
        }
        Ok(value.to_string())
    }
    fn plan(&self, value: &str) -> Result<Vec<Op>> {
        Ok(self
            .chosen(value)?
            .0
            .into_iter()
            .map(|s| Op::file(s.dir.join("disable"), "1"))
            .collect())
    }
    fn cost(&self) -> Cost {
        Cost::PollTime
    }
    fn subject(&self) -> Subject {
        Subject::Wakeup
    }
    fn permanent(&self, value: &str) -> Permanent {
        let ops = self.plan(value).unwrap_or_default();
        unit(&self.name(), value, &ops)
    }
}

/// One scheduler feature in debugfs `sched/features`: `on` or `off`.
pub struct SchedFeature {
    feature: String,
    path: PathBuf,
    debugfs: PathBuf,
    /// Why debugfs refuses root here (kernel lockdown), when it does.
    lockdown: Option<String>,
}

impl SchedFeature {
    pub fn new(roots: &Roots, feature: &str) -> Self {
        Self {
            feature: feature.to_string(),
            path: roots.path("sys/kernel/debug/sched/features"),
            debugfs: roots.path("sys/kernel/debug"),
            lockdown: super::lockdown::reason(roots),
        }
    }
}

impl Setting for SchedFeature {
    fn name(&self) -> String {
        format!("sched.feature.{}", self.feature)
    }
    fn about(&self) -> String {
        "a scheduler feature in debugfs sched/features: on or off".into()
    }
    fn current(&self) -> Result<String> {
        super::ops::read(&Target::SchedFeature {
            path: self.path.clone(),
            feature: self.feature.clone(),
        })
    }
    fn availability(&self) -> Availability {
        if let Some(why) = &self.lockdown {
            return Availability::NotHere(why.clone());
        }
        if self.path.exists() {
            match std::fs::read_to_string(&self.path)
                .ok()
                .and_then(|t| feature_state(&t, &self.feature))
            {
                Some(_) => Availability::Changeable,
                None => Availability::NotHere(format!(
                    "{} does not list {}",
                    self.path.display(),
                    self.feature
                )),
            }
        } else if self.debugfs.is_dir() {
            // Checked after mounting: the plan mounts debugfs first.
            Availability::Changeable
        } else {
            Availability::NotHere(format!("no {}", self.debugfs.display()))
        }
    }
    fn validate(&self, value: &str) -> Result<String> {
        match value {
            "on" | "1" | "Y" => Ok("on".into()),
            "off" | "0" | "N" => Ok("off".into()),
            _ => Err(bad_input(format!(
                "{}={value}: give on or off",
                self.name()
            ))),
        }
    }
    fn plan(&self, value: &str) -> Result<Vec<Op>> {
        let mut ops = Vec::new();
        if !self.path.exists() {
            ops.push(Op {
                target: Target::Mount {
                    path: self.debugfs.clone(),
                },
                value: "mounted".into(),
            });
        }
        ops.push(Op {
            target: Target::SchedFeature {
                path: self.path.clone(),
                feature: self.feature.clone(),
            },
            value: value.to_string(),
        });
        Ok(ops)
    }
    fn cost(&self) -> Cost {
        Cost::Unmeasured
    }
    fn subject(&self) -> Subject {
        Subject::Scheduler
    }
    fn permanent(&self, value: &str) -> Permanent {
        unit(&self.name(), value, &self.plan(value).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kvm() -> (tempfile::TempDir, Roots) {
        let d = crate::trial::testing::copy_fixture("kvm-guest");
        let r = Roots::new(d.path(), None);
        (d, r)
    }

    #[test]
    fn max_latency_picks_the_deeper_states() {
        let (_d, r) = kvm();
        let s = IdleStates::new(&r, "max_latency_us").unwrap();
        let ops = s.plan("0").unwrap();
        assert!(!ops.is_empty());
        // The poll state (latency 0) is never disabled by a latency bound.
        assert!(ops.iter().all(|o| !o.shell().contains("state0/")));
        assert!(s.validate("abc").is_err());
    }

    #[test]
    fn disable_by_name_and_cpu() {
        let (_d, r) = kvm();
        let s = IdleStates::new(&r, "disable").unwrap();
        let ops = s.plan("state1@1").unwrap();
        assert_eq!(ops.len(), 1);
        assert!(ops[0].shell().contains("cpu1/cpuidle/state1/disable"));
        let e = s.validate("C99").unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(s.validate("state1@7").is_err());
    }
}
