//! Wakeup counts as a long-lived source ([`crate::wakeups::Source`]): the in-kernel aggregation
//! ([`BpfSource`], see [`super::bpf::aggregate`]), or where BPF does not load, the perf fallback
//! ([`super::perf_source::PerfSource`]) that aggregates in user space at a higher cost per event.
//!
//! Both are opened through [`super::open`], the one front door. The BPF source costs user space
//! nothing between snapshots but a re-read of the targets once a second (on its own thread: /proc
//! for command names, the cgroup tree for cgroups), so processes that start under a watched
//! cgroup are counted within a second, and a snapshot is one look-up per (target, class, idle)
//! row. Dropping the source stops that thread and closes every program, link and map: nothing
//! stays attached.

use super::bpf::aggregate::{self, CLASSES, Layout, Maps, ROW_WORDS};
use super::bpf::table::{self, MappedArray};
use super::ledger::{Classes, Ledger};
use super::slots::{OTHER, Resolver, Slots};
use crate::bpf::sys;
use crate::machine::Machine;
use crate::wakeups::{
    ClassCounts, LATENCY_BOUNDS_NS, ProgramCost, Snapshot, Source, SourceOptions, TargetCounts,
};
use anyhow::Result;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the targets are re-read.
pub const REFRESH: Duration = Duration::from_secs(1);

/// Targets as the kernel's `targets` map holds them, kept current by the refresh thread.
struct Targets {
    resolver: Resolver,
    slots: Slots,
    /// Each label's counts over the slots it held (targets that follow the host).
    ledger: Ledger,
    /// tgid -> slot, as installed in the map.
    installed: HashMap<i32, u32>,
    /// Processes refused a `targets` entry (every entry of their bucket held another live
    /// target, see [`table`]), each counted once however many re-reads refuse it again.
    refused: u64,
    /// Those refused at the last re-read: counted already.
    refused_now: HashSet<i32>,
}

impl Targets {
    /// The targets the options name, and whether the whole machine is watched (no names: the
    /// busiest groups are ranked into the slots).
    fn named(machine: &Machine, opts: &SourceOptions, max_targets: usize) -> (Self, bool) {
        let resolver = Resolver::new(&machine.root, opts);
        let whole_machine = resolver.whole_machine();
        let mut slots = if whole_machine {
            Slots::ranked(max_targets)
        } else {
            Slots::new(max_targets)
        };
        for label in resolver.named_labels() {
            slots.slot(&label);
        }
        let targets = Self {
            resolver,
            slots,
            ledger: Ledger::default(),
            installed: HashMap::new(),
            refused: 0,
            refused_now: HashSet::new(),
        };
        (targets, whole_machine)
    }
}

impl Targets {
    /// Re-reads who the targets are and brings the kernel's map in line: processes gone are
    /// removed, new ones added with their label's slot.
    fn refresh(&mut self, table: &MappedArray) {
        let members = self.resolver.members();
        let keep: HashSet<&str> = members.values().map(String::as_str).collect();
        self.slots.release_all_but(&keep);
        self.apply(table.entries(), members);
    }

    /// [`Self::refresh`] for the members it read (pid -> label), on the table's entries.
    fn apply(&mut self, entries: &[AtomicU64], members: BTreeMap<i32, String>) {
        // What the table holds before the scan: the fork program adds children of targets as
        // they are born; one born during the scan is not in this list, so it is not removed.
        let held = table::held(entries);
        // Watching the whole machine, the watcher leaves itself out; named, it is counted.
        let me = self
            .resolver
            .whole_machine()
            .then_some(std::process::id() as i32);
        let mut now = HashMap::with_capacity(members.len());
        for (pid, label) in members {
            if Some(pid) != me {
                now.insert(pid, self.slots.slot(&label));
            }
        }
        for pid in held {
            if !now.contains_key(&(pid as i32)) {
                table::remove(entries, pid);
            }
        }
        self.installed.retain(|pid, _| now.contains_key(pid));
        self.refused_now.retain(|pid| now.contains_key(pid));
        for (pid, slot) in now {
            if self.installed.get(&pid) == Some(&slot)
                && table::slot_of(entries, pid as u32) == Some(slot)
            {
                continue;
            }
            if table::set(entries, pid as u32, slot) {
                self.installed.insert(pid, slot);
                self.refused_now.remove(&pid);
            } else if self.refused_now.insert(pid) {
                self.refused += 1;
            }
        }
    }
}

/// The in-kernel aggregation, attached from [`BpfSource::open`] until dropped.
pub struct BpfSource {
    rows: OwnedFd,
    stats: OwnedFd,
    targets_map: Arc<MappedArray>,
    // Kept open: the programs run while their links are open; the other maps are theirs.
    _links: Vec<OwnedFd>,
    _progs: Vec<OwnedFd>,
    /// The tracepoint of each program, in `_progs` order.
    prog_names: Vec<&'static str>,
    /// Held while the kernel times the programs (`SourceOptions::program_costs`).
    timing: Option<OwnedFd>,
    _maps: Vec<OwnedFd>,
    targets: Arc<Mutex<Targets>>,
    stop: Arc<AtomicBool>,
    refresher: Option<std::thread::JoinHandle<()>>,
    ncpu: usize,
    /// Class indexes present among the online CPUs, nearest first.
    classes: Vec<u32>,
    whole_machine: bool,
    /// Which programs these are (`tp_btf` typed, else raw with helper reads).
    pub typed: bool,
    prog_ids: Vec<u32>,
    latency_sample: u32,
    /// `pending`, cleared by the refresh thread before each re-attach.
    _pending: Arc<MappedArray>,
    /// The scheduler programs' links, attached one second in every `attach_every`.
    duty: Arc<Mutex<Duty>>,
    attach_every: u32,
    /// When the first attached window began (wall clock): window `k` is the second from
    /// `k * attach_every` seconds after it.
    windows_from: std::time::SystemTime,
}

/// Whether the scheduler programs are attached `elapsed` into a source that attaches them one
/// second in every `every` (pure): the first second of each `every`.
pub fn attached_at(elapsed: Duration, every: u32) -> bool {
    every <= 1 || elapsed.as_secs().is_multiple_of(u64::from(every))
}

/// How long the refresh thread sleeps `elapsed` into the source: a step of at most 100 ms that
/// ends on the next whole second if that comes first (pure).
pub fn next_step(elapsed: Duration) -> Duration {
    const STEP: Duration = Duration::from_millis(100);
    let into_second = Duration::from_nanos(u64::from(elapsed.subsec_nanos()));
    let to_second = Duration::from_secs(1) - into_second;
    // A hair past the second, so the step after the sleep falls in the new window.
    STEP.min(to_second + Duration::from_micros(50))
}

/// The `sched_waking` and `sched_switch` programs and their links, attached one second in
/// every `every` (`SourceOptions::attach_every`): detached, they cost the scheduler nothing,
/// not even their dispatch. The other programs (fork, exec) stay attached, so targets are
/// followed throughout.
struct Duty {
    every: u32,
    /// Each program with the tracepoint to attach it to (`None`: a typed program knows it).
    progs: Vec<(Option<&'static str>, OwnedFd)>,
    /// Open while attached.
    links: Vec<OwnedFd>,
    /// Since when they are attached (`None`: detached).
    since: Option<std::time::Instant>,
    /// Time attached before `since`.
    attached: Duration,
}

impl Duty {
    /// Attaches or detaches as the window `elapsed` falls in wants. Before attaching, `pending`
    /// is cleared: a wakeup noted before the last detach and switched in meanwhile would
    /// otherwise be placed with a latency of seconds.
    fn step(&mut self, elapsed: Duration, pending: &MappedArray) {
        let want = attached_at(elapsed, self.every);
        let attached = !self.links.is_empty();
        if want == attached {
            return;
        }
        if !want {
            self.links.clear();
            if let Some(t) = self.since.take() {
                self.attached += t.elapsed();
            }
            return;
        }
        pending.clear();
        for (name, prog) in &self.progs {
            match sys::raw_attach(*name, prog) {
                Ok(link) => self.links.push(link),
                // Refused (out of memory): detached until the next step tries again; the
                // attached time published says so.
                Err(_) => {
                    self.links.clear();
                    return;
                }
            }
        }
        self.since = Some(std::time::Instant::now());
    }

    /// Time attached so far.
    fn attached(&self) -> Duration {
        self.attached + self.since.map_or(Duration::ZERO, |t| t.elapsed())
    }
}

/// The scheduler programs, in the order they are loaded, attached and timed.
const SCHED_PROGRAMS: [&str; 2] = ["sched_waking", "sched_switch"];

/// Has the kernel time every BPF program while the returned descriptor is open.
fn time_programs() -> std::io::Result<OwnedFd> {
    sys::enable_stats().map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!(
                "cannot have the kernel time the BPF programs (BPF_ENABLE_STATS needs \
                 CAP_SYS_ADMIN): {e}"
            ),
        )
    })
}

/// The maps the programs share, owned here until the source takes them.
struct KernelMaps {
    targets: Arc<MappedArray>,
    /// Buckets of ways keyed by tid (see `aggregate`): a wakeup whose switch-in never comes
    /// (rare: a task's switch-in or switch-out gives its way back) keeps its way until the
    /// next clear; a bucket with no free way counts the next wakeup lost. Mapped, so that user
    /// space can clear it before re-attaching (`--attach-every`).
    pending: Arc<MappedArray>,
    classes: OwnedFd,
    rows: OwnedFd,
    stats: OwnedFd,
    sampler: OwnedFd,
    /// The `--comm` names for the exec program (none without names or the BTF's `comm`).
    comms: Option<OwnedFd>,
}

impl KernelMaps {
    /// Creates every map but `comms`, for `ncpu` possible CPUs and `nrows` rows.
    fn create(ncpu: u32, nrows: u32) -> std::io::Result<Self> {
        let percpu = |value: u32, entries: u32, name: &str| {
            sys::map_create(sys::BPF_MAP_TYPE_PERCPU_ARRAY, 4, value, entries, name)
        };
        Ok(Self {
            targets: Arc::new(MappedArray::targets("cpulab_targets")?),
            pending: Arc::new(MappedArray::create(
                "cpulab_pending",
                aggregate::PENDING * aggregate::PENDING_WAYS,
                aggregate::PENDING_BUCKETS,
            )?),
            classes: sys::map_create(sys::BPF_MAP_TYPE_ARRAY, 4, 4, ncpu * ncpu, "cpulab_classes")?,
            rows: percpu((ROW_WORDS * 8) as u32, nrows, "cpulab_rows")?,
            stats: percpu(8, aggregate::STATS, "cpulab_stats")?,
            sampler: percpu(aggregate::SAMPLER, 1, "cpulab_sampler")?,
            comms: None,
        })
    }

    /// The descriptors as the programs are built with them.
    fn fds(&self) -> Maps {
        Maps {
            comms: self.comms.as_ref().map_or(-1, |m| m.as_raw_fd()),
            targets: self.targets.fd().as_raw_fd(),
            pending: self.pending.fd().as_raw_fd(),
            classes: self.classes.as_raw_fd(),
            rows: self.rows.as_raw_fd(),
            stats: self.stats.as_raw_fd(),
            sampler: self.sampler.as_raw_fd(),
        }
    }
}

/// Fills the CPU-pair class table from the topology (`aggregate::class_table`, the one
/// definition of a pair's class, `Topology::class`); returns the class indexes present among
/// the online CPUs, nearest first.
fn fill_classes(
    map: &OwnedFd,
    topology: &crate::topology::Topology,
    n: u32,
) -> std::io::Result<Vec<u32>> {
    let table = aggregate::class_table(topology, n);
    for (i, c) in table.iter().enumerate() {
        sys::map_update(map, &(i as u32).to_ne_bytes(), &c.to_ne_bytes())?;
    }
    let online = topology.online.to_vec();
    Ok(topology
        .classes_among(&online)
        .into_iter()
        .filter_map(aggregate::class_index)
        .collect())
}

/// The exec program's map of `--comm` names to their slots (none without names).
fn comms_map(names: &[&String], slots: &mut Slots) -> std::io::Result<Option<OwnedFd>> {
    if names.is_empty() {
        return Ok(None);
    }
    let map = sys::map_create(
        sys::BPF_MAP_TYPE_HASH,
        16,
        4,
        names.len() as u32,
        "cpulab_comms",
    )?;
    for name in names {
        let slot = slots.slot(name);
        if slot != slots.other() {
            sys::map_update(&map, &aggregate::comm_key(name), &slot.to_ne_bytes())?;
        }
    }
    Ok(Some(map))
}

/// The scheduler programs, loaded and attached.
struct Scheduler {
    /// BTF-typed (`tp_btf`) programs, else untyped raw tracepoints.
    typed: bool,
    progs: Vec<OwnedFd>,
    links: Vec<OwnedFd>,
}

/// Loads and attaches the `sched_waking` and `sched_switch` programs: BTF-typed where the
/// kernel takes them (`typed_ids`: the tracepoints' typedef ids in `EVENT_NAMES` order), else
/// untyped raw tracepoints reading task fields with helper calls.
fn attach_scheduler(
    maps: &Maps,
    layout: Layout,
    offsets: &crate::watch::btf::TaskOffsets,
    typed_ids: Option<&[u32; 4]>,
) -> std::io::Result<Scheduler> {
    let attach = |typed: Option<&[u32; 4]>| -> std::io::Result<Scheduler> {
        let l = Layout {
            direct: typed.is_some(),
            ..layout
        };
        let programs = [
            aggregate::waking(maps, &l, offsets),
            aggregate::switch(maps, &l, offsets),
        ];
        let mut s = Scheduler {
            typed: typed.is_some(),
            progs: Vec::new(),
            links: Vec::new(),
        };
        // EVENT_NAMES order of the typedef ids: waking 0, switch 1.
        for (i, (name, insns)) in SCHED_PROGRAMS.iter().zip(programs).enumerate() {
            let label = format!("cpulab_a_{}", &name[6..]);
            let prog = match typed {
                Some(ids) => {
                    sys::prog_load(&insns, &label, sys::BPF_PROG_TYPE_TRACING, Some(ids[i]))?
                }
                None => sys::prog_load(&insns, &label, sys::BPF_PROG_TYPE_RAW_TRACEPOINT, None)?,
            };
            let link = sys::raw_attach(typed.is_none().then_some(*name), &prog)?;
            s.progs.push(prog);
            s.links.push(link);
        }
        Ok(s)
    };
    match typed_ids.map(|ids| attach(Some(ids))) {
        Some(Ok(s)) => Ok(s),
        _ => attach(None),
    }
}

/// The programs that follow targets: children of targets join at birth (see
/// `aggregate::fork`), and a process that `exec`s into a `--comm` name joins it (where the
/// `comms` map exists). Forks are rare, so the untyped programs serve every kernel; where one
/// does not load, the refresh alone finds new processes, within a second. Each is the
/// tracepoint, the program and its link.
fn attach_followers(
    maps: &Maps,
    layout: Layout,
    offsets: &crate::watch::btf::TaskOffsets,
) -> Vec<(&'static str, OwnedFd, OwnedFd)> {
    let l = Layout {
        direct: false,
        ..layout
    };
    let mut programs = vec![(
        "sched_process_fork",
        "cpulab_a_fork",
        aggregate::fork(maps, &l, offsets),
    )];
    if maps.comms >= 0
        && let Some(insns) = aggregate::exec(maps, offsets)
    {
        programs.push(("sched_process_exec", "cpulab_a_exec", insns));
    }
    programs
        .into_iter()
        .filter_map(|(tracepoint, label, insns)| {
            let prog =
                sys::prog_load(&insns, label, sys::BPF_PROG_TYPE_RAW_TRACEPOINT, None).ok()?;
            let link = sys::raw_attach(Some(tracepoint), &prog).ok()?;
            Some((tracepoint, prog, link))
        })
        .collect()
}

/// Every program of the aggregation, attached: the scheduler's on their duty cycle, then those
/// that follow targets' children.
struct Attached {
    /// BTF-typed (`tp_btf`) scheduler programs, else untyped raw tracepoints.
    typed: bool,
    duty: Duty,
    /// Every program, the scheduler's first, and each one's tracepoint in the same order.
    progs: Vec<OwnedFd>,
    prog_names: Vec<&'static str>,
    /// The followers' links (the scheduler's are the duty's).
    links: Vec<OwnedFd>,
}

impl Attached {
    fn all(
        fds: &Maps,
        layout: Layout,
        offsets: &crate::watch::btf::TaskOffsets,
        typed_ids: Option<&[u32; 4]>,
        attach_every: u32,
    ) -> std::io::Result<Self> {
        let sched = attach_scheduler(fds, layout, offsets, typed_ids)?;
        let typed = sched.typed;
        let duty = Duty {
            every: attach_every.max(1),
            progs: sched
                .progs
                .iter()
                .zip(SCHED_PROGRAMS)
                .map(|(p, name)| Ok(((!typed).then_some(name), p.try_clone()?)))
                .collect::<std::io::Result<_>>()?,
            links: sched.links,
            since: Some(std::time::Instant::now()),
            attached: Duration::ZERO,
        };
        let mut a = Self {
            typed,
            duty,
            progs: sched.progs,
            prog_names: SCHED_PROGRAMS.to_vec(),
            links: Vec::new(),
        };
        // A named target's children join it at birth; watching the whole machine, those of
        // a named group do (until the next refresh says otherwise).
        for (name, prog, link) in attach_followers(fds, layout, offsets) {
            a.progs.push(prog);
            a.links.push(link);
            a.prog_names.push(name);
        }
        Ok(a)
    }
}

/// What the refresh thread keeps current.
struct Refresher {
    targets: Arc<Mutex<Targets>>,
    map: Arc<MappedArray>,
    stop: Arc<AtomicBool>,
    duty: Arc<Mutex<Duty>>,
    pending: Arc<MappedArray>,
    /// The attached windows' origin.
    origin: std::time::Instant,
}

/// Starts the thread that attaches and detaches the scheduler programs on their windows and
/// re-reads the targets every [`REFRESH`], until `stop`; none when no thread could start.
fn start_refresher(r: Refresher) -> Option<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("cpulab-targets".into())
        .spawn(move || {
            let mut refreshed = Duration::ZERO;
            while !r.stop.load(Ordering::Relaxed) {
                // Small steps, so a drop is not held up by a whole period; and a step ends on
                // each whole second, so the attached windows start and end on their second
                // (within the sleep's wake-up latency), not up to a step late.
                std::thread::sleep(next_step(r.origin.elapsed()));
                let elapsed = r.origin.elapsed();
                if let Ok(mut d) = r.duty.lock() {
                    d.step(elapsed, &r.pending);
                }
                if elapsed >= refreshed + REFRESH {
                    refreshed = elapsed;
                    if let Ok(mut t) = r.targets.lock() {
                        t.refresh(&r.map);
                    }
                }
            }
        })
        .ok()
}

impl BpfSource {
    /// Opens the in-kernel aggregation in the order its parts depend on: the kernel's timing of
    /// the programs (before they load, so each one's runs count from the first), the maps, the
    /// class table, the targets, the scheduler programs, the programs that follow targets'
    /// children, and the refresh thread. Anything that fails closes what was opened before it
    /// (every part is an owned descriptor). One sequence on purpose: each step takes the
    /// descriptors of those before it; the steps themselves are the functions above.
    pub fn open(machine: &Machine, opts: &SourceOptions) -> std::io::Result<Self> {
        let ncpu = super::bpf::possible_cpus(&machine.root)
            .ok_or_else(|| std::io::Error::other("cannot read /sys/devices/system/cpu/possible"))?;
        if ncpu > 4096 {
            return Err(std::io::Error::other(format!(
                "{ncpu} possible CPUs: the CPU-pair table would be too large"
            )));
        }
        let (offsets, typed_ids) =
            super::mechanism::raw_offsets(&machine.root).map_err(std::io::Error::other)?;
        let max_targets = opts.max_targets.clamp(1, 1024);
        let (mut targets, whole_machine) = Targets::named(machine, opts, max_targets);
        let timing = if opts.program_costs {
            Some(time_programs()?)
        } else {
            None
        };
        let n = ncpu as u32;
        let mut maps = KernelMaps::create(n, aggregate::rows(targets.slots.count()))?;
        let classes = fill_classes(&maps.classes, &machine.topology, n)?;
        targets.refresh(&maps.targets);
        // The `--comm` names for the exec program, where the kernel's BTF gives the name's place.
        if offsets.comm.is_some() {
            let names: Vec<&String> = opts.comms.iter().take(max_targets).collect();
            maps.comms = comms_map(&names, &mut targets.slots)?;
        }
        let fds = maps.fds();
        let layout = Layout {
            ncpu: n,
            unmatched: whole_machine.then(|| targets.slots.other()),
            direct: false,
            sample: opts.latency_sample,
        };
        let Attached {
            typed,
            duty,
            progs,
            prog_names,
            links,
        } = Attached::all(
            &fds,
            layout,
            &offsets,
            typed_ids.as_ref(),
            opts.attach_every,
        )?;
        let prog_ids = progs.iter().filter_map(|p| sys::prog_id(p).ok()).collect();
        let targets = Arc::new(Mutex::new(targets));
        let stop = Arc::new(AtomicBool::new(false));
        let duty = Arc::new(Mutex::new(duty));
        // The windows' origin: the programs were attached just before.
        let origin_wall = std::time::SystemTime::now();
        let refresher = start_refresher(Refresher {
            targets: targets.clone(),
            map: maps.targets.clone(),
            stop: stop.clone(),
            duty: duty.clone(),
            pending: maps.pending.clone(),
            origin: std::time::Instant::now(),
        });
        Ok(Self {
            rows: maps.rows,
            stats: maps.stats,
            targets_map: maps.targets,
            _links: links,
            _progs: progs,
            prog_names,
            timing,
            _maps: [maps.classes, maps.sampler]
                .into_iter()
                .chain(maps.comms)
                .collect(),
            _pending: maps.pending,
            duty,
            targets,
            stop,
            ncpu,
            classes,
            whole_machine,
            typed,
            prog_ids,
            latency_sample: opts.latency_sample,
            // Without the thread nothing detaches them: the counts are what they are.
            attach_every: if refresher.is_some() {
                opts.attach_every.max(1)
            } else {
                1
            },
            refresher,
            windows_from: origin_wall,
        })
    }

    /// The kernel ids of the attached programs (to check they are gone after a drop).
    pub fn program_ids(&self) -> &[u32] {
        &self.prog_ids
    }

    /// Watched processes known now (the `targets` map's entries): bounded by the processes
    /// alive, however many have come and gone.
    pub fn tracked_processes(&self) -> usize {
        self.targets.lock().map(|t| t.installed.len()).unwrap_or(0)
    }

    /// The process ids the kernel's `targets` map holds now: what the refresh installed, plus
    /// the children and `exec`s the kernel added since.
    pub fn kernel_targets(&self) -> std::io::Result<Vec<u32>> {
        Ok(table::held(self.targets_map.entries()))
    }

    /// Re-reads the targets now (the refresh thread does it every [`REFRESH`]).
    pub fn refresh(&self) {
        if let Ok(mut t) = self.targets.lock() {
            t.refresh(&self.targets_map);
        }
    }

    /// Each program's runs and run time while the kernel times them; none when not asked.
    fn program_costs(&self) -> std::io::Result<Vec<ProgramCost>> {
        if self.timing.is_none() {
            return Ok(Vec::new());
        }
        self._progs
            .iter()
            .zip(&self.prog_names)
            .map(|(p, name)| {
                let (runs, run_ns) = sys::prog_run_stats(p)?;
                Ok(ProgramCost {
                    program: name.to_string(),
                    runs,
                    run_ns,
                })
            })
            .collect()
    }

    /// One `rows` row summed over the CPUs.
    fn row(&self, key: u32) -> std::io::Result<[u64; ROW_WORDS]> {
        let mut buf = vec![0u8; self.ncpu * ROW_WORDS * 8];
        sys::map_lookup(&self.rows, &key.to_ne_bytes(), &mut buf)?;
        let mut sum = [0u64; ROW_WORDS];
        for cpu in buf.chunks_exact(ROW_WORDS * 8) {
            for (i, w) in cpu.chunks_exact(8).enumerate() {
                sum[i] += word(w);
            }
        }
        Ok(sum)
    }

    /// One slot's rows, by class, scaled by the attached share.
    fn slot_counts(&self, slot: u32) -> std::io::Result<Classes> {
        let mut classes = BTreeMap::new();
        for &c in &self.classes {
            let busy = self.row(aggregate::row_key(slot, c, false))?;
            let idle = self.row(aggregate::row_key(slot, c, true))?;
            classes.insert(
                CLASSES[c as usize].as_str().to_string(),
                class_counts(&busy, &idle).scaled(self.attach_every),
            );
        }
        Ok(classes)
    }

    fn stat(&self, key: u32) -> std::io::Result<u64> {
        let mut buf = vec![0u8; self.ncpu * 8];
        sys::map_lookup(&self.stats, &key.to_ne_bytes(), &mut buf)?;
        Ok(buf.chunks_exact(8).map(word).sum())
    }
}

/// A native-endian u64 from a per-CPU map value's 8-byte word (`chunks_exact(8)` gives only
/// those; a shorter slice reads its bytes and zeros, never panics).
fn word(w: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = w.len().min(8);
    b[..n].copy_from_slice(&w[..n]);
    u64::from_ne_bytes(b)
}

/// One row pair (busy, idle destination) into a class's counts.
pub fn class_counts(busy: &[u64; ROW_WORDS], idle: &[u64; ROW_WORDS]) -> ClassCounts {
    let buckets: Vec<u64> = (0..LATENCY_BOUNDS_NS.len())
        .map(|b| busy[b] + idle[b])
        .collect();
    let over = busy[aggregate::BUCKETS - 1] + idle[aggregate::BUCKETS - 1];
    ClassCounts {
        to_idle: idle[aggregate::ROW_WAKEUPS],
        to_busy: busy[aggregate::ROW_WAKEUPS],
        count: buckets.iter().sum::<u64>() + over,
        buckets,
        sum_ns: busy[aggregate::ROW_SUM] + idle[aggregate::ROW_SUM],
    }
}

impl Source for BpfSource {
    fn mechanism(&self) -> &str {
        "bpf"
    }

    fn attach_windows(&self) -> Option<(u32, std::time::SystemTime)> {
        (self.attach_every > 1).then_some((self.attach_every, self.windows_from))
    }

    fn snapshot(&mut self) -> Result<Snapshot> {
        // Held throughout: the refresh thread gives no slot up while its counts are read.
        let mut t = self
            .targets
            .lock()
            .map_err(|_| anyhow::anyhow!("the target refresh thread panicked"))?;
        let t = &mut *t;
        let held = t.slots.held();
        let held_labels: HashSet<&str> = held.iter().map(|(l, _)| l.as_str()).collect();
        for (slot, label) in t.slots.leaving() {
            let now = self.slot_counts(slot)?;
            t.ledger.settle(&label, slot, &now, &held_labels);
            t.slots.settle(slot);
        }
        let mut targets = Vec::with_capacity(held.len() + 1);
        for (label, slot) in &held {
            let classes = t.ledger.counts(label, *slot, &self.slot_counts(*slot)?);
            targets.push(TargetCounts {
                target: label.clone(),
                classes,
            });
        }
        let dropped = t.slots.dropped();
        if self.whole_machine || dropped > 0 {
            targets.push(TargetCounts {
                target: OTHER.to_string(),
                classes: self.slot_counts(t.slots.other())?,
            });
        }
        let refused = t.refused;
        Ok(Snapshot {
            targets,
            events_seen: self.stat(aggregate::STAT_SEEN)?,
            events_lost: self.stat(aggregate::STAT_LOST)? + refused,
            targets_dropped: dropped,
            programs: self.program_costs()?,
            latency_sample: self.latency_sample.max(1),
            attach_every: self.attach_every,
            attached_ns: self
                .duty
                .lock()
                .map(|d| d.attached().as_nanos() as u64)
                .unwrap_or(0),
        })
    }
}

impl Drop for BpfSource {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.refresher.take() {
            let _ = t.join();
        }
        // The links, programs and maps close with their descriptors: detached here.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::bpf::table::{TARGET_BUCKETS, TARGET_ENTRIES, WAYS};

    fn targets() -> Targets {
        let opts = SourceOptions {
            comms: vec!["postgres".into()],
            max_targets: 4,
            ..Default::default()
        };
        Targets {
            resolver: Resolver::new(std::path::Path::new("/nonexistent"), &opts),
            slots: Slots::new(4),
            ledger: Ledger::default(),
            installed: HashMap::new(),
            refused: 0,
            refused_now: HashSet::new(),
        }
    }

    #[test]
    fn the_refresh_steps_end_on_each_whole_second() {
        let step = |ms: u64| next_step(Duration::from_millis(ms));
        assert_eq!(step(0), Duration::from_millis(100));
        assert_eq!(step(1_500), Duration::from_millis(100));
        assert_eq!(step(1_900), Duration::from_millis(100));
        // 50 ms before a second: the step ends just past it, not 50 ms into the next.
        assert_eq!(step(2_950), Duration::from_micros(50_050));
        let near = next_step(Duration::from_nanos(3_999_999_000));
        assert_eq!(near, Duration::from_micros(51));
        // Wherever a step starts, it ends past the next second at most 50 us late, or before it.
        for ns in (0..3_000_000_000u64).step_by(7_777_777) {
            let at = Duration::from_nanos(ns);
            let end = at + next_step(at);
            let second = Duration::from_secs(at.as_secs() + 1);
            assert!(
                end <= second + Duration::from_micros(50),
                "{at:?} -> {end:?}"
            );
            assert!(end > at, "{at:?}");
        }
    }

    #[test]
    fn the_programs_are_attached_the_first_second_of_each_period() {
        let at = |ms: u64, every| attached_at(Duration::from_millis(ms), every);
        for ms in [0, 999, 1_000, 5_500, 3_600_000] {
            assert!(at(ms, 1) && at(ms, 0), "always attached at {ms} ms");
        }
        let on: Vec<u64> = (0..12).filter(|s| at(s * 1_000 + 500, 4)).collect();
        assert_eq!(on, [0, 4, 8]);
        assert!(at(3_999 + 1, 4) && !at(3_999, 4) && !at(1_000, 4) && at(999, 4));
        let on: Vec<u64> = (0..6).filter(|s| at(s * 1_000, 2)).collect();
        assert_eq!(on, [0, 2, 4]);
    }

    #[test]
    fn a_refused_process_is_counted_once_however_often_it_is_refused_again() {
        let entries: Vec<AtomicU64> = (0..TARGET_ENTRIES).map(|_| AtomicU64::new(0)).collect();
        // One more process than a bucket has ways, all of one bucket, at pids up to
        // `PID_MAX_LIMIT`.
        let ids: Vec<i32> = (4_000_000..=4_194_304)
            .filter(|&p| table::bucket(p as u32, TARGET_BUCKETS) == 9)
            .take(WAYS as usize + 1)
            .collect();
        assert_eq!(ids.len(), WAYS as usize + 1);
        let label = |pids: &[i32]| -> BTreeMap<i32, String> {
            pids.iter().map(|&p| (p, "postgres".to_string())).collect()
        };
        let placed = |entries: &[AtomicU64]| -> Vec<i32> {
            ids.iter()
                .copied()
                .filter(|&p| table::slot_of(entries, p as u32) == Some(0))
                .collect()
        };
        let mut t = targets();
        for _ in 0..5 {
            t.apply(&entries, label(&ids));
        }
        // All but one hold an entry; the last is refused, once however many re-reads.
        let held = placed(&entries);
        assert_eq!(held.len(), WAYS as usize, "{held:?}");
        let refused = *ids.iter().find(|p| !held.contains(p)).unwrap();
        assert_eq!(t.refused, 1, "one process refused, five re-reads");
        // A holder ends: the refused one gets its entry at the next re-read, counted no more.
        let rest: Vec<i32> = ids.iter().copied().filter(|&p| p != held[0]).collect();
        t.apply(&entries, label(&rest));
        assert!(placed(&entries).contains(&refused));
        assert_eq!(t.refused, 1);
        // The first comes back (a new process with the same id): now it is the one refused.
        t.apply(&entries, label(&ids));
        t.apply(&entries, label(&ids));
        assert!(!placed(&entries).contains(&held[0]));
        assert_eq!(t.refused, 2);
        // Nothing watched: the table is emptied.
        t.apply(&entries, BTreeMap::new());
        assert!(table::held(&entries).is_empty());
    }

    #[test]
    fn processes_whose_pids_agree_modulo_32768_are_all_targets() {
        let entries: Vec<AtomicU64> = (0..TARGET_ENTRIES).map(|_| AtomicU64::new(0)).collect();
        let ids: Vec<i32> = (0..128).map(|k| 1234 + k * 32_768).collect();
        let members: BTreeMap<i32, String> =
            ids.iter().map(|&p| (p, "postgres".to_string())).collect();
        let mut t = targets();
        t.apply(&entries, members);
        assert_eq!(t.refused, 0);
        assert!(
            ids.iter()
                .all(|&p| table::slot_of(&entries, p as u32) == Some(0))
        );
    }
}
