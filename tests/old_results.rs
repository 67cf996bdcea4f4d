//! Results written by an older cpulab still load: `report` renders them and `compare` reads
//! their typed figures.
//!
//! The files under `tests/fixtures/results/` were written by the binary as it was before the
//! five older experiments moved onto `experiment::Command` (their kind is still the plain name,
//! `"kind": "pingpong"`); they are kept as they were written, never regenerated.

#[macro_use]
mod common;

use common::{assert_success, cpulab, json_of};
use std::path::PathBuf;

const OLD: &[(&str, &str)] = &[
    ("pingpong", "rtt_ns"),
    ("oscost", "cost_ns"),
    ("scale", "time_s"),
];

fn old(kind: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/results")
        .join(format!("{kind}.json"))
}

#[test]
fn old_results_render_in_report() {
    for (kind, _) in OLD {
        let out = cpulab().arg("report").arg(old(kind)).output().unwrap();
        assert_success(&out);
        assert!(!out.stdout.is_empty(), "{kind}: report wrote nothing");
        let dir = tempfile::tempdir().unwrap();
        let page = dir.path().join("page.html");
        let out = cpulab()
            .arg("report")
            .arg(old(kind))
            .arg("--html")
            .arg(&page)
            .output()
            .unwrap();
        assert_success(&out);
        let html = std::fs::read_to_string(&page).unwrap();
        assert!(html.contains("<html"), "{kind}: no page");
    }
}

#[test]
fn old_results_compare_with_typed_figures() {
    for (kind, figure) in OLD {
        let out = cpulab()
            .args(["compare", "--json"])
            .arg(old(kind))
            .arg(old(kind))
            .output()
            .unwrap();
        let c = json_of(&out);
        assert_eq!(c["result_kind"], *kind);
        let figures = c["figures"].as_array().unwrap();
        assert!(!figures.is_empty(), "{kind}: no figures");
        assert!(
            figures
                .iter()
                .any(|f| f["path"].as_str().unwrap().starts_with(figure)),
            "{kind}: no {figure} figure"
        );
        for f in figures {
            // A file compared with itself: every typed figure is the same, none is guessed.
            assert_eq!(f["direction_source"], "typed", "{kind}: {}", f["path"]);
            assert_eq!(f["ratio"], 1.0, "{kind}: {}", f["path"]);
        }
    }
}

/// Results written before conditions named the git revision (`cpulab_revision`) still read
/// into today's `Conditions`, without one, and writing them again adds none.
#[test]
fn old_conditions_without_a_revision_still_load() {
    for (kind, _) in OLD {
        let text = std::fs::read_to_string(old(kind)).unwrap();
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(doc["conditions"].get("cpulab_revision").is_none(), "{kind}");
        let c: cpulab::machine::Conditions =
            serde_json::from_value(doc["conditions"].clone()).unwrap();
        assert_eq!(c.cpulab_revision, None, "{kind}");
        let again = serde_json::to_value(&c).unwrap();
        assert!(again.get("cpulab_revision").is_none(), "{kind}: {again}");
        assert_eq!(again["cpulab_version"], doc["conditions"]["cpulab_version"]);
    }
}
