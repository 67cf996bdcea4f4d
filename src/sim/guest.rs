//! The guest scheduler's decisions that matter for the field notes.
//!
//! Where a woken task runs decides whether a client and its server pay a cross-vCPU wakeup on
//! every transaction. Linux's choice for a synchronous wakeup, reduced to what changes the
//! outcome: the task's pinned vCPU if it has one; else its previous vCPU if that is idle; else
//! any idle vCPU (select_idle_sibling: the waker's vCPU does not count as idle, it is still
//! running the waker); else the waker's own vCPU (wake-affine). On idle vCPUs that is a cross-vCPU
//! wakeup every time; with every other vCPU busy it is the waker's vCPU, which is why adding load
//! made PostgreSQL faster (field notes A). A guest vCPU with nothing to run polls for the guest
//! halt-poll window, then halts.

/// What the choice needs to know about one vCPU of the VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VcpuView {
    /// No task running and none queued.
    pub idle: bool,
}

/// The vCPU (index within the VM) a woken task runs on.
pub fn wake_target(
    pinned: Option<u32>,
    prev: Option<u32>,
    waker: Option<u32>,
    n: u32,
    view: impl Fn(u32) -> VcpuView,
) -> u32 {
    if let Some(p) = pinned {
        return p;
    }
    let idle = |i: u32| waker != Some(i) && i < n && view(i).idle;
    if let Some(p) = prev
        && idle(p)
    {
        return p;
    }
    if let Some(i) = (0..n).find(|&i| idle(i)) {
        return i;
    }
    waker.or(prev).unwrap_or(0)
}

/// Whether a woken task preempts the one running on its vCPU: a task that blocks (a server or
/// client) preempts a CPU-bound one, as CFS's wakeup preemption favours a sleeper.
pub fn preempts(wakee_is_cpu_bound: bool, current_is_cpu_bound: bool) -> bool {
    !wakee_is_cpu_bound && current_is_cpu_bound
}

#[cfg(test)]
mod tests {
    use super::*;

    const I: VcpuView = VcpuView { idle: true };
    const B: VcpuView = VcpuView { idle: false };

    fn v(views: &[VcpuView]) -> impl Fn(u32) -> VcpuView + '_ {
        |i| views[i as usize]
    }

    #[test]
    fn idle_vcpus_pull_the_wakee_away_from_the_waker() {
        // Client on vCPU 0 wakes the server: the server goes to an idle vCPU, not the waker's.
        assert_eq!(wake_target(None, None, Some(0), 4, v(&[I, I, I, I])), 1);
        // Its previous vCPU, when idle, wins.
        assert_eq!(wake_target(None, Some(3), Some(0), 4, v(&[I, I, I, I])), 3);
    }

    #[test]
    fn with_every_other_vcpu_busy_the_wakee_joins_the_waker() {
        assert_eq!(wake_target(None, Some(1), Some(3), 4, v(&[B, B, B, I])), 3);
        assert_eq!(wake_target(None, None, Some(0), 1, v(&[I])), 0);
        assert_eq!(wake_target(Some(2), Some(1), Some(0), 3, v(&[I, I, I])), 2);
    }

    #[test]
    fn sleepers_preempt_cpu_bound_tasks_only() {
        assert!(preempts(false, true));
        assert!(!preempts(true, true));
        assert!(!preempts(false, false));
    }
}
