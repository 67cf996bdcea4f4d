//! The settings: files that hold one value (module parameters, sysctls, debugfs scheduler
//! knobs, cpufreq, SMT), idle states, scheduler features and a process's affinity.
//!
//! Most settings are one file with a rule for its values ([`FileKnob`]); the ones that span many
//! files (idle states and cpufreq policies on every CPU, every thread of a process) have their own
//! small types. Each is found by [`lookup`] and listed by [`catalogue`].

use super::ops::{Op, Target, read_file_value};
use super::setting::{Availability, Cost, Permanent, Roots, Setting, Subject};
pub use super::values::{online, split_cpus, unit};
use crate::cpulist::CpuSet;
use crate::error::bad_input;
use anyhow::Result;
use std::path::PathBuf;

pub const HALTPOLL_PARAMS: &[&str] = &[
    "guest_halt_poll_ns",
    "guest_halt_poll_grow",
    "guest_halt_poll_grow_start",
    "guest_halt_poll_shrink",
    "guest_halt_poll_allow_shrink",
];

/// The host's KVM halt-polling parameters (`kvm.halt_poll_ns` and its grow/shrink): what a
/// vCPU thread of this host's VMs polls before it sleeps.
pub const KVM_PARAMS: &[&str] = &[
    "halt_poll_ns",
    "halt_poll_ns_grow",
    "halt_poll_ns_grow_start",
    "halt_poll_ns_shrink",
];

/// Debugfs scheduler knobs cpulab knows (kernels 5.13 and later keep them in debugfs).
pub const SCHED_KNOBS: &[&str] = &[
    "migration_cost_ns",
    "nr_migrate",
    "base_slice_ns",
    "min_granularity_ns",
    "wakeup_granularity_ns",
    "latency_ns",
    "tunable_scaling",
];

const DEBUGFS: &str = "sys/kernel/debug";

/// The values a file accepts.
#[derive(Clone, Debug)]
pub enum Rule {
    /// An unsigned integer in a range.
    UInt { max: u64 },
    /// A signed integer (sysctls such as `sched_rt_runtime_us = -1`).
    Int,
    /// `Y`/`N` (module booleans; `1`, `0`, `on`, `off` are accepted and written as Y/N).
    Bool,
    /// `1`/`0`.
    OneZero,
    /// One of a list.
    Choice(Vec<String>),
}

impl Rule {
    fn check(&self, name: &str, v: &str) -> Result<String> {
        let bad = |what: &str| bad_input(format!("{name}={v}: {what}"));
        match self {
            Self::UInt { max } => match v.parse::<u64>() {
                Ok(n) if n <= *max => Ok(n.to_string()),
                Ok(_) => Err(bad(&format!("out of range (at most {max})"))),
                Err(_) => Err(bad("not a whole number; give one like 200000")),
            },
            Self::Int => v
                .parse::<i64>()
                .map(|n| n.to_string())
                .map_err(|_| bad("not a whole number")),
            Self::Bool => match v.to_ascii_lowercase().as_str() {
                "y" | "1" | "on" | "yes" | "true" => Ok("Y".into()),
                "n" | "0" | "off" | "no" | "false" => Ok("N".into()),
                _ => Err(bad("not a yes/no value; give Y or N")),
            },
            Self::OneZero => match v.to_ascii_lowercase().as_str() {
                "1" | "on" | "y" | "yes" => Ok("1".into()),
                "0" | "off" | "n" | "no" => Ok("0".into()),
                _ => Err(bad("give 1 or 0")),
            },
            Self::Choice(list) => {
                if list.iter().any(|c| c == v) {
                    Ok(v.to_string())
                } else {
                    Err(bad(&format!(
                        "not offered here; choose one of {}",
                        list.join(", ")
                    )))
                }
            }
        }
    }
}

/// How a file knob is made permanent.
#[derive(Clone, Debug)]
pub enum Persist {
    /// `key=value` on the kernel command line (module parameters).
    Cmdline(String),
    /// A sysctl.d line.
    Sysctl(String),
    /// An option of tuned's `[cpu]` plugin.
    TunedCpu(String),
    /// An `options MODULE PARAM=VALUE` line in modprobe.d, read when the module loads.
    Modprobe { module: String, param: String },
    /// No native form: a systemd oneshot unit that repeats the writes at boot.
    Unit,
}

/// A setting held in one file.
pub struct FileKnob {
    pub name: String,
    pub about: String,
    pub path: PathBuf,
    pub rule: Rule,
    pub persist: Persist,
    pub cost: Cost,
    pub subject: Subject,
    /// Lives in debugfs: mounted for the trial when it is not, unmounted after.
    pub debugfs: Option<PathBuf>,
    /// Why it cannot be tried here, when that is known before reading.
    pub unavailable: Option<Availability>,
    /// Why writing it acts on nothing here, when it can be written all the same.
    pub inert: Option<String>,
}

impl FileKnob {
    /// Whether the file can be written here (debugfs mountable, present, writable).
    fn writable(&self) -> Availability {
        if let Some(a) = &self.unavailable {
            return a.clone();
        }
        if let Some(d) = &self.debugfs
            && !self.debugfs_mounted()
        {
            return if d.is_dir() {
                Availability::Changeable
            } else {
                Availability::NotHere(format!("no {} to mount debugfs on", d.display()))
            };
        }
        match std::fs::metadata(&self.path) {
            Err(e) => Availability::NotHere(format!("{} is not there ({e})", self.path.display())),
            Ok(m) => {
                use std::os::unix::fs::PermissionsExt;
                if m.permissions().mode() & 0o222 == 0 {
                    Availability::BootOnly(format!(
                        "{} is read-only (mode {:o}): fixed at boot or module load",
                        self.path.display(),
                        m.permissions().mode() & 0o777
                    ))
                } else {
                    Availability::Changeable
                }
            }
        }
    }

    fn debugfs_mounted(&self) -> bool {
        match &self.debugfs {
            Some(d) => super::ops::is_debugfs_mounted(d) || self.path.exists(),
            None => true,
        }
    }
}

impl Setting for FileKnob {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn about(&self) -> String {
        self.about.clone()
    }
    fn current(&self) -> Result<String> {
        if !self.debugfs_mounted() {
            anyhow::bail!("debugfs not mounted; a trial mounts it");
        }
        read_file_value(&self.path)
    }
    fn availability(&self) -> Availability {
        match self.writable() {
            Availability::Changeable => match &self.inert {
                Some(why) => Availability::Inert(why.clone()),
                None => Availability::Changeable,
            },
            other => other,
        }
    }
    fn validate(&self, value: &str) -> Result<String> {
        self.rule.check(&self.name, value)
    }
    fn plan(&self, value: &str) -> Result<Vec<Op>> {
        let mut ops = Vec::new();
        if let Some(d) = self.debugfs.as_ref().filter(|_| !self.debugfs_mounted()) {
            ops.push(Op {
                target: Target::Mount { path: d.clone() },
                value: "mounted".into(),
            });
        }
        ops.push(Op::file(self.path.clone(), value));
        Ok(ops)
    }
    fn cost(&self) -> Cost {
        self.cost
    }
    fn subject(&self) -> Subject {
        self.subject
    }
    fn permanent(&self, value: &str) -> Permanent {
        match &self.persist {
            Persist::Cmdline(key) if key == "nosmt" => Permanent {
                form: "kernel command line".into(),
                file: None,
                text: if value == "off" {
                    "nosmt".into()
                } else {
                    "(no parameter: remove nosmt from the kernel command line)".into()
                },
            },
            Persist::Cmdline(key) => Permanent {
                form: "kernel command line".into(),
                file: None,
                text: format!("{key}={value}"),
            },
            Persist::Sysctl(key) => Permanent {
                form: "sysctl.d file".into(),
                file: Some("/etc/sysctl.d/90-cpulab.conf".into()),
                text: format!("{key} = {value}\n"),
            },
            Persist::TunedCpu(key) => Permanent {
                form: "tuned profile".into(),
                file: Some("/etc/tuned/cpulab/tuned.conf".into()),
                text: format!("[main]\ninclude=throughput-performance\n\n[cpu]\n{key}={value}\n"),
            },
            Persist::Modprobe { module, param } => Permanent {
                form: "modprobe.d file".into(),
                file: Some(format!("/etc/modprobe.d/cpulab-{module}.conf")),
                text: format!("options {module} {param}={value}\n"),
            },
            Persist::Unit => unit(&self.name, value, &self.plan(value).unwrap_or_default()),
        }
    }
}

fn haltpoll(roots: &Roots, param: &str) -> FileKnob {
    let rule = if param == "guest_halt_poll_allow_shrink" {
        Rule::Bool
    } else {
        Rule::UInt {
            max: u64::from(u32::MAX),
        }
    };
    FileKnob {
        name: format!("haltpoll.{param}"),
        about: match param {
            "guest_halt_poll_ns" => {
                "longest a guest vCPU polls before it halts (ns; 0 = halt at once)"
            }
            "guest_halt_poll_grow" => "factor the poll time grows by after a wakeup within it",
            "guest_halt_poll_grow_start" => "poll time to grow from (ns)",
            "guest_halt_poll_shrink" => "divisor the poll time shrinks by after a long idle",
            _ => "whether the poll time may shrink",
        }
        .into(),
        path: roots.path(&format!("sys/module/haltpoll/parameters/{param}")),
        rule,
        persist: Persist::Cmdline(format!("haltpoll.{param}")),
        cost: Cost::PollTime,
        subject: Subject::Wakeup,
        debugfs: None,
        unavailable: None,
        inert: crate::probe::idle::haltpoll_inert(&roots.root),
    }
}

fn kvm_param(roots: &Roots, param: &str) -> FileKnob {
    FileKnob {
        name: format!("kvm.{param}"),
        about: match param {
            "halt_poll_ns" => {
                "longest the host polls for a halted vCPU before its thread sleeps (ns; 0 = never)"
            }
            "halt_poll_ns_grow" => "factor a vCPU's poll time grows by after a wakeup within it",
            "halt_poll_ns_grow_start" => "poll time a vCPU grows from (ns)",
            _ => "divisor a vCPU's poll time shrinks by after a wakeup beyond it",
        }
        .into(),
        path: roots.path(&format!("sys/module/kvm/parameters/{param}")),
        rule: Rule::UInt {
            max: u64::from(u32::MAX),
        },
        persist: Persist::Modprobe {
            module: "kvm".into(),
            param: param.into(),
        },
        cost: Cost::PollTime,
        subject: Subject::Wakeup,
        debugfs: None,
        unavailable: None,
        inert: None,
    }
}

fn sysctl(roots: &Roots, key: &str) -> FileKnob {
    let rel = key.replace('.', "/");
    FileKnob {
        name: key.to_string(),
        about: format!("sysctl {key}"),
        path: roots.path(&format!("proc/sys/{rel}")),
        rule: Rule::Int,
        persist: Persist::Sysctl(key.to_string()),
        cost: Cost::Unmeasured,
        subject: Subject::Scheduler,
        debugfs: None,
        unavailable: None,
        inert: None,
    }
}

fn sched_knob(roots: &Roots, knob: &str) -> FileKnob {
    FileKnob {
        name: format!("sched.{knob}"),
        about: format!("scheduler knob {DEBUGFS}/sched/{knob} (debugfs)"),
        path: roots.path(&format!("{DEBUGFS}/sched/{knob}")),
        rule: Rule::UInt { max: u64::MAX },
        persist: Persist::Unit,
        cost: Cost::Unmeasured,
        subject: Subject::Scheduler,
        debugfs: Some(roots.path(DEBUGFS)),
        unavailable: super::lockdown::reason(roots).map(Availability::NotHere),
        inert: None,
    }
}

fn smt(roots: &Roots) -> FileKnob {
    let path = roots.path("sys/devices/system/cpu/smt/control");
    let now = read_file_value(&path).unwrap_or_default();
    let unavailable = match now.as_str() {
        "on" | "off" => None,
        "" => Some(Availability::NotHere(format!("no {}", path.display()))),
        "forceoff" => Some(Availability::BootOnly("nosmt=force".into())),
        other => Some(Availability::NotHere(format!(
            "SMT control is `{other}` here"
        ))),
    };
    FileKnob {
        name: "smt.control".into(),
        about: "SMT (hyperthreads) on or off".into(),
        path,
        rule: Rule::Choice(vec!["on".into(), "off".into()]),
        persist: Persist::Cmdline("nosmt".into()),
        cost: Cost::Unmeasured,
        subject: Subject::Scheduler,
        debugfs: None,
        unavailable,
        inert: None,
    }
}

fn cpufreq_global(roots: &Roots, name: &str) -> FileKnob {
    let (rel, rule, persist, about) = match name {
        "cpufreq.boost" => (
            "sys/devices/system/cpu/cpufreq/boost",
            Rule::OneZero,
            Persist::TunedCpu("boost".into()),
            "frequency boost (turbo) on or off",
        ),
        "intel_pstate.no_turbo" => (
            "sys/devices/system/cpu/intel_pstate/no_turbo",
            Rule::OneZero,
            Persist::TunedCpu("no_turbo".into()),
            "intel_pstate turbo off (1) or on (0)",
        ),
        _ => (
            "sys/devices/system/cpu/intel_pstate/min_perf_pct",
            Rule::UInt { max: 100 },
            Persist::TunedCpu("min_perf_pct".into()),
            "intel_pstate lowest performance, % of maximum",
        ),
    };
    let path = roots.path(rel);
    let unavailable = (!path.exists()).then(|| {
        Availability::NotHere(format!(
            "no {} (cpufreq is not exposed here; inside a VM the host controls frequency)",
            path.display()
        ))
    });
    FileKnob {
        name: name.into(),
        about: about.into(),
        path,
        rule,
        persist,
        cost: Cost::Unmeasured,
        subject: Subject::Frequency,
        debugfs: None,
        unavailable,
        inert: None,
    }
}

/// Finds a setting by name; `Ok(None)` when the name is not one cpulab knows.
pub fn lookup(roots: &Roots, name: &str) -> Result<Option<Box<dyn Setting>>> {
    if let Some(p) = name.strip_prefix("haltpoll.") {
        return Ok(HALTPOLL_PARAMS
            .contains(&p)
            .then(|| Box::new(haltpoll(roots, p)) as Box<dyn Setting>));
    }
    if let Some(p) = name.strip_prefix("kvm.") {
        return Ok(KVM_PARAMS
            .contains(&p)
            .then(|| Box::new(kvm_param(roots, p)) as Box<dyn Setting>));
    }
    if name == "cpuidle_haltpoll.force" {
        return Ok(Some(Box::new(FileKnob {
            name: name.into(),
            about: "use the haltpoll cpuidle driver even where the host does not ask for it".into(),
            path: roots.path("sys/module/cpuidle_haltpoll/parameters/force"),
            rule: Rule::Bool,
            persist: Persist::Cmdline(name.into()),
            cost: Cost::PollTime,
            subject: Subject::Wakeup,
            debugfs: None,
            unavailable: Some(Availability::BootOnly("cpuidle_haltpoll.force=1".into())),
            inert: None,
        })));
    }
    if let Some(key) = name.strip_prefix("kernel.sched_").map(|_| name) {
        let k = sysctl(roots, key);
        if !k.path.exists() {
            return Err(bad_input(format!(
                "no sysctl {key} on this kernel ({} is not there); `cpulab try --list` shows the ones that are",
                k.path.display()
            )));
        }
        return Ok(Some(Box::new(k)));
    }
    if let Some(f) = name.strip_prefix("sched.feature.") {
        return Ok(Some(Box::new(super::cpuidle::SchedFeature::new(roots, f))));
    }
    if let Some(k) = name.strip_prefix("sched.") {
        if !SCHED_KNOBS.contains(&k) {
            return Ok(None);
        }
        return Ok(Some(Box::new(sched_knob(roots, k))));
    }
    if name == "smt.control" {
        return Ok(Some(Box::new(smt(roots))));
    }
    if matches!(
        name,
        "cpufreq.boost" | "intel_pstate.no_turbo" | "intel_pstate.min_perf_pct"
    ) {
        return Ok(Some(Box::new(cpufreq_global(roots, name))));
    }
    if let Some(what) = name.strip_prefix("cpufreq.") {
        return Ok(
            super::cpufreq::PolicyKnob::new(roots, what).map(|k| Box::new(k) as Box<dyn Setting>)
        );
    }
    if let Some(what) = name.strip_prefix("cpuidle.") {
        return Ok(
            super::cpuidle::IdleStates::new(roots, what).map(|k| Box::new(k) as Box<dyn Setting>)
        );
    }
    if let Some(rest) = name.strip_prefix("cgroup:") {
        return CgroupFile::lookup(roots, rest).map(|k| Some(Box::new(k) as Box<dyn Setting>));
    }
    if let Some(rest) = name.strip_prefix("pid:") {
        return super::affinity::ProcessAffinity::lookup(roots, rest)
            .map(|k| Some(Box::new(k) as Box<dyn Setting>));
    }
    Ok(None)
}

/// Every setting `--list` shows, for this machine.
pub fn catalogue(roots: &Roots) -> Vec<Box<dyn Setting>> {
    let mut names: Vec<String> = HALTPOLL_PARAMS
        .iter()
        .map(|p| format!("haltpoll.{p}"))
        .collect();
    names.push("cpuidle_haltpoll.force".into());
    names.extend(KVM_PARAMS.iter().map(|p| format!("kvm.{p}")));
    names.extend(["cpuidle.max_latency_us", "cpuidle.disable"].map(String::from));
    names.extend(
        ["governor", "epp", "min_khz", "max_khz"]
            .iter()
            .map(|k| format!("cpufreq.{k}")),
    );
    names.extend(
        [
            "cpufreq.boost",
            "intel_pstate.min_perf_pct",
            "intel_pstate.no_turbo",
            "smt.control",
        ]
        .map(String::from),
    );
    if let Ok(rd) = std::fs::read_dir(roots.path("proc/sys/kernel")) {
        let mut s: Vec<String> = rd
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(String::from))
            .filter(|n| n.starts_with("sched_"))
            .map(|n| format!("kernel.{n}"))
            .collect();
        s.sort();
        names.extend(s);
    }
    names.extend(SCHED_KNOBS.iter().map(|k| format!("sched.{k}")));
    names
        .iter()
        .filter_map(|n| lookup(roots, n).ok().flatten())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_normalise_or_reject_in_one_line() {
        assert_eq!(Rule::Bool.check("x", "on").unwrap(), "Y");
        assert_eq!(Rule::UInt { max: 100 }.check("x", "100").unwrap(), "100");
        let e = Rule::UInt { max: 100 }.check("x", "101").unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(format!("{e:#}").contains("out of range"));
        assert!(Rule::UInt { max: 9 }.check("x", "-1").is_err());
        assert!(Rule::Choice(vec!["a".into()]).check("x", "b").is_err());
    }
}

/// The cgroup files `cgroup:PATH:FILE` may name (v2, and the v1 CFS quota files).
pub const CGROUP_FILES: &[&str] = &[
    "cpu.max",
    "cpu.weight",
    "cpuset.cpus",
    "cpu.cfs_quota_us",
    "cpu.cfs_period_us",
];

/// A cgroup's CPU limit or cpuset: `cgroup:system.slice/postgresql.service:cpu.max=max 100000`.
pub struct CgroupFile {
    name: String,
    group: String,
    file: String,
    path: PathBuf,
    online: CpuSet,
}

impl CgroupFile {
    pub fn lookup(roots: &Roots, rest: &str) -> Result<Self> {
        let Some((group, file)) = rest.rsplit_once(':') else {
            return Err(bad_input(format!(
                "`cgroup:{rest}` names no file; write `cgroup:system.slice/x.service:cpu.max=50000 100000`"
            )));
        };
        if !CGROUP_FILES.contains(&file) {
            return Err(bad_input(format!(
                "cgroup file `{file}` is not one cpulab tries; choose one of {}",
                CGROUP_FILES.join(", ")
            )));
        }
        let group = group.trim_matches('/').to_string();
        let base = if file.starts_with("cpu.cfs") {
            "sys/fs/cgroup/cpu"
        } else {
            "sys/fs/cgroup"
        };
        let path = roots.path(&format!("{base}/{group}/{file}"));
        if !path.is_file() {
            return Err(bad_input(format!(
                "no {} (is the cgroup path right, and is it cgroup v{}?)",
                path.display(),
                if base.ends_with("cpu") { 1 } else { 2 }
            )));
        }
        Ok(Self {
            name: format!("cgroup:{group}:{file}"),
            group,
            file: file.to_string(),
            path,
            online: online(roots),
        })
    }
}

impl Setting for CgroupFile {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn about(&self) -> String {
        format!("{} of cgroup {}", self.file, self.group)
    }
    fn current(&self) -> Result<String> {
        read_file_value(&self.path)
    }
    fn availability(&self) -> Availability {
        Availability::Changeable
    }
    fn validate(&self, value: &str) -> Result<String> {
        let bad = |what: &str| bad_input(format!("{}={value}: {what}", self.name));
        match self.file.as_str() {
            "cpu.max" => {
                let w: Vec<&str> = value.split_whitespace().collect();
                let quota_ok = w
                    .first()
                    .is_some_and(|q| *q == "max" || q.parse::<u64>().is_ok_and(|n| n > 0));
                let period_ok = w
                    .get(1)
                    .is_none_or(|p| p.parse::<u64>().is_ok_and(|n| n > 0));
                if w.is_empty() || w.len() > 2 || !quota_ok || !period_ok {
                    return Err(bad("give `max` or `QUOTA [PERIOD]` in microseconds"));
                }
                Ok(w.join(" "))
            }
            "cpu.weight" => match value.parse::<u64>() {
                Ok(n) if (1..=10000).contains(&n) => Ok(n.to_string()),
                _ => Err(bad("a weight is 1 to 10000")),
            },
            "cpuset.cpus" => {
                let c = CpuSet::parse_list(value, false).map_err(|e| bad(&e.to_string()))?;
                if !c.is_subset(&self.online) {
                    return Err(bad(&format!(
                        "names CPUs that are not online ({})",
                        self.online
                    )));
                }
                Ok(c.to_string())
            }
            _ => value
                .parse::<i64>()
                .map(|n| n.to_string())
                .map_err(|_| bad("not a whole number")),
        }
    }
    fn plan(&self, value: &str) -> Result<Vec<Op>> {
        Ok(vec![Op::file(self.path.clone(), value)])
    }
    fn cost(&self) -> Cost {
        Cost::Unmeasured
    }
    fn subject(&self) -> Subject {
        Subject::Scheduler
    }
    fn permanent(&self, value: &str) -> Permanent {
        let unit = self
            .group
            .rsplit('/')
            .next()
            .unwrap_or(&self.group)
            .to_string();
        let line = match self.file.as_str() {
            "cpu.max" => {
                let w: Vec<&str> = value.split_whitespace().collect();
                match (
                    w.first().and_then(|q| q.parse::<f64>().ok()),
                    w.get(1)
                        .and_then(|p| p.parse::<f64>().ok())
                        .unwrap_or(100000.0),
                ) {
                    (Some(q), p) => format!("CPUQuota={:.0}%", q / p * 100.0),
                    _ => "CPUQuota=".to_string(),
                }
            }
            "cpu.weight" => format!("CPUWeight={value}"),
            "cpuset.cpus" => format!("AllowedCPUs={value}"),
            _ => {
                return super::values::unit(
                    &self.name,
                    value,
                    &self.plan(value).unwrap_or_default(),
                );
            }
        };
        Permanent {
            form: "systemd drop-in".into(),
            file: Some(format!("/etc/systemd/system/{unit}.d/cpulab.conf")),
            text: format!(
                "[{}]\n{line}\n",
                if unit.ends_with(".slice") {
                    "Slice"
                } else {
                    "Service"
                }
            ),
        }
    }
}

#[cfg(test)]
mod cgroup_tests {
    use super::*;

    #[test]
    fn cpu_max_on_a_server_copy() {
        let d = crate::trial::testing::copy_fixture("intel-2s");
        let r = Roots::new(d.path(), None);
        let c = CgroupFile::lookup(&r, "user.slice:cpu.max").unwrap();
        assert_eq!(c.current().unwrap(), "max 100000");
        assert_eq!(c.validate("50000  100000").unwrap(), "50000 100000");
        assert!(c.validate("-1").is_err());
        assert!(c.permanent("50000 100000").text.contains("CPUQuota=50%"));
        assert!(c.permanent("50000 100000").text.starts_with("[Slice]"));
        assert!(CgroupFile::lookup(&r, "nope.slice:cpu.max").is_err());
        assert!(CgroupFile::lookup(&r, "user.slice:memory.max").is_err());
    }
}

#[cfg(test)]
mod knob_tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    /// A root holding `files` (path under the root, text), nothing else.
    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (rel, text) in files {
            let p = d.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, text).unwrap();
        }
        d
    }

    /// A fixture tree read in place (these tests write nothing to it).
    fn fixture(name: &str) -> Roots {
        Roots::new(
            &Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures")
                .join(name),
            None,
        )
    }

    fn mode(p: &Path, m: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }

    fn get(r: &Roots, name: &str) -> Box<dyn Setting> {
        lookup(r, name).unwrap().unwrap()
    }

    fn missing(r: &Roots, name: &str) -> bool {
        lookup(r, name).unwrap().is_none()
    }

    #[test]
    fn rules_take_every_spelling_they_name() {
        for v in ["y", "1", "on", "yes", "true", "TRUE"] {
            assert_eq!(Rule::Bool.check("x", v).unwrap(), "Y", "{v}");
        }
        for v in ["n", "0", "off", "no", "false", "Off"] {
            assert_eq!(Rule::Bool.check("x", v).unwrap(), "N", "{v}");
        }
        assert!(Rule::Bool.check("x", "2").is_err());
        for v in ["1", "on", "y", "yes", "ON"] {
            assert_eq!(Rule::OneZero.check("x", v).unwrap(), "1", "{v}");
        }
        for v in ["0", "off", "n", "no"] {
            assert_eq!(Rule::OneZero.check("x", v).unwrap(), "0", "{v}");
        }
        assert!(Rule::OneZero.check("x", "true").is_err());
        assert_eq!(Rule::UInt { max: 100 }.check("x", "007").unwrap(), "7");
        assert_eq!(Rule::UInt { max: 100 }.check("x", "0").unwrap(), "0");
        assert_eq!(Rule::Int.check("x", "-1").unwrap(), "-1");
        assert_eq!(Rule::Int.check("x", "+5").unwrap(), "5");
        assert!(Rule::Int.check("x", "1.5").is_err());
        let ab = Rule::Choice(vec!["a".into(), "b".into()]);
        assert_eq!(ab.check("x", "b").unwrap(), "b");
        let e = ab.check("x", "c").unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "x=c: not offered here; choose one of a, b"
        );
    }

    #[test]
    fn a_sysctl_reads_checks_plans_and_goes_in_sysctl_d() {
        let d = tree(&[("proc/sys/kernel/sched_rt_runtime_us", "950000\n")]);
        let r = Roots::new(d.path(), None);
        let path = d.path().join("proc/sys/kernel/sched_rt_runtime_us");
        let k = get(&r, "kernel.sched_rt_runtime_us");
        assert_eq!(k.name(), "kernel.sched_rt_runtime_us");
        assert_eq!(k.about(), "sysctl kernel.sched_rt_runtime_us");
        assert_eq!(k.current().unwrap(), "950000");
        assert_eq!(k.validate("-1").unwrap(), "-1");
        assert!(k.validate("x").is_err());
        assert_eq!(k.plan("-1").unwrap(), vec![Op::file(path.clone(), "-1")]);
        assert_eq!(k.cost(), Cost::Unmeasured);
        assert_eq!(k.subject(), Subject::Scheduler);
        assert_eq!(
            k.permanent("-1"),
            Permanent {
                form: "sysctl.d file".into(),
                file: Some("/etc/sysctl.d/90-cpulab.conf".into()),
                text: "kernel.sched_rt_runtime_us = -1\n".into(),
            }
        );
        mode(&path, 0o644);
        assert_eq!(k.availability(), Availability::Changeable);
        mode(&path, 0o444);
        assert_eq!(
            k.availability(),
            Availability::BootOnly(format!(
                "{} is read-only (mode 444): fixed at boot or module load",
                path.display()
            ))
        );
        std::fs::remove_file(&path).unwrap();
        let Availability::NotHere(why) = k.availability() else {
            panic!("{:?}", k.availability())
        };
        assert!(why.starts_with(&format!("{} is not there (", path.display())));
        let Err(e) = lookup(&r, "kernel.sched_rt_runtime_us") else {
            panic!("a sysctl the kernel does not have was found")
        };
        assert!(
            format!("{e:#}").starts_with("no sysctl kernel.sched_rt_runtime_us on this kernel")
        );
    }

    #[test]
    fn a_debugfs_knob_mounts_debugfs_only_when_its_file_is_not_there() {
        let d = tree(&[("sys/kernel/debug/sched/migration_cost_ns", "500000\n")]);
        let r = Roots::new(d.path(), None);
        let debug = d.path().join("sys/kernel/debug");
        let path = debug.join("sched/migration_cost_ns");
        let k = get(&r, "sched.migration_cost_ns");
        assert_eq!(k.name(), "sched.migration_cost_ns");
        assert_eq!(
            k.about(),
            "scheduler knob sys/kernel/debug/sched/migration_cost_ns (debugfs)"
        );
        assert!(missing(&r, "sched.no_such_knob"));
        // The file is there: debugfs counts as mounted.
        assert_eq!(k.current().unwrap(), "500000");
        mode(&path, 0o644);
        assert_eq!(k.availability(), Availability::Changeable);
        mode(&path, 0o444);
        assert!(matches!(k.availability(), Availability::BootOnly(_)));
        assert_eq!(
            k.plan("250000").unwrap(),
            vec![Op::file(path.clone(), "250000")]
        );
        assert_eq!(
            k.validate("18446744073709551615").unwrap(),
            "18446744073709551615"
        );
        assert_eq!(
            k.permanent("250000"),
            Permanent {
                form: "systemd unit".into(),
                file: Some("/etc/systemd/system/cpulab-setting.service".into()),
                text: format!(
                    "[Unit]\nDescription=Set sched.migration_cost_ns=250000 (tried with cpulab try)\n\n\
                     [Service]\nType=oneshot\nExecStart=/bin/sh -c 'echo 250000 > {}'\n\n\
                     [Install]\nWantedBy=multi-user.target\n",
                    path.display()
                ),
            }
        );
        // The file is not there but its mount point is: a trial mounts debugfs first.
        std::fs::remove_file(&path).unwrap();
        let e = k.current().unwrap_err();
        assert_eq!(format!("{e:#}"), "debugfs not mounted; a trial mounts it");
        assert_eq!(k.availability(), Availability::Changeable);
        let mount = Op {
            target: Target::Mount {
                path: debug.clone(),
            },
            value: "mounted".into(),
        };
        assert_eq!(
            k.plan("250000").unwrap(),
            vec![mount, Op::file(path.clone(), "250000")]
        );
        assert!(k.permanent("250000").text.contains(&format!(
            "ExecStart=/bin/sh -c 'mount -t debugfs none {}'\nExecStart=/bin/sh -c 'echo 250000 > {}'\n",
            debug.display(),
            path.display()
        )));
        // No mount point either.
        std::fs::remove_dir_all(&debug).unwrap();
        assert_eq!(
            k.availability(),
            Availability::NotHere(format!("no {} to mount debugfs on", debug.display()))
        );
    }

    /// kvm-emr-16 has the haltpoll parameters but no cpuidle driver (built in, not forced):
    /// they can be written and act on nothing, and `try --list` says so; on kvm-guest the
    /// driver is in use and they act. A copy of the driver loaded as a module gets the
    /// modprobe line too.
    #[test]
    fn haltpoll_parameters_act_only_where_the_haltpoll_driver_is_in_use() {
        let emr = fixture("kvm-emr-16");
        let Availability::Inert(why) = get(&emr, "haltpoll.guest_halt_poll_ns").availability()
        else {
            panic!("not inert on kvm-emr-16")
        };
        assert!(why.contains("(current driver: none)"), "{why}");
        assert!(
            why.contains("built into this kernel, so only booting with cpuidle_haltpoll.force=1"),
            "{why}"
        );
        assert_eq!(
            get(&fixture("kvm-guest"), "haltpoll.guest_halt_poll_ns").availability(),
            Availability::Changeable
        );
        let d = crate::trial::testing::copy_fixture("kvm-emr-16");
        std::fs::write(
            d.path().join("sys/module/cpuidle_haltpoll/initstate"),
            "live\n",
        )
        .unwrap();
        let r = Roots::new(d.path(), None);
        let Availability::Inert(why) = get(&r, "haltpoll.guest_halt_poll_ns").availability() else {
            panic!("not inert with the driver as a module")
        };
        assert!(why.contains("`modprobe cpuidle-haltpoll force=1`"), "{why}");
    }

    /// The host's kvm.halt_poll_ns: read-only where its mode says so (this project's machines,
    /// mode 0444 even for root), changeable where it is writable, made permanent by a
    /// modprobe.d line.
    #[test]
    fn kvm_halt_poll_ns_is_read_only_at_mode_444_and_made_permanent_in_modprobe_d() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sys/module/kvm/parameters");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("halt_poll_ns"), "200000\n").unwrap();
        let set = |mode| {
            std::fs::set_permissions(
                p.join("halt_poll_ns"),
                std::fs::Permissions::from_mode(mode),
            )
            .unwrap()
        };
        set(0o444);
        let r = Roots::new(d.path(), None);
        let k = get(&r, "kvm.halt_poll_ns");
        assert_eq!(k.current().unwrap(), "200000");
        let Availability::BootOnly(why) = k.availability() else {
            panic!("mode 444 is not read-only: {:?}", k.availability())
        };
        assert!(why.contains("read-only (mode 444)"), "{why}");
        set(0o644);
        assert_eq!(
            get(&r, "kvm.halt_poll_ns").availability(),
            Availability::Changeable
        );
        let perm = k.permanent("50000");
        assert_eq!(perm.form, "modprobe.d file");
        assert_eq!(perm.text, "options kvm halt_poll_ns=50000\n");
        assert!(missing(&r, "kvm.halt_poll_nope"));
        // A machine without KVM has the setting, not here.
        let e = tempfile::tempdir().unwrap();
        assert!(matches!(
            get(&Roots::new(e.path(), None), "kvm.halt_poll_ns").availability(),
            Availability::NotHere(_)
        ));
    }

    #[test]
    fn haltpoll_parameters_each_with_its_rule_and_line() {
        let r = fixture("kvm-guest");
        let abouts = [
            (
                "guest_halt_poll_ns",
                "longest a guest vCPU polls before it halts (ns; 0 = halt at once)",
            ),
            (
                "guest_halt_poll_grow",
                "factor the poll time grows by after a wakeup within it",
            ),
            ("guest_halt_poll_grow_start", "poll time to grow from (ns)"),
            (
                "guest_halt_poll_shrink",
                "divisor the poll time shrinks by after a long idle",
            ),
            (
                "guest_halt_poll_allow_shrink",
                "whether the poll time may shrink",
            ),
        ];
        for (p, about) in abouts {
            let k = get(&r, &format!("haltpoll.{p}"));
            assert_eq!(k.name(), format!("haltpoll.{p}"));
            assert_eq!(k.about(), about);
            assert_eq!(k.cost(), Cost::PollTime);
            assert_eq!(k.subject(), Subject::Wakeup);
        }
        assert!(missing(&r, "haltpoll.guest_halt_poll_nope"));
        let ns = get(&r, "haltpoll.guest_halt_poll_ns");
        assert_eq!(ns.current().unwrap(), "0");
        assert_eq!(ns.validate("4294967295").unwrap(), "4294967295");
        assert!(ns.validate("4294967296").is_err());
        assert!(ns.validate("on").is_err());
        assert_eq!(
            ns.permanent("50000"),
            Permanent {
                form: "kernel command line".into(),
                file: None,
                text: "haltpoll.guest_halt_poll_ns=50000".into(),
            }
        );
        let shrink = get(&r, "haltpoll.guest_halt_poll_allow_shrink");
        assert_eq!(shrink.validate("on").unwrap(), "Y");
        assert!(shrink.validate("5").is_err());
        let force = get(&r, "cpuidle_haltpoll.force");
        assert_eq!(force.name(), "cpuidle_haltpoll.force");
        assert_eq!(
            force.availability(),
            Availability::BootOnly("cpuidle_haltpoll.force=1".into())
        );
        assert_eq!(force.validate("1").unwrap(), "Y");
        assert_eq!(force.permanent("Y").text, "cpuidle_haltpoll.force=Y");
    }

    #[test]
    fn smt_control_by_what_the_file_says() {
        let r = fixture("intel-2s");
        let k = get(&r, "smt.control");
        assert_eq!(k.name(), "smt.control");
        assert_eq!(k.current().unwrap(), "on");
        assert_eq!(k.availability(), Availability::Changeable);
        assert_eq!(k.validate("off").unwrap(), "off");
        assert!(k.validate("forceoff").is_err());
        assert_eq!(
            k.permanent("off"),
            Permanent {
                form: "kernel command line".into(),
                file: None,
                text: "nosmt".into(),
            }
        );
        assert_eq!(
            k.permanent("on").text,
            "(no parameter: remove nosmt from the kernel command line)"
        );
        assert_eq!(
            get(&fixture("kvm-guest"), "smt.control").availability(),
            Availability::NotHere("SMT control is `notsupported` here".into())
        );
        let d = tree(&[("sys/devices/system/cpu/smt/control", "forceoff\n")]);
        let forced = Roots::new(d.path(), None);
        assert_eq!(
            get(&forced, "smt.control").availability(),
            Availability::BootOnly("nosmt=force".into())
        );
        let e = tree(&[]);
        let none = Roots::new(e.path(), None);
        assert_eq!(
            get(&none, "smt.control").availability(),
            Availability::NotHere(format!(
                "no {}",
                e.path()
                    .join("sys/devices/system/cpu/smt/control")
                    .display()
            ))
        );
    }

    #[test]
    fn global_frequency_switches_where_their_files_are() {
        let epyc = fixture("epyc-4ccx");
        let boost = get(&epyc, "cpufreq.boost");
        assert_eq!(boost.name(), "cpufreq.boost");
        assert_eq!(boost.about(), "frequency boost (turbo) on or off");
        assert_eq!(boost.current().unwrap(), "1");
        assert_eq!(boost.validate("off").unwrap(), "0");
        assert_eq!(boost.availability(), Availability::Changeable);
        assert_eq!(boost.subject(), Subject::Frequency);
        assert_eq!(
            boost.permanent("0"),
            Permanent {
                form: "tuned profile".into(),
                file: Some("/etc/tuned/cpulab/tuned.conf".into()),
                text: "[main]\ninclude=throughput-performance\n\n[cpu]\nboost=0\n".into(),
            }
        );
        let intel = fixture("intel-2s");
        let no_turbo = get(&intel, "intel_pstate.no_turbo");
        assert_eq!(no_turbo.about(), "intel_pstate turbo off (1) or on (0)");
        assert_eq!(no_turbo.current().unwrap(), "0");
        assert_eq!(no_turbo.validate("on").unwrap(), "1");
        assert!(
            no_turbo
                .permanent("1")
                .text
                .ends_with("\n[cpu]\nno_turbo=1\n")
        );
        assert_eq!(
            get(&intel, "cpufreq.boost").availability(),
            Availability::NotHere(format!(
                "no {} (cpufreq is not exposed here; inside a VM the host controls frequency)",
                intel.path("sys/devices/system/cpu/cpufreq/boost").display()
            ))
        );
        let pct = get(&intel, "intel_pstate.min_perf_pct");
        assert_eq!(pct.about(), "intel_pstate lowest performance, % of maximum");
        assert_eq!(pct.validate("100").unwrap(), "100");
        assert!(pct.validate("101").is_err());
        assert!(matches!(pct.availability(), Availability::NotHere(_)));
        assert!(missing(&intel, "no.such.setting"));
    }

    #[test]
    fn the_catalogue_lists_this_machines_sysctls_in_order() {
        let names: Vec<String> = catalogue(&fixture("intel-2s"))
            .iter()
            .map(|s| s.name())
            .collect();
        let kernel: Vec<&str> = names
            .iter()
            .filter(|n| n.starts_with("kernel."))
            .map(String::as_str)
            .collect();
        assert_eq!(
            kernel,
            [
                "kernel.sched_autogroup_enabled",
                "kernel.sched_cfs_bandwidth_slice_us",
                "kernel.sched_child_runs_first",
                "kernel.sched_rr_timeslice_ms",
                "kernel.sched_rt_period_us",
                "kernel.sched_rt_runtime_us",
                "kernel.sched_schedstats",
            ]
        );
        for n in [
            "haltpoll.guest_halt_poll_ns",
            "cpuidle_haltpoll.force",
            "cpufreq.boost",
            "intel_pstate.no_turbo",
            "smt.control",
            "sched.migration_cost_ns",
            "sched.tunable_scaling",
        ] {
            assert!(names.iter().any(|m| m == n), "{n} not in {names:?}");
        }
    }

    #[test]
    fn cpus_after_at_must_be_online() {
        let online = CpuSet::parse_list("0-3", false).unwrap();
        let (v, cpus) = split_cpus("0@1-2", &online).unwrap();
        assert_eq!((v.as_str(), cpus.to_string()), ("0", "1-2".to_string()));
        let (v, cpus) = split_cpus("50", &online).unwrap();
        assert_eq!((v.as_str(), cpus), ("50", online.clone()));
        let e = split_cpus("0@2-5", &online).unwrap_err();
        assert!(format!("{e:#}").contains("not online here (online: 0-3)"));
        assert!(split_cpus("0@x", &online).is_err());
        assert_eq!(online_cpus_of("intel-2s"), "0-31");
        assert_eq!(online_cpus_of("kvm-guest"), "0-1");
    }

    fn online_cpus_of(name: &str) -> String {
        online(&fixture(name)).to_string()
    }

    #[test]
    fn cgroup_files_check_and_persist_their_values() {
        let d = tree(&[
            ("sys/devices/system/cpu/online", "0-3\n"),
            ("sys/fs/cgroup/app.slice/cpu.max", "max 100000\n"),
            ("sys/fs/cgroup/app.slice/cpu.weight", "100\n"),
            ("sys/fs/cgroup/system.slice/db.service/cpuset.cpus", "\n"),
            ("sys/fs/cgroup/cpu/batch/cpu.cfs_quota_us", "-1\n"),
        ]);
        let r = Roots::new(d.path(), None);
        let max = CgroupFile::lookup(&r, "/app.slice/:cpu.max").unwrap();
        assert_eq!(max.name(), "cgroup:app.slice:cpu.max");
        assert_eq!(max.about(), "cpu.max of cgroup app.slice");
        assert_eq!(max.current().unwrap(), "max 100000");
        assert_eq!(max.availability(), Availability::Changeable);
        assert_eq!(max.cost(), Cost::Unmeasured);
        assert_eq!(max.subject(), Subject::Scheduler);
        let path = d.path().join("sys/fs/cgroup/app.slice/cpu.max");
        assert_eq!(max.plan("max").unwrap(), vec![Op::file(path, "max")]);
        for ok in ["max", "max 100000", "50000", "1 1", "50000 100000"] {
            assert_eq!(max.validate(ok).unwrap(), ok, "{ok}");
        }
        for bad in [
            "",
            "0",
            "0 100000",
            "50000 0",
            "-1",
            "50000 100000 7",
            "max x",
        ] {
            assert!(max.validate(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            max.permanent("50000 100000"),
            Permanent {
                form: "systemd drop-in".into(),
                file: Some("/etc/systemd/system/app.slice.d/cpulab.conf".into()),
                text: "[Slice]\nCPUQuota=50%\n".into(),
            }
        );
        assert_eq!(max.permanent("25000").text, "[Slice]\nCPUQuota=25%\n");
        assert_eq!(max.permanent("max").text, "[Slice]\nCPUQuota=\n");

        let weight = CgroupFile::lookup(&r, "app.slice:cpu.weight").unwrap();
        for ok in ["1", "100", "10000"] {
            assert_eq!(weight.validate(ok).unwrap(), ok);
        }
        for bad in ["0", "10001", "x"] {
            assert!(weight.validate(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(weight.permanent("200").text, "[Slice]\nCPUWeight=200\n");

        let cpus = CgroupFile::lookup(&r, "system.slice/db.service:cpuset.cpus").unwrap();
        assert_eq!(cpus.validate("3,0-1").unwrap(), "0-1,3");
        let e = cpus.validate("2-5").unwrap_err();
        assert!(format!("{e:#}").contains("names CPUs that are not online (0-3)"));
        assert_eq!(
            cpus.permanent("0-1"),
            Permanent {
                form: "systemd drop-in".into(),
                file: Some("/etc/systemd/system/db.service.d/cpulab.conf".into()),
                text: "[Service]\nAllowedCPUs=0-1\n".into(),
            }
        );

        let quota = CgroupFile::lookup(&r, "batch:cpu.cfs_quota_us").unwrap();
        assert_eq!(quota.validate("-1").unwrap(), "-1");
        assert!(quota.validate("max").is_err());
        assert_eq!(quota.permanent("50000").form, "systemd unit");
        let e = CgroupFile::lookup(&r, "other:cpu.cfs_period_us")
            .err()
            .unwrap();
        assert!(format!("{e:#}").contains("is it cgroup v1?"));
        assert!(CgroupFile::lookup(&r, "app.slice").is_err());
    }
}
