//! Kernel lockdown: why debugfs refuses root.
//!
//! Under lockdown (`integrity` or `confidentiality`, `man kernel_lockdown.7`) the kernel refuses
//! to open writable debugfs files, the scheduler's `sched/` knobs among them, with EPERM even
//! for root: a bare "Operation not permitted" then hides the cause. The mode is in
//! `/sys/kernel/security/lockdown` when securityfs is mounted; without it, the kernel log says
//! so at boot ("Kernel is locked down from ...") and at each refusal ("Lockdown: cat: debugfs
//! access is restricted").

use super::setting::Roots;
use std::path::Path;

/// The active mode from the text of `/sys/kernel/security/lockdown` (`none [integrity]
/// confidentiality`); `None` when lockdown is off or the text names no mode.
pub fn mode_from_securityfs(text: &str) -> Option<String> {
    let mode = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix('[')?.strip_suffix(']'))?;
    (mode != "none").then(|| mode.to_string())
}

/// What the kernel log says of lockdown, from its text (`dmesg` lines or `/dev/kmsg` records).
pub fn from_kernel_log(text: &str) -> Option<String> {
    let mut refused = false;
    for line in text.lines() {
        if let Some(i) = line.find("Kernel is locked down ") {
            let rest = &line[i + "Kernel is locked down ".len()..];
            let why = rest.split(';').next().unwrap_or(rest).trim();
            return Some(format!("locked down {why}"));
        }
        refused |= line.contains("Lockdown:") && line.contains("debugfs access is restricted");
    }
    refused.then(|| "the kernel log reports debugfs access restricted by lockdown".into())
}

/// Why debugfs refuses root here, when lockdown is the reason and it can be found.
pub fn reason(roots: &Roots) -> Option<String> {
    let fs = roots.path("sys/kernel/security/lockdown");
    if let Ok(t) = std::fs::read_to_string(&fs) {
        return mode_from_securityfs(&t).map(|m| {
            format!(
                "the kernel is locked down ({m}, {}): debugfs refuses its scheduler knobs even to root; see man kernel_lockdown.7",
                fs.display()
            )
        });
    }
    if roots.path("") != Path::new("/") {
        return None;
    }
    static LOG: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    LOG.get_or_init(|| from_kernel_log(&read_kmsg()?))
        .as_ref()
        .map(|w| {
            format!(
                "the kernel is {w} (kernel log; securityfs is not mounted): debugfs refuses its scheduler knobs even to root; see man kernel_lockdown.7"
            )
        })
}

/// The kernel log's records, read without blocking; `None` when it cannot be read (not root
/// with `dmesg_restrict`, no /dev/kmsg).
fn read_kmsg() -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .ok()?;
    let mut out = String::new();
    let mut buf = vec![0u8; 8192];
    // One record per read; EAGAIN at the end, EPIPE when a record was overwritten meanwhile.
    for _ in 0..100_000 {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                out.push_str(&String::from_utf8_lossy(&buf[..n]));
                if !out.ends_with('\n') {
                    out.push('\n');
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(_) => break,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn securityfs_names_the_mode() {
        assert_eq!(
            mode_from_securityfs("none [integrity] confidentiality\n").as_deref(),
            Some("integrity")
        );
        assert_eq!(
            mode_from_securityfs("[none] integrity confidentiality\n"),
            None
        );
    }

    #[test]
    fn the_kernel_log_names_lockdown() {
        let boot = "5,0,105495,-;Kernel is locked down from Kernel configuration; see man kernel_lockdown.7\n";
        assert_eq!(
            from_kernel_log(boot).as_deref(),
            Some("locked down from Kernel configuration")
        );
        let refusal = "[ 3206.822995] Lockdown: cat: debugfs access is restricted; see man kernel_lockdown.7\n";
        assert!(from_kernel_log(refusal).unwrap().contains("lockdown"));
        assert_eq!(from_kernel_log("[ 0.1] Linux version 6.18\n"), None);
    }
}
