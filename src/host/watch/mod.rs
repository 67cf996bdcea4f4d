//! `cpulab host`: the VMs on this KVM host seen from outside, over a window: each VM and its
//! vCPU threads ([`discover`]), where each vCPU ran and how often it moved, its run time and
//! run-queue wait (what its guest sees as steal), the share of CPU each VM's running vCPUs got
//! against the model, and the host CPUs they shared.
//!
//! KVM's own events per vCPU thread (halts, halt polls won and lost, IPIs sent, poll-window
//! changes, exits where KVM traces them) are counted in the kernel by BPF programs on KVM's
//! tracepoints ([`kvm`], attached by [`tracing`]); where they cannot load (not root, no BPF, no
//! tracefs) the window goes on with /proc and says why.

pub mod discover;
pub mod findings;
pub mod kvm;
pub mod render;
pub mod sample;
pub mod tracing;

use crate::cpulist::CpuSet;
use crate::error::bad_input;
use crate::experiment::Progress;
use crate::machine::{Conditions, Machine};
use anyhow::Result;
use discover::FoundVm;
use sample::Track;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Why KVM's events are absent from a window that was told not to count them.
pub const NOT_ASKED: &str = "not counted: --kvm-events off was given (the default, auto, counts \
     them with BPF on KVM's raw tracepoints)";

/// How often each vCPU thread is looked at.
const LOOK_EVERY: Duration = Duration::from_millis(10);
/// A vCPU that wanted at least this share of the window (on a CPU or waiting for one) counts as
/// running.
const BUSY: f64 = 0.5;

#[derive(Debug, Clone, clap::Args)]
pub struct WatchArgs {
    /// How long to watch.
    #[arg(long, value_name = "TIME", default_value = "5s")]
    pub duration: String,
    /// Only the VM run by this process.
    #[arg(long, value_name = "PID")]
    pub pid: Option<i32>,
    /// Exit 1 when any of these findings is present, 0 when none is: the check that a remedy
    /// holds (`stacked-vcpus`, comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "ID")]
    pub expect_absent: Vec<String>,
    /// KVM's own events per vCPU thread (halts, polls won and lost, IPIs, exits), counted by
    /// BPF programs that run inside every watched vCPU's halts and IPIs. auto: on KVM's raw
    /// tracepoints, whose cost fits the budget (docs/host.md), and not at all where they cannot
    /// be used; on: also on perf tracepoint events where raw ones cannot be used (which cost
    /// the VMs more); off: /proc only.
    #[arg(
        long,
        value_name = "WHEN",
        default_value = "auto",
        num_args = 0..=1,
        default_missing_value = "on",
        value_parser = ["auto", "on", "off"]
    )]
    pub kvm_events: String,
    /// With --kvm-events: have the kernel time every run of the programs and report what they
    /// cost (runs, mean ns per run, share of a CPU over the window). Needs CAP_SYS_ADMIN.
    #[arg(long)]
    pub bpf_program_costs: bool,
    #[command(flatten)]
    pub output: crate::emit::OutputArgs,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WatchSettings {
    #[serde(rename = "duration_s", with = "crate::units::serde_secs")]
    pub duration: Duration,
    pub pid: Option<i32>,
    /// KVM's events were to be counted (`--kvm-events` auto or on).
    #[serde(default)]
    pub kvm_events: bool,
    /// On perf tracepoint events too, where raw tracepoints cannot be used (`--kvm-events on`).
    #[serde(default)]
    pub kvm_events_fallback: bool,
    /// Their programs timed (`--bpf-program-costs`).
    #[serde(default)]
    pub bpf_program_costs: bool,
}

pub fn settings(a: &WatchArgs) -> Result<WatchSettings> {
    let duration = crate::units::flag_duration("duration", &a.duration)?;
    if duration < Duration::from_millis(100) || duration > Duration::from_secs(3600) {
        return Err(bad_input(format!(
            "--duration {}: give 100ms to 1h",
            a.duration
        )));
    }
    if let Some(p) = a.pid
        && p <= 0
    {
        return Err(bad_input(format!("--pid {p}: give a process id above 0")));
    }
    if a.bpf_program_costs && a.kvm_events == "off" {
        return Err(bad_input(
            "--bpf-program-costs times KVM's programs: drop --kvm-events off",
        ));
    }
    Ok(WatchSettings {
        duration,
        pid: a.pid,
        kvm_events: a.kvm_events != "off",
        kvm_events_fallback: a.kvm_events == "on",
        bpf_program_costs: a.bpf_program_costs,
    })
}

/// One vCPU over the window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VcpuView {
    pub vcpu: u32,
    /// Its thread; `None` when no look tied one to it.
    pub tid: Option<i32>,
    pub thread_name: Option<String>,
    /// `kvm_run` or `thread name`.
    pub found_by: Option<String>,
    /// Share of its on-CPU time on each host CPU.
    pub cpus: BTreeMap<u32, f64>,
    /// The kernel's count of its migrations over the window (`se.nr_migrations`); `None` where
    /// the kernel does not count them (no CONFIG_SCHED_DEBUG).
    pub migrations: Option<u64>,
    /// Looks that found it on another CPU than the look before: a lower bound of its moves.
    pub moves_seen: u64,
    pub on_cpu_share: Option<f64>,
    /// Run-queue wait over the window: what its guest sees as steal.
    pub run_queue_share: Option<f64>,
    pub affinity_start: Option<String>,
    pub affinity_end: Option<String>,
    /// The thread's state at the last look (`R` running or runnable, `S` halted in `KVM_RUN`).
    pub state: Option<char>,
    /// Its context switches over the window: each voluntary one a halt that slept (the thread
    /// blocked in `KVM_RUN`; a halt won by polling does not switch), each involuntary one a
    /// preemption by another thread.
    #[serde(default)]
    pub switches: Option<Switches>,
    /// KVM's events of this vCPU's thread over the window; `None` with `kvm_reason` where they
    /// were not counted.
    #[serde(default)]
    pub kvm: Option<kvm::KvmEvents>,
    #[serde(default)]
    pub kvm_reason: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Switches {
    pub voluntary: u64,
    pub involuntary: u64,
}

/// A thread's affinity and switches at the first look.
type Start = (String, Option<(u64, u64)>);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VmView {
    pub pid: i32,
    pub name: String,
    pub comm: String,
    /// The VMs this process runs (`anon_inode:kvm-vm` fds); their vCPUs are listed together.
    pub vm_fds: u32,
    pub vcpus: Vec<VcpuView>,
    /// vCPUs that wanted half the window or more (on a CPU or waiting for one).
    pub running_vcpus: u32,
    /// What its running vCPUs got of what they wanted: on-CPU time over on-CPU plus run-queue.
    pub share: Option<f64>,
    /// The model: host CPUs shared evenly by every running vCPU on the host, at most 1.
    pub model: Option<f64>,
    /// Other VMs whose vCPUs ran on the CPUs this one's did.
    pub shares_cpus_with: Vec<String>,
    /// Its vCPUs' KVM events summed; `None` with `kvm_reason` where any vCPU's are missing.
    #[serde(default)]
    pub kvm: Option<kvm::KvmEvents>,
    #[serde(default)]
    pub kvm_reason: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostCpuView {
    pub cpu: u32,
    /// Its busy time over the window from /proc/stat (user, nice, system, irq, softirq), seconds
    /// per second: beside `guest_share`, what else ran there.
    pub busy_share: Option<f64>,
    /// Its steal over the window from /proc/stat, seconds per second: where this host is itself
    /// a guest, the time its own hypervisor ran something else on it, which no VM here got.
    #[serde(default)]
    pub steal_share: Option<f64>,
    /// Time it spent running vCPU threads, seconds per second.
    pub guest_share: f64,
    /// The VMs whose vCPUs ran on it.
    pub vms: Vec<String>,
    /// The other threads that ran most on it over the window (at most three of 1% or more),
    /// each by the CPU its time ended on: who else took the CPU its vCPUs waited for.
    #[serde(default)]
    pub others: Vec<OtherThread>,
}

/// A thread other than a vCPU that ran on a host CPU over the window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OtherThread {
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
    /// Its run time over the window, seconds per second (all of it put on its last CPU).
    pub share: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostReport {
    pub settings: WatchSettings,
    pub conditions: Conditions,
    pub interval_s: f64,
    /// The window's first and last instants, CLOCK_MONOTONIC ns, so another process's series
    /// (a guest's own counts, `cpulab host guest --series`) can be cut at the same instants;
    /// `None` in results from before it was recorded or where the clock could not be read.
    #[serde(default)]
    pub window_monotonic_ns: Option<(u64, u64)>,
    pub vms: Vec<VmView>,
    pub host_cpus: Vec<HostCpuView>,
    /// Processes whose fds this user may not read (they may run VMs).
    pub not_inspected: usize,
    /// What this version does not measure, each with why.
    pub not_measured: Vec<(String, String)>,
    /// What to act on, with evidence and remedy.
    #[serde(default)]
    pub findings: Vec<findings::HostFinding>,
    /// KVM events the programs could not count (a thread or an exit reason whose table bucket
    /// was full); `None` where the programs did not run.
    #[serde(default)]
    pub kvm_events_lost: Option<u64>,
    /// What each KVM program cost, as the kernel timed it (`--bpf-program-costs`; empty
    /// otherwise).
    #[serde(default)]
    pub kvm_program_costs: Vec<crate::wakeups::ProgramCost>,
    /// The host's hardware virtualisation (its CPU flags), which names the exit reasons; `None`
    /// where neither `vmx` nor `svm` is listed (a KVM without them, as kvm_pvm).
    #[serde(default)]
    pub exit_isa: Option<kvm::Isa>,
    /// The module's `halt_poll_ns` (`/sys/module/kvm/parameters/halt_poll_ns`), ns, and whether
    /// this user may write it; `None` where it is not there.
    #[serde(default)]
    pub halt_poll_ns: Option<u64>,
    #[serde(default)]
    pub halt_poll_ns_writable: Option<bool>,
}

pub fn measure(
    machine: &Machine,
    s: &WatchSettings,
    mut conditions: Conditions,
    progress: &Progress,
) -> Result<HostReport> {
    let root = &machine.root;
    let (mut vms, not_inspected) = discover::scan(root);
    if let Some(p) = s.pid {
        vms.retain(|v| v.pid == p);
        if vms.is_empty() {
            return Err(bad_input(format!(
                "--pid {p}: no VM there (the process holds no anon_inode:kvm-vm fd); `cpulab host` without --pid lists them"
            )));
        }
    }
    if not_inspected > 0 {
        conditions.notes.push(format!(
            "{not_inspected} processes could not be inspected (their fds are not this user's to read): run as root to see every VM"
        ));
    }
    // A vCPU thread that never halts shows no KVM_RUN and, unnamed, no name: KVM's debugfs
    // names every vCPU's thread. Read once, only when the scan left a VM incomplete, and only
    // on this machine (a fixture root has no debugfs of its own).
    if vms.iter().any(|v| !v.complete()) && root == std::path::Path::new("/") {
        let pids: Vec<i32> = vms.iter().map(|v| v.pid).collect();
        let named = crate::bpf::tracefs::with_debugfs(|dir| {
            Ok(pids
                .iter()
                .map(|&p| (p, discover::debugfs_vcpu_threads(dir, p)))
                .collect::<BTreeMap<i32, BTreeMap<i32, u32>>>())
        });
        match named {
            Ok(named) => {
                for vm in &mut vms {
                    if let Some(n) = named.get(&vm.pid) {
                        vm.tie_from_debugfs(root, n);
                    }
                }
            }
            Err(why) => conditions.notes.push(format!(
                "KVM's debugfs could not be read ({why}), so a vCPU thread that never halts in \
                 the window and has no VMM's name is not found"
            )),
        }
    }
    progress.step(&format!("watching {} VMs for {:?}", vms.len(), s.duration));
    let stat_before = proc_stat(root);
    let threads_before = sample::all_threads(root);
    let tracing = if s.kvm_events {
        tracing::KvmTracing::start(root, s.bpf_program_costs, s.kvm_events_fallback)
    } else {
        Err(NOT_ASKED.to_string())
    };
    let start = Instant::now();
    let window_start = crate::host::monotonic_ns().ok();
    let mut tracks: BTreeMap<(i32, i32), Track> = BTreeMap::new();
    let mut affinity_start: BTreeMap<(i32, i32), Option<Start>> = BTreeMap::new();
    while start.elapsed() < s.duration {
        for vm in &mut vms {
            if !vm.complete() {
                vm.tie_threads(root);
            }
            for &tid in vm.threads.keys() {
                affinity_start
                    .entry((vm.pid, tid))
                    .or_insert_with(|| sample::status(root, vm.pid, tid));
                if let Some(l) = sample::look(root, vm.pid, tid) {
                    tracks.entry((vm.pid, tid)).or_default().add(l);
                }
            }
        }
        std::thread::sleep(LOOK_EVERY);
    }
    let interval = start.elapsed().as_secs_f64();
    let window_end = crate::host::monotonic_ns().ok();
    let kvm = tracing.and_then(tracing::KvmTracing::finish);
    let busy = busy_shares(&stat_before, &proc_stat(root));
    let mut r = report(
        machine,
        s,
        conditions,
        interval,
        &vms,
        &tracks,
        &affinity_start,
        not_inspected,
    );
    let vcpu_tids: std::collections::BTreeSet<i32> =
        vms.iter().flat_map(|v| v.threads.keys().copied()).collect();
    let others = sample::others_by_cpu(
        &threads_before,
        &sample::all_threads(root),
        &vcpu_tids,
        interval,
        (3, 0.01),
    );
    for c in &mut r.host_cpus {
        c.busy_share = busy.get(&c.cpu).map(|b| b.0);
        c.steal_share = busy.get(&c.cpu).map(|b| b.1);
        c.others = others
            .get(&c.cpu)
            .into_iter()
            .flatten()
            .map(|&(pid, tid, share)| OtherThread {
                pid,
                tid,
                comm: std::fs::read_to_string(root.join(format!("proc/{pid}/task/{tid}/comm")))
                    .map_or_else(|_| "?".to_string(), |c| c.trim().to_string()),
                share,
            })
            .collect();
    }
    r.window_monotonic_ns = window_start.zip(window_end);
    add_kvm(&mut r, &kvm);
    let param = root.join("sys/module/kvm/parameters/halt_poll_ns");
    r.halt_poll_ns = std::fs::read_to_string(&param)
        .ok()
        .and_then(|t| t.trim().parse().ok());
    // A module parameter of mode 0444 refuses root too: its mode decides, then access(2).
    r.halt_poll_ns_writable = r.halt_poll_ns.map(|_| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(&param).is_ok_and(|m| m.permissions().mode() & 0o222 != 0)
            && nix::unistd::access(&param, nix::unistd::AccessFlags::W_OK).is_ok()
    });
    let cgroup_of = |pid: i32| {
        std::fs::read_to_string(root.join(format!("proc/{pid}/cgroup"))).unwrap_or_default()
    };
    r.findings = findings::findings(&r, &machine.topology, &machine.allowed, &cgroup_of);
    Ok(r)
}

fn proc_stat(root: &std::path::Path) -> BTreeMap<u32, crate::counters::parse::CpuTimes> {
    std::fs::read_to_string(root.join("proc/stat"))
        .map(|t| crate::counters::parse::parse_proc_stat(&t))
        .unwrap_or_default()
}

/// Each CPU's busy ticks and steal ticks over all its ticks between two readings.
fn busy_shares(
    a: &BTreeMap<u32, crate::counters::parse::CpuTimes>,
    b: &BTreeMap<u32, crate::counters::parse::CpuTimes>,
) -> BTreeMap<u32, (f64, f64)> {
    b.iter()
        .filter_map(|(cpu, y)| {
            let x = a.get(cpu)?;
            let total = y.total().checked_sub(x.total()).filter(|t| *t > 0)?;
            let busy = y.busy().checked_sub(x.busy())?;
            let steal = y.steal.checked_sub(x.steal)?;
            Some((
                *cpu,
                (busy as f64 / total as f64, steal as f64 / total as f64),
            ))
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn report(
    machine: &Machine,
    s: &WatchSettings,
    conditions: Conditions,
    interval: f64,
    vms: &[FoundVm],
    tracks: &BTreeMap<(i32, i32), Track>,
    affinity_start: &BTreeMap<(i32, i32), Option<Start>>,
    not_inspected: usize,
) -> HostReport {
    let root = &machine.root;
    let mut views: Vec<VmView> = vms
        .iter()
        .map(|vm| {
            let mut vcpus: Vec<VcpuView> = vm
                .threads
                .iter()
                .map(|(&tid, f)| {
                    let track = tracks.get(&(vm.pid, tid));
                    vcpu_view(root, vm, tid, f, track, affinity_start, interval)
                })
                .collect();
            vcpus.sort_by_key(|c| (c.vcpu, c.tid));
            // vCPUs whose thread no look found, by index.
            let seen: std::collections::BTreeSet<u32> = vcpus.iter().map(|c| c.vcpu).collect();
            for v in vm.indexes().difference(&seen) {
                vcpus.push(missing_vcpu(*v));
            }
            VmView {
                pid: vm.pid,
                name: vm.name.clone(),
                comm: vm.comm.clone(),
                vm_fds: vm.vm_fds,
                vcpus,
                running_vcpus: 0,
                share: None,
                model: None,
                shares_cpus_with: Vec::new(),
                kvm: None,
                kvm_reason: None,
            }
        })
        .collect();
    let wanted = |c: &VcpuView| c.on_cpu_share.unwrap_or(0.0) + c.run_queue_share.unwrap_or(0.0);
    let running_total: u32 = views
        .iter()
        .flat_map(|v| &v.vcpus)
        .filter(|c| wanted(c) >= BUSY)
        .count() as u32;
    let host_cpus = machine.allowed.len() as f64;
    for v in &mut views {
        let busy: Vec<&VcpuView> = v.vcpus.iter().filter(|c| wanted(c) >= BUSY).collect();
        v.running_vcpus = busy.len() as u32;
        let got: f64 = busy.iter().map(|c| c.on_cpu_share.unwrap_or(0.0)).sum();
        let want: f64 = busy.iter().map(|c| wanted(c)).sum();
        v.share = (want > 0.0).then(|| got / want);
        v.model = (running_total > 0 && !busy.is_empty())
            .then(|| (host_cpus / f64::from(running_total)).min(1.0));
    }
    let cpu_vms = cpu_users(&views);
    for v in &mut views {
        let mine: CpuSet = v
            .vcpus
            .iter()
            .flat_map(|c| c.cpus.keys().copied())
            .collect();
        let mut others: Vec<String> = cpu_vms
            .iter()
            .filter(|(cpu, _)| mine.contains(**cpu))
            .flat_map(|(_, names)| names.iter().map(|(_, n)| n.clone()))
            .filter(|n| *n != label(v))
            .collect();
        others.sort();
        others.dedup();
        v.shares_cpus_with = others;
    }
    let host_cpus = cpu_vms
        .into_iter()
        .map(|(cpu, users)| HostCpuView {
            cpu,
            busy_share: None,
            steal_share: None,
            guest_share: users.iter().map(|(s, _)| s).sum(),
            vms: {
                let mut n: Vec<String> = users.into_iter().map(|(_, n)| n).collect();
                n.sort();
                n.dedup();
                n
            },
            others: Vec::new(),
        })
        .collect();
    HostReport {
        settings: s.clone(),
        conditions,
        interval_s: interval,
        window_monotonic_ns: None,
        vms: views,
        host_cpus,
        not_inspected,
        findings: Vec::new(),
        not_measured: Vec::new(),
        kvm_events_lost: None,
        kvm_program_costs: Vec::new(),
        exit_isa: std::fs::read_to_string(machine.root.join("proc/cpuinfo"))
            .ok()
            .and_then(|c| kvm::Isa::from_cpuinfo(&c)),
        halt_poll_ns: None,
        halt_poll_ns_writable: None,
    }
}

/// Each vCPU's KVM events (by its thread) and each VM's totals, or why they are not counted.
fn add_kvm(r: &mut HostReport, kvm: &Result<tracing::KvmReading, String>) {
    let k = match kvm {
        Ok(k) => k,
        Err(why) => {
            let why = format!("not available, because {why}");
            for vm in &mut r.vms {
                vm.kvm_reason = Some(why.clone());
                for c in &mut vm.vcpus {
                    c.kvm_reason = Some(why.clone());
                }
            }
            r.not_measured.push((
                "halts, halt polls won and lost, exits, IPIs".into(),
                format!(
                    "{why}; KVM's own statistics are the VMM's alone to read (KVM refuses another \
                     process's ioctls)"
                ),
            ));
            return;
        }
    };
    for vm in &mut r.vms {
        for c in &mut vm.vcpus {
            match c.tid.and_then(|t| u32::try_from(t).ok()) {
                Some(t) => c.kvm = Some(k.events(t)),
                None => {
                    c.kvm_reason =
                        Some("not available, because no thread was tied to this vCPU".into())
                }
            }
        }
        if vm.vcpus.iter().all(|c| c.kvm.is_some()) {
            vm.kvm = Some(kvm::KvmEvents::total(
                vm.vcpus.iter().filter_map(|c| c.kvm.as_ref()),
            ));
        } else {
            vm.kvm_reason =
                Some("not available, because a vCPU's thread was not found to count it".into());
        }
    }
    if let Some(why) = &k.exits_unavailable {
        r.not_measured.push(("exits".into(), why.clone()));
    }
    r.kvm_events_lost = Some(k.lost_threads + k.lost_exits);
    r.conditions
        .notes
        .push(format!("KVM's events were counted by BPF on {}", k.source));
    r.kvm_program_costs = k.program_costs.clone();
    if k.lost_threads + k.lost_exits > 0 {
        r.conditions.notes.push(format!(
            "{} KVM events were not counted: their thread's table bucket was full ({} threads fired KVM events; the table holds {} per bucket of {})",
            k.lost_threads + k.lost_exits,
            k.threads.len(),
            kvm::THREAD_WAYS,
            kvm::THREAD_BUCKETS
        ));
    }
}

/// At most the CPU time, ns, a vCPU's lost polls burnt over the window
/// ([`kvm::KvmEvents::lost_poll_bound_ns`] with its on-CPU time).
pub fn lost_poll_ns(c: &VcpuView, r: &HostReport) -> Option<f64> {
    let on_cpu = c.on_cpu_share.map(|s| s * r.interval_s * 1e9);
    c.kvm.as_ref()?.lost_poll_bound_ns(on_cpu)
}

/// `name (pid)`: VMs may share a name.
pub fn label(v: &VmView) -> String {
    format!("{} ({})", v.name, v.pid)
}

/// Per host CPU, each VM's vCPUs' on-CPU time there (seconds per second) and its label.
fn cpu_users(views: &[VmView]) -> BTreeMap<u32, Vec<(f64, String)>> {
    let mut m: BTreeMap<u32, Vec<(f64, String)>> = BTreeMap::new();
    for v in views {
        for c in &v.vcpus {
            let on = c.on_cpu_share.unwrap_or(0.0);
            for (&cpu, &share) in &c.cpus {
                m.entry(cpu).or_default().push((on * share, label(v)));
            }
        }
    }
    m
}

fn missing_vcpu(v: u32) -> VcpuView {
    VcpuView {
        vcpu: v,
        tid: None,
        thread_name: None,
        found_by: None,
        cpus: BTreeMap::new(),
        migrations: None,
        moves_seen: 0,
        on_cpu_share: None,
        run_queue_share: None,
        affinity_start: None,
        affinity_end: None,
        state: None,
        switches: None,
        kvm: None,
        kvm_reason: None,
    }
}

fn vcpu_view(
    root: &std::path::Path,
    vm: &FoundVm,
    tid: i32,
    found: &discover::FoundThread,
    track: Option<&Track>,
    affinity_start: &BTreeMap<(i32, i32), Option<Start>>,
    interval: f64,
) -> VcpuView {
    let v = found.vcpu;
    let start = affinity_start.get(&(vm.pid, tid)).cloned().flatten();
    let end = sample::status(root, vm.pid, tid);
    let tid = Some(tid);
    let totals = track.and_then(|t| t.totals());
    let ns = interval * 1e9;
    let cpus = track.map_or_else(BTreeMap::new, |t| {
        let sum: u64 = t.on_cpu_ns.values().sum();
        t.on_cpu_ns
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(&c, &n)| (c, n as f64 / sum.max(1) as f64))
            .collect()
    });
    VcpuView {
        vcpu: v,
        tid,
        thread_name: tid.and_then(|t| {
            std::fs::read_to_string(root.join(format!("proc/{}/task/{t}/comm", vm.pid)))
                .ok()
                .map(|s| s.trim().to_string())
        }),
        found_by: Some(found.found_by.clone()),
        cpus,
        migrations: totals.and_then(|t| t.2),
        moves_seen: track.map_or(0, |t| t.moves_seen),
        on_cpu_share: totals.map(|t| t.0 as f64 / ns),
        run_queue_share: totals.map(|t| t.1 as f64 / ns),
        affinity_start: start.as_ref().map(|s| s.0.clone()),
        affinity_end: end.as_ref().map(|s| s.0.clone()),
        // Counts only grow for a thread: one that read lower (a thread id reused) is absent.
        switches: match (start.and_then(|s| s.1), end.and_then(|s| s.1)) {
            (Some(a), Some(b)) => {
                b.0.checked_sub(a.0)
                    .zip(b.1.checked_sub(a.1))
                    .map(|(voluntary, involuntary)| Switches {
                        voluntary,
                        involuntary,
                    })
            }
            _ => None,
        },
        state: track.and_then(|t| t.last).map(|l| l.state),
        kvm: None,
        kvm_reason: None,
    }
}
