//! `cpulab oscost` end to end: JSON structure and physics, bad input. No timing thresholds.

mod common;

use common::{cpulab, run_json};
use serde_json::Value;

const NAMES: &[&str] = &[
    "syscall_getppid",
    "clock_gettime",
    "pipe_round_trip_same_cpu",
    "context_switch_yield",
    "thread_create_join",
    "fork_exit_wait",
    "fork_exec_wait",
    "page_fault",
    "mmap_munmap_64k",
];

fn oscost_json(args: &[&str]) -> Value {
    run_json::<cpulab::oscost::OscostReport>("oscost", args, 120)
}

#[test]
fn every_primitive_in_a_fixed_shape() {
    let v = oscost_json(&[
        "--quick",
        "--batches",
        "3",
        "--batch-ms",
        "0.5",
        "--freq-load",
        "0.05",
        "--freq-trials",
        "2",
    ]);
    assert!(v["platform"]["mitigations_summary"].is_string());
    let ops = v["ops"].as_array().unwrap();
    let names: Vec<&str> = ops.iter().map(|o| o["name"].as_str().unwrap()).collect();
    assert_eq!(
        names, NAMES,
        "same names, same order: results stay comparable"
    );
    for o in ops {
        assert_eq!(o["unit"], "ns/op");
        if !o["unavailable"].is_null() {
            assert!(o["per_op_ns"].is_null());
            common::skipped(
                "every_primitive_in_a_fixed_shape",
                &format!("{} not measured here: {}", o["name"], o["unavailable"]),
            );
            continue;
        }
        let samples: Vec<f64> = o["batch_samples_ns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_f64().unwrap())
            .collect();
        assert_eq!(samples.len(), 3);
        assert!(
            samples.iter().all(|s| *s >= 0.0),
            "{}: no negative costs",
            o["name"]
        );
        common::assert_mean_ci_of("per_op_ns", &o["per_op_ns"], &samples);
        let (min, median) = (
            o["min_ns"].as_f64().unwrap(),
            o["median_ns"].as_f64().unwrap(),
        );
        let lowest = samples.iter().copied().fold(f64::INFINITY, f64::min);
        let highest = samples.iter().copied().fold(0.0, f64::max);
        assert_eq!(min, lowest, "{}: min of the samples", o["name"]);
        assert!(min <= median && median <= highest, "{}", o["name"]);
        assert!(o["ops_per_batch"].as_u64().unwrap() >= 1);
    }
    let by_name = |n: &str| ops.iter().find(|o| o["name"] == n).unwrap();
    // A blocking round trip on one CPU switches the caller out at least once.
    match by_name("pipe_round_trip_same_cpu")["counted"]["per_op"].as_f64() {
        Some(c) => assert!(c >= 0.95, "caller switches per round trip {c}"),
        None => common::skipped(
            "oscost pipe_round_trip_same_cpu",
            "no software perf counter for context switches: switches per round trip not checked",
        ),
    }
    // The first write to a fresh page faults once.
    match by_name("page_fault")["counted"]["per_op"].as_f64() {
        Some(c) => assert!((0.9..=1.5).contains(&c), "faults per page {c}"),
        None => common::skipped(
            "oscost page_fault",
            "no software perf counter for page faults: faults per page not checked",
        ),
    }
    let f = &v["frequency"];
    assert!(f["unit"].as_str().unwrap().contains("per ns"));
    assert_eq!(f["trials"].as_array().unwrap().len(), 2);
    for t in f["trials"].as_array().unwrap() {
        assert!(t["cold_per_ns"].as_f64().unwrap() > 0.0);
        assert!(t["warm_per_ns"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn frequency_probe_can_be_skipped_and_cpu_chosen() {
    let v = oscost_json(&[
        "--quick",
        "--no-freq",
        "--batches",
        "2",
        "--batch-ms",
        "0.2",
        "--cpus",
        "0",
    ]);
    assert!(v["frequency"].is_null());
    assert_eq!(v["cpu"], 0);
    assert_eq!(v["ops"].as_array().unwrap().len(), NAMES.len());
}

fn bad(args: &[&str]) {
    let out = cpulab().arg("oscost").args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

#[test]
fn bad_input_exits_2_with_one_line() {
    bad(&["--cpu", "99"]);
    bad(&["--cpus", "1-0"]);
    bad(&["--batches", "1"]);
    bad(&["--batch-ms=-3"]);
}
