//! `cpulab compare` on literal result documents: which differences are beyond noise, which way
//! is worse, the CI gate, and every kind of broken input.
//!
//! The literal documents are of kind `probe`, which has no typed figures: they exercise the
//! generic walk and the name-based direction guess. An experiment's result is compared on its
//! typed figures and must match its schema.

mod common;

use common::cpulab;
use serde_json::{Value, json};
use std::path::PathBuf;

fn doc(kind: &str, same_cpu: &[f64], cross: &[f64], tps: &[f64]) -> Value {
    json!({
        "cpulab_schema": 1,
        "kind": kind,
        "conditions": {"kernel": "6.1.0", "noisy": false},
        "runs": [
            {"method": "pipe", "class": "same-cpu", "cpus": "0:0", "batch_means_ns": same_cpu},
            {"method": "pipe", "class": "shared-llc", "cpus": "0:1", "batch_means_ns": cross}
        ],
        "throughput": {"tps": {"samples": tps}},
        "unlabelled_ns": 12.0
    })
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn compare_json(a: &Value, b: &Value) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let pa = write(&dir, "a.json", &a.to_string());
    let pb = write(&dir, "b.json", &b.to_string());
    let out = cpulab()
        .arg("compare")
        .arg(&pa)
        .arg(&pb)
        .arg("--json")
        .output()
        .unwrap();
    common::assert_success(&out);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn figure<'a>(c: &'a Value, path: &str) -> &'a Value {
    c["figures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("no figure {path} in {c:#}"))
}

const SAME: &str = "runs[method=pipe,class=same-cpu,cpus=0:0].batch_means_ns";
const CROSS: &str = "runs[method=pipe,class=shared-llc,cpus=0:1].batch_means_ns";

#[test]
fn significant_and_insignificant_changes_are_told_apart() {
    let a = doc(
        "probe",
        &[5000., 5010., 4990., 5005., 4995.],
        &[42e3, 43e3, 41e3, 42.5e3],
        &[100., 101., 99.],
    );
    // Same-CPU 20% slower and tight: worse. Cross-CPU noisy and overlapping: within noise.
    // Throughput up by 10% and tight: better (a rate, so higher is better).
    let b = doc(
        "probe",
        &[6000., 6010., 5990., 6005., 5995.],
        &[40e3, 45e3, 39e3, 44e3],
        &[110., 111., 109.],
    );
    let c = compare_json(&a, &b);
    assert_eq!(c["cpulab_schema"], 1);
    assert_eq!(c["kind"], "compare");
    assert!(c["method"].as_str().unwrap().contains("Welch"));
    let same = figure(&c, SAME);
    assert_eq!(same["verdict"], "worse");
    assert_eq!(same["test"], "welch");
    assert_eq!(same["worse_when"], "higher");
    assert!((same["ratio"].as_f64().unwrap() - 1.2).abs() < 1e-3);
    assert!(same["p_value"].as_f64().unwrap() < 0.05);
    assert_eq!(figure(&c, CROSS)["verdict"], "same");
    let tps = figure(&c, "throughput.tps");
    assert_eq!(tps["worse_when"], "lower");
    assert_eq!(tps["verdict"], "better");
    assert_eq!(figure(&c, "unlabelled_ns")["verdict"], "untested");
    assert_eq!(c["context_differences"].as_array().unwrap().len(), 0);
}

#[test]
fn runs_pair_up_by_identity_in_any_order() {
    let a = doc("probe", &[1., 2., 3.], &[10., 11., 12.], &[1., 2.]);
    let mut b = a.clone();
    b["runs"].as_array_mut().unwrap().reverse();
    b["conditions"]["kernel"] = json!("6.9.0");
    let c = compare_json(&a, &b);
    assert_eq!(figure(&c, SAME)["ratio"], 1.0);
    assert_eq!(figure(&c, CROSS)["ratio"], 1.0);
    assert_eq!(c["context_differences"][0][0], "conditions.kernel");
}

#[test]
fn fail_on_regression_exits_1_only_beyond_threshold_and_noise() {
    let dir = tempfile::tempdir().unwrap();
    let a = doc(
        "probe",
        &[5000., 5010., 4990., 5005., 4995.],
        &[1., 2., 3.],
        &[1., 2.],
    );
    let b = doc(
        "probe",
        &[6000., 6010., 5990., 6005., 5995.],
        &[1., 2., 3.],
        &[1., 2.],
    );
    let (pa, pb) = (
        write(&dir, "a.json", &a.to_string()),
        write(&dir, "b.json", &b.to_string()),
    );
    cpulab()
        .args(["compare", "--fail-on-regression", "10"])
        .arg(&pa)
        .arg(&pb)
        .assert()
        .code(1)
        .stderr(predicates::str::contains("got worse by more than 10%"));
    // 20% worse does not fail a 25% gate; the reverse direction is an improvement.
    cpulab()
        .args(["compare", "--fail-on-regression", "25"])
        .arg(&pa)
        .arg(&pb)
        .assert()
        .code(0);
    cpulab()
        .args(["compare", "--fail-on-regression", "1"])
        .arg(&pb)
        .arg(&pa)
        .assert()
        .code(0);
    // The JSON document still comes out whole before the failing exit code.
    let out = cpulab()
        .args(["compare", "--json", "--fail-on-regression", "10"])
        .arg(&pa)
        .arg(&pb)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(c["regressions"][0], SAME);
}

#[test]
fn broken_inputs_exit_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let good = doc("probe", &[1., 2.], &[1., 2.], &[1., 2.]).to_string();
    let pg = write(&dir, "good.json", &good);
    let cases = [
        (
            "truncated.json",
            good[..good.len() / 2].to_string(),
            "truncated",
        ),
        ("garbage.json", "hello".to_string(), "not valid JSON"),
        (
            "foreign.json",
            r#"{"name": "not ours"}"#.to_string(),
            "not a cpulab result",
        ),
        (
            "future.json",
            r#"{"cpulab_schema": 2, "kind": "pingpong"}"#.to_string(),
            "schema 2",
        ),
        (
            "other_kind.json",
            doc("oscost", &[1., 2.], &[1., 2.], &[1., 2.]).to_string(),
            "same kind",
        ),
    ];
    for (name, text, want) in cases {
        let p = write(&dir, name, &text);
        let out = cpulab().arg("compare").arg(&pg).arg(&p).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{name}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{name}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{name}: {err}");
        assert!(!err.contains("panicked"));
    }
    let out = cpulab()
        .arg("compare")
        .arg(&pg)
        .arg(dir.path().join("missing.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    cpulab()
        .args(["compare", "--fail-on-regression", "-3"])
        .arg(&pg)
        .arg(&pg)
        .assert()
        .code(2);
}

/// Regression: a document with the right schema number but a field of the wrong type was
/// compared as if nothing were wrong (exit 0). It is read into its kind's typed result first.
#[test]
fn a_field_of_the_wrong_type_is_bad_input_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kvm-guest");
    let out = cpulab()
        .args(["--root", fixture, "probe", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let good: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut bad = good.clone();
    bad["conditions"]["started_unix_s"] = json!("yesterday");
    let pg = write(&dir, "good.json", &good.to_string());
    let pb = write(&dir, "bad.json", &bad.to_string());
    // The well-shaped pair compares.
    cpulab().arg("compare").arg(&pg).arg(&pg).assert().code(0);
    for (a, b) in [(&pg, &pb), (&pb, &pg)] {
        let out = cpulab().arg("compare").arg(a).arg(b).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.contains("bad.json") && err.contains("wrong shape"),
            "{err}"
        );
        assert!(err.contains("invalid type"), "{err}");
    }
}

/// An experiment's result with the right schema number but a field of the wrong type is bad
/// input: one line, exit 2 (it is read into its typed result to find its figures).
#[test]
fn an_experiment_result_of_the_wrong_shape_is_one_line_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    for kind in ["pingpong", "pair", "share", "scale", "oscost"] {
        let text = format!(r#"{{"cpulab_schema": 1, "kind": "{kind}", "conditions": 3}}"#);
        let p = write(&dir, &format!("{kind}.json"), &text);
        let out = cpulab().arg("compare").arg(&p).arg(&p).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{kind}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("does not match its schema"), "{kind}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{kind}: {err}");
    }
}

/// Two real experiment results compare on their typed figures, each figure's direction read
/// from its type rather than guessed from its name.
#[test]
fn experiment_results_compare_on_their_typed_figures() {
    let run = || {
        let out = cpulab()
            .args([
                "oscost",
                "--quick",
                "--no-freq",
                "--batches",
                "3",
                "--json",
                "-q",
            ])
            .args(["--no-load-check"])
            .output()
            .unwrap();
        assert!(out.status.success());
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let c = compare_json(&run(), &run());
    let figures = c["figures"].as_array().unwrap();
    assert!(!figures.is_empty());
    for f in figures {
        assert_eq!(f["direction_source"], "typed", "{f}");
        assert_eq!(f["worse_when"], "higher", "a cost: {f}");
    }
    assert!(
        figure(&c, "cost_ns[name=syscall_getppid]")["a_n"]
            .as_u64()
            .unwrap()
            >= 2
    );
}

/// Each experiment's figures carry the direction their meaning gives them: a time or a cost is
/// worse higher, a rate, a share or a speedup worse lower.
#[test]
fn each_experiments_figures_say_which_way_is_worse() {
    let run = |args: &[&str]| {
        let out = cpulab()
            .args(args)
            .args(["--json", "-q", "--no-load-check"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let share = run(&[
        "share",
        "--duration",
        "30ms",
        "-t",
        "1",
        "-b",
        "1",
        "--repeats",
        "2",
    ]);
    let scale = run(&[
        "scale",
        "--duration",
        "10ms",
        "--repeats",
        "2",
        "--threads",
        "1,2",
        "--max-time",
        "0",
    ]);
    for doc in [&share, &scale] {
        let c = compare_json(doc, doc);
        let figures = c["figures"].as_array().unwrap();
        assert!(!figures.is_empty(), "{c}");
        for f in figures {
            let path = f["path"].as_str().unwrap();
            let want = if path.starts_with("time_s") {
                "higher"
            } else {
                "lower"
            };
            assert_eq!(f["worse_when"], want, "{path}");
            assert_eq!(f["direction_source"], "typed", "{path}");
        }
        common::assert_same_as_itself(&c);
    }
    // A known answer: the scale result with tight samples, against the same with every run
    // taking twice as long, is worse on every time figure, by 100%.
    let with_times = |k: f64| {
        let mut d = scale.clone();
        for p in d["policies"].as_array_mut().unwrap() {
            for x in p["points"].as_array_mut().unwrap() {
                let t = x["time_samples_s"][0].as_f64().unwrap();
                x["time_samples_s"] = json!([k * t * 0.999, k * t * 1.001]);
            }
        }
        d
    };
    let (scale, slower) = (with_times(1.0), with_times(2.0));
    let c = compare_json(&scale, &slower);
    let times: Vec<&Value> = c["figures"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["path"].as_str().unwrap().starts_with("time_s"))
        .collect();
    assert!(!times.is_empty(), "{c}");
    for f in times {
        assert_eq!(f["verdict"], "worse", "{f}");
        let by = f["worse_by_pct"].as_f64().unwrap();
        assert!((by - 100.0).abs() < 1e-6, "{f}");
    }
    // And the other way round: twice as fast is better.
    let c = compare_json(&slower, &scale);
    for f in c["figures"].as_array().unwrap() {
        if f["path"].as_str().unwrap().starts_with("time_s") {
            assert_eq!(f["verdict"], "better", "{f}");
        }
    }
}

/// A regression gate has a range, 0 to 1000 percent: a larger one (1e300 was taken, and could
/// never fire but on a time more than elevenfold) is almost surely a typo, and NaN or inf is no
/// percentage. Refused before either file is read, one line naming the flag, value and range.
#[test]
fn a_regression_threshold_outside_0_to_1000_percent_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let good = doc("probe", &[1., 2.], &[1., 2.], &[1., 2.]).to_string();
    let pg = write(&dir, "good.json", &good);
    let pg = pg.to_str().unwrap();
    for (pct, want) in [
        (
            "1e300",
            "--fail-on-regression 1e300: give 0 to 1000 percent (worse by more",
        ),
        (
            "1000.5",
            "--fail-on-regression 1000.5: give 0 to 1000 percent (worse by more",
        ),
        ("NaN", "--fail-on-regression NaN: give 0 to 1000 percent"),
        ("inf", "--fail-on-regression inf: give 0 to 1000 percent"),
        ("-3", "--fail-on-regression -3: give 0 to 1000 percent"),
    ] {
        let flag = format!("--fail-on-regression={pct}");
        let out = cpulab()
            .args(["compare", &flag, pg, "/nonexistent/b.json"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{pct}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{pct}: {err}");
        assert!(err.contains(want), "{pct}: {err}");
        assert!(out.stdout.is_empty(), "{pct}");
    }
    // The ends of the range are accepted: 0 is any figure worse beyond noise.
    for pct in ["0", "1000"] {
        cpulab()
            .args(["compare", "--fail-on-regression", pct, pg, pg])
            .assert()
            .code(0);
    }
}
