//! `cpulab watch` on real processes: cpulab's own pingpong children, pinned to one CPU and one
//! CPU apart, watched from their start to their end (`watch -- cpulab pingpong ...`), so the
//! wakeups the watch counts can be checked against the round trips the pair reports.

mod common;

use common::cpulab;
use serde_json::Value;

/// Tracepoints system-wide need root (or CAP_PERFMON with a low perf_event_paranoid).
fn can_trace(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    let line = format!("SKIPPED: {test}: cpulab watch needs root to open scheduler tracepoints");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{line}; CI runs as root");
    }
    eprintln!("{line}");
    false
}

/// Runs `cpulab watch --json -- cpulab pingpong --processes --pairs PAIR --json`; returns the
/// pingpong document and the watch document (the child's output comes first on stdout).
fn watch_pingpong(pair: &str) -> (Value, Value) {
    let bin = common::cpulab_path();
    let out = cpulab()
        .args(["watch", "--json", "--quiet", "--duration", "60s", "--"])
        .arg(&bin)
        .args([
            "pingpong",
            "--processes",
            "--method",
            "pipe",
            "--pairs",
            pair,
            "--max-time",
            "0.5",
            "--warmup",
            "0",
            "--no-load-check",
            "--json",
            "--quiet",
        ])
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> = serde_json::Deserializer::from_slice(&out.stdout)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(docs.len(), 2, "pingpong's document, then watch's");
    assert_eq!(docs[0]["kind"], "pingpong");
    assert_eq!(docs[1]["kind"], "watch");
    serde_json::from_value::<cpulab::watch::WatchReport>(docs[1].clone()).unwrap();
    (docs[0].clone(), docs[1].clone())
}

fn class_wakeups(watch: &Value, same: bool) -> u64 {
    watch["processes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["classes"].as_array().unwrap().iter())
        .filter(|c| (c["class"] == "same-cpu") == same)
        .map(|c| c["wakeups"].as_u64().unwrap())
        .sum()
}

fn check_pair(pair: &str, expect_same: bool) {
    let (pp, w) = watch_pingpong(pair);
    let round_trips = pp["runs"][0]["round_trips"].as_u64().unwrap();
    assert!(round_trips > 0);
    assert_eq!(w["ended"], "command exited");
    let same = class_wakeups(&w, true);
    let other = class_wakeups(&w, false);
    let lost = w["lost_events"].as_u64().unwrap();
    // Each blocking round trip wakes the responder and then the initiator.
    if lost == 0 {
        assert!(
            same + other >= round_trips,
            "{} wakeups for {round_trips} round trips",
            same + other
        );
    } else {
        eprintln!("note: {lost} events lost; the wakeup count is a lower bound, not compared");
    }
    let (want, total) = if expect_same {
        (same, same + other)
    } else {
        (other, same + other)
    };
    assert!(
        want as f64 >= 0.9 * total as f64,
        "{pair}: {same} same-CPU and {other} cross-CPU wakeups"
    );
    for p in w["processes"].as_array().unwrap() {
        for c in p["classes"].as_array().unwrap() {
            if let Some(l) = c["latency"].as_object() {
                let q = |k: &str| l[k].as_u64().unwrap();
                assert!(q("p50_ns") <= q("p90_ns") && q("p90_ns") <= q("p99_ns"));
                assert!(q("p99_ns") <= q("max_ns"));
                let counted: u64 = l["histogram"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| b["count"].as_u64().unwrap())
                    .sum();
                assert_eq!(counted, q("samples"), "histogram holds every sample");
                assert!(q("samples") <= c["wakeups"].as_u64().unwrap());
            }
        }
    }
}

#[test]
fn a_pair_on_one_cpu_wakes_on_the_wakers_cpu() {
    if !can_trace(test_name!()) {
        return;
    }
    check_pair("0:0", true);
}

#[test]
fn a_pair_one_cpu_apart_wakes_across() {
    if !can_trace(test_name!()) {
        return;
    }
    check_pair("0:1", false);
}

#[test]
fn a_pid_that_does_not_exist_is_one_line_and_exit_2() {
    let out = cpulab()
        .args(["watch", "--pid", "999999999", "--duration", "1s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("999999999"), "{err}");
}

#[test]
fn bad_durations_and_two_targets_are_bad_input() {
    for args in [
        &["watch", "--duration", "soon"][..],
        &["watch", "--duration", "0"],
        &["watch", "--pid", "1", "--comm", "postgres"],
    ] {
        let out = cpulab().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn a_saved_watch_renders_and_compares() {
    if !can_trace(test_name!()) {
        return;
    }
    let (_, w) = watch_pingpong("0:0");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.json");
    std::fs::write(&path, w.to_string()).unwrap();
    let html = dir.path().join("w.html");
    let out = cpulab()
        .args(["report"])
        .arg(&path)
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read_to_string(&html)
            .unwrap()
            .contains("Wakeup graph")
    );
    let out = cpulab()
        .arg("compare")
        .arg(&path)
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// PostgreSQL and pgbench started by `cpulab pair` (server on CPU 0, client on CPU 1), watched
/// as descendants of the command: the graph's edges are pgbench <-> postgres, nearly all across
/// CPUs, and each query's wakeup of the backend is answered by one wakeup of pgbench.
#[test]
fn pgbench_against_postgres_one_cpu_apart_wakes_across_both_ways() {
    if !can_trace(test_name!()) || !common::postgres_installed(test_name!()) {
        return;
    }
    let bin = common::cpulab_path();
    let out = cpulab()
        .args(["watch", "--json", "--quiet", "--duration", "300s", "--"])
        .arg(&bin)
        .args([
            "pair",
            "--preset",
            "pgbench",
            "--workload",
            "select1",
            "--duration",
            "1",
            "--repeats",
            "3",
            "--pairs",
            "0:1",
            "--json",
            "--quiet",
        ])
        .timeout(std::time::Duration::from_secs(300))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> = serde_json::Deserializer::from_slice(&out.stdout)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap();
    let w = docs.last().unwrap();
    assert_eq!(w["kind"], "watch");
    let (mut to_pg, mut to_bench, mut cross, mut all) = (0u64, 0u64, 0u64, 0u64);
    for p in w["pairs"].as_array().unwrap() {
        let n = p["wakeups"].as_u64().unwrap();
        match (p["waker"].as_str().unwrap(), p["wakee"].as_str().unwrap()) {
            ("pgbench", "postgres") => to_pg += n,
            ("postgres", "pgbench") => to_bench += n,
            _ => continue,
        }
        for c in p["classes"].as_array().unwrap() {
            let k = c["wakeups"].as_u64().unwrap();
            all += k;
            if c["class"] != "same-cpu" {
                cross += k;
            }
        }
    }
    assert!(to_pg > 0 && to_bench > 0, "{to_pg} {to_bench}");
    if w["lost_events"].as_u64() == Some(0) {
        let (lo, hi) = (to_pg.min(to_bench) as f64, to_pg.max(to_bench) as f64);
        assert!(
            lo >= 0.95 * hi,
            "pgbench->postgres {to_pg}, back {to_bench}"
        );
    }
    assert!(cross as f64 >= 0.9 * all as f64, "{cross} of {all} across");
}
