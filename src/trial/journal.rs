//! The journal: every original value, on disk before the first write, so nothing a trial
//! changes can outlive it.
//!
//! `/run/cpulab/try.journal` (0600 in a 0700 directory, written to a temporary file, fsync'd and
//! renamed, the directory fsync'd) lists each target with the value it had. A running trial holds
//! an exclusive `flock` on `try.lock` beside it; the lock dies with the process, however it dies.
//! So a journal whose lock is free is a leftover: [`recover_at_start`] (one `stat` on every
//! cpulab start), the SIGKILL watchdog and `cpulab try --restore` all restore it the same way,
//! then read each value back and compare it with the journal.

use super::ops::{self, Target};
use anyhow::{Context, Result};
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// One target a trial changed, with the value it had before.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The setting the write belongs to (`haltpoll.guest_halt_poll_ns`).
    pub setting: String,
    pub target: Target,
    pub original: String,
    pub changed: String,
}

/// What is on disk.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Journal {
    /// The cpulab that wrote it.
    pub pid: u32,
    pub started_unix_s: u64,
    /// The command line, for the message that restores it.
    pub command: String,
    pub entries: Vec<Entry>,
}

pub fn dir(root: &Path) -> PathBuf {
    root.join("run/cpulab")
}

pub fn path(root: &Path) -> PathBuf {
    dir(root).join("try.journal")
}

fn lock_path(root: &Path) -> PathBuf {
    dir(root).join("try.lock")
}

/// The exclusive lock a running trial holds.
pub type Lock = Flock<File>;

/// Takes the lock, waiting up to `wait` for a dying cpulab's descendants to let it go.
/// `Ok(None)` when another live cpulab holds it.
pub fn lock(root: &Path, wait: std::time::Duration) -> Result<Option<Lock>> {
    let d = dir(root);
    create_dir(&d)?;
    let until = std::time::Instant::now() + wait;
    loop {
        let f = open_private(&lock_path(root), false)?;
        match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
            Ok(l) => return Ok(Some(l)),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) if std::time::Instant::now() < until => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(None),
            Err((_, e)) => return Err(e).context("cannot lock the try journal"),
        }
    }
}

fn create_dir(d: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if !d.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(d)
            .with_context(|| format!("cannot create {}", d.display()))?;
    }
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot restrict {}", d.display()))
}

fn open_private(p: &Path, truncate: bool) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(truncate)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(p)
        .with_context(|| format!("cannot open {}", p.display()))
}

/// Writes the journal durably: temporary file, fsync, rename, fsync of the directory.
pub fn save(root: &Path, j: &Journal) -> Result<()> {
    let d = dir(root);
    create_dir(&d)?;
    let tmp = d.join("try.journal.tmp");
    let mut f = open_private(&tmp, true)?;
    f.write_all(serde_json::to_string_pretty(j)?.as_bytes())?;
    f.sync_all().context("cannot fsync the try journal")?;
    std::fs::rename(&tmp, path(root)).context("cannot put the try journal in place")?;
    File::open(&d)
        .and_then(|df| df.sync_all())
        .with_context(|| format!("cannot fsync {}", d.display()))
}

/// Reads the journal, if there is one.
pub fn load(root: &Path) -> Result<Option<Journal>> {
    let p = path(root);
    match std::fs::read_to_string(&p) {
        Ok(t) => serde_json::from_str(&t)
            .map(Some)
            .with_context(|| format!("{} is not a cpulab try journal", p.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", p.display())),
    }
}

pub fn remove(root: &Path) -> Result<()> {
    match std::fs::remove_file(path(root)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).context("cannot remove the try journal")
        }
        _ => Ok(()),
    }
}

fn gone(t: &Target) -> bool {
    match t {
        Target::Affinity { tid, .. } => !Path::new(&format!("/proc/{tid}")).exists(),
        _ => false,
    }
}

/// Writes each original value back (last change first), then reads every value back and
/// compares. `keep_mounts` leaves debugfs mounted (between the rounds of a trial). Returns notes
/// (threads that ended meanwhile); a value that does not read back as it was is an error naming
/// the setting and the expected value.
pub fn write_back(entries: &[Entry], keep_mounts: bool) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    let mut failures = Vec::new();
    let todo = || {
        entries
            .iter()
            .rev()
            .filter(move |e| !(keep_mounts && matches!(e.target, Target::Mount { .. })))
    };
    for e in todo() {
        if gone(&e.target) {
            notes.push(format!(
                "{}: {} has ended, nothing to restore",
                e.setting, e.target
            ));
            continue;
        }
        if let Err(err) = ops::write(&e.target, &e.original) {
            failures.push(format!("{} ({}): {err:#}", e.setting, e.target));
        }
    }
    // Threads started while the changed mask was in place inherited it; the journal does not
    // know them. Listed after the journalled threads are back, so any thread started from now
    // on inherits the original mask.
    let newcomers = newcomers(entries, Path::new("/"));
    for e in &newcomers {
        // A thread that ended since it was listed needs nothing.
        if let Err(err) = ops::write(&e.target, &e.original)
            && !gone(&e.target)
        {
            failures.push(format!("{} ({}): {err:#}", e.setting, e.target));
        }
    }
    if !newcomers.is_empty() {
        notes.push(format!(
            "{} thread(s) started during the trial ({}) given their process's original affinity",
            newcomers.len(),
            newcomers
                .iter()
                .map(|e| e.target.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    for e in todo().chain(newcomers.iter()) {
        if gone(&e.target) {
            continue;
        }
        match ops::read(&e.target) {
            Ok(now) if now == e.original => {}
            Ok(now) => failures.push(format!(
                "{} ({}) reads {now:?} after restore, expected {:?}",
                e.setting, e.target, e.original
            )),
            Err(err) => failures.push(format!(
                "{} ({}) cannot be read back (expected {:?}): {err:#}",
                e.setting, e.target, e.original
            )),
        }
    }
    if failures.is_empty() {
        Ok(notes)
    } else {
        anyhow::bail!(
            "restore incomplete: {}; the journal stays for `cpulab try --restore`",
            failures.join("; ")
        )
    }
}

/// Threads of a process whose affinity the journal holds that the journal does not list (they
/// started during the trial), each with the process's original mask: its main thread's, or
/// else the first journalled thread's. `root` holds the `proc` tree.
pub fn newcomers(entries: &[Entry], root: &Path) -> Vec<Entry> {
    let mut pids: Vec<i32> = entries
        .iter()
        .filter_map(|e| match e.target {
            Target::Affinity { pid, .. } => Some(pid),
            _ => None,
        })
        .collect();
    pids.dedup();
    let mut out = Vec::new();
    for pid in pids {
        let known = |tid: i32| {
            entries
                .iter()
                .any(|e| e.target == Target::Affinity { pid, tid })
        };
        let of_pid = || {
            entries
                .iter()
                .filter(move |e| matches!(e.target, Target::Affinity { pid: p, .. } if p == pid))
        };
        let Some(model) = of_pid()
            .find(|e| e.target == Target::Affinity { pid, tid: pid })
            .or_else(|| of_pid().next())
        else {
            continue;
        };
        for tid in tasks(root, pid) {
            if !known(tid) {
                out.push(Entry {
                    setting: model.setting.clone(),
                    target: Target::Affinity { pid, tid },
                    original: model.original.clone(),
                    changed: model.changed.clone(),
                });
            }
        }
    }
    out
}

/// The thread ids of `pid`, from `proc/PID/task` under `root`; none when it has ended.
pub fn tasks(root: &Path, pid: i32) -> Vec<i32> {
    let mut t: Vec<i32> = std::fs::read_dir(root.join(format!("proc/{pid}/task")))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    t.sort();
    t
}

/// Restores a leftover journal under the lock; `Ok(None)` when there is none, or a live trial
/// owns it. On success the journal is removed.
pub fn restore_leftover(
    root: &Path,
    wait: std::time::Duration,
) -> Result<Option<(Journal, Vec<String>)>> {
    let Some(_lock) = lock(root, wait)? else {
        return Ok(None);
    };
    let Some(j) = load(root)? else {
        return Ok(None);
    };
    let notes = write_back(&j.entries, false)?;
    remove(root)?;
    Ok(Some((j, notes)))
}

/// What every cpulab start does: one `stat`; when a journal is there and no live trial holds it,
/// restore it and say so.
pub fn recover_at_start(root: &Path, quiet: bool) {
    if std::fs::symlink_metadata(path(root)).is_err() {
        return;
    }
    if !nix::unistd::geteuid().is_root() && root == Path::new("/") {
        crate::output::status(
            quiet,
            "cpulab: a `cpulab try` left settings changed (journal /run/cpulab/try.journal); run `sudo cpulab try --restore`",
        );
        return;
    }
    match restore_leftover(root, std::time::Duration::from_millis(0)) {
        Ok(Some((j, notes))) => {
            let mut names: Vec<&str> = j.entries.iter().map(|e| e.setting.as_str()).collect();
            names.dedup();
            eprintln!(
                "cpulab: restored {} left changed by an interrupted `{}` (pid {}); every value read back as journalled",
                names.join(", "),
                j.command,
                j.pid
            );
            for n in notes {
                crate::output::status(quiet, &format!("note: {n}"));
            }
        }
        Ok(None) => {}
        Err(e) => eprintln!("cpulab: {e:#}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(p: &Path, original: &str) -> Entry {
        Entry {
            setting: "haltpoll.guest_halt_poll_ns".into(),
            target: Target::File { path: p.into() },
            original: original.into(),
            changed: "200000".into(),
        }
    }

    #[test]
    fn saved_private_and_restored_with_read_back() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("knob");
        std::fs::write(&f, "200000\n").unwrap();
        let j = Journal {
            pid: 1,
            command: "cpulab try x=1".into(),
            entries: vec![entry(&f, "0")],
            ..Default::default()
        };
        save(d.path(), &j).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path(d.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(load(d.path()).unwrap().unwrap(), j);
        let (back, _) = restore_leftover(d.path(), std::time::Duration::ZERO)
            .unwrap()
            .unwrap();
        assert_eq!(back.entries.len(), 1);
        assert_eq!(std::fs::read_to_string(&f).unwrap().trim(), "0");
        assert!(!path(d.path()).exists());
    }

    #[test]
    fn threads_the_journal_does_not_know_get_the_main_threads_original() {
        let d = tempfile::tempdir().unwrap();
        for tid in [100, 101, 102] {
            std::fs::create_dir_all(d.path().join(format!("proc/100/task/{tid}"))).unwrap();
        }
        let aff = |tid: i32, original: &str| Entry {
            setting: "pid:100.affinity".into(),
            target: Target::Affinity { pid: 100, tid },
            original: original.into(),
            changed: "0".into(),
        };
        let entries = [aff(101, "1"), aff(100, "0-1")];
        let n = newcomers(&entries, d.path());
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].target, Target::Affinity { pid: 100, tid: 102 });
        assert_eq!(
            n[0].original, "0-1",
            "the main thread's, not the first entry's"
        );
        assert!(newcomers(&[entry(d.path(), "0")], d.path()).is_empty());
    }

    #[test]
    fn a_held_lock_means_a_live_trial() {
        let d = tempfile::tempdir().unwrap();
        save(d.path(), &Journal::default()).unwrap();
        let held = lock(d.path(), std::time::Duration::ZERO).unwrap().unwrap();
        assert!(
            restore_leftover(d.path(), std::time::Duration::ZERO)
                .unwrap()
                .is_none()
        );
        drop(held);
        assert!(
            restore_leftover(d.path(), std::time::Duration::ZERO)
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn a_value_that_does_not_read_back_names_setting_and_value() {
        let d = tempfile::tempdir().unwrap();
        // A directory cannot be written as a file: the restore fails and says what it expected.
        let e = write_back(&[entry(d.path(), "0")], false).unwrap_err();
        let m = format!("{e:#}");
        assert!(
            m.contains("haltpoll.guest_halt_poll_ns") && m.contains("\"0\""),
            "{m}"
        );
    }
}
