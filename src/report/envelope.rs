//! The envelope every saved cpulab result carries.
//!
//! A result file outlives the cpulab that wrote it: it is compared months later, rendered again,
//! attached to a ticket. So every `--json` document opens with two fields that say what it is:
//! `"cpulab_schema": 1` (bumped only when a field changes meaning or disappears; adding fields
//! keeps the version) and `"kind"` (`"doctor"`, `"pingpong"`, ...). [`Envelope`] adds both to any
//! result struct without changing it (`#[serde(flatten)]`), and [`load`] is the one place that
//! reads a result back and turns every way a file can be wrong into one line and exit code 2.

use crate::error::bad_input;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The schema version this cpulab writes and reads.
pub const SCHEMA_VERSION: u32 = 1;

/// What a result document holds.
///
/// The named variants are the results that are not experiments; every experiment carries its own
/// name in [`Kind::Experiment`] (`const KIND: Kind = Kind::Experiment("pingpong")`), so adding
/// one needs no variant here. Both serialise to the bare kind string, so a file written when
/// pingpong still had a variant of its own (`"kind": "pingpong"`) reads back the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Doctor,
    Probe,
    Compare,
    Try,
    Sim,
    /// A listing of the history (`cpulab history list`, `show`, `diff`, `check`, ...): output
    /// only, never a result document read back (not one of the named kinds `parse` reads).
    History,
    /// What `cpulab remedy` wrote (output only, never read back).
    Remedy,
    /// `cpulab fleet`'s report, read from a Prometheus: output only, not a run of this machine
    /// (never recorded in the history, not read back).
    Fleet,
    /// An experiment known by its registered name (see `crate::registry`).
    Experiment(&'static str),
}

impl Kind {
    /// The kinds with their own variant, for reading documents back.
    const NAMED: [Kind; 5] = [
        Self::Doctor,
        Self::Probe,
        Self::Compare,
        Self::Try,
        Self::Sim,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Doctor => "doctor",
            Self::Probe => "probe",
            Self::Compare => "compare",
            Self::Try => "try",
            Self::Sim => "sim",
            Self::History => "history",
            Self::Remedy => "remedy",
            Self::Fleet => "fleet",
            Self::Experiment(name) => name,
        }
    }

    /// The kind named `s`: a named variant, or one of `registered` (the experiment registry's
    /// kinds, passed in because this layer sits below the experiments).
    pub fn parse(s: &str, registered: &[Kind]) -> Option<Self> {
        Self::NAMED
            .iter()
            .chain(registered)
            .copied()
            .find(|k| k.as_str() == s)
    }
}

impl Serialize for Kind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Reads the named kinds only: a registered experiment's kind is recognised by [`parse`] with
/// the registry's list, which is how every document is read back.
impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s, &[])
            .ok_or_else(|| serde::de::Error::custom(format!("unknown result kind {s:?}")))
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A result with its envelope: `{"cpulab_schema": 1, "kind": "...", ...body's fields}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Envelope<T> {
    /// Version of the result format ([`SCHEMA_VERSION`] when written by this cpulab).
    pub cpulab_schema: u32,
    /// What the document holds.
    pub kind: Kind,
    /// The result itself; its fields sit at the top level of the document.
    #[serde(flatten)]
    pub body: T,
}

impl<T> Envelope<T> {
    pub fn new(kind: Kind, body: T) -> Self {
        Self {
            cpulab_schema: SCHEMA_VERSION,
            kind,
            body,
        }
    }
}

/// A result document read back from a file, checked for its envelope.
/// `registered` are the kinds of the experiment registry (`crate::registry::kinds()`).
#[derive(Clone, Debug)]
pub struct Loaded {
    pub kind: Kind,
    /// The whole document, envelope included.
    pub value: serde_json::Value,
}

/// Reads and checks a saved result. Every way the file can be wrong (missing, unreadable, not
/// JSON, truncated, not a cpulab result, another schema version, an unknown kind) is bad input:
/// one line naming the file and the fix, exit code 2.
pub fn load(path: &Path, registered: &[Kind]) -> Result<Loaded> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        let name = path.display();
        bad_input(match e.kind() {
            // Binary (a history file, an image): say what to pass, not only what failed.
            std::io::ErrorKind::InvalidData => format!(
                "{name} is not a cpulab result (not text); pass a file written by a cpulab \
                 command's --json"
            ),
            _ => format!("cannot read {name}: {e}"),
        })
    })?;
    parse(&text, &path.display().to_string(), registered)
}

/// [`load`] on text already read; `name` names the source in messages.
pub fn parse(text: &str, name: &str, registered: &[Kind]) -> Result<Loaded> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        if e.is_eof() {
            bad_input(format!(
                "{name} is truncated (the JSON ends early at line {}, column {}); \
                 write it again with the command's --json",
                e.line(),
                e.column()
            ))
        } else {
            bad_input(format!(
                "{name} is not valid JSON ({e}); pass a file written by a cpulab command's --json"
            ))
        }
    })?;
    let not_ours = || {
        bad_input(format!(
            "{name} is not a cpulab result (no \"cpulab_schema\" field); \
             pass a file written by a cpulab command's --json"
        ))
    };
    let obj = value.as_object().ok_or_else(not_ours)?;
    let schema = obj.get("cpulab_schema").ok_or_else(not_ours)?;
    match schema.as_u64() {
        Some(v) if v == u64::from(SCHEMA_VERSION) => {}
        _ => {
            return Err(bad_input(format!(
                "{name} has cpulab_schema {schema}, but this cpulab reads schema {SCHEMA_VERSION}; \
                 use the cpulab version that wrote it, or measure again"
            )));
        }
    }
    let kind_text = obj.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    let kind = Kind::parse(kind_text, registered).ok_or_else(|| {
        bad_input(format!(
            "{name} has an unknown result kind {kind_text:?}; \
             pass a file written by a cpulab command's --json"
        ))
    })?;
    Ok(Loaded { kind, value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_file_is_no_result_in_one_line_saying_what_to_pass() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("h.sqlite");
        std::fs::write(&bin, b"SQLite format 3\0\xff\xfe").unwrap();
        let e = load(&bin, &[]).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        let text = format!("{e:#}");
        assert!(text.ends_with("h.sqlite is not a cpulab result (not text); pass a file written by a cpulab command's --json"), "{text}");
        let e = load(&dir.path().join("missing.json"), &[]).unwrap_err();
        assert!(format!("{e:#}").starts_with("cannot read "), "{e:#}");
    }

    #[derive(Serialize)]
    struct Body {
        rtt_ns: f64,
    }

    fn msg(text: &str) -> String {
        format!("{:#}", parse(text, "r.json", &[]).unwrap_err())
    }

    #[test]
    fn envelope_flattens_the_body() {
        let v = serde_json::to_value(Envelope::new(Kind::Try, Body { rtt_ns: 5.0 })).unwrap();
        assert_eq!(v["cpulab_schema"], 1);
        assert_eq!(v["kind"], "try");
        assert_eq!(v["rtt_ns"], 5.0);
        let back = parse(&v.to_string(), "r.json", &[]).unwrap();
        assert_eq!(back.kind, Kind::Try);
    }

    #[test]
    fn a_registered_kind_reads_back_only_with_its_registry() {
        let kind = Kind::Experiment("messaging");
        let v = serde_json::to_value(Envelope::new(kind, Body { rtt_ns: 5.0 })).unwrap();
        assert_eq!(v["kind"], "messaging");
        assert!(parse(&v.to_string(), "r.json", &[]).is_err());
        assert_eq!(parse(&v.to_string(), "r.json", &[kind]).unwrap().kind, kind);
    }

    #[test]
    fn every_broken_file_is_bad_input_in_one_line() {
        for (text, want) in [
            (r#"{"cpulab_schema": 1, "kind": "doc"#, "truncated"),
            ("not json", "not valid JSON"),
            (r#"{"hello": 1}"#, "not a cpulab result"),
            ("[1, 2]", "not a cpulab result"),
            (r#"{"cpulab_schema": 99, "kind": "doctor"}"#, "schema 99"),
            (
                r#"{"cpulab_schema": "1", "kind": "doctor"}"#,
                "reads schema 1",
            ),
            (
                r#"{"cpulab_schema": 1, "kind": "toaster"}"#,
                "unknown result kind",
            ),
        ] {
            let err = parse(text, "r.json", &[]).unwrap_err();
            assert_eq!(crate::error::exit_code(&err), 2, "{text}");
            let m = msg(text);
            assert!(m.contains(want), "{m}");
            assert!(!m.contains('\n'), "{m}");
        }
    }
}
