//! Helpers shared by the integration tests that run the real binary.
//!
//! Every test file runs cpulab through [`cpulab`] (or [`cpulab_process`] when it must signal
//! or wrap the process), and a test that needs a program this machine lacks goes through
//! [`installed`]: it prints a visible `SKIPPED:` line and, under CI (`CI` set; CI installs every
//! program), fails instead of passing silently.

#![allow(dead_code)]

use assert_cmd::Command;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::PathBuf;

/// The cpulab binary under test, for assert_cmd. It records nothing in a history
/// (`CPULAB_HISTORY=off`) unless the test gives `--history PATH` or sets the variable again.
pub fn cpulab() -> Command {
    let mut c = Command::new(cpulab_path());
    c.env("CPULAB_HISTORY", "off");
    c
}

/// The cpulab binary under test as a plain process, for tests that spawn it and signal it
/// (no history, as [`cpulab`]).
pub fn cpulab_process() -> std::process::Command {
    let mut c = std::process::Command::new(cpulab_path());
    c.env("CPULAB_HISTORY", "off");
    c
}

/// The path of the binary under test, for tests that run it under another program (taskset).
pub fn cpulab_path() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_cpulab"))
}

/// A private copy of `tests/fixtures/NAME` in a temporary directory, for tests that write
/// settings into a machine tree.
pub fn fixture_copy(name: &str) -> tempfile::TempDir {
    fn copy_dir(src: &std::path::Path, dst: &std::path::Path) {
        std::fs::create_dir_all(dst).unwrap();
        for e in std::fs::read_dir(src).unwrap().flatten() {
            let (from, to) = (e.path(), dst.join(e.file_name()));
            // A fake process's fds are links to `anon_inode:kvm-vm` and the like: kept as links.
            if e.file_type().unwrap().is_symlink() {
                std::os::unix::fs::symlink(std::fs::read_link(&from).unwrap(), &to).unwrap();
            } else if from.is_dir() {
                copy_dir(&from, &to);
            } else {
                std::fs::copy(&from, &to).unwrap();
            }
        }
    }
    let dst = tempfile::tempdir().unwrap();
    copy_dir(&fixture(name), dst.path());
    dst
}

/// `tests/fixtures/NAME`, read-only: a machine tree for `--root`.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Where `program` is installed, as cpulab itself looks for programs; `None` after a visible
/// [`not_installed`] line (a failure under CI).
pub fn program(test: &str, program: &str, package: &str) -> Option<PathBuf> {
    let found = cpulab::pair::presets::find_program(program);
    if found.is_none() {
        not_installed(test, program, package);
    }
    found
}

/// Runs cpulab with `args` under `taskset -c CPUS`, as a user restricting its CPUs would (no
/// history, as [`cpulab`]).
pub fn cpulab_under_taskset(cpus: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new("taskset")
        .env("CPULAB_HISTORY", "off")
        .args(["-c", cpus])
        .arg(cpulab_path())
        .args(args)
        .output()
        .expect("taskset is installed (util-linux)")
}

/// Runs cpulab with `args` as user and group nobody (65534), through `setpriv`, to see what a
/// user without root gets. `None` when setpriv is missing (reported as [`program`] does).
pub fn cpulab_as_nobody(test: &str, args: &[&str]) -> Option<std::process::Output> {
    cpulab_as_nobody_with_caps(test, &[], args)
}

/// The same, with the capabilities `caps` (such as "bpf", "perfmon") granted as ambient ones,
/// as `setcap` on the binary would grant them.
pub fn cpulab_as_nobody_with_caps(
    test: &str,
    caps: &[&str],
    args: &[&str],
) -> Option<std::process::Output> {
    let setpriv = program(test, "setpriv", "util-linux")?;
    let mut cmd = std::process::Command::new(setpriv);
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
    if !caps.is_empty() {
        let list: Vec<String> = caps.iter().map(|c| format!("+{c}")).collect();
        let list = list.join(",");
        cmd.arg(format!("--inh-caps={list}"))
            .arg(format!("--ambient-caps={list}"));
    }
    Some(cmd.arg(cpulab_path()).args(args).output().unwrap())
}

/// Runs `cpulab <subcommand> --json --quiet ARGS`, checks it succeeds with exactly one JSON
/// document on stdout, and that the document reads back into the library's result type `T`
/// (what `compare` and the doctor do). Bounded by `timeout_s`.
pub fn run_json<T: DeserializeOwned>(subcommand: &str, args: &[&str], timeout_s: u64) -> Value {
    let out = cpulab()
        .args([subcommand, "--json", "--quiet"])
        .args(args)
        .timeout(std::time::Duration::from_secs(timeout_s))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("exactly one JSON document");
    serde_json::from_value::<T>(v.clone()).expect("JSON matches the result type");
    v
}

/// Runs cpulab with `args` and checks the result is bad input: exit code 2, one line on
/// stderr, no panic.
pub fn bad_input(args: &[&str]) {
    let out = cpulab().args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
}

/// A test's name from inside it: `test_name!()` in `fn ctrl_c_stops_postgres()` gives
/// `"ctrl_c_stops_postgres"`.
#[macro_export]
macro_rules! test_name {
    () => {{
        fn f() {}
        let full = std::any::type_name_of_val(&f);
        let full = full.strip_suffix("::f").unwrap_or(full);
        full.rsplit("::").next().unwrap_or(full)
    }};
}

/// Says that `test` cannot run because `program` (from Debian `package`) is missing. The line
/// goes straight to the process's stderr, past the test harness's capture, so a run that
/// skipped something shows it. Under CI (see [`in_ci`]) it is a failure: CI installs every program.
pub fn not_installed(test: &str, program: &str, package: &str) {
    skipped(
        test,
        &format!("{program} not installed (apt-get install {package}); CI installs every program"),
    );
}

/// True when every `(program, Debian package)` is installed; otherwise reports the first
/// missing one through [`not_installed`] and returns false (the test then returns).
pub fn installed(test: &str, needs: &[(&str, &str)]) -> bool {
    for &(program, package) in needs {
        if cpulab::pair::presets::find_program(program).is_none() {
            not_installed(test, program, package);
            return false;
        }
    }
    true
}

/// True when the `pgbench` preset can run here: PostgreSQL's server programs, pgbench and the
/// `postgres` user, as cpulab itself looks for them.
pub fn postgres_installed(test: &str) -> bool {
    match cpulab::pair::preset_available(cpulab::pair::settings::Preset::Pgbench) {
        Ok(()) => true,
        Err(_) => {
            not_installed(test, "PostgreSQL (initdb, postgres, pgbench)", "postgresql");
            false
        }
    }
}

/// cpulab with `--root ROOT`, reading and writing a machine tree (a fixture copy) instead of
/// this machine's /proc and /sys.
pub fn cpulab_on(root: &std::path::Path) -> Command {
    let mut c = cpulab();
    c.arg("--root").arg(root);
    c
}

/// Checks a run succeeded, showing its stderr when it did not.
pub fn assert_success(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The one JSON document a successful `--json` run wrote on stdout.
pub fn json_of(out: &std::process::Output) -> Value {
    assert_success(out);
    serde_json::from_slice(&out.stdout).expect("exactly one JSON document on stdout")
}

#[path = "../../src/testing/shared.rs"]
mod shared;

/// The one skip rule, shared with the unit tests (`src/testing/shared.rs`): [`in_ci`] is true
/// for `CI` set to any non-empty value other than `0` or `false`, and [`skipped`] prints a
/// visible `SKIPPED:` line past the harness's capture, or fails under CI.
#[allow(unused_imports)] // not every test file asks whether it runs under CI
pub use shared::{in_ci, skipped};

/// Checks that `ci`, a `{mean, ci95_low, ci95_high, ci95_half_width, stddev, n}` document, is the
/// mean of `samples` with its 95% Student's t interval: the mean and sample standard deviation
/// computed here, the quantile from the printed table (bracketed between its rows). A z-interval,
/// an n instead of n - 1, or a mean of other samples fails.
pub fn assert_mean_ci_of(what: &str, ci: &Value, samples: &[f64]) {
    let g = |k: &str| {
        ci[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{what}: {k} missing: {ci}"))
    };
    let n = ci["n"]
        .as_u64()
        .unwrap_or_else(|| panic!("{what}: n missing: {ci}"));
    let i = shared::Interval {
        mean: g("mean"),
        ci95_low: if n > 1 { g("ci95_low") } else { g("mean") },
        ci95_high: if n > 1 { g("ci95_high") } else { g("mean") },
        ci95_half_width: g("ci95_half_width"),
        stddev: if n > 1 { g("stddev") } else { 0.0 },
        n: n as usize,
    };
    shared::assert_interval_of(&format!("{what} ({ci})"), &i, samples);
}

/// Checks one CPU's time shares (`user_pct`, `system_pct`, ...) over an interval: each in
/// 0..=100, together the whole of the CPU's ticks (nothing counted twice or dropped), and the
/// ticks no more than the interval holds at the kernel's USER_HZ of 100.
pub fn assert_cpu_time_shares(what: &str, shares: &Value, interval_s: Option<f64>) {
    let parts = [
        "user_pct",
        "system_pct",
        "irq_pct",
        "softirq_pct",
        "steal_pct",
        "iowait_pct",
        "idle_pct",
    ];
    let mut sum = 0.0;
    for k in parts {
        let v = shares[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{what}: {k} missing: {shares}"));
        assert!((0.0..=100.0 + 1e-9).contains(&v), "{what}: {k} = {v}");
        sum += v;
    }
    let ticks = shares["ticks"].as_u64().unwrap_or(0);
    if ticks > 0 {
        // /proc/stat's iowait may step back a tick on a NO_HZ kernel: a little slack.
        assert!(
            (sum - 100.0).abs() <= 2.0,
            "{what}: shares sum to {sum}: {shares}"
        );
    } else {
        assert_eq!(sum, 0.0, "{what}: shares without ticks: {shares}");
    }
    if let Some(s) = interval_s {
        // 100 ticks a second (USER_HZ), give or take what tick accounting settles late: a
        // tickless CPU leaving idle books its idle ticks at once, and a reading falls between
        // a tick and its booking (107 ticks in 1.032 s seen here under load, and 110 in 1.022 s
        // with a third of the CPU stolen by the VM's host). Far more than that means a wrong
        // interval or a counter read twice (twice the ticks).
        assert!(
            ticks as f64 <= s * 102.0 + 10.0,
            "{what}: {ticks} ticks in {s} s: {shares}"
        );
    }
}

/// Checks `cpulab compare --json A A`: a result against itself has every judged figure the
/// same, with a ratio of exactly 1 and no change (a test that calls identical samples different,
/// or a ratio taken the wrong way up, fails).
pub fn assert_same_as_itself(c: &Value) {
    let figures = c["figures"].as_array().expect("figures");
    assert!(!figures.is_empty(), "no figures compared: {c}");
    for f in figures {
        let path = f["path"].as_str().unwrap_or("?");
        assert_eq!(f["a"], f["b"], "{path}");
        if f["a"].as_f64() != Some(0.0) {
            assert_eq!(f["ratio"].as_f64(), Some(1.0), "{path}: {f}");
            assert_eq!(f["change_pct"].as_f64(), Some(0.0), "{path}: {f}");
        }
        let want = if f["test"] == "none" {
            "untested"
        } else {
            "same"
        };
        assert_eq!(f["verdict"], want, "{path}: {f}");
    }
    assert!(
        c["regressions"].as_array().is_some_and(|r| r.is_empty()),
        "{c}"
    );
}

/// A history at `dir/history.sqlite` holding the saved doctor run
/// `tests/fixtures/results/doctor-quick.json`, imported as taken on this host (its host name
/// set to this machine's, so it is this host's newest doctor run). Returns the path and the
/// document imported.
pub fn doctor_history(dir: &std::path::Path) -> (PathBuf, Value) {
    let fixture =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/results/doctor-quick.json");
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    let host = nix::sys::utsname::uname()
        .unwrap()
        .nodename()
        .to_string_lossy()
        .to_string();
    doc["conditions"]["hostname"] = Value::from(host.clone());
    doc["probe"]["conditions"]["hostname"] = Value::from(host);
    let file = dir.join("doctor.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    let history = dir.join("history.sqlite");
    cpulab()
        .arg("--history")
        .arg(&history)
        .args(["history", "import", "-q"])
        .arg(&file)
        .assert()
        .success();
    (history, doc)
}
pub mod chromium;
pub mod container;
pub mod hostfixture;
pub mod pgpair;
pub mod prom;

/// Tracepoints system-wide (`cpulab watch`) need root, or CAP_PERFMON with a low
/// perf_event_paranoid; without it the test says it was skipped (a failure under CI, which runs
/// as root).
pub fn can_trace(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    skipped(
        test,
        "cpulab watch needs root to open scheduler tracepoints; CI runs as root",
    );
    false
}

/// Whether `/dev/kvm` opens here for real guests (`host bench`, `host`); a visible skip, and a
/// failure under CI, when it does not.
pub fn kvm_usable(test: &str) -> bool {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        Ok(_) => true,
        Err(e) => {
            skipped(test, &format!("/dev/kvm does not open here: {e}"));
            false
        }
    }
}
