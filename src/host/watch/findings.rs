//! What a `cpulab host` window shows that an operator should act on, each finding with its
//! evidence and its remedy as commands (argument vectors, quoted once when printed), with a
//! verify that passes only once the remedy holds and an undo that puts back what was there.
//!
//! - **floating vCPUs** (the Hyper-V case): a VM whose vCPU threads may run on several host
//!   CPUs and moved during the window. Remedy: one host CPU per vCPU, chosen from the topology
//!   (one hardware thread per core first, in one last-level cache where the VM fits, each VM on
//!   CPUs of its own where there are enough), as `taskset -p` lines for each thread and, for a
//!   libvirt domain, the `<cputune>` to put in its XML with `virsh vcpupin` for the running one.
//! - **stacked vCPUs** (the Xen case): two running vCPUs of one VM spent most of their time
//!   on one core's SMT siblings, the two cores of one module (a shared L2) or one CPU, while a
//!   core of the host ran no running vCPU at all. Remedy: the same pins, one core each first.
//! - **CPU contention** (the fair-share case): a VM whose running vCPUs got clearly less than
//!   they wanted while another VM's vCPUs ran on the same CPUs.
//! - **halt polling that does not pay** (from KVM's tracepoints): a VM whose vCPUs polled (their
//!   window grew or was seen set) and still slept in nearly every halt, or whose polls lost burnt
//!   more CPU than the polls won. Remedy: a smaller `halt_poll_ns`, its value derived from the
//!   halts the window measured ([`poll_limit`]).
//! - **an exit storm on an idle guest** (where `kvm_exit` fires): a VM whose vCPUs were mostly
//!   halted and still exited thousands of times a second, with the reasons that did it.

use super::{HostReport, VmView, label};
use crate::topology::Topology;
use serde::{Deserialize, Serialize};

/// Every finding's id, as `--json` and `--expect-absent` name them.
pub const IDS: &[&str] = &[
    "floating-vcpus",
    "stacked-vcpus",
    "cpu-contention",
    "halt-poll-waste",
    "idle-exit-storm",
];

/// One command, as its words.
pub type Argv = Vec<String>;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pin {
    pub vcpu: u32,
    pub tid: i32,
    pub cpu: u32,
    /// The thread's affinity when the window ended: what undo puts back.
    pub before: String,
}

/// A kernel module parameter a finding's remedy sets on this host (`kvm`'s `halt_poll_ns`),
/// as data: `cpulab remedy` writes it as the doctor's module-parameter change (`modprobe.d`,
/// the value now through `/sys/module`, the kernel command line for a built-in module).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModuleParam {
    pub module: String,
    pub param: String,
    pub value: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostFinding {
    /// `floating-vcpus`, `stacked-vcpus`, `cpu-contention`, `halt-poll-waste` or
    /// `idle-exit-storm`.
    pub id: String,
    pub vm: String,
    /// The VM's process (absent in results written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// The libvirt domain, when libvirt runs the VM (its process sits in `machine.slice`):
    /// QEMU's `-name guest=NAME`, which libvirt sets to the domain's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    pub evidence: Vec<String>,
    /// The CPUs chosen, one per vCPU (floating vCPUs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pins: Vec<Pin>,
    pub apply: Vec<Argv>,
    /// Each exits 0 once the remedy holds, non-zero before.
    pub verify: Vec<Argv>,
    pub undo: Vec<Argv>,
    /// The host CPUs for the VM's emulator threads (`<emulatorpin>`): the allowed CPUs no
    /// pinned vCPU takes, where there are any ([`emulator_cpus`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emulator: Option<String>,
    /// For a libvirt domain: the `<cputune>` element for its XML (`virsh edit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub libvirt_cputune: Option<String>,
    /// Module parameters its remedy sets on this host (`kvm`'s `halt_poll_ns`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub module_params: Vec<ModuleParam>,
    pub notes: Vec<String>,
}

/// The CPUs for a VM's emulator threads: the allowed CPUs that no pinned vCPU of any VM takes
/// (`used_by_all`), else those none of this VM's vCPUs take (`used_by_vm`), else every allowed
/// CPU, with why they share.
pub fn emulator_cpus(
    allowed: &crate::cpulist::CpuSet,
    used_by_all: &crate::cpulist::CpuSet,
    used_by_vm: &crate::cpulist::CpuSet,
) -> (crate::cpulist::CpuSet, Option<String>) {
    let free = allowed.difference(used_by_all);
    if !free.is_empty() {
        return (free, None);
    }
    let free = allowed.difference(used_by_vm);
    if !free.is_empty() {
        return (
            free,
            Some(format!(
                "every allowed CPU ({allowed}) carries a pinned vCPU: the emulator threads run \
                 on CPUs of the other VMs' vCPUs, none of this VM's"
            )),
        );
    }
    (
        allowed.clone(),
        Some(format!(
            "every allowed CPU ({allowed}) carries one of this VM's vCPUs: the emulator threads \
             share them (I/O and QEMU's own work take time from the vCPUs); a CPU kept for \
             them needs one vCPU fewer or a CPU more"
        )),
    )
}

/// A VM is libvirt's when its process sits in libvirt's `machine.slice`.
pub fn is_libvirt(cgroup: &str) -> bool {
    cgroup.contains("machine.slice") || cgroup.contains("machine-qemu")
}

/// The CPUs to pin to, in the order to hand them out: one hardware thread of each core (a
/// module's two cores counting as one) first, cores grouped by last-level cache with the
/// largest group first, then the siblings and module partners.
pub fn pin_order(topo: &Topology, allowed: &crate::cpulist::CpuSet) -> Vec<u32> {
    let mut groups: Vec<crate::cpulist::CpuSet> = Vec::new();
    for c in allowed.iter() {
        let llc = topo
            .cpu(c)
            .and_then(|x| x.llc().cloned())
            .unwrap_or_else(|| crate::cpulist::CpuSet::from_iter_u32([c]))
            .intersection(allowed);
        if !groups.contains(&llc) {
            groups.push(llc);
        }
    }
    groups.sort_by_key(|g| std::cmp::Reverse(g.len()));
    let (mut first, mut rest) = (Vec::new(), Vec::new());
    for g in &groups {
        let mut cores_seen = crate::cpulist::CpuSet::new();
        for c in g.iter() {
            if cores_seen.contains(c) {
                rest.push(c);
                continue;
            }
            first.push(c);
            if let Some(x) = topo.cpu(c) {
                // A module (two cores sharing an L2 below the last level) counts as one core.
                let module = x
                    .llc_level()
                    .filter(|&l| l > 2)
                    .and_then(|_| x.sharing_at(2))
                    .cloned()
                    .unwrap_or_default();
                for s in x.smt_siblings.iter().chain(module.iter()) {
                    cores_seen.insert(s);
                }
            }
        }
    }
    first.extend(rest);
    first
}

/// The `awk` check that thread `tid` of `pid` may run on `cpus` exactly.
pub fn affinity_is(pid: i32, tid: i32, cpus: &str) -> Argv {
    vec![
        "awk".into(),
        format!("$1 == \"Cpus_allowed_list:\" {{ ok = ($2 == \"{cpus}\") }} END {{ exit !ok }}"),
        format!("/proc/{pid}/task/{tid}/status"),
    ]
}

fn taskset(cpus: &str, tid: i32) -> Argv {
    ["taskset", "-pc", cpus, &tid.to_string()]
        .map(String::from)
        .to_vec()
}

/// `taskset -p` for each thread; for a libvirt domain `virsh vcpupin --live` instead, which
/// libvirt keeps in its own record of the running domain.
fn apply_lines(pins: &[Pin], libvirt_domain: Option<&str>) -> Vec<Argv> {
    pins.iter()
        .map(|p| match libvirt_domain {
            Some(d) => [
                "virsh",
                "vcpupin",
                d,
                &p.vcpu.to_string(),
                &p.cpu.to_string(),
                "--live",
            ]
            .map(String::from)
            .to_vec(),
            None => taskset(&p.cpu.to_string(), p.tid),
        })
        .collect()
}

/// The `<cputune>` of `pins` and the emulator threads on `emulator`, for a domain's XML.
pub fn cputune(pins: &[Pin], emulator: &str) -> String {
    let mut x = String::from("<cputune>\n");
    for p in pins {
        x += &format!("  <vcpupin vcpu='{}' cpuset='{}'/>\n", p.vcpu, p.cpu);
    }
    x += &format!("  <emulatorpin cpuset='{emulator}'/>\n</cputune>\n");
    x
}

fn floating(vm: &VmView) -> bool {
    vm.vcpus.iter().any(|c| {
        let wide = c
            .affinity_end
            .as_deref()
            .and_then(|a| crate::cpulist::CpuSet::parse_list(a, false).ok())
            .is_some_and(|s| s.len() > 1);
        let moved = c.migrations.unwrap_or(c.moves_seen) > 0 || c.cpus.len() > 1;
        wide && moved
    })
}

/// The findings of a window. `cgroups` gives each VM process's cgroup line (libvirt or not).
pub fn findings(
    r: &HostReport,
    topo: &Topology,
    allowed: &crate::cpulist::CpuSet,
    cgroup_of: &dyn Fn(i32) -> String,
) -> Vec<HostFinding> {
    let order = pin_order(topo, allowed);
    let mut next = 0usize;
    let mut out = Vec::new();
    for vm in r.vms.iter().filter(|v| floating(v)) {
        let evidence = vm
            .vcpus
            .iter()
            .filter(|c| c.tid.is_some())
            .map(|c| {
                let ran: Vec<String> = c.cpus.keys().map(|k| k.to_string()).collect();
                format!(
                    "vCPU {} (thread {}) may run on CPUs {}, ran on {} and moved {} in the window",
                    c.vcpu,
                    c.tid.map_or("?".into(), |t| t.to_string()),
                    c.affinity_end.as_deref().unwrap_or("?"),
                    if ran.is_empty() {
                        "none".into()
                    } else {
                        ran.join(", ")
                    },
                    match c.migrations {
                        Some(m) => format!("{m} times"),
                        None => format!("at least {} times (seen by the looks)", c.moves_seen),
                    }
                )
            })
            .collect();
        out.extend(pinned(
            "floating-vcpus",
            vm,
            evidence,
            &order,
            &mut next,
            allowed,
            cgroup_of,
        ));
    }
    let busy_cores = busy_cores(r, topo);
    for vm in &r.vms {
        if out.iter().any(|f| f.vm == label(vm)) {
            continue;
        }
        let Some(evidence) = stacked(vm, topo, allowed, &busy_cores) else {
            continue;
        };
        out.extend(pinned(
            "stacked-vcpus",
            vm,
            evidence,
            &order,
            &mut next,
            allowed,
            cgroup_of,
        ));
    }
    place_emulators(&mut out, allowed);
    for vm in &r.vms {
        let (Some(s), Some(m)) = (vm.share, vm.model) else {
            continue;
        };
        if vm.shares_cpus_with.is_empty() || s >= 0.9 || vm.running_vcpus == 0 {
            continue;
        }
        out.push(HostFinding {
            id: "cpu-contention".into(),
            vm: label(vm),
            pid: Some(vm.pid),
            domain: None,
            evidence: std::iter::once(format!(
                "its {} running vCPUs got {:.0}% of the CPU time they wanted (the model gives \
                 {:.0}% with every running vCPU on this host sharing its CPUs evenly); it shared \
                 CPUs with {}",
                vm.running_vcpus,
                100.0 * s,
                100.0 * m,
                vm.shares_cpus_with.join(", ")
            ))
            .chain(taken_beside_vms(r, vm))
            .collect(),
            pins: Vec::new(),
            apply: Vec::new(),
            verify: Vec::new(),
            undo: Vec::new(),
            emulator: None,
            libvirt_cputune: None,
            module_params: Vec::new(),
            notes: vec![
                "give the VMs CPUs of their own (the floating-vcpus remedy's pins do, where \
                 there are enough CPUs), or weigh them (cgroup cpu.weight, libvirt \
                 <shares>) so the one that matters wins"
                    .into(),
            ],
        });
    }
    for vm in &r.vms {
        out.extend(halt_poll_waste(r, vm));
        out.extend(idle_exit_storm(r, vm));
    }
    out
}

/// What the CPUs a VM's vCPUs ran on gave to neither VM: this host's own steal (where it is
/// itself a guest) and its threads besides vCPUs, each as a share of those CPUs, where /proc/stat
/// measured them and they came to 1% or more.
fn taken_beside_vms(r: &HostReport, vm: &VmView) -> Option<String> {
    let cpus: std::collections::BTreeSet<u32> = vm
        .vcpus
        .iter()
        .flat_map(|c| c.cpus.keys().copied())
        .collect();
    let on: Vec<&super::HostCpuView> = r
        .host_cpus
        .iter()
        .filter(|c| cpus.contains(&c.cpu))
        .collect();
    if on.is_empty() {
        return None;
    }
    let n = on.len() as f64;
    let steal: Option<f64> = on
        .iter()
        .map(|c| c.steal_share)
        .sum::<Option<f64>>()
        .map(|s| s / n);
    let beside: Option<f64> = on
        .iter()
        .map(|c| c.busy_share.map(|b| (b - c.guest_share).max(0.0)))
        .sum::<Option<f64>>()
        .map(|s| s / n);
    let mut parts = Vec::new();
    if let Some(st) = steal.filter(|s| *s >= 0.01) {
        parts.push(format!(
            "this host's own hypervisor took {:.0}% of them (steal)",
            100.0 * st
        ));
    }
    if let Some(b) = beside.filter(|b| *b >= 0.01) {
        parts.push(format!("threads besides vCPUs took {:.0}%", 100.0 * b));
    }
    (!parts.is_empty()).then(|| {
        format!(
            "of the {} CPU{} its vCPUs ran on, {}: time no VM got, which the model does not count",
            on.len(),
            if on.len() == 1 { "" } else { "s" },
            parts.join(" and ")
        )
    })
}

/// Halts a window needs before its polling is judged.
const POLL_HALTS: u64 = 50;
/// Polls lost among halts above which polling is "lost nearly always".
const LOST_NEARLY_ALWAYS: f64 = 0.9;
/// Exits a second per mostly-halted vCPU that make a storm.
const STORM_EXITS_PER_S: f64 = 10_000.0;

/// The poll limit for a VM whose polls do not pay, from its halts: twice the mean time of the
/// halts its polling won, rounded up to a microsecond (those halts keep their poll, the lost
/// ones stop burning the rest of the window); 0 (polling off) when polling won none. Returns
/// the value and how it was derived.
pub fn poll_limit(k: &super::kvm::KvmEvents) -> (u64, String) {
    if k.polls_won * 100 < k.halts {
        return (
            0,
            format!(
                "polling won {} of {} halts (under 1%): 0 turns it off",
                k.polls_won, k.halts
            ),
        );
    }
    let mean = k.polls_won_ns as f64 / k.polls_won as f64;
    let v = ((2.0 * mean) / 1000.0).ceil().max(1.0) as u64 * 1000;
    (
        v,
        format!(
            "twice the mean of the {} halts polling won ({}), rounded up to a microsecond: those keep their poll, the {} that slept stop burning the window first",
            k.polls_won,
            crate::units::fmt_ns(mean),
            k.slept
        ),
    )
}

fn halt_poll_waste(r: &HostReport, vm: &VmView) -> Option<HostFinding> {
    let k = vm.kvm.as_ref()?;
    if k.halts < POLL_HALTS {
        return None;
    }
    let polled = vm
        .vcpus
        .iter()
        .filter_map(|c| c.kvm.as_ref())
        .any(|c| c.poll_window_grew > 0 || c.poll_window_ns.is_some_and(|w| w > 0));
    let lost_share = k.slept as f64 / k.halts as f64;
    let lost_ns: Option<f64> = vm.vcpus.iter().map(|c| super::lost_poll_ns(c, r)).sum();
    // Polling that burns more than it wins: it polled, and nearly every halt slept all the
    // same. (The lost polls' CPU is only bounded, so it is evidence, never the trigger.)
    if !polled || lost_share < LOST_NEARLY_ALWAYS {
        return None;
    }
    let per_s = |n: u64| n as f64 / r.interval_s;
    let mut evidence = vec![format!(
        "{} halts in {:.2} s ({:.0}/s): polling won {} ({:.1}%), {} slept after polling{}",
        k.halts,
        r.interval_s,
        per_s(k.halts),
        k.polls_won,
        100.0 * (1.0 - lost_share),
        k.slept,
        k.mean_sleep_ns().map_or(String::new(), |m| format!(
            " (mean halt that slept {}, its poll included)",
            crate::units::fmt_ns(m)
        ))
    )];
    evidence.push(format!(
        "polls won burnt {:.3} CPU (kvm_vcpu_wakeup's time of the halts that did not sleep)",
        per_s(k.polls_won_ns) / 1e9
    ));
    match lost_ns {
        Some(l) => evidence.push(format!(
            "polls lost burnt at most {:.3} CPU (the smaller of each halt that slept polling its whole window and the threads' run time less their polls won)",
            l / r.interval_s / 1e9
        )),
        None => evidence.push(
            "the CPU the lost polls burnt is not available, because neither a vCPU's poll window (kvm_halt_poll_ns fires on a change only) nor its run time was read".into(),
        ),
    }
    let (v, how) = poll_limit(k);
    let mut notes = vec![
        format!("halt_poll_ns={v}: {how}"),
        format!(
            "to keep it: the line `options kvm halt_poll_ns={v}` in /etc/modprobe.d/kvm-halt-poll.conf (read when the kvm module loads: at boot, or a reload with no VM running)"
        ),
        "a VMM that sets its VM's own limit (KVM_CAP_HALT_POLL) is not held by the module's: set it there".into(),
    ];
    let waited = vm
        .vcpus
        .iter()
        .filter_map(|c| c.run_queue_share)
        .fold(0.0f64, f64::max);
    if waited >= 0.1 {
        notes.push(format!(
            "its vCPU threads waited for a CPU up to {:.0}% of the window: KVM stops polling when another task is runnable on the CPU, so the polls may be lost to that contention rather than to the limit (the cpu-contention and pinning findings, where they apply, come first)",
            100.0 * waited
        ));
    }
    let (apply, verify) = if r.halt_poll_ns_writable == Some(true) {
        (
            vec![vec![
                "cpulab".to_string(),
                "try".into(),
                format!("kvm.halt_poll_ns={v}"),
            ]],
            vec![vec![
                "grep".to_string(),
                "-qx".into(),
                v.to_string(),
                "/sys/module/kvm/parameters/halt_poll_ns".into(),
            ]],
        )
    } else {
        notes.push(format!(
            "the module's halt_poll_ns ({}) is not writable here: `cpulab try kvm.halt_poll_ns={v}` cannot measure it on this host",
            r.halt_poll_ns.map_or("not readable".into(), |n| n.to_string())
        ));
        (Vec::new(), Vec::new())
    };
    Some(HostFinding {
        id: "halt-poll-waste".into(),
        vm: label(vm),
        pid: Some(vm.pid),
        domain: None,
        evidence,
        pins: Vec::new(),
        apply,
        verify,
        undo: Vec::new(),
        emulator: None,
        libvirt_cputune: None,
        module_params: vec![ModuleParam {
            module: "kvm".into(),
            param: "halt_poll_ns".into(),
            value: v.to_string(),
        }],
        notes,
    })
}

fn idle_exit_storm(r: &HostReport, vm: &VmView) -> Option<HostFinding> {
    let mut evidence = Vec::new();
    for c in &vm.vcpus {
        let (Some(k), Some(on)) = (c.kvm.as_ref(), c.on_cpu_share) else {
            continue;
        };
        let Some(exits) = k.exits else {
            continue;
        };
        let rate = exits as f64 / r.interval_s;
        // Mostly halted: it wanted little CPU and halted throughout.
        if on >= 0.2 || k.halts == 0 || rate < STORM_EXITS_PER_S {
            continue;
        }
        let mut top: Vec<(u32, u64)> = k
            .exits_by_reason
            .as_ref()
            .map(|m| m.iter().map(|(a, b)| (*a, *b)).collect())
            .unwrap_or_default();
        top.sort_by_key(|x| std::cmp::Reverse(x.1));
        let top: Vec<String> = top
            .iter()
            .take(3)
            .map(|(reason, n)| {
                let rate = *n as f64 / r.interval_s;
                match r
                    .exit_isa
                    .and_then(|isa| super::kvm::exit_reason_name(isa, *reason))
                {
                    Some(name) => format!("{name} (reason {reason}): {rate:.0}/s"),
                    None => format!("reason {reason}: {rate:.0}/s"),
                }
            })
            .collect();
        evidence.push(format!(
            "vCPU {} was on a CPU {:.0}% of the window and halted {:.0} times a second, yet exited {rate:.0} times a second ({})",
            c.vcpu,
            100.0 * on,
            k.halts as f64 / r.interval_s,
            top.join(", ")
        ));
    }
    if evidence.is_empty() {
        return None;
    }
    Some(HostFinding {
        id: "idle-exit-storm".into(),
        vm: label(vm),
        pid: Some(vm.pid),
        domain: None,
        evidence,
        pins: Vec::new(),
        apply: Vec::new(),
        verify: Vec::new(),
        undo: Vec::new(),
        emulator: None,
        libvirt_cputune: None,
        module_params: Vec::new(),
        notes: vec![
            "the reasons are KVM's exit_reason as traced (a VMX basic exit reason, or an SVM exit code, named by the host CPU's vmx or svm flag): an idle guest that exits this often is usually a guest timer or idle loop (a periodic tick, a guest that polls with PAUSE or reads the TSC); look at the guest's idle driver and its clock source"
                .into(),
        ],
    })
}

/// Each pinned finding's emulator threads on CPUs its vCPUs leave free ([`emulator_cpus`]),
/// its `<cputune>` written with them.
fn place_emulators(out: &mut [HostFinding], allowed: &crate::cpulist::CpuSet) {
    let cpus =
        |f: &HostFinding| -> crate::cpulist::CpuSet { f.pins.iter().map(|p| p.cpu).collect() };
    let all: crate::cpulist::CpuSet = out
        .iter()
        .flat_map(|f| f.pins.iter().map(|p| p.cpu))
        .collect();
    for f in out.iter_mut().filter(|f| !f.pins.is_empty()) {
        let (set, why) = emulator_cpus(allowed, &all, &cpus(f));
        f.emulator = Some(set.to_string());
        f.libvirt_cputune = Some(cputune(&f.pins, &set.to_string()));
        if let Some(why) = why {
            f.notes.push(why);
        }
    }
}

/// A VM's running vCPUs: those that wanted half the window or more.
fn running(vm: &VmView) -> impl Iterator<Item = &super::VcpuView> {
    vm.vcpus
        .iter()
        .filter(|c| c.on_cpu_share.unwrap_or(0.0) + c.run_queue_share.unwrap_or(0.0) >= super::BUSY)
}

/// The host CPU a vCPU spent most of its run time on.
fn main_cpu(c: &super::VcpuView) -> Option<u32> {
    c.cpus
        .iter()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(cpu, _)| *cpu)
}

/// The cores (by their SMT sibling sets) where some running vCPU of any VM mostly ran.
fn busy_cores(r: &HostReport, topo: &Topology) -> Vec<crate::cpulist::CpuSet> {
    let mut cores = Vec::new();
    for vm in &r.vms {
        for c in running(vm) {
            if let Some(core) = main_cpu(c)
                .and_then(|m| topo.cpu(m))
                .map(|x| x.smt_siblings.clone())
                && !cores.contains(&core)
            {
                cores.push(core);
            }
        }
    }
    cores
}

/// The evidence that `vm`'s running vCPUs were stacked: pairs of them mostly on one CPU, SMT
/// siblings or one module, while an allowed core ran no running vCPU.
fn stacked(
    vm: &VmView,
    topo: &Topology,
    allowed: &crate::cpulist::CpuSet,
    busy_cores: &[crate::cpulist::CpuSet],
) -> Option<Vec<String>> {
    use crate::topology::PlacementClass as C;
    let mains: Vec<(u32, u32)> = running(vm)
        .filter_map(|c| Some((c.vcpu, main_cpu(c)?)))
        .collect();
    let idle_core = allowed.iter().find(|&c| {
        topo.cpu(c)
            .is_some_and(|x| !busy_cores.contains(&x.smt_siblings))
    })?;
    let mut evidence = Vec::new();
    for (i, &(va, a)) in mains.iter().enumerate() {
        for &(vb, b) in &mains[i + 1..] {
            let what = match topo.class(a, b) {
                C::SameCpu => "one CPU",
                C::SmtSibling => "SMT siblings of one core",
                C::SharedL2 => "the two cores of one module (a shared L2)",
                _ => continue,
            };
            evidence.push(format!(
                "vCPUs {va} and {vb} ran mostly on CPUs {a} and {b}: {what}"
            ));
        }
    }
    if evidence.is_empty() {
        return None;
    }
    let core = topo
        .cpu(idle_core)
        .map_or_else(|| idle_core.to_string(), |x| x.smt_siblings.to_string());
    evidence.push(format!(
        "while the core of CPUs {core} ran no running vCPU of any VM"
    ));
    Some(evidence)
}

/// A finding whose remedy pins each of `vm`'s vCPUs to the next CPU of `order`.
fn pinned(
    id: &str,
    vm: &VmView,
    evidence: Vec<String>,
    order: &[u32],
    next: &mut usize,
    allowed: &crate::cpulist::CpuSet,
    cgroup_of: &dyn Fn(i32) -> String,
) -> Option<HostFinding> {
    let mut pins = Vec::new();
    for c in vm.vcpus.iter() {
        let Some(tid) = c.tid else { continue };
        if order.is_empty() {
            break;
        }
        let cpu = order[*next % order.len()];
        *next += 1;
        pins.push(Pin {
            vcpu: c.vcpu,
            tid,
            cpu,
            before: c
                .affinity_end
                .clone()
                .unwrap_or_else(|| allowed.to_string()),
        });
    }
    if pins.is_empty() {
        return None;
    }
    let libvirt = is_libvirt(&cgroup_of(vm.pid));
    let mut notes = vec![
        "taskset acts on the running threads only: a restarted VM floats again; make it \
         permanent in the VMM's configuration (libvirt's <cputune>, QEMU's thread ids \
         through QMP query-cpus-fast, or a systemd CPUAffinity= for the VMM's unit)"
            .to_string(),
    ];
    if pins.len() > order.len() {
        notes.push(format!(
            "more vCPUs than CPUs ({} for {}): some share a CPU",
            pins.len(),
            order.len()
        ));
    }
    Some(HostFinding {
        id: id.into(),
        vm: label(vm),
        pid: Some(vm.pid),
        domain: libvirt.then(|| vm.name.clone()),
        evidence,
        apply: apply_lines(&pins, libvirt.then_some(vm.name.as_str())),
        verify: pins
            .iter()
            .map(|p| affinity_is(vm.pid, p.tid, &p.cpu.to_string()))
            .collect(),
        undo: pins.iter().map(|p| taskset(&p.before, p.tid)).collect(),
        emulator: Some(allowed.to_string()),
        libvirt_cputune: Some(cputune(&pins, &allowed.to_string())),
        module_params: Vec::new(),
        pins,
        notes,
    })
}

/// A command as a shell line, each word quoted once.
pub fn line(argv: &Argv) -> String {
    shell_words::join(argv)
}

#[cfg(test)]
mod tests {
    use super::super::kvm::KvmEvents;
    use super::*;

    #[test]
    fn libvirt_is_known_by_its_slice() {
        assert!(is_libvirt(
            "0::/machine.slice/machine-qemu\\x2d1\\x2ddb1.scope/libvirt/emulator"
        ));
        assert!(!is_libvirt("0::/user.slice/user-0.slice/session-1.scope"));
    }

    #[test]
    fn pins_take_one_thread_per_core_first() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/intel-2s");
        let topo = Topology::read(&root).unwrap();
        assert!(topo.smt_active(), "the fixture has SMT");
        let allowed = topo.online.clone();
        let order = pin_order(&topo, &allowed);
        assert_eq!(order.len(), allowed.len(), "every CPU once");
        // The first half holds no two siblings.
        let half = &order[..allowed.len() / 2];
        for (i, &a) in half.iter().enumerate() {
            let sib = &topo.cpu(a).unwrap().smt_siblings;
            for &b in &half[i + 1..] {
                assert!(!sib.contains(b), "{a} and {b} are siblings in {half:?}");
            }
        }
    }

    /// On an EPYC of several L3 groups a VM that fits in one gets CPUs that share it, one per
    /// core.
    #[test]
    fn pins_keep_a_small_vm_in_one_l3() {
        let topo = Topology::read(&fixture("epyc-4ccx")).unwrap();
        let order = pin_order(&topo, &topo.online);
        assert_eq!(
            topo.class(order[0], order[1]),
            crate::topology::PlacementClass::SharedLlc,
            "{order:?}"
        );
    }

    #[test]
    fn the_awk_check_and_taskset_lines_quote_once() {
        let v = affinity_is(10, 11, "3");
        assert_eq!(v[0], "awk");
        assert!(v[1].contains("\"3\""));
        assert_eq!(v[2], "/proc/10/task/11/status");
        assert_eq!(line(&taskset("0-1", 42)), "taskset -pc 0-1 42");
        let l = line(&v);
        assert_eq!(shell_words::split(&l).unwrap(), v);
    }

    /// A VM of two busy vCPUs, each mostly on one CPU, pinned (so not floating).
    fn report(root: &std::path::Path, a: u32, b: u32) -> HostReport {
        let machine = crate::machine::Machine::detect(root).unwrap();
        let vcpu = |v: u32, cpu: u32| super::super::VcpuView {
            vcpu: v,
            tid: Some(100 + v as i32),
            thread_name: Some(format!("CPU {v}/KVM")),
            found_by: Some("kvm_run".into()),
            cpus: [(cpu, 1.0)].into_iter().collect(),
            migrations: Some(0),
            moves_seen: 0,
            on_cpu_share: Some(0.9),
            run_queue_share: Some(0.05),
            affinity_start: Some(cpu.to_string()),
            affinity_end: Some(cpu.to_string()),
            state: Some('R'),
            switches: None,
            kvm: None,
            kvm_reason: None,
        };
        HostReport {
            settings: super::super::WatchSettings {
                duration: std::time::Duration::from_secs(1),
                pid: None,
                kvm_events: false,
                kvm_events_fallback: false,
                bpf_program_costs: false,
            },
            conditions: crate::machine::Conditions::now(&machine),
            interval_s: 1.0,
            window_monotonic_ns: None,
            vms: vec![VmView {
                pid: 42,
                name: "db1".into(),
                comm: "qemu-system-x86".into(),
                vm_fds: 1,
                vcpus: vec![vcpu(0, a), vcpu(1, b)],
                running_vcpus: 2,
                share: Some(0.95),
                model: Some(1.0),
                shares_cpus_with: Vec::new(),
                kvm: None,
                kvm_reason: None,
            }],
            host_cpus: Vec::new(),
            not_inspected: 0,
            not_measured: Vec::new(),
            findings: Vec::new(),
            kvm_events_lost: None,
            kvm_program_costs: Vec::new(),
            exit_isa: None,
            halt_poll_ns: Some(200_000),
            halt_poll_ns_writable: Some(false),
        }
    }

    /// Each vCPU of `r`'s VM given `k`'s KVM events (and the VM their sum), idle: on a CPU
    /// 10% of the window.
    fn with_kvm(mut r: HostReport, k: &KvmEvents) -> HostReport {
        let vm = &mut r.vms[0];
        for c in &mut vm.vcpus {
            c.kvm = Some(k.clone());
            c.on_cpu_share = Some(0.1);
        }
        vm.kvm = Some(KvmEvents::total(
            vm.vcpus.iter().filter_map(|c| c.kvm.as_ref()),
        ));
        r
    }

    fn halting(won: u64, slept: u64, window: Option<u64>) -> KvmEvents {
        KvmEvents {
            halts: won + slept,
            polls_won: won,
            polls_won_ns: won * 15_000,
            slept,
            slept_ns: slept * 300_000,
            poll_window_grew: u64::from(window.is_some()),
            poll_window_ns: window,
            ipis_sent: won + slept,
            exits: None,
            exits_reason: Some("not available, because kvm_exit never fired".into()),
            ..Default::default()
        }
    }

    /// A VM held below the model names what its CPUs gave to no VM, the host's own steal and
    /// its other threads, from /proc/stat; where /proc/stat was not read it names neither.
    #[test]
    fn contention_names_the_steal_and_threads_beside_the_vms() {
        let root = fixture("intel-2s");
        let none = |_: i32| String::new();
        let topo = crate::topology::Topology::read(&root).unwrap();
        let allowed = topo.online.clone();
        let mut r = report(&root, 0, 2);
        r.vms[0].share = Some(0.4);
        r.vms[0].model = Some(0.5);
        r.vms[0].shares_cpus_with = vec!["db2 (43)".into()];
        let cpu = |cpu: u32, busy: Option<f64>, steal: Option<f64>| super::super::HostCpuView {
            cpu,
            busy_share: busy,
            steal_share: steal,
            guest_share: 0.8,
            vms: vec!["db1 (42)".into(), "db2 (43)".into()],
            others: Vec::new(),
        };
        r.host_cpus = vec![cpu(0, Some(0.9), Some(0.1)), cpu(2, Some(0.8), Some(0.2))];
        let f = findings(&r, &topo, &allowed, &none);
        let c = f
            .iter()
            .find(|f| f.id == "cpu-contention")
            .expect("held below");
        assert_eq!(c.evidence.len(), 2, "{c:?}");
        assert!(c.evidence[1].contains("of the 2 CPUs"), "{c:?}");
        assert!(c.evidence[1].contains("took 15% of them (steal)"), "{c:?}");
        assert!(
            c.evidence[1].contains("threads besides vCPUs took 5%"),
            "{c:?}"
        );
        r.host_cpus = vec![cpu(0, None, None), cpu(2, None, None)];
        let f = findings(&r, &topo, &allowed, &none);
        let c = f
            .iter()
            .find(|f| f.id == "cpu-contention")
            .expect("held below");
        assert_eq!(c.evidence.len(), 1, "{c:?}");
    }

    /// Polls lost nearly always, with polling on, is a finding whose limit comes from the
    /// halts' own times; polls that win, or a window never seen polling, are none.
    #[test]
    fn polls_lost_nearly_always_are_a_finding_with_a_derived_limit() {
        let root = fixture("intel-2s");
        let none = |_: i32| String::new();
        let topo = crate::topology::Topology::read(&root).unwrap();
        let allowed = topo.online.clone();
        let find = |k: &KvmEvents| {
            let r = with_kvm(report(&root, 0, 2), k);
            findings(&r, &topo, &allowed, &none)
                .into_iter()
                .find(|f| f.id == "halt-poll-waste")
        };
        let f = find(&halting(50, 950, Some(200_000))).expect("5% won");
        // Twice the won halts' mean (15 us), to a microsecond.
        assert!(f.notes[0].starts_with("halt_poll_ns=30000:"), "{f:?}");
        assert!(
            f.notes[1].contains("options kvm halt_poll_ns=30000"),
            "{f:?}"
        );
        assert!(f.apply.is_empty(), "the parameter is read-only here: {f:?}");
        assert!(f.evidence.iter().any(|e| e.contains("at most")), "{f:?}");
        // Under 1% won: off.
        let off = find(&halting(5, 995, Some(200_000))).unwrap();
        assert!(off.notes[0].starts_with("halt_poll_ns=0:"), "{off:?}");
        assert!(
            find(&halting(900, 100, Some(200_000))).is_none(),
            "polls win"
        );
        assert!(find(&halting(5, 995, None)).is_none(), "no poll seen");
        assert!(
            find(&halting(1, 20, Some(200_000))).is_none(),
            "too few halts"
        );
        // Writable: `cpulab try` measures it, and verify checks the module's value.
        let mut r = with_kvm(report(&root, 0, 2), &halting(50, 950, Some(200_000)));
        r.halt_poll_ns_writable = Some(true);
        let f = findings(&r, &topo, &allowed, &none)
            .into_iter()
            .find(|f| f.id == "halt-poll-waste")
            .unwrap();
        assert_eq!(f.apply[0], ["cpulab", "try", "kvm.halt_poll_ns=30000"]);
        assert_eq!(
            line(&f.verify[0]),
            "grep -qx 30000 /sys/module/kvm/parameters/halt_poll_ns"
        );
    }

    /// An exit storm needs exits counted: where kvm_exit never fired there is none.
    #[test]
    fn an_idle_guest_exiting_thousands_of_times_a_second_is_a_storm() {
        let root = fixture("intel-2s");
        let none = |_: i32| String::new();
        let topo = crate::topology::Topology::read(&root).unwrap();
        let allowed = topo.online.clone();
        let mut k = halting(900, 100, Some(200_000));
        let storm = |k: &KvmEvents| {
            findings(&with_kvm(report(&root, 0, 2), k), &topo, &allowed, &none)
                .into_iter()
                .find(|f| f.id == "idle-exit-storm")
        };
        assert!(storm(&k).is_none(), "exits not counted: no storm");
        k.exits = Some(50_000);
        k.exits_by_reason = Some([(12, 40_000), (30, 10_000)].into_iter().collect());
        k.exits_reason = None;
        let f = storm(&k).expect("50,000 exits a second on a vCPU on a CPU 10% of the time");
        assert_eq!(f.evidence.len(), 2, "{f:?}");
        assert!(f.evidence[0].contains("reason 12: 40000/s"), "{f:?}");
        // On a host whose CPU flags say VT-x, the reasons are named.
        let mut r = with_kvm(report(&root, 0, 2), &k);
        r.exit_isa = Some(super::super::kvm::Isa::Vmx);
        let f = findings(&r, &topo, &allowed, &none)
            .into_iter()
            .find(|f| f.id == "idle-exit-storm")
            .unwrap();
        assert!(f.evidence[0].contains("HLT (reason 12): 40000/s"), "{f:?}");
        assert!(
            f.evidence[0].contains("IO_INSTRUCTION (reason 30)"),
            "{f:?}"
        );
        k.exits = Some(5_000);
        assert!(storm(&k).is_none(), "5,000 a second is no storm");
    }

    fn fixture(name: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name)
    }

    /// The Xen slides' case on the machines we do not have: two busy vCPUs on one core's
    /// siblings (2-socket Intel with SMT) or one module's cores (Opteron 6376) while cores sit
    /// idle is a finding, and its pins put them on cores of their own; apart, it is none.
    #[test]
    fn vcpus_stacked_on_siblings_or_one_module_are_found_and_spread() {
        let none = |_: i32| String::new();
        for (name, want) in [("intel-2s", "SMT siblings"), ("opteron-6376", "one module")] {
            let root = fixture(name);
            let topo = Topology::read(&root).unwrap();
            let allowed = topo.online.clone();
            let a = allowed.iter().next().unwrap();
            let b = allowed
                .iter()
                .find(|&b| {
                    let c = topo.class(a, b);
                    if name == "intel-2s" {
                        c == crate::topology::PlacementClass::SmtSibling
                    } else {
                        c == crate::topology::PlacementClass::SharedL2
                    }
                })
                .unwrap_or_else(|| panic!("{name} has no such pair"));
            let r = report(&root, a, b);
            let f = findings(&r, &topo, &allowed, &none);
            assert_eq!(f.len(), 1, "{name}: {f:?}");
            assert_eq!(f[0].id, "stacked-vcpus");
            assert!(
                f[0].evidence.iter().any(|e| e.contains(want)),
                "{name}: {:?}",
                f[0].evidence
            );
            let (p, q) = (f[0].pins[0].cpu, f[0].pins[1].cpu);
            let class = topo.class(p, q);
            assert!(
                !matches!(
                    class,
                    crate::topology::PlacementClass::SameCpu
                        | crate::topology::PlacementClass::SmtSibling
                        | crate::topology::PlacementClass::SharedL2
                ),
                "{name}: pins {p} and {q} are {class}"
            );
            assert_eq!(f[0].verify.len(), 2);
            assert_eq!(f[0].undo.len(), 2);
            // Apart, on two cores of different caches, nothing is stacked.
            let far = allowed
                .iter()
                .find(|&c| topo.class(a, c) > crate::topology::PlacementClass::SharedLlc)
                .unwrap();
            assert!(
                findings(&report(&root, a, far), &topo, &allowed, &none).is_empty(),
                "{name}"
            );
        }
    }

    #[test]
    fn cputune_pins_each_vcpu_and_the_emulator() {
        let pins = [
            Pin {
                vcpu: 0,
                tid: 1,
                cpu: 2,
                before: "0-3".into(),
            },
            Pin {
                vcpu: 1,
                tid: 2,
                cpu: 3,
                before: "0-3".into(),
            },
        ];
        let x = cputune(&pins, "0-3");
        assert!(x.contains("<vcpupin vcpu='0' cpuset='2'/>"));
        assert!(x.contains("<vcpupin vcpu='1' cpuset='3'/>"));
        assert!(x.contains("<emulatorpin cpuset='0-3'/>"));
    }
}
