//! Helpers shared by the integration tests that run the real binary.

#![allow(dead_code)]

use assert_cmd::Command;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub fn cpulab() -> Command {
    Command::cargo_bin("cpulab").unwrap()
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

/// True (with the reason on stderr) when a `pair` preset's programs are not installed here.
pub fn skip(preset: cpulab::pair::settings::Preset) -> bool {
    match cpulab::pair::preset_available(preset) {
        Ok(()) => false,
        Err(why) => {
            eprintln!("skipped: {why}");
            true
        }
    }
}

/// True when `program` is installed; says on stderr that the test is skipped otherwise.
pub fn have(program: &str) -> bool {
    let found = cpulab::pair::presets::find_program(program).is_some();
    if !found {
        eprintln!("skipped: `{program}` is not installed");
    }
    found
}
