//! `cpulab report RESULT.json --html FILE`: the page is self-contained and renders its charts
//! in a real browser (headless Chromium; a visible SKIPPED line when it is absent, a failure in CI).
//!
//! The doctor result here is built by hand from the library's types so that every chart kind
//! appears (scaling curves need SMT, presets need PostgreSQL); it is a test input, never shown
//! as a measurement.

#[macro_use]
mod common;

use common::chromium::{chromium, headless};
use common::cpulab;
use cpulab::cpulist::CpuSet;
use cpulab::doctor::DoctorReport;
use cpulab::doctor::battery::Mode;
use cpulab::doctor::measurements::*;
use cpulab::doctor::rules;
use cpulab::machine::Conditions;
use cpulab::report::envelope::{Envelope, Kind};
use cpulab::stats::MeanCi;
use cpulab::topology::PlacementClass::{self, *};
use std::collections::BTreeMap;
use std::path::Path;

fn around(mean: f64, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| mean * (1.0 + 0.02 * ((i % 5) as f64 - 2.0) / 2.0))
        .collect()
}

fn wake(
    method: &str,
    blocking: bool,
    class: PlacementClass,
    cpus: Option<&str>,
    mean: f64,
    halts: f64,
) -> WakeupRun {
    let s = around(mean, 20);
    WakeupRun {
        method: method.into(),
        blocking,
        class,
        cpus: cpus.map(String::from),
        rtt_ns: MeanCi::of(&s).unwrap(),
        p50_ns: mean,
        p99_ns: mean * 1.4,
        batch_means_ns: s,
        per_round_trip: [
            ("idle_entries", halts),
            ("irq_CAL", halts / 2.0),
            ("irq_RES", halts / 2.0),
            ("voluntary_switches", 2.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
        steal_pct: 0.0,
        noisy: false,
        same_cpu_share: None,
        migrations_per_s: None,
        neighbour_load: None,
    }
}

fn mci(mean: f64, n: usize) -> (MeanCi, Vec<f64>) {
    let s = around(mean, n);
    (MeanCi::of(&s).unwrap(), s)
}

pub fn sample_report() -> DoctorReport {
    let cpus = |s: &str| CpuSet::parse_list(s, false).unwrap();
    let mut wakeup = vec![
        wake("pipe", true, SameCpu, Some("0:0"), 5000.0, 0.0),
        wake("pipe", true, SharedLlc, Some("0:1"), 42000.0, 2.0),
        wake("pipe", true, SharedLlc, Some("1:0"), 41000.0, 2.0),
        wake("pipe", true, SameCpu, Some("1:1"), 5100.0, 0.0),
        wake("pipe", true, Unpinned, None, 30000.0, 1.4),
        wake("spin", false, SharedLlc, Some("0:1"), 310.0, 0.0),
    ];
    wakeup[4].same_cpu_share = Some(0.3);
    let throughput = [
        ("packed", "0", 50e3),
        ("spread", "0-1", 90e3),
        ("os", "0-1", 85e3),
    ]
    .into_iter()
    .map(|(p, c, r)| {
        let (m, s) = mci(r, 5);
        ThroughputRun {
            test: "messaging".into(),
            placement: p.into(),
            cpus: cpus(c),
            messages_per_s: m,
            samples_per_s: s,
            per_message: BTreeMap::new(),
        }
    })
    .collect();
    let prim = |n: &str, v: f64| {
        let (m, s) = mci(v, 10);
        PrimitiveCost {
            name: n.into(),
            cost_ns: m,
            samples_ns: s,
            min_ns: None,
        }
    };
    let (cold, cs) = mci(1500.0, 5);
    let (warm, ws) = mci(2800.0, 5);
    let (share, ss) = mci(0.96, 4);
    let mut scaling = Vec::new();
    for (policy, f) in [("compact", 0.6), ("scatter", 0.95)] {
        for t in 1..=4 {
            let (m, s) = mci(if t == 1 { 1.0 } else { t as f64 * f }, 4);
            scaling.push(ScalePoint {
                workload: "fib".into(),
                policy: policy.into(),
                threads: t,
                speedup: m,
                speedup_samples: s,
                contended_groups: Some(if policy == "compact" { t / 2 } else { 0 }),
            });
        }
    }
    let presets = [
        ("same-cpu", SameCpu, 66e3),
        ("shared-llc", SharedLlc, 16.5e3),
        ("unpinned", Unpinned, 16e3),
    ]
    .into_iter()
    .map(|(p, c, v)| {
        let (m, s) = mci(v, 3);
        PresetRun {
            preset: "pgbench".into(),
            workload: "pgbench SELECT 1".into(),
            placement: p.into(),
            class: Some(c),
            per_s: m,
            samples_per_s: s,
            per_transaction: BTreeMap::new(),
        }
    })
    .collect();
    let m = Measurements {
        wakeup,
        throughput,
        oscost: Some(OsCosts {
            primitives: vec![
                prim("syscall_getppid", 150.0),
                prim("context_switch_yield", 2600.0),
                prim("thread_create_join", 21000.0),
            ],
            frequency: Some(FrequencyRamp {
                cold_mhz: cold,
                warm_mhz: warm,
                cold_samples_mhz: cs,
                warm_samples_mhz: ws,
                ramp_up_ms: Some(12.0),
                clock_mhz: true,
                clock: None,
            }),
        }),
        share: Some(ShareCheck {
            workers: 2,
            share,
            share_samples: ss,
            model_share: 1.0,
            other_load_cpus: 0.0,
            steal_pct: 0.3,
        }),
        scaling,
        presets,
        counters: RunCounters {
            interval_s: 40.0,
            steal_samples_pct: vec![0.1, 0.2],
            ..Default::default()
        },
        skipped: vec![Skipped {
            what: "preset http".into(),
            reason: "apache2 <not installed> & nginx too".into(),
        }],
        app_watch: None,
        stage_times: vec![],
    };
    let facts = Facts {
        hypervisor: Some("KVM".into()),
        cpuidle_driver: Some("haltpoll".into()),
        guest_halt_poll_ns: Some(0),
        online_cpus: cpus("0-1"),
        allowed_cpus: cpus("0-1"),
        cpu_model: Some("Test CPU @ 2.80GHz".into()),
        ..Default::default()
    };
    let findings = rules::evaluate(rules::Inputs {
        facts: &facts,
        m: &m,
    });
    DoctorReport {
        conditions: Conditions {
            cpulab_version: "test".into(),
            cpulab_revision: None,
            kernel: "6.1.0-test".into(),
            hostname: "fixture-host".into(),
            started_unix_s: 0,
            online_cpus: cpus("0-1"),
            allowed_cpus: cpus("0-1"),
            load_before: None,
            noisy: false,
            notes: vec!["a hand-built test input".into()],
        },
        mode: Mode::Default,
        duration_s: 41.0,
        probe: cpulab::probe::probe(
            &cpulab::machine::Machine::detect(&common::fixture("kvm-guest")).unwrap(),
        ),
        facts,
        measurements: m,
        findings,
        interrupted: None,
        replayed_from: None,
    }
}

fn write_sample(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("doctor.json");
    let doc = serde_json::to_string_pretty(&Envelope::new(Kind::Doctor, sample_report())).unwrap();
    std::fs::write(&p, doc).unwrap();
    p
}

fn render(dir: &Path) -> String {
    let json = write_sample(dir);
    let html = dir.join("report.html");
    cpulab()
        .arg("report")
        .arg(&json)
        .arg("--html")
        .arg(&html)
        .assert()
        .success();
    std::fs::read_to_string(&html).unwrap()
}

#[test]
fn html_is_self_contained_and_has_every_chart() {
    let dir = tempfile::tempdir().unwrap();
    let page = render(dir.path());
    assert!(page.starts_with("<!doctype html>"));
    for forbidden in ["<script", "http://", "https://", "@import", "url("] {
        // The SVG namespace is an identifier, not a fetch.
        let hits = page.matches(forbidden).count()
            - if forbidden == "http://" {
                page.matches("http://www.w3.org/2000/svg").count()
            } else {
                0
            };
        assert_eq!(hits, 0, "{forbidden} in a self-contained page");
    }
    for chart in [
        "by CPU pair",
        "round trip by placement",
        "Counters per pipe",
        "Messages per second",
        "speedup by thread count",
        "transactions per second",
        "Cost per operation: entering",
        "Share of a CPU",
    ] {
        assert!(page.contains(chart), "missing chart: {chart}");
    }
    assert!(
        page.contains("&lt;not installed&gt; &amp; nginx"),
        "text is escaped"
    );
    assert!(page.contains("class=\"finding high\""));
}

#[test]
fn report_renders_text_and_rejects_broken_files() {
    let dir = tempfile::tempdir().unwrap();
    let json = write_sample(dir.path());
    let out = cpulab()
        .arg("report")
        .arg(&json)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let findings_at = text.find("FINDINGS").unwrap();
    assert!(
        findings_at < text.find("MEASUREMENTS").unwrap(),
        "findings come first"
    );
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"cpulab_schema": 1, "kind": "doctor", "findings": 3}"#,
    )
    .unwrap();
    cpulab().arg("report").arg(&bad).assert().code(2);
    std::fs::write(&bad, r#"{"cpulab_schema": 1, "kind": "doct"#).unwrap();
    cpulab().arg("report").arg(&bad).assert().code(2);
}

/// An output flag naming a file the command reads or the history it records in is refused
/// before anything is written: `report r.json --html r.json` once replaced the result with its
/// page, and `history report --html` naming the history replaced the whole history.
#[test]
fn an_output_over_an_input_or_the_history_is_refused_and_both_are_left_intact() {
    let dir = tempfile::tempdir().unwrap();
    let json = write_sample(dir.path());
    let before = std::fs::read(&json).unwrap();
    let j = json.to_str().unwrap();
    common::bad_input(&["--no-history", "report", j, "--html", j]);
    let h = dir.path().join("h.sqlite");
    let hs = h.to_str().unwrap();
    cpulab()
        .args(["--history", hs, "history", "import", "-q", j])
        .assert()
        .success();
    let history = std::fs::read(&h).unwrap();
    common::bad_input(&["--history", hs, "history", "report", "--html", hs]);
    common::bad_input(&["--history", hs, "report", "@1", "--html", hs]);
    assert_eq!(
        std::fs::read(&json).unwrap(),
        before,
        "the result is intact"
    );
    assert_eq!(std::fs::read(&h).unwrap(), history, "the history is intact");
}

#[test]
fn chromium_renders_the_charts() {
    let Some(bin) = chromium() else {
        common::not_installed(test_name!(), "chromium", "chromium");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    render(dir.path());
    let html = dir.path().join("report.html");
    let out = headless(bin, &html, &["--dump-dom".into()]);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        dom.contains("<svg"),
        "no SVG in the rendered DOM; stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        dom.matches("<svg").count() >= 8,
        "every chart is in the DOM"
    );
    assert!(dom.matches("<rect").count() > 20);
    if let Some(keep) = std::env::var_os("CPULAB_KEEP_HTML") {
        std::fs::copy(&html, keep).unwrap();
    }
    let shot = std::env::var_os("CPULAB_SCREENSHOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| dir.path().join("shot.png"));
    let out = headless(
        bin,
        &html,
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1200,2000".into(),
        ],
    );
    let png = std::fs::read(&shot).unwrap_or_else(|_| {
        panic!(
            "no screenshot; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(png.starts_with(b"\x89PNG"), "a PNG was written");
    assert!(png.len() > 20_000, "the screenshot is not blank");
}

#[test]
fn a_saved_pingpong_result_renders_its_charts() {
    let out = cpulab()
        .args([
            "pingpong",
            "--json",
            "--max-time",
            "0.2",
            "--method",
            "pipe,spin",
        ])
        .output()
        .unwrap();
    let doc = common::json_of(&out);
    assert_eq!(
        doc["cpulab_schema"], 1,
        "pingpong --json carries the envelope"
    );
    assert_eq!(doc["kind"], "pingpong");
    let dir = tempfile::tempdir().unwrap();
    let (json, html) = (dir.path().join("pp.json"), dir.path().join("pp.html"));
    std::fs::write(&json, doc.to_string()).unwrap();
    cpulab()
        .arg("report")
        .arg(&json)
        .arg("--html")
        .arg(&html)
        .assert()
        .success();
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("round trip by placement"),
        "wakeup charts drawn"
    );
    assert!(page.matches("<svg").count() >= 2);
}

/// share, scale and oscost used to fall back to a flat list of figures; each now has its own
/// page with its charts, and its own text.
#[test]
fn every_experiment_renders_its_own_page() {
    let dir = tempfile::tempdir().unwrap();
    for (kind, args, chart) in [
        (
            "share",
            &["--duration", "50ms", "--repeats", "2", "-t", "1", "-b", "1"][..],
            "Worker speed relative to alone",
        ),
        (
            "scale",
            &[
                "--duration",
                "20ms",
                "--repeats",
                "2",
                "--threads",
                "1,2",
                "--max-time",
                "0",
            ][..],
            "speedup by thread count",
        ),
        (
            "oscost",
            &["--quick", "--no-freq", "--batches", "3"][..],
            "Cost per operation",
        ),
    ] {
        let out = cpulab()
            .arg(kind)
            .args(args)
            .args(["--json", "--quiet", "--no-load-check"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{kind}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json = dir.path().join(format!("{kind}.json"));
        let html = dir.path().join(format!("{kind}.html"));
        std::fs::write(&json, &out.stdout).unwrap();
        cpulab()
            .arg("report")
            .arg(&json)
            .arg("--html")
            .arg(&html)
            .assert()
            .success();
        let page = std::fs::read_to_string(&html).unwrap();
        assert!(page.contains(chart), "{kind}: missing chart {chart}");
        assert!(page.contains("<svg"), "{kind}: no chart drawn");
        assert!(page.contains("Conditions"), "{kind}: no conditions");
        let text = cpulab()
            .arg("report")
            .arg(&json)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let text = String::from_utf8(text.stdout).unwrap();
        assert!(
            text.starts_with(&format!("cpulab {kind}:")),
            "{kind}: its own text renderer, not a figure list: {text}"
        );
    }
}

/// An interrupted doctor result says so at the top of its page, and every remedy that must be
/// done elsewhere (the hypervisor host) or by someone in particular says where and by whom.
#[test]
fn html_marks_an_interrupted_run_and_where_each_remedy_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = sample_report();
    r.interrupted = Some(cpulab::doctor::battery::Interruption {
        signal: 2,
        name: "SIGINT".into(),
        during: "preset pgbench (pair)".into(),
    });
    let json = dir.path().join("doctor.json");
    std::fs::write(
        &json,
        serde_json::to_string(&Envelope::new(Kind::Doctor, &r)).unwrap(),
    )
    .unwrap();
    let html = dir.path().join("report.html");
    cpulab()
        .arg("report")
        .arg(&json)
        .arg("--html")
        .arg(&html)
        .assert()
        .success();
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("Interrupted by SIGINT during preset pgbench (pair)"));
    let host_side = r
        .findings
        .iter()
        .flat_map(|f| &f.remedies)
        .filter(|x| x.site == cpulab::doctor::findings::Site::Host)
        .count();
    assert!(host_side > 0, "the sample has a host-side remedy");
    assert_eq!(
        page.matches("Where: on the hypervisor host").count(),
        host_side
    );
}

/// A probe result is rendered as `cpulab probe` prints it, not as a flat list of figures.
#[test]
fn a_probe_result_renders_with_its_own_renderer() {
    let v = common::run_json::<cpulab::probe::Probe>("probe", &[], 60);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("probe.json");
    std::fs::write(&path, v.to_string()).unwrap();
    let out = cpulab().arg("report").arg(&path).assert().success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(text.starts_with("cpulab probe:"), "{text}");
    let html = dir.path().join("probe.html");
    cpulab()
        .arg("report")
        .arg(&path)
        .arg("--html")
        .arg(&html)
        .assert()
        .success();
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("Machine fingerprint") && page.contains("<pre>"));
}
