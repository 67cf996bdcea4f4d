//! CPUID: the hypervisor's own account of itself.
//!
//! A guest learns it is virtualised from CPUID leaf 1 (ECX bit 31, the "hypervisor" bit), who
//! the hypervisor is from the 12-byte signature at leaf 0x40000000, and, under KVM, which
//! paravirtual shortcuts the host offers from leaf 0x40000001. Those shortcuts decide what a
//! cross-vCPU wakeup costs: PV IPIs send several IPIs in one exit, PV sched yield lets a
//! spinning vCPU hand its time to a preempted lock holder, poll control lets the guest's
//! haltpoll driver tell the host not to poll as well, and the realtime hint says vCPUs are
//! never preempted (so spinning is safe).
//!
//! The bits come from the kernel's `arch/x86/include/uapi/asm/kvm_para.h` (KVM_FEATURE_* in
//! EAX, KVM_HINTS_REALTIME in EDX). KVM may sit above another signature (Hyper-V emulation at
//! 0x40000000, KVM at 0x40000100), so its leaves are searched in 0x100 steps as Linux does.
//!
//! On a fixture root the live CPU says nothing about the fixture's machine, so the leaves come
//! from a `cpuid.txt` in the fixture, in the format of `cpuid -r -1`.

use super::reading::{Reading, read_trim};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Raw CPUID registers by leaf (subleaf 0): [eax, ebx, ecx, edx].
pub type Leaves = BTreeMap<u32, [u32; 4]>;

pub const HYPERVISOR_BASE: u32 = 0x4000_0000;

/// The KVM feature bits of leaf 0x40000001 EAX that matter for placement, by kernel name.
pub const KVM_FEATURES: &[(u32, &str)] = &[
    (3, "clocksource2"),
    (4, "async_pf"),
    (5, "steal_time"),
    (6, "pv_eoi"),
    (7, "pv_unhalt"),
    (9, "pv_tlb_flush"),
    (10, "async_pf_vmexit"),
    (11, "pv_send_ipi"),
    (12, "poll_control"),
    (13, "pv_sched_yield"),
    (14, "async_pf_int"),
    (15, "msi_ext_dest_id"),
];

/// What KVM offers this guest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvmFeatures {
    /// The leaf holding KVM's signature (0x40000000, or higher beside Hyper-V emulation).
    pub base_leaf: u32,
    /// Raw feature bits (EAX of base+1).
    pub eax: u32,
    /// Raw hint bits (EDX of base+1).
    pub edx: u32,
    /// Each known feature bit by its kernel name (`pv_send_ipi`, `poll_control`, ...).
    pub features: BTreeMap<String, bool>,
    /// KVM_HINTS_REALTIME: vCPUs are never preempted, so the guest may spin instead of halting.
    pub realtime_hint: bool,
}

impl KvmFeatures {
    pub fn has(&self, name: &str) -> bool {
        self.features.get(name).copied().unwrap_or(false)
    }
}

/// What CPUID says about virtualisation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuidFacts {
    /// The CPU vendor string from leaf 0 (`GenuineIntel`, `AuthenticAMD`).
    pub cpu_vendor: Option<String>,
    /// Leaf 1 ECX bit 31: set by every hypervisor that admits to being one.
    pub hypervisor_bit: bool,
    /// The 12-byte signature at 0x40000000 (`KVMKVMKVM`, `Microsoft Hv`), when the bit is set.
    pub signature: Option<String>,
    /// The hypervisor the signature names.
    pub vendor: Option<String>,
    /// KVM's paravirtual features, when KVM's signature was found.
    pub kvm: Option<KvmFeatures>,
}

/// Parses `cpuid -r -1` output: lines like `0x40000001 0x00: eax=0x01 ebx=0x0 ecx=0x0 edx=0x0`.
/// Only subleaf 0 and the first CPU's block are kept.
pub fn parse_cpuid_dump(text: &str) -> Leaves {
    let mut out = Leaves::new();
    let mut cpus_seen = 0;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("CPU") {
            cpus_seen += 1;
            if cpus_seen > 1 {
                break;
            }
            continue;
        }
        let Some((head, regs)) = t.split_once(':') else {
            continue;
        };
        let mut h = head.split_whitespace();
        let (Some(leaf), sub) = (h.next().and_then(hex), h.next().and_then(hex)) else {
            continue;
        };
        if sub.unwrap_or(0) != 0 {
            continue;
        }
        let mut r = [0u32; 4];
        for (i, name) in ["eax=", "ebx=", "ecx=", "edx="].iter().enumerate() {
            if let Some(v) = regs
                .split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .and_then(hex)
            {
                r[i] = v;
            }
        }
        out.insert(leaf, r);
    }
    out
}

fn hex(s: &str) -> Option<u32> {
    u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

fn regs_text(regs: &[u32]) -> String {
    regs.iter()
        .flat_map(|r| r.to_le_bytes())
        .map(|b| if b == 0 { ' ' } else { b as char })
        .collect::<String>()
        .trim_end()
        .to_string()
}

/// Names the hypervisor from its signature.
pub fn vendor_name(signature: &str) -> String {
    match signature.trim() {
        "KVMKVMKVM" => "KVM",
        "Microsoft Hv" => "Microsoft Hyper-V",
        "VMwareVMware" => "VMware",
        "XenVMMXenVMM" => "Xen",
        "TCGTCGTCGTCG" => "QEMU (TCG, no acceleration)",
        "VBoxVBoxVBox" => "VirtualBox",
        "bhyve bhyve" => "bhyve",
        "ACRNACRNACRN" => "ACRN",
        "lrpepyh  vr" | "prl hyperv" => "Parallels",
        other => return format!("unknown ({other})"),
    }
    .to_string()
}

/// Interprets raw leaves (pure).
pub fn interpret(leaves: &Leaves) -> CpuidFacts {
    let cpu_vendor = leaves
        .get(&0)
        .map(|r| regs_text(&[r[1], r[3], r[2]]))
        .filter(|s| !s.is_empty());
    let hypervisor_bit = leaves.get(&1).is_some_and(|r| r[2] & (1 << 31) != 0);
    let sig_at = |leaf: u32| leaves.get(&leaf).map(|r| regs_text(&r[1..4]));
    let signature = hypervisor_bit.then(|| sig_at(HYPERVISOR_BASE)).flatten();
    let kvm = hypervisor_bit
        .then(|| {
            (0..0x100)
                .map(|k| HYPERVISOR_BASE + k * 0x100)
                .find(|&b| sig_at(b).as_deref() == Some("KVMKVMKVM"))
        })
        .flatten()
        .map(|base| {
            let [eax, _, _, edx] = leaves.get(&(base + 1)).copied().unwrap_or([0; 4]);
            KvmFeatures {
                base_leaf: base,
                eax,
                edx,
                features: KVM_FEATURES
                    .iter()
                    .map(|&(bit, name)| (name.to_string(), eax & (1 << bit) != 0))
                    .collect(),
                realtime_hint: edx & 1 != 0,
            }
        });
    CpuidFacts {
        cpu_vendor,
        hypervisor_bit,
        vendor: signature.as_deref().map(vendor_name),
        signature,
        kvm,
    }
}

/// The leaves of the live CPU: 0, 1, and the hypervisor range where the bit is set.
#[cfg(target_arch = "x86_64")]
fn live_leaves() -> Leaves {
    use core::arch::x86_64::__cpuid;
    let get = |leaf: u32| {
        // CPUID is unprivileged and always present on x86_64.
        let r = __cpuid(leaf);
        [r.eax, r.ebx, r.ecx, r.edx]
    };
    let mut out = Leaves::new();
    out.insert(0, get(0));
    out.insert(1, get(1));
    if out[&0][0] >= FREQUENCY_LEAF {
        out.insert(FREQUENCY_LEAF, get(FREQUENCY_LEAF));
    }
    if out[&1][2] & (1 << 31) != 0 {
        for k in 0..0x100 {
            let base = HYPERVISOR_BASE + k * 0x100;
            let r = get(base);
            if k > 0 && r[1..4] == [0; 3] {
                continue;
            }
            out.insert(base, r);
            out.insert(base + 1, get(base + 1));
            if regs_text(&r[1..4]) == "KVMKVMKVM" {
                break;
            }
        }
    }
    out
}

/// Reads CPUID: the live CPU, or a fixture's `cpuid.txt`.
pub fn read(root: &Path, live: bool) -> Reading<CpuidFacts> {
    if !live {
        return read_trim(&root.join("cpuid.txt")).map(|t| interpret(&parse_cpuid_dump(&t)));
    }
    #[cfg(target_arch = "x86_64")]
    {
        Reading::Value(interpret(&live_leaves()))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Reading::unavailable(
            super::reading::Reason::NotApplicable,
            "CPUID exists only on x86",
        )
    }
}

/// CPUID leaf 0x16: the processor's base and maximum frequency in MHz (Intel since Skylake;
/// zero or absent on AMD and in many guests).
pub const FREQUENCY_LEAF: u32 = 0x16;

/// Base and maximum MHz from leaf 0x16 when the CPU fills it (pure). The leaf is valid only
/// when leaf 0 says it exists.
pub fn frequency_mhz(leaves: &Leaves) -> (Option<f64>, Option<f64>) {
    let listed = leaves.get(&0).is_some_and(|r| r[0] >= FREQUENCY_LEAF);
    let r = leaves.get(&FREQUENCY_LEAF).filter(|_| listed);
    let mhz = |v: u32| (v & 0xffff > 0).then(|| f64::from(v & 0xffff));
    (r.and_then(|r| mhz(r[0])), r.and_then(|r| mhz(r[1])))
}

/// Leaf 0x16's base and maximum MHz: the live CPU, or a fixture's `cpuid.txt`.
pub fn read_frequency(root: &Path, live: bool) -> (Option<f64>, Option<f64>) {
    if !live {
        return read_trim(&root.join("cpuid.txt"))
            .into_value()
            .map(|t| frequency_mhz(&parse_cpuid_dump(&t)))
            .unwrap_or((None, None));
    }
    #[cfg(target_arch = "x86_64")]
    {
        frequency_mhz(&live_leaves())
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        (None, None)
    }
}

/// Writes leaves in the `cpuid -r -1` format `parse_cpuid_dump` reads (for fixtures).
pub fn format_dump(leaves: &Leaves) -> String {
    let mut s = String::from("CPU:\n");
    for (leaf, r) in leaves {
        s.push_str(&format!(
            "   0x{leaf:08x} 0x00: eax=0x{:08x} ebx=0x{:08x} ecx=0x{:08x} edx=0x{:08x}\n",
            r[0], r[1], r[2], r[3]
        ));
    }
    s
}

/// The live leaves in dump format (for capturing a fixture from a real machine).
pub fn live_dump() -> Reading<String> {
    #[cfg(target_arch = "x86_64")]
    {
        Reading::Value(format_dump(&live_leaves()))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Reading::unavailable(
            super::reading::Reason::NotApplicable,
            "CPUID exists only on x86",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kvm_leaves(base: u32, eax: u32, edx: u32) -> Leaves {
        let mut l = Leaves::new();
        l.insert(1, [0, 0, 1 << 31, 0]);
        // "KVMKVMKVM\0\0\0" in ebx, ecx, edx.
        l.insert(base, [base + 1, 0x4b4d564b, 0x564b4d56, 0x4d]);
        l.insert(base + 1, [eax, 0, 0, edx]);
        l
    }

    #[test]
    fn decodes_kvm_features_by_kernel_bit_numbers() {
        let eax = (1 << 5) | (1 << 7) | (1 << 11) | (1 << 13);
        let f = interpret(&kvm_leaves(HYPERVISOR_BASE, eax, 1));
        assert_eq!(f.vendor.as_deref(), Some("KVM"));
        let k = f.kvm.unwrap();
        assert!(k.has("steal_time") && k.has("pv_unhalt") && k.has("pv_send_ipi"));
        assert!(k.has("pv_sched_yield") && !k.has("poll_control") && !k.has("pv_tlb_flush"));
        assert!(k.realtime_hint);
    }

    #[test]
    fn finds_kvm_above_hyper_v_and_ignores_leaves_without_the_bit() {
        let mut l = kvm_leaves(HYPERVISOR_BASE + 0x100, 1 << 12, 0);
        // "Microsoft Hv" at the base leaf.
        l.insert(
            HYPERVISOR_BASE,
            [0x4000000b, 0x7263694d, 0x666f736f, 0x76482074],
        );
        let f = interpret(&l);
        assert_eq!(f.vendor.as_deref(), Some("Microsoft Hyper-V"));
        assert_eq!(f.kvm.unwrap().base_leaf, HYPERVISOR_BASE + 0x100);
        l.insert(1, [0; 4]);
        let bare = interpret(&l);
        assert!(!bare.hypervisor_bit && bare.signature.is_none() && bare.kvm.is_none());
    }

    #[test]
    fn dump_round_trips_and_keeps_only_subleaf_zero_of_the_first_cpu() {
        let l = kvm_leaves(HYPERVISOR_BASE, 0x01007afb, 0);
        let text = format_dump(&l)
            + "   0x00000001 0x01: eax=0x1 ebx=0x0 ecx=0x0 edx=0x0\nCPU 1:\n   0x00000002 0x00: eax=0x1\n";
        assert_eq!(parse_cpuid_dump(&text), l);
        // Leaf 0x16 counts only when leaf 0 lists it.
        assert_eq!(frequency_mhz(&l), (None, None));
    }
}
