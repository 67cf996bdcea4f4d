//! The in-kernel tables at any `pid_max` (issue 28): a pinned pair started at pids past
//! 100,000 and past 4,000,000 (`PID_MAX_LIMIT` is 4,194,304, where systemd raises `pid_max`) is
//! counted by `cpulab watch --mechanism bpf-counts` (the exporter's in-kernel aggregation) in
//! the class it was pinned to, as the same pair at low pids is, with every round trip's
//! wakeups there and nothing lost or refused.
//!
//! The test raises `/proc/sys/kernel/pid_max` and moves the next pid with
//! `/proc/sys/kernel/ns_last_pid`; a guard puts both back when it ends, also on a panic.

mod common;

use serde_json::Value;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const PID_MAX: &str = "/proc/sys/kernel/pid_max";
const NS_LAST_PID: &str = "/proc/sys/kernel/ns_last_pid";
/// `PID_MAX_LIMIT` on 64-bit kernels.
const PID_MAX_LIMIT: u32 = 4_194_304;

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap().trim().to_string()
}

/// `pid_max` raised to `PID_MAX_LIMIT` until dropped; then `ns_last_pid` and `pid_max` are
/// what they were (the next pid counts on from the old place: pids taken meanwhile are skipped
/// by the kernel while they live).
struct PidSpace {
    pid_max: String,
    last_pid: String,
}

impl PidSpace {
    fn raise() -> Self {
        let s = Self {
            pid_max: read(PID_MAX),
            last_pid: read(NS_LAST_PID),
        };
        std::fs::write(PID_MAX, PID_MAX_LIMIT.to_string()).unwrap();
        s
    }
}

impl Drop for PidSpace {
    fn drop(&mut self) {
        // `ns_last_pid` first: it may not exceed `pid_max`.
        let _ = std::fs::write(NS_LAST_PID, &self.last_pid);
        let _ = std::fs::write(PID_MAX, &self.pid_max);
    }
}

/// A child killed and reaped when dropped, whatever the test did with it.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn can_run(test: &str) -> bool {
    let two_cpus = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    let why = if !nix::unistd::geteuid().is_root() {
        "raising pid_max and loading BPF programs need root"
    } else if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        "the kernel has no BTF"
    } else if !Path::new(NS_LAST_PID).exists() {
        "no /proc/sys/kernel/ns_last_pid (a kernel without CONFIG_CHECKPOINT_RESTORE)"
    } else if !two_cpus {
        "a pair one CPU apart needs two CPUs"
    } else {
        return true;
    };
    common::skipped(
        test,
        &format!("{why}; CI runs as root on a machine with BTF and two CPUs"),
    );
    false
}

/// Waits until `pid` holds the four BPF links of a named watch's aggregation (`sched_waking`,
/// `sched_switch`, and the `sched_process_fork` and `sched_process_exec` programs that add a
/// new `cpulab-pair` at once), for at most a minute: a pair started before the exec program is
/// attached would wait for the next once-a-second re-read of the targets.
fn wait_attached(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap();
        let links = fds
            .flatten()
            .filter(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|l| l.to_string_lossy().contains("bpf_link"))
            })
            .count();
        if links >= 4 {
            return;
        }
        assert!(Instant::now() < deadline, "the watch never attached");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What one watched run of the pair gave: its pid, the watch's document, the pingpong's.
struct Run {
    pid: u32,
    watch: Value,
    pingpong: Value,
}

/// Starts the pair (`pair`, a renamed cpulab, running `pingpong --pairs PAIRS`) with its pid
/// past `floor` when given, trying again when another process took the pids meanwhile.
fn start_pair(pair: &Path, pairs: &str, floor: Option<u32>) -> (u32, Reaped) {
    for _ in 0..5 {
        if let Some(f) = floor {
            std::fs::write(NS_LAST_PID, f.to_string()).unwrap();
        }
        let child = std::process::Command::new(pair)
            .env("CPULAB_HISTORY", "off")
            .args(["pingpong", "--quiet", "--json", "--method", "pipe"])
            .args(["--pairs", pairs, "--max-time", "2s"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let child = Reaped(child);
        if floor.is_none_or(|f| pid > f && pid < f + 1_000) {
            return (pid, child);
        }
    }
    panic!("five tries, and the pair never got a pid just past {floor:?}");
}

/// The pair run under a watch of its name with the in-kernel aggregation.
fn watched(dir: &Path, pairs: &str, floor: Option<u32>) -> Run {
    let pair = dir.join("cpulab-pair");
    if !pair.exists() {
        std::fs::copy(common::cpulab_path(), &pair).unwrap();
    }
    let watch = common::cpulab_process()
        .args(["watch", "--json", "--mechanism", "bpf-counts"])
        .args(["--comm", "cpulab-pair", "--duration", "120"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut watch = Reaped(watch);
    wait_attached(watch.0.id());
    let (pid, mut child) = start_pair(&pair, pairs, floor);
    let out = child.0.stdout.take().unwrap();
    let pingpong: Value = serde_json::from_reader(out).unwrap();
    assert!(child.0.wait().unwrap().success());
    // The watch ends its window early on SIGINT and reports what it saw.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(watch.0.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let mut stdout = watch.0.stdout.take().unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut text).unwrap();
    let status = watch.0.wait().unwrap();
    let mut err = String::new();
    if let Some(mut e) = watch.0.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    assert!(status.success(), "watch: {status}: {err}");
    let watch = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text} {err}"));
    Run {
        pid,
        watch,
        pingpong,
    }
}

/// The pair process's wakeups by class, from the watch.
fn classes(w: &Value) -> Vec<(String, u64)> {
    let procs = w["processes"].as_array().unwrap();
    let p = procs
        .iter()
        .find(|p| p["name"] == "cpulab-pair")
        .unwrap_or_else(|| panic!("the pair is not among {procs:?}"));
    let mut out: Vec<(String, u64)> = p["classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["class"].as_str().unwrap().to_string(),
                c["wakeups"].as_u64().unwrap(),
            )
        })
        .collect();
    out.sort_by_key(|c| std::cmp::Reverse(c.1));
    out
}

/// Round trips the pair made, warm-up included.
fn round_trips(p: &Value) -> u64 {
    let r = &p["runs"][0];
    r["round_trips"].as_u64().unwrap() + r["warmup_round_trips"].as_u64().unwrap()
}

/// Checks one run: the pair's wakeups are almost all in `class`, as many as its round trips
/// allow, and the aggregation lost or refused nothing.
fn check(run: &Run, pairs: &str, class: &str) {
    let c = classes(&run.watch);
    let rt = round_trips(&run.pingpong);
    let what = format!("pairs {pairs} at pid {}: {c:?}, {rt} round trips", run.pid);
    assert_eq!(c[0].0, class, "{what}");
    // Each side reads once a round trip, so it blocks (and is woken) at most once: two
    // wakeups a round trip, and a few of the process's other threads (starting and joining
    // the pair).
    let all: u64 = c.iter().map(|x| x.1).sum();
    assert!(all <= 2 * rt + 64, "{what}");
    // At least: one CPU apart, the initiator reads its answer nanoseconds after writing the
    // question, before the responder (woken on the other CPU) can have answered, so it
    // sleeps every round trip. On one CPU a side that is preempted between its write and
    // its read may find the answer there; still, more than half the round trips wake a side.
    let least = if pairs == "0:0" { rt / 2 } else { rt };
    assert!(c[0].1 >= least, "{what}");
    assert_eq!(run.watch["lost_events"], 0, "{what}: lost or refused");
}

#[test]
fn a_pair_past_pid_4000000_is_counted_as_one_at_low_pids() {
    let test = "a_pair_past_pid_4000000_is_counted_as_one_at_low_pids";
    if !can_run(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let space = PidSpace::raise();
    // Low pids: where they were before the test, or from 1,000 when that is near 32,768.
    let last: u32 = space.last_pid.parse().unwrap();
    let low_from = if last < 30_000 { last } else { 1_000 };
    for pairs in ["0:0", "0:1"] {
        let low = watched(dir.path(), pairs, Some(low_from));
        assert!(low.pid < 32_768, "{}", low.pid);
        let class = classes(&low.watch)[0].0.clone();
        check(&low, pairs, &class);
        for floor in [100_000, 4_000_000] {
            let high = watched(dir.path(), pairs, Some(floor));
            assert!(high.pid > floor && high.pid < PID_MAX_LIMIT, "{}", high.pid);
            check(&high, pairs, &class);
        }
    }
}
