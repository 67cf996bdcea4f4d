//! One trait for every setting `cpulab try` can change, and the one place names are parsed.
//!
//! A setting knows how to read its current value, check a new one against this machine, turn it
//! into exact writes ([`Op`]s: applying is writing them, restoring is writing back the values the
//! journal read before), whether that needs root, whether it would survive a reboot, what it
//! costs and how to make it permanent. The trial loop knows nothing else about it: it applies,
//! measures, restores. Readers and writers take the root path given at construction, so tests
//! run every setting on a copy of a fixture tree.

use super::ops::Op;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Whether a setting can be tried here.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", content = "why", rename_all = "kebab-case")]
pub enum Availability {
    Changeable,
    /// Not exposed on this machine (no cpufreq inside this VM, no SMT, ...).
    NotHere(String),
    /// Fixed at boot or module load: never tried, named with the line that sets it.
    BootOnly(String),
    /// Can be written, but acts on nothing here (a parameter of a driver not in use), and why:
    /// a trial of it can only show that, and says so.
    Inert(String),
}

/// What a change costs, and how `try` measures it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cost {
    /// CPU time in the cpuidle poll state, per second (halt polling, disabled idle states).
    PollTime,
    /// The CPU time a process takes, per second.
    ProcessCpu { pid: i32 },
    /// Nothing cpulab can measure.
    Unmeasured,
}

/// What `try` measures by default for a setting (`--measure` picks another).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Subject {
    /// Idle and halt polling: pingpong on every placement class plus unpinned.
    Wakeup,
    /// Scheduler knobs: unpinned pingpong.
    Scheduler,
    /// Frequency: oscost (OS primitives and the effective-frequency ramp).
    Frequency,
    /// A live process: its context switches and CPU time.
    Process { pid: i32 },
}

/// How to make a change permanent: exact text cpulab prints and never writes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permanent {
    /// `kernel command line`, `sysctl.d file`, `tuned profile`, `systemd drop-in`, `systemd unit`.
    pub form: String,
    /// Where the text goes (`/etc/sysctl.d/90-cpulab.conf`), when it is a file.
    pub file: Option<String>,
    pub text: String,
}

/// One setting.
pub trait Setting: Send + Sync {
    /// The name users type (`haltpoll.guest_halt_poll_ns`).
    fn name(&self) -> String;
    /// One line about it for `--list`.
    fn about(&self) -> String;
    /// Its value now, as `try` would write it back.
    fn current(&self) -> Result<String>;
    /// Whether it can be changed here, and why not.
    fn availability(&self) -> Availability;
    /// Checks a new value against this machine: the normalised value, or one line (bad input).
    fn validate(&self, value: &str) -> Result<String>;
    /// The exact writes that apply a validated value. Restoring writes back what the journal
    /// read from the same targets before the first write.
    fn plan(&self, value: &str) -> Result<Vec<Op>>;
    /// Whether changing it needs root.
    fn needs_root(&self) -> bool {
        true
    }
    /// Whether a change would survive a reboot (none of cpulab's do: it writes live values only).
    fn survives_reboot(&self) -> bool {
        false
    }
    fn cost(&self) -> Cost;
    fn subject(&self) -> Subject;
    /// How to make `value` permanent.
    fn permanent(&self, value: &str) -> Permanent;
}

/// A setting with the value to try, validated.
pub struct Change {
    pub setting: Box<dyn Setting>,
    pub value: String,
    /// Where the change came from (`tuned:latency-performance`), if it was expanded.
    pub from: Option<String>,
}

impl std::fmt::Debug for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.setting.name(), self.value)
    }
}

/// Where settings are read: the root of /sys and /proc, and tuned's profile directories.
#[derive(Clone, Debug)]
pub struct Roots {
    pub root: PathBuf,
    pub profile_dirs: Vec<PathBuf>,
}

impl Roots {
    pub fn new(root: &Path, profile_dir: Option<&Path>) -> Self {
        let mut profile_dirs: Vec<PathBuf> =
            profile_dir.map(Path::to_path_buf).into_iter().collect();
        profile_dirs.push(root.join("etc/tuned"));
        profile_dirs.push(root.join("usr/lib/tuned"));
        profile_dirs.push(root.join("usr/lib/tuned/profiles"));
        Self {
            root: root.to_path_buf(),
            profile_dirs,
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel.trim_start_matches('/'))
    }
}
