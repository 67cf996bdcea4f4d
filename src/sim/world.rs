//! The simulated host in motion: physical CPUs, vCPUs and tasks, driven by the event queue.
//!
//! A physical CPU is idle or holds one vCPU in one phase: *entering* (the hypervisor's cost of
//! putting it there: reschedule, halt exit, context flush), *guest* (running guest work at the
//! speed its module sibling allows), *guest-poll* or *host-poll* (spinning on a halted vCPU's
//! behalf). A vCPU is halted, queued for a physical CPU, or on one. A task runs, waits in its
//! vCPU's run queue, or is blocked. Every transition happens in a handful of functions here so
//! the invariants (one vCPU per physical CPU, one physical CPU per vCPU, work conserved) can be
//! checked after every event in tests. What the guest decides lives in [`super::guest`], what the
//! hypervisor decides in [`super::hypervisor`].

use super::engine::{Nanos, Queue, Rng, What};
use super::guest::{self, VcpuView};
use super::host::Host;
use super::hypervisor::Hypervisor;
use super::params::Costs;
use super::workload::{Role, Tally};
use std::collections::VecDeque;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Idle,
    Entering,
    Guest,
    GuestPoll,
    HostPoll,
}

#[derive(Clone, Debug)]
pub struct PState {
    pub vcpu: Option<u32>,
    pub phase: Phase,
    seg_start: Nanos,
    rate: f64,
    epoch: u32,
    slice_epoch: u32,
    since: Nanos,
    /// Time some vCPU occupied this CPU, ns.
    pub occupied_ns: u64,
    /// Guest work executed here, full-speed-equivalent ns.
    pub exec_work: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VRun {
    Halted,
    Queued,
    On(u32),
}

#[derive(Clone, Debug)]
pub struct VState {
    pub vm: u32,
    /// Index within its VM.
    pub index: u32,
    pub allowed: u64,
    pub state: VRun,
    pub last: Option<u32>,
    pub rq: VecDeque<u32>,
    pub cur: Option<u32>,
    /// Guest work owed before the current task continues (switches, wakeups sent), ns.
    overhead: f64,
    /// Wakeup latency the sender's IPI and remote queueing add before it can run, ns.
    delay: f64,
    /// It halted (rather than being preempted) since it last ran.
    woke_from_halt: bool,
    since: Nanos,
    /// Time on a physical CPU, ns.
    pub on_ns: u64,
}

#[derive(Clone, Debug)]
pub struct Task {
    pub vm: u32,
    pub role: Role,
    pub workload: u32,
    /// Global vCPU it is pinned to.
    pub pin: Option<u32>,
    pub prev: Option<u32>,
    pub remaining: f64,
    pub burst: f64,
    pub blocked: bool,
}

pub struct World {
    pub now: Nanos,
    pub q: Queue,
    rng: Rng,
    pub host: Host,
    pub c: Costs,
    hv: Box<dyn Hypervisor>,
    pub p: Vec<PState>,
    pub v: Vec<VState>,
    pub t: Vec<Task>,
    /// First global vCPU of each VM, and its count.
    pub vms: Vec<(u32, u32)>,
    runq: VecDeque<u32>,
    busy: u64,
    pub tally: Vec<Tally>,
    /// Guest overhead work executed (switches, wakeups sent), ns: with the tallies' work, all
    /// the work the physical CPUs executed.
    pub overhead_done: f64,
}

impl World {
    pub fn new(host: Host, c: Costs, hv: Box<dyn Hypervisor>, seed: u64) -> Self {
        let n = host.len();
        Self {
            now: 0,
            q: Queue::default(),
            rng: Rng::new(seed),
            host,
            c,
            hv,
            p: (0..n)
                .map(|_| PState {
                    vcpu: None,
                    phase: Phase::Idle,
                    seg_start: 0,
                    rate: 1.0,
                    epoch: 0,
                    slice_epoch: 0,
                    since: 0,
                    occupied_ns: 0,
                    exec_work: 0.0,
                })
                .collect(),
            v: Vec::new(),
            t: Vec::new(),
            vms: Vec::new(),
            runq: VecDeque::new(),
            busy: 0,
            tally: Vec::new(),
            overhead_done: 0.0,
        }
    }

    /// Adds a VM of `n` vCPUs allowed on `allowed`; returns its first global vCPU.
    pub fn add_vm(&mut self, n: u32, allowed: u64) -> u32 {
        let first = self.v.len() as u32;
        let vm = self.vms.len() as u32;
        for i in 0..n {
            self.v.push(VState {
                vm,
                index: i,
                allowed,
                state: VRun::Halted,
                last: None,
                rq: VecDeque::new(),
                cur: None,
                overhead: 0.0,
                delay: 0.0,
                woke_from_halt: true,
                since: 0,
                on_ns: 0,
            });
        }
        self.vms.push((first, n));
        first
    }

    /// Adds a blocked task; `start` wakes it at time 0.
    pub fn add_task(
        &mut self,
        vm: u32,
        role: Role,
        workload: u32,
        pin: Option<u32>,
        burst: f64,
    ) -> u32 {
        self.t.push(Task {
            vm,
            role,
            workload,
            pin,
            prev: None,
            remaining: burst,
            burst,
            blocked: true,
        });
        (self.t.len() - 1) as u32
    }

    pub fn start(&mut self, task: u32) {
        self.wake(task, None);
    }

    /// Runs until `until` ns of simulated time; `check` verifies invariants after every event.
    pub fn run(&mut self, until: Nanos, check: bool) {
        while let Some(e) = self.q.pop_until(until) {
            self.now = e.at;
            let p = e.target as usize;
            match e.what {
                What::PcpuDone if e.epoch == self.p[p].epoch => self.pcpu_done(p),
                What::SliceEnd if e.epoch == self.p[p].slice_epoch => self.slice_end(p),
                _ => {}
            }
            if check {
                self.check_invariants();
            }
        }
        self.now = until;
        for p in 0..self.p.len() {
            if self.p[p].phase == Phase::Guest {
                self.progress(p);
            }
            self.close_occupancy(p);
        }
    }

    fn close_occupancy(&mut self, p: usize) {
        if let Some(v) = self.p[p].vcpu {
            let ps = &mut self.p[p];
            ps.occupied_ns += self.now - ps.since;
            ps.since = self.now;
            let vs = &mut self.v[v as usize];
            vs.on_ns += self.now - vs.since;
            vs.since = self.now;
        }
    }

    fn rate_of(&self, p: usize) -> f64 {
        let shared = self.host.siblings[p]
            .iter()
            .any(|&s| self.busy & (1 << s) != 0);
        let mut rate = if shared {
            1.0 - self.c.module_contention
        } else {
            1.0
        };
        if self.c.turbo_drop > 0.0 {
            let pkg = self.host.package_mask[self.host.pcpus[p].package as usize];
            let n = pkg.count_ones();
            let busy = (self.busy & pkg).count_ones().max(1);
            if n > 1 {
                rate *= 1.0 - self.c.turbo_drop * f64::from(busy - 1) / f64::from(n - 1);
            }
        }
        rate
    }

    /// Accounts guest work done on `p` since its segment started, at its rate.
    fn progress(&mut self, p: usize) {
        let ps = &mut self.p[p];
        let mut work = (self.now - ps.seg_start) as f64 * ps.rate;
        ps.seg_start = self.now;
        let Some(v) = ps.vcpu else { return };
        let vs = &mut self.v[v as usize];
        let o = work.min(vs.overhead);
        vs.overhead -= o;
        self.overhead_done += o;
        self.p[p].exec_work += o;
        work -= o;
        if let Some(t) = vs.cur {
            let task = &mut self.t[t as usize];
            // Segment ends are rounded up to whole nanoseconds: the sliver past the end is idle.
            let w = work.min(task.remaining);
            task.remaining -= w;
            self.tally[task.workload as usize].work_ns += w;
            self.p[p].exec_work += w;
        }
    }

    fn set_timer(&mut self, p: usize, after: f64) {
        let ps = &mut self.p[p];
        ps.epoch = ps.epoch.wrapping_add(1);
        let at = self.now + after.max(0.0).ceil() as Nanos;
        self.q.push(at, What::PcpuDone, p as u32, ps.epoch);
    }

    /// (Re)schedules the end of the guest segment on `p` at its current rate.
    fn schedule_guest(&mut self, p: usize) {
        let rate = self.rate_of(p);
        self.p[p].rate = rate;
        self.p[p].seg_start = self.now;
        let Some(v) = self.p[p].vcpu else { return };
        let vs = &self.v[v as usize];
        let need = vs.overhead + vs.cur.map_or(0.0, |t| self.t[t as usize].remaining);
        self.set_timer(p, need / rate);
    }

    fn set_busy(&mut self, p: usize, busy: bool) {
        if busy {
            self.busy |= 1 << p;
        } else {
            self.busy &= !(1 << p);
        }
        // Whose speed may change: module siblings, or the whole package with turbo bins.
        let affected = if self.c.turbo_drop > 0.0 {
            self.host.package_mask[self.host.pcpus[p].package as usize] & !(1 << p)
        } else {
            self.host.sibling_mask[p]
        };
        let mut m = affected;
        while m != 0 {
            let s = m.trailing_zeros() as usize;
            m &= m - 1;
            if self.p[s].phase == Phase::Guest {
                self.progress(s);
                self.schedule_guest(s);
            }
        }
    }

    fn pcpu_done(&mut self, p: usize) {
        match self.p[p].phase {
            Phase::Entering => self.guest_run(p),
            Phase::Guest => {
                self.progress(p);
                // invariant: a pCPU in the guest phase holds a vCPU.
                let v = self.p[p].vcpu.unwrap_or(0) as usize;
                if let Some(t) = self.v[v].cur
                    && self.t[t as usize].remaining <= 0.5
                {
                    self.task_done(t, v as u32);
                }
                self.guest_run(p);
            }
            Phase::GuestPoll => self.halt(p),
            Phase::HostPoll => self.release(p, true),
            Phase::Idle => {}
        }
    }

    /// The vCPU on `p` runs: its current task, else the next queued one, else it goes idle.
    fn guest_run(&mut self, p: usize) {
        let Some(v) = self.p[p].vcpu else { return };
        let vs = &mut self.v[v as usize];
        if vs.cur.is_none()
            && let Some(next) = vs.rq.pop_front()
        {
            vs.cur = Some(next);
            vs.overhead += self.c.guest_switch_ns;
        }
        if vs.cur.is_some() || vs.overhead > 0.5 {
            self.p[p].phase = Phase::Guest;
            self.schedule_guest(p);
        } else if self.c.guest_poll_ns > 0.0 {
            self.p[p].phase = Phase::GuestPoll;
            self.set_timer(p, self.c.guest_poll_ns);
        } else {
            self.halt(p);
        }
    }

    fn halt(&mut self, p: usize) {
        if self.c.host_poll_ns > 0.0 {
            self.p[p].phase = Phase::HostPoll;
            self.set_timer(p, self.c.host_poll_ns);
        } else {
            self.release(p, true);
        }
    }

    /// The vCPU leaves `p` (halted or preempted); `p` takes the next queued vCPU it may run.
    fn release(&mut self, p: usize, halted: bool) {
        self.close_occupancy(p);
        let Some(v) = self.p[p].vcpu.take() else {
            return;
        };
        let vs = &mut self.v[v as usize];
        vs.last = Some(p as u32);
        vs.woke_from_halt = halted;
        if halted {
            vs.state = VRun::Halted;
        } else {
            vs.state = VRun::Queued;
            self.runq.push_back(v);
        }
        self.p[p].phase = Phase::Idle;
        self.p[p].epoch = self.p[p].epoch.wrapping_add(1);
        self.set_busy(p, false);
        let bit = 1u64 << p;
        if let Some(i) = self
            .runq
            .iter()
            .position(|&w| self.v[w as usize].allowed & bit != 0)
            && let Some(w) = self.runq.remove(i)
        {
            self.dispatch(w, p);
        }
    }

    fn dispatch(&mut self, v: u32, p: usize) {
        let vs = &mut self.v[v as usize];
        let moved = vs.last.is_some_and(|l| l as usize != p);
        let mut cost = self.c.host_resched_ns;
        if vs.woke_from_halt {
            cost += self.c.halt_exit_ns;
        }
        if moved {
            cost += self.c.context_flush_ns;
        }
        cost += vs.delay;
        vs.delay = 0.0;
        vs.state = VRun::On(p as u32);
        vs.since = self.now;
        let ps = &mut self.p[p];
        ps.vcpu = Some(v);
        ps.since = self.now;
        ps.phase = Phase::Entering;
        ps.slice_epoch = ps.slice_epoch.wrapping_add(1);
        let sg = ps.slice_epoch;
        self.q.push(
            self.now + self.c.slice_ns as Nanos,
            What::SliceEnd,
            p as u32,
            sg,
        );
        self.set_busy(p, true);
        self.set_timer(p, cost);
    }

    fn slice_end(&mut self, p: usize) {
        let bit = 1u64 << p;
        let waiting = self
            .runq
            .iter()
            .any(|&w| self.v[w as usize].allowed & bit != 0);
        if !waiting {
            let ps = &mut self.p[p];
            ps.slice_epoch = ps.slice_epoch.wrapping_add(1);
            let sg = ps.slice_epoch;
            self.q.push(
                self.now + self.c.slice_ns as Nanos,
                What::SliceEnd,
                p as u32,
                sg,
            );
            return;
        }
        match self.p[p].phase {
            Phase::Guest => {
                self.progress(p);
                self.release(p, false);
            }
            Phase::Entering => self.release(p, false),
            Phase::GuestPoll | Phase::HostPoll => self.release(p, true),
            Phase::Idle => {}
        }
    }

    fn task_done(&mut self, t: u32, v: u32) {
        let task = &mut self.t[t as usize];
        let wl = task.workload as usize;
        match task.role {
            Role::Cpu => {
                self.tally[wl].units += 1;
                task.remaining = task.burst;
                // Round robin among CPU-bound tasks sharing a vCPU, once per unit.
                let vs = &mut self.v[v as usize];
                if !vs.rq.is_empty() {
                    vs.rq.push_back(t);
                    vs.cur = None;
                }
            }
            Role::Client { peer } | Role::Server { peer } => {
                if matches!(task.role, Role::Client { .. }) {
                    self.tally[wl].units += 1;
                }
                task.remaining = task.burst;
                task.blocked = true;
                self.v[v as usize].cur = None;
                self.wake(peer, Some(v));
            }
            Role::Worker => {
                self.tally[wl].units += 1;
                if self.tally[wl].pool > 0 {
                    self.tally[wl].pool -= 1;
                    task.remaining = task.burst;
                } else {
                    task.blocked = true;
                    self.v[v as usize].cur = None;
                    if self
                        .t
                        .iter()
                        .all(|x| x.workload as usize != wl || x.blocked)
                    {
                        self.tally[wl].finished_at = Some(self.now);
                    }
                }
            }
        }
    }

    fn wake(&mut self, t: u32, waker: Option<u32>) {
        let task = &self.t[t as usize];
        let (first, n) = self.vms[task.vm as usize];
        let local = |g: Option<u32>| g.and_then(|g| g.checked_sub(first)).filter(|&i| i < n);
        let target = first
            + guest::wake_target(local(task.pin), local(task.prev), local(waker), n, |i| {
                let vs = &self.v[(first + i) as usize];
                VcpuView {
                    idle: vs.cur.is_none() && vs.rq.is_empty(),
                }
            });
        let wakee_cpu = task.role == Role::Cpu;
        self.t[t as usize].blocked = false;
        self.t[t as usize].prev = Some(target);
        let ts = target as usize;
        let halted = match self.v[ts].state {
            VRun::Halted | VRun::Queued => true,
            VRun::On(p) => self.p[p as usize].phase == Phase::HostPoll,
        };
        if let Some(w) = waker
            && w != target
        {
            // The sender burns the cost, and the wakee cannot start before it is paid.
            let cost = self.c.remote_wake_ns + if halted { self.c.ipi_ns } else { 0.0 };
            self.v[w as usize].overhead += cost;
            self.v[ts].delay += cost;
        }
        let cur_cpu = self.v[ts].cur.map(|c| self.t[c as usize].role == Role::Cpu);
        if let Some(cur_is_cpu) = cur_cpu
            && guest::preempts(wakee_cpu, cur_is_cpu)
        {
            if let VRun::On(p) = self.v[ts].state
                && self.p[p as usize].phase == Phase::Guest
            {
                self.progress(p as usize);
            }
            let vs = &mut self.v[ts];
            if let Some(c) = vs.cur.replace(t) {
                vs.rq.push_back(c);
            }
            vs.overhead += self.c.guest_switch_ns;
            if let VRun::On(p) = vs.state
                && self.p[p as usize].phase == Phase::Guest
            {
                self.schedule_guest(p as usize);
            }
            return;
        }
        self.v[ts].rq.push_back(t);
        self.kick(target);
    }

    /// A vCPU got work: a polling vCPU resumes at once, a halted one asks the hypervisor.
    fn kick(&mut self, v: u32) {
        match self.v[v as usize].state {
            VRun::On(p) => {
                let p = p as usize;
                let delay = std::mem::take(&mut self.v[v as usize].delay);
                match self.p[p].phase {
                    Phase::GuestPoll => {
                        self.v[v as usize].overhead += delay;
                        self.guest_run(p);
                    }
                    Phase::HostPoll => {
                        self.p[p].phase = Phase::Entering;
                        self.set_timer(p, self.c.halt_exit_ns + delay);
                    }
                    _ => {}
                }
            }
            VRun::Queued => {}
            VRun::Halted => {
                let vs = &self.v[v as usize];
                let idle = vs.allowed & !self.busy & self.host.all_mask();
                if idle == 0 {
                    self.v[v as usize].state = VRun::Queued;
                    match self.preemptible(v) {
                        Some(p) => {
                            // Woken from halt: it goes first, the biggest CPU user makes room.
                            self.runq.push_front(v);
                            if self.p[p].phase == Phase::Guest {
                                self.progress(p);
                            }
                            self.release(p, false);
                        }
                        None => self.runq.push_back(v),
                    }
                } else {
                    let last = vs.last;
                    let p = self.hv.place(last, idle, &self.host, &mut self.rng);
                    self.dispatch(v, p as usize);
                }
            }
        }
    }

    /// The allowed physical CPU whose vCPU has had the most CPU time, if that is at least
    /// `wake_preempt_ns` more than the woken vCPU `v` had (CFS compares virtual runtimes).
    fn preemptible(&self, v: u32) -> Option<usize> {
        let vs = &self.v[v as usize];
        let mut best: Option<(Nanos, usize)> = None;
        let mut m = vs.allowed & self.busy;
        while m != 0 {
            let p = m.trailing_zeros() as usize;
            m &= m - 1;
            let ps = &self.p[p];
            let Some(o) = ps.vcpu else { continue };
            let os = &self.v[o as usize];
            let used = os.on_ns + (self.now - os.since);
            if matches!(ps.phase, Phase::Guest | Phase::Entering)
                && best.is_none_or(|(u, _)| used > u)
            {
                best = Some((used, p));
            }
        }
        let (used, p) = best?;
        (used >= vs.on_ns + self.c.wake_preempt_ns as Nanos).then_some(p)
    }

    /// Panics when the state is inconsistent (tests only).
    pub fn check_invariants(&self) {
        for (i, ps) in self.p.iter().enumerate() {
            match ps.vcpu {
                Some(v) => {
                    assert_eq!(self.v[v as usize].state, VRun::On(i as u32), "pCPU {i}");
                    assert!(self.busy & (1 << i) != 0);
                    assert!(self.v[v as usize].allowed & (1 << i) != 0);
                }
                None => {
                    assert_eq!(ps.phase, Phase::Idle);
                    assert!(self.busy & (1 << i) == 0);
                }
            }
        }
        for (i, vs) in self.v.iter().enumerate() {
            if let VRun::On(p) = vs.state {
                assert_eq!(self.p[p as usize].vcpu, Some(i as u32), "vCPU {i}");
            }
            assert_eq!(
                self.runq.iter().filter(|&&w| w == i as u32).count(),
                usize::from(vs.state == VRun::Queued)
            );
        }
    }
}
