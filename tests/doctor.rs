//! `cpulab doctor --quick` end to end on this machine: one JSON document with the envelope, the
//! probe, every measurement with raw samples, and findings that each carry evidence and
//! remedies. Structure and physics only; no timing thresholds.

mod common;

use common::cpulab;
use serde_json::Value;

fn doctor(args: &[&str]) -> std::process::Output {
    cpulab()
        .arg("doctor")
        .args(args)
        .timeout(std::time::Duration::from_secs(180))
        .output()
        .unwrap()
}

#[test]
fn quick_json_has_the_documented_structure() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("doctor.html");
    let out = doctor(&["--quick", "--json", "--html", html.to_str().unwrap()]);
    common::assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains('\u{1b}'),
        "no progress bar or colour when stderr is not a terminal"
    );
    let d: Value = serde_json::from_slice(&out.stdout).expect("exactly one JSON document");
    assert_eq!(d["cpulab_schema"], 1);
    assert_eq!(d["kind"], "doctor");
    assert_eq!(d["mode"], "quick");
    for key in ["conditions", "probe", "facts", "measurements", "findings"] {
        assert!(!d[key].is_null(), "missing {key}");
    }
    assert!(d["duration_s"].as_f64().unwrap() > 0.0);
    let m = &d["measurements"];
    // Every measurement keeps its raw samples, and counters are never negative.
    for t in m["throughput"].as_array().unwrap() {
        let s = t["samples_per_s"].as_array().unwrap();
        assert!(!s.is_empty());
        assert!(s.iter().all(|v| v.as_f64().unwrap() > 0.0));
        assert!(
            t["per_message"]
                .as_object()
                .unwrap()
                .values()
                .all(|v| v.as_f64().unwrap() >= 0.0)
        );
        let samples: Vec<f64> = s.iter().map(|v| v.as_f64().unwrap()).collect();
        common::assert_mean_ci_of("messages_per_s", &t["messages_per_s"], &samples);
    }
    for w in m["wakeup"].as_array().unwrap() {
        assert!(!w["batch_means_ns"].as_array().unwrap().is_empty());
        assert!(w["p50_ns"].as_f64().unwrap() <= w["p99_ns"].as_f64().unwrap());
        assert!(
            w["per_round_trip"]
                .as_object()
                .unwrap()
                .values()
                .all(|v| v.as_f64().unwrap() >= 0.0)
        );
    }
    // Every stage that ran has its deadline and the time it took; together they fit in the
    // run, which fits in the budget's own record of it.
    let stages = m["stage_times"].as_array().unwrap();
    assert!(!stages.is_empty());
    let mut taken = 0.0;
    for st in stages {
        let (planned, actual) = (
            st["planned_s"].as_f64().unwrap(),
            st["actual_s"].as_f64().unwrap(),
        );
        assert!(planned >= 0.0 && actual > 0.0, "{st}");
        assert!(
            st["cut_short"].is_null() || st["cut_short"].as_str().is_some_and(|c| !c.is_empty())
        );
        taken += actual;
    }
    assert!(taken <= d["duration_s"].as_f64().unwrap());
    for s in m["counters"]["steal_samples_pct"].as_array().unwrap() {
        let s = s.as_f64().unwrap();
        assert!((0.0..=100.0).contains(&s));
    }
    for k in m["skipped"].as_array().unwrap() {
        assert!(
            !k["reason"].as_str().unwrap().is_empty(),
            "everything not measured says why"
        );
    }
    let findings = d["findings"].as_array().unwrap();
    // The cross-CPU finding follows the round trips the same run measured: the pipe's slowest
    // pinned cross-CPU mean against its same-CPU one, both on an otherwise idle machine. Well
    // above the rule's 1.25x threshold (on a KVM guest a blocking wakeup on another vCPU goes
    // through the hypervisor: 1.5x to 16x on the hosts seen so far) the finding is there; under
    // it, it is not; between, the rule's noise test decides and either is right.
    // Under other load (the run marked noisy, or a neighbour found) the load is itself a finding,
    // so a loaded run with none at all fails too.
    let ids: Vec<&Value> = findings.iter().map(|f| &f["id"]).collect();
    let loaded = d["conditions"]["noisy"] == true || ids.iter().any(|i| *i == "noisy-neighbour");
    let pipe = |w: &&Value| {
        w["method"] == "pipe" && w["blocking"] == true && w["neighbour_load"].is_null()
    };
    let mean = |w: &Value| w["rtt_ns"]["mean"].as_f64().unwrap();
    let wakeups = m["wakeup"].as_array().unwrap();
    let same = wakeups
        .iter()
        .filter(pipe)
        .find(|w| w["class"] == "same-cpu")
        .map(mean);
    let cross = wakeups
        .iter()
        .filter(pipe)
        .filter(|w| !matches!(w["class"].as_str(), Some("same-cpu" | "unpinned")))
        .map(mean)
        .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.max(x))));
    let has = ids.iter().any(|i| *i == "cross-cpu-wakeup");
    match (same, cross) {
        (Some(same), Some(cross)) if !loaded => {
            let ratio = cross / same;
            if ratio >= 1.5 {
                assert!(
                    has,
                    "cross/same {ratio:.2}x but no cross-cpu-wakeup: {ids:?}"
                );
            } else if ratio < 1.25 {
                assert!(!has, "cross/same {ratio:.2}x under the threshold: {ids:?}");
            }
        }
        (Some(_), Some(_)) => assert!(!findings.is_empty(), "a loaded run found not even its load"),
        _ => common::skipped(
            "quick_json_has_the_documented_structure",
            "no pipe round trip on one CPU and across two (one usable CPU): the cross-CPU \
             finding cannot be checked against them",
        ),
    }
    for f in findings {
        assert!(!f["evidence"].as_array().unwrap().is_empty(), "{f}");
        assert!(!f["remedies"].as_array().unwrap().is_empty(), "{f}");
        assert!(
            f["magnitude"]["text"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
        );
        assert!(f["magnitude"]["ratio"].as_f64().is_none_or(|r| r >= 1.0));
    }
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!doctype html>") && !page.contains("<script"));
    // The saved result renders again; compared with itself nothing changes, and compared with
    // a copy whose round trips are three times slower, those figures are regressions.
    let json = dir.path().join("doctor.json");
    std::fs::write(&json, &out.stdout).unwrap();
    cpulab().arg("report").arg(&json).assert().success();
    let compare = |b: &std::path::Path| {
        cpulab()
            .args(["compare", "--json", "--fail-on-regression", "10"])
            .arg(&json)
            .arg(b)
            .output()
            .unwrap()
    };
    let c = compare(&json);
    assert!(c.status.success());
    let c: Value = serde_json::from_slice(&c.stdout).unwrap();
    let tested: Vec<&Value> = c["figures"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["verdict"] != "untested")
        .collect();
    assert!(!tested.is_empty(), "some figure carries samples to test");
    // Identical samples: nothing changed (a ratio is absent when the figure is zero).
    let changed: Vec<&&Value> = tested
        .iter()
        .filter(|f| f["verdict"] != "same" || !(f["ratio"] == 1.0 || f["ratio"].is_null()))
        .collect();
    assert!(changed.is_empty(), "{changed:?}");
    let mut slower = d.clone();
    let wakeup = slower["measurements"]["wakeup"].as_array_mut().unwrap();
    assert!(!wakeup.is_empty());
    for w in wakeup.iter_mut() {
        for x in w["batch_means_ns"].as_array_mut().unwrap() {
            *x = (x.as_f64().unwrap() * 3.0).into();
        }
        for k in ["mean", "ci95_low", "ci95_high", "ci95_half_width", "stddev"] {
            w["rtt_ns"][k] = (w["rtt_ns"][k].as_f64().unwrap() * 3.0).into();
        }
    }
    let slower_path = dir.path().join("slower.json");
    std::fs::write(&slower_path, slower.to_string()).unwrap();
    let c = compare(&slower_path);
    assert_eq!(
        c.status.code(),
        Some(1),
        "a threefold round trip is a regression"
    );
    let c: Value = serde_json::from_slice(&c.stdout).unwrap();
    let rtt: Vec<&Value> = c["figures"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| {
            let p = f["path"].as_str().unwrap();
            (p.ends_with(".rtt_ns") || p.starts_with("rtt_ns[")) && f["verdict"] != "untested"
        })
        .collect();
    assert!(!rtt.is_empty());
    // Tripling every batch is worse wherever the test can tell; a figure whose batches spread
    // widely (a few spin batches on a busy host) may stay within noise, but never reads better.
    assert!(rtt.iter().all(|f| f["verdict"] != "better"), "{rtt:?}");
    assert!(rtt.iter().any(|f| f["verdict"] == "worse"), "{rtt:?}");
    for f in &rtt {
        assert!((f["ratio"].as_f64().unwrap() - 3.0).abs() < 1e-6, "{f:?}");
    }
}

#[test]
fn bad_presets_are_bad_input() {
    let out = doctor(&["--with", "redis", "--quick"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown preset"));
    let out = doctor(&["--quick", "--thorough"]);
    assert_eq!(out.status.code(), Some(2));
    // Once taken as no preset: the whole battery ran and exited 0.
    for empty in ["", ","] {
        let out = doctor(&["--with", empty, "--quick"]);
        assert_eq!(out.status.code(), Some(2), "--with `{empty}`");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("names no preset"), "{err}");
        assert!(out.stdout.is_empty());
    }
    // A --root that is no machine tree: once exit 1 with the first file that could not be read.
    let saved = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/results/doctor-quick.json"
    );
    let empty = tempfile::tempdir().unwrap();
    for root in ["/nonexistent/cpulab-root", empty.path().to_str().unwrap()] {
        let out = doctor(&["--replay", saved, "--root", root]);
        assert_eq!(out.status.code(), Some(2), "{root}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("--root"), "{err}");
        assert!(out.stdout.is_empty());
    }
}

/// `--no-load-check`, as on every measuring command: no load check recorded, and the result
/// says so rather than passing silence off as a quiet machine.
#[test]
fn no_load_check_is_recorded_as_not_checked() {
    let v = common::run_json::<cpulab::doctor::DoctorReport>(
        "doctor",
        &["--quick", "--no-load-check"],
        180,
    );
    assert!(v["conditions"]["load_before"].is_null());
    let notes = v["conditions"]["notes"].as_array().unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().unwrap().contains("not checked")),
        "{notes:?}"
    );
}
