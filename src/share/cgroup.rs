//! What this process's cgroup lets it use: the CFS bandwidth quota and how often it was throttled.
//!
//! A container with `cpu.cfs_quota_us = 50000` per `100000` may use half a CPU per period however
//! many CPUs it can see; past that its threads are stopped until the next period. The symptom
//! looks like a noisy neighbour (throughput falls, nothing else is busy), but the cause is local
//! and the evidence is `nr_throttled` rising during the run. So `share` reads the quota before it
//! models the fair share, and the throttle counters before and after it measures.
//!
//! Parsing is separate from reading: every file format has a pure parser tested on literal text,
//! and the reader takes a root directory so a fixture tree can stand in for `/proc` and `/sys`.
//! cgroup v1 (`cpu.cfs_quota_us`, `cpu.cfs_period_us`, `cpu.stat` with `throttled_time` in ns)
//! and v2 (`cpu.max`, `cpu.stat` with `throttled_usec`) are both understood.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// This process's CPU cgroup and its bandwidth limit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CgroupCpu {
    /// 1 or 2.
    pub version: u8,
    /// The cgroup path as `/proc/self/cgroup` names it.
    pub path: String,
    /// The directory the figures were read from.
    pub dir: PathBuf,
    /// CFS quota per period in microseconds; `None` when unlimited.
    pub quota_us: Option<u64>,
    /// CFS period in microseconds.
    pub period_us: Option<u64>,
    /// quota / period: how many CPUs' worth of time the cgroup may use; `None` when unlimited.
    pub limit_cpus: Option<f64>,
    /// Throttling counters at the time of reading; `None` when `cpu.stat` is unreadable.
    pub stat: Option<CpuStat>,
}

/// Throttling counters of `cpu.stat`.
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
    /// Change from `self` (before) to `after`; saturates at zero.
    pub fn delta(&self, after: &CpuStat) -> ThrottleDelta {
        ThrottleDelta {
            nr_periods: after.nr_periods.saturating_sub(self.nr_periods),
            nr_throttled: after.nr_throttled.saturating_sub(self.nr_throttled),
            throttled_us: after.throttled_us.saturating_sub(self.throttled_us),
        }
    }
}

/// The CPU controller's entry in `/proc/<pid>/cgroup`: (version, path).
pub fn parse_proc_cgroup(text: &str) -> Option<(u8, String)> {
    let mut v2 = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if ctrls.split(',').any(|c| c == "cpu") {
            return Some((1, path.to_string()));
        }
        if ctrls.is_empty() {
            v2 = Some((2, path.to_string()));
        }
    }
    v2
}

/// A cgroup mount from `/proc/<pid>/mountinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupMount {
    /// 1 or 2.
    pub version: u8,
    /// The path inside the hierarchy that is mounted (`/` unless in a namespace or bind mount).
    pub root: String,
    /// Where it is mounted (`/sys/fs/cgroup/cpu`, ...).
    pub mount_point: String,
}

/// The mount holding the CPU controller for `version` (1: a `cgroup` mount whose super options
/// name `cpu`; 2: the `cgroup2` mount).
pub fn parse_mountinfo(text: &str, version: u8) -> Option<CgroupMount> {
    for line in text.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let pre: Vec<&str> = pre.split_whitespace().collect();
        let post: Vec<&str> = post.split_whitespace().collect();
        if pre.len() < 5 || post.len() < 3 {
            continue;
        }
        let wanted = match (version, post[0]) {
            (1, "cgroup") => post[2].split(',').any(|o| o == "cpu"),
            (2, "cgroup2") => true,
            _ => false,
        };
        if wanted {
            return Some(CgroupMount {
                version,
                root: pre[3].to_string(),
                mount_point: pre[4].to_string(),
            });
        }
    }
    None
}

/// v1 `cpu.cfs_quota_us` (`-1` = unlimited).
pub fn parse_v1_quota(text: &str) -> Option<Option<u64>> {
    let v: i64 = text.trim().parse().ok()?;
    Some((v >= 0).then_some(v as u64))
}

/// v2 `cpu.max`: `"max 100000"` or `"50000 100000"` -> (quota, period).
pub fn parse_v2_max(text: &str) -> Option<(Option<u64>, u64)> {
    let mut it = text.split_whitespace();
    let quota = match it.next()? {
        "max" => None,
        q => Some(q.parse().ok()?),
    };
    let period = it.next()?.parse().ok()?;
    Some((quota, period))
}

/// `cpu.stat` of either version (v1 `throttled_time` is in ns, v2 `throttled_usec` in us).
pub fn parse_cpu_stat(text: &str) -> Option<CpuStat> {
    let mut s = CpuStat::default();
    let mut seen = false;
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(k), Some(v)) = (it.next(), it.next().and_then(|v| v.parse::<u64>().ok())) else {
            continue;
        };
        match k {
            "nr_periods" => s.nr_periods = v,
            "nr_throttled" => s.nr_throttled = v,
            "throttled_time" => s.throttled_us = v / 1000,
            "throttled_usec" => s.throttled_us = v,
            _ => continue,
        }
        seen = true;
    }
    seen.then_some(s)
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

impl CgroupCpu {
    /// Finds and reads this process's CPU cgroup below `root` (`/` when live).
    pub fn read(root: &Path) -> Result<Self, String> {
        let proc_cgroup = read(&root.join("proc/self/cgroup"))?;
        let (version, path) = parse_proc_cgroup(&proc_cgroup)
            .ok_or("no cpu controller in /proc/self/cgroup".to_string())?;
        let mountinfo = read(&root.join("proc/self/mountinfo"))?;
        let mount = parse_mountinfo(&mountinfo, version).ok_or(format!(
            "no cgroup v{version} cpu mount in /proc/self/mountinfo"
        ))?;
        // Inside a cgroup namespace the mount root is the namespace's root, and the path is
        // already relative to it; elsewhere strip the mounted subtree from the path.
        let rel = path
            .strip_prefix(mount.root.as_str())
            .unwrap_or(&path)
            .trim_start_matches('/');
        let mount_dir = root.join(mount.mount_point.trim_start_matches('/'));
        let mut dir = if rel.is_empty() {
            mount_dir.clone()
        } else {
            mount_dir.join(rel)
        };
        if !dir.is_dir() {
            // A namespaced view that shows a path the mount does not contain: the mount itself
            // is this process's cgroup.
            dir = mount_dir;
        }
        let (quota_us, period_us) = if version == 1 {
            let q = read(&dir.join("cpu.cfs_quota_us"))
                .ok()
                .and_then(|t| parse_v1_quota(&t));
            let p = read(&dir.join("cpu.cfs_period_us"))
                .ok()
                .and_then(|t| t.trim().parse().ok());
            (q.flatten(), p)
        } else {
            match read(&dir.join("cpu.max"))
                .ok()
                .and_then(|t| parse_v2_max(&t))
            {
                Some((q, p)) => (q, Some(p)),
                None => (None, None),
            }
        };
        let limit_cpus = match (quota_us, period_us) {
            (Some(q), Some(p)) if p > 0 => Some(q as f64 / p as f64),
            _ => None,
        };
        let stat = Self::read_stat_at(&dir);
        Ok(Self {
            version,
            path,
            dir,
            quota_us,
            period_us,
            limit_cpus,
            stat,
        })
    }

    fn read_stat_at(dir: &Path) -> Option<CpuStat> {
        read(&dir.join("cpu.stat"))
            .ok()
            .and_then(|t| parse_cpu_stat(&t))
    }

    /// Reads the throttling counters again (for the "after" side of a delta).
    pub fn read_stat(&self) -> Option<CpuStat> {
        Self::read_stat_at(&self.dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_cgroup_v1_and_v2() {
        let v1 = "4:memory:/x\n2:cpuacct,cpu:/docker/abc\n0::/\n";
        assert_eq!(parse_proc_cgroup(v1), Some((1, "/docker/abc".to_string())));
        assert_eq!(
            parse_proc_cgroup("0::/user.slice/session-1.scope\n"),
            Some((2, "/user.slice/session-1.scope".to_string()))
        );
        assert_eq!(parse_proc_cgroup("3:cpuset:/\n"), None);
    }

    #[test]
    fn mountinfo_finds_the_cpu_controller() {
        let text = "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n\
                    33 31 0:30 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n\
                    41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        let m = parse_mountinfo(text, 1).unwrap();
        assert_eq!(m.mount_point, "/sys/fs/cgroup/cpu");
        assert_eq!(
            parse_mountinfo(text, 2).unwrap().mount_point,
            "/sys/fs/cgroup/unified"
        );
        let joint =
            "30 25 0:26 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro - cgroup cgroup rw,cpu,cpuacct\n";
        assert_eq!(parse_mountinfo(joint, 1).unwrap().root, "/docker/abc");
    }

    #[test]
    fn quota_files() {
        assert_eq!(parse_v1_quota("-1\n"), Some(None));
        assert_eq!(parse_v1_quota("50000\n"), Some(Some(50000)));
        assert_eq!(parse_v1_quota("x"), None);
        assert_eq!(parse_v2_max("max 100000\n"), Some((None, 100000)));
        assert_eq!(parse_v2_max("150000 100000"), Some((Some(150000), 100000)));
        assert_eq!(parse_v2_max(""), None);
    }

    #[test]
    fn cpu_stat_units() {
        let v1 = "nr_periods 10\nnr_throttled 3\nthrottled_time 4500000\nnr_bursts 0\n";
        let s = parse_cpu_stat(v1).unwrap();
        assert_eq!(
            (s.nr_periods, s.nr_throttled, s.throttled_us),
            (10, 3, 4500)
        );
        let v2 = "usage_usec 1\nnr_periods 7\nnr_throttled 2\nthrottled_usec 900\n";
        let s = parse_cpu_stat(v2).unwrap();
        assert_eq!((s.nr_periods, s.nr_throttled, s.throttled_us), (7, 2, 900));
        let d = s.delta(&CpuStat::default());
        assert_eq!(d.nr_periods, 0, "a reset counter saturates at zero");
    }

    #[test]
    fn reads_a_fixture_tree() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(r.join("proc/self")).unwrap();
        std::fs::write(r.join("proc/self/cgroup"), "0::/box\n").unwrap();
        std::fs::write(
            r.join("proc/self/mountinfo"),
            "41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        )
        .unwrap();
        let d = r.join("sys/fs/cgroup/box");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("cpu.max"), "50000 100000\n").unwrap();
        std::fs::write(
            d.join("cpu.stat"),
            "nr_periods 4\nnr_throttled 1\nthrottled_usec 20\n",
        )
        .unwrap();
        let c = CgroupCpu::read(r).unwrap();
        assert_eq!(c.limit_cpus, Some(0.5));
        assert_eq!(c.stat.unwrap().nr_throttled, 1);
    }
}
