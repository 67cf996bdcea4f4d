//! Results written by an older cpulab still load: `report` renders them, `compare` reads their
//! typed figures, and a doctor or probe result is compared on its typed figures, not on names.
//!
//! The files under `tests/fixtures/results/` were written by older binaries and are kept as they
//! were written, never regenerated:
//! - `pingpong.json`, `oscost.json`, `scale.json`: before the five older experiments moved onto
//!   `experiment::Command` (their kind is still the plain name, `"kind": "pingpong"`);
//! - `doctor-quick.json`, `probe-kvm-guest.json`, `oscost-quick.json`: the commit before doctor
//!   and probe had typed figures (`cpulab doctor --quick --json`, `cpulab --root
//!   tests/fixtures/kvm-guest probe --json`, `cpulab oscost --quick --no-freq --batches 3 --json`).

mod common;

use common::{assert_success, cpulab, json_of};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Experiment results of the plain-name kinds: the kind and a figure each must show.
const OLD_KINDS: &[(&str, &str)] = &[
    ("pingpong", "rtt_ns"),
    ("oscost", "cost_ns"),
    ("scale", "time_s"),
];

/// Results from before doctor and probe had typed figures.
const BEFORE_TYPED: &[&str] = &[
    "doctor-quick.json",
    "probe-kvm-guest.json",
    "oscost-quick.json",
];

fn result(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/results")
        .join(name)
}

fn every_result() -> Vec<PathBuf> {
    OLD_KINDS
        .iter()
        .map(|(kind, _)| result(&format!("{kind}.json")))
        .chain(BEFORE_TYPED.iter().map(|name| result(name)))
        .collect()
}

fn compared_with_itself(p: &Path) -> Value {
    json_of(
        &cpulab()
            .arg("compare")
            .arg(p)
            .arg(p)
            .arg("--json")
            .output()
            .unwrap(),
    )
}

#[test]
fn old_results_render_in_report() {
    let dir = tempfile::tempdir().unwrap();
    for (i, p) in every_result().iter().enumerate() {
        let name = p.display();
        let out = cpulab().arg("report").arg(p).output().unwrap();
        assert_success(&out);
        assert!(!out.stdout.is_empty(), "{name}: report wrote nothing");
        let page = dir.path().join(format!("{i}.html"));
        let out = cpulab()
            .args(["report", "-q"])
            .arg(p)
            .arg("--html")
            .arg(&page)
            .output()
            .unwrap();
        assert_success(&out);
        let html = std::fs::read_to_string(&page).unwrap();
        assert!(
            html.to_ascii_lowercase().starts_with("<!doctype html>"),
            "{name}: no page"
        );
        assert!(html.contains("<html"), "{name}: no page");
    }
}

#[test]
fn old_results_compare_with_typed_figures() {
    for (kind, figure) in OLD_KINDS {
        let c = compared_with_itself(&result(&format!("{kind}.json")));
        assert_eq!(c["result_kind"], *kind);
        let figures = c["figures"].as_array().unwrap();
        assert!(!figures.is_empty(), "{kind}: no figures");
        assert!(
            figures
                .iter()
                .any(|f| f["path"].as_str().unwrap().starts_with(figure)),
            "{kind}: no {figure} figure"
        );
        for f in figures {
            // A file compared with itself: every typed figure is the same, none is guessed.
            assert_eq!(f["direction_source"], "typed", "{kind}: {}", f["path"]);
            assert_eq!(f["ratio"], 1.0, "{kind}: {}", f["path"]);
        }
        common::assert_same_as_itself(&c);
    }
    for name in BEFORE_TYPED {
        let c = compared_with_itself(&result(name));
        let figures = c["figures"].as_array().unwrap();
        assert!(!figures.is_empty(), "{name}: {c}");
        for f in figures {
            // Every figure's direction comes from its type: no name is guessed.
            assert_eq!(f["direction_source"], "typed", "{name}: {f}");
        }
        common::assert_same_as_itself(&c);
    }
}

/// The walk read `migrations_per_s` as a rate (`per_s`) and could only say "unknown"; the
/// doctor's typed figure says more migrations per second is worse.
#[test]
fn a_doctor_figure_named_per_s_that_is_a_cost_is_judged_a_cost() {
    let dir = tempfile::tempdir().unwrap();
    let a: Value =
        serde_json::from_str(&std::fs::read_to_string(result("doctor-quick.json")).unwrap())
            .unwrap();
    let mut b = a.clone();
    let runs = b["measurements"]["wakeup"].as_array_mut().unwrap();
    let run = runs
        .iter_mut()
        .find(|w| w["migrations_per_s"].is_number())
        .expect("the fixture has an unpinned run with migrations counted");
    run["migrations_per_s"] = serde_json::json!(run["migrations_per_s"].as_f64().unwrap() + 500.0);
    let (pa, pb) = (dir.path().join("a.json"), dir.path().join("b.json"));
    std::fs::write(&pa, a.to_string()).unwrap();
    std::fs::write(&pb, b.to_string()).unwrap();
    let c = json_of(
        &cpulab()
            .arg("compare")
            .arg(&pa)
            .arg(&pb)
            .arg("--json")
            .output()
            .unwrap(),
    );
    let mig: Vec<&Value> = c["figures"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["path"].as_str().unwrap().starts_with("migrations_per_s["))
        .collect();
    assert!(!mig.is_empty(), "{c}");
    for f in mig {
        assert_eq!(f["worse_when"], "higher", "{f}");
        assert_eq!(f["direction_source"], "typed", "{f}");
        // One reading per run: shown, never called better or worse without a noise estimate.
        assert_ne!(f["verdict"], "better", "{f}");
    }
}

/// A doctor result older still, lacking a field the typed result now has, is compared by the
/// walk (old files are read, not refused); a field of the wrong type stays bad input.
#[test]
fn an_older_doctor_result_missing_a_field_is_still_compared() {
    let dir = tempfile::tempdir().unwrap();
    let mut d: Value =
        serde_json::from_str(&std::fs::read_to_string(result("doctor-quick.json")).unwrap())
            .unwrap();
    d["probe"].as_object_mut().unwrap().remove("notable");
    let p = dir.path().join("old.json");
    std::fs::write(&p, d.to_string()).unwrap();
    let c = json_of(
        &cpulab()
            .arg("compare")
            .arg(&p)
            .arg(&p)
            .arg("--json")
            .output()
            .unwrap(),
    );
    let figures = c["figures"].as_array().unwrap();
    assert!(!figures.is_empty());
    assert!(figures.iter().all(|f| f["direction_source"] == "name"));
}

/// Results written before conditions named the git revision (`cpulab_revision`) still read
/// into today's `Conditions`, without one, and writing them again adds none.
#[test]
fn old_conditions_without_a_revision_still_load() {
    for (kind, _) in OLD_KINDS {
        let text = std::fs::read_to_string(result(&format!("{kind}.json"))).unwrap();
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(doc["conditions"].get("cpulab_revision").is_none(), "{kind}");
        let c: cpulab::machine::Conditions =
            serde_json::from_value(doc["conditions"].clone()).unwrap();
        assert_eq!(c.cpulab_revision, None, "{kind}");
        let again = serde_json::to_value(&c).unwrap();
        assert!(again.get("cpulab_revision").is_none(), "{kind}: {again}");
        assert_eq!(again["cpulab_version"], doc["conditions"]["cpulab_version"]);
    }
}

/// A doctor result written before remedies carried their changes as data still reads into
/// today's findings (no changes recorded), and `cpulab remedy` says so instead of guessing a
/// deployable form from the words.
#[test]
fn old_doctor_results_have_no_deployable_form_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let path = result("doctor-quick.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let findings: Vec<cpulab::doctor::findings::Finding> =
        serde_json::from_value(doc["findings"].clone()).unwrap();
    assert!(!findings.is_empty());
    assert!(
        findings
            .iter()
            .flat_map(|f| &f.remedies)
            .all(|r| r.changes.is_none())
    );
    let out = tmp.path().join("out");
    let o = cpulab()
        .arg("remedy")
        .arg(&path)
        .arg("--out")
        .arg(&out)
        .arg("--json")
        .output()
        .unwrap();
    let plan = json_of(&o);
    assert_eq!(plan["deployments"], serde_json::json!([]));
    let undeployable = plan["undeployable"].as_array().unwrap();
    assert!(!undeployable.is_empty());
    for u in undeployable {
        assert!(
            u["reason"]
                .as_str()
                .unwrap()
                .contains("no deployable form recorded"),
            "{u}"
        );
    }
    assert!(!out.exists());
}

/// A watch result written before the per-class `to_idle` count and the `placement` checks
/// existed (a real result, trimmed by hand to one process, one pair and one class each).
const OLD_WATCH: &str = r#"{
  "cpulab_schema": 1, "kind": "watch",
  "conditions": {"allowed_cpus": "0-1", "cpulab_version": "0.1.0", "hostname": "vm",
    "kernel": "6.18.44-fc-v782", "load_before": null, "noisy": false, "notes": [],
    "online_cpus": "0-1", "started_unix_s": 1795824307},
  "target": "command (pid 31705)", "mechanism": "eBPF programs on the raw tracepoints",
  "requested_s": 1.0, "interval_s": 1.001570967, "ended": "window elapsed",
  "events": 4340, "lost_events": 0, "torn_bytes": 0, "estimate": null,
  "processes": [{"name": "sh", "pids": [31705], "threads": 1, "wakeups": 316,
    "wakeups_per_s": 315.5, "runq_wait_s_per_s": 0.309, "on_cpu_s_per_s": 0.086,
    "migrations": 2, "migrations_per_s": 2.0, "cpus_used": "0-1",
    "classes": [{"class": "shared-llc", "wakeups": 160, "share": 0.506,
      "wakeups_per_s": 159.7, "latency": {"samples": 160, "mean_ns": 683362.6,
        "p50_ns": 23551, "p90_ns": 3555327, "p99_ns": 7831551, "max_ns": 8912895,
        "histogram": [{"le_ns": 15999, "count": 3}, {"le_ns": 31999, "count": 111}]}}]}],
  "pairs": [{"waker": "(interrupt)", "waker_pid": 0, "wakee": "sh", "wakee_pid": 31705,
    "wakeups": 315, "wakeups_per_s": 314.5, "waker_cpu": 1,
    "classes": [{"class": "same-cpu", "wakeups": 155, "share": 0.492,
      "wakeups_per_s": 154.8, "latency": null}]}],
  "vm": {"cpus": "0-1", "halts": null, "interrupts": {"RES": 335}, "per_wakeup": {"irq_RES": 1.05},
    "steal_pct": 0.0, "guest_halt_poll_ns": null, "unavailable": []}
}"#;

/// Fields a watch result gained later read as not available, never as counted zeros: the text
/// says the placement checks are not available instead of "0 by the wakeup's migration, 0 on
/// the CPU last run on, ...", and the page shows `-` for the share onto an idle CPU, not 0%.
#[test]
fn an_old_watch_result_shows_what_it_lacks_as_not_available() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("watch.json");
    std::fs::write(&file, OLD_WATCH).unwrap();
    let out = cpulab().arg("report").arg(&file).output().unwrap();
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "placement: not available (the result was written before cpulab recorded it)"
        ),
        "{text}"
    );
    assert!(!text.contains("placement: 0"), "{text}");
    let page = dir.path().join("watch.html");
    let out = cpulab()
        .args(["report", "-q"])
        .arg(&file)
        .arg("--html")
        .arg(&page)
        .output()
        .unwrap();
    assert_success(&out);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("onto idle"), "the column is there");
    assert!(
        html.contains(
            r#"<td title="not available: the result was written before cpulab recorded it">-</td>"#
        ),
        "{html}"
    );
    assert!(!html.contains(">0%<"), "no zero share claimed: {html}");
    // It still compares with itself on its typed figures.
    let c = compared_with_itself(&file);
    assert_eq!(c["result_kind"], "watch", "{c}");
    assert!(!c["figures"].as_array().unwrap().is_empty(), "{c}");
}

/// A `--mechanism bpf-counts` result: pids, threads, on-CPU time, migrations, CPUs used and
/// pairs are not measured by it. They are null in the document, and `-` and one sentence in the
/// text and on the page (compare's typed watch figures never included them; the generic walk
/// is checked in `watch::report`). They once read threads 0, on-CPU 0.000 s/s, migrations 0/s.
#[test]
fn a_counts_only_watch_result_shows_what_it_did_not_measure_as_not_measured() {
    let mut v: Value = serde_json::from_str(OLD_WATCH).unwrap();
    v["mechanism"] = "in-kernel aggregation only".into();
    let p = &mut v["processes"][0];
    for k in [
        "pids",
        "threads",
        "on_cpu_s_per_s",
        "migrations",
        "migrations_per_s",
        "cpus_used",
    ] {
        p[k] = Value::Null;
    }
    v["pairs"] = Value::Null;
    v["placement"] = Value::Null;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("watch.json");
    std::fs::write(&file, v.to_string()).unwrap();
    let out = cpulab().arg("report").arg(&file).output().unwrap();
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("pids -  threads -  ") && text.contains("on-CPU -  migrations -  CPUs -"),
        "{text}"
    );
    assert!(text.contains("not measured by bpf-counts"), "{text}");
    assert!(
        text.contains("placement: not measured by bpf-counts"),
        "{text}"
    );
    assert!(!text.contains("threads 0"), "{text}");
    let page = dir.path().join("watch.html");
    let out = cpulab()
        .args(["report", "-q"])
        .arg(&file)
        .arg("--html")
        .arg(&page)
        .output()
        .unwrap();
    assert_success(&out);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("not measured by bpf-counts"), "{html}");
}

/// A `--mechanism bpf-counts` result from a build that wrote what it did not measure as zeros
/// (threads 0, on-CPU 0, migrations 0, no pids, CPUs or pairs, placement checks of 0) reads back
/// as today's results write it: not measured, never counted zeros.
#[test]
fn an_old_counts_only_watch_result_reads_its_zeros_as_not_measured() {
    let mut v: Value = serde_json::from_str(OLD_WATCH).unwrap();
    v["mechanism"] = "in-kernel aggregation only (the exporter's programs on sched_waking, \
        sched_wakeup, sched_switch: counts and exp2 latency buckets per target and class in \
        per-CPU maps, no per-event record): latency percentiles are bucket upper bounds, run-queue \
        wait is the wakeup-to-run part only"
        .into();
    let p = &mut v["processes"][0];
    p["pids"] = serde_json::json!([]);
    p["threads"] = 0.into();
    p["on_cpu_s_per_s"] = 0.0.into();
    p["migrations"] = 0.into();
    p["migrations_per_s"] = 0.0.into();
    p["cpus_used"] = "".into();
    v["pairs"] = serde_json::json!([]);
    v["placement"] = serde_json::json!({"from_migration": 0, "from_last_cpu": 0,
        "from_switch_in": 0, "already_runnable": 0, "unplaced": 0, "switch_in_agrees": 0,
        "switch_in_differs": 0, "switch_in_missing": 0, "wakeup_agrees": 0, "wakeup_differs": 0});
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("watch.json");
    std::fs::write(&file, v.to_string()).unwrap();
    let out = cpulab().arg("report").arg(&file).output().unwrap();
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("pids -  threads -  ") && text.contains("on-CPU -  migrations -  CPUs -"),
        "{text}"
    );
    assert!(
        text.contains("placement: not measured by bpf-counts"),
        "{text}"
    );
    assert!(!text.contains("threads 0"), "{text}");
    assert!(!text.contains("placement: 0"), "{text}");
    // A result of another mechanism keeps its counted figures.
    std::fs::write(&file, OLD_WATCH).unwrap();
    let out = cpulab().arg("report").arg(&file).output().unwrap();
    assert_success(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("threads 1"));
}
