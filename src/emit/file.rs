//! Result files: checked before the run, written at the end, rescued when that write fails.
//!
//! A long run must not be lost to a missing directory at its end, so the path is checked when
//! the flags are read ([`check_writable`]); a write that still fails (the disk filled, the
//! directory went away) puts the bytes in a new file in the temporary directory and names it
//! in the error ([`write_file`]). Both failures are one line naming the path, exit 2.

use crate::error::bad_input;
use anyhow::Result;
use std::path::Path;

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
