//! `cpulab share` end to end: JSON structure and physics, bad input. No timing thresholds.

mod common;

use common::{cpulab, run_json};
use cpulab::share::model::relative_share;
use serde_json::Value;

fn share_json(args: &[&str]) -> Value {
    run_json::<cpulab::share::ShareReport>("share", args, 60)
}

#[test]
fn one_worker_beside_one_burner() {
    let v = share_json(&[
        "--threads",
        "1",
        "--burners",
        "1",
        "--duration",
        "0.1",
        "--repeats",
        "2",
    ]);
    assert!(v["conditions"]["kernel"].is_string());
    let usable = v["usable_cpus"].as_f64().unwrap();
    assert!(usable > 0.0);
    let configs = v["configs"].as_array().unwrap();
    assert_eq!(configs.len(), 2, "the alone baseline and the loaded run");
    assert_eq!(configs[0]["burners"], 0);
    assert_eq!(configs[1]["burners"], 1);
    // The model is the water-filling one over the usable CPUs the report names: alone is the
    // baseline, and one full-duty burner halves a worker's share only once CPUs run out.
    let expected = [1.0, relative_share(usable, 1, 1, 1.0)];
    for (c, want) in configs.iter().zip(expected) {
        let model = c["model_relative"].as_f64().unwrap();
        assert!((model - want).abs() < 1e-12, "model {model}, want {want}");
        let rel = c["relative"]["mean"].as_f64().unwrap();
        assert!(rel.is_finite() && rel >= 0.0);
        let runs = c["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2);
        for r in runs {
            assert!(r["interval_s"].as_f64().unwrap() > 0.0);
            assert_eq!(r["worker_events"].as_array().unwrap().len(), 1);
            // A thread cannot get more than one CPU: CPU time / interval is a share in 0..1
            // (a clock tick of slack).
            for s in r["worker_cpu_share"].as_array().unwrap() {
                let s = s.as_f64().unwrap();
                assert!((0.0..=1.05).contains(&s), "worker CPU share {s}");
            }
            for s in r["burner_cpu_share"].as_array().unwrap() {
                let s = s.as_f64().unwrap();
                assert!((0.0..=1.05).contains(&s), "burner CPU share {s}");
            }
            if let Some(st) = r["steal_pct"].as_f64() {
                assert!((0.0..=100.0).contains(&st));
            }
        }
    }
    assert_eq!(configs[0]["burner_cpu_share"], Value::Null);
}

#[test]
fn partial_duty_burners_pinned() {
    let v = share_json(&[
        "--threads",
        "1",
        "--burners",
        "2",
        "--duty",
        "30",
        "--burner-cpus",
        "0",
        "--duration",
        "0.1",
        "--repeats",
        "2",
    ]);
    assert_eq!(v["duty_pct"], 30.0);
    assert_eq!(v["burner_cpus"], "0");
    let loaded = &v["configs"][1];
    let usable = v["usable_cpus"].as_f64().unwrap();
    let want = relative_share(usable, 1, 2, 0.3);
    assert!((loaded["model_relative"].as_f64().unwrap() - want).abs() < 1e-12);
    assert!(
        !v["conditions"]["notes"].as_array().unwrap().is_empty(),
        "pinning is noted"
    );
}

#[test]
fn text_output_names_the_model() {
    let out = cpulab()
        .args([
            "share",
            "-q",
            "-t",
            "1",
            "-b",
            "1",
            "--duration",
            "0.05",
            "--repeats",
            "1",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("model") && text.contains("measured"));
}

fn bad(args: &[&str]) {
    let out = cpulab().arg("share").args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_input_exits_2_with_one_line() {
    bad(&["--threads", "0"]);
    bad(&["--burner-cpus", "99"]);
    bad(&["--burner-cpus", "x-y"]);
    bad(&["--duty", "0"]);
    bad(&["--duty", "150"]);
    bad(&["--duration=-1"]);
    bad(&["--duration", "1e20"]);
    bad(&["--repeats", "0"]);
}
