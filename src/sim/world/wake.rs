//! Tasks waking tasks, and vCPUs waking vCPUs: where the guest's choice meets the hypervisor's.
//!
//! This is the path every field-notes penalty runs through. A task that finishes its burst may
//! wake another; the guest picks the wakee's vCPU ([`crate::sim::guest::wake_target`]); a wakeup
//! across vCPUs costs the sender a remote wake (and an IPI if the target is halted) and delays
//! the wakee by as much; a halted target asks the hypervisor for a physical CPU, preempting the
//! biggest CPU user when none is idle. Kept apart from the physical CPUs' state machine so each
//! file reads as one story.

use super::{Phase, VRun, World};
use crate::sim::engine::Nanos;
use crate::sim::guest::{self, VcpuView};
use crate::sim::workload::Role;

/// Whether a task with this pin may run on more than one of its VM's `n` vCPUs.
fn task_free(pin: Option<u32>, n: u32) -> bool {
    pin.is_none() && n > 1
}

impl World {
    pub(super) fn task_done(&mut self, t: u32, v: u32) {
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

    pub(super) fn wake(&mut self, t: u32, waker: Option<u32>) {
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
        self.t[t as usize].prev = Some(target);
        // A task free to run on more than one vCPU makes its waker choose one first
        // (`wake_choice_ns`, on the waker's vCPU before the wakeup leaves); a pinned one does not.
        let choice = if task_free(self.t[t as usize].pin, n) {
            self.c.wake_choice_ns
        } else {
            0.0
        };
        if let Some(w) = waker {
            self.v[w as usize].overhead += choice;
        }
        match waker {
            Some(w) if w != target && self.c.remote_wake_ns + choice > 0.0 => {
                // A wakeup across vCPUs is two costs in two places. The sender's part is CPU
                // work in its own guest context: queueing the task on the remote run queue
                // (cache lines moving) and, for a halted target, writing the IPI, a VM exit
                // KVM handles in its fast path (kvm_x2apic_icr_write, a posted interrupt or a
                // kvm_vcpu_kick): `remote_wake_ns`, spent down before the wakeup leaves. The
                // long part is at the target: the host waking the halted vCPU's thread and
                // entering the guest again (`ipi_ns`, then `host_resched_ns + halt_exit_ns`
                // in `dispatch`), on the wakee's critical path only. Charging the sender for
                // the delivery, as this model once did, kept a sender's vCPU awake for the
                // whole IPI latency (so a slower IPI could land a reply inside its poll
                // window: faster with more cost) and counted the target's wait as the
                // sender's CPU time.
                self.v[w as usize].overhead += self.c.remote_wake_ns;
                let prior = self.v[w as usize].pending.replace((t, target));
                // invariant: a vCPU sends at most one wakeup at a time; its blocked task's
                // vCPU delivers it before running anything else (`guest_run`).
                debug_assert!(prior.is_none());
                if let Some((pt, ptarget)) = prior {
                    self.deliver(pt, ptarget, Some(w));
                }
            }
            _ => self.deliver(t, target, waker),
        }
    }

    /// The wakeup of task `t` reaches its vCPU `target`: at once if the target is running or
    /// polling (a polling idle loop sees the queued task without an interrupt), after the IPI's
    /// delivery latency if it has halted.
    pub(super) fn deliver(&mut self, t: u32, target: u32, waker: Option<u32>) {
        let wakee_cpu = self.t[t as usize].role == Role::Cpu;
        self.t[t as usize].blocked = false;
        let ts = target as usize;
        // A vCPU the host is polling on sees the interrupt in its poll loop: no thread to
        // wake, so no IPI delivery to wait for (it resumes for `halt_exit_ns` alone, in `kick`).
        let halted = matches!(self.v[ts].state, VRun::Halted | VRun::Queued);
        if waker.is_some_and(|w| w != target) && halted {
            self.v[ts].delay += self.c.ipi_ns;
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
                        self.adapt_poll(v);
                        self.p[p].phase = Phase::Entering;
                        self.set_timer(p, self.c.halt_exit_ns + delay);
                    }
                    _ => {}
                }
            }
            VRun::Queued => {}
            VRun::Halted => {
                self.adapt_poll(v);
                let vs = &self.v[v as usize];
                let idle = vs.allowed & !self.busy & self.host.all_mask();
                if idle == 0 {
                    // No idle CPU to wake: the wakeup reaches a busy CPU's run queue, and the
                    // IPI's delivery (the host waking the thread onto an idle CPU) is no part of
                    // its wait, which is the queueing. A CPU the host is polling on for another
                    // halted vCPU stops polling for it (`single_task_running()`).
                    self.v[v as usize].delay = 0.0;
                    self.v[v as usize].state = VRun::Queued;
                    if let Some(p) = self.polling_for(v) {
                        self.runq.push_front(v);
                        self.release(p, true);
                        return;
                    }
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

    /// An allowed physical CPU the host is polling on (for another halted vCPU), if any.
    fn polling_for(&self, v: u32) -> Option<usize> {
        let mut m = self.v[v as usize].allowed & self.busy;
        while m != 0 {
            let p = m.trailing_zeros() as usize;
            m &= m - 1;
            if self.p[p].phase == Phase::HostPoll {
                return Some(p);
            }
        }
        None
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
