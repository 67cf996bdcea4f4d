//! A value the probe read, or the reason it could not.
//!
//! A fingerprint that stops at the first unreadable file is useless inside the places cpulab is
//! meant for: VMs that hide cpufreq, containers that mask /sys, non-root users facing
//! debugfs. Every reading is therefore a [`Reading`]: the value, or why there is none. The
//! reason tells *absent* (the kernel or hypervisor does not expose it) from *permission denied*
//! (it exists, ask root), because the remedy differs.
//!
//! In JSON a value is written as itself and an unavailable one as
//! `{"unavailable": {"reason": "absent", "detail": "..."}}`, so a consumer can test one key.

use serde::{Deserialize, Serialize};
use std::io::ErrorKind;
use std::path::Path;

/// Why a reading has no value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// The file or interface does not exist on this machine (not built in, not exposed).
    Absent,
    /// It exists but this user may not read it.
    PermissionDenied,
    /// The platform hides it on purpose, e.g. a VM without cpufreq.
    NotExposed,
    /// It does not apply here (not x86, or a fixture root stands in for the machine).
    NotApplicable,
    /// It exists but could not be read or understood.
    Unreadable,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Absent => "absent",
            Self::PermissionDenied => "permission denied",
            Self::NotExposed => "not exposed",
            Self::NotApplicable => "not applicable",
            Self::Unreadable => "unreadable",
        }
    }
}

/// The reason and what exactly was missing (usually the path).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unavailable {
    /// The kind of failure, which decides the remedy.
    pub reason: Reason,
    /// The path or interface, and the error when it says more.
    pub detail: String,
}

/// A value read from the machine, or why it could not be read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Reading<T> {
    /// Listed first so deserialising tries the `{"unavailable": ..}` shape before `T`.
    Unavailable {
        unavailable: Unavailable,
    },
    Value(T),
}

impl<T> Reading<T> {
    pub fn unavailable(reason: Reason, detail: impl Into<String>) -> Self {
        Self::Unavailable {
            unavailable: Unavailable {
                reason,
                detail: detail.into(),
            },
        }
    }

    pub fn value(&self) -> Option<&T> {
        match self {
            Self::Value(v) => Some(v),
            Self::Unavailable { .. } => None,
        }
    }

    pub fn into_value(self) -> Option<T> {
        match self {
            Self::Value(v) => Some(v),
            Self::Unavailable { .. } => None,
        }
    }

    /// The value, or why there is none, for callers that branch with `?`.
    pub fn into_result(self) -> Result<T, Unavailable> {
        match self {
            Self::Value(v) => Ok(v),
            Self::Unavailable { unavailable } => Err(unavailable),
        }
    }

    pub fn why(&self) -> Option<&Unavailable> {
        match self {
            Self::Value(_) => None,
            Self::Unavailable { unavailable } => Some(unavailable),
        }
    }

    pub fn is_value(&self) -> bool {
        matches!(self, Self::Value(_))
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Reading<U> {
        match self {
            Self::Value(v) => Reading::Value(f(v)),
            Self::Unavailable { unavailable } => Reading::Unavailable { unavailable },
        }
    }

    /// Turns a value into another reading, e.g. a parse that can fail.
    pub fn and_then<U>(self, f: impl FnOnce(T) -> Reading<U>) -> Reading<U> {
        match self {
            Self::Value(v) => f(v),
            Self::Unavailable { unavailable } => Reading::Unavailable { unavailable },
        }
    }

    /// A one-line rendering for people: the value, or `unavailable (absent: path)`.
    pub fn show(&self, f: impl FnOnce(&T) -> String) -> String {
        match self {
            Self::Value(v) => f(v),
            Self::Unavailable { unavailable: u } => {
                format!("unavailable ({}: {})", u.reason.as_str(), u.detail)
            }
        }
    }
}

/// The reading for an I/O error on `path`.
pub fn from_io<T>(path: &Path, err: &std::io::Error) -> Reading<T> {
    let reason = match err.kind() {
        ErrorKind::NotFound => Reason::Absent,
        ErrorKind::PermissionDenied => Reason::PermissionDenied,
        _ => Reason::Unreadable,
    };
    let detail = match reason {
        Reason::Unreadable => format!("{}: {err}", path.display()),
        _ => path.display().to_string(),
    };
    Reading::unavailable(reason, detail)
}

/// Reads a small text file, trimmed of surrounding white space.
pub fn read_trim(path: &Path) -> Reading<String> {
    match std::fs::read_to_string(path) {
        Ok(s) => Reading::Value(s.trim().to_string()),
        Err(e) => from_io(path, &e),
    }
}

/// Reads a file and parses it with a pure parser; a parse failure is `Unreadable`.
pub fn read_parsed<T>(path: &Path, parse: impl FnOnce(&str) -> Option<T>) -> Reading<T> {
    read_trim(path).and_then(|s| match parse(&s) {
        Some(v) => Reading::Value(v),
        None => Reading::unavailable(
            Reason::Unreadable,
            format!("{}: unexpected content `{}`", path.display(), short(&s)),
        ),
    })
}

/// The names in a directory, sorted; the directory's absence is a reading like any other.
pub fn read_dir_names(path: &Path) -> Reading<Vec<String>> {
    match std::fs::read_dir(path) {
        Ok(entries) => {
            let mut v: Vec<String> = entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect();
            v.sort();
            Reading::Value(v)
        }
        Err(e) => from_io(path, &e),
    }
}

fn short(s: &str) -> String {
    let s = s.lines().next().unwrap_or("");
    s.chars().take(60).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_serialises_under_one_key_and_round_trips() {
        let r: Reading<u32> = Reading::unavailable(Reason::PermissionDenied, "/x");
        let j = serde_json::to_string(&r).unwrap();
        assert_eq!(
            j,
            r#"{"unavailable":{"reason":"permission-denied","detail":"/x"}}"#
        );
        let back: Reading<u32> = serde_json::from_str(&j).unwrap();
        assert_eq!(back, r);
        let v: Reading<u32> = serde_json::from_str("7").unwrap();
        assert_eq!(v, Reading::Value(7));
    }

    #[test]
    fn missing_file_is_absent() {
        let r = read_trim(Path::new("/nonexistent/cpulab/file"));
        assert_eq!(r.why().unwrap().reason, Reason::Absent);
    }
}
