//! A live PostgreSQL + pgbench pair (`cpulab pair --preset pgbench`) for the tests that watch
//! it with the doctor, and the replay of such a doctor run with a known cross-CPU penalty.

use serde_json::Value;
use std::time::Duration;

/// Ends the pair with SIGTERM (it stops its servers and removes its files) however the test
/// ends.
pub struct Pair(pub std::process::Child);

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.0.wait();
    }
}

/// The arguments of a pair that runs long enough for the doctor's quick battery beside it.
pub const PAIR_ARGS: [&str; 8] = [
    "pair",
    "--preset",
    "pgbench",
    "--duration",
    "10",
    "--repeats",
    "3",
    "--quiet",
];

/// Starts `command` (a cpulab pair, or a wrapper that execs one) with its output discarded.
pub fn start(mut command: std::process::Command) -> Pair {
    Pair(
        command
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the pair starts"),
    )
}

/// Waits up to 30 s for a pgbench process; whether one was seen.
pub fn pgbench_seen() -> bool {
    (0..60).any(|_| {
        std::thread::sleep(Duration::from_millis(500));
        std::process::Command::new("pgrep")
            .args(["-x", "pgbench"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// `cpulab doctor --quick --json --comm postgres,pgbench`, as one JSON document.
pub fn doctor_watching_the_pair() -> Value {
    let out = super::cpulab()
        .args(["doctor", "--quick", "--json", "--comm", "postgres,pgbench"])
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    super::json_of(&out)
}

/// Every pid the doctor's watch saw.
pub fn watched_pids(d: &Value) -> Vec<i64> {
    d["measurements"]["app_watch"]["processes"]
        .as_array()
        .expect("the watch ran")
        .iter()
        .flat_map(|p| {
            p["pids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
        })
        .collect()
}

/// `doctor --replay` of the live result with every blocking round trip that is neither same-CPU
/// nor unpinned set to 4x the same-CPU one of its method, batch for batch.
///
/// Whether the battery finds a cross-CPU penalty beside the live pair is physics, not plumbing:
/// with the pair keeping both vCPUs awake the crossing can cost too little to be a finding (a CI
/// host found only kernel-entry-cost and latency-throughput-tradeoff). A test of what the
/// cross-CPU remedies carry runs them on this replay, so a quiet crossing cannot skip it.
pub fn replay_with_penalty(d: &Value) -> Value {
    let mut d = d.clone();
    let runs = d["measurements"]["wakeup"]
        .as_array_mut()
        .expect("the battery measured wakeups");
    let same: Vec<(Value, Vec<Value>)> = runs
        .iter()
        .filter(|w| w["class"] == "same-cpu")
        .map(|w| {
            (
                w["method"].clone(),
                w["batch_means_ns"].as_array().unwrap().clone(),
            )
        })
        .collect();
    assert!(
        !same.is_empty(),
        "the battery measured a same-CPU round trip"
    );
    let mut changed = 0;
    for w in runs.iter_mut() {
        let class = w["class"].as_str().unwrap_or("").to_string();
        if w["blocking"] != true || class == "same-cpu" || class == "unpinned" {
            continue;
        }
        if let Some((_, base)) = same.iter().find(|(m, _)| *m == w["method"]) {
            w["batch_means_ns"] = Value::Array(
                base.iter()
                    .map(|v| Value::from(v.as_f64().unwrap() * 4.0))
                    .collect(),
            );
            changed += 1;
        }
    }
    assert!(
        changed > 0,
        "the battery measured a blocking cross-CPU round trip"
    );
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("doctor.json");
    std::fs::write(&saved, serde_json::to_vec(&d).unwrap()).unwrap();
    let out = super::cpulab()
        .args(["doctor", "--json", "--no-history", "--replay"])
        .arg(&saved)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    super::json_of(&out)
}
