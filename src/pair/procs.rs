//! Starting, pinning and ending the programs a pair experiment runs.
//!
//! A server's placement only means something if *every* process and thread it will ever have runs
//! where we put it. PostgreSQL forks a backend per connection, Apache starts worker threads, nginx
//! forks workers: pinning the first process after it has started would miss what it forks later,
//! so the affinity is set in the child between `fork` and `exec` (`pre_exec`), and everything it
//! creates inherits it.
//!
//! The same hook makes the child impossible to leave behind:
//! - `setsid()` puts it in its own session and process group, so a Ctrl-C at the terminal reaches
//!   cpulab alone (which then tears down in order) and the whole group can be signalled at once;
//! - `PR_SET_PDEATHSIG` asks the kernel to signal it when cpulab dies, even by SIGKILL. The kernel
//!   clears that setting when credentials change, so it is set *after* dropping to an unprivileged
//!   user, and it fires when the spawning *thread* exits: spawn from a thread that lives for the
//!   whole run (the caller of `pair::run`).
//!
//! Stopping a process collects its descendants first (after the leader dies they are re-parented
//! and can no longer be found from it), sends the program's own graceful signal to its group
//! (PostgreSQL's fast shutdown is SIGINT, and removes its shared memory), waits, then SIGKILLs the
//! group and every collected descendant, and finally removes any System V shared memory segment the
//! killed processes left. [`Proc`] does this on drop, so every exit path is covered.

use crate::cpulist::CpuSet;
use crate::pair::cleanup;
use crate::pair::proctable::{descendants_with_start, remove_orphan_shm, start_time, wait_gone};
use crate::signals::watchdog::Announce;
use anyhow::{Context, Result};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// An unprivileged account to run a server as when cpulab runs as root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunAs {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

impl RunAs {
    /// The first of `names` that exists on this machine.
    pub fn lookup(names: &[&str]) -> Option<Self> {
        names.iter().find_map(|n| {
            let u = nix::unistd::User::from_name(n).ok()??;
            Some(Self {
                name: u.name,
                uid: u.uid.as_raw(),
                gid: u.gid.as_raw(),
            })
        })
    }
}

/// True when cpulab runs as root (servers that refuse root then run as an unprivileged user).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// How to start one program.
#[derive(Clone, Debug)]
pub struct Launch {
    /// Short name for messages (`postgres`, `pgbench`, `apache2`).
    pub label: String,
    /// Program and arguments; never passed through a shell (a `--shell` command is `sh -c CMD`).
    pub argv: Vec<String>,
    /// CPUs for the process and everything it creates; `None` leaves it where cpulab may run.
    pub cpus: Option<CpuSet>,
    pub user: Option<RunAs>,
    pub cwd: Option<PathBuf>,
    pub env: Vec<(String, String)>,
    /// Signal the kernel sends when cpulab dies (SIGKILL unless the program has a graceful one
    /// that also cleans up, like PostgreSQL's SIGINT).
    pub death_signal: i32,
    /// First signal of an orderly stop, sent to the process group.
    pub stop_signal: i32,
    /// Where its standard output and error go (files, so nothing can block on a full pipe).
    pub stdout: PathBuf,
    pub stderr: PathBuf,
}

impl Launch {
    /// A launch with SIGKILL on cpulab's death, SIGTERM to stop, output into `logs/label.*`.
    pub fn new(label: &str, argv: Vec<String>, logs: &Path) -> Self {
        Self {
            label: label.to_string(),
            argv,
            cpus: None,
            user: None,
            cwd: None,
            env: Vec::new(),
            death_signal: libc::SIGKILL,
            stop_signal: libc::SIGTERM,
            stdout: logs.join(format!("{label}.stdout")),
            stderr: logs.join(format!("{label}.stderr")),
        }
    }
}

/// What a finished process left: exit status and resource usage of it and its reaped children.
#[derive(Clone, Copy, Debug)]
pub struct Exit {
    /// Raw wait status.
    pub status: i32,
    pub rusage: libc::rusage,
}

impl Exit {
    pub fn success(&self) -> bool {
        libc::WIFEXITED(self.status) && libc::WEXITSTATUS(self.status) == 0
    }

    pub fn describe(&self) -> String {
        if libc::WIFEXITED(self.status) {
            format!("exited with status {}", libc::WEXITSTATUS(self.status))
        } else if libc::WIFSIGNALED(self.status) {
            format!("was killed by signal {}", libc::WTERMSIG(self.status))
        } else {
            format!("ended with wait status {}", self.status)
        }
    }
}

/// A running (or finished) child process that is stopped, with its whole tree, when dropped.
#[derive(Debug)]
pub struct Proc {
    pub label: String,
    pub pid: i32,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    stop_signal: i32,
    exit: Option<Exit>,
}

fn cpu_set(cpus: &CpuSet) -> Result<nix::sched::CpuSet> {
    let mut set = nix::sched::CpuSet::new();
    for c in cpus.iter() {
        set.set(c as usize)
            .map_err(|_| anyhow::anyhow!("CPU {c} is beyond what sched_setaffinity supports"))?;
    }
    Ok(set)
}

impl Proc {
    /// Starts `l`. A program that cannot be found is bad input (exit 2) naming it.
    pub fn spawn(l: &Launch) -> Result<Proc> {
        Self::spawn_announced(l, None)
    }

    /// Starts `l`, whose process group the child itself names to the watchdog before exec
    /// (`announce`), so that what it forks at once is ended too if cpulab is killed right after.
    pub fn spawn_announced(l: &Launch, announce: Option<Announce>) -> Result<Proc> {
        let (prog, args) = l
            .argv
            .split_first()
            .context("empty command line: give a program to run")?;
        let out = File::create(&l.stdout)
            .with_context(|| format!("cannot create {}", l.stdout.display()))?;
        let err = File::create(&l.stderr)
            .with_context(|| format!("cannot create {}", l.stderr.display()))?;
        let mut cmd = Command::new(prog);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .envs(l.env.iter().map(|(k, v)| (k, v)));
        if let Some(d) = &l.cwd {
            cmd.current_dir(d);
        }
        let set = l.cpus.as_ref().map(cpu_set).transpose()?;
        let ids = l.user.as_ref().map(|u| (u.uid, u.gid));
        let death = Signal::try_from(l.death_signal)
            .with_context(|| format!("signal {} for the parent's death", l.death_signal))?;
        let parent = std::process::id() as i32;
        // SAFETY: the closure runs between fork and exec and only makes async-signal-safe system
        // calls on values prepared before the fork; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || child_setup(set.as_ref(), ids, death, parent, announce));
        }
        let child = cmd.spawn().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                crate::error::bad_input(format!(
                    "cannot run `{prog}`: program not found; install it or give its full path"
                ))
            } else {
                anyhow::Error::new(e).context(format!("cannot start `{prog}`"))
            }
        })?;
        let pid = child.id() as i32;
        // The std handle is not used again: we reap with wait4 to get resource usage.
        drop(child);
        cleanup::register_process(pid, l.stop_signal);
        Ok(Proc {
            label: l.label.clone(),
            pid,
            stdout: l.stdout.clone(),
            stderr: l.stderr.clone(),
            stop_signal: l.stop_signal,
            exit: None,
        })
    }

    /// The exit, if the process has ended. Before reaping it, SIGKILLs whatever is left in its
    /// process group: while the leader is an unreaped zombie its pid (the group's id) cannot be
    /// reused, so the signal cannot reach an unrelated process.
    pub fn try_wait(&mut self) -> Option<Exit> {
        if self.exit.is_none() && has_exited(self.pid, false) {
            signal_group(self.pid, libc::SIGKILL);
            self.exit = wait4(self.pid, 0);
            cleanup::unregister_process(self.pid);
        }
        self.exit
    }

    /// Waits up to `timeout` for the process to end by itself.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<Exit> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(e) = self.try_wait() {
                return Some(e);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The last `lines` lines of the program's standard error (or output, if error is empty).
    pub fn output_tail(&self, lines: usize) -> String {
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        let mut text = read(&self.stderr);
        if text.trim().is_empty() {
            text = read(&self.stdout);
        }
        tail(&text, lines)
    }

    /// Stops the process and everything it started; see the module notes. Descendants that left
    /// the process group are identified by pid *and* start time, so a pid reused by an unrelated
    /// process in the meantime is never signalled.
    pub fn stop(&mut self, grace: Duration) {
        // Process control acts on live processes only: the root is always `/` here.
        let root = Path::new("/");
        let tree = descendants_with_start(root, self.pid);
        if self.try_wait().is_none() {
            signal_group(self.pid, self.stop_signal);
            self.wait_timeout(grace);
        }
        if self.exit.is_none() {
            signal_group(self.pid, libc::SIGKILL);
            has_exited(self.pid, true);
            self.try_wait();
        }
        for &(p, start) in &tree {
            if start_time(root, p) == Some(start) {
                let _ = nix::sys::signal::kill(Pid::from_raw(p), Signal::SIGKILL);
            }
        }
        wait_gone(root, &tree, Duration::from_secs(3));
        let mut pids: Vec<i32> = tree.iter().map(|t| t.0).collect();
        pids.push(self.pid);
        remove_orphan_shm(root, &pids);
        cleanup::unregister_process(self.pid);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// Runs in the child between fork and exec: no allocation, only system calls.
fn child_setup(
    set: Option<&nix::sched::CpuSet>,
    ids: Option<(u32, u32)>,
    death_signal: Signal,
    parent: i32,
    announce: Option<Announce>,
) -> std::io::Result<()> {
    use nix::unistd::{Gid, Uid};
    nix::unistd::setsid()?;
    if let Some(s) = set {
        nix::sched::sched_setaffinity(Pid::from_raw(0), s)?;
    }
    if let Some((uid, gid)) = ids {
        nix::unistd::setgroups(&[Gid::from_raw(gid)])?;
        nix::unistd::setgid(Gid::from_raw(gid))?;
        nix::unistd::setuid(Uid::from_raw(uid))?;
    }
    // After the credential change, which would clear it.
    nix::sys::prctl::set_pdeathsig(death_signal)?;
    // cpulab may have died between fork and prctl: then nobody will ever signal us.
    if nix::unistd::getppid().as_raw() != parent {
        // SAFETY: no safe wrapper for _exit; between fork and exec it ends the child without
        // running the parent's destructors or atexit handlers.
        unsafe { libc::_exit(1) }
    }
    if let Some(a) = announce {
        a.from_child();
    }
    Ok(())
}

/// Whether `pid` (our child) has exited, without reaping it (`waitid` with `WNOWAIT`).
fn has_exited(pid: i32, block: bool) -> bool {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    let mut flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
    if !block {
        flags |= WaitPidFlag::WNOHANG;
    }
    loop {
        match waitid(Id::Pid(Pid::from_raw(pid)), flags) {
            Ok(WaitStatus::StillAlive) => return false,
            Ok(_) => return true,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return false,
        }
    }
}

fn wait4(pid: i32, flags: i32) -> Option<Exit> {
    let mut status = 0;
    // SAFETY: nix has no wait4 (reaping one child with its resource usage). rusage is plain
    // data; wait4 writes both out-parameters.
    let mut rusage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: valid pointers to local variables.
        let r = unsafe { libc::wait4(pid, &mut status, flags, &mut rusage) };
        if r == pid {
            return Some(Exit { status, rusage });
        }
        if r < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return None;
    }
}

fn signal_group(pgid: i32, sig: i32) {
    if let Ok(sig) = Signal::try_from(sig) {
        let _ = nix::sys::signal::killpg(Pid::from_raw(pgid), sig);
    }
}

/// The last `n` lines of `text`, indented for an error message.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(n);
    if lines.is_empty() {
        return "  (no output)".to_string();
    }
    lines[start..]
        .iter()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `(pid, ppid)` of every process under `root`/proc.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::pair::proctable::alive;

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail("a\nb\n\nc\n", 2), "  b\n  c");
        assert_eq!(tail("", 3), "  (no output)");
    }

    fn sleeper(dir: &Path, cpus: Option<CpuSet>) -> Launch {
        let mut l = Launch::new("sleeper", vec!["sleep".into(), "600".into()], dir);
        l.cpus = cpus;
        l
    }

    #[test]
    fn a_panic_stops_the_process_on_unwinding() {
        let dir = tempfile::tempdir().unwrap();
        let l = sleeper(dir.path(), None);
        let pid = std::sync::Mutex::new(0);
        let r = std::panic::catch_unwind(|| {
            let p = Proc::spawn(&l).unwrap();
            *pid.lock().unwrap() = p.pid;
            panic!("simulated failure mid-run");
        });
        assert!(r.is_err());
        let pid = *pid.lock().unwrap();
        assert!(
            pid > 0 && !alive(Path::new("/"), pid),
            "process {pid} ended with the panic"
        );
    }

    #[test]
    fn child_is_pinned_and_in_its_own_group() {
        let dir = tempfile::tempdir().unwrap();
        let cpu = crate::affinity::get(0).unwrap().first().unwrap();
        let mut p = Proc::spawn(&sleeper(dir.path(), Some(CpuSet::from_iter_u32([cpu])))).unwrap();
        assert_eq!(
            crate::affinity::get(p.pid).unwrap(),
            CpuSet::from_iter_u32([cpu])
        );
        let pgid = nix::unistd::getpgid(Some(Pid::from_raw(p.pid))).unwrap();
        assert_eq!(pgid.as_raw(), p.pid, "own process group");
        p.stop(Duration::from_secs(2));
        assert!(p.try_wait().is_some() && !alive(Path::new("/"), p.pid));
    }
}
