//! A trial's hold on the machine: the lock, the journal, the watchdog, and the restore that
//! runs however the trial ends.
//!
//! - success and error: [`Session::finish`] restores and verifies;
//! - panic: [`Drop`] restores during unwinding;
//! - SIGINT, SIGTERM, SIGHUP: the handlers of [`crate::signals`] only set a flag; the trial
//!   loop stops at its next check and the session restores on the way out;
//! - SIGKILL (or a second signal): nothing of ours runs, so a watchdog script started before the
//!   first write sees its pipe close without `done` and runs `cpulab try --restore`, which
//!   finds the journal unlocked and restores it within a second or two.

use super::journal::{self, Entry, Journal, Lock};
use super::ops::{self, Op, Target};
use crate::error::bad_input;
use crate::signals::watchdog::Watchdog;
use anyhow::Result;
use std::path::{Path, PathBuf};

/// Runs `cpulab try --restore` once cpulab's end of the pipe closes without `done`.
const RESTORE_SCRIPT: &str = r#"trap '' INT TERM HUP PIPE
while IFS= read -r line; do
  [ "$line" = done ] && exit 0
done
exec "$@"
"#;

pub struct Session {
    root: PathBuf,
    journal: Journal,
    _lock: Lock,
    watchdog: Option<Watchdog>,
    finished: bool,
}

impl Session {
    /// Takes the lock and starts the watchdog. Nothing is written yet.
    pub fn begin(
        root: &Path,
        command: &str,
        progress: &crate::experiment::Progress,
    ) -> Result<Self> {
        // A restore that is just finishing (the watchdog's, or a start's leftover check) holds
        // the lock for a moment: wait for it rather than call it a running trial.
        let Some(lock) = journal::lock(root, std::time::Duration::from_secs(3))? else {
            let pid = journal::load(root)
                .ok()
                .flatten()
                .map(|j| j.pid)
                .unwrap_or(0);
            return Err(bad_input(format!(
                "another `cpulab try` (pid {pid}) is running; wait for it or stop it (it restores on SIGTERM)"
            )));
        };
        // A journal the lock did not protect is a leftover: restore it before anything else.
        if let Some(j) = journal::load(root)? {
            journal::write_back(&j.entries, false)?;
            journal::remove(root)?;
            progress.note(&format!(
                "restored settings left changed by an interrupted `{}` (pid {})",
                j.command, j.pid
            ));
        }
        let watchdog = match std::env::current_exe() {
            Ok(exe) => {
                let args = [
                    exe.into_os_string(),
                    "--root".into(),
                    root.as_os_str().to_owned(),
                    "--quiet".into(),
                    "try".into(),
                    "--restore".into(),
                ];
                match Watchdog::spawn(RESTORE_SCRIPT, &args) {
                    Ok(w) => Some(w),
                    Err(e) => {
                        progress.warn(&format!(
                            "{e}: if cpulab is killed with SIGKILL, the next cpulab start restores"
                        ));
                        None
                    }
                }
            }
            Err(e) => {
                progress.warn(&format!("no watchdog (cannot find cpulab's own path: {e})"));
                None
            }
        };
        Ok(Self {
            root: root.to_path_buf(),
            journal: Journal {
                pid: std::process::id(),
                started_unix_s: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0),
                command: command.to_string(),
                entries: Vec::new(),
            },
            _lock: lock,
            watchdog,
            finished: false,
        })
    }

    /// Writes `ops` of `setting`. A target seen for the first time has its original value read
    /// and journalled (fsync'd) before it is written.
    pub fn apply(&mut self, setting: &str, ops_: &[Op]) -> Result<()> {
        use anyhow::Context;
        self.apply_ops(setting, ops_)
            .map_err(refused_to_root)
            .with_context(|| format!("{setting} cannot be applied here"))
    }

    fn apply_ops(&mut self, setting: &str, ops_: &[Op]) -> Result<()> {
        for op in ops_ {
            if !self.journal.entries.iter().any(|e| e.target == op.target) {
                let original = ops::read(&op.target)?;
                if original == op.value && !matches!(op.target, Target::Mount { .. }) {
                    // Journalled all the same: restoring an unchanged value is harmless, and the
                    // trial's other rounds still flip it.
                }
                self.journal.entries.push(Entry {
                    setting: setting.to_string(),
                    target: op.target.clone(),
                    original,
                    changed: op.value.clone(),
                });
                journal::save(&self.root, &self.journal)?;
            }
            ops::write(&op.target, &op.value)?;
        }
        Ok(())
    }

    /// Puts the original values back for a baseline round, leaving debugfs mounted.
    pub fn revert(&mut self) -> Result<Vec<String>> {
        journal::write_back(&self.journal.entries, true)
    }

    pub fn entries(&self) -> &[Entry] {
        &self.journal.entries
    }

    /// Restores everything, verifies it, removes the journal and dismisses the watchdog.
    pub fn finish(mut self) -> Result<Vec<String>> {
        self.finished = true;
        let notes = journal::write_back(&self.journal.entries, false)?;
        journal::remove(&self.root)?;
        drop(self.watchdog.take());
        Ok(notes)
    }

    /// `--keep`: leaves the changed values, removes the journal, dismisses the watchdog, and
    /// returns the entries so the caller can print how to undo them.
    pub fn keep(mut self) -> Result<Vec<Entry>> {
        self.finished = true;
        // Unmount debugfs all the same: it was ours only for the trial.
        let mounts: Vec<Entry> = self
            .journal
            .entries
            .iter()
            .filter(|e| matches!(e.target, Target::Mount { .. }))
            .cloned()
            .collect();
        journal::write_back(&mounts, false)?;
        journal::remove(&self.root)?;
        drop(self.watchdog.take());
        Ok(self
            .journal
            .entries
            .iter()
            .filter(|e| !matches!(e.target, Target::Mount { .. }))
            .cloned()
            .collect())
    }
}

/// A permission error while cpulab runs as root is not about file modes: say what refuses root.
fn refused_to_root(e: anyhow::Error) -> anyhow::Error {
    let denied = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied)
    });
    if denied && nix::unistd::geteuid().is_root() {
        e.context(
            "refused although cpulab runs as root: kernel lockdown (man kernel_lockdown.7) or a \
             security module (SELinux, AppArmor) forbids this write here",
        )
    } else {
        e
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        match journal::write_back(&self.journal.entries, false) {
            Ok(_) => {
                let _ = journal::remove(&self.root);
            }
            // The journal stays; the watchdog (dismissed below only if we restored) or the next
            // start restores it.
            Err(e) => {
                eprintln!("cpulab: {e:#}");
                // Let the watchdog try too: close the pipe without `done`.
                if let Some(w) = self.watchdog.take() {
                    w.abandon();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_mid_trial_restores_while_unwinding() {
        let d = tempfile::tempdir().unwrap();
        let knob = d.path().join("knob");
        std::fs::write(&knob, "0\n").unwrap();
        let root = d.path().to_path_buf();
        let k = knob.clone();
        let r = std::panic::catch_unwind(move || {
            let quiet = crate::experiment::silent;
            let mut s =
                Session::begin(&root, "test", &crate::experiment::Progress::new(&quiet)).unwrap();
            s.apply("x", &[Op::file(k.clone(), "7")]).unwrap();
            assert_eq!(ops::read_file_value(&k).unwrap(), "7");
            assert!(journal::path(&root).exists(), "journalled before the write");
            panic!("boom");
        });
        assert!(r.is_err());
        assert_eq!(ops::read_file_value(&knob).unwrap(), "0");
        assert!(!journal::path(d.path()).exists());
    }

    #[test]
    fn a_second_trial_waits_for_none() {
        let d = tempfile::tempdir().unwrap();
        let quiet = crate::experiment::silent;
        let p = crate::experiment::Progress::new(&quiet);
        let first = Session::begin(d.path(), "one", &p).unwrap();
        let e = Session::begin(d.path(), "two", &p).err().unwrap();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(format!("{e:#}").contains("another `cpulab try`"));
        first.finish().unwrap();
    }
}
