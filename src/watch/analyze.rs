//! From a time-ordered stream of scheduler events to per-process wakeup figures.
//!
//! The analysis is a small state machine over tasks, pure so it can be driven by hand in tests.
//! It follows each wakeup from records the kernel delivers: a `sched_waking` (the waker's
//! context, so the sample's task and CPU are the waker's) starts the wakeup's clock; a
//! `sched_migrate_task` of the wakee before it runs is where the wakeup moved it; its switch-in
//! (`sched_switch` naming it next) ends the clock, and that interval is its wakeup-to-run
//! latency, filed under the placement class of (waker's CPU, the CPU it was woken onto). The CPU
//! it was woken onto is the migration's destination, else the CPU it last ran on; never
//! `sched_waking`'s `target_cpu`, which is only where the task last ran when the waker looked.
//! [`PlacementChecks`] says why `sched_wakeup` is not relied on and how the sources agreed.
//!
//! A task switched out while still runnable waits on the run queue until its next switch-in;
//! both waits add up to run-queue time. Only wakeups of watched tasks are counted
//! ([`Tasks::lookup`] says which tasks are watched and which process they belong to). A wakeup of
//! a task that is already on a CPU or on a run queue counts as a wakeup but has no latency:
//! there was nothing to wait for.

use super::events::{Event, Timed};
use crate::topology::{PlacementClass, Topology};
use hdrhistogram::Histogram;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What the analysis needs to know of a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskInfo {
    /// Its process (thread group).
    pub tgid: i32,
    /// Its process's name.
    pub comm: String,
    /// Whether its wakeups are counted.
    pub watched: bool,
}

/// Where task identities come from (live: /proc, cached; tests: a table).
pub trait Tasks {
    fn lookup(&mut self, tid: i32) -> Option<TaskInfo>;

    /// Tells the resolver that thread `tid` belongs to process `tgid`, as a perf sample said
    /// while the thread ran: a thread that ends before /proc is read is still resolved.
    fn learn(&mut self, _tid: i32, _tgid: i32) {}
}

/// Wakeup latencies of one placement class.
#[derive(Clone, Debug)]
pub struct ClassAcc {
    pub wakeups: u64,
    /// Wakeups switched in straight from the idle task: their CPU was idle when placed.
    pub to_idle: u64,
    /// Sum of the timed latencies, ns.
    pub sum_ns: u64,
    /// Wakeup-to-run latency, ns.
    pub latency: Histogram<u64>,
}

impl Default for ClassAcc {
    fn default() -> Self {
        Self::new()
    }
}

impl ClassAcc {
    pub fn new() -> Self {
        Self {
            wakeups: 0,
            to_idle: 0,
            sum_ns: 0,
            // invariant: bounds 1..60 s with 2 significant digits are valid.
            latency: Histogram::new_with_bounds(1, 60_000_000_000, 2).expect("valid bounds"),
        }
    }

    /// Records a timed latency in the histogram. Sum and histogram hold the same wakeups: a
    /// latency above the histogram's highest trackable value (60 s) is recorded there as that
    /// value, as the kernel's overflow bucket holds it, while the sum keeps it whole (it once
    /// went into the sum and not the histogram, so the mean of the two disagreed).
    pub fn record(&mut self, ns: u64) {
        let _ = self.latency.record(ns.clamp(1, self.latency.high()));
    }

    pub fn merge(&mut self, o: &ClassAcc) {
        self.wakeups += o.wakeups;
        self.to_idle += o.to_idle;
        self.sum_ns += o.sum_ns;
        let _ = self.latency.add(&o.latency);
    }
}

/// Classes in nearest-first order, each with its count and latencies.
pub type ByClass = BTreeMap<PlacementClass, ClassAcc>;

fn class_entry(m: &mut ByClass, c: PlacementClass) -> &mut ClassAcc {
    m.entry(c).or_default()
}

/// Everything counted for one process.
#[derive(Clone, Debug, Default)]
pub struct ProcessAcc {
    pub comm: String,
    pub threads: BTreeSet<i32>,
    pub classes: ByClass,
    pub runq_wait_ns: u64,
    pub on_cpu_ns: u64,
    pub migrations: u64,
    pub cpus: BTreeSet<u32>,
}

/// One waker process -> wakee process edge (`waker_tgid` 0: woken from interrupt context).
#[derive(Clone, Debug, Default)]
pub struct PairAcc {
    pub waker_comm: String,
    pub wakee_comm: String,
    pub classes: ByClass,
    /// CPUs the waker ran on when waking, with counts (to suggest where to co-locate).
    pub waker_cpus: BTreeMap<u32, u64>,
}

/// A wakeup of a watched task whose switch-in has not been seen yet.
struct Pending {
    /// When `sched_waking` fired (the waker's context): the latency's start.
    at_ns: u64,
    waker_cpu: u32,
    pair: Option<(i32, i32)>,
    /// The first `sched_migrate_task` of the wakee after its waking: `ttwu`'s `set_task_cpu`,
    /// emitted in the waker's context when the wakeup picks another CPU.
    migrated_to: Option<u32>,
    /// `sched_wakeup`'s target CPU, when that record was sampled and delivered.
    wakeup_target: Option<u32>,
}

/// How each wakeup's CPU was found, and how often the independent sources agreed.
///
/// `sched_waking` is delivered from the waker's context, and so is the migration a wakeup to
/// another CPU causes; `sched_wakeup`, emitted on the target CPU when the wakeup is queued there
/// (the remote wake list of an idle CPU), is counted by the kernel but often not delivered as a
/// sample. So the CPU a task was woken onto is the destination of a migration between its waking
/// and its switch-in, else the CPU it last ran on; the CPU it switched in on and any delivered
/// `sched_wakeup` are checks of that answer, kept here so a reader can see they agree.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PlacementChecks {
    /// Placed by a migration between waking and switch-in.
    pub from_migration: u64,
    /// Placed on the CPU the task last ran on (no migration).
    pub from_last_cpu: u64,
    /// The task had not been seen on a CPU yet: placed where it switched in.
    pub from_switch_in: u64,
    /// Wakeups of a task already on a CPU or a run queue: placed where it was.
    pub already_runnable: u64,
    /// Woken but not switched in before the window ended, with no CPU known: not classed.
    pub unplaced: u64,
    /// Switched in on the CPU it was placed on.
    pub switch_in_agrees: u64,
    /// Switched in elsewhere (moved again by the load balancer, or an event missed).
    pub switch_in_differs: u64,
    /// Seen running (switching out, or waking another task) with no switch-in delivered: the
    /// kernel neither counts nor delivers `sched_switch` out of the idle task on some CPUs.
    /// Counted and placed, not timed.
    #[serde(default)]
    pub switch_in_missing: u64,
    /// A delivered `sched_wakeup` named the same target CPU.
    pub wakeup_agrees: u64,
    /// A delivered `sched_wakeup` named another CPU.
    pub wakeup_differs: u64,
}

/// The state machine and its accumulated figures.
pub struct Analysis<'t> {
    topology: &'t Topology,
    pending: HashMap<i32, Pending>,
    queued_since: HashMap<i32, u64>,
    /// Tasks on a CPU: since when, and which CPU.
    running: HashMap<i32, (u64, u32)>,
    /// The CPU each task last ran on (or was last migrated to).
    last_cpu: HashMap<i32, u32>,
    pub processes: BTreeMap<i32, ProcessAcc>,
    pub pairs: HashMap<(i32, i32), PairAcc>,
    /// Watched CPUs seen emitting events (the CPUs involved).
    pub cpus_involved: BTreeSet<u32>,
    pub events: u64,
    pub checks: PlacementChecks,
}

impl<'t> Analysis<'t> {
    pub fn new(topology: &'t Topology) -> Self {
        Self {
            topology,
            pending: HashMap::new(),
            queued_since: HashMap::new(),
            running: HashMap::new(),
            last_cpu: HashMap::new(),
            processes: BTreeMap::new(),
            pairs: HashMap::new(),
            cpus_involved: BTreeSet::new(),
            events: 0,
            checks: PlacementChecks::default(),
        }
    }

    fn process(&mut self, info: &TaskInfo, tid: i32) -> &mut ProcessAcc {
        let p = self.processes.entry(info.tgid).or_default();
        if p.comm.is_empty() {
            p.comm = info.comm.clone();
        }
        p.threads.insert(tid);
        p
    }

    /// Counts one wakeup of `tid` (process `info`) placed on `cpu`, with its latency if timed.
    fn count(
        &mut self,
        info: &TaskInfo,
        tid: i32,
        waker_cpu: u32,
        cpu: u32,
        pair: Option<(i32, i32)>,
        // The latency and whether the CPU was idle (switched in from the idle task), if timed.
        timed: Option<(u64, bool)>,
    ) {
        let class = self.topology.class(waker_cpu, cpu);
        self.cpus_involved.insert(waker_cpu);
        self.cpus_involved.insert(cpu);
        let p = self.process(info, tid);
        let acc = class_entry(&mut p.classes, class);
        acc.wakeups += 1;
        let latency_ns = timed.map(|t| t.0);
        acc.to_idle += u64::from(timed.is_some_and(|t| t.1));
        if let Some(ns) = latency_ns {
            acc.sum_ns += ns;
            p.runq_wait_ns += ns;
            acc.record(ns);
        }
        if let Some(k) = pair
            && let Some(pair) = self.pairs.get_mut(&k)
        {
            let acc = class_entry(&mut pair.classes, class);
            acc.wakeups += 1;
            if let Some(ns) = latency_ns {
                acc.record(ns);
            }
        }
    }

    /// Counts a pending wakeup of `tid` that is seen running on `cpu` without its switch-in
    /// having been delivered (the kernel does not deliver a switch out of the idle task on some
    /// CPUs): placed as at switch-in, not timed.
    fn seen_running(&mut self, tid: i32, cpu: u32, tasks: &mut dyn Tasks) {
        let Some(w) = self.pending.remove(&tid) else {
            return;
        };
        let Some(info) = tasks.lookup(tid).filter(|i| i.watched) else {
            return;
        };
        let placed = match w.migrated_to {
            Some(m) => {
                self.checks.from_migration += 1;
                m
            }
            None => {
                self.checks.from_last_cpu += 1;
                self.last_cpu.get(&tid).copied().unwrap_or(cpu)
            }
        };
        self.checks.switch_in_missing += 1;
        match w.wakeup_target {
            Some(t) if t == placed => self.checks.wakeup_agrees += 1,
            Some(_) => self.checks.wakeup_differs += 1,
            None => {}
        }
        self.count(&info, tid, w.waker_cpu, placed, w.pair, None);
    }

    /// Feeds one event; events must come in time order.
    pub fn feed(&mut self, ev: &Timed, tasks: &mut dyn Tasks) {
        self.events += 1;
        match ev.event {
            Event::Waking {
                waker_tid,
                waker_cpu,
                in_irq,
                wakee_tid,
            } => self.on_waking(ev.time_ns, waker_tid, waker_cpu, in_irq, wakee_tid, tasks),
            Event::Wakeup {
                wakee_tid,
                target_cpu,
            } => self.on_wakeup(wakee_tid, target_cpu),
            Event::Switch {
                cpu,
                prev_tid,
                prev_runnable,
                next_tid,
            } => self.on_switch(ev.time_ns, cpu, prev_tid, prev_runnable, next_tid, tasks),
            Event::Migrate { tid, dest_cpu } => self.on_migrate(tid, dest_cpu, tasks),
        }
    }

    /// A `sched_waking`: the wakeup's clock starts, or a task already on a CPU or a run queue
    /// is counted where it is.
    fn on_waking(
        &mut self,
        time_ns: u64,
        waker_tid: i32,
        waker_cpu: u32,
        in_irq: bool,
        wakee_tid: i32,
        tasks: &mut dyn Tasks,
    ) {
        if !in_irq && self.pending.contains_key(&waker_tid) {
            self.seen_running(waker_tid, waker_cpu, tasks);
        }
        let Some(info) = tasks.lookup(wakee_tid).filter(|i| i.watched) else {
            return;
        };
        let w = if in_irq {
            None
        } else {
            tasks.lookup(waker_tid)
        };
        let (tgid, comm) = match w {
            Some(w) if waker_tid != 0 => (w.tgid, w.comm),
            _ => (0, "(interrupt)".to_string()),
        };
        let pair = self.pairs.entry((tgid, info.tgid)).or_default();
        pair.waker_comm = comm;
        pair.wakee_comm.clone_from(&info.comm);
        *pair.waker_cpus.entry(waker_cpu).or_default() += 1;
        let pair = Some((tgid, info.tgid));
        // A task already on a CPU or a run queue has nothing to wait for: counted where
        // it is, without a latency.
        let now = self.running.get(&wakee_tid).map(|r| r.1).or_else(|| {
            self.queued_since
                .contains_key(&wakee_tid)
                .then(|| self.last_cpu.get(&wakee_tid).copied())
                .flatten()
        });
        if let Some(cpu) = now {
            self.checks.already_runnable += 1;
            self.count(&info, wakee_tid, waker_cpu, cpu, pair, None);
            return;
        }
        self.pending.insert(
            wakee_tid,
            Pending {
                at_ns: time_ns,
                waker_cpu,
                pair,
                migrated_to: None,
                wakeup_target: None,
            },
        );
    }

    /// A delivered `sched_wakeup`: its target CPU is kept only to check the placement.
    fn on_wakeup(&mut self, wakee_tid: i32, target_cpu: u32) {
        if let Some(p) = self.pending.get_mut(&wakee_tid) {
            p.wakeup_target.get_or_insert(target_cpu);
        }
    }

    /// A `sched_switch`: the previous task's time on the CPU ends, and the next one's pending
    /// wakeup (or its wait on the run queue) ends here.
    fn on_switch(
        &mut self,
        time_ns: u64,
        cpu: u32,
        prev_tid: i32,
        prev_runnable: bool,
        next_tid: i32,
        tasks: &mut dyn Tasks,
    ) {
        if prev_tid != 0 {
            if self.pending.contains_key(&prev_tid) {
                self.seen_running(prev_tid, cpu, tasks);
            }
            self.last_cpu.insert(prev_tid, cpu);
            let started = self.running.remove(&prev_tid);
            if prev_runnable {
                self.queued_since.insert(prev_tid, time_ns);
            }
            if let Some((s, _)) = started
                && let Some(info) = tasks.lookup(prev_tid).filter(|i| i.watched)
            {
                self.process(&info, prev_tid).on_cpu_ns += time_ns.saturating_sub(s);
            }
        }
        if next_tid == 0 {
            return;
        }
        self.running.insert(next_tid, (time_ns, cpu));
        let last = self.last_cpu.insert(next_tid, cpu);
        let pending = self.pending.remove(&next_tid);
        let queued = self.queued_since.remove(&next_tid);
        let Some(info) = tasks.lookup(next_tid).filter(|i| i.watched) else {
            return;
        };
        self.cpus_involved.insert(cpu);
        self.process(&info, next_tid).cpus.insert(cpu);
        if let Some(w) = pending {
            let placed = match (w.migrated_to, last) {
                (Some(m), _) => {
                    self.checks.from_migration += 1;
                    m
                }
                (None, Some(l)) => {
                    self.checks.from_last_cpu += 1;
                    l
                }
                (None, None) => {
                    self.checks.from_switch_in += 1;
                    cpu
                }
            };
            if placed == cpu {
                self.checks.switch_in_agrees += 1;
            } else {
                self.checks.switch_in_differs += 1;
            }
            match w.wakeup_target {
                Some(t) if t == placed => self.checks.wakeup_agrees += 1,
                Some(_) => self.checks.wakeup_differs += 1,
                None => {}
            }
            let wait = time_ns.saturating_sub(w.at_ns);
            self.count(
                &info,
                next_tid,
                w.waker_cpu,
                placed,
                w.pair,
                Some((wait, prev_tid == 0 && placed == cpu)),
            );
        } else if let Some(q) = queued {
            self.process(&info, next_tid).runq_wait_ns += time_ns.saturating_sub(q);
        }
    }

    /// A `sched_migrate_task`: where a pending wakeup was moved, and a migration of a watched
    /// task.
    fn on_migrate(&mut self, tid: i32, dest_cpu: u32, tasks: &mut dyn Tasks) {
        self.last_cpu.insert(tid, dest_cpu);
        if let Some(p) = self.pending.get_mut(&tid) {
            p.migrated_to.get_or_insert(dest_cpu);
        }
        if let Some(info) = tasks.lookup(tid).filter(|i| i.watched) {
            self.process(&info, tid).migrations += 1;
        }
    }

    /// At the window's end: wakeups not yet switched in are counted where they were placed (a
    /// migration's destination, else the CPU last run on), without a latency.
    pub fn finish(&mut self, tasks: &mut dyn Tasks) {
        let pending: Vec<(i32, Pending)> = self.pending.drain().collect();
        for (tid, w) in pending {
            let Some(info) = tasks.lookup(tid).filter(|i| i.watched) else {
                continue;
            };
            match w.migrated_to.or_else(|| self.last_cpu.get(&tid).copied()) {
                Some(cpu) => self.count(&info, tid, w.waker_cpu, cpu, w.pair, None),
                None => self.checks.unplaced += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    struct Table;
    impl Tasks for Table {
        fn lookup(&mut self, tid: i32) -> Option<TaskInfo> {
            // tids 100.. belong to process 100 "server", 200.. to 200 "client"; 300 unwatched.
            let (tgid, comm, watched) = match tid {
                100..=199 => (100, "server", true),
                200..=299 => (200, "client", true),
                300 => (300, "other", false),
                _ => return None,
            };
            Some(TaskInfo {
                tgid,
                comm: comm.into(),
                watched,
            })
        }
    }

    fn topo() -> Topology {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kvm-guest");
        Topology::read(Path::new(root)).unwrap()
    }

    fn t(time_ns: u64, event: Event) -> Timed {
        Timed { time_ns, event }
    }

    fn wake(at: u64, waker: i32, waker_cpu: u32, wakee: i32, target: u32) -> [Timed; 2] {
        [
            t(
                at,
                Event::Waking {
                    waker_tid: waker,
                    waker_cpu,
                    in_irq: false,
                    wakee_tid: wakee,
                },
            ),
            t(
                at + 1,
                Event::Wakeup {
                    wakee_tid: wakee,
                    target_cpu: target,
                },
            ),
        ]
    }

    fn switch(at: u64, cpu: u32, prev: i32, runnable: bool, next: i32) -> Timed {
        t(
            at,
            Event::Switch {
                cpu,
                prev_tid: prev,
                prev_runnable: runnable,
                next_tid: next,
            },
        )
    }

    #[test]
    fn a_same_cpu_ping_pong_is_all_same_cpu_and_latency_is_switch_in_minus_wakeup() {
        let topo = topo();
        let mut a = Analysis::new(&topo);
        let mut evs = Vec::new();
        for i in 0..10u64 {
            let base = i * 1000;
            evs.extend(wake(base, 200, 0, 100, 0));
            evs.push(switch(base + 101, 0, 200, false, 100));
            evs.extend(wake(base + 500, 100, 0, 200, 0));
            evs.push(switch(base + 601, 0, 100, false, 200));
        }
        for e in &evs {
            a.feed(e, &mut Table);
        }
        let server = &a.processes[&100];
        assert_eq!(server.classes.len(), 1);
        let same = &server.classes[&PlacementClass::SameCpu];
        assert_eq!(same.wakeups, 10);
        assert_eq!(same.latency.len(), 10);
        // From sched_waking (at base) to the switch-in (base + 101).
        assert_eq!(same.latency.max(), 101);
        assert_eq!(server.runq_wait_ns, 1010);
        assert_eq!(
            a.pairs[&(200, 100)].classes[&PlacementClass::SameCpu].wakeups,
            10
        );
        assert_eq!(a.pairs[&(100, 200)].waker_cpus[&0], 10);
    }

    fn waking(at: u64, waker: i32, waker_cpu: u32, wakee: i32) -> Timed {
        t(
            at,
            Event::Waking {
                waker_tid: waker,
                waker_cpu,
                in_irq: false,
                wakee_tid: wakee,
            },
        )
    }

    /// The defect this state machine exists for: on an idle target CPU the kernel queues the
    /// wakeup there and the `sched_wakeup` sample emitted on it never arrives. The wakeup is
    /// still placed (where the wakee last ran) and timed (waking to switch-in).
    #[test]
    fn a_remote_wakeup_without_its_sched_wakeup_record_is_placed_and_timed() {
        let topo = topo();
        let mut a = Analysis::new(&topo);
        // 100 ran on CPU 1 and slept; 200 on CPU 0 wakes it; no sched_wakeup record.
        a.feed(&switch(0, 1, 100, false, 0), &mut Table);
        a.feed(&waking(100, 200, 0, 100), &mut Table);
        a.feed(&switch(180, 1, 0, false, 100), &mut Table);
        let c = &a.processes[&100].classes;
        assert!(!c.contains_key(&PlacementClass::SameCpu));
        let cross: Vec<_> = c.values().collect();
        assert_eq!(cross.len(), 1);
        assert_eq!((cross[0].wakeups, cross[0].latency.max()), (1, 80));
        assert_eq!(a.checks.from_last_cpu, 1);
        assert_eq!(a.checks.switch_in_agrees, 1);
    }

    #[test]
    fn a_wakeup_that_migrates_the_wakee_is_placed_at_the_destination() {
        let topo = topo();
        let mut a = Analysis::new(&topo);
        // 100 last ran on CPU 0, where its waker runs; the wakeup moves it to CPU 1, and a
        // sched_wakeup record (when delivered) names CPU 1 too.
        a.feed(&switch(0, 0, 100, false, 200), &mut Table);
        a.feed(&waking(10, 200, 0, 100), &mut Table);
        a.feed(
            &t(
                11,
                Event::Migrate {
                    tid: 100,
                    dest_cpu: 1,
                },
            ),
            &mut Table,
        );
        a.feed(
            &t(
                12,
                Event::Wakeup {
                    wakee_tid: 100,
                    target_cpu: 1,
                },
            ),
            &mut Table,
        );
        a.feed(&switch(40, 1, 0, false, 100), &mut Table);
        let p = &a.processes[&100];
        assert!(!p.classes.contains_key(&PlacementClass::SameCpu));
        assert_eq!(p.migrations, 1);
        assert_eq!(p.cpus, BTreeSet::from([1]));
        assert_eq!(
            (a.checks.from_migration, a.checks.wakeup_agrees),
            (1, 1),
            "{:?}",
            a.checks
        );
    }

    /// sched_waking's own target_cpu (where the task last ran) is not an input at all: a wakee
    /// that last ran on the waker's CPU and is moved by the wakeup is not same-CPU.
    #[test]
    fn placement_never_comes_from_the_wakers_view() {
        let topo = topo();
        let mut a = Analysis::new(&topo);
        for e in wake(0, 200, 0, 100, 1) {
            a.feed(&e, &mut Table);
        }
        a.feed(&switch(50, 1, 0, false, 100), &mut Table);
        let c = &a.processes[&100].classes;
        assert!(!c.contains_key(&PlacementClass::SameCpu));
        assert_eq!(c.values().map(|c| c.wakeups).sum::<u64>(), 1);
        assert_eq!(a.processes[&100].cpus, BTreeSet::from([1]));
        assert_eq!(a.checks.from_switch_in, 1);
    }

    /// On some CPUs the kernel neither counts nor delivers the switch out of the idle task: a
    /// woken task's switch-in never arrives, but its switch-out (and its own wakings) do. The
    /// wakeup is still counted and placed, once, without a latency.
    #[test]
    fn a_wakeup_whose_switch_in_is_not_delivered_is_counted_once_untimed() {
        let topo = topo();
        let mut a = Analysis::new(&topo);
        a.feed(&switch(0, 1, 100, false, 0), &mut Table);
        a.feed(&waking(10, 200, 0, 100), &mut Table);
        // No idle -> 100 switch on CPU 1; 100 wakes 200 back, then sleeps.
        a.feed(&waking(30, 100, 1, 200), &mut Table);
        a.feed(&switch(40, 1, 100, false, 0), &mut Table);
        let p = &a.processes[&100];
        let total: u64 = p.classes.values().map(|c| c.wakeups).sum();
        let timed: u64 = p.classes.values().map(|c| c.latency.len()).sum();
        assert_eq!((total, timed), (1, 0));
        assert!(!p.classes.contains_key(&PlacementClass::SameCpu));
        assert_eq!(a.checks.switch_in_missing, 1);
    }

    #[test]
    fn a_wakeup_not_yet_run_at_the_end_is_counted_untimed() {
        let topo = topo();
        let mut a = Analysis::new(&topo);
        a.feed(&switch(0, 1, 100, false, 0), &mut Table);
        a.feed(&waking(10, 200, 1, 100), &mut Table);
        a.finish(&mut Table);
        let same = &a.processes[&100].classes[&PlacementClass::SameCpu];
        assert_eq!((same.wakeups, same.latency.len()), (1, 0));
    }

    #[test]
    fn unwatched_tasks_and_running_wakees_add_no_latency() {
        let topo = topo();
        let mut a = Analysis::new(&topo);
        for e in wake(0, 100, 0, 300, 0) {
            a.feed(&e, &mut Table);
        }
        assert!(!a.processes.contains_key(&300));
        // 100 is running when woken: counted, no latency.
        a.feed(&switch(10, 0, 0, false, 100), &mut Table);
        for e in wake(20, 200, 1, 100, 0) {
            a.feed(&e, &mut Table);
        }
        a.feed(&switch(30, 0, 100, true, 200), &mut Table);
        a.feed(&switch(90, 0, 200, false, 100), &mut Table);
        let p = &a.processes[&100];
        let total: u64 = p.classes.values().map(|c| c.wakeups).sum();
        let latencies: u64 = p.classes.values().map(|c| c.latency.len()).sum();
        assert_eq!((total, latencies), (1, 0));
        // Preempted at 30, back at 90: 60 ns on the run queue; on CPU 10..30.
        assert_eq!(p.runq_wait_ns, 60);
        assert_eq!(p.on_cpu_ns, 20);
    }

    #[test]
    fn merging_classes_adds_counts_sums_and_latencies() {
        let mut a = ClassAcc::new();
        a.wakeups = 3;
        a.to_idle = 1;
        a.sum_ns = 500;
        a.latency.record(100).unwrap();
        let mut b = ClassAcc::new();
        b.wakeups = 2;
        b.to_idle = 2;
        b.sum_ns = 70;
        b.latency.record(200).unwrap();
        a.merge(&b);
        assert_eq!((a.wakeups, a.to_idle, a.sum_ns), (5, 3, 570));
        assert_eq!(
            (a.latency.len(), a.latency.min(), a.latency.max()),
            (2, 100, 200)
        );
    }

    /// A process keeps the name it was first seen with, even when a later thread's lookup
    /// names it otherwise (a thread that renamed itself).
    #[test]
    fn a_process_keeps_its_first_name() {
        struct Renamed;
        impl Tasks for Renamed {
            fn lookup(&mut self, tid: i32) -> Option<TaskInfo> {
                let comm = if tid == 100 { "server" } else { "worker" };
                Some(TaskInfo {
                    tgid: 100,
                    comm: comm.into(),
                    watched: true,
                })
            }
        }
        let topo = topo();
        let mut a = Analysis::new(&topo);
        a.feed(&switch(0, 0, 0, false, 100), &mut Renamed);
        a.feed(&switch(10, 0, 100, false, 101), &mut Renamed);
        a.feed(&switch(30, 0, 101, false, 0), &mut Renamed);
        let p = &a.processes[&100];
        assert_eq!(p.comm, "server");
        assert_eq!(p.threads, BTreeSet::from([100, 101]));
        assert_eq!(p.on_cpu_ns, 30);
    }

    fn migrate(at: u64, tid: i32, dest_cpu: u32) -> Timed {
        t(at, Event::Migrate { tid, dest_cpu })
    }

    fn wakeup(at: u64, wakee_tid: i32, target_cpu: u32) -> Timed {
        t(
            at,
            Event::Wakeup {
                wakee_tid,
                target_cpu,
            },
        )
    }

    fn irq_waking(at: u64, interrupted: i32, cpu: u32, wakee: i32) -> Timed {
        t(
            at,
            Event::Waking {
                waker_tid: interrupted,
                waker_cpu: cpu,
                in_irq: true,
                wakee_tid: wakee,
            },
        )
    }

    /// Every path through the state machine in one stream, and every figure it leaves,
    /// worked out by hand: server (100) is woken five times, client (200) once (not switched
    /// in), client's 201 once (never seen on a CPU).
    #[test]
    fn every_figure_of_a_mixed_stream_worked_by_hand() {
        let topo = topo();
        let x = topo.class(0, 1);
        assert_ne!(x, PlacementClass::SameCpu);
        let mut a = Analysis::new(&topo);
        let evs = [
            // 1-4: 100 sleeps on CPU 1; 200 on CPU 0 wakes it; sched_wakeup names CPU 1; it
            // runs on CPU 1 out of idle: from its last CPU, 80 ns, to an idle CPU.
            switch(0, 1, 100, false, 0),
            waking(100, 200, 0, 100),
            wakeup(101, 100, 1),
            switch(180, 1, 0, false, 100),
            // 5-9: it sleeps at 300 (120 ns on CPU), unwatched 300 runs; 200 wakes it from
            // CPU 1; sched_wakeup names CPU 0 (differs); it preempts 300 at 450: same CPU,
            // 50 ns, not to idle; sleeps at 500 (50 ns on CPU).
            switch(300, 1, 100, false, 300),
            waking(400, 200, 1, 100),
            wakeup(401, 100, 0),
            switch(450, 1, 300, false, 100),
            switch(500, 1, 100, false, 0),
            // 10-12: an interrupt on CPU 0 wakes it; migrated to CPU 0, it switches in on
            // CPU 1 at 700 out of idle: placed on 0 (same CPU as the waker), 100 ns, switch-in
            // differs, so not to an idle CPU.
            irq_waking(600, 0, 0, 100),
            migrate(610, 100, 0),
            switch(700, 1, 0, false, 100),
            // 13-14: woken while running: counted on CPU 1, untimed; sleeps at 900 (200 ns).
            waking(800, 200, 0, 100),
            switch(900, 1, 100, false, 0),
            // 15-17: woken from CPU 0; an interrupt taken while it is still pending wakes 200
            // (100 is not its waker: it has not run); it runs at 1090: last CPU, 90 ns, idle.
            waking(1000, 200, 0, 100),
            irq_waking(1050, 100, 1, 200),
            switch(1090, 1, 0, false, 100),
            // 18-19: 200 is migrated to CPU 0 and, with no switch-in delivered, wakes 100
            // (running: counted on CPU 1) from CPU 0: 200 placed by its migration, untimed.
            migrate(1095, 200, 0),
            waking(1100, 200, 0, 100),
            // 20-21: 100 wakes unwatched 300 (nothing), then 201, never seen on a CPU.
            waking(1200, 100, 1, 300),
            waking(1300, 100, 1, 201),
        ];
        for e in &evs {
            a.feed(e, &mut Table);
        }
        a.finish(&mut Table);
        assert_eq!(a.events, 21);
        assert_eq!(
            a.checks,
            PlacementChecks {
                from_migration: 2,
                from_last_cpu: 3,
                from_switch_in: 0,
                already_runnable: 2,
                unplaced: 1,
                switch_in_agrees: 3,
                switch_in_differs: 1,
                switch_in_missing: 1,
                wakeup_agrees: 1,
                wakeup_differs: 1,
            }
        );
        assert_eq!(a.cpus_involved, BTreeSet::from([0, 1]));

        let server = &a.processes[&100];
        assert_eq!(server.comm, "server");
        assert_eq!(server.threads, BTreeSet::from([100]));
        assert_eq!(server.cpus, BTreeSet::from([1]));
        assert_eq!(server.migrations, 1);
        assert_eq!(server.on_cpu_ns, 120 + 50 + 200);
        assert_eq!(server.runq_wait_ns, 80 + 50 + 100 + 90);
        assert_eq!(server.classes.len(), 2);
        let far = &server.classes[&x];
        assert_eq!((far.wakeups, far.to_idle, far.sum_ns), (4, 2, 170));
        assert_eq!(
            (far.latency.len(), far.latency.min(), far.latency.max()),
            (2, 80, 90)
        );
        let same = &server.classes[&PlacementClass::SameCpu];
        assert_eq!((same.wakeups, same.to_idle, same.sum_ns), (2, 0, 150));
        assert_eq!(
            (same.latency.len(), same.latency.min(), same.latency.max()),
            (2, 50, 100)
        );

        let client = &a.processes[&200];
        assert_eq!(client.comm, "client");
        assert_eq!(client.threads, BTreeSet::from([200]));
        assert_eq!(
            (client.migrations, client.on_cpu_ns, client.runq_wait_ns),
            (1, 0, 0)
        );
        assert!(client.cpus.is_empty());
        let c = &client.classes[&x];
        assert_eq!(
            (c.wakeups, c.to_idle, c.sum_ns, c.latency.len()),
            (1, 0, 0, 0)
        );
        assert_eq!(client.classes.len(), 1);
        assert_eq!(a.processes.len(), 2);

        assert_eq!(a.pairs.len(), 4);
        let p = &a.pairs[&(200, 100)];
        assert_eq!(
            (p.waker_comm.as_str(), p.wakee_comm.as_str()),
            ("client", "server")
        );
        assert_eq!(p.waker_cpus, BTreeMap::from([(0, 4), (1, 1)]));
        assert_eq!((p.classes[&x].wakeups, p.classes[&x].latency.len()), (4, 2));
        let s = &p.classes[&PlacementClass::SameCpu];
        assert_eq!((s.wakeups, s.latency.len(), s.latency.max()), (1, 1, 50));
        let p = &a.pairs[&(0, 100)];
        assert_eq!(
            (p.waker_comm.as_str(), p.wakee_comm.as_str()),
            ("(interrupt)", "server")
        );
        assert_eq!(p.waker_cpus, BTreeMap::from([(0, 1)]));
        let s = &p.classes[&PlacementClass::SameCpu];
        assert_eq!((s.wakeups, s.latency.len(), s.latency.max()), (1, 1, 100));
        assert_eq!(p.classes.len(), 1);
        let p = &a.pairs[&(0, 200)];
        assert_eq!(
            (p.waker_comm.as_str(), p.wakee_comm.as_str()),
            ("(interrupt)", "client")
        );
        assert_eq!(p.waker_cpus, BTreeMap::from([(1, 1)]));
        assert_eq!((p.classes[&x].wakeups, p.classes[&x].latency.len()), (1, 0));
        let p = &a.pairs[&(100, 200)];
        assert_eq!(
            (p.waker_comm.as_str(), p.wakee_comm.as_str()),
            ("server", "client")
        );
        assert_eq!(p.waker_cpus, BTreeMap::from([(1, 1)]));
        assert!(p.classes.is_empty());
    }

    /// A wakee seen running without its switch-in, placed where it last ran (no migration),
    /// with a delivered sched_wakeup naming that CPU.
    #[test]
    fn a_wakee_seen_running_unswitched_is_placed_on_its_last_cpu() {
        let topo = topo();
        let mut a = Analysis::new(&topo);
        a.feed(&switch(0, 1, 100, false, 0), &mut Table);
        a.feed(&waking(10, 200, 0, 100), &mut Table);
        a.feed(&wakeup(11, 100, 1), &mut Table);
        a.feed(&switch(40, 1, 100, true, 0), &mut Table);
        assert_eq!(
            a.checks,
            PlacementChecks {
                from_last_cpu: 1,
                switch_in_missing: 1,
                wakeup_agrees: 1,
                ..PlacementChecks::default()
            }
        );
        let c = &a.processes[&100].classes[&topo.class(0, 1)];
        assert_eq!((c.wakeups, c.latency.len()), (1, 0));
    }

    #[test]
    fn a_latency_beyond_the_histogram_is_in_both_its_top_and_the_sum() {
        let mut a = ClassAcc::new();
        a.record(5_000);
        a.record(90_000_000_000);
        a.sum_ns = 90_000_005_000;
        assert_eq!(a.latency.len(), 2, "both latencies in the histogram");
        assert!(a.latency.max() >= 59_000_000_000 && a.latency.max() <= 61_000_000_000);
        a.record(0);
        assert_eq!(a.latency.len(), 3, "a zero latency is recorded as 1 ns");
    }

    /// A wakee seen running without its switch-in, whose delivered sched_wakeup named another
    /// CPU than the one it last ran on: the record is a check that disagreed, not the answer.
    #[test]
    fn a_wakee_seen_running_unswitched_with_a_wakeup_naming_another_cpu_disagrees() {
        let topo = topo();
        let mut a = Analysis::new(&topo);
        a.feed(&switch(0, 1, 100, false, 0), &mut Table);
        a.feed(&waking(10, 200, 0, 100), &mut Table);
        a.feed(&wakeup(11, 100, 0), &mut Table);
        a.feed(&switch(40, 1, 100, true, 0), &mut Table);
        assert_eq!(
            a.checks,
            PlacementChecks {
                from_last_cpu: 1,
                switch_in_missing: 1,
                wakeup_differs: 1,
                ..PlacementChecks::default()
            }
        );
        let c = &a.processes[&100].classes[&topo.class(0, 1)];
        assert_eq!((c.wakeups, c.latency.len()), (1, 0));
    }

    /// A waking from the idle task's context (tid 0) outside an interrupt has no waker process,
    /// even when the resolver names one for tid 0: it is filed under "(interrupt)", process 0.
    #[test]
    fn a_waking_by_tid_zero_has_no_waker_process() {
        struct Everyone;
        impl Tasks for Everyone {
            fn lookup(&mut self, tid: i32) -> Option<TaskInfo> {
                let (tgid, comm) = if tid == 0 {
                    (7, "swapper")
                } else {
                    (100, "server")
                };
                Some(TaskInfo {
                    tgid,
                    comm: comm.into(),
                    watched: true,
                })
            }
        }
        let topo = topo();
        let mut a = Analysis::new(&topo);
        a.feed(&waking(10, 0, 1, 100), &mut Everyone);
        a.feed(&switch(30, 1, 0, false, 100), &mut Everyone);
        let keys: Vec<(i32, i32)> = a.pairs.keys().copied().collect();
        assert_eq!(keys, [(0, 100)]);
        let p = &a.pairs[&(0, 100)];
        assert_eq!(
            (p.waker_comm.as_str(), p.wakee_comm.as_str()),
            ("(interrupt)", "server")
        );
        assert_eq!(p.classes[&PlacementClass::SameCpu].wakeups, 1);
    }
}
