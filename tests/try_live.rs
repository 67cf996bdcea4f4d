//! `cpulab try` on this machine's real settings, as root: whatever ends cpulab mid-trial
//! (SIGKILL, SIGTERM, SIGINT), every value is back within seconds: halt polling, a cpuidle
//! state's `disable`, a scheduler sysctl and the affinity of a live process.
//!
//! These change the live machine for a few seconds each. They need root and the haltpoll
//! module; without them they say so and pass, except under `CI=true`, where they fail.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One trial at a time: they change the same settings.
static SERIAL: Mutex<()> = Mutex::new(());

const POLL: &str = "/sys/module/haltpoll/parameters/guest_halt_poll_ns";
const IDLE: &str = "/sys/devices/system/cpu/cpu1/cpuidle/state1/disable";
const AUTOGROUP: &str = "/proc/sys/kernel/sched_autogroup_enabled";
const TRIED_POLL: &str = "123457";

fn can_run() -> bool {
    let why = if !nix::unistd::geteuid().is_root() {
        Some("not root")
    } else if !Path::new(POLL).exists() || !Path::new(IDLE).exists() {
        Some("no haltpoll module or no cpuidle state1 on cpu1")
    } else {
        None
    };
    match why {
        None => true,
        Some(w) => {
            eprintln!("skipped: live try tests need root and halt polling ({w})");
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI must run these: {w}"
            );
            false
        }
    }
}

fn read(p: &str) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Every value the trial touches, in one string.
fn snapshot(pid: u32) -> String {
    format!(
        "poll={} idle={} autogroup={} affinity={}",
        read(POLL),
        read(IDLE),
        read(AUTOGROUP),
        cpulab::affinity::get(pid as i32).unwrap()
    )
}

fn start(victim: u32) -> Child {
    let flip = if read(AUTOGROUP) == "1" { "0" } else { "1" };
    common::cpulab_process()
        .args([
            "try",
            &format!("haltpoll.guest_halt_poll_ns={TRIED_POLL}"),
            "cpuidle.disable=state1@1",
            &format!("kernel.sched_autogroup_enabled={flip}"),
            &format!("pid:{victim}.affinity=0"),
            "--measure",
            "cmd:sh -c 'sleep 0.5; echo v 1'",
            "--metric",
            r"v (?P<value>\d+)",
            "--rounds",
            "5",
            "--quiet",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_for(what: &str, secs: u64, mut ok: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(secs);
    while !ok() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn interrupted_mid_trial(signal: i32) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !can_run() {
        return;
    }
    let mut victim = Command::new("sleep").arg("60").spawn().unwrap();
    let before = snapshot(victim.id());
    let trial = start(victim.id());
    // Mid-trial: the writes are checked once (tried value), undone for baseline round 1, then
    // applied for changed round 1; kill inside that round.
    wait_for("the check of the writes", 30, || read(POLL) == TRIED_POLL);
    wait_for("baseline round 1", 30, || read(POLL) != TRIED_POLL);
    wait_for("changed round 1", 30, || read(POLL) == TRIED_POLL);
    let during = snapshot(victim.id());
    assert_ne!(during, before, "the trial changed the settings");
    assert!(
        Path::new("/run/cpulab/try.journal").exists(),
        "journal written before"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(trial.id() as i32),
        nix::sys::signal::Signal::try_from(signal).unwrap(),
    )
    .unwrap();
    let out = trial.wait_with_output().unwrap();
    let status = out.status;
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    // SIGKILL: the watchdog restores within seconds; SIGTERM and SIGINT: cpulab itself, before
    // it exits with 128 + the signal.
    wait_for("every value back", 10, || snapshot(victim.id()) == before);
    wait_for("the journal removed", 10, || {
        !Path::new("/run/cpulab/try.journal").exists()
    });
    use std::os::unix::process::ExitStatusExt;
    if signal == libc::SIGKILL {
        assert_eq!(status.signal(), Some(libc::SIGKILL));
    } else {
        assert_eq!(status.code(), Some(128 + signal), "{status:?}: {stderr}");
    }
    assert_eq!(snapshot(victim.id()), before);
    let _ = victim.kill();
    let _ = victim.wait();
}

#[test]
fn sigkill_mid_trial_the_watchdog_restores() {
    interrupted_mid_trial(libc::SIGKILL);
}

#[test]
fn sigterm_mid_trial_restores() {
    interrupted_mid_trial(libc::SIGTERM);
}

#[test]
fn sigint_mid_trial_restores() {
    interrupted_mid_trial(libc::SIGINT);
}

#[test]
fn sighup_mid_trial_restores() {
    interrupted_mid_trial(libc::SIGHUP);
}

#[test]
fn a_whole_trial_restores_and_reads_back() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !can_run() {
        return;
    }
    let mut victim = Command::new("sleep").arg("60").spawn().unwrap();
    let before = snapshot(victim.id());
    let out = common::cpulab_process()
        .args([
            "try",
            "haltpoll.guest_halt_poll_ns=200000",
            &format!("pid:{}.affinity=1", victim.id()),
            "--measure",
            "pingpong:--pairs 0:1 --max-time 0.2 --no-load-check",
            "--json",
            "--quiet",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(snapshot(victim.id()), before);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v["trial"]["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert!(names.iter().any(|n| n.starts_with("rtt_ns")), "{names:?}");
    assert!(names.contains(&"cost.poll_cpu_s_per_s"), "{names:?}");
    // Physics: polling time is never negative, a round trip costs something.
    for c in v["trial"]["comparisons"].as_array().unwrap() {
        for side in ["baseline_rounds", "changed_rounds"] {
            for x in c[side].as_array().unwrap() {
                assert!(x.as_f64().unwrap() >= 0.0);
            }
        }
    }
    let _ = victim.kill();
    let _ = victim.wait();
}
