//! Result files: checked before the run, written at the end, rescued when that write fails.
//!
//! A long run must not be lost to a missing directory at its end, so the path is checked when
//! the flags are read ([`check_writable`]); a write that still fails (the disk filled, the
//! directory went away) puts the bytes in a new file in the temporary directory and names it
//! in the error ([`write_file`]). Both failures are one line naming the path, exit 2.

use crate::error::bad_input;
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Files no output flag may write over, each with what it is: the results a command reads and
/// the history it records in ([`protect`]). `report r.json --html r.json` once replaced the
/// result with its page, and `history report --html` naming the history file replaced the
/// whole history.
static PROTECTED: Mutex<Vec<(PathBuf, String)>> = Mutex::new(Vec::new());

/// Marks `path` as a file no output may replace; `what` says what it is ("the history cpulab
/// records in"). Called by the layers that read or keep files, before outputs are checked.
pub fn protect(path: &Path, what: &str) {
    if let Some(id) = identity(path)
        && let Ok(mut p) = PROTECTED.lock()
    {
        p.push((id, what.to_string()));
    }
}

/// The file a path names, whether or not it exists yet: the canonical path when it exists,
/// else its canonical directory joined with its name (`None` when neither can be resolved).
fn identity(path: &Path) -> Option<PathBuf> {
    if let Ok(c) = std::fs::canonicalize(path) {
        return Some(c);
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Some(std::fs::canonicalize(parent).ok()?.join(path.file_name()?))
}

/// The protected file `path` would replace, if any: what it is.
fn protected(path: &Path) -> Option<String> {
    let id = identity(path)?;
    let p = PROTECTED.lock().ok()?;
    p.iter()
        .find(|(q, _)| *q == id)
        .map(|(_, what)| what.clone())
}

/// Fails with one line (exit 2) when `path` cannot be written. Creating and removing a scratch
/// file beside it is the only test that also catches read-only mounts and permissions.
pub fn check_writable(flag: &str, path: &Path) -> Result<()> {
    if path.is_dir() {
        return Err(bad_input(format!(
            "{flag} {}: is a directory; give a file name",
            path.display()
        )));
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(bad_input(format!(
            "{flag} {}: directory {} does not exist; create it or choose another path",
            path.display(),
            parent.display()
        )));
    }
    if let Some(what) = protected(path) {
        return Err(bad_input(format!(
            "{flag} {} is {what}; writing there would destroy it: choose another file",
            path.display()
        )));
    }
    tempfile::Builder::new()
        .prefix(".cpulab-write-check")
        .tempfile_in(parent)
        .map(drop)
        .map_err(|e| {
            bad_input(format!(
                "{flag} {}: cannot write in {} ({e}); choose another path",
                path.display(),
                parent.display()
            ))
        })
}

/// Writes `bytes` to `path`; when that fails, to a new file in the temporary directory, whose
/// name the error gives so the result is not lost. Either failure is one line, exit 2.
pub fn write_file(flag: &str, path: &Path, bytes: &[u8]) -> Result<()> {
    let Err(e) = std::fs::write(path, bytes) else {
        return Ok(());
    };
    let suffix = path
        .extension()
        .map(|x| format!(".{}", x.to_string_lossy()))
        .unwrap_or_default();
    let rescued = tempfile::Builder::new()
        .prefix("cpulab-")
        .suffix(&suffix)
        .tempfile()
        .and_then(|mut f| {
            std::io::Write::write_all(&mut f, bytes)?;
            f.keep().map_err(|k| k.error)
        });
    Err(bad_input(match rescued {
        Ok((_, saved)) => format!(
            "{flag} {}: cannot write it ({e}); the result was saved to {} instead",
            path.display(),
            saved.display()
        ),
        Err(e2) => format!(
            "{flag} {}: cannot write it ({e}), nor a file in the temporary directory ({e2})",
            path.display()
        ),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_protected_file_is_refused_under_any_spelling_and_others_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let kept = dir.path().join("result.json");
        std::fs::write(&kept, "{}").unwrap();
        protect(&kept, "a result this command reads");
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&kept, &link).unwrap();
        let dotted = dir.path().join(".").join("result.json");
        for same in [&kept, &link, &dotted] {
            let e = check_writable("--html", same).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2);
            assert!(
                format!("{e:#}").contains("is a result this command reads"),
                "{e:#}"
            );
        }
        check_writable("--html", &dir.path().join("page.html")).unwrap();
        // A file that does not exist yet is protected by its name in its directory.
        let later = dir.path().join("history.sqlite");
        protect(&later, "the history cpulab records in");
        assert!(check_writable("--html", &later).is_err());
    }
}
