//! `cpulab pair` end to end: the real binary against real PostgreSQL, Apache, nginx and the
//! built-in HTTP pair, briefly (one second per run, one run per placement through a hidden flag).
//! Assertions are on structure and physics, never on how fast anything is. Presets whose programs
//! are missing print a SKIPPED line (a failure under CI). What is left behind when a run
//! fails or is interrupted is tested in `pair_cleanup.rs`.

#[macro_use]
mod common;

use common::{cpulab, installed, postgres_installed};
use serde_json::Value;
use std::sync::Mutex;
use std::time::Duration;

/// The machine has two vCPUs: servers and clients of parallel tests would only slow each other
/// into timeouts. Tests that run a pair take this lock.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Command-line words from one string (for arguments without spaces).
fn w(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

const BRIEF: &[&str] = &[
    "pair",
    "--duration",
    "1",
    "--repeats",
    "1",
    "--allow-few-repeats",
    "--no-load-check",
    "--quiet",
    "--json",
];

fn run_json(extra: &[&str]) -> Value {
    let out = cpulab()
        .args(BRIEF)
        .args(extra)
        .timeout(Duration::from_secs(180))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "cpulab pair {extra:?} failed: {stderr}"
    );
    serde_json::from_slice(&out.stdout).expect("one JSON document on stdout")
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Structure and physics every report must satisfy.
fn check_report(r: &Value) {
    assert!(r["conditions"]["kernel"].is_string());
    let placements = r["placements"].as_array().unwrap();
    assert!(!placements.is_empty());
    let labels: Vec<&str> = placements
        .iter()
        .map(|p| p["placement"]["label"].as_str().unwrap())
        .collect();
    assert!(
        labels.contains(&r["best"].as_str().unwrap()),
        "best is one of the placements"
    );
    // Which way is better follows from the unit: a rate is better higher, a time lower. The
    // placement called best has the best mean, and each ratio is measured against it.
    let unit = r["experiment"]["metric_unit"].as_str().unwrap();
    let higher_better = unit == "tps" || unit.ends_with("/s");
    let means: Vec<f64> = placements.iter().map(|p| f(&p["metric"]["mean"])).collect();
    let best = placements
        .iter()
        .find(|p| p["placement"]["label"] == r["best"])
        .unwrap();
    let best_mean = f(&best["metric"]["mean"]);
    for m in &means {
        assert!(
            if higher_better {
                *m <= best_mean
            } else {
                *m >= best_mean
            },
            "{unit}: best {best_mean}, another placement {m}"
        );
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    for p in placements {
        let m = &p["metric"];
        // The figure is the mean of the raw runs it keeps, with their interval.
        let values: Vec<f64> = p["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| f(&r["value"]))
            .collect();
        common::assert_mean_ci_of("metric", m, &values);
        let want = if higher_better {
            best_mean / f(&m["mean"])
        } else {
            f(&m["mean"]) / best_mean
        };
        assert!(
            (f(&p["ratio_to_best"]) - want).abs() <= 1e-9 * want,
            "ratio to best: {p}"
        );
        let runs = p["runs"].as_array().unwrap();
        assert!(!runs.is_empty(), "raw runs are kept");
        // Each per-transaction cost is the mean over the runs of the run's own (a run without
        // the counter counts none), and a run's is its tree's count over its transactions.
        for (k, v) in p["per_transaction"].as_object().unwrap() {
            let want = runs
                .iter()
                .map(|r| r["per_transaction"][k].as_f64().unwrap_or(0.0))
                .sum::<f64>()
                / runs.len() as f64;
            assert!(
                (f(v) - want).abs() <= 1e-9 * want.abs().max(1e-12),
                "{k} per transaction {v}, the runs give {want}"
            );
        }
        for run in runs {
            let elapsed = f(&run["client_elapsed_s"]);
            assert!(elapsed > 0.0);
            let transactions = run["transactions"].as_u64().unwrap();
            assert!(transactions > 0);
            // A client measures its rate over part of the time it ran (after connecting), so
            // its rate is at least its transactions over its whole run.
            if higher_better {
                // A custom metric may be printed as a whole number (`\d+`), so allow the
                // truncation of one unit beside the 1%.
                assert!(
                    f(&run["value"]) + 1.0 >= 0.99 * transactions as f64 / elapsed,
                    "{unit} {} below {transactions} in {elapsed} s",
                    run["value"]
                );
            }
            let sys = &run["system"];
            let interval = f(&sys["interval_s"]);
            assert!(interval > 0.0);
            for (cpu, shares) in sys["cpu_time"].as_object().unwrap() {
                common::assert_cpu_time_shares(&format!("cpu{cpu}"), shares, Some(interval));
            }
            for side in ["server", "client"] {
                let c = &run[side];
                // Every server these tests start is a process or the built-in server's
                // thread, so there is always a tree to observe.
                assert!(c.is_object(), "{side}: no counters: {run}");
                let per = &run["per_transaction"];
                let tx = transactions as f64;
                let (switches, cpu) = match c["perf"].as_object() {
                    Some(perf) => (
                        perf["context_switches"].as_u64().unwrap() as f64,
                        f(&perf["task_clock_s"]),
                    ),
                    None => (
                        (c["voluntary_switches"].as_u64().unwrap()
                            + c["involuntary_switches"].as_u64().unwrap())
                            as f64,
                        f(&c["user_s"]) + f(&c["system_s"]),
                    ),
                };
                for (k, want) in [
                    (format!("{side}_context_switches"), switches / tx),
                    (format!("{side}_cpu_us"), cpu * 1e6 / tx),
                ] {
                    let got = per[&k]
                        .as_f64()
                        .unwrap_or_else(|| panic!("{k} missing: {per}"));
                    assert!(
                        (got - want).abs() <= 1e-9 * want.abs().max(1e-12),
                        "{k}: {got}, the counters give {want}"
                    );
                }
                // No tree of processes gets more CPU time than its run time on every CPU
                // (seconds, not ticks or microseconds; a tick of slack per CPU).
                let cpu_s = f(&c["user_s"]) + f(&c["system_s"]);
                assert!(
                    cpu_s <= cpus * (elapsed.max(interval) + 0.02),
                    "{side}: {cpu_s} CPU s in {elapsed} s on {cpus} CPUs"
                );
                assert!(c["voluntary_switches"].as_u64().is_some());
                if let Some(perf) = c["perf"].as_object() {
                    assert!(perf["context_switches"].as_u64().is_some());
                    let task = f(&perf["task_clock_s"]);
                    assert!(
                        task <= cpus * (elapsed.max(interval) + 0.02),
                        "{side}: task clock {task} s in {elapsed} s"
                    );
                }
            }
        }
        // A server pinned to one CPU ran there and nowhere else, with every process it forked.
        let pinned = p["placement"]["server_cpus"].as_str();
        if let Some(cpu) = pinned.filter(|c| c.parse::<u32>().is_ok()) {
            assert_eq!(
                p["server_cpus_seen"].as_str(),
                Some(cpu),
                "{}",
                p["placement"]["label"]
            );
        }
    }
}

fn placement<'a>(r: &'a Value, class: &str) -> Option<&'a Value> {
    r["placements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["placement"]["class"] == class)
}

#[test]
fn pgbench_select1_under_every_placement() {
    if !postgres_installed(test_name!()) {
        return;
    }
    let _g = serial();
    // --perf: exact counts of the backend, which ends with the client.
    let r = run_json(&w("--preset pgbench --workload select1 --perf"));
    check_report(&r);
    assert_eq!(r["experiment"]["metric_unit"], "tps");
    let n = r["placements"].as_array().unwrap().len();
    assert!(n >= 2, "same CPU and unpinned at least");
    // On one CPU a blocking round trip switches out each end at least once per transaction.
    let same = placement(&r, "same-cpu").expect("a same-cpu placement");
    let t = &same["per_transaction"];
    assert!(f(&t["client_context_switches"]) >= 0.9, "{t}");
    let run = &same["runs"][0];
    assert!(
        run["server"]["processes"].as_u64().unwrap() >= 2,
        "postmaster and its backend"
    );
    if run["server"]["perf"].is_object() {
        assert!(f(&t["server_context_switches"]) >= 0.9, "{t}");
    } else {
        common::skipped(
            test_name!(),
            &format!(
                "perf counters unavailable, the server's switches per transaction are not checked: {}",
                run["server"]["perf_unavailable"]
            ),
        );
    }
    assert!(run["transactions_reported"].as_bool().unwrap());
}

#[test]
fn pgbench_readonly_loads_and_runs() {
    if !postgres_installed(test_name!()) {
        return;
    }
    let _g = serial();
    let r = run_json(&w(
        "--preset pgbench --workload readonly --scale 1 --pairs 0:0",
    ));
    check_report(&r);
    let workload = r["experiment"]["workload"].as_str().unwrap();
    assert!(workload.contains("readonly"));
    // Without perf the backend is found by sampling /proc.
    let run = &r["placements"][0]["runs"][0];
    assert!(run["server"]["perf"].is_null());
    assert!(
        run["server"]["processes"].as_u64().unwrap() >= 2,
        "postmaster and its backend"
    );
    assert!(run["server"]["voluntary_switches"].as_u64().unwrap() > 0);
}

#[test]
fn http_apache_with_ab() {
    if !installed(
        test_name!(),
        &[("apache2", "apache2"), ("ab", "apache2-utils")],
    ) {
        return;
    }
    let _g = serial();
    let r = run_json(&w("--preset http --http-server apache --http-client ab"));
    check_report(&r);
    assert!(
        r["experiment"]["server"]
            .as_str()
            .unwrap()
            .contains("Apache")
    );
    assert_eq!(r["experiment"]["metric_unit"], "requests/s");
}

#[test]
fn http_nginx_with_wrk() {
    if !installed(test_name!(), &[("nginx", "nginx"), ("wrk", "wrk")]) {
        return;
    }
    let _g = serial();
    let r = run_json(&w(
        "--preset http --http-server nginx --http-client wrk --pairs 0:0,unpinned:unpinned",
    ));
    check_report(&r);
    assert_eq!(r["experiment"]["metric_parser"], "wrk");
}

#[test]
fn http_builtin_server_and_client_need_nothing_installed() {
    let _g = serial();
    let r = run_json(&w(
        "--preset http --http-server builtin --http-client builtin --pairs 0:0,unpinned:unpinned",
    ));
    check_report(&r);
    let run = &r["placements"][0]["runs"][0];
    assert_eq!(
        run["server"]["threads"], 1,
        "the built-in server is one thread"
    );
}

#[test]
fn neighbour_load_runs_beside_every_placement_and_is_recorded() {
    let _g = serial();
    let r = run_json(&w(
        "--preset http --http-server builtin --http-client builtin --pairs 0:0 --neighbour-load 1",
    ));
    check_report(&r);
    assert_eq!(r["experiment"]["neighbour_load"], 1);
    assert!(
        r["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("busy neighbour")),
        "{}",
        r["notes"]
    );
    // Without the flag the field is absent: the figures are for an otherwise idle machine.
    let plain = run_json(&w(
        "--preset http --http-server builtin --http-client builtin --pairs 0:0",
    ));
    assert!(plain["experiment"]["neighbour_load"].is_null());
}

#[test]
fn redis_preset() {
    if !installed(
        test_name!(),
        &[
            ("redis-server", "redis-server"),
            ("redis-benchmark", "redis-tools"),
        ],
    ) {
        return;
    }
    let _g = serial();
    let r = run_json(&w("--preset redis --pairs 0:0,unpinned:unpinned"));
    check_report(&r);
    assert_eq!(r["experiment"]["metric_parser"], "redis-benchmark");
    assert!(
        r["placements"][0]["runs"][0]["transactions_reported"]
            .as_bool()
            .unwrap()
    );
}

#[test]
fn generic_pair_with_custom_metric() {
    let _g = serial();
    let r = run_json(&[
        "--server",
        "sleep 600",
        "--ready-cmd",
        "true",
        "--client",
        "sleep 0.3; echo 'rate: 42 ops'",
        "--shell",
        "--metric",
        r"rate: (?P<value>[0-9]+)",
        "--metric-unit",
        "ops/s",
        "--pairs",
        "0:0,unpinned:unpinned",
        "--no-warmup",
    ]);
    check_report(&r);
    assert_eq!(f(&r["placements"][0]["metric"]["mean"]), 42.0);
    assert_eq!(r["experiment"]["metric_unit"], "ops/s");
    assert!(
        r["experiment"]["duration_s"].is_null(),
        "a generic client times itself"
    );
}

/// A server and a client that print on stdout leave cpulab's stdout one document: their output
/// goes to log files, the client's read for its figure, and a client whose output has no
/// figure shows it on stderr (so it is kept, not dropped) with nothing on stdout.
#[test]
fn a_pairs_own_output_stays_off_stdout() {
    let _g = serial();
    let pair = |client: &str| {
        cpulab()
            .args(BRIEF)
            .args([
                "--server",
                "echo pair-server-marker; echo pair-server-err-marker >&2; exec sleep 600",
                "--ready-cmd",
                "true",
                "--client",
                client,
                "--shell",
                "--metric",
                r"rate: (?P<value>[0-9]+)",
                "--pairs",
                "0:0",
                "--no-warmup",
            ])
            .timeout(Duration::from_secs(180))
            .output()
            .unwrap()
    };
    let out = pair("echo pair-client-marker; echo 'rate: 42 ops'; echo pair-client-err-marker >&2");
    let r = common::json_of(&out);
    assert_eq!(r["kind"], "pair");
    assert_eq!(f(&r["placements"][0]["metric"]["mean"]), 42.0);
    let out = pair("echo pair-client-marker; echo pair-client-err-marker >&2");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(out.stdout.is_empty(), "stdout {:?}", out.stdout);
    assert!(err.contains("pair-client-marker"), "{err}");
}

fn exit_2(args: &[&str], env_path: Option<&str>) -> String {
    let mut cmd = cpulab();
    cmd.args(args);
    if let Some(p) = env_path {
        cmd.env("CPULAB_PATH", p);
    }
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn missing_programs_are_bad_input_naming_the_package() {
    let err = exit_2(
        &w("pair --preset pgbench --no-load-check"),
        Some("/nonexistent"),
    );
    assert!(
        err.contains("postgresql") && err.lines().count() == 1,
        "{err}"
    );
    let err = exit_2(
        &w("pair --preset http --http-client ab"),
        Some("/nonexistent"),
    );
    assert!(err.contains("apache2-utils"), "{err}");
    let err = exit_2(
        &w("pair --server no-such-server-xyz --ready-port 1 --client ab"),
        None,
    );
    assert!(err.contains("no-such-server-xyz"), "{err}");
}

#[test]
fn bad_usage_is_exit_2() {
    for args in [
        "pair --preset pgbench --repeat 2",
        "pair --preset pgbench --pairs 0:99",
        "pair --preset pgbench --pairs 0",
        "pair --preset http --workload select1",
        "pair --server x --client ab",
        "pair --server 'unbalanced --client ab --ready-port 1",
        "pair",
        // Once accepted: runs of every placement were allocated up front, and the allocation
        // aborted the process after the server was prepared.
        "pair --server true --client true --ready-port 1 --metric pgbench --repeats 99999999999",
    ] {
        exit_2(&w(args), None);
    }
    exit_2(
        &w("pair --server x --client ab --ready-port 1 --metric nogroup"),
        None,
    );
    // Once accepted: the report showed the figure with no unit.
    let err = exit_2(
        &[
            &w("pair --server true --client true --ready-port 1 --metric pgbench")[..],
            &["--metric-unit", ""],
        ]
        .concat(),
        None,
    );
    assert!(err.contains("--metric-unit is empty"), "{err}");
    // Once started the server and waited out --ready-timeout (exit 1).
    let err = exit_2(
        &w("pair --server true --client true --ready-port 0 --metric pgbench --ready-timeout 5s"),
        None,
    );
    assert!(err.contains("--ready-port 0"), "{err}");
}

/// `--ready-socket` naming a directory, or a path in a directory that does not exist, never
/// accepts a connection: once, the server was started and the run waited out --ready-timeout
/// (exit 1). Now it is one line and exit 2 before anything starts: the server, which would
/// leave a marker file as its first act, never ran.
#[test]
fn a_ready_socket_that_can_never_appear_is_refused_before_the_server_starts() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().to_str().unwrap().to_string();
    let marker = t.path().join("server-started");
    let server = format!("touch {}; sleep 600", marker.display());
    let missing = format!("{dir}/missing/server.sock");
    for (socket, says) in [
        (dir.as_str(), "is a directory"),
        (missing.as_str(), "is not an existing directory"),
    ] {
        let args = [
            "pair",
            "--shell",
            "--server",
            &server,
            "--client",
            "echo 1",
            "--metric",
            r"(?P<value>\d+)",
            "--ready-socket",
            socket,
            "--ready-timeout",
            "5s",
            "--no-load-check",
        ];
        let err = exit_2(&args, None);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(
            err.contains(says) && err.contains("--ready-socket"),
            "{err}"
        );
        assert!(!marker.exists(), "the server was started for {socket}");
    }
}
