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
use super::host::Host;
use super::hypervisor::Hypervisor;
use super::params::Costs;
use super::workload::{Role, Tally};

mod dispatch;
mod wake;
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
    /// Delivery latency of the IPI that woke it from halt, paid before it can run, ns.
    delay: f64,
    /// A wakeup this vCPU is sending (task, target vCPU): delivered once the sender has done its
    /// part (`overhead` spent down), see [`World::wake`].
    pending: Option<(u32, u32)>,
    /// It halted (rather than being preempted) since it last ran.
    woke_from_halt: bool,
    /// It resumed from a halt and has not yet switched to a task: the next switch and burst pay
    /// [`Costs::cold_cost_ns`].
    cold: bool,
    since: Nanos,
    /// Time on a physical CPU, ns.
    pub on_ns: u64,
    /// When it last halted (the start of KVM's `halt_ns` for its adaptive poll window).
    halted_at: Nanos,
    /// Its own host halt-poll window under KVM's adaptive rule, ns: starts at 0, grows and
    /// shrinks with each halt ([`World::adapt_poll`]); the scenario's `host_poll_ns` is its cap.
    poll_ns: f64,
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
                pending: None,
                woke_from_halt: true,
                cold: false,
                since: 0,
                on_ns: 0,
                halted_at: 0,
                poll_ns: 0.0,
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
                // The task's wakeup may have made the hypervisor hand `p` to the woken vCPU
                // (wakeup preemption), which is now paying its way in.
                if self.p[p].vcpu == Some(v as u32) {
                    self.guest_run(p);
                }
            }
            Phase::GuestPoll => self.halt(p),
            Phase::HostPoll => self.release(p, true),
            Phase::Idle => {}
        }
    }

    /// The vCPU on `p` runs: the wakeup it is sending, else its current task, else the next
    /// queued one, else it goes idle.
    fn guest_run(&mut self, p: usize) {
        let Some(v) = self.p[p].vcpu else { return };
        if self.v[v as usize].pending.is_some() {
            if self.v[v as usize].overhead > 0.5 {
                // Still doing its part of the wakeup (a blocked task's vCPU has no current task).
                self.p[p].phase = Phase::Guest;
                self.schedule_guest(p);
                return;
            }
            if let Some((t, target)) = self.v[v as usize].pending.take() {
                self.deliver(t, target, Some(v));
            }
            // Delivering may hand `p` to the woken vCPU (wakeup preemption).
            if self.p[p].vcpu != Some(v) {
                return;
            }
        }
        let vs = &mut self.v[v as usize];
        if vs.cur.is_none()
            && let Some(next) = vs.rq.pop_front()
        {
            vs.cur = Some(next);
            let switch = self.c.guest_switch_ns;
            let cold = if std::mem::take(&mut vs.cold) {
                self.c
                    .cold_cost_ns(switch + self.t[next as usize].remaining)
            } else {
                0.0
            };
            vs.overhead += switch + cold;
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

    /// The vCPU on `p` halts. The host polls on its behalf for its window, unless another vCPU
    /// is waiting for `p`: KVM polls only while its thread is the one runnable task of the CPU
    /// (`single_task_running()` in `kvm_vcpu_halt`), so a waiting vCPU gets the CPU at once.
    fn halt(&mut self, p: usize) {
        let window = match self.p[p].vcpu {
            Some(v) => {
                self.v[v as usize].halted_at = self.now;
                self.poll_window(v)
            }
            None => 0.0,
        };
        if window > 0.0 && !self.waiting_for(p) {
            self.p[p].phase = Phase::HostPoll;
            self.set_timer(p, window);
        } else {
            self.release(p, true);
        }
    }

    /// How long the host polls on halted vCPU `v`: the scenario's `host_poll_ns`, or, under
    /// KVM's adaptive rule, the vCPU's own window within it.
    fn poll_window(&self, v: u32) -> f64 {
        if self.hv.adaptive_halt_poll() {
            self.v[v as usize].poll_ns.min(self.c.host_poll_ns)
        } else {
            self.c.host_poll_ns
        }
    }

    /// Whether a queued vCPU may run on `p`.
    fn waiting_for(&self, p: usize) -> bool {
        let bit = 1u64 << p;
        self.runq
            .iter()
            .any(|&w| self.v[w as usize].allowed & bit != 0)
    }

    /// KVM's adaptive halt polling (`kvm_vcpu_halt` in virt/kvm/kvm_main.c, with the module's
    /// default `halt_poll_ns_grow` 2, `halt_poll_ns_grow_start` 10 us and `halt_poll_ns_shrink`
    /// 0), applied when halted vCPU `v` is woken after `halt_ns`: a halt within the window
    /// leaves it; a long halt (beyond the cap) with a window shrinks it to 0; a short halt
    /// (below the cap) with a smaller window grows it, doubling from 10 us, at most the cap.
    /// So a vCPU whose halts outlast the cap never polls at all.
    pub(super) fn adapt_poll(&mut self, v: u32) {
        if !self.hv.adaptive_halt_poll() {
            return;
        }
        let cap = self.c.host_poll_ns;
        let vs = &mut self.v[v as usize];
        let halt_ns = (self.now - vs.halted_at) as f64;
        if cap <= 0.0 {
            vs.poll_ns = 0.0;
        } else if halt_ns <= vs.poll_ns {
        } else if vs.poll_ns > 0.0 && halt_ns > cap {
            vs.poll_ns = 0.0;
        } else if vs.poll_ns < cap && halt_ns < cap {
            vs.poll_ns = (vs.poll_ns * KVM_POLL_GROW)
                .max(KVM_POLL_GROW_START_NS)
                .min(cap);
        }
    }
}

/// KVM's `halt_poll_ns_grow` default.
const KVM_POLL_GROW: f64 = 2.0;
/// KVM's `halt_poll_ns_grow_start` default, ns.
const KVM_POLL_GROW_START_NS: f64 = 10_000.0;
