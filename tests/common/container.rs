//! A booted container with systemd as its PID 1, for the tests that need a real systemd (this
//! machine has none): `scripts/systemd-container.sh` builds the Debian root once into `target/`
//! (reused while its package list is unchanged) and boots it with systemd-nspawn on an overlay
//! in a mount namespace of its own, so each boot starts from the same root and nothing stays
//! mounted after it.
//!
//! Commands run through `nsenter` into the container's PID 1 (docs/testing.md says why, rather
//! than an agent unit): the exit status and the output are the command's own.
//!
//! [`Container`] ends the container when dropped, a failing test's unwinding included: SIGTERM
//! to systemd-nspawn halts it; after 30 s its PID 1 is killed, which ends its whole pid
//! namespace. If the test binary itself dies (SIGKILL, abort), nspawn is sent SIGTERM by the
//! kernel (`PR_SET_PDEATHSIG`), and halts the container the same way. The parent-death signal
//! follows the thread that started nspawn, so a container is booted and dropped by one test,
//! never kept in a static.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a boot to `multi-user.target` may take before it is called failed.
const BOOT_LIMIT: Duration = Duration::from_secs(120);
/// How long a halt may take before the container is killed.
const HALT_LIMIT: Duration = Duration::from_secs(30);

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/systemd-container.sh")
}

/// A running container; halted when dropped.
pub struct Container {
    nspawn: Child,
    /// The container's PID 1, as this machine numbers it.
    leader: u32,
    /// nspawn's output (the boot's console), shown when something fails.
    log: tempfile::NamedTempFile,
    /// How long the boot took, from nspawn's start to `systemctl is-system-running` saying
    /// `running` (or `degraded`).
    pub boot_time: Duration,
}

/// Why a container cannot be booted here, when that is the machine's doing.
fn missing() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some(
            "booting a container needs root (mmdebstrap, systemd-nspawn); CI runs as root".into(),
        );
    }
    for (program, package) in [
        ("systemd-nspawn", "systemd-container"),
        ("mmdebstrap", "mmdebstrap"),
        ("nsenter", "util-linux"),
        ("unshare", "util-linux"),
    ] {
        if cpulab::pair::presets::find_program(program).is_none() {
            return Some(format!(
                "{program} is not installed (apt-get install {package})"
            ));
        }
    }
    None
}

impl Container {
    /// Boots the container, with each of `binds` bound read-only at the same path inside.
    /// `None` after a visible `SKIPPED:` line when this machine cannot (under CI, a failure).
    pub fn boot(test: &str, binds: &[&Path]) -> Option<Container> {
        if let Some(why) = missing() {
            super::skipped(test, &why);
            return None;
        }
        match Self::try_boot(binds) {
            Ok(c) => Some(c),
            Err(why) => {
                super::skipped(test, &format!("the systemd container did not boot: {why}"));
                None
            }
        }
    }

    fn try_boot(binds: &[&Path]) -> Result<Container, String> {
        // The root first, on its own: building it is not part of the boot.
        let root = Command::new(script())
            .arg("root")
            .output()
            .map_err(|e| format!("{}: {e}", script().display()))?;
        if !root.status.success() {
            return Err(format!(
                "building its root failed: {}",
                String::from_utf8_lossy(&root.stderr).trim()
            ));
        }
        let log = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
        let out = log.reopen().map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(script());
        cmd.arg("boot")
            .args(binds)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let started = Instant::now();
        let nspawn = cmd
            .spawn()
            .map_err(|e| format!("{}: {e}", script().display()))?;
        let mut c = Container {
            leader: 0,
            nspawn,
            log,
            boot_time: Duration::ZERO,
        };
        let mut state = String::new();
        while started.elapsed() < BOOT_LIMIT {
            if let Ok(Some(status)) = c.nspawn.try_wait() {
                return Err(format!("systemd-nspawn exited ({status}): {}", c.console()));
            }
            if c.leader == 0 {
                c.leader = leader_of(c.nspawn.id()).unwrap_or(0);
            }
            if c.leader != 0 {
                let o = c.run(&["systemctl", "is-system-running"]);
                state = String::from_utf8_lossy(&o.stdout).trim().to_string();
                if state == "running" || state == "degraded" {
                    c.boot_time = started.elapsed();
                    return Ok(c);
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "not booted after {} s (systemctl is-system-running: {state:?}): {}",
            BOOT_LIMIT.as_secs(),
            c.console()
        ))
    }

    /// The container's PID 1 as this machine numbers it.
    pub fn leader(&self) -> u32 {
        self.leader
    }

    /// systemd-nspawn's pid.
    pub fn nspawn_pid(&self) -> u32 {
        self.nspawn.id()
    }

    /// The last lines of nspawn's output: the boot's console and nspawn's own errors.
    pub fn console(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = self.log.reopen() {
            let _ = f.read_to_string(&mut text);
        }
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Runs `argv` inside the container as root, with a plain environment, and waits for it.
    pub fn run(&self, argv: &[&str]) -> Output {
        self.command(argv)
            .output()
            .unwrap_or_else(|e| panic!("nsenter {argv:?}: {e}"))
    }

    /// `argv` inside the container, in directory `dir` (a path inside the container).
    pub fn run_in(&self, dir: &Path, argv: &[&str]) -> Output {
        let mut all = vec!["env", "-C"];
        let dir = dir.to_str().expect("a UTF-8 directory");
        all.push(dir);
        all.extend_from_slice(argv);
        self.run(&all)
    }

    fn command(&self, argv: &[&str]) -> Command {
        let leader = self.leader.to_string();
        let mut cmd = Command::new("nsenter");
        cmd.args(["--target", &leader])
            .args(["--mount", "--uts", "--ipc", "--net", "--pid", "--cgroup"])
            .args(["--root", "--wd"])
            .args([
                "env",
                "-i",
                "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                "LANG=C.UTF-8",
            ])
            .args(argv)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `argv` inside and panics with its output unless it exits 0; its stdout.
    pub fn ok(&self, argv: &[&str]) -> String {
        let o = self.run(argv);
        assert!(
            o.status.success(),
            "{argv:?} in the container: {}\n{}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).to_string()
    }
}

/// nspawn's child whose innermost pid is 1: the container's systemd.
pub fn leader_of(nspawn: u32) -> Option<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{nspawn}/task")).ok()?;
    for t in tasks.flatten() {
        let children = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        for child in children
            .split_whitespace()
            .filter_map(|c| c.parse::<u32>().ok())
        {
            let status =
                std::fs::read_to_string(format!("/proc/{child}/status")).unwrap_or_default();
            let nspid: Vec<&str> = status
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .map(|l| l.split_whitespace().collect())
                .unwrap_or_default();
            if nspid.len() > 1 && nspid.last() == Some(&"1") {
                return Some(child);
            }
        }
    }
    None
}

impl Drop for Container {
    fn drop(&mut self) {
        let nspawn = nix::unistd::Pid::from_raw(self.nspawn.id() as i32);
        let _ = nix::sys::signal::kill(nspawn, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + HALT_LIMIT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.nspawn.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // nspawn killed alone would leave the container running: its PID 1 first, which ends
        // every process of the container's pid namespace.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!(
                "container: not halted {} s after SIGTERM; killing it\n{}\n",
                HALT_LIMIT.as_secs(),
                self.console()
            )
            .as_bytes(),
        );
        if self.leader != 0 {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.leader as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.nspawn.kill();
        let _ = self.nspawn.wait();
    }
}
