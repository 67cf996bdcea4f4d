//! Helpers shared by the integration tests that run the real binary.
//!
//! Every test file runs cpulab through [`cpulab`] (or [`cpulab_process`] when it must signal
//! or wrap the process), and a test that needs a program this machine lacks goes through
//! [`installed`]: it prints a visible `SKIPPED:` line and, under `CI=true` (CI installs every
//! program), fails instead of passing silently.

#![allow(dead_code)]

use assert_cmd::Command;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::io::Write;
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
            if from.is_dir() {
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
/// [`not_installed`] line (a failure under `CI=true`).
pub fn program(test: &str, program: &str, package: &str) -> Option<PathBuf> {
    let found = cpulab::pair::presets::find_program(program);
    if found.is_none() {
        not_installed(test, program, package);
    }
    found
}

/// Runs cpulab with `args` under `taskset -c CPUS`, as a user restricting its CPUs would.
pub fn cpulab_under_taskset(cpus: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new("taskset")
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
/// skipped something shows it. Under `CI=true` it is a failure: CI installs every program.
pub fn not_installed(test: &str, program: &str, package: &str) {
    let line = format!("SKIPPED: {test}: {program} not installed (apt-get install {package})");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{line}; CI installs every program, so a missing one is a failure");
    }
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Says that `test` cannot run, and why, on stderr past the harness's capture; a failure under
/// `CI=true`, where everything a test needs is there.
pub fn skipped(test: &str, why: &str) {
    let line = format!("SKIPPED: {test}: {why}");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{line}; under CI this is a failure");
    }
    let _ = writeln!(std::io::stderr(), "{line}");
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

/// Every JSON document a successful run wrote on stdout, in order (a command and the child it
/// ran, each with `--json`).
pub fn json_docs(out: &std::process::Output) -> Vec<Value> {
    assert_success(out);
    serde_json::Deserializer::from_slice(&out.stdout)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .expect("JSON documents on stdout")
}
