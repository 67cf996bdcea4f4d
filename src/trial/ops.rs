//! The writes a trial makes, one kind of target each, and how each is read back.
//!
//! Every setting, however it is named, comes down to a list of [`Op`]s: a target (a file under
//! /sys or /proc, one feature in the debugfs `sched/features` file, one thread's CPU affinity,
//! the debugfs mount itself) and the value to give it. The journal stores targets with their
//! original values, so restoring never needs to know which setting a write belonged to, and
//! the watchdog's `cpulab try --restore` can undo a trial it knows nothing else about.

use crate::cpulist::CpuSet;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Something a trial changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Target {
    /// A sysfs, procfs or debugfs file holding one value.
    File { path: PathBuf },
    /// One feature of the scheduler's `features` file: `on` or `off`.
    SchedFeature { path: PathBuf, feature: String },
    /// The CPU affinity of one thread (`tid` of process `pid`), as a CPU list.
    Affinity { pid: i32, tid: i32 },
    /// debugfs mounted at `path` (`mounted` or `unmounted`); mounted for a trial, unmounted after.
    Mount { path: PathBuf },
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File { path } => write!(f, "{}", path.display()),
            Self::SchedFeature { path, feature } => write!(f, "{} ({feature})", path.display()),
            Self::Affinity { pid, tid } => write!(f, "affinity of thread {tid} of pid {pid}"),
            Self::Mount { path } => write!(f, "debugfs at {}", path.display()),
        }
    }
}

/// One write: a target and the value it should hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    pub target: Target,
    pub value: String,
}

impl Op {
    pub fn file(path: PathBuf, value: impl Into<String>) -> Self {
        Self {
            target: Target::File { path },
            value: value.into(),
        }
    }

    /// The exact write, as a person would type it.
    pub fn shell(&self) -> String {
        match &self.target {
            Target::File { path } => format!(
                "echo {} > {}",
                shell_words::quote(&self.value),
                shell_words::quote(&path.display().to_string())
            ),
            Target::SchedFeature { path, feature } => {
                let word = if self.value == "off" {
                    format!("NO_{feature}")
                } else {
                    feature.clone()
                };
                format!("echo {word} > {}", path.display())
            }
            Target::Affinity { tid, .. } => format!("taskset -p -c {} {tid}", self.value),
            Target::Mount { path } if self.value == "mounted" => {
                format!("mount -t debugfs none {}", path.display())
            }
            Target::Mount { path } => format!("umount {}", path.display()),
        }
    }
}

/// The value a target holds now, in the form [`write`] takes.
pub fn read(target: &Target) -> Result<String> {
    match target {
        Target::File { path } => read_file_value(path),
        Target::SchedFeature { path, feature } => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            feature_state(&text, feature)
                .map(|on| if on { "on" } else { "off" }.to_string())
                .with_context(|| format!("{} does not list feature {feature}", path.display()))
        }
        Target::Affinity { tid, .. } => Ok(crate::affinity::get(*tid)?.to_string()),
        Target::Mount { path } => Ok(if is_debugfs_mounted(path) {
            "mounted"
        } else {
            "unmounted"
        }
        .to_string()),
    }
}

/// Gives `target` the value `value`.
pub fn write(target: &Target, value: &str) -> Result<()> {
    match target {
        Target::File { path } => std::fs::write(path, format!("{value}\n"))
            .with_context(|| format!("cannot write {value:?} to {}", path.display())),
        Target::SchedFeature { path, feature } => {
            let word = if value == "off" {
                format!("NO_{feature}")
            } else {
                feature.clone()
            };
            std::fs::write(path, format!("{word}\n"))
                .with_context(|| format!("cannot write {word} to {}", path.display()))
        }
        Target::Affinity { tid, .. } => {
            let cpus = CpuSet::parse_list(value, false)
                .map_err(|e| anyhow::anyhow!("affinity {value:?}: {e}"))?;
            crate::affinity::set(*tid, &cpus)
                .with_context(|| format!("cannot set the affinity of thread {tid}"))
        }
        Target::Mount { path } => mount(path, value == "mounted"),
    }
}

/// A file's value: its contents, trimmed. A cpufreq or sched file ends in a newline; the
/// value is what is before it.
pub fn read_file_value(path: &Path) -> Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(text.trim().to_string())
}

/// Whether `feature` is on in the text of a `sched/features` file (`GENTLE_FAIR_SLEEPERS
/// NO_HRTICK ...`). `None` when the file does not name it.
pub fn feature_state(text: &str, feature: &str) -> Option<bool> {
    text.split_whitespace().find_map(|w| {
        if w == feature {
            Some(true)
        } else if w.strip_prefix("NO_") == Some(feature) {
            Some(false)
        } else {
            None
        }
    })
}

/// Whether a debugfs is mounted at `path`, from /proc/self/mounts.
pub fn is_debugfs_mounted(path: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts_has_debugfs(&mounts, path)
}

/// [`is_debugfs_mounted`] on the text of a mounts file.
pub fn mounts_has_debugfs(mounts: &str, path: &Path) -> bool {
    mounts.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 3 && f[2] == "debugfs" && Path::new(f[1]) == path
    })
}

fn mount(path: &Path, on: bool) -> Result<()> {
    use nix::mount::{MntFlags, MsFlags};
    if on {
        if is_debugfs_mounted(path) {
            return Ok(());
        }
        nix::mount::mount(
            Some("none"),
            path,
            Some("debugfs"),
            MsFlags::empty(),
            None::<&str>,
        )
        .with_context(|| format!("cannot mount debugfs at {}", path.display()))
    } else {
        if !is_debugfs_mounted(path) {
            return Ok(());
        }
        nix::mount::umount2(path, MntFlags::empty())
            .with_context(|| format!("cannot unmount debugfs at {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_read_on_and_off() {
        let t = "GENTLE_FAIR_SLEEPERS START_DEBIT NO_NEXT_BUDDY TTWU_QUEUE\n";
        assert_eq!(feature_state(t, "TTWU_QUEUE"), Some(true));
        assert_eq!(feature_state(t, "NEXT_BUDDY"), Some(false));
        assert_eq!(feature_state(t, "HRTICK"), None);
    }

    #[test]
    fn mounts_text_finds_debugfs() {
        let m = "sysfs /sys sysfs rw 0 0\ndebugfs /sys/kernel/debug debugfs rw 0 0\n";
        assert!(mounts_has_debugfs(m, Path::new("/sys/kernel/debug")));
        assert!(!mounts_has_debugfs(
            "sysfs /sys sysfs rw 0 0\n",
            Path::new("/sys/kernel/debug")
        ));
    }

    #[test]
    fn writes_are_printed_as_typed() {
        let op = Op::file(
            "/sys/module/haltpoll/parameters/guest_halt_poll_ns".into(),
            "200000",
        );
        assert_eq!(
            op.shell(),
            "echo 200000 > /sys/module/haltpoll/parameters/guest_halt_poll_ns"
        );
        let op = Op::file("/x/cpu.max".into(), "50000 100000");
        assert_eq!(op.shell(), "echo '50000 100000' > /x/cpu.max");
    }

    #[test]
    fn files_round_trip_on_a_copy() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("v");
        std::fs::write(&p, "0\n").unwrap();
        let t = Target::File { path: p };
        assert_eq!(read(&t).unwrap(), "0");
        write(&t, "200000").unwrap();
        assert_eq!(read(&t).unwrap(), "200000");
    }
}
