//! `cpulab host` watching VMs from outside: cpulab's own guests (`cpulab host guest`, hidden)
//! run as the VMs, in processes of their own, named as QEMU names its vCPU threads or left
//! unnamed; the watcher must find each VM and vCPU thread, see where they ran and a move made
//! during its window, and put VMs that share CPUs side by side.

mod common;

use common::{bad_input, cpulab_process, skipped};
use serde_json::Value;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn kvm(test: &str) -> bool {
    common::kvm_usable(test)
}

fn two_cpus(test: &str) -> bool {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    if n < 2 {
        skipped(test, "one CPU here: no placement across two");
    }
    n >= 2
}

/// A guest process, ended when dropped (the test failing included).
struct Guest(Child);

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Guest {
    fn start(args: &[&str]) -> Self {
        let child = cpulab_process()
            .args(["--quiet", "host", "guest", "--duration", "60s"])
            .args(args)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let g = Guest(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while g.vcpu_threads().len() < 2 {
            assert!(
                Instant::now() < deadline,
                "the guest's vCPU threads did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        g
    }

    /// A guest that runs for `duration` and samples its own counts every 100 ms
    /// (`host guest --series`), its stdout kept for [`Guest::samples`].
    fn sampled(args: &[&str], duration: &str) -> Self {
        let child = cpulab_process()
            .args(["--quiet", "host", "guest", "--duration", duration])
            .args(["--series", "100ms"])
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let g = Guest(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while g.vcpu_threads().len() < 2 {
            assert!(
                Instant::now() < deadline,
                "the guest's vCPU threads did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        g
    }

    /// Waits for a sampling guest to end: its samples as the guest itself counted them,
    /// each (CLOCK_MONOTONIC ns, per vCPU): its loops so far, and (a burner's) the TSC
    /// cycles it counted itself running so far, with its TSC's rate.
    fn samples(&mut self) -> GuestSeries {
        let status = self.0.wait().unwrap();
        assert!(status.success(), "the guest failed: {status}");
        let mut out = String::new();
        std::io::Read::read_to_string(&mut self.0.stdout.take().unwrap(), &mut out).unwrap();
        let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
        let column = |name: &str| -> Vec<(u64, Vec<u64>)> {
            v["samples"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| {
                    let per_vcpu = x[name].as_array().unwrap_or_else(|| panic!("{name}: {x}"));
                    (
                        x["t_ns"].as_u64().unwrap(),
                        per_vcpu.iter().map(|c| c.as_u64().unwrap()).collect(),
                    )
                })
                .collect()
        };
        let (counts, ran) = (column("counts"), column("ran_cycles"));
        // Counts and run times only grow, and time runs forward.
        for s in [&counts, &ran] {
            assert!(
                s.windows(2).all(|w| w[0].0 < w[1].0
                    && w[0].1.len() == w[1].1.len()
                    && w[0].1.iter().zip(&w[1].1).all(|(a, b)| a <= b)),
                "{v}"
            );
        }
        let tsc_khz = v["tsc_khz"].as_u64().unwrap();
        assert!(tsc_khz > 0, "{v}");
        // A vCPU runs at most all of the time between two samples (1% for the sampling's
        // own jitter).
        for w in ran.windows(2) {
            let wall = (w[1].0 - w[0].0) as f64 * tsc_khz as f64 / 1e6;
            for (a, b) in w[0].1.iter().zip(&w[1].1) {
                assert!((b - a) as f64 <= 1.01 * wall, "{a} {b} in {wall}: {v}");
            }
        }
        GuestSeries {
            tsc_khz,
            counts,
            ran,
        }
    }

    fn pid(&self) -> i64 {
        i64::from(self.0.id())
    }

    /// The process's threads other than its main one and KVM's own worker
    /// (`kvm-nx-lpage-re`), with their names.
    fn threads(&self) -> Vec<(i64, String)> {
        let pid = self.0.id();
        let mut t: Vec<(i64, String)> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| {
                d.flatten()
                    .filter_map(|e| {
                        let tid: i64 = e.file_name().to_str()?.parse().ok()?;
                        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
                        Some((tid, comm.trim().to_string()))
                    })
                    .filter(|(tid, comm)| *tid != i64::from(pid) && comm != "kvm-nx-lpage-re")
                    .collect()
            })
            .unwrap_or_default();
        t.sort();
        t
    }

    fn vcpu_threads(&self) -> Vec<i64> {
        self.threads().into_iter().map(|t| t.0).collect()
    }

    fn thread_named(&self, name: &str) -> i64 {
        self.threads()
            .into_iter()
            .find(|t| t.1 == name)
            .map(|t| t.0)
            .unwrap_or_else(|| panic!("no thread {name}: {:?}", self.threads()))
    }
}

/// Whether the taskset-style list `set` (`0-1,4`) holds `n`.
fn cpu_list_has(set: &str, n: u32) -> bool {
    set.split(',').any(|r| {
        let (a, b) = r.split_once('-').unwrap_or((r, r));
        a.trim().parse::<u32>().is_ok_and(|a| a <= n)
            && b.trim().parse::<u32>().is_ok_and(|b| n <= b)
    })
}

fn watch(secs: &str) -> std::process::Child {
    watch_with(secs, &[])
}

fn watch_with(secs: &str, extra: &[&str]) -> std::process::Child {
    cpulab_process()
        .args(["--quiet", "host", "--json", "--duration", secs])
        .args(extra)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish(w: std::process::Child) -> Value {
    let out = w.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "host");
    v
}

fn vm_of(v: &Value, pid: i64) -> Value {
    v["vms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["pid"] == pid)
        .cloned()
        .unwrap_or_else(|| panic!("VM {pid} not found: {v}"))
}

#[test]
fn both_vms_and_every_vcpu_thread_are_named_and_a_move_shows_as_a_move() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !kvm(test_name!()) || !two_cpus(test_name!()) {
        return;
    }
    let pong = Guest::start(&["--program", "halt", "--cpus", "0:1"]);
    let burn = Guest::start(&["--program", "burn", "--vcpus", "2", "--cpus", "0-1"]);
    let w = watch_with("1500ms", &["--kvm-events", "off"]);
    // Move the ping-pong's second vCPU from CPU 1 to CPU 0 during the window.
    std::thread::sleep(Duration::from_millis(600));
    let moved = pong.thread_named("CPU 1/KVM");
    let status = std::process::Command::new("taskset")
        .args(["-pc", "0", &moved.to_string()])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let v = finish(w);
    let p = vm_of(&v, pong.pid());
    let b = vm_of(&v, burn.pid());
    for vm in [&p, &b] {
        let vcpus = vm["vcpus"].as_array().unwrap();
        assert_eq!(vcpus.len(), 2, "{vm}");
        for (i, c) in vcpus.iter().enumerate() {
            assert_eq!(c["vcpu"], i as u64, "{c}");
            assert_eq!(c["thread_name"], format!("CPU {i}/KVM"), "{c}");
            assert!(c["tid"].is_i64(), "{c}");
            let cpus = c["cpus"].as_object().unwrap();
            assert!(!cpus.is_empty(), "{c}");
            // A thread runs only where its affinity lets it, before or after the move.
            for cpu in cpus.keys() {
                let n: u32 = cpu.parse().unwrap();
                let allowed = ["affinity_start", "affinity_end"]
                    .iter()
                    .any(|k| c[*k].as_str().is_some_and(|set| cpu_list_has(set, n)));
                assert!(allowed, "ran on CPU {cpu}, outside its affinity: {c}");
            }
        }
    }
    let c = p["vcpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["tid"] == moved)
        .unwrap()
        .clone();
    assert_eq!(c["affinity_start"], "1", "{c}");
    assert_eq!(c["affinity_end"], "0", "{c}");
    let ran = c["cpus"].as_object().unwrap();
    assert!(
        ran.contains_key("0") && ran.contains_key("1"),
        "ran on both: {c}"
    );
    let moves = c["migrations"]
        .as_u64()
        .unwrap_or_else(|| c["moves_seen"].as_u64().unwrap());
    assert!(moves >= 1, "{c}");
    // The two VMs ran on the same CPUs, and each names the other.
    let label = |vm: &Value| format!("{} ({})", vm["name"].as_str().unwrap(), vm["pid"]);
    let with = |vm: &Value| {
        vm["shares_cpus_with"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert!(with(&p).contains(&label(&b)), "{p}");
    assert!(with(&b).contains(&label(&p)), "{b}");
    // KVM's own events: counted for every vCPU, or said why not (never a silent zero).
    for vm in [&p, &b] {
        for c in vm["vcpus"].as_array().unwrap() {
            // With --kvm-events off nothing is attached, and the reason says so.
            assert!(c["kvm"].is_null(), "{c}");
            assert!(
                c["kvm_reason"]
                    .as_str()
                    .unwrap()
                    .contains("--kvm-events off"),
                "{c}"
            );
        }
    }
}

/// KVM's events of a halt ping-pong pinned on two CPUs, counted by the BPF programs on its
/// tracepoints, obey the exchange's physics: each round trip is one IPI from each vCPU, so the
/// two vCPUs sent as many (within one at each edge of the window); a vCPU halts at most once per
/// IPI it is sent (an IPI that arrives before its `hlt` leaves nothing to halt for: KVM halts
/// only a vCPU with no interrupt pending); every halt was won by polling or slept; a spin
/// ping-pong beside it halts and sends nothing.
#[test]
fn kvm_events_of_a_halt_ping_pong_follow_its_ipis_and_a_spin_guest_has_none() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !kvm(test_name!()) || !two_cpus(test_name!()) {
        return;
    }
    let halt = Guest::start(&["--program", "halt", "--cpus", "0:1"]);
    let spin = Guest::start(&["--program", "spin", "--cpus", "0:1"]);
    // The default (auto) counts them on raw tracepoints; the kernel times the programs too.
    let v = finish(watch_with("1500ms", &["--bpf-program-costs"]));
    let h = vm_of(&v, halt.pid());
    let s = vm_of(&v, spin.pid());
    if !h["kvm"].is_object() {
        let why = h["kvm_reason"].as_str().unwrap_or_default().to_string();
        assert!(why.starts_with("not available, because"), "{h}");
        skipped(
            test_name!(),
            &format!("KVM's events were not counted: {why}"),
        );
        return;
    }
    assert_eq!(v["kvm_events_lost"], 0, "{v}");
    let ev = |c: &Value, k: &str| c["kvm"][k].as_u64().unwrap_or_else(|| panic!("{k}: {c}"));
    let hv = h["vcpus"].as_array().unwrap();
    assert_eq!(hv.len(), 2, "{h}");
    for (me, other) in [(&hv[0], &hv[1]), (&hv[1], &hv[0])] {
        let halts = ev(me, "halts");
        assert!(halts > 0, "a halting guest halts: {me}");
        assert_eq!(
            ev(me, "invalid_wakeups"),
            0,
            "x86 has no invalid wakeups: {me}"
        );
        assert_eq!(ev(me, "polls_won") + ev(me, "slept"), halts, "{me}");
        // A halt that slept was scheduled out: it took time.
        assert!(ev(me, "slept_ns") >= ev(me, "slept"), "{me}");
        let (mine, ipis) = (ev(me, "ipis_sent"), ev(other, "ipis_sent"));
        assert!(mine > 0, "{me}");
        assert!(
            mine.abs_diff(ipis) <= 2,
            "one IPI each per round trip: vCPU {} sent {mine}, vCPU {} {ipis}",
            me["vcpu"],
            other["vcpu"]
        );
        assert!(
            halts <= ipis + 2,
            "vCPU {}'s halts ({halts}) against the IPIs vCPU {} sent it ({ipis})",
            me["vcpu"],
            other["vcpu"]
        );
        match me["kvm"]["exits"].as_u64() {
            // Every halt is an exit where exits are traced.
            Some(exits) => assert!(exits >= halts, "{me}"),
            None => assert!(
                me["kvm"]["exits_reason"]
                    .as_str()
                    .is_some_and(|r| r.starts_with("not available, because")),
                "exits neither counted nor said why: {me}"
            ),
        }
    }
    // The VM's totals are its vCPUs' sums.
    for k in [
        "halts",
        "polls_won",
        "slept",
        "ipis_sent",
        "polls_won_ns",
        "slept_ns",
    ] {
        assert_eq!(ev(&h, k), ev(&hv[0], k) + ev(&hv[1], k), "{k}: {h}");
    }
    for c in s["vcpus"].as_array().unwrap() {
        assert_eq!(ev(c, "halts"), 0, "a spinning guest never halts: {c}");
        assert_eq!(ev(c, "ipis_sent"), 0, "nor sends an IPI: {c}");
    }
    // How they were counted is said, and the kernel's timing of the programs obeys what they
    // counted: the wakeup program ran at least once per halt counted, and a run takes time.
    let notes = v["conditions"]["notes"].to_string();
    assert!(
        notes.contains("counted by BPF on raw tracepoints")
            || notes.contains("counted by BPF on perf tracepoint events"),
        "{notes}"
    );
    let costs = v["kvm_program_costs"].as_array().unwrap();
    let cost = |p: &str| {
        costs
            .iter()
            .find(|c| c["program"] == p)
            .unwrap_or_else(|| panic!("{p}: {costs:?}"))
    };
    let wake = cost("kvm_vcpu_wakeup");
    let runs = wake["runs"].as_u64().unwrap();
    assert!(runs >= ev(&h, "halts"), "{wake} against {h}");
    assert!(wake["run_ns"].as_u64().unwrap() >= runs, "{wake}");
    let ipi = cost("kvm_apic_ipi");
    assert!(
        ipi["runs"].as_u64().unwrap() >= ev(&h, "ipis_sent"),
        "{ipi}"
    );
}

#[test]
fn unnamed_vcpu_threads_are_found_in_kvm_run() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !kvm(test_name!()) {
        return;
    }
    // A thread that KVM's halt polling keeps runnable reads `running`, never its KVM_RUN, so
    // the guest's halts sleep here (its own limit 0): each thread is seen blocked in KVM_RUN.
    let g = Guest::start(&["--program", "halt", "--unnamed", "--halt-poll-ns", "0"]);
    let v = finish(watch("1s"));
    let vm = vm_of(&v, g.pid());
    let vcpus = vm["vcpus"].as_array().unwrap();
    assert_eq!(vcpus.len(), 2, "{vm}");
    let threads = g.vcpu_threads();
    for c in vcpus {
        // Seen in KVM_RUN at a look, or named by KVM's debugfs where the first scan missed it.
        assert!(
            c["found_by"] == "kvm_run" || c["found_by"] == "debugfs",
            "{c}"
        );
        assert!(threads.contains(&c["tid"].as_i64().unwrap()), "{c}");
        assert_eq!(c["thread_name"], "cpulab", "{c}");
    }
}

/// KVM's debugfs, mounted in a private namespace where it is not mounted, names each vCPU's
/// thread of a running guest (`kvm/PID-FD/vcpuN/pid`), busy ones included, and the mount is
/// gone after; `cpulab host` finds an unnamed guest whose vCPUs never halt.
#[test]
fn debugfs_names_each_vcpu_thread_and_leaves_nothing_mounted() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !kvm(test_name!()) || !two_cpus(test_name!()) {
        return;
    }
    let g = Guest::start(&[
        "--program",
        "burn",
        "--vcpus",
        "2",
        "--unnamed",
        "--cpus",
        "0:1",
    ]);
    let pid = g.pid() as i32;
    let mounts = || {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.contains(" - debugfs "))
            .count()
    };
    let before = mounts();
    let named = cpulab::bpf::tracefs::with_debugfs(|dir| {
        Ok(cpulab::host::watch::discover::debugfs_vcpu_threads(
            dir, pid,
        ))
    })
    .unwrap();
    assert_eq!(mounts(), before, "nothing left mounted");
    let threads = g.vcpu_threads();
    let mut vcpus: Vec<u32> = named.values().copied().collect();
    vcpus.sort();
    assert_eq!(vcpus, [0, 1], "{named:?}");
    for tid in named.keys() {
        assert!(threads.contains(&i64::from(*tid)), "{tid} of {threads:?}");
    }
    let v = finish(watch("500ms"));
    let vm = vm_of(&v, g.pid());
    for c in vm["vcpus"].as_array().unwrap() {
        assert!(threads.contains(&c["tid"].as_i64().unwrap()), "{c}");
        assert!(
            c["found_by"] == "kvm_run" || c["found_by"] == "debugfs",
            "{c}"
        );
    }
}

/// What a sampling guest counted of itself.
struct GuestSeries {
    tsc_khz: u64,
    counts: Vec<(u64, Vec<u64>)>,
    ran: Vec<(u64, Vec<u64>)>,
}

impl GuestSeries {
    /// The share of `from..to` vCPU `k` counted itself running.
    fn ran_share(&self, k: usize, from: u64, to: u64) -> f64 {
        let cycles = count_at(&self.ran, to, k) - count_at(&self.ran, from, k);
        cycles / ((to - from) as f64 * self.tsc_khz as f64 / 1e6)
    }

    /// vCPU `k`'s loops per second over `from..to`.
    fn loop_rate(&self, k: usize, from: u64, to: u64) -> f64 {
        (count_at(&self.counts, to, k) - count_at(&self.counts, from, k))
            / ((to - from) as f64 / 1e9)
    }
}

/// A series' vCPU `k` at an instant, interpolated between the samples either side.
fn count_at(s: &[(u64, Vec<u64>)], t: u64, k: usize) -> f64 {
    let i = s
        .windows(2)
        .position(|w| w[0].0 <= t && t <= w[1].0)
        .unwrap_or_else(|| panic!("{t} is outside the series: {s:?}"));
    let (a, b) = (&s[i], &s[i + 1]);
    let (x, y) = (a.1[k] as f64, b.1[k] as f64);
    x + (y - x) * (t - a.0) as f64 / (b.0 - a.0) as f64
}

/// Two VMs of two busy vCPUs each on CPUs 0 and 1, one vCPU of each on each CPU (case C,
/// evenly divided), for three seconds, `cpulab host`'s window inside them. Each burner times
/// its own run with its TSC, counting every gap between its iterations under 100 us (a loop
/// rate would not do: this project's KVM emulates guest code, and two burners taking turns on
/// one CPU counted loops 45:55 with their run time 50:50). What `cpulab host` measures from
/// outside is:
/// - each vCPU's run time within 3 points of the share of the window it counted itself running;
/// - each VM's share within 3 points of what its burners counted, and of the model's half of
///   what the two CPUs gave the VMs: all of them less what /proc/stat says went elsewhere
///   (threads besides vCPUs, and this host's own steal where it is itself a guest), so a CI
///   machine's other load moves the expectation rather than failing the test;
/// - the share is the run time the running vCPUs got over the time they wanted.
///
/// And no thread ran outside its CPUs or held more than the window.
#[test]
fn two_vms_of_two_busy_vcpus_get_the_models_share_as_the_burners_count_it() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !kvm(test_name!()) || !two_cpus(test_name!()) {
        return;
    }
    // Each VM's vCPU 0 on CPU 0 and vCPU 1 on CPU 1: each CPU holds one vCPU of each VM.
    let burn = ["--program", "burn", "--vcpus", "2", "--cpus", "0:1"];
    let mut a = Guest::sampled(&burn, "4s");
    let mut b = Guest::sampled(&burn, "3s");
    std::thread::sleep(Duration::from_millis(600));
    let v = finish(watch_with("2s", &["--kvm-events", "off"]));
    // cpulab host's own window, to cut the guests' series at.
    let (w0, w1) = (
        v["window_monotonic_ns"][0].as_u64().unwrap(),
        v["window_monotonic_ns"][1].as_u64().unwrap(),
    );
    assert!(w0 < w1, "{v}");
    let guests = [a.samples(), b.samples()];

    let mut on_cpus = 0.0;
    for g in [&a, &b] {
        let vm = vm_of(&v, g.pid());
        assert_eq!(vm["running_vcpus"], 2, "{vm}");
        let share = vm["share"].as_f64().unwrap();
        assert!(share > 0.0, "{vm}");
        // Worked by hand: four busy vCPUs on two CPUs get half a CPU each.
        if std::thread::available_parallelism().map_or(0, |n| n.get()) == 2 {
            assert_eq!(vm["model"].as_f64(), Some(0.5), "{vm}");
        } else {
            skipped(
                test_name!(),
                "the model's 0.5 is worked by hand for a machine of two CPUs",
            );
        }
        let (mut got, mut want) = (0.0, 0.0);
        for c in vm["vcpus"].as_array().unwrap() {
            on_cpus += c["on_cpu_share"].as_f64().unwrap();
            for cpu in c["cpus"].as_object().unwrap().keys() {
                assert!(
                    cpu_list_has("0-1", cpu.parse().unwrap()),
                    "ran outside 0-1: {c}"
                );
            }
            let on = c["on_cpu_share"].as_f64().unwrap();
            let wait = c["run_queue_share"].as_f64().unwrap();
            // A thread is on a CPU or waiting for one at most all of the window (small slack
            // for the window's edges).
            assert!(on + wait <= 1.05, "{c}");
            got += on;
            want += on + wait;
        }
        // The share is the part of the time they wanted that the running vCPUs got.
        assert!(
            (share - got / want).abs() < 1e-9,
            "{share} against {got}/{want}: {vm}"
        );
    }
    // Four threads held to CPUs 0 and 1 get at most those two CPUs between them.
    assert!(on_cpus <= 2.05, "{on_cpus} CPUs on two: {v}");

    // What CPUs 0 and 1 gave to neither VM, each as cpulab host read /proc/stat.
    let host_cpus = v["host_cpus"].as_array().unwrap();
    let mut taken = 0.0;
    for cpu in [0, 1] {
        let c = host_cpus
            .iter()
            .find(|c| c["cpu"] == cpu)
            .unwrap_or_else(|| panic!("CPU {cpu} not in host_cpus: {v}"));
        let busy = c["busy_share"]
            .as_f64()
            .expect("this host's /proc/stat is read");
        let steal = c["steal_share"]
            .as_f64()
            .expect("this host's /proc/stat is read");
        let guest = c["guest_share"].as_f64().unwrap();
        assert!(
            (0.0..=1.0).contains(&steal) && (0.0..=1.0).contains(&busy),
            "{c}"
        );
        taken += ((busy - guest).max(0.0) + steal) / 2.0;
    }
    let vcpu = |vm: &Value, k: usize| -> (f64, f64) {
        let c = vm["vcpus"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["vcpu"] == k)
            .cloned()
            .unwrap_or_else(|| panic!("vCPU {k}: {vm}"));
        let on = c["on_cpu_share"].as_f64().unwrap();
        (on, on + c["run_queue_share"].as_f64().unwrap())
    };
    // Every check is printed before any fails, so a failure shows all the figures.
    let mut failed = Vec::new();
    for (name, g, series) in [("A", &a, &guests[0]), ("B", &b, &guests[1])] {
        let vm = vm_of(&v, g.pid());
        let mut counted = 0.0;
        let mut wanted = 0.0;
        for k in 0..2 {
            let (on, want) = vcpu(&vm, k);
            let ran = series.ran_share(k, w0, w1);
            counted += ran / 2.0;
            wanted += want / 2.0;
            let line = format!(
                "VM {name} vCPU {k}: cpulab host measured {on:.3} of the window on CPU, the \
                 burner counted itself running {ran:.3} ({:.0} loops/s)",
                series.loop_rate(k, w0, w1)
            );
            eprintln!("{line}");
            if (on - ran).abs() > 0.03 {
                failed.push(line);
            }
        }
        let (share, model) = (vm["share"].as_f64().unwrap(), vm["model"].as_f64().unwrap());
        // Time the vCPUs did not want (steal of this host, the window's edges) leaves the share
        // above the run time by as much.
        let slack = 0.03 + (1.0 - wanted).max(0.0);
        let expected = model * (1.0 - taken);
        let line = format!(
            "VM {name} ({}): cpulab host measured a share of {share:.3}; its burners counted \
             {counted:.3}; the model's {model:.3} of what the CPUs gave the VMs ({:.3}, {:.1}% \
             going elsewhere{}) is {expected:.3}",
            g.pid(),
            1.0 - taken,
            100.0 * taken,
            if taken > 0.1 {
                ": a window this loaded is not the model's, only this check's"
            } else {
                ""
            }
        );
        eprintln!("{line}");
        if (share - counted).abs() > slack || (share - expected).abs() > slack {
            failed.push(line);
        }
    }
    assert!(failed.is_empty(), "{failed:#?}\n{v}");
}

/// Without root, `cpulab host` still runs: the VMs whose fds it may not read are counted and
/// named as not inspected, and KVM's events as not available with the capabilities that fix it.
/// Given those capabilities (CAP_BPF and CAP_PERFMON for the programs, CAP_SYS_PTRACE and
/// CAP_DAC_READ_SEARCH for another user's /proc fds), a user that is not root sees the VM and
/// counts its halts.
#[test]
fn without_root_it_says_what_it_cannot_read_and_capabilities_let_it_count() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !kvm(test_name!()) || !two_cpus(test_name!()) {
        return;
    }
    let halt = Guest::start(&["--program", "halt", "--cpus", "0:1"]);
    let args = [
        "--quiet",
        "--no-history",
        "host",
        "--json",
        "--duration",
        "500ms",
    ];
    let Some(out) = common::cpulab_as_nobody(test_name!(), &args) else {
        return;
    };
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["not_inspected"].as_u64().unwrap() > 0, "{v}");
    assert!(
        v["vms"]
            .as_array()
            .unwrap()
            .iter()
            .all(|vm| vm["pid"] != halt.pid()),
        "root's VM is not nobody's to inspect: {v}"
    );
    assert!(
        v["conditions"]["notes"].to_string().contains("run as root"),
        "{v}"
    );
    let why = v["not_measured"].to_string();
    assert!(
        why.contains("CAP_BPF") && why.contains("CAP_PERFMON"),
        "{v}"
    );
    let caps = ["bpf", "perfmon", "sys_ptrace", "dac_read_search"];
    let Some(out) = common::cpulab_as_nobody_with_caps(test_name!(), &caps, &args) else {
        return;
    };
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let vm = vm_of(&v, halt.pid());
    assert_eq!(vm["vcpus"].as_array().unwrap().len(), 2, "{vm}");
    let halts = vm["kvm"]["halts"].as_u64();
    assert!(
        halts.is_some_and(|h| h > 0),
        "a halting guest's halts: {vm}"
    );
}

/// A busy process that is no VM, pinned beside a vCPU, is named among what else ran on that
/// CPU: who took the CPU the vCPU waited for. No thread runs more than the window.
#[test]
fn a_busy_process_beside_a_vcpu_is_named_on_its_cpu() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !kvm(test_name!()) || !two_cpus(test_name!()) {
        return;
    }
    let _halt = Guest::start(&["--program", "halt", "--cpus", "0:1"]);
    // taskset execs the shell, so the child is the loop itself: killed when this guard drops,
    // and by the kernel (PR_SET_PDEATHSIG) if the test dies first. (Under `timeout`, a killed
    // timeout left its loop running, spoiling every later test on CPU 1.)
    let mut cmd = std::process::Command::new("taskset");
    cmd.args(["-c", "1", "sh", "-c", "while :; do :; done"]);
    // SAFETY: prctl is async-signal-safe and touches only the child being made.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let busy = Guest(cmd.spawn().unwrap());
    let looping = busy.pid();
    std::thread::sleep(Duration::from_millis(200));
    let v = finish(watch_with("1s", &["--kvm-events", "off"]));
    let cpu1 = v["host_cpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["cpu"] == 1)
        .unwrap_or_else(|| panic!("no CPU 1: {v}"))
        .clone();
    let others = cpu1["others"].as_array().unwrap();
    let me = others
        .iter()
        .find(|o| o["tid"] == looping)
        .unwrap_or_else(|| panic!("the busy loop {looping} is not among {cpu1}"));
    assert_eq!(me["comm"], "sh", "{me}");
    let share = me["share"].as_f64().unwrap();
    assert!(share > 0.0 && share <= 1.05, "{me}");
    for o in others {
        assert!(o["share"].as_f64().unwrap() <= 1.05, "{o}");
    }
}

#[test]
fn bad_flags_are_one_line_and_exit_2() {
    // Beside a VM test, its processes would take the CPUs that test measures.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    bad_input(&["host", "--duration", "1ms"]);
    bad_input(&["host", "--pid", "0"]);
    // This test's own process runs no VM.
    let me = std::process::id().to_string();
    bad_input(&["host", "--duration", "100ms", "--pid", &me]);
    bad_input(&["host", "guest", "--program", "bogus"]);
}

fn run(argv: &[Value]) -> bool {
    let words: Vec<&str> = argv.iter().map(|w| w.as_str().unwrap()).collect();
    std::process::Command::new(words[0])
        .args(&words[1..])
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success()
}

fn lines(f: &Value, key: &str) -> Vec<Vec<Value>> {
    f[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_array().unwrap().clone())
        .collect()
}

/// The floating-vCPUs remedy, run for real on a floating VM: verify fails before it and passes
/// after, the next window shows each vCPU on its one CPU, undo puts the old affinity back and
/// verify fails again; its libvirt form validates.
#[test]
fn the_pinning_remedy_pins_each_vcpu_and_its_undo_restores_the_old_affinity() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !kvm(test_name!()) || !two_cpus(test_name!()) {
        return;
    }
    let g = Guest::start(&["--program", "halt", "--cpus", "0-1"]);
    // A halt ping-pong free on two CPUs moves within a few windows.
    let mut finding = None;
    for _ in 0..5 {
        let v = finish(watch("1s"));
        finding = v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| {
                f["id"] == "floating-vcpus"
                    && f["vm"]
                        .as_str()
                        .unwrap()
                        .ends_with(&format!("({})", g.pid()))
            })
            .cloned();
        if finding.is_some() {
            break;
        }
    }
    let f = finding.expect("a free halt ping-pong moved in none of five windows");
    let (apply, verify, undo) = (lines(&f, "apply"), lines(&f, "verify"), lines(&f, "undo"));
    assert_eq!(apply.len(), 2, "{f}");
    assert_eq!(verify.len(), 2, "{f}");
    assert_eq!(undo.len(), 2, "{f}");
    for v in &verify {
        assert!(!run(v), "verify passes before the apply: {v:?}");
    }
    for a in &apply {
        assert!(run(a), "{a:?}");
    }
    for v in &verify {
        assert!(run(v), "verify fails after the apply: {v:?}");
    }
    let v = finish(watch("1s"));
    let vm = vm_of(&v, g.pid());
    for p in f["pins"].as_array().unwrap() {
        let c = vm["vcpus"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["tid"] == p["tid"])
            .unwrap();
        let cpu = p["cpu"].as_u64().unwrap().to_string();
        let ran: Vec<&String> = c["cpus"].as_object().unwrap().keys().collect();
        assert_eq!(ran, vec![&cpu], "pinned vCPU ran elsewhere: {c}");
        assert_eq!(c["affinity_start"], cpu.as_str(), "{c}");
    }
    assert!(
        !v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["id"] == "floating-vcpus" && x["vm"] == f["vm"]),
        "a pinned VM is not floating: {v}"
    );
    for u in &undo {
        assert!(run(u), "{u:?}");
    }
    for v in &verify {
        assert!(!run(v), "verify still passes after the undo: {v:?}");
    }
    for p in f["pins"].as_array().unwrap() {
        let status =
            std::fs::read_to_string(format!("/proc/{}/task/{}/status", g.pid(), p["tid"])).unwrap();
        assert!(
            status.contains(&format!(
                "Cpus_allowed_list:\t{}",
                p["before"].as_str().unwrap()
            )),
            "{status}"
        );
    }
    // The libvirt form, in a minimal domain, is valid libvirt XML.
    if common::installed(test_name!(), &[("virt-xml-validate", "libvirt-clients")]) {
        let dir = tempfile::tempdir().unwrap();
        let xml = dir.path().join("domain.xml");
        std::fs::write(
            &xml,
            format!(
                "<domain type='kvm'>\n<name>t</name>\n<memory unit='KiB'>65536</memory>\n<vcpu placement='static'>2</vcpu>\n{}<os>\n<type arch='x86_64'>hvm</type>\n</os>\n</domain>\n",
                f["libvirt_cputune"].as_str().unwrap()
            ),
        )
        .unwrap();
        let out = std::process::Command::new("virt-xml-validate")
            .arg(&xml)
            .arg("domain")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A real QEMU (Debian's qemu-system-x86; SeaBIOS with nothing to boot is a VM all the same)
/// is found and named by its `-name`, each vCPU with its thread, run time and state.
#[test]
fn a_real_qemu_is_found_and_named_by_its_name() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !kvm(test_name!())
        || !common::installed(test_name!(), &[("qemu-system-x86_64", "qemu-system-x86")])
    {
        return;
    }
    let child = std::process::Command::new("qemu-system-x86_64")
        .args([
            "-enable-kvm",
            "-smp",
            "2",
            "-m",
            "64",
            "-nographic",
            "-nodefaults",
        ])
        .args(["-display", "none", "-name", "cpulab-test,debug-threads=on"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let q = Guest(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !q.threads().iter().any(|t| t.1 == "CPU 1/KVM") {
        assert!(
            Instant::now() < deadline,
            "QEMU's vCPU threads did not start: {:?}",
            q.threads()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = q.pid().to_string();
    let out = cpulab_process()
        .args([
            "--quiet",
            "host",
            "--json",
            "--duration",
            "1s",
            "--pid",
            &pid,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let vm = vm_of(&v, q.pid());
    assert_eq!(vm["name"], "cpulab-test", "{vm}");
    assert_eq!(
        v["vms"].as_array().unwrap().len(),
        1,
        "--pid keeps one VM: {v}"
    );
    let vcpus = vm["vcpus"].as_array().unwrap();
    assert_eq!(vcpus.len(), 2, "{vm}");
    for (i, c) in vcpus.iter().enumerate() {
        assert_eq!(c["thread_name"], format!("CPU {i}/KVM"), "{c}");
        assert_eq!(
            c["tid"].as_i64(),
            Some(q.thread_named(&format!("CPU {i}/KVM"))),
            "{c}"
        );
        assert!(c["on_cpu_share"].is_f64(), "{c}");
        assert!(c["state"].is_string(), "{c}");
    }
    // vCPU 0 runs the BIOS; it ran.
    assert!(vcpus[0]["on_cpu_share"].as_f64().unwrap() > 0.0, "{vm}");
}

/// The machines we do not have, each with a fake QEMU process under its fixture's proc/
/// (generate.py's `write_qemu`) whose vCPUs sit stacked: a 2-socket Intel's libvirt domain on
/// one core's SMT siblings, a 4-CCX EPYC's VM on two cores' siblings of one L3, an Opteron
/// 6376's VM on one module's two cores. `cpulab host` on each (a thread keeps the vCPUs busy
/// through the window) finds the VM and every vCPU thread, names the stacking with its
/// evidence, and pins the vCPUs apart: no two on one core or module, all in the L3 they fit in,
/// the emulator threads on CPUs no vCPU takes.
#[test]
fn vcpus_stacked_on_fixture_machines_are_found_and_pinned_apart() {
    // Beside a VM test, its processes would take the CPUs that test measures.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    use cpulab::topology::{PlacementClass as C, Topology};
    for (name, pid, vm_name, libvirt, vcpus, what) in [
        ("intel-2s", 4242, "db1", true, 2, "SMT siblings of one core"),
        (
            "epyc-4ccx",
            5151,
            "build1",
            false,
            4,
            "SMT siblings of one core",
        ),
        (
            "opteron-6376",
            6161,
            "web1",
            false,
            2,
            "the two cores of one module",
        ),
    ] {
        let (_copy, v) = common::hostfixture::watch(name);
        let topo = Topology::read(&common::fixture(name)).unwrap();
        let vm = vm_of(&v, pid);
        assert_eq!(vm["name"], vm_name, "{name}: {vm}");
        assert_eq!(vm["running_vcpus"], vcpus, "{name}: {vm}");
        let threads = vm["vcpus"].as_array().unwrap();
        assert_eq!(threads.len(), vcpus as usize, "{name}: {vm}");
        for (i, c) in threads.iter().enumerate() {
            assert_eq!(c["vcpu"], i as u64, "{name}: {c}");
            // Even vCPUs halt in KVM_RUN on their fd; odd ones are in guest mode, found by name.
            let by = if i % 2 == 0 { "kvm_run" } else { "thread name" };
            assert_eq!(c["found_by"], by, "{name}: {c}");
            assert_ne!(c["thread_name"], "kvm-nx-lpage-re", "{name}: {c}");
        }
        let f = v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["pid"] == pid)
            .unwrap_or_else(|| panic!("{name}: no finding for {pid}: {v}"));
        assert_eq!(f["id"], "stacked-vcpus", "{name}: {f}");
        let evidence: Vec<&str> = f["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap())
            .collect();
        assert!(
            evidence.iter().any(|e| e.contains(what)),
            "{name}: {evidence:?}"
        );
        assert!(
            evidence.iter().any(|e| e.contains("ran no running vCPU")),
            "{name}: {evidence:?}"
        );
        assert_eq!(f["domain"].as_str(), libvirt.then_some(vm_name), "{name}");
        let pins: Vec<u32> = f["pins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["cpu"].as_u64().unwrap() as u32)
            .collect();
        assert_eq!(pins.len(), vcpus as usize, "{name}: {f}");
        for (i, &a) in pins.iter().enumerate() {
            for &b in &pins[i + 1..] {
                // Distinct cores (a module counts as one), then one L3 while the VM fits in it.
                assert_eq!(
                    topo.class(a, b),
                    C::SharedLlc,
                    "{name}: pins {a} and {b} of {pins:?}"
                );
            }
        }
        let emulator = f["emulator"].as_str().unwrap();
        for p in &pins {
            assert!(!cpu_list_has(emulator, *p), "{name}: {emulator} and {p}");
        }
        assert!(
            f["libvirt_cputune"]
                .as_str()
                .unwrap()
                .contains(&format!("<emulatorpin cpuset='{emulator}'/>")),
            "{name}: {f}"
        );
    }
}

#[test]
fn expect_absent_takes_only_the_ids_cpulab_host_has() {
    // Beside a VM test, its processes would take the CPUs that test measures.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    bad_input(&["host", "--duration", "100ms", "--expect-absent", "stacked"]);
}

/// `--expect-absent` exits 1 while the finding is there (a fixture's stacked VM, busy through
/// the window), naming it, and 0 for a finding that is not there.
#[test]
fn expect_absent_exits_1_while_the_stacking_is_there() {
    let (_c, out) = common::hostfixture::run("opteron-6376", &["--expect-absent", "stacked-vcpus"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("still present: stacked-vcpus on web1 (6161)"),
        "{err}"
    );
    let (_c, out) =
        common::hostfixture::run("opteron-6376", &["--expect-absent", "cpu-contention"]);
    common::assert_success(&out);
}
