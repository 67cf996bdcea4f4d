//! Control groups: which CPUs the cpuset allows, and how much CPU time the quota grants.
//!
//! A container or systemd slice can take CPUs away (cpuset) or time away (CFS quota) without
//! anything inside noticing, and both change placement costs: a quota of 1.5 CPUs on a 2-CPU
//! machine throttles a two-thread client/server pair every period. Which hierarchy holds a
//! controller depends on the machine (cgroup v1, v2, or a hybrid of both), so the mounts are
//! read from `/proc/self/mountinfo` (or `/proc/self/mounts` where only that exists) and this
//! process's groups from `/proc/self/cgroup`, rather than guessed from conventional paths.
//! Quota is also checked up the tree: a parent's limit binds its children.
//!
//! This is the one reader of cgroup limits in cpulab: `probe`, `doctor` and `share` all read
//! the quota and the throttling counters here, so they cannot disagree in one run (they did
//! when `share` had its own parser that ignored the parents' quotas).

use super::reading::{Reading, Reason, from_io, read_parsed, read_trim};
use crate::cpulist::CpuSet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One line of `/proc/self/cgroup`: `id:controllers:path`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Membership {
    /// Hierarchy ID (0 is the v2 unified hierarchy).
    pub hierarchy: u32,
    /// Controllers of a v1 hierarchy; empty for the v2 unified one.
    pub controllers: Vec<String>,
    /// This process's group path within the hierarchy.
    pub path: String,
}

/// A mounted cgroup hierarchy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub v2: bool,
    /// The path inside the hierarchy that is mounted: `/` unless a cgroup namespace or a bind
    /// mount shows only a subtree (only `mountinfo` tells; `mounts` gives `/`).
    pub root: String,
    /// Where it is mounted.
    pub point: String,
    /// Mount options; for v1 these name the controllers (`cpu`, `cpuset`).
    pub options: Vec<String>,
}

pub fn parse_proc_cgroup(text: &str) -> Vec<Membership> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            let hierarchy = it.next()?.trim().parse().ok()?;
            let controllers = it.next()?;
            let path = it.next()?.to_string();
            let controllers = controllers
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect();
            Some(Membership {
                hierarchy,
                controllers,
                path,
            })
        })
        .collect()
}

/// A systemd unit's name: a `.service` or `.scope` path component.
pub fn unit_component(part: &str) -> Option<&str> {
    (part.ends_with(".service") || part.ends_with(".scope")).then_some(part)
}

/// The innermost systemd unit of a cgroup path (`/system.slice/postgresql@15-main.service`).
pub fn innermost_unit(path: &str) -> Option<&str> {
    path.split('/').rev().find_map(unit_component)
}

/// The systemd unit a process runs in (pure): the innermost unit of the hierarchy systemd
/// manages, the v1 `name=systemd` one where it exists (a hybrid layout), else the unified one.
pub fn systemd_unit(m: &[Membership]) -> Option<String> {
    let named = m
        .iter()
        .find(|l| l.controllers.iter().any(|c| c == "name=systemd"));
    let unified = m
        .iter()
        .find(|l| l.hierarchy == 0 && l.controllers.is_empty());
    named
        .or(unified)
        .and_then(|l| innermost_unit(&l.path))
        .map(str::to_string)
}

pub fn parse_mounts(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (point, fstype, opts) = (f.get(1)?, f.get(2)?, f.get(3)?);
            let v2 = match *fstype {
                "cgroup2" => true,
                "cgroup" => false,
                _ => return None,
            };
            Some(Mount {
                v2,
                root: "/".to_string(),
                point: point.replace("\\040", " "),
                options: opts.split(',').map(str::to_string).collect(),
            })
        })
        .collect()
}

/// The cgroup and cgroup2 lines of `/proc/self/mountinfo`. Unlike `mounts` these carry the
/// mounted subtree (field 4), which inside a cgroup namespace or a bind mount is not `/`.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let pre: Vec<&str> = pre.split_whitespace().collect();
            let post: Vec<&str> = post.split_whitespace().collect();
            let (root, point) = (pre.get(3)?, pre.get(4)?);
            let v2 = match *post.first()? {
                "cgroup2" => true,
                "cgroup" => false,
                _ => return None,
            };
            Some(Mount {
                v2,
                root: root.replace("\\040", " "),
                point: point.replace("\\040", " "),
                options: post.get(2)?.split(',').map(str::to_string).collect(),
            })
        })
        .collect()
}

/// Parses `cpu.max` (v2): `max 100000` or `150000 100000` into (quota_us, period_us).
pub fn parse_cpu_max(text: &str) -> Option<(Option<u64>, u64)> {
    let mut it = text.split_whitespace();
    let quota = match it.next()? {
        "max" => None,
        q => Some(q.parse().ok()?),
    };
    Some((quota, it.next()?.parse().ok()?))
}

/// Parses a flat keyed file such as `cpu.stat` (`nr_periods 12`).
pub fn parse_flat_keyed(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// Where this process's cgroups are, as read under a root.
#[derive(Clone, Debug)]
pub struct Layout {
    /// The root directory read under.
    pub root: PathBuf,
    /// `/proc/self/cgroup`, parsed.
    pub membership: Reading<Vec<Membership>>,
    /// The cgroup and cgroup2 mounts, from `/proc/self/mountinfo` or `/proc/self/mounts`.
    pub mounts: Vec<Mount>,
}

impl Layout {
    pub fn read(root: &Path) -> Self {
        let membership = read_trim(&root.join("proc/self/cgroup")).map(|t| parse_proc_cgroup(&t));
        let mounts = match std::fs::read_to_string(root.join("proc/self/mountinfo")) {
            Ok(t) => parse_mountinfo(&t),
            Err(_) => std::fs::read_to_string(root.join("proc/self/mounts"))
                .map(|t| parse_mounts(&t))
                .unwrap_or_default(),
        };
        Self {
            root: root.to_path_buf(),
            membership,
            mounts,
        }
    }

    /// `v1`, `v2`, or `hybrid` (v1 controllers beside a v2 mount), from the mounts.
    pub fn version(&self) -> Option<&'static str> {
        let v1 = self.mounts.iter().any(|m| !m.v2);
        let v2 = self.mounts.iter().any(|m| m.v2);
        match (v1, v2) {
            (true, true) => Some("hybrid"),
            (true, false) => Some("v1"),
            (false, true) => Some("v2"),
            (false, false) => None,
        }
    }

    /// The directory of this process's group for `controller`, and whether it is v2. A v1
    /// hierarchy that carries the controller wins; otherwise the unified one. When the joined
    /// path does not exist (a container whose mount is already its own group), the mount point
    /// itself is used.
    pub fn dir_for(&self, controller: &str) -> Reading<GroupDir> {
        let Some(members) = self.membership.value() else {
            return self.membership.clone().map(|_| GroupDir::default());
        };
        let v1 = self
            .mounts
            .iter()
            .find(|m| !m.v2 && m.options.iter().any(|o| o == controller))
            .and_then(|m| {
                let line = members
                    .iter()
                    .find(|l| l.controllers.iter().any(|c| c == controller))?;
                Some((m, line))
            });
        let v2 = || {
            let m = self.mounts.iter().find(|m| m.v2)?;
            let line = members
                .iter()
                .find(|l| l.hierarchy == 0 && l.controllers.is_empty())?;
            Some((m, line))
        };
        let Some((mount, line)) = v1.or_else(v2) else {
            return Reading::unavailable(
                Reason::Absent,
                format!("no cgroup hierarchy with the {controller} controller is mounted"),
            );
        };
        let base = self.root.join(mount.point.trim_start_matches('/'));
        // A mount of a subtree (bind mount, or a namespace seen from outside): the group path
        // is relative to the hierarchy's root, so strip the part the mount already is, whole
        // components only (a mount of `/a` does not hold `/ab`).
        let path = Path::new(&line.path);
        let rel = path.strip_prefix(&mount.root).unwrap_or(path);
        let rel = rel.strip_prefix("/").unwrap_or(rel);
        // A group outside this namespace's root (`/..`, as the kernel writes it there) is not
        // below the mount: the mount is the nearest group this process can see.
        let outside = rel
            .components()
            .any(|c| c == std::path::Component::ParentDir);
        let joined = if rel.as_os_str().is_empty() || outside {
            base.clone()
        } else {
            base.join(rel)
        };
        let dir = if joined.is_dir() {
            joined
        } else {
            base.clone()
        };
        Reading::Value(GroupDir {
            dir,
            mount: base,
            v2: mount.v2,
        })
    }
}

/// This process's group directory for one controller.
#[derive(Clone, Debug, Default)]
pub struct GroupDir {
    /// This process's group directory.
    pub dir: PathBuf,
    /// The hierarchy's mount point: walks up the tree stop here.
    pub mount: PathBuf,
    pub v2: bool,
}

impl GroupDir {
    /// The group and its ancestors up to the hierarchy's root, nearest first.
    pub fn chain(&self) -> impl Iterator<Item = &Path> {
        self.dir
            .ancestors()
            .take_while(move |p| p.starts_with(&self.mount))
    }
}

/// The cpuset that bounds this process's CPUs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cpuset {
    /// The CPUs the cgroup allows.
    pub cpus: CpuSet,
    /// The file it was read from.
    pub file: String,
}

/// Reads the effective cpuset: v1 `cpuset.effective_cpus` (or `cpuset.cpus`), v2
/// `cpuset.cpus.effective` from this group or the nearest ancestor that has it.
pub fn read_cpuset(layout: &Layout) -> Reading<Cpuset> {
    layout.dir_for("cpuset").and_then(|g| {
        let names: &[&str] = if g.v2 {
            &["cpuset.cpus.effective"]
        } else {
            &["cpuset.effective_cpus", "cpuset.cpus"]
        };
        for d in g.chain() {
            for n in names {
                let p = d.join(n);
                if p.exists() {
                    return read_parsed(&p, |t| CpuSet::parse_list(t, true).ok()).map(|cpus| {
                        Cpuset {
                            cpus,
                            file: p.display().to_string(),
                        }
                    });
                }
            }
        }
        Reading::unavailable(
            Reason::Absent,
            format!("{} in {} or its parents", names[0], g.dir.display()),
        )
    })
}

/// CPU time limits of this process's cgroup.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuLimits {
    /// `v1` or `v2`.
    pub version: String,
    /// The cgroup directory read.
    pub dir: String,
    /// CFS quota per period in microseconds; `None` when unlimited.
    pub quota_us: Option<u64>,
    /// CFS period in microseconds.
    pub period_us: Option<u64>,
    /// Quota as a number of CPUs (quota / period); `None` when unlimited.
    pub quota_cpus: Option<f64>,
    /// The tightest quota on this group or any ancestor, in CPUs, with the group that sets it.
    pub effective_quota: Option<(f64, String)>,
    /// v2 `cpu.weight` (1-10000, default 100).
    pub weight: Option<u64>,
    /// v1 `cpu.shares` (default 1024).
    pub shares: Option<u64>,
    /// `cpu.stat` as the kernel names it (v1 `throttled_time` is in ns, v2 `throttled_usec` in
    /// us). Cumulative since the group was created.
    pub stat: BTreeMap<String, u64>,
    /// Periods in which the group ran out of quota, from `nr_throttled`.
    pub nr_throttled: Option<u64>,
    /// Total time throttled, in nanoseconds, whichever version reported it.
    pub throttled_ns: Option<u64>,
}

/// v1 `cpu.cfs_quota_us` (`-1` = unlimited) into the quota in microseconds (pure).
pub fn parse_v1_quota(text: &str) -> Option<Option<u64>> {
    let v: i64 = text.trim().parse().ok()?;
    Some((v > 0).then_some(v as u64))
}

/// (quota_us, period_us) set on one group directory.
fn quota_at(dir: &Path, v2: bool) -> (Option<u64>, Option<u64>) {
    let read = |n: &str| std::fs::read_to_string(dir.join(n)).ok();
    if v2 {
        read("cpu.max")
            .and_then(|t| parse_cpu_max(&t))
            .map_or((None, None), |(q, p)| (q, Some(p)))
    } else {
        let q = read("cpu.cfs_quota_us").and_then(|t| parse_v1_quota(&t));
        let p = read("cpu.cfs_period_us").and_then(|t| t.trim().parse().ok());
        (q.flatten(), p)
    }
}

fn ratio(q: Option<u64>, p: Option<u64>) -> Option<f64> {
    match (q, p) {
        (Some(q), Some(p)) if p > 0 => Some(q as f64 / p as f64),
        _ => None,
    }
}

/// The CFS quota that binds a group: its own or an ancestor's, whichever grants fewer CPUs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Quota {
    /// Quota per period in microseconds, as the binding group sets it.
    pub quota_us: u64,
    /// Period in microseconds, as the binding group sets it.
    pub period_us: u64,
    /// quota / period: how many CPUs' worth of time the group may use.
    pub cpus: f64,
    /// The group directory that sets it (this group or an ancestor).
    pub dir: PathBuf,
}

/// The tightest quota on `g` or any ancestor up to the hierarchy's root; `None` when unlimited.
pub fn tightest_quota(g: &GroupDir) -> Option<Quota> {
    let mut best: Option<Quota> = None;
    for cur in g.chain() {
        let (q, p) = quota_at(cur, g.v2);
        if let (Some(cpus), Some(quota_us), Some(period_us)) = (ratio(q, p), q, p)
            && best.as_ref().is_none_or(|b| cpus < b.cpus)
        {
            best = Some(Quota {
                quota_us,
                period_us,
                cpus,
                dir: cur.to_path_buf(),
            });
        }
    }
    best
}

/// Throttling counters of `cpu.stat`, in one unit whichever version wrote them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuStat {
    /// Enforcement periods that elapsed with runnable tasks in the cgroup.
    pub nr_periods: u64,
    /// Periods in which the cgroup hit its quota and was throttled.
    pub nr_throttled: u64,
    /// Total time the cgroup's tasks spent throttled, in microseconds.
    pub throttled_us: u64,
}

/// Throttling during a measured interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThrottleDelta {
    /// Enforcement periods that elapsed with runnable tasks.
    pub nr_periods: u64,
    /// Periods in which the quota ran out and the cgroup was throttled.
    pub nr_throttled: u64,
    /// Time spent throttled during the interval, in microseconds (summed over the cgroup's CPUs).
    pub throttled_us: u64,
}

impl CpuStat {
    /// The counters of a parsed `cpu.stat` (v1 `throttled_time` is in ns, v2 `throttled_usec`
    /// in us); `None` when it has none of them.
    pub fn from_keyed(stat: &BTreeMap<String, u64>) -> Option<Self> {
        let throttled_us = stat
            .get("throttled_usec")
            .copied()
            .or_else(|| stat.get("throttled_time").map(|ns| ns / 1000));
        let (p, t) = (stat.get("nr_periods"), stat.get("nr_throttled"));
        if p.is_none() && t.is_none() && throttled_us.is_none() {
            return None;
        }
        Some(Self {
            nr_periods: p.copied().unwrap_or(0),
            nr_throttled: t.copied().unwrap_or(0),
            throttled_us: throttled_us.unwrap_or(0),
        })
    }

    /// Change from `self` (before) to `after`; saturates at zero.
    pub fn delta(&self, after: &CpuStat) -> ThrottleDelta {
        ThrottleDelta {
            nr_periods: after.nr_periods.saturating_sub(self.nr_periods),
            nr_throttled: after.nr_throttled.saturating_sub(self.nr_throttled),
            throttled_us: after.throttled_us.saturating_sub(self.throttled_us),
        }
    }
}

/// Parses `cpu.stat` of either version (pure).
pub fn parse_cpu_stat(text: &str) -> Option<CpuStat> {
    CpuStat::from_keyed(&parse_flat_keyed(text))
}

/// Reads the throttling counters of one group directory (again, for the "after" of a delta).
pub fn read_cpu_stat(dir: &Path) -> Option<CpuStat> {
    std::fs::read_to_string(dir.join("cpu.stat"))
        .ok()
        .and_then(|t| parse_cpu_stat(&t))
}

/// Reads quota, period, weight or shares and throttling statistics.
pub fn read_cpu_limits(layout: &Layout) -> Reading<CpuLimits> {
    layout.dir_for("cpu").and_then(|g| {
        let (dir, v2) = (&g.dir, g.v2);
        let stat_path = dir.join("cpu.stat");
        let stat = match std::fs::read_to_string(&stat_path) {
            Ok(t) => parse_flat_keyed(&t),
            Err(e) if !v2 => return from_io(&stat_path, &e),
            Err(_) => BTreeMap::new(),
        };
        let (quota_us, period_us) = quota_at(dir, v2);
        let effective = tightest_quota(&g).map(|q| (q.cpus, q.dir.display().to_string()));
        let num = |n: &str| {
            std::fs::read_to_string(dir.join(n))
                .ok()
                .and_then(|t| t.trim().parse().ok())
        };
        let throttled_ns = stat
            .get("throttled_usec")
            .map(|u| u * 1000)
            .or_else(|| stat.get("throttled_time").copied());
        Reading::Value(CpuLimits {
            version: if v2 { "v2" } else { "v1" }.to_string(),
            dir: dir.display().to_string(),
            quota_us,
            period_us,
            quota_cpus: ratio(quota_us, period_us),
            effective_quota: effective,
            weight: if v2 { num("cpu.weight") } else { None },
            shares: if v2 { None } else { num("cpu.shares") },
            nr_throttled: stat.get("nr_throttled").copied(),
            throttled_ns,
            stat,
        })
    })
}

/// Below this a v1 `memory.limit_in_bytes` is a limit; the kernel writes "unlimited" as the
/// largest page-aligned `i64` (9223372036854771712 with 4 KiB pages), far above it.
const V1_UNLIMITED: u64 = 1 << 62;

/// Parses a cgroup memory limit (pure): v2 `memory.max` (`max` is no limit) or v1
/// `memory.limit_in_bytes` (its "unlimited", near 2^63, is no limit). `None` when it is neither.
pub fn parse_memory_limit(text: &str) -> Option<Option<u64>> {
    match text.trim() {
        "max" => Some(None),
        t => t
            .parse::<u64>()
            .ok()
            .map(|v| (v < V1_UNLIMITED).then_some(v)),
    }
}

/// A memory limit on this process's group or an ancestor, and what the group uses under it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryLimit {
    /// The limit in bytes.
    pub limit: u64,
    /// What the group uses now, page cache included (v2 `memory.current`, v1
    /// `memory.usage_in_bytes`).
    pub usage: u64,
    /// Of that usage, page cache the kernel reclaims first under the limit (`inactive_file` of
    /// v2 `memory.stat`, `total_inactive_file` of v1's), the part a container's "working set"
    /// leaves out; `None` when `memory.stat` could not be read, and then none is counted.
    pub reclaimable: Option<u64>,
    /// The file that sets the limit: `memory.max`, or v2 `memory.high` when that is lower
    /// (above it the kernel throttles the group and reclaims hard, which a measurement feels
    /// as much as a kill), or v1 `memory.limit_in_bytes`.
    pub file: PathBuf,
}

impl MemoryLimit {
    /// What the group uses that reclaiming page cache would not give back.
    pub fn working_set(&self) -> u64 {
        self.usage.saturating_sub(self.reclaimable.unwrap_or(0))
    }

    /// How much more the group may take before the kernel throttles, reclaims hard or kills in
    /// it: the limit less the working set.
    pub fn room(&self) -> u64 {
        self.limit.saturating_sub(self.working_set())
    }
}

/// The page cache a group's `memory.stat` says is reclaimed first (pure): `total_inactive_file`
/// (v1, the hierarchy's total) or `inactive_file` (v2, which counts descendants already).
pub fn parse_reclaimable(stat: &str) -> Option<u64> {
    let keyed = parse_flat_keyed(stat);
    keyed
        .get("total_inactive_file")
        .or_else(|| keyed.get("inactive_file"))
        .copied()
}

/// The memory limit that leaves this process the least room: its group's or an ancestor's
/// (a parent's limit binds its children). `Value(None)` when no group up to the hierarchy's
/// root sets one (a root group has no limit file, nor does a group whose parent has not
/// enabled the memory controller for it).
pub fn read_memory_limit(layout: &Layout) -> Reading<Option<MemoryLimit>> {
    layout.dir_for("memory").and_then(|g| {
        let on_v1 = layout.membership.value().is_some_and(|m| {
            m.iter()
                .any(|l| l.controllers.iter().any(|c| c == "memory"))
        });
        if g.v2 && on_v1 {
            return Reading::unavailable(
                Reason::Absent,
                "the memory controller's v1 hierarchy is not mounted",
            );
        }
        let (limit_name, usage_name) = if g.v2 {
            ("memory.max", "memory.current")
        } else {
            ("memory.limit_in_bytes", "memory.usage_in_bytes")
        };
        let mut tightest: Option<MemoryLimit> = None;
        for dir in g.chain() {
            // v2 has two limits per group: `memory.high` throttles, `memory.max` kills.
            let mut limit: Option<(u64, PathBuf)> = None;
            for name in std::iter::once(limit_name).chain(g.v2.then_some("memory.high")) {
                let file = dir.join(name);
                if !file.exists() {
                    continue;
                }
                match read_parsed(&file, parse_memory_limit) {
                    Reading::Value(Some(l)) => {
                        if limit.as_ref().is_none_or(|(t, _)| l < *t) {
                            limit = Some((l, file));
                        }
                    }
                    Reading::Value(None) => {}
                    Reading::Unavailable { unavailable } => {
                        return Reading::Unavailable { unavailable };
                    }
                }
            }
            let Some((limit, file)) = limit else {
                continue;
            };
            let usage = match read_parsed(&dir.join(usage_name), |t| t.parse::<u64>().ok()) {
                Reading::Value(usage) => usage,
                Reading::Unavailable { unavailable } => {
                    return Reading::Unavailable { unavailable };
                }
            };
            let reclaimable = read_parsed(&dir.join("memory.stat"), parse_reclaimable).into_value();
            let here = MemoryLimit {
                limit,
                usage,
                reclaimable,
                file,
            };
            if tightest.as_ref().is_none_or(|t| here.room() < t.room()) {
                tightest = Some(here);
            }
        }
        Reading::Value(tightest)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_is_read_from_the_hierarchy_systemd_manages() {
        let v2 = parse_proc_cgroup("0::/system.slice/postgresql@15-main.service\n");
        assert_eq!(
            systemd_unit(&v2).as_deref(),
            Some("postgresql@15-main.service")
        );
        // A hybrid layout: the cpuset hierarchy says nothing, name=systemd names the unit.
        let hybrid =
            parse_proc_cgroup("9:name=systemd:/system.slice/run-r1.scope\n3:cpuset:/\n0::/\n");
        assert_eq!(systemd_unit(&hybrid).as_deref(), Some("run-r1.scope"));
        // A container inside a scope inside a slice: the innermost unit.
        let docker = parse_proc_cgroup("0::/system.slice/docker-0123456789ab.scope/init\n");
        assert_eq!(
            systemd_unit(&docker).as_deref(),
            Some("docker-0123456789ab.scope")
        );
        // The unit tests/remedy.rs makes on a machine without systemd as PID 1: a hybrid
        // layout with the group in name=systemd and the unified hierarchy, nothing elsewhere.
        let made = parse_proc_cgroup(
            "9:name=systemd:/cpulab-test.slice/cpulab-pgtest-812.service\n3:cpuset:/\n\
             0::/cpulab-test.slice/cpulab-pgtest-812.service\n",
        );
        assert_eq!(
            systemd_unit(&made).as_deref(),
            Some("cpulab-pgtest-812.service")
        );
        assert_eq!(systemd_unit(&parse_proc_cgroup("0::/\n")), None);
        assert_eq!(systemd_unit(&parse_proc_cgroup("0::/user.slice\n")), None);
    }

    #[test]
    fn parses_hybrid_membership_and_mounts() {
        let m = parse_proc_cgroup("3:cpuset:/\n1:cpu,cpuacct:/user.slice\n0::/init.scope\n");
        assert_eq!(m.len(), 3);
        assert_eq!(m[1].controllers, vec!["cpu", "cpuacct"]);
        assert_eq!(m[1].path, "/user.slice");
        assert!(m[2].controllers.is_empty());
        let mounts = parse_mounts(
            "tmpfs /sys/fs/cgroup tmpfs rw 0 0\ncgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\ncgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n",
        );
        assert_eq!(mounts.len(), 2);
        assert!(!mounts[0].v2 && mounts[1].v2);
        assert!(mounts[0].options.iter().any(|o| o == "cpu"));
    }

    #[test]
    fn parses_cpu_max_and_stat() {
        assert_eq!(parse_cpu_max("max 100000\n"), Some((None, 100000)));
        assert_eq!(parse_cpu_max("150000 100000"), Some((Some(150000), 100000)));
        assert_eq!(parse_cpu_max("lots"), None);
        let s =
            parse_flat_keyed("usage_usec 10\nnr_periods 5\nnr_throttled 2\nthrottled_usec 300\n");
        assert_eq!(s["nr_throttled"], 2);
        assert_eq!(s["throttled_usec"], 300);
    }

    #[test]
    fn mountinfo_carries_the_mounted_subtree() {
        let text = "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n\
                    33 31 0:30 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n\
                    40 31 0:37 / /tmp rw - tmpfs tmpfs rw\n\
                    41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 3, "tmpfs is not a cgroup mount");
        assert_eq!(m[0].point, "/sys/fs/cgroup/cpu");
        assert!(!m[0].v2 && m[0].options.iter().any(|o| o == "cpu"));
        assert!(m[2].v2 && m[2].point == "/sys/fs/cgroup/unified");
        let joint =
            "30 25 0:26 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro - cgroup cgroup rw,cpu,cpuacct\n";
        assert_eq!(parse_mountinfo(joint)[0].root, "/docker/abc");
    }

    #[test]
    fn quota_files_and_stat_units() {
        assert_eq!(parse_v1_quota("-1\n"), Some(None));
        assert_eq!(parse_v1_quota("50000\n"), Some(Some(50000)));
        assert_eq!(parse_v1_quota("x"), None);
        assert_eq!(parse_cpu_max(""), None);
        let v1 = "nr_periods 10\nnr_throttled 3\nthrottled_time 4500000\nnr_bursts 0\n";
        let s = parse_cpu_stat(v1).unwrap();
        assert_eq!(
            (s.nr_periods, s.nr_throttled, s.throttled_us),
            (10, 3, 4500)
        );
        let v2 = "usage_usec 1\nnr_periods 7\nnr_throttled 2\nthrottled_usec 900\n";
        let s = parse_cpu_stat(v2).unwrap();
        assert_eq!((s.nr_periods, s.nr_throttled, s.throttled_us), (7, 2, 900));
        assert_eq!(parse_cpu_stat("usage_usec 1\n"), None);
        let d = s.delta(&CpuStat::default());
        assert_eq!(d.nr_periods, 0, "a reset counter saturates at zero");
    }

    use crate::testing::tree;

    #[test]
    fn a_namespaced_mount_root_is_stripped_from_the_group_path() {
        let t = tree(&[
            ("proc/self/cgroup", "0::/docker/abc/app\n"),
            (
                "proc/self/mountinfo",
                "41 31 0:38 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
            ),
            ("sys/fs/cgroup/app/cpu.max", "50000 100000\n"),
        ]);
        let l = read_cpu_limits(&Layout::read(t.path()))
            .into_value()
            .unwrap();
        assert!(l.dir.ends_with("sys/fs/cgroup/app"), "{}", l.dir);
        assert_eq!(l.quota_cpus, Some(0.5));
    }

    #[test]
    fn a_group_outside_the_mount_is_never_read_above_it() {
        // Found by tests/parsers.rs: inside a cgroup namespace the kernel writes `/..` for a
        // group outside it, and the directory read was the mount's parent; a mount of
        // `/docker` took `/dockerx/app` for its own `x/app`, stripping the root as text.
        let mount =
            |root: &str| format!("41 31 0:38 {root} /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
        for (group, root) in [("0::/..\n", "/"), ("0::/dockerx/app\n", "/docker")] {
            let t = tree(&[
                ("proc/self/cgroup", group),
                ("proc/self/mountinfo", &mount(root)),
                ("sys/fs/cgroup/cpu.max", "max 100000\n"),
                ("sys/fs/cgroup/x/app/cpu.max", "50000 100000\n"),
            ]);
            let g = Layout::read(t.path()).dir_for("cpu").into_value().unwrap();
            assert_eq!(g.dir, g.mount, "{group}");
        }
    }

    #[test]
    fn memory_limits_of_either_version() {
        assert_eq!(parse_memory_limit("max\n"), Some(None));
        assert_eq!(parse_memory_limit("536870912\n"), Some(Some(536870912)));
        assert_eq!(
            parse_memory_limit("9223372036854771712\n"),
            Some(None),
            "v1's unlimited"
        );
        assert_eq!(parse_memory_limit("-1"), None);
        assert_eq!(parse_memory_limit("lots"), None);
    }

    const V2_MOUNT: &str = "41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";

    #[test]
    fn the_tightest_memory_limit_up_the_tree_binds() {
        // The group's own limit leaves 300 MiB; its parent's, shared with siblings, 100 MiB.
        let t = tree(&[
            ("proc/self/cgroup", "0::/box/app\n"),
            ("proc/self/mountinfo", V2_MOUNT),
            ("sys/fs/cgroup/box/app/memory.max", "524288000\n"),
            ("sys/fs/cgroup/box/app/memory.current", "209715200\n"),
            ("sys/fs/cgroup/box/memory.max", "1073741824\n"),
            ("sys/fs/cgroup/box/memory.current", "968884224\n"),
        ]);
        let l = read_memory_limit(&Layout::read(t.path()))
            .into_value()
            .unwrap()
            .unwrap();
        assert!(l.file.ends_with("sys/fs/cgroup/box/memory.max"), "{l:?}");
        assert_eq!(l.room(), 100 << 20);
        // `max` on the group and no file above it: no limit, which is not "unavailable".
        let t = tree(&[
            ("proc/self/cgroup", "0::/app\n"),
            ("proc/self/mountinfo", V2_MOUNT),
            ("sys/fs/cgroup/app/memory.max", "max\n"),
            ("sys/fs/cgroup/app/memory.current", "4096\n"),
        ]);
        assert_eq!(
            read_memory_limit(&Layout::read(t.path())),
            Reading::Value(None)
        );
    }

    #[test]
    fn page_cache_reclaimed_first_is_room_and_memory_high_is_a_limit() {
        // 400 MiB in use under 512 MiB, 150 MiB of it inactive page cache: 262 MiB of room.
        let stat = "anon 209715200\nfile 209715200\ninactive_file 157286400\n\
                    active_file 52428800\n";
        assert_eq!(parse_reclaimable(stat), Some(150 << 20));
        // v1's own-group figure is not the hierarchy's: the total is the one under the limit.
        assert_eq!(
            parse_reclaimable("inactive_file 1\ntotal_inactive_file 4096\n"),
            Some(4096)
        );
        assert_eq!(parse_reclaimable("anon 4096\n"), None);
        let t = tree(&[
            ("proc/self/cgroup", "0::/app\n"),
            ("proc/self/mountinfo", V2_MOUNT),
            ("sys/fs/cgroup/app/memory.max", "536870912\n"),
            ("sys/fs/cgroup/app/memory.high", "max\n"),
            ("sys/fs/cgroup/app/memory.current", "419430400\n"),
            ("sys/fs/cgroup/app/memory.stat", stat),
        ]);
        let l = read_memory_limit(&Layout::read(t.path()))
            .into_value()
            .unwrap()
            .unwrap();
        assert_eq!((l.working_set(), l.room()), (250 << 20, 262 << 20));
        assert!(l.file.ends_with("app/memory.max"), "{l:?}");
        // A memory.high below memory.max is the limit that binds first.
        let t = tree(&[
            ("proc/self/cgroup", "0::/app\n"),
            ("proc/self/mountinfo", V2_MOUNT),
            ("sys/fs/cgroup/app/memory.max", "max\n"),
            ("sys/fs/cgroup/app/memory.high", "314572800\n"),
            ("sys/fs/cgroup/app/memory.current", "104857600\n"),
        ]);
        let l = read_memory_limit(&Layout::read(t.path()))
            .into_value()
            .unwrap()
            .unwrap();
        assert!(l.file.ends_with("app/memory.high"), "{l:?}");
        // No memory.stat: the page cache is not guessed at, all of the usage counts.
        assert_eq!((l.reclaimable, l.room()), (None, 200 << 20));
    }

    #[test]
    fn an_unreadable_memory_limit_is_not_available_rather_than_none() {
        // A limit whose usage cannot be read: how much room is left is not known.
        let t = tree(&[
            ("proc/self/cgroup", "0::/app\n"),
            ("proc/self/mountinfo", V2_MOUNT),
            ("sys/fs/cgroup/app/memory.max", "1073741824\n"),
        ]);
        let r = read_memory_limit(&Layout::read(t.path()));
        assert_eq!(r.why().map(|u| u.reason), Some(Reason::Absent), "{r:?}");
        // The controller on a v1 hierarchy that is not mounted: the v2 tree says nothing.
        let t = tree(&[
            ("proc/self/cgroup", "4:memory:/box\n0::/\n"),
            ("proc/self/mountinfo", V2_MOUNT),
        ]);
        assert!(read_memory_limit(&Layout::read(t.path())).why().is_some());
        // v1, mounted: its own file names.
        let t = tree(&[
            ("proc/self/cgroup", "4:memory:/box\n0::/\n"),
            (
                "proc/self/mountinfo",
                "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
            ),
            (
                "sys/fs/cgroup/memory/box/memory.limit_in_bytes",
                "268435456\n",
            ),
            (
                "sys/fs/cgroup/memory/box/memory.usage_in_bytes",
                "67108864\n",
            ),
            (
                "sys/fs/cgroup/memory/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
            ("sys/fs/cgroup/memory/memory.usage_in_bytes", "1\n"),
        ]);
        let l = read_memory_limit(&Layout::read(t.path()))
            .into_value()
            .unwrap()
            .unwrap();
        assert_eq!((l.limit, l.room()), (256 << 20, 192 << 20));
    }
}
