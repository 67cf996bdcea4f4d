//! Whether this process may run VMs here, and what their KVM offers; each refusal is one line
//! naming the cause and the fix.

use crate::error::bad_input;
use anyhow::Result;
use kvm_bindings::{CpuId, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::{Cap, Kvm};

/// An open `/dev/kvm` with what every guest needs checked: the in-kernel irqchip, x2APIC in the
/// CPUID it may give a guest, and the binary statistics.
pub struct Access {
    pub kvm: Kvm,
    /// The supported CPUID, given unchanged to every vCPU (x2APIC included).
    pub cpuid: CpuId,
    /// Whether a VM may set its own halt-poll limit (`KVM_CAP_HALT_POLL`).
    pub halt_poll_cap: bool,
}

/// CPUID leaf 1, ECX bit 21.
const X2APIC_BIT: u32 = 1 << 21;

impl Access {
    /// Opens `/dev/kvm` and checks it; a machine where cpulab's guests cannot run is bad input
    /// for `host bench` (one line, exit 2), with the reason.
    pub fn open() -> Result<Self> {
        let kvm = Kvm::new().map_err(|e| refusal(e.errno()))?;
        if !kvm.check_extension(Cap::Irqchip) {
            return Err(bad_input(
                "this KVM has no in-kernel irqchip (KVM_CAP_IRQCHIP); cpulab's guests need its \
                 local APICs: use a KVM built with them (every x86 kvm_intel, kvm_amd or kvm_pvm)",
            ));
        }
        if kvm.check_extension_raw(203) <= 0 {
            return Err(bad_input(
                "this KVM gives no binary statistics (KVM_CAP_BINARY_STATS_FD, Linux 5.14 and \
                 later); cpulab reads halts and IPIs there: run on a newer host kernel",
            ));
        }
        let cpuid = kvm
            .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
            .map_err(|e| bad_input(format!("KVM_GET_SUPPORTED_CPUID: {e}")))?;
        let x2apic = cpuid
            .as_slice()
            .iter()
            .any(|e| e.function == 1 && e.ecx & X2APIC_BIT != 0);
        if !x2apic {
            return Err(bad_input(
                "this KVM offers its guests no x2APIC (CPUID 1 ECX bit 21); cpulab's guests send \
                 their IPIs through it: use a KVM with the in-kernel x2APIC",
            ));
        }
        let halt_poll_cap = kvm.check_extension_raw(182) > 0;
        Ok(Self {
            kvm,
            cpuid,
            halt_poll_cap,
        })
    }
}

/// The one line for a `/dev/kvm` that does not open.
pub fn refusal(errno: i32) -> anyhow::Error {
    match errno {
        libc::ENOENT | libc::ENODEV | libc::ENXIO => bad_input(
            "/dev/kvm does not exist here: this machine runs no KVM (load kvm_intel or kvm_amd on \
             a host with VMX or SVM, or enable nested virtualisation for this VM)",
        ),
        libc::EACCES | libc::EPERM => bad_input(
            "permission denied opening /dev/kvm: run as root or as a member of the group that \
             owns it (usually `kvm`: `sudo usermod -aG kvm $USER`, then log in again)",
        ),
        e => bad_input(format!(
            "/dev/kvm does not open: {}",
            std::io::Error::from_raw_os_error(e)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_names_its_cause_and_exits_2() {
        for (errno, word) in [
            (libc::ENOENT, "does not exist"),
            (libc::EACCES, "permission denied"),
            (libc::EIO, "does not open"),
        ] {
            let e = refusal(errno);
            assert_eq!(crate::error::exit_code(&e), 2);
            let line = format!("{e:#}");
            assert!(line.contains(word), "{line}");
            assert_eq!(line.lines().count(), 1, "{line}");
        }
    }
}
