//! Results written by an earlier cpulab still load, render and compare, and a doctor or probe
//! result is compared on its typed figures, not on names.
//!
//! `tests/fixtures/results/` holds documents written by the cpulab binary of the commit before
//! doctor and probe had typed figures (`cpulab doctor --quick --json`, `cpulab --root
//! tests/fixtures/kvm-guest probe --json`, `cpulab oscost --quick --no-freq --batches 3 --json`).

mod common;

use common::{cpulab, json_of};
use serde_json::Value;
use std::path::PathBuf;

fn result(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/results")
        .join(name)
}

const RESULTS: &[&str] = &[
    "doctor-quick.json",
    "probe-kvm-guest.json",
    "oscost-quick.json",
];

#[test]
fn results_written_before_the_change_still_render_and_compare() {
    let dir = tempfile::tempdir().unwrap();
    for name in RESULTS {
        let p = result(name);
        let out = cpulab().arg("report").arg(&p).output().unwrap();
        common::assert_success(&out);
        assert!(!out.stdout.is_empty(), "{name}");
        let html = dir.path().join(format!("{name}.html"));
        cpulab()
            .args(["report", "-q"])
            .arg(&p)
            .arg("--html")
            .arg(&html)
            .assert()
            .success();
        assert!(
            std::fs::read_to_string(&html)
                .unwrap()
                .to_ascii_lowercase()
                .starts_with("<!doctype html>")
        );
        let c = json_of(
            &cpulab()
                .arg("compare")
                .arg(&p)
                .arg(&p)
                .arg("--json")
                .output()
                .unwrap(),
        );
        let figures = c["figures"].as_array().unwrap();
        assert!(!figures.is_empty(), "{name}: {c}");
        for f in figures {
            // Every figure's direction comes from its type: no name is guessed.
            assert_eq!(f["direction_source"], "typed", "{name}: {f}");
        }
        common::assert_same_as_itself(&c);
    }
}

/// The walk read `migrations_per_s` as a rate (`per_s`) and could only say "unknown"; the
/// doctor's typed figure says more migrations per second is worse.
#[test]
fn a_doctor_figure_named_per_s_that_is_a_cost_is_judged_a_cost() {
    let dir = tempfile::tempdir().unwrap();
    let a: Value =
        serde_json::from_str(&std::fs::read_to_string(result("doctor-quick.json")).unwrap())
            .unwrap();
    let mut b = a.clone();
    let runs = b["measurements"]["wakeup"].as_array_mut().unwrap();
    let run = runs
        .iter_mut()
        .find(|w| w["migrations_per_s"].is_number())
        .expect("the fixture has an unpinned run with migrations counted");
    run["migrations_per_s"] = serde_json::json!(run["migrations_per_s"].as_f64().unwrap() + 500.0);
    let (pa, pb) = (dir.path().join("a.json"), dir.path().join("b.json"));
    std::fs::write(&pa, a.to_string()).unwrap();
    std::fs::write(&pb, b.to_string()).unwrap();
    let c = json_of(
        &cpulab()
            .arg("compare")
            .arg(&pa)
            .arg(&pb)
            .arg("--json")
            .output()
            .unwrap(),
    );
    let mig: Vec<&Value> = c["figures"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["path"].as_str().unwrap().starts_with("migrations_per_s["))
        .collect();
    assert!(!mig.is_empty(), "{c}");
    for f in mig {
        assert_eq!(f["worse_when"], "higher", "{f}");
        assert_eq!(f["direction_source"], "typed", "{f}");
        // One reading per run: shown, never called better or worse without a noise estimate.
        assert_ne!(f["verdict"], "better", "{f}");
    }
}

/// A doctor result older still, lacking a field the typed result now has, is compared by the
/// walk (old files are read, not refused); a field of the wrong type stays bad input.
#[test]
fn an_older_doctor_result_missing_a_field_is_still_compared() {
    let dir = tempfile::tempdir().unwrap();
    let mut d: Value =
        serde_json::from_str(&std::fs::read_to_string(result("doctor-quick.json")).unwrap())
            .unwrap();
    d["probe"].as_object_mut().unwrap().remove("notable");
    let p = dir.path().join("old.json");
    std::fs::write(&p, d.to_string()).unwrap();
    let c = json_of(
        &cpulab()
            .arg("compare")
            .arg(&p)
            .arg(&p)
            .arg("--json")
            .output()
            .unwrap(),
    );
    let figures = c["figures"].as_array().unwrap();
    assert!(!figures.is_empty());
    assert!(figures.iter().all(|f| f["direction_source"] == "name"));
}
