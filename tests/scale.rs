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
            // Speedup is the baseline's mean time over this point's; efficiency divides it by
            // the thread count.
            let speedup = mean(&x["speedup"]);
            assert!(
                close(speedup, base_time / mean(t)),
                "speedup {speedup} at {n} threads"
            );
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
    let v = scale_json(&["--workload", "fib", "--duration", "0.02", "--repeats", "3"]);
    assert_eq!(v["workload"], "fib");
    check_points(&v, &["os", "compact", "scatter"]);
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
}
