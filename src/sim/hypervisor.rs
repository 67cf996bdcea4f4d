//! Hypervisor schedulers: where a vCPU that becomes runnable is run.
//!
//! The guest cannot see this layer, yet it decides the field notes' outcomes: Hyper-V's root
//! scheduler maps vCPUs to physical CPUs dynamically, so a vCPU woken by an IPI often resumes on
//! a CPU other than its last and its context must be flushed from the old one first (field notes
//! A and B); the classic scheduler keeps vCPUs where they ran; Xen's credit scheduler fills the
//! first cores of each package first, doubling up modules while others sit idle (field notes E);
//! KVM keeps a vCPU thread on its last CPU like any Linux thread and can poll a halted vCPU.
//!
//! All of them share one queueing rule in the engine (a FIFO of runnable vCPUs served in time
//! slices, which gives the equal-slice fair share of field notes C); what varies is the one
//! decision behind [`Hypervisor::place`]. The costs each choice incurs (host reschedule,
//! context flush on a move, polling) are charged by the engine from [`super::params::Costs`].

use super::engine::Rng;
use super::host::Host;
use serde::{Deserialize, Serialize};

/// Which scheduler, as a scenario file names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HvKind {
    /// Hyper-V root scheduler: fair share, dynamic vCPU -> physical CPU mapping.
    Root,
    /// Hyper-V classic scheduler: a vCPU resumes where it last ran when it can.
    Classic,
    /// Xen credit: fill the first cores of each package first, packages balanced.
    Credit,
    /// KVM: Linux keeps the vCPU thread on its last CPU; host halt polling is available.
    Kvm,
}

impl HvKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Root => "root",
            Self::Classic => "classic",
            Self::Credit => "credit",
            Self::Kvm => "kvm",
        }
    }

    /// The scheduler behind this name.
    pub fn scheduler(self) -> Box<dyn Hypervisor> {
        match self {
            Self::Root => Box::new(RootScheduler),
            Self::Classic => Box::new(StickyScheduler),
            Self::Kvm => Box::new(KvmScheduler),
            Self::Credit => Box::new(CreditScheduler),
        }
    }
}

/// The one decision a hypervisor scheduler makes in this model.
pub trait Hypervisor {
    /// A physical CPU for a vCPU that just became runnable, from `idle` (a mask of idle physical
    /// CPUs the vCPU may use, never empty); `last` is where it ran before, if anywhere.
    fn place(&mut self, last: Option<u32>, idle: u64, host: &Host, rng: &mut Rng) -> u32;

    /// Whether host halt polling follows KVM's adaptive rule (a window per vCPU that grows
    /// and shrinks with its halts, capped by `host_poll_ns`) rather than a fixed window.
    fn adaptive_halt_poll(&self) -> bool {
        false
    }
}

/// Root: any idle physical CPU, chosen without regard to where the vCPU was.
pub struct RootScheduler;

impl Hypervisor for RootScheduler {
    fn place(&mut self, _last: Option<u32>, idle: u64, _host: &Host, rng: &mut Rng) -> u32 {
        // invariant: the engine only calls place with a non-empty mask.
        rng.pick_bit(idle).unwrap_or(0)
    }
}

/// Classic: the last CPU if it is idle, else the lowest-numbered idle one.
pub struct StickyScheduler;

impl Hypervisor for StickyScheduler {
    fn place(&mut self, last: Option<u32>, idle: u64, _host: &Host, _rng: &mut Rng) -> u32 {
        match last {
            Some(l) if idle & (1 << l) != 0 => l,
            _ => idle.trailing_zeros(),
        }
    }
}

/// KVM: placed as the classic scheduler places (Linux keeps a woken thread on its last CPU
/// when that is idle), with KVM's adaptive halt polling.
pub struct KvmScheduler;

impl Hypervisor for KvmScheduler {
    fn place(&mut self, last: Option<u32>, idle: u64, host: &Host, rng: &mut Rng) -> u32 {
        StickyScheduler.place(last, idle, host, rng)
    }

    fn adaptive_halt_poll(&self) -> bool {
        true
    }
}

/// Credit: the last CPU if idle; otherwise the package with the most idle CPUs the vCPU may use,
/// and in it the lowest-numbered idle CPU, so each package fills from its first cores.
pub struct CreditScheduler;

impl Hypervisor for CreditScheduler {
    fn place(&mut self, last: Option<u32>, idle: u64, host: &Host, _rng: &mut Rng) -> u32 {
        if let Some(l) = last
            && idle & (1 << l) != 0
        {
            return l;
        }
        let mut best: Option<(u32, u32)> = None; // (idle count, package)
        for p in 0..host.shape.packages {
            let in_pkg: u64 = host
                .pcpus
                .iter()
                .enumerate()
                .filter(|(_, c)| c.package == p)
                .fold(0, |m, (i, _)| m | (1 << i));
            let n = (idle & in_pkg).count_ones();
            if n > 0 && best.is_none_or(|(b, _)| n > b) {
                best = Some((n, p));
            }
        }
        let pkg = best.map(|(_, p)| p).unwrap_or(0);
        let mut m = idle;
        while m != 0 {
            let i = m.trailing_zeros();
            if host.pcpus[i as usize].package == pkg {
                return i;
            }
            m &= m - 1;
        }
        idle.trailing_zeros()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::host::HostShape;

    fn opteron() -> Host {
        Host::new(&HostShape {
            name: String::new(),
            packages: 2,
            modules_per_package: 8,
            cores_per_module: 2,
            threads_per_core: 1,
        })
        .unwrap()
    }

    #[test]
    fn credit_balances_packages_and_fills_first_cores() {
        let h = opteron();
        let mut rng = Rng::new(1);
        let mut idle = h.all_mask();
        let mut got = Vec::new();
        for _ in 0..4 {
            let p = CreditScheduler.place(None, idle, &h, &mut rng);
            idle &= !(1 << p);
            got.push(p);
        }
        assert_eq!(got, vec![0, 16, 1, 17]);
    }

    #[test]
    fn sticky_keeps_the_last_cpu_and_root_may_move() {
        let h = opteron();
        let mut rng = Rng::new(3);
        assert_eq!(StickyScheduler.place(Some(5), 0b110000, &h, &mut rng), 5);
        assert_eq!(StickyScheduler.place(Some(2), 0b110000, &h, &mut rng), 4);
        let moved = (0..100)
            .filter(|_| RootScheduler.place(Some(0), 0b1111, &h, &mut rng) != 0)
            .count();
        assert!(moved > 50, "{moved}");
    }
}
