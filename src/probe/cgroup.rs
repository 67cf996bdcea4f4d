//! Control groups: which CPUs the cpuset allows, and how much CPU time the quota grants.
//!
//! A container or systemd slice can take CPUs away (cpuset) or time away (CFS quota) without
//! anything inside noticing, and both change placement costs: a quota of 1.5 CPUs on a 2-CPU
//! machine throttles a two-thread client/server pair every period. Which hierarchy holds a
//! controller depends on the machine (cgroup v1, v2, or a hybrid of both), so the mounts are
//! read from `/proc/self/mounts` and this process's groups from `/proc/self/cgroup`, rather
//! than guessed from conventional paths. Quota is also checked up the tree: a parent's limit
//! binds its children.

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
                point: point.replace("\\040", " "),
                options: opts.split(',').map(str::to_string).collect(),
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
    /// The cgroup and cgroup2 lines of `/proc/self/mounts`.
    pub mounts: Vec<Mount>,
}

impl Layout {
    pub fn read(root: &Path) -> Self {
        let membership = read_trim(&root.join("proc/self/cgroup")).map(|t| parse_proc_cgroup(&t));
        let mounts = std::fs::read_to_string(root.join("proc/self/mounts"))
            .map(|t| parse_mounts(&t))
            .unwrap_or_default();
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
        let rel = line.path.trim_start_matches('/');
        let joined = if rel.is_empty() {
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

fn quota_at(dir: &Path, v2: bool) -> (Option<u64>, Option<u64>) {
    let read = |n: &str| std::fs::read_to_string(dir.join(n)).ok();
    if v2 {
        read("cpu.max")
            .and_then(|t| parse_cpu_max(&t))
            .map_or((None, None), |(q, p)| (q, Some(p)))
    } else {
        let q = read("cpu.cfs_quota_us").and_then(|t| t.trim().parse::<i64>().ok());
        let p = read("cpu.cfs_period_us").and_then(|t| t.trim().parse().ok());
        (q.filter(|&q| q > 0).map(|q| q as u64), p)
    }
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
        let ratio = |q: Option<u64>, p: Option<u64>| match (q, p) {
            (Some(q), Some(p)) if p > 0 => Some(q as f64 / p as f64),
            _ => None,
        };
        let mut effective: Option<(f64, String)> = None;
        for cur in g.chain() {
            let (q, p) = quota_at(cur, v2);
            if let Some(r) = ratio(q, p)
                && effective.as_ref().is_none_or(|(e, _)| r < *e)
            {
                effective = Some((r, cur.display().to_string()));
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
