//! Puts the git revision beside the version, so `cpulab --version` says which commit a result
//! came from: `cpulab 0.1.0 (1a2b3c4)` in a git checkout, `cpulab 0.1.0` anywhere else (a
//! source tarball, no git installed), and a packager's `CPULAB_LOCAL_VERSION` after a `+`.
//! The build script reruns only when the checked-out commit or that variable changes, never on
//! every build.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// The revision, when the crate's own directory is the top of a git work tree (not a tarball
/// unpacked somewhere inside an unrelated repository), with the files whose change means a new
/// commit is checked out.
fn revision(manifest_dir: &Path) -> Option<(String, Vec<PathBuf>)> {
    let top = PathBuf::from(git(manifest_dir, &["rev-parse", "--show-toplevel"])?);
    if top.canonicalize().ok()? != manifest_dir.canonicalize().ok()? {
        return None;
    }
    let rev = git(manifest_dir, &["rev-parse", "--short", "HEAD"])?;
    let abs = |p: String| {
        let p = PathBuf::from(p);
        if p.is_absolute() {
            p
        } else {
            manifest_dir.join(p)
        }
    };
    // In a linked worktree HEAD lives in the worktree's git dir, branches in the common one.
    let git_dir = abs(git(manifest_dir, &["rev-parse", "--git-dir"])?);
    let common_dir = abs(git(manifest_dir, &["rev-parse", "--git-common-dir"])?);
    let mut watch = vec![git_dir.join("HEAD")];
    if let Some(branch) = git(manifest_dir, &["symbolic-ref", "-q", "HEAD"]) {
        watch.push(common_dir.join(branch));
        watch.push(common_dir.join("packed-refs"));
    }
    Some((rev, watch))
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CPULAB_LOCAL_VERSION");
    let mut version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    // A packager's local version, as SemVer build metadata: CPULAB_LOCAL_VERSION=lifecycle.1
    // builds a 0.1.0+lifecycle.1 (scripts/deb-lifecycle.sh's higher package, whose exporter
    // must say it is not the one it replaced).
    if let Ok(local) = std::env::var("CPULAB_LOCAL_VERSION")
        && !local.is_empty()
    {
        version = format!("{version}+{local}");
    }
    println!("cargo:rustc-env=CPULAB_PKG_VERSION={version}");
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    match revision(&manifest_dir) {
        Some((rev, watch)) => {
            // A path that does not exist would make cargo rerun this script on every build.
            for path in watch.iter().filter(|p| p.exists()) {
                println!("cargo:rerun-if-changed={}", path.display());
            }
            println!("cargo:rustc-env=CPULAB_VERSION={version} ({rev})");
            println!("cargo:rustc-env=CPULAB_REVISION={rev}");
        }
        None => {
            println!("cargo:rustc-env=CPULAB_VERSION={version}");
            println!("cargo:rustc-env=CPULAB_REVISION=");
        }
    }
}
