//! From scheduler events to per-process wakeup figures.
//!
//! A wakeup is followed through three records: `sched_waking` (emitted by the waker on the
//! waker's CPU: who woke whom, from where), `sched_wakeup` (the wakee is queued on its target
//! CPU: where it was placed) and the `sched_switch` that puts the wakee on a CPU. The placement
//! class is the topology class of the waker's CPU and the wakeup's target CPU: never
//! `sched_waking`'s own CPU field, which is where the wakee last ran. Wakeup-to-run latency runs
//! from `sched_waking` to the switch-in, so it includes the inter-processor interrupt and the
//! halt exit a cross-CPU wakeup pays. Run-queue wait is the time a task spent runnable but not
//! running (after a wakeup or a preemption).
//!
//! Everything here is pure: events in time order in, aggregates out; who belongs to which group
//! is asked of a [`Resolver`].

use super::format::SchedEvent;
use crate::cpulist::CpuSet;
use crate::topology::PlacementClass;
use hdrhistogram::Histogram;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

/// Who a task is, as far as the report is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskInfo {
    /// The process (thread group) id.
    pub tgid: i32,
    /// The group the report shows it under (`postgres[1234]` or `postgres`).
    pub group: String,
    /// Whether it is one of the watched tasks.
    pub watched: bool,
}

/// Maps a thread id to what it is (cached by the implementation).
pub trait Resolver {
    fn task(&mut self, tid: i32, comm_hint: &str) -> Rc<TaskInfo>;
}

/// Latencies of one placement class, nanoseconds.
pub struct ClassAgg {
    pub latency_ns: Histogram<u64>,
}

impl ClassAgg {
    fn new() -> Self {
        Self {
            // invariant: 1 ns to 100 s at 3 significant figures is a valid configuration.
            latency_ns: Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid bounds"),
        }
    }
}

/// Wakeups by placement class.
#[derive(Default)]
pub struct ByClass(pub BTreeMap<PlacementClass, ClassAgg>);

impl ByClass {
    fn record(&mut self, class: PlacementClass, latency_ns: Option<u64>) {
        let c = self.0.entry(class).or_insert_with(ClassAgg::new);
        if let Some(l) = latency_ns {
            c.latency_ns.saturating_record(l.max(1))
        }
    }
}

/// One watched group's aggregates.
#[derive(Default)]
pub struct GroupAgg {
    pub tgids: BTreeMap<i32, u64>,
    pub threads: std::collections::BTreeSet<i32>,
    /// Wakeups by class, counted when the woken task got on a CPU.
    pub by_class: ByClass,
    /// Wakeups whose waker was not seen (woken before the window opened).
    pub unattributed: u64,
    pub rq_wait_ns: u64,
    pub on_cpu_ns: u64,
    pub migrations: u64,
    pub cpus: CpuSet,
}

/// Waker group -> wakee group.
#[derive(Default)]
pub struct PairAgg {
    pub by_class: ByClass,
    /// The wakee's processes and the waker's CPUs, by count (for the `cpulab try` line).
    pub wakee_tgids: BTreeMap<i32, u64>,
    pub waker_cpus: BTreeMap<u32, u64>,
}

#[derive(Clone, Copy)]
struct Waking {
    waker: i32,
    waker_cpu: u32,
    at: u64,
}

#[derive(Default)]
struct TaskState {
    waking: Option<Waking>,
    /// Set by `sched_wakeup`: (waking, target cpu, wakeup time).
    pending: Option<(Option<Waking>, u32, u64)>,
    runnable_since: Option<u64>,
    on_cpu_since: Option<u64>,
}

/// The aggregator: feed it events in time order.
pub struct Aggregator<C: Fn(u32, u32) -> PlacementClass> {
    class: C,
    tasks: HashMap<i32, TaskState>,
    pub groups: BTreeMap<String, GroupAgg>,
    pub pairs: BTreeMap<(String, String), PairAgg>,
    pub events: u64,
}

/// `prev_state` with only the state bits: 0 means the task was still runnable (preempted).
fn still_runnable(prev_state: i64) -> bool {
    prev_state & 0xff == 0
}

impl<C: Fn(u32, u32) -> PlacementClass> Aggregator<C> {
    pub fn new(class: C) -> Self {
        Self {
            class,
            tasks: HashMap::new(),
            groups: BTreeMap::new(),
            pairs: BTreeMap::new(),
            events: 0,
        }
    }

    /// One event, emitted on `cpu` at `t` (ns).
    pub fn feed(&mut self, ev: &SchedEvent, cpu: u32, t: u64, resolver: &mut dyn Resolver) {
        self.events += 1;
        match ev {
            SchedEvent::Waking { waker, wakee } => {
                self.tasks.entry(*wakee).or_default().waking = Some(Waking {
                    waker: *waker,
                    waker_cpu: cpu,
                    at: t,
                });
            }
            SchedEvent::Wakeup { wakee, target_cpu } => {
                let st = self.tasks.entry(*wakee).or_default();
                // A task already on a CPU was woken before it slept: no switch will follow.
                if st.on_cpu_since.is_none() {
                    st.pending = Some((st.waking.take(), *target_cpu, t));
                } else {
                    st.waking = None;
                }
            }
            SchedEvent::Migrate { task, .. } => {
                let info = resolver.task(*task, "");
                if info.watched {
                    self.groups
                        .entry(info.group.clone())
                        .or_default()
                        .migrations += 1;
                }
            }
            SchedEvent::Switch {
                prev,
                prev_state,
                prev_comm,
                next,
                next_comm,
            } => {
                if *prev != 0 {
                    let st = self.tasks.entry(*prev).or_default();
                    let ran = st.on_cpu_since.take().map(|s| t.saturating_sub(s));
                    if still_runnable(*prev_state) {
                        st.runnable_since = Some(t);
                    }
                    if let Some(ran) = ran {
                        let info = resolver.task(*prev, prev_comm);
                        if info.watched {
                            self.groups.entry(info.group.clone()).or_default().on_cpu_ns += ran;
                        }
                    }
                }
                if *next != 0 {
                    self.switch_in(*next, next_comm, cpu, t, resolver);
                }
            }
        }
    }

    fn switch_in(&mut self, tid: i32, comm: &str, cpu: u32, t: u64, r: &mut dyn Resolver) {
        let st = self.tasks.entry(tid).or_default();
        st.on_cpu_since = Some(t);
        let pending = st.pending.take();
        let runnable = st.runnable_since.take();
        let info = r.task(tid, comm);
        if !info.watched {
            return;
        }
        let g = self.groups.entry(info.group.clone()).or_default();
        *g.tgids.entry(info.tgid).or_default() += 1;
        g.threads.insert(tid);
        g.cpus.insert(cpu);
        match (pending, runnable) {
            (Some((waking, target, woken_at)), _) => {
                g.rq_wait_ns += t.saturating_sub(woken_at);
                match waking {
                    Some(w) => {
                        let class = (self.class)(w.waker_cpu, target);
                        let latency = t.saturating_sub(w.at);
                        g.by_class.record(class, Some(latency));
                        let waker = r.task(w.waker, "");
                        let p = self
                            .pairs
                            .entry((waker.group.clone(), info.group.clone()))
                            .or_default();
                        p.by_class.record(class, Some(latency));
                        *p.wakee_tgids.entry(info.tgid).or_default() += 1;
                        *p.waker_cpus.entry(w.waker_cpu).or_default() += 1;
                    }
                    None => g.unattributed += 1,
                }
            }
            (None, Some(since)) => g.rq_wait_ns += t.saturating_sub(since),
            (None, None) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;
    impl Resolver for Fixed {
        fn task(&mut self, tid: i32, _: &str) -> Rc<TaskInfo> {
            Rc::new(TaskInfo {
                tgid: tid,
                group: format!("t{tid}"),
                watched: tid == 10 || tid == 20,
            })
        }
    }

    fn class(a: u32, b: u32) -> PlacementClass {
        if a == b {
            PlacementClass::SameCpu
        } else {
            PlacementClass::SharedLlc
        }
    }

    fn switch(prev: i32, state: i64, next: i32) -> SchedEvent {
        SchedEvent::Switch {
            prev,
            prev_state: state,
            prev_comm: String::new(),
            next,
            next_comm: String::new(),
        }
    }

    /// A blocking ping-pong, 10 on cpu 0 and 20 on cpu 1: each round trip is two wakeups, each
    /// across, each followed by a switch-in on the target CPU.
    #[test]
    fn cross_cpu_round_trips_count_two_wakeups_each_all_across() {
        let mut a = Aggregator::new(class);
        let mut r = Fixed;
        let mut t = 0;
        a.feed(&switch(0, 0, 10), 0, t, &mut r);
        for _ in 0..5 {
            t += 100;
            a.feed(
                &SchedEvent::Waking {
                    waker: 10,
                    wakee: 20,
                },
                0,
                t,
                &mut r,
            );
            a.feed(
                &SchedEvent::Wakeup {
                    wakee: 20,
                    target_cpu: 1,
                },
                1,
                t + 10,
                &mut r,
            );
            a.feed(&switch(10, 1, 0), 0, t + 20, &mut r);
            a.feed(&switch(0, 0, 20), 1, t + 50, &mut r);
            t += 100;
            a.feed(
                &SchedEvent::Waking {
                    waker: 20,
                    wakee: 10,
                },
                1,
                t,
                &mut r,
            );
            a.feed(
                &SchedEvent::Wakeup {
                    wakee: 10,
                    target_cpu: 0,
                },
                0,
                t + 10,
                &mut r,
            );
            a.feed(&switch(20, 1, 0), 1, t + 20, &mut r);
            a.feed(&switch(0, 0, 10), 0, t + 50, &mut r);
        }
        let g10 = &a.groups["t10"];
        let g20 = &a.groups["t20"];
        let across = |g: &GroupAgg| g.by_class.0[&PlacementClass::SharedLlc].latency_ns.len();
        assert_eq!(across(g10), 5);
        assert_eq!(across(g20), 5);
        assert!(!g20.by_class.0.contains_key(&PlacementClass::SameCpu));
        assert_eq!(
            g20.by_class.0[&PlacementClass::SharedLlc].latency_ns.max(),
            50
        );
        // Queued from wakeup (t+10) to switch-in (t+50).
        assert_eq!(g20.rq_wait_ns, 5 * 40);
        assert_eq!(a.pairs[&("t10".into(), "t20".into())].waker_cpus[&0], 5);
        assert!(g10.on_cpu_ns > 0);
    }

    #[test]
    fn wakeup_of_a_running_task_is_not_a_placement() {
        let mut a = Aggregator::new(class);
        let mut r = Fixed;
        a.feed(&switch(0, 0, 20), 1, 0, &mut r);
        a.feed(
            &SchedEvent::Waking {
                waker: 10,
                wakee: 20,
            },
            0,
            5,
            &mut r,
        );
        a.feed(
            &SchedEvent::Wakeup {
                wakee: 20,
                target_cpu: 1,
            },
            1,
            6,
            &mut r,
        );
        a.feed(&switch(20, 0, 0), 1, 10, &mut r);
        a.feed(&switch(0, 0, 20), 1, 30, &mut r);
        let g = &a.groups["t20"];
        assert!(g.by_class.0.is_empty());
        // Preempted at 10, back at 30: run-queue wait, not a wakeup.
        assert_eq!(g.rq_wait_ns, 20);
    }

    #[test]
    fn placement_uses_wakeup_target_not_waking_cpu() {
        let mut a = Aggregator::new(class);
        let mut r = Fixed;
        // Waker 10 on cpu 1; the wakee last ran on cpu 0 but is placed on cpu 1.
        a.feed(
            &SchedEvent::Waking {
                waker: 10,
                wakee: 20,
            },
            1,
            0,
            &mut r,
        );
        a.feed(
            &SchedEvent::Wakeup {
                wakee: 20,
                target_cpu: 1,
            },
            1,
            1,
            &mut r,
        );
        a.feed(&switch(10, 1, 20), 1, 2, &mut r);
        assert!(
            a.groups["t20"]
                .by_class
                .0
                .contains_key(&PlacementClass::SameCpu)
        );
    }
}
