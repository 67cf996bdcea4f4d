//! What this process's cgroup lets it use: the CFS bandwidth quota and how often it was throttled.
//!
//! A container with `cpu.cfs_quota_us = 50000` per `100000` may use half a CPU per period however
//! many CPUs it can see; past that its threads are stopped until the next period. The symptom
//! looks like a noisy neighbour (throughput falls, nothing else is busy), but the cause is local
//! and the evidence is `nr_throttled` rising during the run. So `share` reads the quota before it
//! models the fair share, and the throttle counters before and after it measures.
//!
//! The reading itself is the probe's ([`crate::probe::cgroup`]): one reader of cgroup limits,
//! so `share` and `doctor` agree, and a parent group's tighter quota binds here too. This module
//! only condenses it into the part of the share report that names the quota.

use crate::probe::cgroup::{self, Layout};
pub use crate::probe::cgroup::{CpuStat, ThrottleDelta};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// This process's CPU cgroup and the bandwidth limit that binds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CgroupCpu {
    /// 1 or 2.
    pub version: u8,
    /// The cgroup path as `/proc/self/cgroup` names it.
    pub path: String,
    /// The directory the throttling counters are read from (this process's group).
    pub dir: PathBuf,
    /// CFS quota per period in microseconds of the group that binds (this one or an ancestor);
    /// `None` when unlimited.
    pub quota_us: Option<u64>,
    /// CFS period in microseconds of the group that binds.
    pub period_us: Option<u64>,
    /// quota / period: how many CPUs' worth of time the cgroup may use; `None` when unlimited.
    /// The tightest over this group and its ancestors, since a parent's quota binds its children.
    pub limit_cpus: Option<f64>,
    /// The group directory whose quota binds; `None` when unlimited. Differs from `dir` when a
    /// parent sets a tighter quota.
    #[serde(default)]
    pub limit_dir: Option<PathBuf>,
    /// Throttling counters at the time of reading; `None` when `cpu.stat` is unreadable.
    pub stat: Option<CpuStat>,
}

impl CgroupCpu {
    /// Finds and reads this process's CPU cgroup below `root` (`/` when live).
    pub fn read(root: &Path) -> Result<Self, String> {
        let layout = Layout::read(root);
        let group = layout
            .dir_for("cpu")
            .into_result()
            .map_err(|u| format!("{}: {}", u.reason.as_str(), u.detail))?;
        let path = layout
            .membership
            .value()
            .and_then(|m| {
                m.iter().find(|l| {
                    if group.v2 {
                        l.hierarchy == 0 && l.controllers.is_empty()
                    } else {
                        l.controllers.iter().any(|c| c == "cpu")
                    }
                })
            })
            .map(|l| l.path.clone())
            .unwrap_or_default();
        let quota = cgroup::tightest_quota(&group);
        Ok(Self {
            version: if group.v2 { 2 } else { 1 },
            path,
            quota_us: quota.as_ref().map(|q| q.quota_us),
            period_us: quota.as_ref().map(|q| q.period_us),
            limit_cpus: quota.as_ref().map(|q| q.cpus),
            limit_dir: quota.map(|q| q.dir),
            stat: cgroup::read_cpu_stat(&group.dir),
            dir: group.dir,
        })
    }

    /// Reads the throttling counters again (for the "after" side of a delta).
    pub fn read_stat(&self) -> Option<CpuStat> {
        cgroup::read_cpu_stat(&self.dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::cgroup::read_cpu_limits;

    use crate::testing::tree;

    #[test]
    fn reads_a_fixture_tree() {
        let t = tree(&[
            ("proc/self/cgroup", "0::/box\n"),
            (
                "proc/self/mountinfo",
                "41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
            ),
            ("sys/fs/cgroup/box/cpu.max", "50000 100000\n"),
            (
                "sys/fs/cgroup/box/cpu.stat",
                "nr_periods 4\nnr_throttled 1\nthrottled_usec 20\n",
            ),
        ]);
        let c = CgroupCpu::read(t.path()).unwrap();
        assert_eq!((c.version, c.path.as_str()), (2, "/box"));
        assert_eq!(c.limit_cpus, Some(0.5));
        assert_eq!(c.stat.unwrap().nr_throttled, 1);
    }

    /// Regression: `share` read only the leaf group's quota while the probe walked up the tree,
    /// so one doctor run could report both "unlimited" and "0.5 CPUs" for the same process.
    #[test]
    fn parent_quota_tighter_than_leaf_binds_probe_and_share() {
        for (mounts, parent, leaf) in [
            (
                "41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
                vec![("sys/fs/cgroup/pod/cpu.max", "50000 100000\n")],
                vec![
                    ("sys/fs/cgroup/pod/app/cpu.max", "200000 100000\n"),
                    ("sys/fs/cgroup/pod/app/cpu.stat", "nr_periods 0\n"),
                ],
            ),
            (
                "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n",
                vec![
                    ("sys/fs/cgroup/cpu/pod/cpu.cfs_quota_us", "50000\n"),
                    ("sys/fs/cgroup/cpu/pod/cpu.cfs_period_us", "100000\n"),
                ],
                vec![
                    ("sys/fs/cgroup/cpu/pod/app/cpu.cfs_quota_us", "-1\n"),
                    ("sys/fs/cgroup/cpu/pod/app/cpu.cfs_period_us", "100000\n"),
                    ("sys/fs/cgroup/cpu/pod/app/cpu.stat", "nr_periods 0\n"),
                ],
            ),
        ] {
            let cgroup = if mounts.contains("cgroup2") {
                "0::/pod/app\n"
            } else {
                "4:cpu:/pod/app\n0::/\n"
            };
            let mut files = vec![
                ("proc/self/cgroup", cgroup),
                ("proc/self/mountinfo", mounts),
            ];
            files.extend(parent);
            files.extend(leaf);
            let t = tree(&files);
            let probe = read_cpu_limits(&Layout::read(t.path()))
                .into_value()
                .unwrap();
            let share = CgroupCpu::read(t.path()).unwrap();
            let (cpus, from) = probe.effective_quota.clone().unwrap();
            assert_eq!(cpus, 0.5, "probe: {probe:?}");
            assert!(from.ends_with("/pod"), "probe names the parent: {from}");
            assert_eq!(share.limit_cpus, Some(cpus), "share: {share:?}");
            assert_eq!(share.limit_dir.as_deref(), Some(Path::new(&from)));
            assert_eq!(
                (share.quota_us, share.period_us),
                (Some(50000), Some(100000))
            );
            assert!(share.dir.ends_with("pod/app"), "counters stay the leaf's");
        }
    }
}
