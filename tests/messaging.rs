//! `cpulab messaging` and `cpulab bursty`, the two experiments added through the registry
//! alone: structure and physics of their results, their bad input, and that `report` and
//! `compare` read them back by kind.

mod common;

use common::{bad_input, cpulab, run_json};
use cpulab::bursty::BurstyReport;
use cpulab::messaging::MessagingReport;

#[test]
fn every_message_sent_is_received_by_processes_and_threads() {
    for (tasks, pipe) in [("processes", false), ("threads", true)] {
        let mut args = vec![
            "--groups",
            "2",
            "--senders",
            "3",
            "--messages",
            "10",
            "--repeats",
            "2",
            "--tasks",
            tasks,
            "--no-load-check",
        ];
        if pipe {
            args.push("--pipe");
        }
        let v = run_json::<MessagingReport>("messaging", &args, 60);
        let runs = v["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2);
        for r in runs {
            // 2 groups x 3 senders x 3 receivers x 10 messages.
            assert_eq!(r["messages_sent"], 180, "{tasks}");
            assert_eq!(r["messages_received"], 180, "{tasks}");
            assert!(r["wall_s"].as_f64().unwrap() > 0.0);
            if tasks == "processes" {
                // Every one of the 12 children blocks on the start gate at least once.
                assert!(r["context_switches"].as_u64().unwrap() >= 12, "{r}");
            }
        }
        let walls: Vec<f64> = runs.iter().map(|r| r["wall_s"].as_f64().unwrap()).collect();
        common::assert_mean_ci_of("wall_s", &v["wall_s"], &walls);
    }
}

#[test]
fn every_burst_takes_at_least_its_cpu_time() {
    let v = run_json::<BurstyReport>(
        "bursty",
        &[
            "--work",
            "200us",
            "--sleep",
            "1ms",
            "--duration",
            "60ms",
            "--repeats",
            "3",
            "--no-load-check",
        ],
        60,
    );
    assert!(v["iterations"].as_u64().unwrap() > 0);
    for r in v["runs"].as_array().unwrap() {
        let wall = r["burst_ns"].as_array().unwrap();
        let cpu = r["burst_cpu_ns"].as_array().unwrap();
        assert!(wall.len() >= 2);
        assert_eq!(wall.len(), cpu.len());
        for (w, c) in wall.iter().zip(cpu) {
            let (w, c) = (w.as_f64().unwrap(), c.as_f64().unwrap());
            assert!(
                c > 0.0 && c <= w,
                "a burst's CPU time {c} ns exceeds its wall time {w} ns"
            );
        }
        assert!(r["p50_ns"].as_f64() <= r["p99_ns"].as_f64());
        assert!(!r["warm_ns"].as_array().unwrap().is_empty());
    }
}

#[test]
fn bad_flags_are_one_line_and_exit_2() {
    for args in [
        &["messaging", "--groups", "0"][..],
        &["messaging", "--cpus", "1-0"],
        &["messaging", "--groups", "1000", "--senders", "1000"],
        &["bursty", "--work", "5s"],
        &["bursty", "--duration", "1e20"],
        &[
            "bursty",
            "--work",
            "1ms",
            "--sleep",
            "10ms",
            "--duration",
            "5ms",
        ],
        &["bursty", "--cpus", "4096"],
        // Once accepted, and each ran until killed.
        &["messaging", "--repeats", "99999999999"],
        &["bursty", "--repeats", "99999999999"],
        // Once accepted, and its interval reached below zero: at least 3 runs, as pair.
        &["bursty", "--repeats", "2"],
    ] {
        bad_input(args);
    }
}

#[test]
fn report_and_compare_read_both_kinds_back() {
    let dir = tempfile::tempdir().unwrap();
    for (name, args) in [
        (
            "messaging",
            &[
                "--groups",
                "1",
                "--senders",
                "2",
                "--messages",
                "5",
                "--repeats",
                "2",
            ][..],
        ),
        (
            "bursty",
            &[
                "--work",
                "100us",
                "--sleep",
                "1ms",
                "--duration",
                "20ms",
                "--repeats",
                "3",
            ],
        ),
    ] {
        let mut all = args.to_vec();
        all.push("--no-load-check");
        let v = match name {
            "messaging" => run_json::<MessagingReport>(name, &all, 60),
            _ => run_json::<BurstyReport>(name, &all, 60),
        };
        assert_eq!(v["kind"], name);
        let path = dir.path().join(format!("{name}.json"));
        std::fs::write(&path, v.to_string()).unwrap();
        let text = cpulab().arg("report").arg(&path).assert().success();
        let text = String::from_utf8_lossy(&text.get_output().stdout).to_string();
        assert!(text.starts_with(&format!("cpulab {name}:")), "{text}");
        let cmp = cpulab()
            .args(["compare", "--json"])
            .arg(&path)
            .arg(&path)
            .assert()
            .success();
        let c: serde_json::Value = serde_json::from_slice(&cmp.get_output().stdout).unwrap();
        assert_eq!(c["kind"], "compare");
        common::assert_same_as_itself(&c);
        // A document of the kind but the wrong shape is bad input.
        let mut broken = v.clone();
        broken["runs"] = serde_json::json!("not a list");
        std::fs::write(&path, broken.to_string()).unwrap();
        cpulab()
            .arg("compare")
            .arg(&path)
            .arg(&path)
            .assert()
            .code(2);
    }
}
