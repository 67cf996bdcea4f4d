//! Nothing left behind: temporary directories and the record of live processes.
//!
//! Every run works in one private directory, `$TMPDIR/cpulab-pair.<pid>.<random>`, mode 0700,
//! that holds the database cluster, sockets, configurations and logs. Three layers remove it and
//! end the servers, from the orderly to the last resort:
//! 1. [`Scratch`] and [`crate::pair::procs::Proc`] are drop guards: a returned error, a failed
//!    client, Ctrl-C or SIGTERM (which become an error, see `signals`) and a panic that unwinds
//!    all pass through them.
//! 2. A panic hook signals every registered server group at once, in case the panic happened on
//!    a thread whose unwinding does not reach the guards; the guards then finish the job.
//! 3. If cpulab is killed outright (SIGKILL, or a panic with `panic = "abort"`), no code of ours
//!    runs: the servers get their parent-death signal from the kernel, and the watchdog (see
//!    `watchdog`) notices its pipe closing and removes the directory. Should the watchdog have
//!    been killed too, the next `cpulab pair` removes every `cpulab-pair.<pid>.*` directory whose
//!    pid is no longer running ([`remove_stale`]).

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};

/// Name prefix of every temporary directory `cpulab pair` creates.
pub const PREFIX: &str = "cpulab-pair.";

/// Live server and client processes, by pid, with their graceful stop signal.
static LIVE: Mutex<Vec<(i32, i32)>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();

pub fn register_process(pid: i32, stop_signal: i32) {
    install_panic_hook();
    if let Ok(mut l) = LIVE.lock() {
        l.push((pid, stop_signal));
    }
}

pub fn unregister_process(pid: i32) {
    if let Ok(mut l) = LIVE.lock() {
        l.retain(|(p, _)| *p != pid);
    }
}

fn install_panic_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // try_lock: the panicking thread may be the one holding the lock.
            if let Ok(l) = LIVE.try_lock() {
                for &(pid, sig) in l.iter() {
                    if let Ok(sig) = nix::sys::signal::Signal::try_from(sig) {
                        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), sig);
                    }
                }
            }
            previous(info);
        }));
    });
}

/// The run's private directory; removed on drop.
#[derive(Debug)]
pub struct Scratch {
    dir: Option<tempfile::TempDir>,
}

impl Scratch {
    /// Creates `$TMPDIR/cpulab-pair.<pid>.<random>` with mode 0700, after removing stale ones.
    pub fn create() -> Result<Self> {
        let base = std::env::temp_dir();
        remove_stale(&base);
        use std::os::unix::fs::PermissionsExt;
        // Private from its creation: tempfile otherwise leaves the mode to the umask.
        let dir = tempfile::Builder::new()
            .prefix(&format!("{PREFIX}{}.", std::process::id()))
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(&base)
            .with_context(|| {
                format!("cannot create a temporary directory in {}", base.display())
            })?;
        Ok(Self { dir: Some(dir) })
    }

    pub fn path(&self) -> &Path {
        self.dir
            .as_ref()
            .map(|d| d.path())
            .unwrap_or(Path::new("/nonexistent"))
    }

    /// A subdirectory, created with mode 0700.
    pub fn subdir(&self, name: &str) -> Result<PathBuf> {
        use std::os::unix::fs::DirBuilderExt;
        let p = self.path().join(name);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&p)
            .with_context(|| format!("cannot create {}", p.display()))?;
        Ok(p)
    }

    /// Hands the directory tree to `uid:gid`, so a server running as that user can use it.
    pub fn chown_all(&self, uid: u32, gid: u32) -> Result<()> {
        chown_tree(self.path(), uid, gid)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(d) = self.dir.take() {
            let p = d.path().to_path_buf();
            if d.close().is_err() {
                let _ = std::fs::remove_dir_all(&p);
            }
        }
    }
}

fn chown_tree(p: &Path, uid: u32, gid: u32) -> Result<()> {
    std::os::unix::fs::lchown(p, Some(uid), Some(gid))
        .with_context(|| format!("cannot hand {} to uid {uid}", p.display()))?;
    if p.is_dir() && !p.is_symlink() {
        for e in std::fs::read_dir(p)?.flatten() {
            chown_tree(&e.path(), uid, gid)?;
        }
    }
    Ok(())
}

/// The pid in a directory name `cpulab-pair.<pid>.<random>`.
pub fn owner_pid(name: &str) -> Option<i32> {
    name.strip_prefix(PREFIX)?.split('.').next()?.parse().ok()
}

/// Removes directories of earlier runs whose cpulab is gone (killed before it could clean up).
pub fn remove_stale(base: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(base) else {
        return removed;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(pid) = owner_pid(&name) else {
            continue;
        };
        // No signal only checks for existence. EPERM means it exists (another user's).
        let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            == Err(nix::errno::Errno::ESRCH);
        if gone && std::fs::remove_dir_all(e.path()).is_ok() {
            removed.push(e.path());
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_pid_from_name() {
        assert_eq!(owner_pid("cpulab-pair.1234.AbCd"), Some(1234));
        assert_eq!(owner_pid("cpulab-pair.x.AbCd"), None);
        assert_eq!(owner_pid("other.1234.x"), None);
    }

    #[test]
    fn stale_dirs_of_dead_pids_are_removed() {
        let base = tempfile::tempdir().unwrap();
        // pid_max is at most 2^22: this pid cannot exist.
        let dead = base.path().join(format!("{PREFIX}{}.abc", 1 << 23));
        let live = base
            .path()
            .join(format!("{PREFIX}{}.abc", std::process::id()));
        std::fs::create_dir_all(dead.join("data")).unwrap();
        std::fs::create_dir_all(&live).unwrap();
        let removed = remove_stale(base.path());
        assert_eq!(removed, vec![dead.clone()]);
        assert!(!dead.exists() && live.exists());
    }

    #[test]
    fn scratch_is_private_and_removed() {
        use std::os::unix::fs::PermissionsExt;
        let s = Scratch::create().unwrap();
        let p = s.path().to_path_buf();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        s.subdir("x").unwrap();
        drop(s);
        assert!(!p.exists());
    }
}
