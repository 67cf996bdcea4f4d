//! CPU affinity of threads and processes, and the set of CPUs this process may use.
//!
//! The allowed set is the affinity mask the process started with (which the kernel already
//! narrows to the cgroup cpuset) intersected with the online CPUs. Every CPU a user names is
//! checked against it in the settings stage, so nothing deeper has to.

use crate::cpulist::CpuSet;
use crate::error::bad_input;
use crate::topology::Topology;
use anyhow::{Context, Result};
use nix::sched::{CpuSet as NixCpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

/// The CPUs `pid` (0 = this thread) may run on.
pub fn get(pid: i32) -> Result<CpuSet> {
    let set = sched_getaffinity(Pid::from_raw(pid)).context("sched_getaffinity failed")?;
    Ok((0..NixCpuSet::count() as u32)
        .filter(|&c| set.is_set(c as usize).unwrap_or(false))
        .collect())
}

/// Restricts `pid` (0 = the calling thread) to `cpus`.
pub fn set(pid: i32, cpus: &CpuSet) -> Result<()> {
    let mut set = NixCpuSet::new();
    for c in cpus.iter() {
        set.set(c as usize)
            .with_context(|| format!("CPU {c} is beyond what sched_setaffinity supports"))?;
    }
    sched_setaffinity(Pid::from_raw(pid), &set)
        .with_context(|| format!("cannot pin task {pid} to CPUs {cpus}"))
}

/// Pins the calling thread to one CPU.
pub fn pin_self(cpu: u32) -> Result<()> {
    set(0, &CpuSet::from_iter_u32([cpu]))
}

/// The CPUs this process may use: its affinity mask intersected with the online CPUs.
pub fn allowed(topo: &Topology) -> Result<CpuSet> {
    Ok(get(0)?.intersection(&topo.online))
}

/// Checks that every CPU of `cpus` exists, is online and is allowed; one line naming the first
/// offender and the fix otherwise.
pub fn validate(cpus: &CpuSet, topo: &Topology, allowed: &CpuSet) -> Result<()> {
    for c in cpus.iter() {
        if !topo.online.contains(c) {
            return Err(bad_input(format!(
                "CPU {c} does not exist or is offline; online CPUs are {}",
                topo.online
            )));
        }
        if !allowed.contains(c) {
            return Err(bad_input(format!(
                "CPU {c} is outside the CPUs this process may use ({allowed}); \
                 widen the affinity or cpuset, or pick from {allowed}"
            )));
        }
    }
    Ok(())
}

/// Parses a user's CPU list and validates it against the machine.
pub fn parse_and_validate(text: &str, topo: &Topology, allowed: &CpuSet) -> Result<CpuSet> {
    let set = CpuSet::parse_list(text, false).map_err(|e| bad_input(e.to_string()))?;
    validate(&set, topo, allowed)?;
    Ok(set)
}

/// The CPU the calling thread is running on now.
pub fn current_cpu() -> Option<u32> {
    nix::sched::sched_getcpu()
        .ok()
        .and_then(|c| u32::try_from(c).ok())
}

/// The kernel thread id of the calling thread.
pub fn gettid() -> i32 {
    nix::unistd::gettid().as_raw()
}
