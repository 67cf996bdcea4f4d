//! One VM of cpulab's own: its guest memory, its in-kernel irqchip, its vCPUs set up in real
//! mode at their programs.
//!
//! A VM is nothing but fds and an anonymous mapping of this process: when cpulab ends, however
//! it ends (SIGKILL included), the kernel closes the fds and frees the VM with them. Nothing on
//! the host is changed: the halt-poll limit set here is this VM's own (`KVM_CAP_HALT_POLL`).

use super::access::Access;
use super::guest::{self, Image, MEMORY_BYTES, Program};
use anyhow::{Context, Result, bail};
use kvm_bindings::{
    KVM_MP_STATE_RUNNABLE, kvm_enable_cap, kvm_mp_state, kvm_userspace_memory_region,
};
use kvm_ioctls::{VcpuFd, VmFd};
use std::ptr::NonNull;

/// `KVM_CAP_HALT_POLL` (include/uapi/linux/kvm.h).
const KVM_CAP_HALT_POLL: u32 = 182;

/// The guest's memory: an anonymous private mapping of [`MEMORY_BYTES`], unmapped on drop.
pub struct Memory {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory; every access is a volatile read or write of an aligned
// u32 within bounds, which is what the guest and the host share.
unsafe impl Send for Memory {}
unsafe impl Sync for Memory {}

impl Memory {
    fn new(len: usize) -> Result<Self> {
        let size = std::num::NonZeroUsize::new(len).context("guest memory of 0 bytes")?;
        // SAFETY: a new anonymous mapping, owned by this value.
        let p = unsafe {
            nix::sys::mman::mmap_anonymous(
                None,
                size,
                nix::sys::mman::ProtFlags::PROT_READ | nix::sys::mman::ProtFlags::PROT_WRITE,
                nix::sys::mman::MapFlags::MAP_PRIVATE | nix::sys::mman::MapFlags::MAP_NORESERVE,
            )
        }
        .context("mmap of guest memory")?;
        Ok(Self {
            base: p.cast(),
            len,
        })
    }

    fn write(&self, at: u64, bytes: &[u8]) -> Result<()> {
        let at = at as usize;
        if at.checked_add(bytes.len()).is_none_or(|e| e > self.len) {
            bail!("guest image beyond guest memory");
        }
        // SAFETY: in bounds (checked above), and no vCPU runs yet.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.as_ptr().add(at), bytes.len())
        };
        Ok(())
    }

    /// The u32 at guest-physical `at` as it is now (the guest may be writing it).
    pub fn read_u32(&self, at: u64) -> u32 {
        let at = (at as usize) & !3;
        if at + 4 > self.len {
            return 0;
        }
        // SAFETY: aligned and in bounds.
        unsafe { std::ptr::read_volatile(self.base.as_ptr().add(at).cast::<u32>()) }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, of `len` bytes, no longer used by any vCPU (the VM
        // that used it is dropped first: `Vm` declares its fds before its memory).
        let _ = unsafe { nix::sys::mman::munmap(self.base.cast(), self.len) };
    }
}

/// A VM ready to start: programs loaded, vCPUs created and set up, not yet running.
pub struct Vm {
    pub(super) vcpus: Vec<VcpuFd>,
    pub(super) vm: VmFd,
    pub(super) memory: std::sync::Arc<Memory>,
    /// Whether each vCPU's program times its own run (a burner's `RAN`).
    pub(super) timed: Vec<bool>,
    /// The VM's own halt-poll limit, when one was set (`None`: the module's `halt_poll_ns`).
    pub halt_poll_ns: Option<u64>,
}

impl Vm {
    /// A VM with one vCPU per program, vCPU n running `programs[n]` with `peer[n]` as its
    /// partner, its round trips stamped.
    pub fn new(access: &Access, programs: &[(Program, u32)]) -> Result<Self> {
        Self::new_with(access, programs, true)
    }

    /// [`Vm::new`], the round trips stamped into the rings or only counted.
    pub fn new_with(access: &Access, programs: &[(Program, u32)], stamped: bool) -> Result<Self> {
        let n = programs.len() as u32;
        if n == 0 || n > guest::MAX_VCPUS {
            bail!(
                "a VM of {n} vCPUs; cpulab's guests have 1 to {}",
                guest::MAX_VCPUS
            );
        }
        let vm = access.kvm.create_vm().context("KVM_CREATE_VM")?;
        vm.create_irq_chip()
            .context("KVM_CREATE_IRQCHIP (the in-kernel PIC, IOAPIC and local APICs)")?;
        let memory = Memory::new(MEMORY_BYTES)?;
        let region = kvm_userspace_memory_region {
            slot: 0,
            guest_phys_addr: 0,
            memory_size: MEMORY_BYTES as u64,
            userspace_addr: memory.base.as_ptr() as u64,
            flags: 0,
        };
        // SAFETY: the region is our mapping, which outlives the VM (field order in `Vm`).
        unsafe { vm.set_user_memory_region(region) }.context("KVM_SET_USER_MEMORY_REGION")?;
        let (at, entry) = guest::vector_entry();
        memory.write(at, &entry)?;
        let h = guest::handler()?;
        memory.write(h.load_at, &h.code)?;
        let mut vcpus = Vec::new();
        for (i, &(program, peer)) in programs.iter().enumerate() {
            let img = guest::assemble_with(program, i as u32, peer, stamped)?;
            memory.write(img.load_at, &img.code)?;
            vcpus.push(vcpu(&vm, access, i as u64, &img)?);
        }
        Ok(Self {
            vcpus,
            vm,
            memory: std::sync::Arc::new(memory),
            timed: programs
                .iter()
                .map(|(p, _)| *p == guest::Program::Burner)
                .collect(),
            halt_poll_ns: None,
        })
    }

    /// Sets this VM's own halt-poll limit (no host setting changes).
    pub fn set_halt_poll_ns(&mut self, ns: u64) -> Result<()> {
        let mut cap = kvm_enable_cap {
            cap: KVM_CAP_HALT_POLL,
            ..Default::default()
        };
        cap.args[0] = ns;
        self.vm
            .enable_cap(&cap)
            .context("KVM_ENABLE_CAP(KVM_CAP_HALT_POLL)")?;
        self.halt_poll_ns = Some(ns);
        Ok(())
    }

    /// The TSC frequency the guest's `rdtsc` counts at, in kHz.
    pub fn tsc_khz(&self) -> Result<u32> {
        let v = self.vcpus.first().context("a VM without vCPUs")?;
        v.get_tsc_khz().context("KVM_GET_TSC_KHZ")
    }
}

fn vcpu(vm: &VmFd, access: &Access, id: u64, img: &Image) -> Result<VcpuFd> {
    let fd = vm
        .create_vcpu(id)
        .with_context(|| format!("KVM_CREATE_VCPU {id}"))?;
    fd.set_cpuid2(&access.cpuid).context("KVM_SET_CPUID2")?;
    let mut sregs = fd.get_sregs().context("KVM_GET_SREGS")?;
    for s in [
        &mut sregs.cs,
        &mut sregs.ds,
        &mut sregs.es,
        &mut sregs.ss,
        &mut sregs.fs,
        &mut sregs.gs,
    ] {
        s.base = 0;
        s.selector = 0;
    }
    fd.set_sregs(&sregs).context("KVM_SET_SREGS")?;
    let mut regs = fd.get_regs().context("KVM_GET_REGS")?;
    regs.rip = img.load_at;
    regs.rflags = 2;
    // A stack of its own per vCPU (each takes its IPIs at the same time as the others), above
    // the vector table.
    regs.rsp = 0x0e00 - id * 0x100;
    fd.set_regs(&regs).context("KVM_SET_REGS")?;
    // Every vCPU starts at its program: no INIT/SIPI for the second one.
    fd.set_mp_state(kvm_mp_state {
        mp_state: KVM_MP_STATE_RUNNABLE,
    })
    .context("KVM_SET_MP_STATE")?;
    Ok(fd)
}
