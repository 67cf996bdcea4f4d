//! The CPU affinity of a running process and all its threads (`taskset -a -p`), restored
//! thread by thread to exactly what each had: threads of one process may differ.

use super::ops::{Op, Target};
use super::setting::{Availability, Cost, Permanent, Roots, Setting, Subject};
use super::values::online;
use crate::cpulist::CpuSet;
use crate::error::bad_input;
use anyhow::Result;

pub struct ProcessAffinity {
    roots: Roots,
    pid: i32,
}

impl ProcessAffinity {
    /// `REST` of `pid:REST`: `1234.affinity`.
    pub fn lookup(roots: &Roots, rest: &str) -> Result<Self> {
        let Some((pid, what)) = rest.split_once('.') else {
            return Err(bad_input(format!(
                "`pid:{rest}` names no setting; write `pid:1234.affinity=0-1`"
            )));
        };
        if what != "affinity" {
            return Err(bad_input(format!(
                "`pid:{rest}`: a process has one setting here, `affinity`"
            )));
        }
        let pid: i32 = pid.parse().ok().filter(|p| *p > 0).ok_or_else(|| {
            bad_input(format!(
                "`{pid}` is not a process id; write `pid:1234.affinity=0`"
            ))
        })?;
        if !roots.path(&format!("proc/{pid}")).is_dir() {
            return Err(bad_input(format!("no process {pid} is running")));
        }
        Ok(Self {
            roots: roots.clone(),
            pid,
        })
    }

    /// Every thread now: a trial plans again at each flip, so threads started meanwhile are
    /// covered too.
    fn threads(&self) -> Vec<i32> {
        super::journal::tasks(&self.roots.path(""), self.pid)
    }

    fn owner(&self) -> Option<u32> {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(self.roots.path(&format!("proc/{}", self.pid)))
            .ok()
            .map(|m| m.uid())
    }

    /// The systemd unit the process runs in, from its cgroup path.
    fn unit(&self) -> Option<String> {
        let text =
            std::fs::read_to_string(self.roots.path(&format!("proc/{}/cgroup", self.pid))).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("0::"))
            .and_then(|p| p.rsplit('/').find(|s| s.ends_with(".service")))
            .map(String::from)
    }
}

impl Setting for ProcessAffinity {
    fn name(&self) -> String {
        format!("pid:{}.affinity", self.pid)
    }
    fn about(&self) -> String {
        "CPU affinity of a process and all its threads".into()
    }
    fn current(&self) -> Result<String> {
        Ok(crate::affinity::get(self.pid)?.to_string())
    }
    fn availability(&self) -> Availability {
        Availability::Changeable
    }
    fn validate(&self, value: &str) -> Result<String> {
        let cpus = CpuSet::parse_list(value, false)
            .map_err(|e| bad_input(format!("{}={value}: {e}", self.name())))?;
        let on = online(&self.roots);
        if !cpus.is_subset(&on) {
            return Err(bad_input(format!(
                "{}={value}: names CPUs that are not online (online: {on})",
                self.name()
            )));
        }
        Ok(cpus.to_string())
    }
    fn plan(&self, value: &str) -> Result<Vec<Op>> {
        Ok(self
            .threads()
            .into_iter()
            .map(|tid| Op {
                target: Target::Affinity { pid: self.pid, tid },
                value: value.to_string(),
            })
            .collect())
    }
    fn needs_root(&self) -> bool {
        self.owner() != Some(nix::unistd::geteuid().as_raw())
    }
    fn cost(&self) -> Cost {
        Cost::ProcessCpu { pid: self.pid }
    }
    fn subject(&self) -> Subject {
        Subject::Process { pid: self.pid }
    }
    fn permanent(&self, value: &str) -> Permanent {
        match self.unit() {
            Some(unit) => Permanent {
                form: "systemd drop-in".into(),
                file: Some(format!("/etc/systemd/system/{unit}.d/cpulab-affinity.conf")),
                text: format!("[Service]\nCPUAffinity={}\n", value.replace(',', " ")),
            },
            None => Permanent {
                form: "start command".into(),
                file: None,
                text: format!(
                    "taskset -c {value} COMMAND (the process runs in no systemd service)"
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_missing_pid_is_one_line() {
        let r = Roots::new(Path::new("/"), None);
        for bad in ["999999999.affinity", "abc.affinity", "1.nice", "12"] {
            let e = ProcessAffinity::lookup(&r, bad).err().unwrap();
            assert_eq!(crate::error::exit_code(&e), 2, "{bad}");
        }
    }

    #[test]
    fn plans_every_thread_of_ourselves() {
        let r = Roots::new(Path::new("/"), None);
        let me = std::process::id();
        let a = ProcessAffinity::lookup(&r, &format!("{me}.affinity")).unwrap();
        let _t = std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(500)));
        assert!(a.plan("0").unwrap().len() >= 2);
        assert!(a.validate("0-1000").is_err());
    }
}
