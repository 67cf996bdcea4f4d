//! What an OS primitive's cost depends on besides the hardware: mitigations, the clocksource,
//! transparent huge pages, and the kernel command line that sets them.
//!
//! Field notes D: after an upgrade every primitive got slower, and Spectre/Meltdown
//! mitigations (pti, retpoline) explained most of it. Two `oscost` results can only be
//! compared fairly when these are recorded beside the figures, so the report carries them.
//! Pure parsers over text; the reader takes a root directory.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Settings that change what OS primitives cost.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OsPlatform {
    /// `/sys/devices/system/cpu/vulnerabilities/*`: name -> the kernel's one-line status.
    pub vulnerabilities: BTreeMap<String, String>,
    /// e.g. "3 mitigated, 4 vulnerable, 12 not affected".
    pub mitigations_summary: String,
    /// Kernel command-line options that change mitigations (`mitigations=`, `pti=`, ...).
    pub cmdline_mitigation_options: Vec<String>,
    /// Current clocksource (`tsc` keeps clock_gettime in the vDSO).
    pub clocksource: Option<String>,
    /// Transparent huge pages mode (`always`, `madvise`, `never`).
    pub thp_enabled: Option<String>,
    /// What could not be read, with the reason.
    pub unavailable: Vec<String>,
}

/// The selected value of a sysfs choice list: `"always [madvise] never"` -> `madvise`.
pub fn parse_bracketed(text: &str) -> Option<String> {
    let start = text.find('[')?;
    let end = text[start..].find(']')? + start;
    Some(text[start + 1..end].to_string())
}

/// Counts statuses: "Mitigation: ..." as mitigated, "Vulnerable..." as vulnerable, "Not
/// affected" as not affected, anything else as other.
pub fn summarise(v: &BTreeMap<String, String>) -> String {
    let (mut m, mut vul, mut na, mut other) = (0, 0, 0, 0);
    for s in v.values() {
        if s.starts_with("Mitigation") {
            m += 1;
        } else if s.starts_with("Vulnerable") {
            vul += 1;
        } else if s.starts_with("Not affected") {
            na += 1;
        } else {
            other += 1;
        }
    }
    let mut out = format!("{m} mitigated, {vul} vulnerable, {na} not affected");
    if other > 0 {
        out.push_str(&format!(", {other} other"));
    }
    out
}

/// Command-line options that switch mitigations on or off.
pub fn mitigation_options(cmdline: &str) -> Vec<String> {
    const KEYS: &[&str] = &[
        "mitigations",
        "pti",
        "nopti",
        "spectre_v2",
        "spectre_v1",
        "nospectre_v1",
        "nospectre_v2",
        "spec_store_bypass_disable",
        "retbleed",
        "mds",
        "tsx_async_abort",
        "l1tf",
        "srbds",
        "mmio_stale_data",
        "spec_rstack_overflow",
        "gather_data_sampling",
        "nospec_store_bypass_disable",
    ];
    cmdline
        .split_whitespace()
        .take_while(|t| *t != "--")
        .filter(|t| KEYS.contains(&t.split('=').next().unwrap_or("")))
        .map(str::to_string)
        .collect()
}

impl OsPlatform {
    /// Reads everything below `root` (`/` when live); what cannot be read is listed.
    pub fn read(root: &Path) -> Self {
        let mut p = Self::default();
        let vdir = root.join("sys/devices/system/cpu/vulnerabilities");
        match std::fs::read_dir(&vdir) {
            Ok(entries) => {
                for e in entries.flatten() {
                    if let Ok(t) = std::fs::read_to_string(e.path()) {
                        p.vulnerabilities.insert(
                            e.file_name().to_string_lossy().to_string(),
                            t.trim().to_string(),
                        );
                    }
                }
            }
            Err(e) => p.unavailable.push(format!("{}: {e}", vdir.display())),
        }
        p.mitigations_summary = if p.vulnerabilities.is_empty() {
            "unknown (no vulnerabilities directory)".into()
        } else {
            summarise(&p.vulnerabilities)
        };
        let mut read = |rel: &str| -> Option<String> {
            let path = root.join(rel);
            match std::fs::read_to_string(&path) {
                Ok(t) => Some(t.trim().to_string()),
                Err(e) => {
                    p.unavailable.push(format!("{}: {e}", path.display()));
                    None
                }
            }
        };
        let cmdline = read("proc/cmdline");
        let clocksource = read("sys/devices/system/clocksource/clocksource0/current_clocksource");
        let thp = read("sys/kernel/mm/transparent_hugepage/enabled");
        p.cmdline_mitigation_options = cmdline
            .as_deref()
            .map(mitigation_options)
            .unwrap_or_default();
        p.clocksource = clocksource;
        p.thp_enabled = thp.as_deref().and_then(parse_bracketed);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers() {
        assert_eq!(
            parse_bracketed("always [madvise] never"),
            Some("madvise".into())
        );
        assert_eq!(parse_bracketed("tsc"), None);
        let v = BTreeMap::from([
            ("meltdown".to_string(), "Not affected".to_string()),
            (
                "spectre_v2".into(),
                "Mitigation: Retpolines; STIBP: disabled".into(),
            ),
            ("retbleed".into(), "Vulnerable".into()),
        ]);
        assert_eq!(summarise(&v), "1 mitigated, 1 vulnerable, 1 not affected");
        let cmd = "mitigations=auto,no_guest_host console=ttyS0 pti=off quiet -- mds=off";
        assert_eq!(
            mitigation_options(cmd),
            vec!["mitigations=auto,no_guest_host", "pti=off"]
        );
    }

    #[test]
    fn a_missing_tree_is_reported_not_fatal() {
        let t = tempfile::tempdir().unwrap();
        let p = OsPlatform::read(t.path());
        assert!(p.vulnerabilities.is_empty());
        assert!(p.unavailable.len() >= 2);
    }
}
