//! A user's command that cpulab starts (`watch -- COMMAND`, `try --measure cmd:...`), together
//! with everything that command starts in turn, ends with cpulab however cpulab ends.
//!
//! - The command runs in its own process group, so the whole tree (a shell and what it forked,
//!   `make -j` and its jobs) is signalled at once; a Ctrl-C at the terminal reaches cpulab
//!   alone, which stops the command in order. The group is in the background: the command can
//!   write to the terminal but not read from it.
//! - The kernel's parent-death signal ends the command itself when cpulab dies, even by SIGKILL,
//!   and a [`Watchdog`] (a small shell in its own session) ends the rest of its group then.
//! - [`Started::wait`] returns as soon as the command exits or an interrupt arrives
//!   (`crate::signals`); on an interrupt the group is stopped first and the interrupt returned,
//!   so the whole cpulab command stops, not just this stage.
//! - Dropping a [`Started`] stops the group (SIGTERM, up to [`GRACE`], then SIGKILL) and reaps
//!   the command, whatever the exit path: `?`, an interrupt, a panic.

use super::watchdog::Watchdog;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// How long a stopped group has to leave after SIGTERM before it is sent SIGKILL.
pub const GRACE: Duration = Duration::from_secs(2);

/// Asks the kernel to SIGKILL the command when the spawning thread (spawn from one that lives
/// as long as the command should) or cpulab ends, and refuses to start it if cpulab has already
/// gone by then. For short helpers whose process group stays cpulab's (readiness probes).
pub fn die_with_parent(cmd: &mut Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: prctl and getppid are async-signal-safe; the closure allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// A started command and its process group; stopped when dropped.
pub struct Started {
    child: Child,
    pgid: i32,
    watchdog: Option<Watchdog>,
    status: Option<ExitStatus>,
    at: Instant,
    /// Why the watchdog could not start (the group then outlives a SIGKILL of cpulab).
    pub note: Option<String>,
}

impl Started {
    /// Starts `cmd` in a new process group, dying with cpulab.
    pub fn spawn(cmd: &mut Command) -> std::io::Result<Self> {
        cmd.process_group(0);
        die_with_parent(cmd);
        // The watchdog first, so the moment the command starts is not delayed by it.
        let (watchdog, note) = match Watchdog::for_groups() {
            Ok(w) => (Some(w), None),
            Err(e) => (
                None,
                Some(format!(
                    "{e}: if cpulab is killed with SIGKILL, what the command started may stay"
                )),
            ),
        };
        if let Some(a) = watchdog.as_ref().and_then(|w| w.announce(libc::SIGTERM)) {
            // The child names its group to the watchdog before exec, so nothing it forks can
            // start before the watchdog knows the group.
            // SAFETY: from_child is async-signal-safe and allocates nothing.
            unsafe {
                cmd.pre_exec(move || {
                    a.from_child();
                    Ok(())
                });
            }
        }
        let at = Instant::now();
        let child = cmd.spawn()?;
        let pgid = child.id() as i32;
        Ok(Self {
            child,
            pgid,
            watchdog,
            status: None,
            at,
            note,
        })
    }

    /// The moment just before the command was started.
    pub fn started_at(&self) -> Instant {
        self.at
    }

    pub fn pid(&self) -> i32 {
        self.pgid
    }

    /// The command's exit status once it has exited (it is reaped then).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Waits for the command to exit and returns the moment it did (found within a millisecond
    /// where the kernel gives a process descriptor, else within 5 ms). An interrupt stops the
    /// group and returns `Err(Interrupted)`.
    pub fn wait(&mut self) -> anyhow::Result<(ExitStatus, Instant)> {
        let pidfd = pidfd_open(self.pgid);
        loop {
            if let Some(s) = self.try_wait() {
                return Ok((s, Instant::now()));
            }
            if let Err(e) = super::check() {
                self.stop();
                return Err(e);
            }
            match &pidfd {
                Some(fd) => readable_within(fd, 50),
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }

    /// Stops the group: SIGTERM, up to [`GRACE`] for it to leave, SIGKILL; reaps the command.
    /// Members that left the group (a daemon's `setsid`) are beyond it.
    pub fn stop(&mut self) {
        let group = nix::unistd::Pid::from_raw(-self.pgid);
        let signal = |s| nix::sys::signal::kill(group, s).is_ok();
        if signal(Some(nix::sys::signal::Signal::SIGTERM)) {
            let until = Instant::now() + GRACE;
            // A zombie still counts as a member for kill(2): reap the leader while waiting and
            // look for members that still run (orphans wait for their reaper as zombies).
            while Instant::now() < until
                && (self.try_wait().is_none() || live_member(Path::new("/"), self.pgid))
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            signal(Some(nix::sys::signal::Signal::SIGKILL));
        }
        if self.status.is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
        if let Some(w) = self.watchdog.as_mut() {
            w.forget_group(self.pgid);
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        self.stop();
    }
}

/// True when a process of group `pgid` under `root`'s /proc has not exited.
fn live_member(root: &Path, pgid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir(root.join("proc")) else {
        return false;
    };
    dir.flatten().any(|e| {
        std::fs::read_to_string(e.path().join("stat"))
            .ok()
            .and_then(|t| state_and_group(&t))
            .is_some_and(|(state, group)| group == pgid && state != 'Z' && state != 'X')
    })
}

/// The state letter and process group of a /proc/PID/stat line (the command name may hold
/// spaces and parentheses: the fields follow the last `)`).
pub fn state_and_group(stat: &str) -> Option<(char, i32)> {
    let mut f = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = f.next()?.chars().next()?;
    let _ppid = f.next()?;
    Some((state, f.next()?.parse().ok()?))
}

/// A descriptor that becomes readable when process `pid` exits; `None` before Linux 5.3.
fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a non-negative result is a descriptor this process now owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Waits up to `ms` milliseconds for `fd` to become readable (a signal may end it early).
fn readable_within(fd: &OwnedFd, ms: i32) {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, count 1.
    unsafe { libc::poll(&mut p, 1, ms) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_and_group_follow_the_last_parenthesis() {
        let line = "4242 (a) b (c)) S 1 4240 4240 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 5 0";
        assert_eq!(state_and_group(line), Some(('S', 4240)));
        assert_eq!(state_and_group("7 (sh) Z 1 9 9 0"), Some(('Z', 9)));
        assert_eq!(state_and_group("7 (sh) S 1"), None);
        assert_eq!(state_and_group("no parenthesis"), None);
    }

    #[test]
    fn live_members_are_read_under_the_root() {
        let t = crate::testing::tree(&[
            ("proc/10/stat", "10 (sleep) S 1 10 10 0"),
            ("proc/11/stat", "11 (sh) Z 1 12 12 0"),
        ]);
        assert!(live_member(t.path(), 10));
        assert!(!live_member(t.path(), 12), "a zombie has exited");
        assert!(!live_member(t.path(), 13));
    }
}
