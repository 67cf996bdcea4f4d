//! The newest doctor findings of this host, read from the history, so the doctor's diagnosis
//! reaches the fleet view beside the wakeup counts.
//!
//! The exporter only reads the history: the file is opened read-only, never created, migrated
//! or written (`history::store::Store::open_read_only`). A scrape does not query it: the
//! [`Reader`] looks at the file at most once per [`REREAD`] and queries it only when the file or
//! its write-ahead log changed (SQLite in WAL mode writes new runs to `history.sqlite-wal`, so the
//! main file's mtime alone would miss them). No history, `--no-history`, or no doctor run of this
//! host: no finding series, and `cpulab_doctor_history_info{state}` says which. A corrupt or
//! foreign file: one warning line, once, and the exporter keeps serving.
//!
//! Findings are a small fixed set of ids (one per doctor rule, a few per application preset);
//! the cap [`MAX_FINDINGS`] bounds the series anyway, and what it leaves out is counted.

use crate::doctor::findings::Severity;
use crate::history::Location;
use crate::history::store::{Filter, Store};
use anyhow::Result;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// Most findings published from one run; the rest are counted in
/// `cpulab_exporter_doctor_findings_dropped`.
pub const MAX_FINDINGS: usize = 16;

/// How often the history file is looked at (its modification time and size, never its rows
/// unless they changed).
pub const REREAD: Duration = Duration::from_secs(10);

/// Why there are (or are no) finding series.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum State {
    /// The newest doctor run of this host is published.
    Ok,
    /// `--no-history` or `CPULAB_HISTORY=off`.
    #[default]
    Off,
    /// No history file at the configured path yet.
    Missing,
    /// The history holds no doctor run of this host.
    NoDoctorRun,
    /// The file is corrupt, not a cpulab history, or of a newer schema (warned once).
    Unreadable,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Ok => "ok",
            State::Off => "off",
            State::Missing => "missing",
            State::NoDoctorRun => "no-doctor-run",
            State::Unreadable => "unreadable",
        }
    }
}

/// One finding as published.
#[derive(Clone, Debug, PartialEq)]
pub struct FindingFigure {
    /// The finding's stable id (`cross-cpu-wakeup`), restricted to `[A-Za-z0-9_.:-]`.
    pub id: String,
    pub severity: Severity,
    /// The worse figure over the better one (>= 1), when the finding's effect is a ratio.
    pub ratio: Option<f64>,
}

/// The newest doctor run of this host.
#[derive(Clone, Debug, PartialEq)]
pub struct DoctorRun {
    /// Its id in the history (`cpulab history show ID`).
    pub history_id: i64,
    /// When it started, seconds since the Unix epoch.
    pub started_unix_s: i64,
    /// `quick` or `full`, as the document says.
    pub mode: String,
    /// Its findings, most important first, at most [`MAX_FINDINGS`].
    pub findings: Vec<FindingFigure>,
    /// Findings left out: beyond the cap, repeating an id already published, or unreadable.
    pub dropped: u64,
}

/// What the exporter publishes about the doctor.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DoctorFigures {
    pub state: State,
    pub run: Option<DoctorRun>,
}

/// The fields of a stored finding the exporter reads; the rest of the document is ignored, so
/// a document from an older or newer cpulab still gives its ids and severities.
#[derive(Deserialize)]
struct StoredFinding {
    id: String,
    severity: Severity,
    #[serde(default)]
    magnitude: Option<StoredMagnitude>,
}

#[derive(Deserialize)]
struct StoredMagnitude {
    #[serde(default)]
    ratio: Option<f64>,
}

/// A label value built from text the history holds: only `[A-Za-z0-9_.:-]`, at most 64 bytes.
fn label_safe(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.:-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect()
}

/// The published findings of a doctor document (pure): most important first, one per id, at
/// most [`MAX_FINDINGS`]; returns them and how many were left out.
pub fn findings_of(document: &serde_json::Value) -> (Vec<FindingFigure>, u64) {
    let listed: Vec<serde_json::Value> = document
        .get("findings")
        .and_then(|f| serde_json::from_value(f.clone()).ok())
        .unwrap_or_default();
    // Counted before parsing: a finding this cpulab cannot read is left out too.
    let total = listed.len();
    let stored: Vec<StoredFinding> = listed
        .into_iter()
        .filter_map(|f| serde_json::from_value(f).ok())
        .collect();
    let mut out: Vec<FindingFigure> = Vec::new();
    let mut sorted = stored;
    // Stable: the doctor's own order breaks ties within a severity.
    sorted.sort_by_key(|f| std::cmp::Reverse(f.severity));
    for f in sorted {
        let id = label_safe(&f.id);
        if out.len() == MAX_FINDINGS || out.iter().any(|o| o.id == id) {
            continue;
        }
        out.push(FindingFigure {
            id,
            severity: f.severity,
            ratio: f
                .magnitude
                .and_then(|m| m.ratio)
                .filter(|r| r.is_finite() && *r > 0.0),
        });
    }
    let dropped = (total - out.len()) as u64;
    (out, dropped)
}

/// The newest doctor run of `host_key` in the history at `path`, read-only.
pub fn newest_run(path: &Path, host_key: &str) -> Result<Option<DoctorRun>> {
    let store = Store::open_read_only(path)?;
    let filter = Filter {
        kind: Some(crate::report::envelope::Kind::Doctor.as_str().to_string()),
        host: Some(host_key.to_string()),
        ..Filter::default()
    };
    let Some(run) = store.newest(&filter)? else {
        return Ok(None);
    };
    let document = store.document(run.id)?.unwrap_or_default();
    let (findings, dropped) = findings_of(&document);
    Ok(Some(DoctorRun {
        history_id: run.id,
        started_unix_s: run.time_unix_s,
        mode: document["mode"].as_str().unwrap_or("unknown").to_string(),
        findings,
        dropped,
    }))
}

/// What says whether the history changed: modification time and size of the file and of its
/// write-ahead log.
type Stamp = [Option<(SystemTime, u64)>; 2];

fn stamp(path: &Path) -> Option<Stamp> {
    let of = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()))
    };
    let main = of(path)?;
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    Some([Some(main), of(&PathBuf::from(wal))])
}

/// The cache between scrapes.
pub struct Reader {
    location: Location,
    host_key: String,
    every: Duration,
    looked: Option<Instant>,
    stamp: Option<Stamp>,
    figures: DoctorFigures,
    warned: bool,
}

impl Reader {
    /// A reader of the history at `location` for the runs of `host_key` (the history's host
    /// key of this machine).
    pub fn new(location: Location, host_key: String, every: Duration) -> Self {
        Self {
            location,
            host_key,
            every,
            looked: None,
            stamp: None,
            figures: DoctorFigures::default(),
            warned: false,
        }
    }

    /// The figures as of `now`, and a warning line to print when the history just became
    /// unreadable (once, until it is read again).
    pub fn current(&mut self, now: Instant) -> (DoctorFigures, Option<String>) {
        if self
            .looked
            .is_some_and(|t| now.saturating_duration_since(t) < self.every)
        {
            return (self.figures.clone(), None);
        }
        self.looked = Some(now);
        let Location::At(path) = &self.location else {
            self.figures = DoctorFigures::default();
            return (self.figures.clone(), None);
        };
        let now_stamp = stamp(path);
        if now_stamp.is_some() && now_stamp == self.stamp {
            return (self.figures.clone(), None);
        }
        self.stamp = now_stamp;
        let mut warning = None;
        self.figures = match self.stamp {
            None => DoctorFigures {
                state: State::Missing,
                run: None,
            },
            Some(_) => match newest_run(path, &self.host_key) {
                Ok(run) => {
                    self.warned = false;
                    DoctorFigures {
                        state: if run.is_some() {
                            State::Ok
                        } else {
                            State::NoDoctorRun
                        },
                        run,
                    }
                }
                Err(e) => {
                    if !self.warned {
                        self.warned = true;
                        warning = Some(format!(
                            "warning: no doctor findings published: {}",
                            format!("{e:#}").replace('\n', " ")
                        ));
                    }
                    DoctorFigures {
                        state: State::Unreadable,
                        run: None,
                    }
                }
            },
        };
        (self.figures.clone(), warning)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::fingerprint::Fingerprint;
    use crate::history::store::NewRun;
    use serde_json::json;

    fn doctor_doc(findings: serde_json::Value) -> serde_json::Value {
        json!({"kind": "doctor", "mode": "quick", "findings": findings})
    }

    fn finding(id: &str, severity: &str, ratio: Option<f64>) -> serde_json::Value {
        json!({"id": id, "severity": severity, "magnitude": {"text": "", "ratio": ratio, "unit": "ns"}})
    }

    fn record(path: &Path, host: &str, time: i64, doc: serde_json::Value) -> i64 {
        Store::open(path)
            .unwrap()
            .insert(&NewRun {
                time_unix_s: time,
                kind: "doctor".into(),
                fingerprint: Fingerprint {
                    host_key: host.into(),
                    hardware_key: "hw".into(),
                    facts: Default::default(),
                },
                command_line: "cpulab doctor".into(),
                noisy: false,
                figures: vec![],
                document: doc,
            })
            .unwrap()
    }

    #[test]
    fn findings_are_sorted_deduplicated_sanitised_and_capped() {
        let mut list = vec![
            finding("low-one", "low", Some(1.2)),
            finding("big", "high", Some(8.0)),
            finding("big", "medium", Some(2.0)),
            finding("we\"ird id", "medium", None),
            json!({"id": "no-severity"}),
        ];
        let (f, dropped) = findings_of(&doctor_doc(json!(list.clone())));
        let ids: Vec<&str> = f.iter().map(|x| x.id.as_str()).collect();
        assert_eq!(ids, ["big", "we_ird_id", "low-one"]);
        assert_eq!(f[0].severity, Severity::High);
        assert_eq!(f[0].ratio, Some(8.0));
        assert_eq!(f[1].ratio, None);
        // The repeated id and the unreadable one are both left out.
        assert_eq!(dropped, 2);
        for i in 0..MAX_FINDINGS + 3 {
            list.push(finding(&format!("extra-{i}"), "low", Some(1.1)));
        }
        let (f, dropped) = findings_of(&doctor_doc(json!(list)));
        assert_eq!(f.len(), MAX_FINDINGS);
        // 24 findings, one unreadable and one a repeated id: 16 published, 8 left out.
        assert_eq!(dropped, 8);
        assert_eq!(findings_of(&json!({"kind": "doctor"})), (vec![], 0));
    }

    #[test]
    fn the_newest_doctor_run_of_this_host_is_read_without_writing() {
        let d = tempfile::tempdir().unwrap();
        let h = d.path().join("h.sqlite");
        record(
            &h,
            "here",
            100,
            doctor_doc(json!([finding("old", "low", None)])),
        );
        let newest = record(
            &h,
            "here",
            200,
            doctor_doc(json!([finding("new", "high", Some(4.0))])),
        );
        record(
            &h,
            "elsewhere",
            300,
            doctor_doc(json!([finding("x", "high", None)])),
        );
        let before = std::fs::read(&h).unwrap();
        let run = newest_run(&h, "here").unwrap().unwrap();
        assert_eq!(run.history_id, newest);
        assert_eq!(run.started_unix_s, 200);
        assert_eq!(run.findings[0].id, "new");
        assert_eq!(run.mode, "quick");
        assert!(newest_run(&h, "nobody").unwrap().is_none());
        assert_eq!(std::fs::read(&h).unwrap(), before);
        let missing = d.path().join("none.sqlite");
        assert!(newest_run(&missing, "here").is_err());
        assert!(!missing.exists(), "the exporter created a history");
    }

    #[test]
    fn the_reader_caches_warns_once_and_follows_the_file() {
        let d = tempfile::tempdir().unwrap();
        let h = d.path().join("h.sqlite");
        let t0 = Instant::now();
        let every = Duration::from_secs(10);
        let later = |s| t0 + Duration::from_secs(s);

        let mut off = Reader::new(Location::Off, "here".into(), every);
        assert_eq!(off.current(t0).0.state, State::Off);

        let mut r = Reader::new(Location::At(h.clone()), "here".into(), every);
        assert_eq!(r.current(t0).0.state, State::Missing);
        assert!(!h.exists());

        std::fs::write(&h, "not a database at all, just text").unwrap();
        // Within the interval the cached answer stands.
        assert_eq!(r.current(later(5)).0.state, State::Missing);
        let (f, warning) = r.current(later(10));
        assert_eq!(f.state, State::Unreadable);
        assert!(warning.unwrap().contains("not a cpulab history"));
        std::fs::write(&h, "still not a database, and longer than before").unwrap();
        let (f, warning) = r.current(later(20));
        assert_eq!(f.state, State::Unreadable);
        assert!(warning.is_none(), "warned twice");

        std::fs::remove_file(&h).unwrap();
        record(&h, "elsewhere", 100, doctor_doc(json!([])));
        assert_eq!(r.current(later(30)).0.state, State::NoDoctorRun);
        let id = record(
            &h,
            "here",
            200,
            doctor_doc(json!([finding("a", "medium", Some(2.0))])),
        );
        assert_eq!(r.current(later(35)).0.state, State::NoDoctorRun);
        let (f, _) = r.current(later(40));
        assert_eq!(f.state, State::Ok);
        assert_eq!(f.run.unwrap().history_id, id);
    }
}
