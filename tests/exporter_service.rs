//! `cpulab exporter` as a service: the systemd unit passes `systemd-analyze verify` (with this
//! build's binary, and as installed from the .deb when it is), nothing cpulab attached to the
//! kernel outlives a SIGKILL of the exporter, and a watched service that restarts and runs
//! 1,000 short-lived processes keeps its series and leaves the exporter's memory bounded.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

fn unit() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("packaging/cpulab-exporter.service")
}

#[test]
fn the_unit_verifies_with_this_build() {
    let Some(analyze) = common::program(test_name!(), "systemd-analyze", "systemd") else {
        return;
    };
    let text = std::fs::read_to_string(unit()).unwrap();
    assert!(text.contains("ExecStart=/usr/bin/cpulab exporter"));
    for hardening in [
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "CapabilityBoundingSet=CAP_BPF CAP_PERFMON",
        "DynamicUser=yes",
    ] {
        assert!(text.contains(hardening), "{hardening}");
    }
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("cpulab-exporter.service");
    let binary = common::cpulab_path();
    std::fs::write(
        &copy,
        text.replace("/usr/bin/cpulab", binary.to_str().unwrap()),
    )
    .unwrap();
    // The man page is checked in the installed test below; this build has none installed.
    let out = Command::new(analyze)
        .args(["verify", "--man=no"])
        .arg(&copy)
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_installed_unit_verifies() {
    let installed = PathBuf::from("/lib/systemd/system/cpulab-exporter.service");
    if !installed.exists() || !PathBuf::from("/usr/bin/cpulab").exists() {
        common::not_installed(
            test_name!(),
            "the cpulab .deb",
            "cpulab (scripts/build-deb.sh --install)",
        );
        return;
    }
    let Some(analyze) = common::program(test_name!(), "systemd-analyze", "systemd") else {
        return;
    };
    // The package holds the man page the unit's Documentation= names (a container's dpkg may
    // leave man pages out of /usr/share/man, so ask dpkg, and verify without `man`).
    let listed = Command::new("dpkg")
        .args(["-L", "cpulab"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains("/man1/cpulab-exporter.1"), "{listed}");
    assert!(listed.contains("/cpulab-exporter.service"), "{listed}");
    let out = Command::new(analyze)
        .args(["verify", "--man=no"])
        .arg(&installed)
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Names of the BPF programs loaded in the kernel, through BPF_PROG_GET_NEXT_ID,
/// BPF_PROG_GET_FD_BY_ID and BPF_OBJ_GET_INFO_BY_FD (no bpftool needed).
fn bpf_program_names() -> Vec<String> {
    const BPF_PROG_GET_NEXT_ID: libc::c_long = 11;
    const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    let bpf = |cmd: libc::c_long, attr: &mut [u8; 128]| unsafe {
        // SAFETY: attr is a zeroed buffer larger than every bpf_attr variant used here.
        libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len() as u32)
    };
    let mut names = Vec::new();
    let mut id = 0u32;
    loop {
        let mut attr = [0u8; 128];
        attr[0..4].copy_from_slice(&id.to_ne_bytes());
        if bpf(BPF_PROG_GET_NEXT_ID, &mut attr) != 0 {
            break;
        }
        id = u32::from_ne_bytes(attr[4..8].try_into().unwrap());
        let mut attr = [0u8; 128];
        attr[0..4].copy_from_slice(&id.to_ne_bytes());
        let fd = bpf(BPF_PROG_GET_FD_BY_ID, &mut attr);
        if fd < 0 {
            continue;
        }
        // struct bpf_prog_info: the name is 16 bytes at offset 64.
        let mut info = [0u8; 256];
        let mut attr = [0u8; 128];
        attr[0..4].copy_from_slice(&(fd as u32).to_ne_bytes());
        attr[4..8].copy_from_slice(&(info.len() as u32).to_ne_bytes());
        attr[8..16].copy_from_slice(&(info.as_mut_ptr() as u64).to_ne_bytes());
        if bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) == 0 {
            let name = &info[64..80];
            let end = name.iter().position(|&b| b == 0).unwrap_or(16);
            names.push(String::from_utf8_lossy(&name[..end]).to_string());
        }
        unsafe { libc::close(fd as i32) };
    }
    names
}

/// The ids of the BPF programs a process holds a descriptor to, from `/proc/PID/fdinfo`
/// (`prog_id:`): its own programs, whatever another exporter in this test binary loads.
fn programs_held_by(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return Vec::new();
    };
    let mut ids: Vec<u32> = dir
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("prog_id:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// True while the kernel still has a program with this id loaded. A failed lookup (EPERM
/// without CAP_SYS_ADMIN) fails the test: it must not read as "gone".
fn program_loaded(id: u32) -> bool {
    cpulab::watch::bpf::sys::prog_loaded(id)
        .unwrap_or_else(|e| panic!("cannot look up BPF program {id}: {e}"))
}

/// Follows the exporter's own programs (not a count of every cpulab program, which another
/// exporter started by a test running alongside changes) until the kernel has freed them.
#[test]
fn nothing_stays_attached_after_sigkill() {
    let (mut child, _port) = start_exporter(&[]);
    let held = programs_held_by(child.0.id());
    let names = bpf_program_names();
    assert!(
        !held.is_empty(),
        "the exporter holds no BPF program; loaded: {names:?}"
    );
    assert!(
        names.iter().any(|n| n.starts_with("cpulab")),
        "no cpulab program is loaded: {names:?}"
    );
    assert!(held.iter().all(|&id| program_loaded(id)));
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    // The kernel frees programs whose last descriptor closed after an RCU grace period.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<u32> = held
            .iter()
            .copied()
            .filter(|&id| program_loaded(id))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < until,
            "programs {left:?} of the killed exporter still loaded: {:?}",
            bpf_program_names()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `--bpf-program-costs` publishes each program's runs and run time, counters that only grow
/// and where a run costs at least a nanosecond; the timing it turns on ends with the exporter:
/// an exporter started after it, without the flag, has programs the kernel does not time.
#[test]
fn program_costs_are_published_when_asked_and_the_timing_ends_with_the_exporter() {
    let sysctl = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").unwrap_or_default();
    let (child, port) = start_exporter(&["--bpf-program-costs", "--comm", "cpulab-none"]);
    let costs = |text: &str, metric: &str| -> std::collections::BTreeMap<String, f64> {
        text.lines()
            .filter(|l| l.starts_with(metric))
            .filter_map(|l| {
                let (labels, v) = l.rsplit_once(' ')?;
                Some((labels[metric.len()..].to_string(), v.parse().ok()?))
            })
            .collect()
    };
    let runs_metric = "cpulab_exporter_bpf_program_runs_total";
    let secs_metric = "cpulab_exporter_bpf_program_run_seconds_total";
    let first = scrape(port);
    // Scheduler events happen on any live machine; a few short processes make sure.
    for _ in 0..20 {
        Command::new("/bin/true").status().unwrap();
    }
    let second = scrape(port);
    let (r1, r2) = (costs(&first, runs_metric), costs(&second, runs_metric));
    let s2 = costs(&second, secs_metric);
    for program in ["{program=\"sched_waking\"}", "{program=\"sched_switch\"}"] {
        assert!(r2[program] > 0.0, "{program} never ran: {second}");
        assert!(r2[program] >= r1[program], "{program} runs went down");
        assert!(
            s2[program] >= r2[program] * 1e-9,
            "{program}: {} s for {} runs, under 1 ns a run",
            s2[program],
            r2[program]
        );
    }
    drop(child);
    // Without the flag, and with no timing left on, the kernel does not time the programs.
    if sysctl.trim() != "0" {
        common::skipped(
            test_name!(),
            &format!(
                "kernel.bpf_stats_enabled is {} here: every program is timed, so whether the \
                 exporter's timing ended cannot be told apart (set it to 0 to check)",
                sysctl.trim()
            ),
        );
        return;
    }
    let (plain, _port) = start_exporter(&[]);
    for _ in 0..20 {
        Command::new("/bin/true").status().unwrap();
    }
    let held = programs_held_by(plain.0.id());
    assert!(!held.is_empty());
    for id in held {
        let prog = cpulab::watch::bpf::sys::prog_by_id(id).unwrap();
        let (runs, run_ns) = cpulab::watch::bpf::sys::prog_run_stats(&prog).unwrap();
        assert_eq!(
            (runs, run_ns),
            (0, 0),
            "program {id} is still timed after the exporter that asked for it ended"
        );
    }
}

/// Starts the exporter with the real wakeup source on a free loopback port, and waits until it
/// answers: the port is bound before the programs load (a port in use fails fast), so
/// listening is not enough; the first answered request comes after the source is open.
fn start_exporter(extra: &[&str]) -> (KillOnDrop, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = common::cpulab_process()
        .args(["exporter", "--quiet"])
        .args(extra)
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .spawn()
        .unwrap();
    // Killed however the test ends, so a failed assertion leaves no exporter behind.
    let mut child = KillOnDrop(child);
    let until = Instant::now() + Duration::from_secs(30);
    while !answers(port) {
        assert!(
            Instant::now() < until,
            "the exporter never answered on its port"
        );
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "the exporter exited before answering"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (child, port)
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// True once `GET /` on the port gets an HTTP status line back.
fn answers(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    if s.write_all(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.")
}

/// One scrape of `/metrics` over plain HTTP.
fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default()
}

/// The `cpulab_wakeups_total` series of a scrape: labels to value.
fn wakeup_series(text: &str) -> std::collections::BTreeMap<String, f64> {
    text.lines()
        .filter(|l| l.starts_with("cpulab_wakeups_total{"))
        .filter_map(|l| {
            let (labels, v) = l.rsplit_once(' ')?;
            Some((labels.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// Resident and peak memory of a process, in KiB (`VmRSS`, `VmHWM`).
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// A service (a shell named `cpulab-svc`) runs 500 short-lived processes, ends, is restarted and
/// runs 500 more: its series keep the same labels, its counters only grow, no series appear
/// for the children, and the exporter's memory stays within a small bound.
#[test]
fn a_restarted_service_with_a_thousand_short_lived_processes_keeps_its_series() {
    let dir = tempfile::tempdir().unwrap();
    let svc = dir.path().join("cpulab-svc");
    std::fs::copy("/bin/sh", &svc).unwrap();
    // Always attached: each burst of 500 processes is over in about a second, which one
    // second in four (the default) may miss; exact counts are what this test checks.
    let (child, port) = start_exporter(&["--comm", "cpulab-svc", "--attach-every", "1"]);
    let first = wakeup_series(&scrape(port));
    assert!(
        first.keys().all(|k| k.contains("target=\"cpulab-svc\"")),
        "the named target has series from the start, and only it: {first:?}"
    );
    assert!(!first.is_empty(), "no wakeup series for the named target");
    let mem0 = memory_kib(child.0.id());
    let total = |m: &std::collections::BTreeMap<String, f64>| m.values().sum::<f64>();
    let mut runs: Vec<std::collections::BTreeMap<String, f64>> = Vec::new();
    for _ in 0..2 {
        let out = Command::new(&svc)
            .args([
                "-c",
                "i=0; while [ $i -lt 500 ]; do /bin/true; i=$((i+1)); done",
            ])
            .output()
            .unwrap();
        assert!(out.status.success());
        // Each /bin/true ending wakes the shell that waits for it: wait (bounded) until the
        // scrape holds the burst's 500 wakeups; the checks below say what is missing if not.
        let before = total(runs.last().unwrap_or(&first));
        let until = std::time::Instant::now() + Duration::from_secs(60);
        let now = loop {
            let now = wakeup_series(&scrape(port));
            if total(&now) - before >= 500.0 || std::time::Instant::now() > until {
                break now;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        runs.push(now);
    }
    let mem1 = memory_kib(child.0.id());
    eprintln!(
        "exporter memory before and after 1,000 short-lived processes: VmRSS {} -> {} KiB, \
         VmHWM {} -> {} KiB",
        mem0.0, mem1.0, mem0.1, mem1.1
    );
    for (before, after) in [(&first, &runs[0]), (&runs[0], &runs[1])] {
        assert_eq!(
            before.keys().collect::<Vec<_>>(),
            after.keys().collect::<Vec<_>>(),
            "the same series, whatever ran and ended"
        );
        for (k, v) in before {
            assert!(after[k] >= *v, "{k} went down: {v} -> {}", after[k]);
        }
    }
    // Each /bin/true ending wakes the shell that waits for it.
    assert!(total(&runs[0]) - total(&first) >= 500.0, "{runs:?}");
    assert!(total(&runs[1]) - total(&runs[0]) >= 500.0, "{runs:?}");
    // 1,000 processes tracked and dropped: a bounded map and cache, not a record each.
    assert!(
        mem1.0 < mem0.0 + 8 * 1024,
        "resident memory grew by {} KiB",
        mem1.0 - mem0.0
    );
}
