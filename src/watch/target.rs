//! What is watched: processes by pid, by name, by cgroup, a command cpulab starts, or the
//! whole machine; and the resolver that tells, for each thread id seen in a record, whether it
//! is watched and under which group it is reported.

use super::aggregate::{Resolver, TaskInfo};
use crate::error::bad_input;
use anyhow::Result;
use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// The watched tasks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Every process, grouped by name.
    All,
    /// These processes and their descendants, one group per process.
    Pids(Vec<i32>),
    /// Processes with these names, one group per name.
    Comm(Vec<String>),
    /// Processes in this cgroup (a path below /sys/fs/cgroup, or as /proc/PID/cgroup shows it).
    Cgroup(String),
    /// A command cpulab starts (without a shell) and ends, with its descendants.
    Command(Vec<String>),
}

impl Target {
    pub fn describe(&self) -> String {
        match self {
            Self::All => "the whole machine".into(),
            Self::Pids(p) => format!(
                "pid {}",
                p.iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Self::Comm(c) => format!("processes named {}", c.join(",")),
            Self::Cgroup(c) => format!("cgroup {c}"),
            Self::Command(c) => format!("`{}`", shell_words::join(c)),
        }
    }

    fn by_name(&self) -> bool {
        matches!(self, Self::All | Self::Comm(_))
    }
}

fn proc_dir(root: &Path, pid: i32) -> PathBuf {
    root.join("proc").join(pid.to_string())
}

/// `(tgid, ppid)` from `/proc/PID/status` text.
pub fn parse_status(text: &str) -> Option<(i32, i32)> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
    };
    Some((field("Tgid:")?, field("PPid:")?))
}

/// The processes being watched while the window is open: a started command, given pids.
pub struct Live {
    child: Option<std::process::Child>,
    pids: Vec<i32>,
    root: PathBuf,
}

impl Live {
    pub fn start(t: &Target, root: &Path) -> Result<Self> {
        let mut live = Self {
            child: None,
            pids: Vec::new(),
            root: root.to_path_buf(),
        };
        match t {
            Target::Pids(p) => {
                for pid in p {
                    if !proc_dir(root, *pid).is_dir() {
                        return Err(bad_input(format!(
                            "no process with pid {pid}; check it with `ps -p {pid}`"
                        )));
                    }
                }
                live.pids = p.clone();
            }
            Target::Command(argv) => {
                let (prog, args) = argv
                    .split_first()
                    .ok_or_else(|| bad_input("give a command after `--`"))?;
                let mut cmd = std::process::Command::new(prog);
                cmd.args(args);
                // SAFETY: prctl is async-signal-safe; it ends the command if cpulab dies,
                // even by SIGKILL.
                unsafe {
                    cmd.pre_exec(|| {
                        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                        Ok(())
                    });
                }
                let child = cmd.spawn().map_err(|e| {
                    if e.kind() == std::io::ErrorKind::NotFound {
                        bad_input(format!("`{prog}` not found; give a program on the PATH"))
                    } else {
                        anyhow::anyhow!("starting `{prog}`: {e}")
                    }
                })?;
                live.pids = vec![child.id() as i32];
                live.child = Some(child);
            }
            _ => {}
        }
        Ok(live)
    }

    pub fn pids(&self) -> &[i32] {
        &self.pids
    }

    /// Why the window should end now, if every watched process is gone.
    pub fn ended(&mut self) -> Option<&'static str> {
        if let Some(c) = &mut self.child {
            return matches!(c.try_wait(), Ok(Some(_))).then_some("command exited");
        }
        if self.pids.is_empty() {
            return None;
        }
        let alive = self.pids.iter().any(|p| {
            std::fs::read_to_string(proc_dir(&self.root, *p).join("stat"))
                .map(|s| {
                    !s.rsplit(')')
                        .next()
                        .unwrap_or("")
                        .trim_start()
                        .starts_with('Z')
                })
                .unwrap_or(false)
        });
        (!alive).then_some("targets exited")
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

/// Resolves thread ids through /proc, caching each answer for the window.
pub struct ProcResolver {
    target: Target,
    root: PathBuf,
    roots: Vec<i32>,
    me: i32,
    cache: HashMap<i32, Rc<TaskInfo>>,
    parents: HashMap<i32, i32>,
}

impl ProcResolver {
    pub fn new(target: &Target, root: &Path, pids: &[i32]) -> Self {
        Self {
            target: target.clone(),
            root: root.to_path_buf(),
            roots: pids.to_vec(),
            me: std::process::id() as i32,
            cache: HashMap::new(),
            parents: HashMap::new(),
        }
    }

    fn status(&self, pid: i32) -> Option<(i32, i32)> {
        parse_status(&std::fs::read_to_string(proc_dir(&self.root, pid).join("status")).ok()?)
    }

    fn comm(&self, pid: i32) -> Option<String> {
        std::fs::read_to_string(proc_dir(&self.root, pid).join("comm"))
            .ok()
            .map(|s| s.trim_end().to_string())
    }

    fn descends_from_roots(&mut self, tgid: i32) -> bool {
        let mut p = tgid;
        for _ in 0..64 {
            if self.roots.contains(&p) {
                return true;
            }
            if p <= 1 {
                return false;
            }
            let parent = match self.parents.get(&p) {
                Some(pp) => *pp,
                None => {
                    let pp = self.status(p).map(|(_, pp)| pp).unwrap_or(0);
                    self.parents.insert(p, pp);
                    pp
                }
            };
            p = parent;
        }
        false
    }

    fn resolve(&mut self, tid: i32, hint: &str) -> TaskInfo {
        let (tgid, known) = match self.status(tid) {
            Some((tgid, _)) => (tgid, true),
            None => (tid, false),
        };
        let name = if known { self.comm(tgid) } else { None }.unwrap_or_else(|| {
            if hint.is_empty() {
                format!("tid{tid}")
            } else {
                hint.into()
            }
        });
        let watched = tid != 0
            && tgid != self.me
            && match &self.target {
                Target::All => true,
                Target::Comm(names) => names.contains(&name),
                Target::Pids(_) | Target::Command(_) => known && self.descends_from_roots(tgid),
                Target::Cgroup(cg) => {
                    std::fs::read_to_string(proc_dir(&self.root, tid).join("cgroup"))
                        .map(|t| t.lines().any(|l| l.rsplit(':').next() == Some(cg.as_str())))
                        .unwrap_or(false)
                }
            };
        let group = if tid == 0 {
            "idle".to_string()
        } else if self.target.by_name() {
            name
        } else {
            format!("{name}[{tgid}]")
        };
        TaskInfo {
            tgid,
            group,
            watched,
        }
    }
}

impl Resolver for ProcResolver {
    fn task(&mut self, tid: i32, comm_hint: &str) -> Rc<TaskInfo> {
        if let Some(i) = self.cache.get(&tid) {
            return i.clone();
        }
        let info = Rc::new(self.resolve(tid, comm_hint));
        self.cache.insert(tid, info.clone());
        info
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_gives_tgid_and_parent() {
        let t = "Name:\tpostgres\nTgid:\t812\nNgid:\t0\nPid:\t815\nPPid:\t1\n";
        assert_eq!(parse_status(t), Some((812, 1)));
        assert_eq!(parse_status("Name: x\n"), None);
    }
}
