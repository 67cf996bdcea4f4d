//! An interrupt stops the whole doctor run: exit 128 + signal, no process or temporary
//! directory left behind, and what was measured before printed and marked `interrupted`.
//! Regression tests for "Ctrl-C during `doctor --with pgbench` skips the stage and carries on".
//! Also: output paths are checked before measuring.

mod common;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Processes that carry `tag` in their environment (every child of the run inherits it).
fn tagged(tag: &str) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if env
            .split(|b| *b == 0)
            .any(|kv| kv == format!("CPULAB_TEST_TAG={tag}").as_bytes())
        {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            out.push((pid, comm.trim().to_string()));
        }
    }
    out
}

fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// Starts `cpulab doctor ARGS --json` tagged and in its own temporary directory, waits until
/// `ready` holds of its tagged processes (or `max` passes), sends `signal`, and returns the exit
/// code, the JSON document and the temporary directory's leftovers.
fn interrupt(
    args: &[&str],
    ready: impl Fn(&[(u32, String)]) -> bool,
    max: Duration,
    signal: Signal,
) -> (i32, Value, Vec<String>) {
    let tmp = tempfile::tempdir().unwrap();
    let tag = format!("{}-{}", std::process::id(), signal as i32);
    let child = common::cpulab_process()
        .arg("doctor")
        .args(args)
        .arg("--json")
        .env("TMPDIR", tmp.path())
        .env("CPULAB_TEST_TAG", &tag)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while t0.elapsed() < max && !ready(&tagged(&tag)) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        ready(&tagged(&tag)),
        "the run never reached the point to interrupt"
    );
    kill(Pid::from_raw(child.id() as i32), signal).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("partial result is one JSON document ({e}); {stderr}"));
    // Children end with the run; give the kernel a moment to reap them.
    let t1 = Instant::now();
    while !tagged(&tag).is_empty() && t1.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(tagged(&tag), vec![], "processes left behind");
    let left: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    (out.status.code().unwrap_or(-1), doc, left)
}

#[test]
fn sigint_during_the_wakeup_stage_stops_the_whole_run() {
    // Interrupt once the pingpong threads run: mid-stage, not between stages.
    let (code, doc, left) = interrupt(
        &["--quick"],
        |p| p.iter().any(|(pid, _)| threads(*pid) >= 2),
        Duration::from_secs(60),
        Signal::SIGINT,
    );
    assert_eq!(code, 130);
    assert_eq!(doc["kind"], "doctor");
    assert_eq!(doc["interrupted"]["name"], "SIGINT");
    assert_eq!(doc["interrupted"]["signal"], 2);
    assert!(
        doc["interrupted"]["during"]
            .as_str()
            .unwrap()
            .contains("wakeup")
    );
    // No later stage ran.
    assert!(doc["measurements"]["oscost"].is_null());
    assert!(
        doc["measurements"]["throughput"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert_eq!(left, Vec::<String>::new(), "temporary files left behind");
}

#[test]
fn sigterm_during_pgbench_stops_the_whole_run() {
    if !common::postgres_installed(test_name!()) {
        return;
    }
    let (code, doc, left) = interrupt(
        &["--quick", "--with", "pgbench"],
        |p| p.iter().any(|(_, c)| c == "pgbench"),
        Duration::from_secs(180),
        Signal::SIGTERM,
    );
    assert_eq!(code, 143);
    assert_eq!(doc["interrupted"]["name"], "SIGTERM");
    assert!(
        doc["interrupted"]["during"]
            .as_str()
            .unwrap()
            .contains("pgbench")
    );
    // Measured before the application stage, and kept.
    assert!(!doc["measurements"]["wakeup"].as_array().unwrap().is_empty());
    assert!(
        doc["measurements"]["presets"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert!(
        doc["measurements"]["skipped"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| !s["what"].as_str().unwrap().contains("pgbench")),
        "an interrupted stage is not a skipped one"
    );
    assert_eq!(left, Vec::<String>::new(), "temporary files left behind");
}

#[test]
fn an_html_path_in_a_missing_directory_is_rejected_before_measuring() {
    let out = common::cpulab()
        .args([
            "doctor",
            "--quick",
            "--html",
            "/nonexistent-dir/x/report.html",
        ])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("does not exist"), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing was measured");
}

/// The CPUs this test process may use.
fn allowed_here() -> Vec<u32> {
    let mut set = nix::sched::CpuSet::new();
    set = nix::sched::sched_getaffinity(Pid::from_raw(0)).unwrap_or(set);
    (0..nix::sched::CpuSet::count() as u32)
        .filter(|&c| set.is_set(c as usize).unwrap_or(false))
        .collect()
}

// Regression: `doctor --root <a 4-CPU fixture>` on a 2-CPU machine pinned its messaging tasks to
// CPUs this machine lacks, waited for ever, and ignored SIGTERM.
#[test]
fn doctor_on_a_fixture_with_more_cpus_measures_only_cpus_that_exist_here() {
    let fixture = common::fixture("vmware-guest");
    let out = common::cpulab()
        .args(["doctor", "--quick", "--no-load-check", "--json", "--root"])
        .arg(&fixture)
        // Guards a hang only; the run takes its 15 s budget.
        .timeout(Duration::from_secs(240))
        .output()
        .unwrap();
    common::assert_success(&out);
    let doc = common::json_of(&out);
    let here = allowed_here();
    let used: Vec<u32> = cpulab::cpulist::CpuSet::parse_list(
        doc["conditions"]["allowed_cpus"].as_str().unwrap(),
        false,
    )
    .unwrap()
    .iter()
    .collect();
    assert!(!used.is_empty(), "{}", doc["conditions"]);
    assert!(
        used.iter().all(|c| here.contains(c)),
        "measured on {used:?}, this process may use {here:?}"
    );
    assert_eq!(
        doc["conditions"]["online_cpus"], "0-3",
        "the fixture's CPUs"
    );
    // Every stage ran on real CPUs: the messaging stage measured every placement.
    assert!(
        !doc["measurements"]["throughput"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let notes = doc["conditions"]["notes"].to_string();
    assert!(notes.contains("fixture root"), "{notes}");
}

#[test]
fn sigterm_during_the_messaging_stage_stops_the_whole_run() {
    let fixture = common::fixture("vmware-guest");
    let root = fixture.to_str().unwrap();
    // The messaging stage runs 16 threads; the wakeup stage at most a few.
    let (code, doc, left) = interrupt(
        &["--quick", "--no-load-check", "--root", root],
        |p| p.iter().any(|(pid, _)| threads(*pid) >= 10),
        Duration::from_secs(120),
        Signal::SIGTERM,
    );
    assert_eq!(code, 143);
    assert_eq!(doc["interrupted"]["name"], "SIGTERM");
    assert!(
        doc["interrupted"]["during"]
            .as_str()
            .unwrap()
            .contains("messaging"),
        "{}",
        doc["interrupted"]
    );
    // Measured before, and kept; nothing after.
    assert!(!doc["measurements"]["wakeup"].as_array().unwrap().is_empty());
    assert!(doc["measurements"]["oscost"].is_null());
    assert_eq!(left, Vec::<String>::new(), "temporary files left behind");
}
