//! `cpulab pair` end to end: the real binary against real PostgreSQL, Apache, nginx and the
//! built-in HTTP pair, briefly (one second per run, one run per placement through a hidden flag).
//! Assertions are on structure and physics, never on how fast anything is; and on what is left
//! behind after every way a run can end: success, a failing server or client, Ctrl-C, SIGTERM
//! and SIGKILL. Presets whose programs are missing are skipped with the reason printed.

use assert_cmd::Command;
use cpulab::pair::{Preset, preset_available};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The machine has two vCPUs: servers and clients of parallel tests would only slow each other
/// into timeouts. Tests that run a pair take this lock.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn cpulab() -> Command {
    Command::cargo_bin("cpulab").unwrap()
}

const BRIEF: &[&str] = &[
    "pair",
    "--duration",
    "1",
    "--repeat",
    "1",
    "--allow-few-repeats",
    "--no-load-check",
    "--quiet",
    "--json",
];

fn skip(preset: Preset) -> bool {
    match preset_available(preset) {
        Ok(()) => false,
        Err(why) => {
            eprintln!("skipped: {why}");
            true
        }
    }
}

fn have(program: &str) -> bool {
    let found = cpulab::pair::presets::find_program(program).is_some();
    if !found {
        eprintln!("skipped: `{program}` is not installed");
    }
    found
}

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
    for p in placements {
        let m = &p["metric"];
        assert!(f(&m["ci95_low"]) <= f(&m["mean"]) && f(&m["mean"]) <= f(&m["ci95_high"]));
        assert!(f(&m["mean"]) > 0.0, "throughput is positive");
        assert!(
            f(&p["ratio_to_best"]) >= 1.0 - 1e-9,
            "nothing beats the best"
        );
        for (k, v) in p["per_transaction"].as_object().unwrap() {
            assert!(f(v) >= 0.0, "{k} per transaction is not negative");
        }
        let runs = p["runs"].as_array().unwrap();
        assert!(!runs.is_empty(), "raw runs are kept");
        for run in runs {
            assert!(f(&run["value"]) > 0.0);
            assert!(run["transactions"].as_u64().unwrap() > 0);
            assert!(f(&run["client_elapsed_s"]) > 0.0);
            let sys = &run["system"];
            assert!(f(&sys["interval_s"]) > 0.0);
            for shares in sys["cpu_time"].as_object().unwrap().values() {
                for k in ["user_pct", "system_pct", "steal_pct", "idle_pct"] {
                    let v = f(&shares[k]);
                    assert!((0.0..=100.0 + 1e-9).contains(&v), "{k} = {v}");
                }
            }
            for side in ["server", "client"] {
                let c = &run[side];
                if c.is_null() {
                    continue;
                }
                assert!(f(&c["user_s"]) >= 0.0 && f(&c["system_s"]) >= 0.0);
                assert!(c["voluntary_switches"].as_u64().is_some());
                if let Some(perf) = c["perf"].as_object() {
                    assert!(perf["context_switches"].as_u64().is_some());
                    assert!(f(&perf["task_clock_s"]) >= 0.0);
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
    if skip(Preset::Pgbench) {
        return;
    }
    let _g = serial();
    // --perf: exact counts of the backend, which ends with the client.
    let r = run_json(&["--preset", "pgbench", "--workload", "select1", "--perf"]);
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
    }
    assert!(run["transactions_reported"].as_bool().unwrap());
}

#[test]
fn pgbench_readonly_loads_and_runs() {
    if skip(Preset::Pgbench) {
        return;
    }
    let _g = serial();
    let r = run_json(&[
        "--preset",
        "pgbench",
        "--workload",
        "readonly",
        "--scale",
        "1",
        "--pairs",
        "0:0",
    ]);
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
    if !(have("apache2") && have("ab")) {
        return;
    }
    let _g = serial();
    let r = run_json(&[
        "--preset",
        "http",
        "--http-server",
        "apache",
        "--http-client",
        "ab",
    ]);
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
    if !(have("nginx") && have("wrk")) {
        return;
    }
    let _g = serial();
    let r = run_json(&[
        "--preset",
        "http",
        "--http-server",
        "nginx",
        "--http-client",
        "wrk",
        "--pairs",
        "0:0,any:any",
    ]);
    check_report(&r);
    assert_eq!(r["experiment"]["metric_parser"], "wrk");
}

#[test]
fn http_builtin_server_and_client_need_nothing_installed() {
    let _g = serial();
    let r = run_json(&[
        "--preset",
        "http",
        "--http-server",
        "builtin",
        "--http-client",
        "builtin",
        "--pairs",
        "0:0,any:any",
    ]);
    check_report(&r);
    let run = &r["placements"][0]["runs"][0];
    assert_eq!(
        run["server"]["threads"], 1,
        "the built-in server is one thread"
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
        "0:0,any:any",
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

// ---- nothing left behind ----

/// Temporary directories of the cpulab run with this pid.
fn dirs_of(pid: u32) -> Vec<PathBuf> {
    let prefix = format!("cpulab-pair.{pid}.");
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

/// Processes started by the cpulab run with this pid: their command line or working directory
/// names its temporary directory (PostgreSQL backends rename themselves but keep the cwd).
fn procs_of(pid: u32) -> Vec<String> {
    let needle = format!("cpulab-pair.{pid}.");
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{p}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        let cwd = std::fs::read_link(format!("/proc/{p}/cwd"))
            .map(|c| c.display().to_string())
            .unwrap_or_default();
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        let zombie = stat
            .rsplit(')')
            .next()
            .is_some_and(|s| s.trim_start().starts_with('Z'));
        if !zombie && (cmd.contains(&needle) || cwd.contains(&needle)) {
            found.push(format!("{p}: {cmd} (cwd {cwd})"));
        }
    }
    found
}

/// Waits until nothing of the run is left, at most `secs`; returns what remains.
fn leftovers_after(pid: u32, secs: u64) -> (Vec<PathBuf>, Vec<String>) {
    let until = Instant::now() + Duration::from_secs(secs);
    loop {
        let (d, p) = (dirs_of(pid), procs_of(pid));
        if (d.is_empty() && p.is_empty()) || Instant::now() > until {
            return (d, p);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

struct Running {
    child: std::process::Child,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
}

/// Starts cpulab in the background and waits until `marker` appears on its stderr.
fn start_until(args: &[&str], marker: &str) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let stderr = dir.path().join("stderr");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_cpulab"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let mut r = Running {
        child,
        stderr,
        _dir: dir,
    };
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let text = std::fs::read_to_string(&r.stderr).unwrap_or_default();
        if text.contains(marker) {
            return r;
        }
        if let Ok(Some(s)) = r.child.try_wait() {
            panic!("cpulab ended ({s}) before `{marker}`: {text}");
        }
        assert!(Instant::now() < until, "no `{marker}` within 120 s: {text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn kill(pid: u32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid as i32, sig) };
}

fn interrupt_mid_run(preset: &[&str], sig: i32, expect_code: Option<i32>) {
    let _g = serial();
    let mut args = vec!["pair", "--duration", "30", "--no-load-check"];
    args.extend_from_slice(preset);
    // The server is up and the first measured client is running.
    let mut r = start_until(&args, "starting the server");
    std::thread::sleep(Duration::from_millis(2500));
    let pid = r.child.id();
    assert!(
        !dirs_of(pid).is_empty(),
        "the run has its temporary directory"
    );
    assert!(!procs_of(pid).is_empty(), "the run has started its server");
    kill(pid, sig);
    let status = r.child.wait().unwrap();
    let stderr = std::fs::read_to_string(&r.stderr).unwrap_or_default();
    if let Some(code) = expect_code {
        assert_eq!(
            status.code(),
            Some(code),
            "exit status after signal {sig}: {stderr}"
        );
        assert!(stderr.contains("interrupted"), "{stderr}");
        // An orderly teardown finishes before cpulab exits.
        assert_eq!(
            (dirs_of(pid), procs_of(pid)),
            (vec![], vec![]),
            "left behind at exit"
        );
    }
    let (d, p) = leftovers_after(pid, 20);
    assert!(
        d.is_empty() && p.is_empty(),
        "left behind after signal {sig}: {d:?} {p:?}"
    );
}

#[test]
fn ctrl_c_mid_run_stops_postgres_and_removes_everything() {
    if skip(Preset::Pgbench) {
        return;
    }
    interrupt_mid_run(&["--preset", "pgbench"], libc::SIGINT, Some(130));
}

#[test]
fn sigterm_mid_run_stops_apache_and_removes_everything() {
    if !(have("apache2") && have("ab")) {
        return;
    }
    interrupt_mid_run(
        &["--preset", "http", "--http-server", "apache"],
        libc::SIGTERM,
        Some(143),
    );
}

#[test]
fn sigkill_mid_run_leaves_no_postgres_and_no_directory() {
    if skip(Preset::Pgbench) {
        return;
    }
    interrupt_mid_run(&["--preset", "pgbench"], libc::SIGKILL, None);
}

#[test]
fn sigkill_mid_run_leaves_no_apache() {
    if !(have("apache2") && have("ab")) {
        return;
    }
    interrupt_mid_run(
        &["--preset", "http", "--http-server", "apache"],
        libc::SIGKILL,
        None,
    );
}

// ---- failures ----

fn failing(args: &[&str]) -> (i32, String, u32) {
    let _g = serial();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_cpulab"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    let code = child.wait().unwrap().code().unwrap_or(-1);
    (code, err, pid)
}

#[test]
fn server_that_never_becomes_ready_fails_with_its_stderr() {
    let (code, err, pid) = failing(&[
        "pair",
        "--shell",
        "--server",
        "echo 'still starting, please wait' >&2; exec sleep 600",
        "--ready-port",
        "1",
        "--ready-timeout",
        "1",
        "--client",
        "true",
        "--metric",
        "ab",
        "--no-load-check",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("did not become ready"), "{err}");
    assert!(
        err.contains("still starting, please wait"),
        "stderr tail shown: {err}"
    );
    assert_eq!((dirs_of(pid), procs_of(pid)), (vec![], vec![]));
}

#[test]
fn server_that_exits_at_start_fails_with_its_stderr() {
    let (code, err, _) = failing(&[
        "pair",
        "--shell",
        "--server",
        "echo 'bad config line 3' >&2; exit 1",
        "--ready-port",
        "1",
        "--client",
        "true",
        "--metric",
        "ab",
        "--no-load-check",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("bad config line 3") && err.contains("status 1"),
        "{err}"
    );
}

#[test]
fn failing_client_fails_with_its_stderr_and_stops_the_server() {
    let (code, err, pid) = failing(&[
        "pair",
        "--server",
        "sleep 600",
        "--ready-cmd",
        "true",
        "--shell",
        "--client",
        "echo 'connection refused' >&2; exit 3",
        "--metric",
        "pgbench",
        "--no-load-check",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("connection refused") && err.contains("status 3"),
        "{err}"
    );
    assert_eq!((dirs_of(pid), procs_of(pid)), (vec![], vec![]));
}

#[test]
fn client_without_metric_fails_with_its_output() {
    let (code, err, _) = failing(&[
        "pair",
        "--server",
        "sleep 600",
        "--ready-cmd",
        "true",
        "--client",
        "echo hello",
        "--metric",
        "wrk",
        "--no-load-check",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("printed no figure") && err.contains("hello"),
        "{err}"
    );
}

#[test]
fn missing_programs_are_bad_input_naming_the_package() {
    let out = cpulab()
        .args(["pair", "--preset", "pgbench", "--no-load-check"])
        .env("CPULAB_PATH", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("postgresql") && err.lines().count() == 1,
        "{err}"
    );

    let out = cpulab()
        .args([
            "pair",
            "--preset",
            "http",
            "--http-client",
            "ab",
            "--no-load-check",
        ])
        .env("CPULAB_PATH", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("apache2-utils"));

    let out = cpulab()
        .args([
            "pair",
            "--server",
            "no-such-server-xyz",
            "--ready-port",
            "1",
            "--client",
            "ab",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-server-xyz"));
}

#[test]
fn bad_usage_is_exit_2() {
    for args in [
        vec!["pair", "--preset", "pgbench", "--repeat", "2"],
        vec!["pair", "--preset", "pgbench", "--pairs", "0:99"],
        vec!["pair", "--preset", "pgbench", "--pairs", "0"],
        vec!["pair", "--preset", "http", "--workload", "select1"],
        vec!["pair", "--server", "x", "--client", "ab"],
        vec![
            "pair",
            "--server",
            "x",
            "--client",
            "ab",
            "--ready-port",
            "1",
            "--metric",
            "no group",
        ],
        vec![
            "pair",
            "--server",
            "'unbalanced",
            "--client",
            "ab",
            "--ready-port",
            "1",
        ],
        vec!["pair"],
    ] {
        let out = cpulab().args(&args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    }
}
