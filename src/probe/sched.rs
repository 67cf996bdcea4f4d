//! Scheduler and limits: the kernel, its scheduler tunables, the tuned profile, and the cgroup
//! quota, weight and cpuset this process runs under.
//!
//! The scheduler decides where a woken task runs and how long a busy one keeps the CPU, so its
//! tunables change wakeup placement (`migration_cost_ns`), slice length (`base_slice_ns` on
//! EEVDF kernels, `sched_min_granularity_ns` before) and whether idle NUMA pages move. Newer
//! kernels keep most of them in debugfs, readable only by root when debugfs is mounted; the
//! probe reads what it can and says why it could not read the rest. A tuned profile may have
//! changed all of this (field notes, case D), so its name is recorded too.

use super::cgroup::{CpuLimits, Layout, Membership, read_cpu_limits};
use super::reading::{Reading, Reason, read_dir_names, read_trim};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The cgroup part of the section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CgroupLimits {
    /// `v1`, `v2` or `hybrid`, from the mounted hierarchies.
    pub version: Option<String>,
    /// This process's groups (`/proc/self/cgroup`).
    pub membership: Reading<Vec<Membership>>,
    /// CPU quota, period, weight or shares, throttling statistics. (The cpuset is in the
    /// topology section, beside the CPUs it restricts.)
    pub cpu: Reading<CpuLimits>,
}

/// The scheduler-and-limits section of the probe.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sched {
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: Reading<String>,
    /// `/proc/sys/kernel/sched_*`, `numa_balancing`, `timer_migration`, by name.
    pub tunables: Reading<BTreeMap<String, Reading<String>>>,
    /// One-line files of `/sys/kernel/debug/sched/` (`base_slice_ns`, `migration_cost_ns`,
    /// `preempt`, ...): root only, and only when debugfs is mounted.
    pub debug_tunables: Reading<BTreeMap<String, String>>,
    /// `/etc/tuned/active_profile`, when tuned is installed.
    pub tuned_profile: Reading<String>,
    /// This process's cgroup CPU limits.
    pub cgroup: CgroupLimits,
}

/// Extra `/proc/sys/kernel` entries beside `sched_*` that change placement.
const EXTRA: &[&str] = &["numa_balancing", "timer_migration"];

fn read_tunables(dir: &Path) -> Reading<BTreeMap<String, Reading<String>>> {
    read_dir_names(dir).map(|names| {
        names
            .into_iter()
            .filter(|n| n.starts_with("sched_") || EXTRA.contains(&n.as_str()))
            .map(|n| {
                let v = read_trim(&dir.join(&n));
                (n, v)
            })
            .collect()
    })
}

/// Reads the one-line files of the debugfs scheduler directory. `debug` (a dump of every
/// runqueue) and multi-line files are skipped.
fn read_debug(dir: &Path) -> Reading<BTreeMap<String, String>> {
    read_dir_names(dir).map(|names| {
        names
            .into_iter()
            .filter(|n| n != "debug" && dir.join(n).is_file())
            .filter_map(|n| {
                let v = read_trim(&dir.join(&n)).into_value()?;
                (!v.contains('\n') && v.len() <= 2000).then_some((n, v))
            })
            .collect()
    })
}

/// The active tuned profile. tuned leaves `active_profile` empty when no profile is active
/// (`tuned-adm off`, or installed and never started): that is no profile, not one named "".
fn tuned_profile(path: &Path) -> Reading<String> {
    read_trim(path).and_then(|name| profile_named(name, path))
}

/// Pure: the trimmed text of `active_profile` to the reading.
fn profile_named(name: String, path: &Path) -> Reading<String> {
    if name.is_empty() {
        return Reading::unavailable(
            Reason::Absent,
            format!("{} is empty: no tuned profile is active", path.display()),
        );
    }
    Reading::Value(name)
}

impl Sched {
    pub fn read(root: &Path, layout: &Layout) -> Self {
        let kernel_dir = root.join("proc/sys/kernel");
        Self {
            kernel: read_trim(&kernel_dir.join("osrelease")),
            tunables: read_tunables(&kernel_dir),
            debug_tunables: read_debug(&root.join("sys/kernel/debug/sched")),
            tuned_profile: tuned_profile(&root.join("etc/tuned/active_profile")),
            cgroup: CgroupLimits {
                version: layout.version().map(str::to_string),
                membership: layout.membership.clone(),
                cpu: read_cpu_limits(layout),
            },
        }
    }

    /// The tightest CFS quota on this process's cgroup or its ancestors, in CPUs.
    pub fn cpu_quota_cpus(&self) -> Option<f64> {
        self.cgroup
            .cpu
            .value()
            .and_then(|c| c.effective_quota.as_ref())
            .map(|(q, _)| *q)
    }

    /// Throttled periods so far, when the cgroup reports them.
    pub fn nr_throttled(&self) -> Option<u64> {
        self.cgroup.cpu.value().and_then(|c| c.nr_throttled)
    }

    /// A scheduler tunable by name from either place (`sched_rr_timeslice_ms`,
    /// `migration_cost_ns`).
    pub fn tunable(&self, name: &str) -> Option<&str> {
        self.tunables
            .value()
            .and_then(|t| t.get(name))
            .and_then(|r| r.value())
            .or_else(|| self.debug_tunables.value().and_then(|d| d.get(name)))
            .map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_active_profile_is_no_profile() {
        let path = Path::new("/etc/tuned/active_profile");
        let none = profile_named(String::new(), path);
        assert_eq!(none.value(), None);
        let Reading::Unavailable { unavailable } = none else {
            unreachable!("an empty file gave a profile")
        };
        assert_eq!(unavailable.reason, Reason::Absent);
        assert!(unavailable.detail.contains("no tuned profile is active"));
        let named = profile_named("virtual-guest".into(), path);
        assert_eq!(named.value().map(String::as_str), Some("virtual-guest"));
    }
}
