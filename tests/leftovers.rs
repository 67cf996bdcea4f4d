//! cpulab leaves nothing behind, for the commands that start processes beyond those with a
//! file of their own (`pair_cleanup.rs`, `doctor_interrupt.rs`, `try_live.rs`): a signal in the
//! middle of a run, and afterwards no process the run started (found by a tag in the
//! environment every descendant inherits, so a re-parented grandchild is found too) and nothing
//! in its private `$TMPDIR`. A user's command that forks (`sh -c 'sleep & ...'`) is the case
//! the parent-death signal alone does not cover: the fork's child is not cpulab's.

#[macro_use]
mod common;

use common::can_trace;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Two vCPUs: runs that start processes take turns.
static SERIAL: Mutex<()> = Mutex::new(());

/// Live (not zombie) processes carrying `CPULAB_TEST_TAG=tag`, with their command names.
fn tagged(tag: &str) -> Vec<(i32, String)> {
    let want = format!("CPULAB_TEST_TAG={tag}");
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = stat
            .rsplit(')')
            .next()
            .is_some_and(|s| s.trim_start().starts_with('Z'));
        if !zombie && env.split(|b| *b == 0).any(|kv| kv == want.as_bytes()) {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            out.push((pid, comm.trim().to_string()));
        }
    }
    out
}

/// How many of `procs` are named `comm`.
fn named(procs: &[(i32, String)], comm: &str) -> usize {
    procs.iter().filter(|(_, c)| c == comm).count()
}

/// Starts `cpulab ARGS` tagged, with a private `$TMPDIR`; once `ready` holds of its tagged
/// processes (at most 120 s) sends `signal`; returns its exit status and stderr after checking
/// that no tagged process remains (at most 20 s) and the `$TMPDIR` is empty.
fn interrupted(
    args: &[&str],
    ready: impl Fn(&[(i32, String)]) -> bool,
    signal: Signal,
) -> (ExitStatus, String) {
    interrupted_with(args, &[], ready, signal)
}

/// [`interrupted`] with `env` set for cpulab.
fn interrupted_with(
    args: &[&str],
    env: &[(&str, &std::path::Path)],
    ready: impl Fn(&[(i32, String)]) -> bool,
    signal: Signal,
) -> (ExitStatus, String) {
    use std::os::unix::fs::PermissionsExt;
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    // A server that runs as its own account (PostgreSQL as `postgres`) reaches its directory
    // in the private $TMPDIR through this one.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let stderr_path = tmp.path().join("stderr");
    let private = tmp.path().join("tmp");
    std::fs::create_dir(&private).unwrap();
    let tag = format!("leftovers-{}-{}", std::process::id(), args.join("_"));
    let mut child = common::cpulab_process()
        .args(args)
        .env("TMPDIR", &private)
        .env("CPULAB_TEST_TAG", &tag)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(120);
    while !ready(&tagged(&tag)) {
        if let Ok(Some(s)) = child.try_wait() {
            let err = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            panic!("cpulab ended ({s}) before the point to interrupt: {err}");
        }
        assert!(
            Instant::now() < until,
            "the run never reached the point to interrupt: {:?}",
            tagged(&tag)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    kill(Pid::from_raw(child.id() as i32), signal).unwrap();
    let status = child.wait().unwrap();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let until = Instant::now() + Duration::from_secs(20);
    while !tagged(&tag).is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    let left = tagged(&tag);
    for (pid, _) in &left {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
    }
    assert_eq!(left, vec![], "left behind after {signal}: {stderr}");
    let files: Vec<_> = std::fs::read_dir(&private).unwrap().flatten().collect();
    assert!(files.is_empty(), "left in $TMPDIR: {files:?}");
    (status, stderr)
}

/// A shell that forks a `sleep` and then becomes another: two sleeps, one not cpulab's child.
const FORKING: &str = "sleep 600 & exec sleep 601";

fn both_sleeps(p: &[(i32, String)]) -> bool {
    named(p, "sleep") >= 2
}

// ---- watch -- COMMAND ----

fn watch_args() -> Vec<&'static str> {
    let mut a = vec!["watch", "--quiet", "--no-history", "--duration", "600s"];
    a.extend(["--", "sh", "-c", FORKING]);
    a
}

#[test]
fn ctrl_c_ends_a_watched_command_and_what_it_forked() {
    if !can_trace(test_name!()) {
        return;
    }
    let (status, stderr) = interrupted(&watch_args(), both_sleeps, Signal::SIGINT);
    // An interrupt ends the window early and the watch reports what it saw (docs/watch.md).
    assert_eq!(status.code(), Some(0), "{stderr}");
}

#[test]
fn sigkill_of_a_watch_ends_the_command_and_what_it_forked() {
    if !can_trace(test_name!()) {
        return;
    }
    let (status, _) = interrupted(&watch_args(), both_sleeps, Signal::SIGKILL);
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}

// ---- try --measure cmd: (on a fixture copy: no root, the live machine untouched) ----

fn try_cmd(signal: Signal) -> (ExitStatus, String) {
    let d = common::fixture_copy("kvm-guest");
    let root = d.path().to_str().unwrap().to_string();
    let measure = format!("cmd:sh -c '{FORKING}'");
    let args = [
        "--root",
        &root,
        "try",
        "haltpoll.guest_halt_poll_ns=200000",
        "--no-history",
        "--measure",
        &measure,
        "--metric",
        r"v (?P<value>[0-9]+)",
    ];
    interrupted(&args, both_sleeps, signal)
}

#[test]
fn sigterm_stops_a_trials_command_at_once_with_what_it_forked() {
    // The command would run for ten minutes: the trial ends because the interrupt stopped it,
    // not because its round finished.
    let (status, stderr) = try_cmd(Signal::SIGTERM);
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("interrupted by SIGTERM"), "{stderr}");
}

#[test]
fn sigkill_of_a_trial_ends_its_command_and_what_it_forked() {
    let (status, _) = try_cmd(Signal::SIGKILL);
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}

// ---- experiments that fork their own tasks ----

#[test]
fn sigkill_of_pingpong_processes_ends_the_forked_endpoint() {
    let args = [
        "pingpong",
        "--processes",
        "--method",
        "pipe",
        "--max-time",
        "60s",
        "--no-load-check",
        "--no-history",
    ];
    // cpulab and its forked endpoint (which keeps the name).
    let (status, _) = interrupted(&args, |p| named(p, "cpulab") >= 2, Signal::SIGKILL);
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}

#[test]
fn sigterm_of_messaging_ends_every_forked_task() {
    let args = [
        "messaging",
        "--groups",
        "2",
        "--senders",
        "5",
        "--repeats",
        "100",
        "--messages",
        "10000",
        "--no-load-check",
        "--no-history",
    ];
    // 2 groups x (5 senders + 5 receivers) forked beside cpulab.
    let (status, _) = interrupted(&args, |p| p.len() >= 21, Signal::SIGTERM);
    assert_eq!(status.signal(), Some(libc::SIGTERM));
}

// ---- pair with any server and client (no PostgreSQL or Apache needed) ----

#[test]
fn sigkill_of_a_custom_pair_ends_the_server_and_what_it_forked() {
    let args = [
        "pair",
        "--shell",
        "--server",
        FORKING,
        "--ready-cmd",
        "true",
        "--client",
        "sleep 600; echo 1",
        "--metric",
        r"(?P<value>\d+)",
        "--no-load-check",
        "--no-history",
    ];
    let (status, _) = interrupted(&args, both_sleeps, Signal::SIGKILL);
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}

// ---- pair's preparation (initdb, pgbench -i) ----

/// A SIGKILL while the pgbench preset prepares, in a step that forks: a stand-in `initdb` (the
/// preset's programs found through `CPULAB_PATH`) that is a shell forking a `sleep` and then
/// becoming another. The step's own process ends by its parent-death signal; the forked sleep,
/// not cpulab's child, only because the step named its group to the watchdog. The temporary
/// directory (with the cluster that was being created) is gone too.
#[test]
fn sigkill_during_a_pair_preparation_step_ends_what_the_step_forked() {
    use std::os::unix::fs::PermissionsExt;
    // As root the preset runs its steps as the `postgres` account, which must exist.
    if !common::postgres_installed(test_name!()) {
        return;
    }
    let bin = tempfile::tempdir().unwrap();
    for (name, script) in [
        ("initdb", FORKING.to_string()),
        (
            "postgres",
            "echo 'postgres (PostgreSQL) 15 stand-in'".to_string(),
        ),
        ("pgbench", "exit 1".to_string()),
    ] {
        let p = bin.path().join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // The step runs as `postgres`, which must reach its program.
    std::fs::set_permissions(bin.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let args = [
        "pair",
        "--preset",
        "pgbench",
        "--no-load-check",
        "--no-history",
    ];
    let env = [("CPULAB_PATH", bin.path())];
    let (status, _) = interrupted_with(&args, &env, both_sleeps, Signal::SIGKILL);
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}

/// The real preparation: a SIGKILL while PostgreSQL's `initdb` runs its bootstrap backend
/// leaves neither of them, nor the half-made cluster.
#[test]
fn sigkill_during_initdb_leaves_no_process_and_no_cluster() {
    if !common::postgres_installed(test_name!()) {
        return;
    }
    let args = [
        "pair",
        "--preset",
        "pgbench",
        "--no-load-check",
        "--no-history",
    ];
    let bootstrapping = |p: &[(i32, String)]| named(p, "initdb") >= 1 && named(p, "postgres") >= 1;
    let (status, _) = interrupted(&args, bootstrapping, Signal::SIGKILL);
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}

/// A SIGKILL while `pgbench -i` loads the readonly workload's tables (the server it loads
/// into is up for the step alone) leaves neither of them, nor the cluster.
#[test]
fn sigkill_during_pgbench_init_leaves_no_process_and_no_cluster() {
    if !common::postgres_installed(test_name!()) {
        return;
    }
    let args = [
        "pair",
        "--preset",
        "pgbench",
        "--workload",
        "readonly",
        "--scale",
        "20",
        "--no-load-check",
        "--no-history",
    ];
    // The first pgbench of a run is the preparation's: the measured ones come after it.
    let loading = |p: &[(i32, String)]| named(p, "pgbench") >= 1;
    let (status, _) = interrupted(&args, loading, Signal::SIGKILL);
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}
