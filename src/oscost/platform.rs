//! What an OS primitive's cost depends on besides the hardware: mitigations, the clocksource,
//! transparent huge pages, and the kernel command line that sets them.
//!
//! Field notes D: after an upgrade every primitive got slower, and Spectre/Meltdown
//! mitigations (pti, retpoline) explained most of it. Two `oscost` results can only be
//! compared fairly when these are recorded beside the figures, so the report carries them.
//! Pure parsers over text; the reader takes a root directory.

use crate::probe::cmdline::parse_cmdline;
use crate::probe::mitigations::Mitigations;
use crate::probe::reading::read_trim;
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

impl OsPlatform {
    /// Reads everything below `root` (`/` when live); what cannot be read is listed. The
    /// vulnerabilities and the kernel command line come from the probe's readers, so `oscost`
    /// and `probe` report the same mitigations.
    pub fn read(root: &Path) -> Self {
        let mut unavailable = Vec::new();
        let mut note = |r: crate::probe::reading::Reading<String>| -> Option<String> {
            if let Some(u) = r.why() {
                unavailable.push(format!("{} ({})", u.detail, u.reason.as_str()));
            }
            r.into_value()
        };
        let cmdline = note(read_trim(&root.join("proc/cmdline")))
            .map(|t| parse_cmdline(&t))
            .unwrap_or_default();
        let clocksource = note(crate::probe::virt::read_clocksource(root));
        let thp = note(read_trim(
            &root.join("sys/kernel/mm/transparent_hugepage/enabled"),
        ));
        let m = Mitigations::read(root, &cmdline);
        if let Some(u) = m.vulnerabilities.why() {
            unavailable.insert(0, format!("{} ({})", u.detail, u.reason.as_str()));
        }
        let vulnerabilities = m
            .vulnerabilities
            .value()
            .map(|v| v.iter().map(|(k, x)| (k.clone(), x.text.clone())).collect())
            .unwrap_or_default();
        Self {
            vulnerabilities,
            mitigations_summary: m
                .summary()
                .unwrap_or_else(|| "unknown (no vulnerabilities directory)".into()),
            cmdline_mitigation_options: m.mitigation_options(),
            clocksource,
            thp_enabled: thp.as_deref().and_then(parse_bracketed),
            unavailable,
        }
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
    }

    #[test]
    fn reads_the_probe_fixture_like_the_probe() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/intel-2s");
        let p = OsPlatform::read(&root);
        assert!(!p.vulnerabilities.is_empty());
        assert!(!p.mitigations_summary.starts_with("unknown"));
    }

    #[test]
    fn a_missing_tree_is_reported_not_fatal() {
        let t = tempfile::tempdir().unwrap();
        let p = OsPlatform::read(t.path());
        assert!(p.vulnerabilities.is_empty());
        assert!(p.unavailable.len() >= 2);
    }
}
