//! `cpulab sim` end to end: the real binary, its JSON, its files and its bad input.

mod common;

use common::{cpulab, run_json};
use cpulab::sim::SimReport;
use cpulab::sim::validate::Validation;

#[test]
fn validate_json_carries_the_envelope_and_every_table_with_its_error() {
    let v = run_json::<Validation>("sim", &["validate"], 120);
    assert_eq!(v["kind"], "sim");
    assert_eq!(v["label"], "SIMULATED");
    let tables = v["tables"].as_array().unwrap();
    let ids: Vec<&str> = tables.iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["A", "B", "C", "E", "M", "H"]);
    for t in tables {
        let share = t["measure"] == "share";
        assert_eq!(t["max_abs_error_pp"].is_number(), share, "{}", t["id"]);
        assert_eq!(t["max_rel_error"].is_number(), !share, "{}", t["id"]);
        assert!(t["params"]["halt_exit_ns"].is_number());
        for c in t["cells"].as_array().unwrap() {
            assert!(c["published"].as_f64().unwrap() > 0.0);
        }
    }
    // Field notes C is a share table: its error is in points and within the issue's 3.
    let c = tables.iter().find(|t| t["id"] == "C").unwrap();
    assert!(c["max_abs_error_pp"].as_f64().unwrap() <= 3.0);
}

#[test]
fn a_builtin_printed_as_toml_runs_as_a_file_and_repeats_for_a_seed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    let out = cpulab()
        .args(["sim", "builtin", "c-fair-share", "--toml"])
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::write(&file, &out.stdout).unwrap();
    let f = file.to_str().unwrap();
    let html = dir.path().join("c.html");
    let a = run_json::<SimReport>(
        "sim",
        &[f, "--seed", "7", "--html", html.to_str().unwrap()],
        60,
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("SIMULATED") && page.contains("VM2 4 busy"));
    let b = run_json::<SimReport>("sim", &[f, "--seed", "7"], 60);
    assert_eq!(a, b);
    assert_eq!(a["label"], "SIMULATED");
    let configs = a["configs"].as_array().unwrap();
    assert_eq!(configs.len(), 8);
    // An idle neighbour VM takes nothing.
    let idle = configs
        .iter()
        .find(|c| c["name"] == "4 thread(s), VM2 idle")
        .unwrap();
    assert_eq!(idle["vm_cpu"][1]["cpus"], 0.0);
}

#[test]
fn list_names_every_builtin_and_html_is_labelled_simulated() {
    let out = cpulab().args(["sim", "list"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for name in [
        "a-hyperv-pgbench",
        "b-classic-vs-root",
        "c-fair-share",
        "e-opteron-placement",
        "this-machine",
    ] {
        assert!(text.contains(name), "{text}");
    }
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("v.html");
    let out = cpulab()
        .args(["sim", "validate", "--html", html.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("SIMULATED") && page.contains("published (field notes C)"));
    assert!(!page.contains("http://") && !page.contains("https://"));
}

/// The host bench result bundled with cpulab: a real one, measured on this project's guest.
const HOST_BENCH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/sim/data/host-bench.json");

/// A host bench result calibrates table H (and only H): its measured figures, named as the
/// given file's, and the KVM costs its rows set; a scenario run with it says where its KVM
/// costs came from and keeps the guest's own.
#[test]
fn a_host_bench_result_calibrates_table_h_and_a_scenarios_kvm_costs() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hb.json");
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(HOST_BENCH).unwrap()).unwrap();
    // Another host: polling off twice as slow as the bundled one.
    let off = doc["sweep"]["rows"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|r| r["point"]["halt_poll_limit_ns"] == 0)
        .unwrap();
    let mean = off["point"]["rtt_ns"]["mean"].as_f64().unwrap();
    off["point"]["rtt_ns"]["mean"] = (2.0 * mean).into();
    std::fs::write(&file, doc.to_string()).unwrap();
    let f = file.to_str().unwrap();
    let v = run_json::<Validation>("sim", &["validate", "--calibrate", f], 120);
    let h = v["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "H")
        .unwrap();
    assert_eq!(h["reference"], "measured");
    assert!(
        h["measured_by"].as_str().unwrap().starts_with(f),
        "{}",
        h["measured_by"]
    );
    let off_cell = h["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["cell"].as_str().unwrap().contains("limit 0 ns"))
        .unwrap();
    assert!((off_cell["published"].as_f64().unwrap() - 2.0 * mean / 1e3).abs() < 1e-6);
    assert!(
        off_cell["error"].as_f64().unwrap().abs() < 0.005,
        "{off_cell}"
    );
    assert_eq!(
        v["calibration"]["kind"], "published",
        "table M keeps the field notes'"
    );
    let out = cpulab()
        .args(["sim", "builtin", "this-machine", "--calibrate", f])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("KVM costs calibrated from"), "{text}");
    let r = run_json::<SimReport>("sim", &["builtin", "this-machine", "--calibrate", f], 60);
    let plain = run_json::<SimReport>("sim", &["builtin", "this-machine"], 60);
    let (params, own) = (&r["configs"][0]["params"], &plain["configs"][0]["params"]);
    // The IPI is the given result's (polling off less one CPU, per side); the guest's own
    // costs stay the scenario's.
    assert_ne!(params["ipi_ns"], own["ipi_ns"], "{params}");
    assert_eq!(
        params["guest_switch_ns"], own["guest_switch_ns"],
        "{params}"
    );
    assert_eq!(params["cold_stretch"], own["cold_stretch"], "{params}");
    assert!(
        r["host_calibration"]
            .as_str()
            .unwrap()
            .contains("IPI to an idle CPU")
    );
    // Hyper-V's costs are not this host's to set.
    let out = cpulab()
        .args(["sim", "builtin", "c-fair-share", "--calibrate", f])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("runs the root hypervisor"));
    // Without its sweep it cannot set the IPI's cost: one line naming the row, exit 2.
    doc["sweep"] = serde_json::Value::Null;
    std::fs::write(&file, doc.to_string()).unwrap();
    let out = cpulab()
        .args(["sim", "validate", "--calibrate", f])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("no halt-poll sweep"), "{err}");
}

/// `sim validate --calibrate` with a pingpong result holding these runs.
fn validate_calibrated(runs: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pp.json");
    let doc = format!(r#"{{"cpulab_schema": 1, "kind": "pingpong", "runs": {runs}}}"#);
    std::fs::write(&file, doc).unwrap();
    run_json::<Validation>(
        "sim",
        &["validate", "--calibrate", file.to_str().unwrap()],
        120,
    )
}

#[test]
fn calibration_comes_from_a_pingpong_result() {
    let v = validate_calibrated(
        r#"[{"method": "pipe", "placement": "same-cpu", "mean_rtt_ns": {"mean": 4000.0}},
            {"method": "pipe", "placement": "shared-llc", "mean_rtt_ns": {"mean": 30000.0}}]"#,
    );
    assert_eq!(v["calibration"]["cross_rtt_ns"], 30000.0);
    let m = &v["tables"][4];
    let cross = m["cells"][1]["simulated"].as_f64().unwrap();
    assert!((cross - 30.0).abs() < 0.5, "{cross}");
}

/// A `pingpong --touch` result also carries the work after each wakeup on one CPU and across
/// two: table M's cold stretch is then the measured one (25% here, over the 4 us the work took
/// on one CPU), and its parameters say where it came from instead of field notes A.
#[test]
fn a_calibration_with_work_after_each_wakeup_sets_the_cold_stretch() {
    let v = validate_calibrated(
        r#"[{"method": "pipe", "placement": "same-cpu", "mean_rtt_ns": {"mean": 4000.0},
             "touch": {"bytes": 262144, "mean_ns": {"mean": 4000.0}}},
            {"method": "pipe", "placement": "shared-llc", "mean_rtt_ns": {"mean": 30000.0},
             "touch": {"bytes": 262144, "mean_ns": {"mean": 5000.0}}}]"#,
    );
    assert_eq!(
        v["calibration"]["cold"]["cross_ns"], 5000.0,
        "{}",
        v["calibration"]
    );
    let m = &v["tables"][4];
    assert_eq!(m["id"], "M");
    let stretch = m["params"]["cold_stretch"].as_f64().unwrap();
    assert!((stretch - 0.25).abs() < 1e-9, "{stretch}");
    assert_eq!(m["params"]["cold_work_ns"], 4000.0);
    let from = m["params_from"].as_str().unwrap();
    assert!(from.contains("work after each wakeup"), "{from}");
    assert!(!from.contains("A's perf stat"), "{from}");
    // The pipe rows stay the calibration's inputs, the stretch taken out of the wakeup costs.
    let cross = m["cells"][1]["simulated"].as_f64().unwrap();
    assert!((cross - 30.0).abs() < 0.5, "{cross}");
}

#[test]
fn bad_scenarios_and_calibrations_are_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "name = \"x\"\nhypervisor = \"vmware\"\n").unwrap();
    let not_result = dir.path().join("r.json");
    std::fs::write(&not_result, "{}").unwrap();
    // A built-in as a file, with a cold stretch no host has.
    let out = cpulab()
        .args(["sim", "builtin", "c-fair-share", "--toml"])
        .output()
        .unwrap();
    let toml: String = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            if l.starts_with("cold_stretch =") {
                "cold_stretch = -0.5\n".to_string()
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    assert!(toml.contains("cold_stretch = -0.5"), "{toml}");
    let good = dir.path().join("good.toml");
    std::fs::write(&good, &out.stdout).unwrap();
    let cold = dir.path().join("cold.toml");
    std::fs::write(&cold, toml).unwrap();
    let out = cpulab()
        .args(["sim", cold.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("cold_stretch"));
    for args in [
        vec!["sim", cold.to_str().unwrap()],
        vec!["sim", bad.to_str().unwrap()],
        vec!["sim", "/nonexistent/s.toml"],
        vec!["sim", "builtin", "nope"],
        vec![
            "sim",
            "validate",
            "--calibrate",
            not_result.to_str().unwrap(),
        ],
        vec!["sim"],
        // Flags the action ignores or has no output for: once `list --html` printed the list
        // before it failed, and `--toml` beside a scenario file was dropped without a word.
        vec!["sim", "list", "--html", "list.html"],
        vec!["sim", "list", "--calibrate", "pingpong.json"],
        vec!["sim", good.to_str().unwrap(), "--toml"],
        vec!["sim", "validate", "--toml"],
        vec!["sim", "builtin", "c-fair-share", "--toml", "--json"],
    ] {
        let out = cpulab().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing on stdout");
    }
}

/// Absurd numbers in a scenario or a calibration file are refused before anything runs, one
/// line naming the field, the value (short: `1e300`, once printed as three hundred digits, and
/// the calibrated one simulated and printed in full) and the range it takes.
#[test]
fn absurd_values_are_one_short_line_naming_field_value_and_range() {
    let dir = tempfile::tempdir().unwrap();
    let out = cpulab()
        .args(["sim", "builtin", "c-fair-share", "--toml"])
        .output()
        .unwrap();
    let good = String::from_utf8_lossy(&out.stdout).to_string();
    // The file with the first line that starts with `key =` set to `value`.
    let edit = |key: &str, value: &str, file: &str| {
        let mut done = false;
        let text: String = good
            .lines()
            .map(|l| {
                if !done && l.starts_with(&format!("{key} =")) {
                    done = true;
                    format!("{key} = {value}\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        assert!(done, "{key}");
        let path = dir.path().join(file);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    let huge_cost = edit("halt_exit_ns", "1e300", "cost.toml");
    let tiny_work = edit("unit_us", "1e-300", "work.toml");
    let calibration = dir.path().join("pp.json");
    std::fs::write(
        &calibration,
        r#"{"cpulab_schema": 1, "kind": "pingpong", "runs": [
            {"method": "pipe", "placement": "same-cpu", "mean_rtt_ns": {"mean": 1e300}},
            {"method": "pipe", "placement": "shared-llc", "mean_rtt_ns": {"mean": 3e300}}]}"#,
    )
    .unwrap();
    let cal = calibration.to_str().unwrap();
    for (args, want) in [
        (
            vec!["sim", huge_cost.as_str()],
            "halt_exit_ns = 1e300 is out of range; give 0 to 1e9 nanoseconds",
        ),
        (
            vec!["sim", tiny_work.as_str()],
            "unit_us = 1e-300 is out of range; give 0.01 to 1000000 microseconds",
        ),
        (
            vec!["sim", "builtin", "c-fair-share", "--calibrate", cal],
            "same-CPU mean round trip (ns) = 1e300 is out of range; give 1 to 1e9 nanoseconds",
        ),
        (
            vec!["sim", "validate", "--calibrate", cal],
            "same-CPU mean round trip (ns) = 1e300 is out of range",
        ),
    ] {
        let out = cpulab().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(err.len() < 200, "{args:?}: a short line: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing simulated");
    }
}
