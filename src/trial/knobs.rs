//! The settings: files that hold one value (module parameters, sysctls, debugfs scheduler
//! knobs, cpufreq, SMT), idle states, scheduler features and a process's affinity.
//!
//! Most settings are one file with a rule for its values ([`FileKnob`]); the ones that span many
//! files (idle states and cpufreq policies on every CPU, every thread of a process) have their own
//! small types. Each is found by [`lookup`] and listed by [`catalogue`].

use super::ops::{Op, Target, read_file_value};
use super::setting::{Availability, Cost, Permanent, Roots, Setting, Subject};
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
}

impl FileKnob {
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
            Persist::Unit => unit(&self.name, value, &self.plan(value).unwrap_or_default()),
        }
    }
}

/// A systemd oneshot unit repeating `ops` at boot: the permanent form of settings the kernel has
/// no boot parameter or sysctl for.
pub fn unit(name: &str, value: &str, ops: &[Op]) -> Permanent {
    let mut text = format!(
        "[Unit]\nDescription=Set {name}={value} (tried with cpulab try)\n\n[Service]\nType=oneshot\n"
    );
    for op in ops {
        text += &format!(
            "ExecStart=/bin/sh -c '{}'\n",
            op.shell().replace('\'', "\"")
        );
    }
    text += "\n[Install]\nWantedBy=multi-user.target\n";
    Permanent {
        form: "systemd unit".into(),
        file: Some("/etc/systemd/system/cpulab-setting.service".into()),
        text,
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
    }
}

/// Finds a setting by name; `Ok(None)` when the name is not one cpulab knows.
pub fn lookup(roots: &Roots, name: &str) -> Result<Option<Box<dyn Setting>>> {
    if let Some(p) = name.strip_prefix("haltpoll.") {
        return Ok(HALTPOLL_PARAMS
            .contains(&p)
            .then(|| Box::new(haltpoll(roots, p)) as Box<dyn Setting>));
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

/// Parses `LIST` in `VALUE@LIST` against the CPUs the machine has (`None`: all of them).
pub fn split_cpus(value: &str, online: &CpuSet) -> Result<(String, CpuSet)> {
    match value.split_once('@') {
        None => Ok((value.to_string(), online.clone())),
        Some((v, list)) => {
            let cpus = CpuSet::parse_list(list, false)
                .map_err(|e| bad_input(format!("CPU list `{list}` after @: {e}")))?;
            if !cpus.is_subset(online) {
                return Err(bad_input(format!(
                    "CPU list `{list}` names CPUs that are not online here (online: {online})"
                )));
            }
            Ok((v.to_string(), cpus))
        }
    }
}

/// The online CPUs under `root`.
pub fn online(roots: &Roots) -> CpuSet {
    read_file_value(&roots.path("sys/devices/system/cpu/online"))
        .ok()
        .and_then(|t| CpuSet::parse_list(&t, false).ok())
        .unwrap_or_default()
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
                return super::knobs::unit(
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
