//! `cpulab pair` leaves nothing behind, whatever ends it: a server that never becomes ready or
//! dies at start, a failing client, Ctrl-C, SIGTERM, SIGKILL. A run's leftovers are found by its
//! pid: its temporary directory is `$TMPDIR/cpulab-pair.<pid>.*`, and every process it started
//! names that directory in its command line or has it as working directory (PostgreSQL backends
//! rename themselves but keep the data directory as cwd).

#[macro_use]
mod common;

use common::{installed, postgres_installed};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

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
    let child = common::cpulab_process()
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
    let pid = r.child.id();
    // Wait (bounded) for the condition itself: the run's temporary directory exists and the
    // server it started is running.
    let until = Instant::now() + Duration::from_secs(60);
    while dirs_of(pid).is_empty() || procs_of(pid).is_empty() {
        if let Ok(Some(s)) = r.child.try_wait() {
            panic!("cpulab ended ({s}) before its server was up");
        }
        assert!(
            Instant::now() < until,
            "no temporary directory and server within 60 s: {:?} {:?}",
            dirs_of(pid),
            procs_of(pid)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
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
    if !postgres_installed(test_name!()) {
        return;
    }
    interrupt_mid_run(&w("--preset pgbench"), libc::SIGINT, Some(130));
}

#[test]
fn sigterm_mid_run_stops_apache_and_removes_everything() {
    if !installed(
        test_name!(),
        &[("apache2", "apache2"), ("ab", "apache2-utils")],
    ) {
        return;
    }
    interrupt_mid_run(
        &w("--preset http --http-server apache"),
        libc::SIGTERM,
        Some(143),
    );
}

#[test]
fn sigkill_mid_run_leaves_no_postgres_and_no_directory() {
    if !postgres_installed(test_name!()) {
        return;
    }
    interrupt_mid_run(&w("--preset pgbench"), libc::SIGKILL, None);
}

#[test]
fn sigkill_mid_run_leaves_no_apache() {
    if !installed(
        test_name!(),
        &[("apache2", "apache2"), ("ab", "apache2-utils")],
    ) {
        return;
    }
    interrupt_mid_run(
        &w("--preset http --http-server apache"),
        libc::SIGKILL,
        None,
    );
}

// ---- failures ----

/// Runs `cpulab pair` with a server and a client command and more flags; returns exit code,
/// stderr and cpulab's pid.
fn failing(server: &str, client: &str, flags: &str) -> (i32, String, u32) {
    let _g = serial();
    let mut child = common::cpulab_process()
        .args([
            "pair",
            "--server",
            server,
            "--client",
            client,
            "--no-load-check",
        ])
        .args(w(flags))
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
    let server = "echo 'still starting, please wait' >&2; exec sleep 600";
    let flags = "--shell --ready-port 1 --ready-timeout 1 --metric ab";
    let (code, err, pid) = failing(server, "true", flags);
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
    let server = "echo 'bad config line 3' >&2; exit 1";
    let (code, err, _) = failing(server, "true", "--shell --ready-port 1 --metric ab");
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("bad config line 3") && err.contains("status 1"),
        "{err}"
    );
}

#[test]
fn failing_client_fails_with_its_stderr_and_stops_the_server() {
    let client = "echo 'connection refused' >&2; exit 3";
    let flags = "--shell --ready-cmd true --metric pgbench";
    let (code, err, pid) = failing("sleep 600", client, flags);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("connection refused") && err.contains("status 3"),
        "{err}"
    );
    assert_eq!((dirs_of(pid), procs_of(pid)), (vec![], vec![]));
}

#[test]
fn client_without_metric_fails_with_its_output() {
    let flags = "--ready-cmd true --metric wrk";
    let (code, err, _) = failing("sleep 600", "echo hello", flags);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("printed no figure") && err.contains("hello"),
        "{err}"
    );
}
