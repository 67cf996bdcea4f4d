//! The `vms` collector: on a KVM host, what each VM's vCPU threads ran and waited for a host
//! CPU (what their guests see as steal), as cumulative counters, read at scrape time from
//! /proc through `cpulab host`'s own discovery (`crate::host::watch::discover`: a process
//! holding an `anon_inode:kvm-vm` fd, its `kvm-vcpu:N` fds and the threads running them) and
//! sampling (`crate::host::watch::sample::look`: a thread's `schedstat` run and run-queue
//! times and its `se.nr_migrations`).
//!
//! - **Counters since the exporter first saw a thread.** A vCPU thread counts from the scrape
//!   that first found it (its first reading is the baseline, so a VM found late never jumps),
//!   and a thread that ends keeps what it counted (carried, per vCPU index), so a VM's counters
//!   only grow for as long as its process lives. A reading that went back (a thread id taken by
//!   another thread) starts a new baseline, and what the old one counted is carried.
//! - **Bounded labels.** A VM is labelled by its QEMU `-name`, else `comm (pid)` (a VM without
//!   a name has no identity beyond its process), `name (pid)` when two live VMs share a name.
//!   At most `--max-vms` VMs get their own label, in the order they are first seen, and keep it
//!   for their life; the rest, and the VMs in it that ended, are summed in `vm="other"`, whose
//!   counters so never go back. Per-vCPU series only for the VMs named with `--vm` (at most
//!   [`MAX_LISTED`]), each for at most [`MAX_LISTED_VCPUS`] vCPUs.
//! - **Unmeasured is absent.** Migrations are published only where the kernel counts them
//!   (`se.nr_migrations`, CONFIG_SCHED_DEBUG), and `cpulab_vm_vcpu_migrations_available` says
//!   which; a VM none of whose vCPU threads has been found yet publishes its vCPU count but no
//!   run or wait counter; a host where some processes' fds could not be read publishes no
//!   `cpulab_vms` count, since VMs may hide there, and the collector fails with the reason; an
//!   exporter that may not read other users' fds at all (neither root nor `CAP_SYS_PTRACE`)
//!   publishes nothing of the VMs ([`Looking::MayNotInspect`]).
//! - **Halt polling, IPIs and exits** come from KVM's own events, counted per thread in the
//!   kernel by `cpulab host`'s BPF programs (`crate::host::watch::tracing`), attached for the
//!   exporter's life (`--kvm-events`, auto by default: raw tracepoints only) and read at each
//!   scrape, each thread from the scrape that first saw it, as its run time is. The entries of
//!   threads that ended are freed after each scrape, so the table holds the live ones only.
//!   Where the programs cannot run, every KVM counter is absent and
//!   `cpulab_vm_kvm_events_available` is 0 (the reason is logged at start); exits are absent
//!   where KVM does not trace them (`kvm_exit` never fires on kvm_pvm).
//!
//! [`Ledger`] is the pure accounting, tested on literal readings; [`VmWatch`] reads a root.

use super::process::{ErrorKind, ReadError};
use crate::host::watch::discover::{self, FoundVm};
use crate::host::watch::sample::{self, Look};
use crate::host::watch::tracing::{KvmReading, KvmTracing};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The label of the VMs beyond `--max-vms`.
pub const OTHER: &str = "other";
/// `--max-vms` by default.
pub const DEFAULT_MAX_VMS: usize = 8;
/// Most `--vm` names (VMs with per-vCPU series).
pub const MAX_LISTED: usize = 4;
/// Most vCPUs of a `--vm` VM with per-vCPU series (the lowest indexes); the others are in the
/// VM's sums only.
pub const MAX_LISTED_VCPUS: u32 = 32;

/// KVM's own events of some vCPU threads (`crate::host::watch::kvm`'s per-thread counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvmCounts {
    pub halts: u64,
    /// Halts KVM's polling won, and the CPU time that polling took (KVM's own
    /// `halt_poll_success_ns`).
    pub polls_won: u64,
    pub polls_won_ns: u64,
    /// Halts in which the thread blocked, and their time (the poll window first, then the
    /// sleep).
    pub slept: u64,
    pub slept_ns: u64,
    pub ipis: u64,
    /// `None` where KVM does not trace exits here.
    pub exits: Option<u64>,
}

impl Default for KvmCounts {
    fn default() -> Self {
        Self {
            halts: 0,
            polls_won: 0,
            polls_won_ns: 0,
            slept: 0,
            slept_ns: 0,
            ipis: 0,
            exits: Some(0),
        }
    }
}

impl KvmCounts {
    fn add(&mut self, o: &KvmCounts) {
        self.halts = self.halts.saturating_add(o.halts);
        self.polls_won = self.polls_won.saturating_add(o.polls_won);
        self.polls_won_ns = self.polls_won_ns.saturating_add(o.polls_won_ns);
        self.slept = self.slept.saturating_add(o.slept);
        self.slept_ns = self.slept_ns.saturating_add(o.slept_ns);
        self.ipis = self.ipis.saturating_add(o.ipis);
        self.exits = self.exits.zip(o.exits).map(|(a, b)| a.saturating_add(b));
    }

    fn between(first: &KvmCounts, last: &KvmCounts) -> KvmCounts {
        KvmCounts {
            halts: last.halts.saturating_sub(first.halts),
            polls_won: last.polls_won.saturating_sub(first.polls_won),
            polls_won_ns: last.polls_won_ns.saturating_sub(first.polls_won_ns),
            slept: last.slept.saturating_sub(first.slept),
            slept_ns: last.slept_ns.saturating_sub(first.slept_ns),
            ipis: last.ipis.saturating_sub(first.ipis),
            exits: first
                .exits
                .zip(last.exits)
                .map(|(a, b)| b.saturating_sub(a)),
        }
    }

    /// Whether any count is below `earlier`'s: the entry was taken by another thread.
    fn went_back(&self, earlier: &KvmCounts) -> bool {
        self.halts < earlier.halts
            || self.polls_won_ns < earlier.polls_won_ns
            || self.slept_ns < earlier.slept_ns
            || self.ipis < earlier.ipis
            || matches!((earlier.exits, self.exits), (Some(a), Some(b)) if b < a)
    }
}

/// What some vCPU threads ran and waited since the exporter first saw them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    pub run_ns: u64,
    pub wait_ns: u64,
    /// `None` when one of the threads summed has no `se.nr_migrations` (the kernel does not
    /// count them).
    pub migrations: Option<u64>,
    /// KVM's events; `None` when one of the threads summed has none (the programs do not run).
    pub kvm: Option<KvmCounts>,
}

impl Default for Counts {
    fn default() -> Self {
        Self {
            run_ns: 0,
            wait_ns: 0,
            migrations: Some(0),
            kvm: Some(KvmCounts::default()),
        }
    }
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.run_ns = self.run_ns.saturating_add(o.run_ns);
        self.wait_ns = self.wait_ns.saturating_add(o.wait_ns);
        self.migrations = self
            .migrations
            .zip(o.migrations)
            .map(|(a, b)| a.saturating_add(b));
        self.kvm = self.kvm.zip(o.kvm).map(|(mut a, b)| {
            a.add(&b);
            a
        });
    }

    /// From `first` to `last` of one thread (pure).
    fn between(first: &Reading, last: &Reading) -> Counts {
        let (f, l) = (&first.look, &last.look);
        Counts {
            run_ns: l.run_ns.saturating_sub(f.run_ns),
            wait_ns: l.wait_ns.saturating_sub(f.wait_ns),
            migrations: f
                .migrations
                .zip(l.migrations)
                .map(|(a, b)| b.saturating_sub(a)),
            kvm: first
                .kvm
                .zip(last.kvm)
                .map(|(a, b)| KvmCounts::between(&a, &b)),
        }
    }
}

/// One thread's reading at one scrape: /proc's, and KVM's events where the programs run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reading {
    pub look: Look,
    pub kvm: Option<KvmCounts>,
}

/// One VM as a scrape publishes it (or `other`, the sum of the VMs beyond the cap).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VmSeries {
    pub vm: String,
    /// vCPUs its fds name (each index once per VM the process runs).
    pub vcpus: u32,
    /// vCPU threads found and counted now.
    pub measured: u32,
    /// Its counters; `None` while no vCPU thread of it has been read.
    pub counts: Option<Counts>,
    /// Per vCPU index, for a VM named with `--vm`: `None` for the others.
    pub per_vcpu: Option<BTreeMap<u32, Counts>>,
    // KVM's own events per VM (halt-poll time, exits) go here once the BPF KVM events of
    // `crate::host::watch` exist; nothing publishes them before that, and no 0 stands in.
}

/// What the `vms` collector publishes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VmFigures {
    /// Why no VM is looked for (no KVM on this host), when so.
    pub off: Option<String>,
    /// VMs found; `None` when some processes could not be inspected.
    pub count: Option<u64>,
    /// Processes whose fds could not be read (they may run VMs).
    pub not_inspected: u64,
    /// Whether the kernel counts migrations (`se.nr_migrations`); `None` when not read.
    pub migrations_available: Option<bool>,
    /// Whether KVM's events are counted (the programs run); `None` when no VM is looked for.
    pub kvm_available: Option<bool>,
    pub vms: Vec<VmSeries>,
}

/// One VM process as one scrape read it.
#[derive(Clone, Debug, PartialEq)]
pub struct SeenVm {
    pub pid: i32,
    /// QEMU's `-name`, or the process's comm when it has none.
    pub name: String,
    pub comm: String,
    pub vcpus: u32,
    pub threads: Vec<SeenThread>,
}

/// A vCPU thread still there, and its reading (`None` when it could not be read now).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SeenThread {
    pub tid: i32,
    pub vcpu: u32,
    pub look: Option<Reading>,
}

#[derive(Clone, Debug)]
struct Thread {
    vcpu: u32,
    first: Reading,
    last: Reading,
}

#[derive(Clone, Debug)]
struct Vm {
    label: String,
    own: bool,
    listed: bool,
    vcpus: u32,
    threads: BTreeMap<i32, Thread>,
    /// What threads that ended (or restarted their baseline) counted, per vCPU index.
    carried: BTreeMap<u32, Counts>,
}

impl Vm {
    fn per_vcpu(&self) -> BTreeMap<u32, Counts> {
        let mut m = self.carried.clone();
        for t in self.threads.values() {
            m.entry(t.vcpu)
                .or_default()
                .add(&Counts::between(&t.first, &t.last));
        }
        m
    }

    fn total(&self) -> Option<Counts> {
        let per = self.per_vcpu();
        (!per.is_empty()).then(|| {
            let mut c = Counts::default();
            for v in per.values() {
                c.add(v);
            }
            c
        })
    }

    fn carry(&mut self, t: &Thread) {
        self.carried
            .entry(t.vcpu)
            .or_default()
            .add(&Counts::between(&t.first, &t.last));
    }
}

/// The VMs' counters between scrapes (pure: fed what each scrape read).
#[derive(Clone, Debug)]
pub struct Ledger {
    max_vms: usize,
    listed: Vec<String>,
    /// Live VMs by process and name.
    vms: BTreeMap<(i32, String), Vm>,
    /// What the VMs of `other` that ended counted.
    other_carried: Option<Counts>,
}

impl Ledger {
    pub fn new(max_vms: usize, listed: Vec<String>) -> Self {
        Self {
            max_vms,
            listed,
            vms: BTreeMap::new(),
            other_carried: None,
        }
    }

    fn label_for(&self, v: &SeenVm) -> String {
        let taken = |l: &str| l == OTHER || self.vms.values().any(|x| x.label == l);
        let named = v.name != v.comm && !v.name.is_empty();
        if named && !taken(&v.name) {
            return v.name.clone();
        }
        format!("{} ({})", if named { &v.name } else { &v.comm }, v.pid)
    }

    /// Takes one scrape's readings and gives what it publishes: own labels by label, then
    /// `other` when it has ever held a VM.
    pub fn update(&mut self, seen: &[SeenVm]) -> Vec<VmSeries> {
        let live: std::collections::BTreeSet<(i32, String)> =
            seen.iter().map(|v| (v.pid, v.name.clone())).collect();
        let ended: Vec<(i32, String)> = self
            .vms
            .keys()
            .filter(|k| !live.contains(*k))
            .cloned()
            .collect();
        for k in ended {
            if let Some(vm) = self.vms.remove(&k)
                && !vm.own
                && let Some(t) = vm.total()
            {
                self.other_carried
                    .get_or_insert_with(Counts::default)
                    .add(&t);
            }
        }
        for v in seen {
            let key = (v.pid, v.name.clone());
            if !self.vms.contains_key(&key) {
                let label = self.label_for(v);
                let listed = self.listed.contains(&label);
                let own_unlisted = self.vms.values().filter(|x| x.own && !x.listed).count();
                let vm = Vm {
                    own: listed || own_unlisted < self.max_vms,
                    listed,
                    label,
                    vcpus: 0,
                    threads: BTreeMap::new(),
                    carried: BTreeMap::new(),
                };
                self.vms.insert(key.clone(), vm);
            }
            if let Some(vm) = self.vms.get_mut(&key) {
                observe(vm, v);
            }
        }
        self.figures()
    }

    fn figures(&self) -> Vec<VmSeries> {
        let mut out: Vec<VmSeries> = self
            .vms
            .values()
            .filter(|v| v.own)
            .map(|v| VmSeries {
                vm: v.label.clone(),
                vcpus: v.vcpus,
                measured: v.threads.len() as u32,
                counts: v.total(),
                per_vcpu: v.listed.then(|| {
                    v.per_vcpu()
                        .into_iter()
                        .filter(|(i, _)| *i < MAX_LISTED_VCPUS)
                        .collect()
                }),
            })
            .collect();
        out.sort_by(|a, b| a.vm.cmp(&b.vm));
        let rest: Vec<&Vm> = self.vms.values().filter(|v| !v.own).collect();
        if !rest.is_empty() || self.other_carried.is_some() {
            let mut counts = self.other_carried;
            for v in &rest {
                if let Some(t) = v.total() {
                    counts.get_or_insert_with(Counts::default).add(&t);
                }
            }
            out.push(VmSeries {
                vm: OTHER.into(),
                vcpus: rest.iter().map(|v| v.vcpus).sum(),
                measured: rest.iter().map(|v| v.threads.len() as u32).sum(),
                counts,
                per_vcpu: None,
            });
        }
        out
    }
}

/// One VM's threads as read now: new ones start their baseline, gone ones are carried, one
/// whose reading went back is carried and starts again, one not read now keeps its last.
fn observe(vm: &mut Vm, v: &SeenVm) {
    vm.vcpus = v.vcpus;
    let here: std::collections::BTreeSet<i32> = v.threads.iter().map(|t| t.tid).collect();
    let gone: Vec<i32> = vm
        .threads
        .keys()
        .filter(|t| !here.contains(*t))
        .copied()
        .collect();
    for tid in gone {
        if let Some(t) = vm.threads.remove(&tid) {
            vm.carry(&t);
        }
    }
    for s in &v.threads {
        let Some(look) = s.look else { continue };
        let fresh = Thread {
            vcpu: s.vcpu,
            first: look,
            last: look,
        };
        match vm.threads.get_mut(&s.tid) {
            None => {
                vm.threads.insert(s.tid, fresh);
            }
            Some(t) => {
                let (now, last) = (&look.look, &t.last.look);
                let back = now.run_ns < last.run_ns
                    || now.wait_ns < last.wait_ns
                    || matches!((last.migrations, now.migrations), (Some(a), Some(b)) if b < a)
                    || matches!((&t.last.kvm, &look.kvm), (Some(a), Some(b)) if b.went_back(a))
                    || t.last.kvm.is_some() != look.kvm.is_some();
                if back || t.vcpu != s.vcpu {
                    let old = t.clone();
                    *t = fresh;
                    vm.carry(&old);
                } else {
                    t.last = look;
                }
            }
        }
    }
}

/// Whether this host can run KVM VMs: `/dev/kvm`, or the `kvm` module (a sandboxed exporter
/// may not see `/dev`, as under `PrivateDevices=`).
pub fn kvm_here(root: &Path) -> Result<(), String> {
    if root.join("dev/kvm").exists() || root.join("sys/module/kvm").exists() {
        Ok(())
    } else {
        Err("no KVM on this host (neither /dev/kvm nor /sys/module/kvm)".into())
    }
}

/// Whether VMs are looked for (decided once, at start).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Looking {
    /// Every scrape reads them.
    On,
    /// The host has no KVM: `cpulab_vms 0`, and the collector succeeds.
    NoKvm(String),
    /// The exporter may not read other processes' fds (not root, no `CAP_SYS_PTRACE`): it
    /// cannot tell whether VMs run, so it publishes nothing of them, not even the collector.
    MayNotInspect(String),
}

/// Whether VMs are looked for under `root`, by a process that `may_inspect` other processes'
/// fds (root, or `CAP_SYS_PTRACE`).
pub fn looking(root: &Path, may_inspect: bool) -> Looking {
    match kvm_here(root) {
        Err(why) => Looking::NoKvm(why),
        Ok(()) if !may_inspect => Looking::MayNotInspect(
            "the exporter may not read other processes' fds, so it cannot tell which run VMs: \
             run it as root or grant it CAP_SYS_PTRACE"
                .into(),
        ),
        Ok(()) => Looking::On,
    }
}

/// The collector: the VMs found so far, with their threads, the ledger, and KVM's programs
/// (or why they do not run).
pub struct VmWatch {
    root: PathBuf,
    looking: Looking,
    found: BTreeMap<i32, FoundVm>,
    ledger: Ledger,
    kvm: Result<KvmTracing, String>,
}

impl std::fmt::Debug for VmWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmWatch")
            .field("root", &self.root)
            .field("looking", &self.looking)
            .field("vms", &self.found.len())
            .field("kvm", &self.kvm.as_ref().map(|_| "attached"))
            .finish()
    }
}

/// KVM's events of one thread as the ledger counts them.
fn kvm_counts(r: &KvmReading, tid: i32) -> Option<KvmCounts> {
    let e = r.events(u32::try_from(tid).ok()?);
    Some(KvmCounts {
        halts: e.halts,
        polls_won: e.polls_won,
        polls_won_ns: e.polls_won_ns,
        slept: e.slept,
        slept_ns: e.slept_ns,
        ipis: e.ipis_sent,
        exits: e.exits,
    })
}

impl VmWatch {
    /// `kvm`: the programs counting KVM's events, attached for as long as this lives, or why
    /// not (no KVM events are published then).
    pub fn new(
        root: &Path,
        looking: Looking,
        max_vms: usize,
        listed: Vec<String>,
        kvm: Result<KvmTracing, String>,
    ) -> Self {
        Self {
            root: root.to_path_buf(),
            looking,
            found: BTreeMap::new(),
            ledger: Ledger::new(max_vms, listed),
            kvm,
        }
    }

    /// The programs counting KVM's events from now on, or why not.
    pub fn set_kvm(&mut self, kvm: Result<KvmTracing, String>) {
        self.kvm = kvm;
    }

    /// Why KVM's events are not counted, where they are not.
    pub fn kvm_refused(&self) -> Option<&str> {
        self.kvm.as_ref().err().map(String::as_str)
    }

    /// Whether VMs are looked for, and why not.
    pub fn looking(&self) -> &Looking {
        &self.looking
    }

    /// Whether anything of the VMs is published (not so for [`Looking::MayNotInspect`]).
    pub fn publishes(&self) -> bool {
        !matches!(self.looking, Looking::MayNotInspect(_))
    }

    /// One scrape's figures and the readings that failed. Where the exporter may not inspect
    /// other processes, no count: `off` says why (and [`Self::publishes`] is false).
    pub fn read(&mut self) -> (VmFigures, Vec<ReadError>) {
        match &self.looking {
            Looking::On => self.read_on(),
            Looking::NoKvm(why) => (
                VmFigures {
                    off: Some(why.clone()),
                    count: Some(0),
                    ..VmFigures::default()
                },
                Vec::new(),
            ),
            Looking::MayNotInspect(why) => (
                VmFigures {
                    off: Some(why.clone()),
                    ..VmFigures::default()
                },
                Vec::new(),
            ),
        }
    }

    fn read_on(&mut self) -> (VmFigures, Vec<ReadError>) {
        let mut errors = Vec::new();
        let (now, refused) = discover::scan(&self.root);
        self.merge(now);
        let kvm = match &self.kvm {
            Ok(t) => match t.read() {
                Ok(r) => Some(r),
                Err(e) => {
                    errors.push(ReadError {
                        kind: ErrorKind::Io,
                        detail: e,
                    });
                    None
                }
            },
            Err(_) => None,
        };
        let mut seen = Vec::new();
        for vm in self.found.values_mut() {
            let mut threads = Vec::new();
            let mut gone = Vec::new();
            for (&tid, t) in &vm.threads {
                let dir = self.root.join(format!("proc/{}/task/{tid}", vm.pid));
                let look = sample::look(&self.root, vm.pid, tid);
                if look.is_none() && !dir.exists() {
                    gone.push(tid);
                    continue;
                }
                if look.is_none() {
                    errors.push(ReadError {
                        kind: ErrorKind::Io,
                        detail: format!("{}: stat or schedstat unreadable", dir.display()),
                    });
                }
                threads.push(SeenThread {
                    tid,
                    vcpu: t.vcpu,
                    look: look.map(|look| Reading {
                        look,
                        kvm: kvm.as_ref().and_then(|r| kvm_counts(r, tid)),
                    }),
                });
            }
            for tid in gone {
                vm.threads.remove(&tid);
            }
            seen.push(SeenVm {
                pid: vm.pid,
                name: vm.name.clone(),
                comm: vm.comm.clone(),
                vcpus: vm.expected() as u32,
                threads,
            });
        }
        if refused > 0 {
            errors.push(ReadError {
                kind: ErrorKind::Permission,
                detail: format!(
                    "{refused} processes' fds could not be read (another user namespace's?), \
                     so the VMs they may run are not counted and cpulab_vms is left out"
                ),
            });
        }
        let sched = self.root.join("proc/self/sched");
        let migrations_available = std::fs::read_to_string(sched)
            .ok()
            .map(|s| sample::parse_nr_migrations(&s).is_some());
        let figures = VmFigures {
            off: None,
            count: (refused == 0).then_some(seen.len() as u64),
            not_inspected: refused as u64,
            migrations_available,
            kvm_available: Some(self.kvm.is_ok()),
            vms: self.ledger.update(&seen),
        };
        // Threads that ended give their entries back (the ledger carries what they counted).
        if let Ok(t) = &self.kvm {
            let proc = self.root.join("proc");
            t.forget_dead(|tid| proc.join(tid.to_string()).exists());
        }
        (figures, errors)
    }

    /// Keeps the threads found at earlier scrapes (a vCPU in guest mode shows no `KVM_RUN`, so
    /// one scan may miss it) and forgets the VMs that ended.
    fn merge(&mut self, now: Vec<FoundVm>) {
        let mut next = BTreeMap::new();
        for mut vm in now {
            if let Some(old) = self.found.remove(&vm.pid)
                && old.name == vm.name
            {
                for (tid, t) in old.threads {
                    vm.threads.entry(tid).or_insert(t);
                }
            }
            next.insert(vm.pid, vm);
        }
        self.found = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(run_ns: u64, wait_ns: u64, migrations: Option<u64>) -> Option<Reading> {
        Some(Reading {
            look: Look {
                state: 'R',
                cpu: 0,
                run_ns,
                wait_ns,
                migrations,
            },
            kvm: None,
        })
    }

    /// A reading with KVM's events: `halts` halts, `won` of them won by polling (each 1 us),
    /// the rest slept (each 100 us), one IPI per halt; exits as given.
    fn with_kvm(run_ns: u64, halts: u64, won: u64, exits: Option<u64>) -> Option<Reading> {
        let mut r = look(run_ns, 0, Some(0))?;
        r.kvm = Some(KvmCounts {
            halts,
            polls_won: won,
            polls_won_ns: won * 1_000,
            slept: halts - won,
            slept_ns: (halts - won) * 100_000,
            ipis: halts,
            exits,
        });
        Some(r)
    }

    fn vm(pid: i32, name: &str, threads: &[(i32, u32, Option<Reading>)]) -> SeenVm {
        SeenVm {
            pid,
            name: name.into(),
            comm: "qemu-system-x86".into(),
            vcpus: threads.len() as u32,
            threads: threads
                .iter()
                .map(|&(tid, vcpu, look)| SeenThread { tid, vcpu, look })
                .collect(),
        }
    }

    fn of<'a>(s: &'a [VmSeries], name: &str) -> &'a VmSeries {
        s.iter().find(|v| v.vm == name).unwrap()
    }

    #[test]
    fn counters_start_at_the_first_reading_and_a_thread_that_ends_keeps_what_it_counted() {
        let mut l = Ledger::new(4, Vec::new());
        let s = l.update(&[vm(10, "db", &[(11, 0, look(1_000, 50, Some(3)))])]);
        let zero = Counts {
            kvm: None,
            ..Counts::default()
        };
        assert_eq!(of(&s, "db").counts, Some(zero));
        assert_eq!(of(&s, "db").measured, 1);
        let s = l.update(&[vm(
            10,
            "db",
            &[
                (11, 0, look(3_000, 150, Some(5))),
                (12, 1, look(7_000, 7, Some(1))),
            ],
        )]);
        let c = of(&s, "db").counts.unwrap();
        assert_eq!((c.run_ns, c.wait_ns, c.migrations), (2_000, 100, Some(2)));
        // Thread 11 ended: its 2,000 ns stay; 12 counts on from its baseline.
        let s = l.update(&[vm(10, "db", &[(12, 1, look(8_000, 10, Some(1)))])]);
        let c = of(&s, "db").counts.unwrap();
        assert_eq!((c.run_ns, c.wait_ns), (3_000, 103));
        assert_eq!(of(&s, "db").measured, 1);
        // A reading that went back (another thread took the id) starts again, and nothing is
        // lost or subtracted.
        let s = l.update(&[vm(10, "db", &[(12, 1, look(10, 1, Some(0)))])]);
        assert_eq!(of(&s, "db").counts.unwrap().run_ns, 3_000);
        let s = l.update(&[vm(10, "db", &[(12, 1, look(510, 2, Some(0)))])]);
        assert_eq!(of(&s, "db").counts.unwrap().run_ns, 3_500);
        // A reading that failed this scrape keeps the last one.
        let s = l.update(&[vm(10, "db", &[(12, 1, None)])]);
        assert_eq!(of(&s, "db").counts.unwrap().run_ns, 3_500);
    }

    #[test]
    fn every_counter_only_grows_as_vms_come_and_go_beyond_the_cap() {
        let mut l = Ledger::new(1, Vec::new());
        let mut last: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        let mut check = |s: &[VmSeries]| {
            for v in s {
                if let Some(c) = v.counts {
                    let before = last.insert(v.vm.clone(), (c.run_ns, c.wait_ns));
                    if let Some((r, w)) = before {
                        assert!(c.run_ns >= r && c.wait_ns >= w, "{} went back", v.vm);
                    }
                }
            }
        };
        let t = |k: u64| look(100 * k, 10 * k, None);
        check(&l.update(&[vm(1, "a", &[(2, 0, t(1))]), vm(3, "b", &[(4, 0, t(1))])]));
        check(&l.update(&[
            vm(1, "a", &[(2, 0, t(2))]),
            vm(3, "b", &[(4, 0, t(3))]),
            vm(5, "c", &[(6, 0, t(1))]),
        ]));
        // b (in other) ends; c goes on in other; a ends and frees its slot for d.
        let s = l.update(&[vm(5, "c", &[(6, 0, t(4))]), vm(7, "d", &[(8, 0, t(9))])]);
        check(&s);
        let names: Vec<&str> = s.iter().map(|v| v.vm.as_str()).collect();
        assert_eq!(names, ["d", OTHER]);
        // other: b's 200 ns carried and c's 300.
        assert_eq!(of(&s, OTHER).counts.unwrap().run_ns, 500);
        assert_eq!(of(&s, OTHER).vcpus, 1);
        // Every VM of other ended: its counters stay, with no vCPU left.
        let s = l.update(&[vm(7, "d", &[(8, 0, t(10))])]);
        check(&s);
        assert_eq!(of(&s, OTHER).counts.unwrap().run_ns, 500);
        assert_eq!(of(&s, OTHER).vcpus, 0);
        // Without a kernel count, no migrations: None, never 0.
        assert_eq!(of(&s, "d").counts.unwrap().migrations, None);
    }

    #[test]
    fn kvm_events_count_from_the_first_reading_add_up_over_vcpus_and_survive_a_thread() {
        let mut l = Ledger::new(4, Vec::new());
        let s = l.update(&[vm(
            10,
            "db",
            &[
                (11, 0, with_kvm(0, 100, 90, None)),
                (12, 1, with_kvm(0, 10, 0, None)),
            ],
        )]);
        assert_eq!(
            of(&s, "db").counts.unwrap().kvm,
            Some(KvmCounts {
                exits: None,
                ..KvmCounts::default()
            }),
            "from the first reading; exits not traced stay unknown"
        );
        let s = l.update(&[vm(
            10,
            "db",
            &[
                (11, 0, with_kvm(5, 150, 130, None)),
                (12, 1, with_kvm(5, 30, 0, None)),
            ],
        )]);
        let k = of(&s, "db").counts.unwrap().kvm.unwrap();
        assert_eq!((k.halts, k.polls_won, k.slept, k.ipis), (70, 40, 30, 70));
        assert_eq!((k.polls_won_ns, k.slept_ns), (40_000, 3_000_000));
        // Thread 12 ends: what it counted stays.
        let s = l.update(&[vm(10, "db", &[(11, 0, with_kvm(9, 160, 140, None))])]);
        let k = of(&s, "db").counts.unwrap().kvm.unwrap();
        assert_eq!((k.halts, k.polls_won), (80, 50));
        // Its entry freed and taken again from 0 by a new thread of the same id: a new
        // baseline, nothing subtracted.
        let s = l.update(&[vm(10, "db", &[(11, 0, with_kvm(10, 3, 3, None))])]);
        assert_eq!(of(&s, "db").counts.unwrap().kvm.unwrap().halts, 80);
        // A VM whose threads have no KVM reading has no KVM counts: absent, never 0.
        let s = l.update(&[vm(20, "web", &[(21, 0, look(0, 0, Some(0)))])]);
        assert_eq!(of(&s, "web").counts.unwrap().kvm, None);
        // Exits where traced add up.
        let mut l = Ledger::new(4, Vec::new());
        l.update(&[vm(30, "x", &[(31, 0, with_kvm(0, 1, 1, Some(7)))])]);
        let s = l.update(&[vm(30, "x", &[(31, 0, with_kvm(1, 2, 2, Some(19)))])]);
        assert_eq!(of(&s, "x").counts.unwrap().kvm.unwrap().exits, Some(12));
    }

    #[test]
    fn labels_are_names_and_a_vm_without_one_is_its_command_and_pid() {
        let mut l = Ledger::new(8, vec!["db".into()]);
        let mut unnamed = vm(30, "cpulab", &[(31, 0, look(0, 0, Some(0)))]);
        unnamed.comm = "cpulab".into();
        let s = l.update(&[
            vm(10, "db", &[(11, 0, look(0, 0, Some(0))), (12, 1, None)]),
            vm(20, "db", &[]),
            vm(25, OTHER, &[]),
            unnamed,
        ]);
        let names: Vec<&str> = s.iter().map(|v| v.vm.as_str()).collect();
        assert_eq!(names, ["cpulab (30)", "db", "db (20)", "other (25)"]);
        // A VM with no thread read yet has its vCPUs but no counters.
        assert_eq!(of(&s, "db (20)").counts, None);
        // Per-vCPU only for the VM named by --vm, and only the vCPUs read.
        assert_eq!(
            of(&s, "db").per_vcpu.as_ref().map(|m| m.len()),
            Some(1),
            "{s:?}"
        );
        assert_eq!(of(&s, "db").vcpus, 2);
        assert!(of(&s, "cpulab (30)").per_vcpu.is_none());
    }

    #[test]
    fn a_host_without_kvm_publishes_zero_vms_and_fails_nothing() {
        let t = crate::testing::tree(&[("proc/1/comm", "init\n")]);
        // Without KVM, whoever asks: nothing to inspect.
        for may_inspect in [true, false] {
            let l = looking(t.path(), may_inspect);
            let mut w = VmWatch::new(t.path(), l, 4, Vec::new(), Err("not here".into()));
            let (f, errors) = w.read();
            assert!(errors.is_empty());
            assert_eq!(f.count, Some(0));
            assert!(f.off.as_deref().unwrap().contains("no KVM"), "{f:?}");
        }
        // With the module, the same tree is scanned: no process holds a VM.
        std::fs::create_dir_all(t.path().join("sys/module/kvm")).unwrap();
        let mut w = VmWatch::new(
            t.path(),
            looking(t.path(), true),
            4,
            Vec::new(),
            Err("not here".into()),
        );
        let (f, errors) = w.read();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!((f.count, f.off, f.vms.len()), (Some(0), None, 0));
        // One that may not read other processes' fds cannot say 0: it publishes nothing.
        let l = looking(t.path(), false);
        assert!(matches!(l, Looking::MayNotInspect(_)), "{l:?}");
        let mut w = VmWatch::new(t.path(), l, 4, Vec::new(), Err("not here".into()));
        assert!(!w.publishes());
        assert_eq!(w.read().0.count, None);
    }
}
