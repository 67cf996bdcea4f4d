//! `cpulab scale` end to end: JSON structure and physics, bad input. No timing thresholds.

mod common;

use common::{cpulab, run_json};
use serde_json::Value;

fn scale_json(args: &[&str]) -> Value {
    run_json::<cpulab::scale::ScaleReport>("scale", args, 120)
}

fn check_points(v: &Value, policies: &[&str]) {
    let ps = v["policies"].as_array().unwrap();
    let names: Vec<&str> = ps.iter().map(|p| p["policy"].as_str().unwrap()).collect();
    assert_eq!(names, policies);
    let repeats = v["repeats"].as_u64().unwrap() as usize;
    let mean = |x: &Value| x["mean"].as_f64().unwrap();
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs());
    for p in ps {
        let points = p["points"].as_array().unwrap();
        assert_eq!(points[0]["threads"], 1, "the baseline comes first");
        let base_time = mean(&points[0]["time_s"]);
        for x in points {
            let n = x["threads"].as_u64().unwrap() as usize;
            let samples: Vec<f64> = x["time_samples_s"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_f64().unwrap())
                .collect();
            assert_eq!(samples.len(), repeats);
            assert!(samples.iter().all(|s| *s > 0.0));
            // The figure is the mean of the raw samples it keeps, from all of them.
            let t = &x["time_s"];
            assert_eq!(t["n"].as_u64(), Some(repeats as u64));
            assert!(
                close(mean(t), samples.iter().sum::<f64>() / repeats as f64),
                "{t}"
            );
            assert!(
                t["ci95_low"].as_f64().unwrap() < t["ci95_high"].as_f64().unwrap()
                    || samples.windows(2).all(|w| w[0] == w[1])
            );
            // Speedup is the baseline's mean time over this point's, times the work of a run
            // here in single-thread runs; efficiency divides it by the thread count.
            let work = x["work_rel"].as_f64().unwrap();
            let speedup = mean(&x["speedup"]);
            assert!(
                close(speedup, base_time * work / mean(t)),
                "speedup {speedup} at {n} threads"
            );
            if v["workload"] == "fib" {
                // fib grows its argument with the thread count: the work is its call tree's.
                let (f1, f) = (
                    points[0]["fib_n"].as_u64().unwrap() as u32,
                    x["fib_n"].as_u64().unwrap() as u32,
                );
                assert_eq!(f, cpulab::scale::workload::fib_for_threads(f1, n));
                let want =
                    cpulab::scale::workload::fib_calls(f) / cpulab::scale::workload::fib_calls(f1);
                assert!(close(work, want), "{work} vs {want}");
            } else {
                assert_eq!(work, 1.0);
            }
            assert!(close(mean(&x["efficiency"]), speedup / n as f64));
            if p["policy"] != "os" {
                assert_eq!(x["cpus"].as_array().unwrap().len(), n);
                assert!(x["planned"].is_object());
            } else {
                assert!(x["cpus"].is_null());
            }
            for b in x["busy_pct"].as_object().unwrap().values() {
                let b = b.as_f64().unwrap();
                assert!((0.0..=100.0 + 1e-6).contains(&b));
            }
        }
    }
}

#[test]
fn fib_under_every_policy() {
    let v = scale_json(&[
        "--workload",
        "fib",
        "--duration",
        "0.02",
        "--repeats",
        "3",
        "--max-time",
        "0",
    ]);
    assert_eq!(v["workload"], "fib");
    check_points(&v, &["os", "compact", "scatter"]);
    // No time for more: exactly the minimum, and an answer all the same.
    assert_eq!(v["repeats"], 3);
    check_answer(&v);
}

/// The answer agrees with the intervals it reports, and a decline says what would answer.
fn check_answer(v: &Value) {
    let a = &v["answer"];
    assert_eq!(a["runs"], v["repeats"]);
    assert!(a["runs"].as_u64().unwrap() >= 2);
    let line = a["line"].as_str().unwrap();
    let q = a["question_threads"].as_u64().unwrap();
    let at = |policy: &str, n: u64| -> Option<Value> {
        v["policies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["policy"] == policy)?["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["threads"] == n)
            .map(|x| x["speedup"].clone())
    };
    match a["status"].as_str().unwrap() {
        "separated" => {
            let (c, s) = (at("compact", q).unwrap(), at("scatter", q).unwrap());
            let f = |x: &Value, k: &str| x[k].as_f64().unwrap();
            assert!(
                f(&c, "ci95_high") < f(&s, "ci95_low") || f(&s, "ci95_high") < f(&c, "ci95_low")
            );
            assert!(line.contains("differ at"), "{line}");
        }
        "precise" => {
            assert!(a["widest_rel"].as_f64().unwrap() <= a["target_rel"].as_f64().unwrap());
        }
        "open" => {
            assert!(a["widest_rel"].as_f64().unwrap() > a["target_rel"].as_f64().unwrap());
            assert!(line.starts_with("cannot "), "{line}");
            // Stopped because another sweep would not have fitted the limit.
            let (e, runs) = (
                a["elapsed_s"].as_f64().unwrap(),
                a["runs"].as_f64().unwrap(),
            );
            assert!(e + e / runs > a["max_time_s"].as_f64().unwrap(), "{a}");
            match a["runs_needed"].as_u64() {
                Some(n) => {
                    assert!(n as f64 > runs);
                    assert!(
                        line.contains(&format!("about {n} runs per point")),
                        "{line}"
                    );
                }
                None => assert!(line.contains("more than"), "{line}"),
            }
        }
        other => panic!("status {other}"),
    }
}

/// Sweeps are added after the minimum until the question is answered or the limit is near.
#[test]
fn sweeps_are_added_until_answered_or_out_of_time() {
    let v = scale_json(&[
        "--duration",
        "0.02",
        "--repeats",
        "2",
        "--max-time",
        "3s",
        "--policy",
        "compact,scatter",
    ]);
    check_points(&v, &["compact", "scatter"]);
    check_answer(&v);
}

#[test]
fn triad_with_an_explicit_list() {
    let v = scale_json(&[
        "--workload",
        "triad",
        "--triad-mib",
        "4",
        "--order",
        "0",
        "--duration",
        "10ms",
        "--repeats",
        "2",
    ]);
    assert_eq!(v["throughput_unit"], "GB/s");
    check_points(&v, &["explicit"]);
    assert_eq!(v["policies"][0]["explicit_cpus"], serde_json::json!([0]));
}

fn bad(args: &[&str]) {
    let out = cpulab().arg("scale").args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

#[test]
fn bad_input_exits_2_with_one_line() {
    bad(&["--cpus", "99"]);
    bad(&["--cpus", "1-0-"]);
    bad(&["--order", "99"]);
    bad(&["--duration", "1e20"]);
    bad(&["--policy", "bogus"]);
    bad(&["--threads", "0"]);
    bad(&["--threads", "100000"]);
    bad(&["--repeats", "1"]);
    bad(&["--max-time=-5"]);
    bad(&["--max-time", "soon"]);
    bad(&["--target-ci", "0"]);
    bad(&["--target-ci", "ten"]);
}
