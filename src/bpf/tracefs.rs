//! tracefs, read without changing the machine's mounts.
//!
//! A watch needs the scheduler tracepoints' ids and record layouts, `cpulab host` KVM's, and
//! only tracefs serves them.
//! Where it is mounted, it is read in place. Where it is not (this project's guests, many
//! containers), it is mounted in a mount namespace of one thread of cpulab's own, made private
//! first so nothing propagates back, read there, and gone when that thread ends: no other process
//! ever sees the mount, and no way cpulab can end (SIGKILL included) can leave it behind, because
//! the kernel drops a namespace with its last user.

use super::format::Format;
use std::path::Path;

const TRACEFS: &str = "/sys/kernel/tracing";

/// Runs `read` on the tracefs directory: the machine's own if mounted, else one mounted in a
/// private mount namespace for the duration of `read` ([`in_private_mount`]).
pub fn with_tracefs<T: Send>(
    read: impl FnOnce(&Path) -> Result<T, String> + Send,
) -> Result<T, String> {
    let dir = Path::new(TRACEFS);
    if dir.join("events").is_dir() {
        return read(dir);
    }
    in_private_mount(read)
}

/// Mounts tracefs on its usual directory in a new, private mount namespace of a thread spawned
/// for it, runs `read` there, and lets the thread (and with it the namespace and the mount) end.
/// Needs CAP_SYS_ADMIN, as any mount does.
pub fn in_private_mount<T: Send>(
    read: impl FnOnce(&Path) -> Result<T, String> + Send,
) -> Result<T, String> {
    private_mount("tracefs", TRACEFS, read)
}

const DEBUGFS: &str = "/sys/kernel/debug";

/// Runs `read` on the debugfs directory: the machine's own where it is mounted (it has `kvm/`),
/// else one mounted in a private mount namespace of one thread, as tracefs is
/// ([`in_private_mount`]): nothing is left mounted however cpulab ends.
pub fn with_debugfs<T: Send>(
    read: impl FnOnce(&Path) -> Result<T, String> + Send,
) -> Result<T, String> {
    let dir = Path::new(DEBUGFS);
    if dir.join("kvm").is_dir() {
        return read(dir);
    }
    private_mount("debugfs", DEBUGFS, read)
}

/// Mounts file system `fs` on `target` in a private mount namespace of a thread of its own and
/// runs `read` there.
fn private_mount<T: Send>(
    fs: &'static str,
    target: &'static str,
    read: impl FnOnce(&Path) -> Result<T, String> + Send,
) -> Result<T, String> {
    use nix::mount::{MsFlags, mount};
    std::thread::scope(|s| {
        s.spawn(|| {
            // A mount namespace of this thread alone: CLONE_NEWNS (with the CLONE_FS it implies)
            // is allowed to one thread of a multi-threaded process.
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
                .map_err(|e| format!("cannot make a private mount namespace to read {fs}: {e}"))?;
            // Private before mounting: where / is shared (systemd makes it so), a mount in the
            // copy would otherwise propagate to the machine's namespace.
            mount(
                None::<&str>,
                "/",
                None::<&str>,
                MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                None::<&str>,
            )
            .map_err(|e| format!("cannot make the mounts of a private namespace private: {e}"))?;
            mount(
                Some("nodev"),
                target,
                Some(fs),
                MsFlags::empty(),
                None::<&str>,
            )
            .map_err(|e| format!("cannot mount {fs} on {target}: {e}"))?;
            read(Path::new(target))
        })
        .join()
        .unwrap_or_else(|_| Err(format!("reading {fs} panicked")))
    })
}

/// The format of `events/sched/<name>` under a tracefs directory.
pub fn sched_format(dir: &Path, name: &str) -> Result<Format, String> {
    event_format(dir, "sched", name)
}

/// The format of `events/<system>/<name>` under a tracefs directory; `Ok(None)` when this
/// kernel has no such tracepoint (its system's module not loaded, or a kernel without it).
pub fn find_format(dir: &Path, system: &str, name: &str) -> Result<Option<Format>, String> {
    let p = dir.join("events").join(system).join(name).join("format");
    match std::fs::read_to_string(&p) {
        Ok(text) => Format::parse(&text).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", p.display())),
    }
}

/// The format of `events/<system>/<name>` under a tracefs directory.
pub fn event_format(dir: &Path, system: &str, name: &str) -> Result<Format, String> {
    find_format(dir, system, name)?.ok_or_else(|| {
        format!(
            "this kernel has no tracepoint {system}:{name} (no {})",
            dir.join("events").join(system).join(name).display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracefs_mounts(mountinfo: &str) -> usize {
        std::fs::read_to_string(mountinfo)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(" - tracefs "))
            .count()
    }

    /// The mount is seen by the thread that reads, and never by the process's other threads,
    /// whose namespace is the machine's: the property that lets no ending of cpulab leave it.
    #[test]
    fn a_private_tracefs_mount_is_never_seen_outside_its_thread() {
        if !nix::unistd::geteuid().is_root() {
            crate::testing::skipped(
                "a_private_tracefs_mount_is_never_seen_outside_its_thread",
                "mounting needs root",
            );
            return;
        }
        let leader = format!("/proc/{}/mountinfo", std::process::id());
        let before = tracefs_mounts(&leader);
        let seen = in_private_mount(|dir| {
            let inside = tracefs_mounts("/proc/thread-self/mountinfo");
            let outside = tracefs_mounts(&leader);
            let id = sched_format(dir, "sched_switch")?.id;
            Ok((inside, outside, id))
        })
        .unwrap();
        assert_eq!(seen.0, before + 1, "the reading thread sees its mount");
        assert_eq!(seen.1, before, "the rest of the process never does");
        assert!(seen.2 > 0, "a tracepoint id was read through it");
        assert_eq!(tracefs_mounts(&leader), before, "nothing left after");
    }

    #[test]
    fn a_failing_read_reports_its_error_and_leaves_nothing() {
        let leader = format!("/proc/{}/mountinfo", std::process::id());
        let before = tracefs_mounts(&leader);
        let r: Result<(), String> = in_private_mount(|_| Err("no such event".into()));
        assert!(r.is_err());
        assert_eq!(tracefs_mounts(&leader), before);
    }
}
