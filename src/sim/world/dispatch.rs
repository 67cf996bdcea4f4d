//! vCPUs onto physical CPUs and off them: the hypervisor's side of the state machine.
//!
//! A vCPU leaves a physical CPU when it halts or its slice ends with another vCPU waiting; it
//! arrives through [`World::dispatch`], which charges what the hypervisor charges for putting it
//! there (reschedule, halt exit, context flush when it moved, the wakeup delay it was sent).
//! Which CPU it gets is the hypervisor's one decision, made in [`crate::sim::hypervisor`].

use super::{Phase, VRun, World};
use crate::sim::engine::{Nanos, What};

impl World {
    /// The vCPU leaves `p` (halted or preempted); `p` takes the next queued vCPU it may run.
    pub(super) fn release(&mut self, p: usize, halted: bool) {
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

    pub(super) fn dispatch(&mut self, v: u32, p: usize) {
        let vs = &mut self.v[v as usize];
        let moved = vs.last.is_some_and(|l| l as usize != p);
        let mut cost = self.c.host_resched_ns;
        if vs.woke_from_halt {
            cost += self.c.halt_exit_ns;
            // Its physical CPU was given up while it halted: what it runs next starts cold
            // (until it switches to a task, even if preempted before it got there).
            vs.cold = true;
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

    pub(super) fn slice_end(&mut self, p: usize) {
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
}
