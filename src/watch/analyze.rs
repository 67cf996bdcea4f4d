//! From a time-ordered stream of scheduler events to per-process wakeup figures.
//!
//! The analysis is a small state machine over tasks, pure so it can be driven by hand in tests:
//! a `sched_waking` remembers who woke whom and on which CPU; the matching `sched_wakeup` fixes
//! where the wakee was placed (its target CPU) and starts its clock; the wakee's switch-in ends
//! it, and that interval is its wakeup-to-run latency, filed under the placement class of
//! (waker's CPU, wakee's CPU) from the topology. A task switched out while still runnable waits
//! on the run queue until its next switch-in; both waits add up to run-queue time.
//!
//! Only wakeups of watched tasks are counted ([`Tasks::lookup`] says which tasks are watched and
//! which process they belong to). A wakeup of a task that is already on a CPU or on a run queue
//! counts as a wakeup but has no latency: there was nothing to wait for.

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
}

/// Wakeup latencies of one placement class.
#[derive(Clone, Debug)]
pub struct ClassAcc {
    pub wakeups: u64,
    /// Wakeup-to-run latency, ns.
    pub latency: Histogram<u64>,
}

impl ClassAcc {
    fn new() -> Self {
        Self {
            wakeups: 0,
            // invariant: bounds 1..60 s with 2 significant digits are valid.
            latency: Histogram::new_with_bounds(1, 60_000_000_000, 2).expect("valid bounds"),
        }
    }

    pub fn merge(&mut self, o: &ClassAcc) {
        self.wakeups += o.wakeups;
        let _ = self.latency.add(&o.latency);
    }
}

/// Classes in nearest-first order, each with its count and latencies.
pub type ByClass = BTreeMap<PlacementClass, ClassAcc>;

fn class_entry(m: &mut ByClass, c: PlacementClass) -> &mut ClassAcc {
    m.entry(c).or_insert_with(ClassAcc::new)
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

struct Pending {
    at_ns: u64,
    class: PlacementClass,
    pair: Option<(i32, i32)>,
}

/// The state machine and its accumulated figures.
pub struct Analysis<'t> {
    topology: &'t Topology,
    waking: HashMap<i32, (i32, u32, bool)>,
    pending: HashMap<i32, Pending>,
    queued_since: HashMap<i32, u64>,
    running_since: HashMap<i32, u64>,
    pub processes: BTreeMap<i32, ProcessAcc>,
    pub pairs: HashMap<(i32, i32), PairAcc>,
    /// Watched CPUs seen emitting events (the CPUs involved).
    pub cpus_involved: BTreeSet<u32>,
    pub events: u64,
}

impl<'t> Analysis<'t> {
    pub fn new(topology: &'t Topology) -> Self {
        Self {
            topology,
            waking: HashMap::new(),
            pending: HashMap::new(),
            queued_since: HashMap::new(),
            running_since: HashMap::new(),
            processes: BTreeMap::new(),
            pairs: HashMap::new(),
            cpus_involved: BTreeSet::new(),
            events: 0,
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

    /// Feeds one event; events must come in time order.
    pub fn feed(&mut self, ev: &Timed, tasks: &mut dyn Tasks) {
        self.events += 1;
        match ev.event {
            Event::Waking {
                waker_tid,
                waker_cpu,
                in_irq,
                wakee_tid,
            } => {
                self.waking
                    .insert(wakee_tid, (waker_tid, waker_cpu, in_irq));
            }
            Event::Wakeup {
                wakee_tid,
                target_cpu,
            } => {
                let waker = self.waking.remove(&wakee_tid);
                let Some(info) = tasks.lookup(wakee_tid).filter(|i| i.watched) else {
                    return;
                };
                let (waker_cpu, pair) = match waker {
                    Some((tid, cpu, in_irq)) => {
                        let w = if in_irq { None } else { tasks.lookup(tid) };
                        let (tgid, comm) = match w {
                            Some(w) if tid != 0 => (w.tgid, w.comm),
                            _ => (0, "(interrupt)".to_string()),
                        };
                        let pair = self.pairs.entry((tgid, info.tgid)).or_default();
                        pair.waker_comm = comm;
                        pair.wakee_comm.clone_from(&info.comm);
                        *pair.waker_cpus.entry(cpu).or_default() += 1;
                        (cpu, Some((tgid, info.tgid)))
                    }
                    None => (target_cpu, None),
                };
                let class = self.topology.class(waker_cpu, target_cpu);
                self.cpus_involved.insert(waker_cpu);
                self.cpus_involved.insert(target_cpu);
                class_entry(&mut self.process(&info, wakee_tid).classes, class).wakeups += 1;
                if let Some(k) = pair
                    && let Some(p) = self.pairs.get_mut(&k)
                {
                    class_entry(&mut p.classes, class).wakeups += 1;
                }
                let busy = self.running_since.contains_key(&wakee_tid)
                    || self.queued_since.contains_key(&wakee_tid);
                if !busy {
                    self.pending.insert(
                        wakee_tid,
                        Pending {
                            at_ns: ev.time_ns,
                            class,
                            pair,
                        },
                    );
                }
            }
            Event::Switch {
                cpu,
                prev_tid,
                prev_runnable,
                next_tid,
            } => {
                if prev_tid != 0 {
                    let started = self.running_since.remove(&prev_tid);
                    if prev_runnable {
                        self.queued_since.insert(prev_tid, ev.time_ns);
                    }
                    if let Some(info) = tasks.lookup(prev_tid).filter(|i| i.watched)
                        && let Some(s) = started
                    {
                        self.process(&info, prev_tid).on_cpu_ns += ev.time_ns.saturating_sub(s);
                    }
                }
                if next_tid == 0 {
                    return;
                }
                self.running_since.insert(next_tid, ev.time_ns);
                let pending = self.pending.remove(&next_tid);
                let queued = self.queued_since.remove(&next_tid);
                let Some(info) = tasks.lookup(next_tid).filter(|i| i.watched) else {
                    return;
                };
                self.cpus_involved.insert(cpu);
                let time_ns = ev.time_ns;
                let p = self.process(&info, next_tid);
                p.cpus.insert(cpu);
                if let Some(w) = pending {
                    let wait = time_ns.saturating_sub(w.at_ns);
                    p.runq_wait_ns += wait;
                    let _ = class_entry(&mut p.classes, w.class)
                        .latency
                        .record(wait.max(1));
                    if let Some(k) = w.pair
                        && let Some(pair) = self.pairs.get_mut(&k)
                    {
                        let _ = class_entry(&mut pair.classes, w.class)
                            .latency
                            .record(wait.max(1));
                    }
                } else if let Some(q) = queued {
                    p.runq_wait_ns += time_ns.saturating_sub(q);
                }
            }
            Event::Migrate { tid, .. } => {
                if let Some(info) = tasks.lookup(tid).filter(|i| i.watched) {
                    self.process(&info, tid).migrations += 1;
                }
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
        assert_eq!(same.latency.max(), 100);
        assert_eq!(server.runq_wait_ns, 1000);
        assert_eq!(
            a.pairs[&(200, 100)].classes[&PlacementClass::SameCpu].wakeups,
            10
        );
        assert_eq!(a.pairs[&(100, 200)].waker_cpus[&0], 10);
    }

    #[test]
    fn placement_comes_from_wakeup_target_not_waking() {
        let topo = topo();
        let mut a = Analysis::new(&topo);
        // The waker runs on CPU 0; the wakee is placed on CPU 1.
        for e in wake(0, 200, 0, 100, 1) {
            a.feed(&e, &mut Table);
        }
        a.feed(&switch(50, 1, 0, false, 100), &mut Table);
        let c = &a.processes[&100].classes;
        assert!(!c.contains_key(&PlacementClass::SameCpu));
        assert_eq!(c.values().map(|c| c.wakeups).sum::<u64>(), 1);
        assert_eq!(a.processes[&100].cpus, BTreeSet::from([1]));
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
}
