//! A minimal VMM inside cpulab: VMs of its own, on `/dev/kvm`, running small guest programs
//! that exercise exactly one part of the hypervisor layer each (an IPI and a halt, a polled
//! line, a busy loop).
//!
//! The shape is rust-vmm's (`kvm-ioctls`: one safe type per fd) and cloud-hypervisor's (a vCPU
//! thread owns its fd; the host side reads and stops it from outside):
//! - [`access`]: `/dev/kvm` opened and checked (irqchip, x2APIC, binary statistics), each
//!   refusal one line with its fix;
//! - [`guest`]: the programs, assembled with `iced-x86`, and the memory map they share;
//! - [`vm`]: one VM, its memory and vCPUs set up in real mode at their programs;
//! - [`run`]: the vCPU threads, pinned, and the snapshots the experiments take;
//! - [`stats`]: KVM's binary statistics of a vCPU (`KVM_GET_STATS_FD`).
//!
//! A VM is this process's fds and memory: it ends with cpulab, however cpulab ends. Memory
//! ([`guest::MEMORY_BYTES`]) and vCPUs ([`guest::MAX_VCPUS`]) are bounded. Nothing on the host
//! changes: a VM's halt-poll limit is its own.

pub mod access;
pub mod guest;
pub mod run;
pub mod stats;
pub mod vm;

pub use access::Access;
pub use guest::Program;
pub use run::{Running, Snapshot};
pub use vm::Vm;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpulist::CpuSet;
    use std::time::Duration;

    /// Real guests on /dev/kvm: skipped (loudly) where there is none, failed in CI.
    fn access() -> Option<Access> {
        match Access::open() {
            Ok(a) => Some(a),
            Err(e) => {
                crate::testing::skipped("vmm guests", &format!("no usable KVM here: {e:#}"));
                None
            }
        }
    }

    fn run(programs: &[(Program, u32)], cpus: &[CpuSet], ms: u64) -> (Snapshot, Snapshot) {
        let access = access().unwrap();
        let vm = Vm::new(&access, programs).unwrap();
        let r = Running::start(vm, cpus).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let a = r.snapshot().unwrap();
        std::thread::sleep(Duration::from_millis(ms));
        let b = r.snapshot().unwrap();
        assert!(r.alive());
        (a, b)
    }

    /// A round trip of the halt ping-pong costs one halt exit and one IPI per vCPU (physics:
    /// each side halts once and is woken by one interrupt per message).
    #[test]
    fn halt_ping_pong_halts_once_and_takes_one_ipi_per_side_per_round_trip() {
        if access().is_none() {
            return;
        }
        let all = crate::affinity::get(0).unwrap();
        let (a, b) = run(
            &[(Program::HaltPing, 1), (Program::HaltPong, 0)],
            &[all.clone(), all],
            300,
        );
        let trips = u64::from(b.counts[0].wrapping_sub(a.counts[0]));
        assert!(trips > 0, "no round trip in 300 ms");
        // KVM's statistics are read between a snapshot's two readings of the counts, and the
        // guest goes on meanwhile: the round trips the statistics cover lie between these.
        let fewest = u64::from(b.counts[0].wrapping_sub(a.counts_after[0]));
        let most = u64::from(b.counts_after[0].wrapping_sub(a.counts[0]));
        for v in 0..2 {
            let d = |k: &str| b.kvm[v][k] - a.kvm[v][k];
            let (halts, irqs) = (d("halt_exits"), d("irq_injections"));
            eprintln!("vCPU {v}: {fewest} to {most} round trips, {halts} halts, {irqs} irqs");
            // One halt and one IPI per side per round trip, give or take the one in flight at
            // each edge.
            assert!(
                halts + 2 >= fewest && halts <= most + 2,
                "{halts} vs {fewest} to {most}"
            );
            // An injection cut short by an exit (the vCPU thread preempted or signalled while
            // KVM delivered it) is injected and counted again: a few in 30,000 here, so the
            // bound above allows 1% more.
            assert!(
                irqs + 2 >= fewest && irqs <= most + most / 100 + 2,
                "{irqs} vs {fewest} to {most}"
            );
        }
    }

    #[test]
    fn spin_ping_pong_and_burners_never_halt() {
        if access().is_none() {
            return;
        }
        let all = crate::affinity::get(0).unwrap();
        let (a, b) = run(
            &[(Program::SpinPing, 1), (Program::SpinPong, 0)],
            &[all.clone(), all.clone()],
            200,
        );
        assert!(b.counts[0] > a.counts[0]);
        for v in 0..2 {
            assert_eq!(b.kvm[v]["halt_exits"], a.kvm[v]["halt_exits"]);
        }
        let (a, b) = run(&[(Program::Burner, 0)], &[all], 200);
        assert!(b.counts[0] > a.counts[0]);
        assert_eq!(b.kvm[0]["halt_exits"], a.kvm[0]["halt_exits"]);
    }
}
