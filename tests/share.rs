//! `cpulab share` end to end: JSON structure and physics, bad input. No timing thresholds.

#[macro_use]
mod common;

use common::{cpulab, cpulab_under_taskset, json_of};
use serde_json::Value;

/// `cpulab share ARGS` restricted to CPU 0, as `taskset -c 0` restricts a user's program: one
/// usable CPU, so the model's answers are known by hand (field notes C: a worker beside a busy
/// thread on one CPU gets half of it).
fn share_json_on_cpu0(args: &[&str]) -> Value {
    let mut all = vec!["share", "--json", "--quiet"];
    all.extend_from_slice(args);
    let v = json_of(&cpulab_under_taskset("0", &all));
    serde_json::from_value::<cpulab::share::ShareReport>(v.clone()).expect("a share result");
    v
}

/// Checks that no CPU gave out more time than it had: on one CPU, the worker's and the burners'
/// CPU shares of a run add up to at most the whole CPU (a clock tick of slack each).
fn assert_one_cpu_shared(run: &Value) {
    let total: f64 = ["worker_cpu_share", "burner_cpu_share"]
        .iter()
        .flat_map(|k| run[*k].as_array().cloned().unwrap_or_default())
        .map(|s| s.as_f64().unwrap())
        .sum();
    assert!(total <= 1.1, "one CPU shared out {total} CPUs: {run}");
}

#[test]
fn one_worker_beside_one_burner() {
    let v = share_json_on_cpu0(&[
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
    assert_eq!(v["usable_cpus"], 1.0, "taskset -c 0 leaves one CPU");
    let configs = v["configs"].as_array().unwrap();
    assert_eq!(configs.len(), 2, "the alone baseline and the loaded run");
    assert_eq!(configs[0]["burners"], 0);
    assert_eq!(configs[1]["burners"], 1);
    // Alone is the baseline; one always-busy burner on the one CPU takes half of it.
    let expected = [1.0, 0.5];
    for (c, want) in configs.iter().zip(expected) {
        let model = c["model_relative"].as_f64().unwrap();
        assert!((model - want).abs() < 1e-12, "model {model}, want {want}");
        let runs = c["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2);
        // The measured speed is each run's worker rate relative to the alone runs' mean rate,
        // and the figure the mean of those runs with their interval.
        let rate = |r: &Value| r["worker_rate_per_s"][0].as_f64().unwrap();
        let alone = configs[0]["runs"].as_array().unwrap();
        let alone_rate = alone.iter().map(rate).sum::<f64>() / alone.len() as f64;
        let each: Vec<f64> = runs.iter().map(|r| rate(r) / alone_rate).collect();
        for (r, want) in runs.iter().zip(&each) {
            let got = r["worker_relative"][0].as_f64().unwrap();
            assert!(
                (got - want).abs() <= 1e-9 * want,
                "relative {got}, events give {want}"
            );
        }
        common::assert_mean_ci_of("relative", &c["relative"], &each);
        if want < 1.0 {
            // The model's half, measured by the kernel's CPU-time accounting rather than by
            // the rate (which other machines on a shared host move): of the CPU time the
            // worker and the burner got, the worker got half. CFS shares one CPU equally
            // between two always-runnable threads of equal weight to within a slice (a few
            // ms); on a busy host the two got as little as 25 ms in a 0.1 s run here, where a
            // slice is up to 0.12 of the split, hence 0.15. A burner elsewhere gives 1, a
            // second burner 1/3.
            for r in runs {
                let w = r["worker_cpu_share"][0].as_f64().unwrap();
                let b = r["burner_cpu_share"][0].as_f64().unwrap();
                let split = w / (w + b);
                assert!(
                    (split - want).abs() <= 0.15,
                    "the worker got {split} of the CPU time, the model {want}: {r}"
                );
            }
        }
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
            assert_one_cpu_shared(r);
        }
    }
    assert_eq!(configs[0]["burner_cpu_share"], Value::Null);
}

#[test]
fn partial_duty_burners_pinned() {
    let v = share_json_on_cpu0(&[
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
    // Two burners asking 30% each of the one CPU get it (max-min fairness gives a small demand
    // all it asks), and the worker the 40% left.
    let model = loaded["model_relative"].as_f64().unwrap();
    assert!((model - 0.4).abs() < 1e-9, "model {model}");
    for r in loaded["runs"].as_array().unwrap() {
        assert_one_cpu_shared(r);
    }
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
    // Once accepted: one work unit of primes up to 1e11 never finished, so the run never ended.
    bad(&["--max-prime", "99999999999"]);
    // Once dropped without a word: burner flags beside no burner.
    bad(&["--burners", "0", "--burner-cpus", "0"]);
    bad(&["--burners", "0", "--duty", "50"]);
}

/// stress-ng, a program cpulab did not write, as the neighbour: one always-busy stress-ng worker
/// on CPU 0 beside a share worker restricted to CPU 0. The scheduler gives two equal-weight
/// runnable threads on one CPU half of it each, so the worker's measured CPU share cannot be near
/// a whole CPU (which a share taken from wall time instead of CPU time would give).
#[test]
fn a_stress_ng_neighbour_takes_its_part_of_the_cpu() {
    if !common::installed(test_name!(), &[("stress-ng", "stress-ng")]) {
        return;
    }
    let mut neighbour = std::process::Command::new("stress-ng")
        .args([
            "--cpu",
            "1",
            "--taskset",
            "0",
            "--timeout",
            "60s",
            "--quiet",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait (bounded) until stress-ng's worker is running, not merely its parent.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let busy = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
            .filter(|st| st.contains("(stress-ng") && st.contains(") R "))
            .count()
            > 0
    };
    while !busy() {
        assert!(std::time::Instant::now() < until, "stress-ng never ran");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = cpulab_under_taskset(
        "0",
        &[
            "share",
            "--json",
            "--quiet",
            "--no-load-check",
            "--threads",
            "1",
            "--burners",
            "0",
            "--duration",
            "0.3",
            "--repeats",
            "2",
        ],
    );
    let _ = neighbour.kill();
    let _ = neighbour.wait();
    let v = json_of(&out);
    for r in v["configs"][0]["runs"].as_array().unwrap() {
        for s in r["worker_cpu_share"].as_array().unwrap() {
            let s = s.as_f64().unwrap();
            assert!(
                s <= 0.75,
                "worker got {s} of a CPU it shared with stress-ng"
            );
        }
    }
}
