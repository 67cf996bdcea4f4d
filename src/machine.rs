//! The machine an experiment runs on, and the conditions a result was taken under.
//!
//! Every result carries its [`Conditions`] so a figure can be judged later: what kernel, which
//! CPUs were allowed, whether other load was running when it was taken.

use crate::affinity;
use crate::counters::LoadCheck;
use crate::cpulist::CpuSet;
use crate::topology::Topology;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// This host's name (its `uname` node name), empty when it cannot be read.
pub fn hostname() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.nodename().to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// What every experiment needs to know about the live machine.
#[derive(Clone, Debug)]
pub struct Machine {
    /// Root for /sys and /proc (`/` when live).
    pub root: PathBuf,
    pub topology: Topology,
    /// CPUs this process may use: affinity mask (which includes the cpuset) ∩ online.
    pub allowed: CpuSet,
}

impl Machine {
    /// Reads the live machine. With a fixture root, every online CPU of the fixture counts as
    /// allowed (what `probe` describes); a command that runs work narrows that to what exists
    /// here with [`Machine::measurable_here`].
    pub fn detect(root: &Path) -> Result<Self> {
        let topology = Topology::read(root)?;
        let allowed = if root == Path::new("/") {
            affinity::allowed(&topology)?
        } else {
            topology.online.clone()
        };
        Ok(Self {
            root: root.to_path_buf(),
            topology,
            allowed,
        })
    }

    /// For a command that measures: with a fixture root, narrows `allowed` to the fixture's CPUs
    /// this process may really run on here, so no stage pins to a CPU the fixture lists but this
    /// machine lacks. Returns the fixture's CPUs left out (empty when live or all exist); none
    /// at all is bad input.
    pub fn measurable_here(&mut self) -> Result<CpuSet> {
        if self.root == Path::new("/") {
            return Ok(CpuSet::default());
        }
        let here = affinity::get(0)?;
        let usable = self.allowed.intersection(&here);
        if usable.is_empty() {
            return Err(crate::error::bad_input(format!(
                "the fixture at {} lists CPUs {}, none of which this process may use here ({}); \
                 measure with a fixture whose CPUs include some of {}",
                self.root.display(),
                self.allowed,
                here,
                here
            )));
        }
        let left_out = self.allowed.difference(&usable);
        self.allowed = usable;
        Ok(left_out)
    }

    /// Parses and validates a user CPU list against this machine (exit 2 on failure).
    pub fn cpus(&self, text: &str) -> Result<CpuSet> {
        affinity::parse_and_validate(text, &self.topology, &self.allowed)
    }

    /// [`Machine::cpus`] for a flag: a bad list is one line that starts with the flag and the
    /// value given (`--cpus `7`: CPU 7 does not exist ...`), not the list's problem alone.
    pub fn flag_cpus(&self, flag: &str, text: &str) -> Result<CpuSet> {
        self.cpus(text)
            .map_err(|e| e.context(format!("{flag} `{text}`")))
    }

    /// Narrows this run to a CPU list (`--cpus` of a command that starts unpinned threads):
    /// the calling thread's affinity becomes the list, so every thread it starts afterwards
    /// inherits it, as under `taskset -c LIST`. The list is checked like any other.
    pub fn restrict_to(&mut self, text: &str) -> Result<()> {
        let set = self.flag_cpus("--cpus", text)?;
        affinity::set(0, &set)?;
        self.allowed = set;
        Ok(())
    }
}

/// The conditions a result was taken under.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conditions {
    pub cpulab_version: String,
    /// The git revision cpulab was built from (as in `--version`), so two results say which
    /// build made them; absent outside a git checkout and in results written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpulab_revision: Option<String>,
    /// `uname -r`.
    pub kernel: String,
    pub hostname: String,
    /// Seconds since the Unix epoch when the run started.
    pub started_unix_s: u64,
    pub online_cpus: CpuSet,
    pub allowed_cpus: CpuSet,
    /// Other load seen on the CPUs in use just before measuring.
    pub load_before: Option<LoadCheck>,
    /// True when the result may have been spoiled by other load (see `notes`).
    pub noisy: bool,
    /// Anything that qualifies the figures: restricted CPUs, noise, unavailable counters.
    pub notes: Vec<String>,
}

impl Conditions {
    pub fn now(machine: &Machine) -> Self {
        let uts = nix::sys::utsname::uname().ok();
        let s = |f: Option<&std::ffi::OsStr>| {
            f.map(|x| x.to_string_lossy().to_string())
                .unwrap_or_default()
        };
        let mut notes = Vec::new();
        if machine.allowed.len() < machine.topology.online.len() {
            notes.push(format!(
                "restricted CPU set: this process may use CPUs {} of online {}",
                machine.allowed, machine.topology.online
            ));
        }
        Self {
            cpulab_version: env!("CARGO_PKG_VERSION").to_string(),
            cpulab_revision: Some(env!("CPULAB_REVISION"))
                .filter(|r| !r.is_empty())
                .map(String::from),
            kernel: s(uts.as_ref().map(|u| u.release())),
            hostname: s(uts.as_ref().map(|u| u.nodename())),
            started_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            online_cpus: machine.topology.online.clone(),
            allowed_cpus: machine.allowed.clone(),
            load_before: None,
            noisy: false,
            notes,
        }
    }

    /// Records a load check; a noisy one marks the whole result noisy.
    /// Says that no check for other load preceded the run (`--no-load-check`, or a caller that
    /// checked once for several runs), so a reader does not take silence for a quiet machine.
    pub fn load_not_checked(&mut self) {
        self.notes
            .push("other load was not checked for before this run (--no-load-check)".to_string());
    }

    pub fn record_load(&mut self, check: LoadCheck) {
        if check.noisy {
            self.noisy = true;
            if let Some(r) = &check.reason {
                self.notes
                    .push(format!("{r}: figures may be spoiled by background load"));
            }
        }
        self.load_before = Some(check);
    }
}
