//! A watchdog that outlives cpulab, for the one exit no code of ours sees: SIGKILL. `pair`
//! starts one for its servers and directory, `try` for its restore, and every user command
//! started through [`super::started`] for that command's process group.
//!
//! The kernel's parent-death signal ends the servers cpulab started directly, but nobody would
//! remove the temporary directory, and a server that forked workers into other process groups
//! would rely on them noticing. So each run starts a tiny `/bin/sh` script in its own session
//! (Ctrl-C at the terminal does not reach it, and it ignores INT, TERM and HUP) and keeps the
//! write end of a pipe to its standard input. cpulab tells it what to clean (`dir PATH`,
//! `group PGID SIGNAL`, `ungroup PGID`) and says `done` when it has cleaned up itself. If the pipe
//! closes without `done`, cpulab died: the script signals each group with its graceful signal,
//! waits up to five seconds, SIGKILLs what is left and removes the directory. Being a script
//! (exec'd, not a forked copy of cpulab) it is safe to start from a multi-threaded process.
//!
//! The pipe is close-on-exec, so no server inherits the write end and keeps it open after cpulab
//! is gone.

use std::io::Write;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

const SCRIPT: &str = r#"trap '' INT TERM HUP PIPE
groups=""
dir=""
while IFS= read -r line; do
  case "$line" in
    "dir "*) dir="${line#dir }" ;;
    "group "*) groups="$groups ${line#group }" ;;
    "ungroup "*) g="${line#ungroup }"; keep=""
      for t in $groups; do [ "${t%%:*}" = "$g" ] || keep="$keep $t"; done; groups="$keep" ;;
    done) exit 0 ;;
  esac
done
for t in $groups; do kill -"${t#*:}" -"${t%%:*}" 2>/dev/null; done
i=0
while [ $i -lt 50 ]; do
  any=""
  for t in $groups; do kill -0 -"${t%%:*}" 2>/dev/null && any=1; done
  [ -z "$any" ] && break
  sleep 0.1
  i=$((i+1))
done
for t in $groups; do kill -9 -"${t%%:*}" 2>/dev/null; done
sleep 0.2
[ -n "$dir" ] && rm -rf -- "$dir"
exit 0
"#;

/// The cpulab side of the watchdog; says `done` and reaps it on drop.
#[derive(Debug)]
pub struct Watchdog {
    child: Child,
    pipe: Option<ChildStdin>,
}

impl Watchdog {
    /// Starts the watchdog for `dir`. `Err` carries the reason when it cannot run (no /bin/sh).
    pub fn start(dir: &Path) -> Result<Self, String> {
        let mut w = Self::spawn(SCRIPT, &[])?;
        w.send(&format!("dir {}", dir.display()));
        Ok(w)
    }

    /// Starts the watchdog for process groups alone (no directory): [`super::started`].
    pub fn for_groups() -> Result<Self, String> {
        Self::spawn(SCRIPT, &[])
    }

    /// Starts `script` the same way (own session, pipe on its standard input, `done` on drop),
    /// with `args` as its positional parameters: `cpulab try` runs its restore script this way.
    pub fn spawn(script: &str, args: &[std::ffi::OsString]) -> Result<Self, String> {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(script)
            .arg("cpulab-watchdog")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: setsid is async-signal-safe and touches no memory.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("no watchdog (cannot run /bin/sh: {e})"))?;
        let pipe = child.stdin.take();
        Ok(Self { child, pipe })
    }

    fn send(&mut self, line: &str) {
        if let Some(p) = self.pipe.as_mut() {
            let _ = writeln!(p, "{line}");
            let _ = p.flush();
        }
    }

    /// What a child tells the watchdog itself, between fork and exec ([`Announce::from_child`]):
    /// its process group is then known before the command can fork anything, so a SIGKILL of
    /// cpulab right after the start leaves no grandchild. `None` once the pipe is closed.
    pub fn announce(&self, signal: i32) -> Option<Announce> {
        use std::os::fd::AsRawFd;
        self.pipe.as_ref().map(|p| Announce {
            fd: p.as_raw_fd(),
            signal,
        })
    }

    /// Asks the watchdog to end process group `pgid` (with `signal`, then SIGKILL) if cpulab dies.
    pub fn watch_group(&mut self, pgid: i32, signal: i32) {
        self.send(&format!("group {pgid}:{signal}"));
    }

    /// The group has been stopped by cpulab itself.
    pub fn forget_group(&mut self, pgid: i32) {
        self.send(&format!("ungroup {pgid}"));
    }

    /// Closes the pipe without `done` and does not wait: the watchdog does its cleanup now, as
    /// if cpulab had died (used when cpulab's own cleanup failed).
    pub fn abandon(mut self) {
        self.pipe = None;
        std::mem::forget(self);
    }

    /// The pid of the watchdog shell (tests kill it to check the next run's stale cleanup).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// A child's line to the watchdog: `group PGID:SIGNAL` for its own process group.
#[derive(Clone, Copy, Debug)]
pub struct Announce {
    fd: std::os::fd::RawFd,
    signal: i32,
}

impl Announce {
    /// Runs in the child between fork and exec, after it has its own process group: one
    /// `write(2)` of a line built on the stack (no allocation, async-signal-safe; a line this
    /// short is written whole, never interleaved with cpulab's own lines).
    pub fn from_child(&self) {
        let mut line = [0u8; 64];
        let mut n = 0;
        let mut put = |bytes: &[u8]| {
            for &b in bytes {
                if n < line.len() {
                    line[n] = b;
                    n += 1;
                }
            }
        };
        // SAFETY: getpgrp has no preconditions and cannot fail.
        let pgid = unsafe { libc::getpgrp() };
        put(b"group ");
        put(decimal(pgid as u64, &mut [0u8; 20]));
        put(b":");
        put(decimal(self.signal as u64, &mut [0u8; 20]));
        put(b"\n");
        // SAFETY: the descriptor is the pipe's write end, open in the child until exec; the
        // buffer holds n initialised bytes.
        unsafe { libc::write(self.fd, line.as_ptr().cast(), n) };
    }
}

/// `v` in decimal, written into the end of `buf`.
fn decimal(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.send("done");
        self.pipe = None;
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn gone_within(p: &Path, secs: u64) -> bool {
        let until = Instant::now() + Duration::from_secs(secs);
        while p.exists() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
        !p.exists()
    }

    #[test]
    fn closing_the_pipe_without_done_cleans_up() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("victim");
        std::fs::create_dir(&dir).unwrap();
        let mut sleeper = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let mut w = Watchdog::start(&dir).unwrap();
        w.watch_group(sleeper.id() as i32, libc::SIGTERM);
        // Simulate cpulab's death: close the pipe without `done`.
        w.pipe = None;
        let _ = w.child.wait();
        assert!(gone_within(&dir, 10), "directory removed");
        let status = sleeper.wait().unwrap();
        assert!(!status.success(), "the watched group was signalled");
    }

    #[test]
    fn numbers_are_written_in_decimal() {
        for v in [0, 7, 10, 4_194_304, u64::MAX] {
            assert_eq!(decimal(v, &mut [0; 20]), v.to_string().as_bytes());
        }
    }

    #[test]
    fn a_group_announced_by_the_child_before_exec_is_ended_when_cpulab_dies() {
        let base = tempfile::tempdir().unwrap();
        let mut w = Watchdog::for_groups().unwrap();
        let a = w.announce(libc::SIGTERM).unwrap();
        let pidfile = base.path().join("bg");
        // The shell forks before cpulab's side could say anything: only the child's own line
        // names the group.
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!(
                "sleep 600 & echo $! > {}; exec sleep 601",
                pidfile.display()
            ))
            .process_group(0);
        // SAFETY: from_child is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                a.from_child();
                Ok(())
            });
        }
        let mut leader = cmd.spawn().unwrap();
        let until = Instant::now() + Duration::from_secs(30);
        let bg: i32 = loop {
            if let Some(p) = std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|t| t.trim().parse().ok())
            {
                break p;
            }
            assert!(Instant::now() < until, "the shell never forked");
            std::thread::sleep(Duration::from_millis(20));
        };
        // Simulate cpulab's death: close the pipe without `done`.
        w.pipe = None;
        let _ = w.child.wait();
        let bg_gone = || {
            std::fs::read_to_string(format!("/proc/{bg}/stat")).map_or(true, |s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z'))
            })
        };
        let until = Instant::now() + Duration::from_secs(10);
        let mut leader_gone = false;
        while !(leader_gone && bg_gone()) && Instant::now() < until {
            leader_gone = leader_gone || matches!(leader.try_wait(), Ok(Some(_)));
            std::thread::sleep(Duration::from_millis(50));
        }
        let left = (!leader_gone, !bg_gone());
        let _ = leader.kill();
        let _ = leader.wait();
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(bg),
            nix::sys::signal::Signal::SIGKILL,
        );
        assert_eq!(
            left,
            (false, false),
            "(the leader, its forked sleep) outlived the watchdog"
        );
    }

    #[test]
    fn done_leaves_everything_alone() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("keep");
        std::fs::create_dir(&dir).unwrap();
        drop(Watchdog::start(&dir).unwrap());
        assert!(dir.exists());
    }

    use std::os::unix::process::CommandExt;
}
