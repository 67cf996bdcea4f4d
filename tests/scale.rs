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
    for p in ps {
        let points = p["points"].as_array().unwrap();
        assert_eq!(points[0]["threads"], 1, "the baseline comes first");
        for x in points {
            let n = x["threads"].as_u64().unwrap() as usize;
            let samples = x["time_samples_s"].as_array().unwrap();
            assert_eq!(samples.len(), v["repeats"].as_u64().unwrap() as usize);
            assert!(samples.iter().all(|s| s.as_f64().unwrap() > 0.0));
            let eff = &x["efficiency"];
            let e = eff["mean"].as_f64().unwrap();
            let half = eff["ci95_half_width"].as_f64().unwrap();
            assert!(e > 0.0);
            // Efficiency above 1 is superlinear scaling: allowed only within the noise.
            assert!(e - half <= 1.15, "efficiency {e} ± {half} at {n} threads");
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
    assert!(v["fib_n"].as_u64().unwrap() >= 20);
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
