//! KVM's own events per vCPU thread, counted in the kernel: four small BPF programs on KVM's
//! tracepoints, each adding to the entry of the thread it runs in (the vCPU thread: KVM fires
//! every one of these tracepoints from the vCPU's own `KVM_RUN`).
//!
//! - `kvm:kvm_vcpu_wakeup (ns, waited, valid)`, at the end of every halt (`kvm_vcpu_halt` in
//!   virt/kvm/kvm_main.c): `ns` is the whole halt, polling included, from its start to the
//!   wakeup; `waited` says the vCPU thread blocked (was scheduled out), so a halt that did not
//!   wait ended while KVM polled for it (a poll won: its `ns` is CPU time spent polling, what
//!   KVM's own `halt_poll_success_ns` adds), and one that waited polled its whole window first,
//!   if any, then slept (its `ns` is the window plus the sleep). `valid` is false only where the
//!   architecture has invalid wakeups (s390); x86 always says true.
//! - `kvm:kvm_apic_ipi (icr_low, dest_id)`, per write of the local APIC's ICR: an IPI sent, by
//!   the thread that fires it.
//! - `kvm:kvm_halt_poll_ns (grow, vcpu_id, new, old)`: KVM grew or shrank the vCPU's poll window;
//!   it fires on a change only, so a window that holds still (at its limit) is never seen.
//! - `kvm:kvm_exit (exit_reason, ...)`: every exit, by its reason. It exists on every x86 KVM;
//!   a KVM that runs guests without VMX/SVM (kvm_pvm) never fires it.
//!
//! The programs read their fields at the offsets of the tracepoint's `format` file (parsed by
//! [`crate::bpf::format`]), so a kernel that moves or drops a field is refused with its name,
//! never read wrong.
//!
//! **The table.** `threads` is an array of [`THREAD_BUCKETS`] buckets of [`THREAD_WAYS`]
//! entries of [`ENTRY_WORDS`] u64 counters; a thread's bucket is the Fibonacci hash of its tid
//! ([`crate::bpf::asm::bucket`]) and its entry the way whose first word holds its tid, taken by
//! compare-and-exchange from 0 the first time it fires one of these events. Only that thread
//! writes its counters afterwards (it runs on one CPU at a time and a program is never
//! preempted), so plain adds are exact. A thread whose bucket is full (its four ways held by
//! other threads: about 1,000 threads fired KVM events, or an unlucky spread) is not counted and
//! its events are counted in `stats` as lost, published as `events_lost` (never silently). The
//! exit reasons are a second table of (tid, reason) entries, [`EXIT_BUCKETS`] buckets of
//! [`EXIT_WAYS`], with the same rule.

use crate::bpf::asm::{Asm, count};
use crate::bpf::format::{Field, Format};
use crate::bpf::insn::{Insn, helper};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Buckets of `threads` (a power of two).
pub const THREAD_BUCKETS: u32 = 256;
/// Entries per bucket.
pub const THREAD_WAYS: u32 = 4;
/// u64 words of a thread's entry, and what each holds.
pub const ENTRY_WORDS: usize = 12;
pub const W_TID: usize = 0;
pub const W_HALTS: usize = 1;
pub const W_WON: usize = 2;
pub const W_WON_NS: usize = 3;
pub const W_SLEPT: usize = 4;
pub const W_SLEPT_NS: usize = 5;
pub const W_INVALID: usize = 6;
pub const W_IPIS: usize = 7;
pub const W_GROW: usize = 8;
pub const W_SHRINK: usize = 9;
pub const W_WINDOW: usize = 10;
pub const W_EXITS: usize = 11;
/// Bytes of a thread's entry.
pub const ENTRY_BYTES: usize = ENTRY_WORDS * 8;
/// Bytes of a `threads` bucket (one array value).
pub const THREAD_BUCKET_BYTES: usize = THREAD_WAYS as usize * ENTRY_BYTES;
/// Buckets of `exits` (a power of two); each of [`EXIT_WAYS`] entries of two u64 words: the
/// tag `reason << 32 | tid` (0: free) and the count.
pub const EXIT_BUCKETS: u32 = 1024;
pub const EXIT_WAYS: u32 = 4;
pub const EXIT_ENTRY_BYTES: usize = 16;
pub const EXIT_BUCKET_BYTES: usize = EXIT_WAYS as usize * EXIT_ENTRY_BYTES;
/// `stats` slots (a per-CPU array): each program's runs, then events not counted.
pub const RUNS_WAKEUP: u32 = 0;
pub const RUNS_IPI: u32 = 1;
pub const RUNS_POLL: u32 = 2;
pub const RUNS_EXIT: u32 = 3;
/// Events of a thread whose bucket had no free entry.
pub const LOST_THREAD: u32 = 4;
/// Exits whose (thread, reason) bucket had no free entry (still counted in the thread's exits).
pub const LOST_EXIT: u32 = 5;
pub const STATS: u32 = 6;
/// Where a thread entry keeps its tid: the low half of its first u64.
const TID_LOW: i16 = if cfg!(target_endian = "little") { 0 } else { 4 };
/// The odd multiplier mixing an exit reason into its thread's tid for the `exits` bucket.
const REASON_MIX: i32 = 65_599;

/// The tracepoints, in the order of their programs.
pub const TRACEPOINTS: [&str; 4] = [
    "kvm_vcpu_wakeup",
    "kvm_apic_ipi",
    "kvm_halt_poll_ns",
    "kvm_exit",
];

/// Descriptors of the maps the programs use.
#[derive(Clone, Copy, Debug)]
pub struct Maps {
    pub threads: i32,
    pub exits: i32,
    pub stats: i32,
}

/// Where a program reads its tracepoint's fields.
#[derive(Clone, Copy, Debug)]
pub enum Args<'a> {
    /// The perf record of a `BPF_PROG_TYPE_TRACEPOINT` program: each field at the offset its
    /// `format` file gives.
    Record(&'a Format),
    /// The tracepoint's own arguments, for a `BPF_PROG_TYPE_RAW_TRACEPOINT` program: one u64
    /// slot each, in the order of its `TP_PROTO` (the kernel's BTF is checked to pass them
    /// there before a raw program loads: [`RAW_ARGS`]). No record is built for the program,
    /// which is what makes it the cheaper of the two.
    Raw,
}

/// The integer arguments each raw program reads, as the kernel's BTF must give them
/// (`btf_trace_<name>`): tracepoint, then each argument's name and width in bytes, in
/// `TP_PROTO` order (include/trace/events/kvm.h). `kvm_exit` is not here: its raw arguments are
/// the vCPU and the ISA, its reason sits inside the vCPU, so it keeps the record.
pub const RAW_ARGS: [(&str, &[(&str, usize)]); 3] = [
    ("kvm_vcpu_wakeup", &[("ns", 8), ("waited", 1), ("valid", 1)]),
    ("kvm_apic_ipi", &[("icr_low", 4), ("dest_id", 4)]),
    (
        "kvm_halt_poll_ns",
        &[("grow", 1), ("vcpu_id", 4), ("new", 4), ("old", 4)],
    ),
];

/// The load of field `name` into `dst` (context in r6). From a record: at an offset the
/// verifier lets a tracepoint program read (past the 8 bytes the kernel overwrites, aligned to
/// the field's width). Raw: its slot in [`RAW_ARGS`] (an integer the kernel widened to a u64,
/// so the whole slot is its value).
fn load(args: Args, tracepoint: &str, name: &str, dst: u8) -> Result<Insn, String> {
    let f = match args {
        Args::Record(f) => f,
        Args::Raw => {
            let slot = RAW_ARGS
                .iter()
                .find(|(tp, _)| *tp == tracepoint)
                .and_then(|(_, a)| a.iter().position(|(n, _)| *n == name))
                .ok_or_else(|| format!("{tracepoint} has no raw argument `{name}`"))?;
            return Ok(Insn::ldx_dw(dst, 6, (slot * 8) as i16));
        }
    };
    let Field { offset, size, .. } = f.field(name)?;
    let bad = || {
        format!(
            "tracepoint {} has field `{name}` at offset {offset}, size {size}: not a load a BPF tracepoint program may make",
            f.name
        )
    };
    if offset < 8 || offset % size.max(1) != 0 || offset > i16::MAX as usize {
        return Err(bad());
    }
    Insn::ldx(size, dst, 6, offset as i16).ok_or_else(bad)
}

/// Every program's start: the context in r6, the run counted, r7 = the current thread's tid,
/// r9 = its entry in `threads` (taken when it has none); a full bucket counts the event lost
/// and returns. r8 is free afterwards.
fn thread_entry(a: &mut Asm, m: &Maps, runs: u32) {
    a.push(Insn::mov64_reg(6, 1));
    count(&mut a.p, m.stats, runs);
    a.push(Insn::call(helper::GET_CURRENT_PID_TGID));
    a.push(Insn::mov64_reg(7, 0));
    a.push(Insn::lsh64_imm(7, 32));
    a.push(Insn::rsh64_imm(7, 32));
    // The idle task (tid 0) runs no vCPU, and 0 marks a free entry.
    a.jump(Insn::jeq_imm(7, 0, 0), "exit");
    a.bucket(m.threads, THREAD_BUCKETS, 7, "exit");
    a.push(Insn::mov64_reg(8, 0));
    let ways = (THREAD_WAYS, ENTRY_BYTES as i16, TID_LOW);
    a.find_way(8, ways, 7, 9, "entry");
    a.claim_way(
        8,
        (THREAD_WAYS, ENTRY_BYTES as i16, 0),
        (true, 7),
        9,
        "entry",
    );
    count(&mut a.p, m.stats, LOST_THREAD);
    a.jump(Insn::ja(0), "exit");
    a.label("entry");
}

/// `entry[word] += 1` for the entry at r9, through r1.
fn inc(a: &mut Asm, word: usize) {
    let off = (word * 8) as i16;
    a.push(Insn::ldx_dw(1, 9, off));
    a.push(Insn::add64_imm(1, 1));
    a.push(Insn::stx_dw(9, off, 1));
}

/// The `kvm_vcpu_wakeup` program: a halt, won by polling or slept, with its time.
pub fn wakeup(m: &Maps, f: Args) -> Result<Vec<Insn>, String> {
    let tp = "kvm_vcpu_wakeup";
    let (ns, waited, valid) = (
        load(f, tp, "ns", 2)?,
        load(f, tp, "waited", 3)?,
        load(f, tp, "valid", 4)?,
    );
    let mut a = Asm::new();
    thread_entry(&mut a, m, RUNS_WAKEUP);
    inc(&mut a, W_HALTS);
    a.push(valid);
    a.jump(Insn::jne_imm(4, 0, 0), "valid");
    inc(&mut a, W_INVALID);
    a.label("valid");
    a.push(ns);
    a.push(waited);
    a.jump(Insn::jne_imm(3, 0, 0), "slept");
    // Not waited and invalid: a halt, an invalid wakeup, and neither won nor slept.
    a.jump(Insn::jeq_imm(4, 0, 0), "exit");
    inc(&mut a, W_WON);
    a.add_dw(9, (W_WON_NS * 8) as i16, 2, 5);
    a.jump(Insn::ja(0), "exit");
    a.label("slept");
    inc(&mut a, W_SLEPT);
    a.add_dw(9, (W_SLEPT_NS * 8) as i16, 2, 5);
    Ok(a.exit_with(1))
}

/// The `kvm_apic_ipi` program: an IPI sent by this thread.
pub fn ipi(m: &Maps) -> Vec<Insn> {
    let mut a = Asm::new();
    thread_entry(&mut a, m, RUNS_IPI);
    inc(&mut a, W_IPIS);
    a.exit_with(1)
}

/// The `kvm_halt_poll_ns` program: the window grown or shrunk, and its new value.
pub fn halt_poll(m: &Maps, f: Args) -> Result<Vec<Insn>, String> {
    let tp = "kvm_halt_poll_ns";
    let (grow, new) = (load(f, tp, "grow", 2)?, load(f, tp, "new", 3)?);
    let mut a = Asm::new();
    thread_entry(&mut a, m, RUNS_POLL);
    a.push(grow);
    a.push(new);
    a.push(Insn::stx_dw(9, (W_WINDOW * 8) as i16, 3));
    a.jump(Insn::jeq_imm(2, 0, 0), "shrink");
    inc(&mut a, W_GROW);
    a.jump(Insn::ja(0), "exit");
    a.label("shrink");
    inc(&mut a, W_SHRINK);
    Ok(a.exit_with(1))
}

/// The `kvm_exit` program: an exit, counted for the thread and for (thread, reason).
pub fn exit(m: &Maps, f: &Format) -> Result<Vec<Insn>, String> {
    let reason = load(Args::Record(f), "kvm_exit", "exit_reason", 2)?;
    let mut a = Asm::new();
    thread_entry(&mut a, m, RUNS_EXIT);
    inc(&mut a, W_EXITS);
    a.push(reason);
    // A reason wider than 32 bits is kept to its low half (x86's are u32).
    a.push(Insn::lsh64_imm(2, 32));
    a.push(Insn::rsh64_imm(2, 32));
    // r8 = the tag, reason << 32 | tid; r6 = the bucket's key, tid + reason * REASON_MIX.
    a.push(Insn::mov64_reg(8, 2));
    a.push(Insn::lsh64_imm(8, 32));
    a.push(Insn::or64_reg(8, 7));
    a.push(Insn::mov64_reg(6, 2));
    a.push(Insn::mul64_imm(6, REASON_MIX));
    a.push(Insn::add64_reg(6, 7));
    a.bucket(m.exits, EXIT_BUCKETS, 6, "exit");
    a.push(Insn::mov64_reg(9, 0));
    let stride = EXIT_ENTRY_BYTES as i16;
    for w in 0..EXIT_WAYS as i16 {
        a.push(Insn::ldx_dw(1, 9, w * stride));
        a.push(Insn::jne_reg(1, 8, 3));
        a.push(Insn::mov64_reg(5, 9));
        a.push(Insn::add64_imm(5, i32::from(w * stride)));
        a.jump(Insn::ja(0), "reason");
    }
    a.claim_way(9, (EXIT_WAYS, stride, 0), (true, 8), 5, "reason");
    count(&mut a.p, m.stats, LOST_EXIT);
    a.jump(Insn::ja(0), "exit");
    a.label("reason");
    a.push(Insn::ldx_dw(1, 5, 8));
    a.push(Insn::add64_imm(1, 1));
    a.push(Insn::stx_dw(5, 8, 1));
    Ok(a.exit_with(1))
}

/// Which hardware virtualisation a host's KVM runs guests with, from its CPU flags (`vmx`:
/// Intel VT-x, `svm`: AMD-V): it says how to read `kvm_exit`'s reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isa {
    Vmx,
    Svm,
}

impl Isa {
    /// From `/proc/cpuinfo` (pure): the first `flags` line's `vmx` or `svm`.
    pub fn from_cpuinfo(cpuinfo: &str) -> Option<Isa> {
        let flags = cpuinfo
            .lines()
            .find(|l| l.starts_with("flags"))?
            .split_once(':')?
            .1;
        let has = |f: &str| flags.split_whitespace().any(|x| x == f);
        if has("vmx") {
            Some(Isa::Vmx)
        } else if has("svm") {
            Some(Isa::Svm)
        } else {
            None
        }
    }
}

/// VMX basic exit reasons (arch/x86/include/uapi/asm/vmx.h).
const VMX_EXITS: &[(u32, &str)] = &[
    (0, "EXCEPTION_NMI"),
    (1, "EXTERNAL_INTERRUPT"),
    (2, "TRIPLE_FAULT"),
    (3, "INIT_SIGNAL"),
    (4, "SIPI_SIGNAL"),
    (7, "INTERRUPT_WINDOW"),
    (8, "NMI_WINDOW"),
    (9, "TASK_SWITCH"),
    (10, "CPUID"),
    (12, "HLT"),
    (13, "INVD"),
    (14, "INVLPG"),
    (15, "RDPMC"),
    (16, "RDTSC"),
    (18, "VMCALL"),
    (19, "VMCLEAR"),
    (20, "VMLAUNCH"),
    (21, "VMPTRLD"),
    (22, "VMPTRST"),
    (23, "VMREAD"),
    (24, "VMRESUME"),
    (25, "VMWRITE"),
    (26, "VMOFF"),
    (27, "VMON"),
    (28, "CR_ACCESS"),
    (29, "DR_ACCESS"),
    (30, "IO_INSTRUCTION"),
    (31, "MSR_READ"),
    (32, "MSR_WRITE"),
    (33, "INVALID_STATE"),
    (34, "MSR_LOAD_FAIL"),
    (36, "MWAIT_INSTRUCTION"),
    (37, "MONITOR_TRAP_FLAG"),
    (39, "MONITOR_INSTRUCTION"),
    (40, "PAUSE_INSTRUCTION"),
    (41, "MCE_DURING_VMENTRY"),
    (43, "TPR_BELOW_THRESHOLD"),
    (44, "APIC_ACCESS"),
    (45, "EOI_INDUCED"),
    (46, "GDTR_IDTR"),
    (47, "LDTR_TR"),
    (48, "EPT_VIOLATION"),
    (49, "EPT_MISCONFIG"),
    (50, "INVEPT"),
    (51, "RDTSCP"),
    (52, "PREEMPTION_TIMER"),
    (53, "INVVPID"),
    (54, "WBINVD"),
    (55, "XSETBV"),
    (56, "APIC_WRITE"),
    (57, "RDRAND"),
    (58, "INVPCID"),
    (59, "VMFUNC"),
    (60, "ENCLS"),
    (61, "RDSEED"),
    (62, "PML_FULL"),
    (63, "XSAVES"),
    (64, "XRSTORS"),
    (67, "UMWAIT"),
    (68, "TPAUSE"),
    (74, "BUS_LOCK"),
    (75, "NOTIFY"),
    (76, "SEAMCALL"),
    (77, "TDCALL"),
    (84, "MSR_READ_IMM"),
    (85, "MSR_WRITE_IMM"),
];

/// SVM exit codes (arch/x86/include/uapi/asm/svm.h), the ranges aside (CR, DR, exceptions).
const SVM_EXITS: &[(u32, &str)] = &[
    (0x060, "INTR"),
    (0x061, "NMI"),
    (0x062, "SMI"),
    (0x063, "INIT"),
    (0x064, "VINTR"),
    (0x065, "CR0_SEL_WRITE"),
    (0x066, "IDTR_READ"),
    (0x067, "GDTR_READ"),
    (0x068, "LDTR_READ"),
    (0x069, "TR_READ"),
    (0x06a, "IDTR_WRITE"),
    (0x06b, "GDTR_WRITE"),
    (0x06c, "LDTR_WRITE"),
    (0x06d, "TR_WRITE"),
    (0x06e, "RDTSC"),
    (0x06f, "RDPMC"),
    (0x070, "PUSHF"),
    (0x071, "POPF"),
    (0x072, "CPUID"),
    (0x073, "RSM"),
    (0x074, "IRET"),
    (0x075, "SWINT"),
    (0x076, "INVD"),
    (0x077, "PAUSE"),
    (0x078, "HLT"),
    (0x079, "INVLPG"),
    (0x07a, "INVLPGA"),
    (0x07b, "IOIO"),
    (0x07c, "MSR"),
    (0x07d, "TASK_SWITCH"),
    (0x07e, "FERR_FREEZE"),
    (0x07f, "SHUTDOWN"),
    (0x080, "VMRUN"),
    (0x081, "VMMCALL"),
    (0x082, "VMLOAD"),
    (0x083, "VMSAVE"),
    (0x084, "STGI"),
    (0x085, "CLGI"),
    (0x086, "SKINIT"),
    (0x087, "RDTSCP"),
    (0x088, "ICEBP"),
    (0x089, "WBINVD"),
    (0x08a, "MONITOR"),
    (0x08b, "MWAIT"),
    (0x08c, "MWAIT_COND"),
    (0x08d, "XSETBV"),
    (0x08e, "RDPRU"),
    (0x08f, "EFER_WRITE_TRAP"),
    (0x0a2, "INVPCID"),
    (0x400, "NPF"),
    (0x401, "AVIC_INCOMPLETE_IPI"),
    (0x402, "AVIC_UNACCELERATED_ACCESS"),
    (0x403, "VMGEXIT"),
];

/// The name of exit reason `reason` as `isa`'s KVM traces it; `None` for one not listed.
pub fn exit_reason_name(isa: Isa, reason: u32) -> Option<String> {
    match isa {
        Isa::Vmx => VMX_EXITS
            .iter()
            .find(|(n, _)| *n == reason)
            .map(|(_, s)| s.to_string()),
        Isa::Svm => match reason {
            0x000..=0x00f => Some(format!("READ_CR{}", reason)),
            0x010..=0x01f => Some(format!("WRITE_CR{}", reason - 0x010)),
            0x020..=0x02f => Some(format!("READ_DR{}", reason - 0x020)),
            0x030..=0x03f => Some(format!("WRITE_DR{}", reason - 0x030)),
            0x040..=0x05f => Some(format!("EXCP_{}", reason - 0x040)),
            0x090..=0x09f => Some(format!("CR{}_WRITE_TRAP", reason - 0x090)),
            _ => SVM_EXITS
                .iter()
                .find(|(n, _)| *n == reason)
                .map(|(_, s)| s.to_string()),
        },
    }
}

/// One thread's counts over the window, as its entry holds them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadCounts {
    pub halts: u64,
    pub won: u64,
    pub won_ns: u64,
    pub slept: u64,
    pub slept_ns: u64,
    pub invalid: u64,
    pub ipis: u64,
    pub grow: u64,
    pub shrink: u64,
    /// The last window `kvm_halt_poll_ns` set (meaningful when grow + shrink > 0).
    pub window_ns: u64,
    pub exits: u64,
}

fn word(b: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[i * 8..i * 8 + 8]);
    u64::from_ne_bytes(w)
}

/// The threads a `threads` bucket's bytes hold (pure; a short buffer holds none).
pub fn decode_threads(bucket: &[u8]) -> Vec<(u32, ThreadCounts)> {
    bucket
        .chunks_exact(ENTRY_BYTES)
        .filter_map(|e| {
            let tid = word(e, W_TID) as u32;
            (tid != 0).then(|| {
                (
                    tid,
                    ThreadCounts {
                        halts: word(e, W_HALTS),
                        won: word(e, W_WON),
                        won_ns: word(e, W_WON_NS),
                        slept: word(e, W_SLEPT),
                        slept_ns: word(e, W_SLEPT_NS),
                        invalid: word(e, W_INVALID),
                        ipis: word(e, W_IPIS),
                        grow: word(e, W_GROW),
                        shrink: word(e, W_SHRINK),
                        window_ns: word(e, W_WINDOW),
                        exits: word(e, W_EXITS),
                    },
                )
            })
        })
        .collect()
}

/// The (tid, reason, count) an `exits` bucket's bytes hold (pure).
pub fn decode_exits(bucket: &[u8]) -> Vec<(u32, u32, u64)> {
    bucket
        .chunks_exact(EXIT_ENTRY_BYTES)
        .filter_map(|e| {
            let tag = word(e, 0);
            (tag != 0).then(|| (tag as u32, (tag >> 32) as u32, word(e, 1)))
        })
        .collect()
}

/// KVM's events of one vCPU (or, summed, of one VM) over the window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KvmEvents {
    /// Halts that ended in the window (`kvm_vcpu_wakeup`).
    pub halts: u64,
    /// Halts that ended without the thread blocking: won by KVM's polling.
    pub polls_won: u64,
    /// Their time, ns: CPU time KVM spent polling in halts it won.
    pub polls_won_ns: u64,
    /// Halts in which the thread blocked (after polling its whole window, if it had one).
    pub slept: u64,
    /// Their time, ns: the poll window and the sleep after it.
    pub slept_ns: u64,
    /// Wakeups KVM calls invalid (none on x86); each also in `halts`.
    pub invalid_wakeups: u64,
    /// IPIs this vCPU sent (`kvm_apic_ipi`, one per ICR write).
    pub ipis_sent: u64,
    /// Times KVM grew and shrank its poll window (`kvm_halt_poll_ns`).
    pub poll_window_grew: u64,
    pub poll_window_shrank: u64,
    /// The window the last change set, ns; `None` when it did not change in the window (the
    /// tracepoint fires on changes only).
    pub poll_window_ns: Option<u64>,
    /// Its exits (`kvm_exit`); `None` with `exits_reason` where they cannot be counted.
    pub exits: Option<u64>,
    /// Exits by KVM's `exit_reason` (VMX basic exit reason or SVM exit code, as traced).
    pub exits_by_reason: Option<BTreeMap<u32, u64>>,
    /// Why `exits` is `None`.
    pub exits_reason: Option<String>,
}

impl KvmEvents {
    /// A thread's counts, with its exits by reason, or why exits are not counted.
    pub fn of(c: &ThreadCounts, reasons: BTreeMap<u32, u64>, exits: Result<(), &str>) -> Self {
        let (exits, exits_by_reason, exits_reason) = match exits {
            Ok(()) => (Some(c.exits), Some(reasons), None),
            Err(why) => (None, None, Some(why.to_string())),
        };
        Self {
            halts: c.halts,
            polls_won: c.won,
            polls_won_ns: c.won_ns,
            slept: c.slept,
            slept_ns: c.slept_ns,
            invalid_wakeups: c.invalid,
            ipis_sent: c.ipis,
            poll_window_grew: c.grow,
            poll_window_shrank: c.shrink,
            poll_window_ns: (c.grow + c.shrink > 0).then_some(c.window_ns),
            exits,
            exits_by_reason,
            exits_reason,
        }
    }

    /// The sum of several vCPUs' events (a VM's): the poll window is per vCPU, so none.
    pub fn total<'a>(all: impl IntoIterator<Item = &'a KvmEvents>) -> Self {
        let mut t = KvmEvents::default();
        let mut exits = Some(0u64);
        let mut reasons: Option<BTreeMap<u32, u64>> = Some(BTreeMap::new());
        for e in all {
            t.halts += e.halts;
            t.polls_won += e.polls_won;
            t.polls_won_ns += e.polls_won_ns;
            t.slept += e.slept;
            t.slept_ns += e.slept_ns;
            t.invalid_wakeups += e.invalid_wakeups;
            t.ipis_sent += e.ipis_sent;
            t.poll_window_grew += e.poll_window_grew;
            t.poll_window_shrank += e.poll_window_shrank;
            exits = exits.zip(e.exits).map(|(a, b)| a + b);
            reasons = match (reasons, &e.exits_by_reason) {
                (Some(mut r), Some(x)) => {
                    for (k, v) in x {
                        *r.entry(*k).or_default() += v;
                    }
                    Some(r)
                }
                _ => None,
            };
            if t.exits_reason.is_none() {
                t.exits_reason.clone_from(&e.exits_reason);
            }
        }
        t.exits = exits;
        t.exits_by_reason = reasons;
        if t.exits.is_some() {
            t.exits_reason = None;
        }
        t
    }

    /// The mean time of a halt that slept (its poll window included), ns.
    pub fn mean_sleep_ns(&self) -> Option<f64> {
        (self.slept > 0).then(|| self.slept_ns as f64 / self.slept as f64)
    }

    /// At most the CPU time, ns, its lost polls burnt (the halts that slept polled first): no
    /// tracepoint times them, so this bounds them twice and keeps the smaller: each halt that
    /// slept polled at most its window (where `kvm_halt_poll_ns` said it), and all polling is
    /// on-CPU time of the thread, less the polls won (`on_cpu_ns`, from its schedstat).
    pub fn lost_poll_bound_ns(&self, on_cpu_ns: Option<f64>) -> Option<f64> {
        let by_window = self
            .poll_window_ns
            .map(|w| w.saturating_mul(self.slept) as f64);
        let by_cpu = on_cpu_ns.map(|c| (c - self.polls_won_ns as f64).max(0.0));
        match (by_window, by_cpu) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Polls won among halts.
    pub fn won_share(&self) -> Option<f64> {
        (self.halts > 0).then(|| self.polls_won as f64 / self.halts as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::interp::{MapKind, Vm};

    fn fixture(name: &str) -> Format {
        let p = format!(
            "{}/tests/fixtures/host/kvm/{name}.format",
            env!("CARGO_MANIFEST_DIR")
        );
        Format::parse(&std::fs::read_to_string(p).unwrap()).unwrap()
    }

    const M: Maps = Maps {
        threads: 3,
        exits: 4,
        stats: 5,
    };

    fn vm() -> Vm {
        let mut vm = Vm::new(2);
        vm.map(
            M.threads,
            MapKind::Array,
            4,
            THREAD_BUCKET_BYTES as u32,
            THREAD_BUCKETS,
        );
        vm.map(
            M.exits,
            MapKind::Array,
            4,
            EXIT_BUCKET_BYTES as u32,
            EXIT_BUCKETS,
        );
        vm.map(M.stats, MapKind::PerCpuArray, 4, 8, STATS);
        vm
    }

    /// A record of `f` with each named field set (the first 8 bytes, the common header, 0).
    fn record(f: &Format, fields: &[(&str, u64)]) -> Vec<u8> {
        let mut r = vec![0u8; crate::bpf::record_size(f).div_ceil(8) * 8];
        for (name, v) in fields {
            let x = f.field(name).unwrap();
            r[x.offset..x.offset + x.size].copy_from_slice(&v.to_le_bytes()[..x.size]);
        }
        r
    }

    fn threads(vm: &Vm) -> BTreeMap<u32, ThreadCounts> {
        (0..THREAD_BUCKETS)
            .flat_map(|b| decode_threads(vm.value(M.threads, b, 0)))
            .collect()
    }

    fn stat(vm: &Vm, slot: u32) -> u64 {
        (0..2).map(|cpu| vm.word(M.stats, slot, cpu, 0)).sum()
    }

    #[test]
    fn the_fields_are_read_where_this_kernels_format_puts_them() {
        let f = fixture("kvm_vcpu_wakeup");
        let w = |name, dst| load(Args::Record(&f), "kvm_vcpu_wakeup", name, dst);
        assert_eq!(w("ns", 2), Ok(Insn::ldx_dw(2, 6, 8)));
        assert_eq!(w("waited", 3), Ok(Insn::ldx_b(3, 6, 16)));
        assert_eq!(w("valid", 4), Ok(Insn::ldx_b(4, 6, 17)));
        assert!(w("common_pid", 2).unwrap_err().contains("not a load"));
        assert!(w("max_ns", 2).unwrap_err().contains("no field `max_ns`"));
        let e = fixture("kvm_exit");
        assert_eq!(
            load(Args::Record(&e), "kvm_exit", "exit_reason", 2),
            Ok(Insn::ldx_w(2, 6, 8))
        );
        // Raw: the argument's slot, whole.
        let raw = |tp, name| load(Args::Raw, tp, name, 2);
        assert_eq!(raw("kvm_vcpu_wakeup", "ns"), Ok(Insn::ldx_dw(2, 6, 0)));
        assert_eq!(raw("kvm_vcpu_wakeup", "valid"), Ok(Insn::ldx_dw(2, 6, 16)));
        assert_eq!(raw("kvm_halt_poll_ns", "new"), Ok(Insn::ldx_dw(2, 6, 16)));
        assert!(raw("kvm_exit", "exit_reason").is_err(), "no raw kvm_exit");
        // A field the verifier would refuse (misaligned) is refused before loading.
        let odd = Format::parse(
            "name: x\nID: 1\nformat:\n\tfield:__u64 ns;\toffset:12;\tsize:8;\tsigned:0;\n",
        )
        .unwrap();
        assert!(load(Args::Record(&odd), "x", "ns", 2).is_err());
    }

    /// Two vCPU threads' halts, won and slept, their IPIs and poll-window changes, run through
    /// the very programs the kernel gets: every count lands on the thread that fired it.
    #[test]
    fn each_threads_events_are_counted_on_its_own_entry() {
        let (wf, pf, ef) = (
            fixture("kvm_vcpu_wakeup"),
            fixture("kvm_halt_poll_ns"),
            fixture("kvm_exit"),
        );
        let w = wakeup(&M, Args::Record(&wf)).unwrap();
        let i = ipi(&M);
        let p = halt_poll(&M, Args::Record(&pf)).unwrap();
        let x = exit(&M, &ef).unwrap();
        let mut vm = vm();
        let (a, b) = (4242u64, 4243u64);
        let fire = |vm: &mut Vm, tid: u64, cpu: u32, prog: &[Insn], rec: Vec<u8>| {
            vm.current = (7 << 32) | tid;
            vm.cpu = cpu;
            assert_eq!(
                vm.run_record(prog, &rec),
                Ok(1),
                "returns 1: others' perf events go on"
            );
        };
        let halt =
            |ns: u64, waited: u64| record(&wf, &[("ns", ns), ("waited", waited), ("valid", 1)]);
        for k in 0..10 {
            fire(&mut vm, a, 0, &w, halt(1_000 + k, 0));
            fire(&mut vm, a, 0, &i, record(&fixture("kvm_apic_ipi"), &[]));
            fire(&mut vm, b, 1, &w, halt(50_000, 1));
            fire(&mut vm, b, 1, &i, record(&fixture("kvm_apic_ipi"), &[]));
        }
        // An invalid wakeup that did not wait: a halt, invalid, neither won nor slept.
        fire(
            &mut vm,
            b,
            0,
            &w,
            record(&wf, &[("ns", 5), ("waited", 0), ("valid", 0)]),
        );
        fire(
            &mut vm,
            a,
            1,
            &p,
            record(&pf, &[("grow", 1), ("new", 20_000), ("old", 10_000)]),
        );
        fire(
            &mut vm,
            a,
            1,
            &p,
            record(&pf, &[("grow", 0), ("new", 0), ("old", 20_000)]),
        );
        for reason in [12u64, 12, 30, 12] {
            fire(&mut vm, b, 0, &x, record(&ef, &[("exit_reason", reason)]));
        }
        let t = threads(&vm);
        assert_eq!(t.len(), 2, "{t:?}");
        let ta = &t[&(a as u32)];
        assert_eq!((ta.halts, ta.won, ta.slept, ta.invalid), (10, 10, 0, 0));
        assert_eq!(ta.won_ns, (0..10).map(|k| 1_000 + k).sum::<u64>());
        assert_eq!((ta.ipis, ta.grow, ta.shrink, ta.window_ns), (10, 1, 1, 0));
        let tb = &t[&(b as u32)];
        assert_eq!((tb.halts, tb.won, tb.slept, tb.invalid), (11, 0, 10, 1));
        assert_eq!(
            (tb.slept_ns, tb.won_ns, tb.ipis, tb.exits),
            (500_000, 0, 10, 4)
        );
        let reasons: Vec<(u32, u32, u64)> = (0..EXIT_BUCKETS)
            .flat_map(|k| decode_exits(vm.value(M.exits, k, 0)))
            .collect();
        let mut by: BTreeMap<u32, u64> = BTreeMap::new();
        for (tid, r, n) in &reasons {
            assert_eq!(*tid, b as u32);
            *by.entry(*r).or_default() += n;
        }
        assert_eq!(by, BTreeMap::from([(12, 3), (30, 1)]));
        assert_eq!(stat(&vm, RUNS_WAKEUP), 21);
        assert_eq!(stat(&vm, RUNS_IPI), 20);
        assert_eq!(stat(&vm, RUNS_POLL), 2);
        assert_eq!(stat(&vm, RUNS_EXIT), 4);
        assert_eq!(stat(&vm, LOST_THREAD) + stat(&vm, LOST_EXIT), 0);
    }

    /// The raw programs, given the tracepoints' arguments in their slots, count what the
    /// record programs count from the same events.
    #[test]
    fn the_raw_programs_count_what_the_record_programs_count() {
        let (wf, pf) = (fixture("kvm_vcpu_wakeup"), fixture("kvm_halt_poll_ns"));
        let (w_rec, p_rec) = (
            wakeup(&M, Args::Record(&wf)).unwrap(),
            halt_poll(&M, Args::Record(&pf)).unwrap(),
        );
        let (w_raw, p_raw) = (
            wakeup(&M, Args::Raw).unwrap(),
            halt_poll(&M, Args::Raw).unwrap(),
        );
        // (ns, waited, valid) halts, then (grow, vcpu_id, new, old) window changes.
        let halts = [
            (900u64, 0u64, 1u64),
            (40_000, 1, 1),
            (7, 0, 0),
            (1_200, 0, 1),
        ];
        let polls = [(1u64, 0u64, 20_000u64, 10_000u64), (0, 0, 0, 20_000)];
        let mut rec = vm();
        let mut raw = vm();
        for v in [&mut rec, &mut raw] {
            v.current = (7 << 32) | 4242;
        }
        for (ns, waited, valid) in halts {
            let r = record(&wf, &[("ns", ns), ("waited", waited), ("valid", valid)]);
            assert_eq!(rec.run_record(&w_rec, &r), Ok(1));
            assert_eq!(raw.run(&w_raw, &[ns, waited, valid]), Ok(1));
        }
        for (grow, id, new, old) in polls {
            let r = record(&pf, &[("grow", grow), ("new", new), ("old", old)]);
            assert_eq!(rec.run_record(&p_rec, &r), Ok(1));
            assert_eq!(raw.run(&p_raw, &[grow, id, new, old]), Ok(1));
        }
        let (a, b) = (threads(&rec), threads(&raw));
        assert_eq!(a, b);
        let t = &b[&4242];
        assert_eq!((t.halts, t.won, t.slept, t.invalid), (4, 2, 1, 1));
        assert_eq!(
            (t.won_ns, t.slept_ns, t.grow, t.shrink),
            (2_100, 40_000, 1, 1)
        );
    }

    /// More threads in one bucket than it has ways: the extra one is counted lost, and the
    /// others' counts stay theirs.
    #[test]
    fn a_thread_its_bucket_has_no_room_for_is_counted_lost() {
        let i = ipi(&M);
        let mut vm = vm();
        let target = crate::bpf::asm::bucket(1000, THREAD_BUCKETS);
        let same: Vec<u64> = (1..200_000u32)
            .filter(|t| crate::bpf::asm::bucket(*t, THREAD_BUCKETS) == target)
            .take(THREAD_WAYS as usize + 1)
            .map(u64::from)
            .collect();
        for (k, tid) in same.iter().enumerate() {
            vm.current = *tid;
            for _ in 0..=k {
                vm.run_record(&i, &[0u8; 16]).unwrap();
            }
        }
        let t = threads(&vm);
        assert_eq!(t.len(), THREAD_WAYS as usize);
        for (k, tid) in same.iter().take(THREAD_WAYS as usize).enumerate() {
            assert_eq!(t[&(*tid as u32)].ipis, k as u64 + 1);
        }
        assert_eq!(
            stat(&vm, LOST_THREAD),
            THREAD_WAYS as u64 + 1,
            "the fifth's events"
        );
    }

    #[test]
    fn every_jump_lands_inside_and_every_path_exits() {
        let progs = [
            wakeup(&M, Args::Record(&fixture("kvm_vcpu_wakeup"))).unwrap(),
            wakeup(&M, Args::Raw).unwrap(),
            ipi(&M),
            halt_poll(&M, Args::Record(&fixture("kvm_halt_poll_ns"))).unwrap(),
            halt_poll(&M, Args::Raw).unwrap(),
            exit(&M, &fixture("kvm_exit")).unwrap(),
        ];
        for p in &progs {
            assert_eq!(p.last(), Some(&Insn::exit()));
            for (at, i) in p.iter().enumerate() {
                if i.code & 0x07 == 0x05 && i.code != 0x85 && i.code != 0x95 {
                    let to = at as i64 + 1 + i.off as i64;
                    assert!(to > at as i64 && (to as usize) < p.len());
                }
            }
        }
    }

    #[test]
    fn exit_reasons_are_named_by_the_hosts_isa() {
        let intel = "processor\t: 0\nflags\t\t: fpu vme de vmx ept\n";
        let amd = "processor\t: 0\nflags\t\t: fpu svm npt\n";
        let guest = "processor\t: 0\nflags\t\t: fpu hypervisor\n";
        assert_eq!(Isa::from_cpuinfo(intel), Some(Isa::Vmx));
        assert_eq!(Isa::from_cpuinfo(amd), Some(Isa::Svm));
        assert_eq!(Isa::from_cpuinfo(guest), None);
        assert_eq!(Isa::from_cpuinfo(""), None);
        let name = |isa, r| exit_reason_name(isa, r);
        assert_eq!(name(Isa::Vmx, 12).as_deref(), Some("HLT"));
        assert_eq!(name(Isa::Vmx, 48).as_deref(), Some("EPT_VIOLATION"));
        assert_eq!(name(Isa::Vmx, 5), None, "not a VMX reason");
        assert_eq!(name(Isa::Svm, 0x078).as_deref(), Some("HLT"));
        assert_eq!(name(Isa::Svm, 0x400).as_deref(), Some("NPF"));
        assert_eq!(name(Isa::Svm, 0x013).as_deref(), Some("WRITE_CR3"));
        assert_eq!(name(Isa::Svm, 0x04e).as_deref(), Some("EXCP_14"));
        assert_eq!(name(Isa::Svm, 0x093).as_deref(), Some("CR3_WRITE_TRAP"));
        assert_eq!(name(Isa::Svm, 12), Some("READ_CR12".into()));
        assert_eq!(name(Isa::Svm, 0x0a0), None);
    }

    #[test]
    fn entries_decode_from_their_bytes() {
        let mut b = vec![0u8; THREAD_BUCKET_BYTES];
        let put = |b: &mut [u8], entry: usize, w: usize, v: u64| {
            let at = entry * ENTRY_BYTES + w * 8;
            b[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        };
        put(&mut b, 2, W_TID, 77);
        put(&mut b, 2, W_HALTS, 5);
        put(&mut b, 2, W_WON, 3);
        put(&mut b, 2, W_SLEPT, 2);
        put(&mut b, 2, W_WINDOW, 40_000);
        let d = decode_threads(&b);
        assert_eq!(d.len(), 1, "free entries (tid 0) are none");
        assert_eq!(d[0].0, 77);
        assert_eq!((d[0].1.halts, d[0].1.won, d[0].1.slept), (5, 3, 2));
        assert!(decode_threads(&b[..10]).is_empty());
        let mut e = vec![0u8; EXIT_BUCKET_BYTES];
        e[16..24].copy_from_slice(&((30u64 << 32) | 77).to_ne_bytes());
        e[24..32].copy_from_slice(&9u64.to_ne_bytes());
        assert_eq!(decode_exits(&e), vec![(77, 30, 9)]);
    }

    #[test]
    fn a_vms_total_adds_its_vcpus_and_keeps_exits_unknown_when_any_is() {
        let c = ThreadCounts {
            halts: 4,
            won: 3,
            won_ns: 30,
            slept: 1,
            slept_ns: 100,
            ipis: 4,
            exits: 9,
            ..Default::default()
        };
        let a = KvmEvents::of(&c, BTreeMap::from([(12, 9)]), Ok(()));
        let b = KvmEvents::of(&c, BTreeMap::new(), Err("kvm_exit never fired"));
        assert_eq!(a.poll_window_ns, None, "no change seen: unknown, not 0");
        let t = KvmEvents::total([&a, &a]);
        assert_eq!((t.halts, t.polls_won, t.exits), (8, 6, Some(18)));
        assert_eq!(t.exits_by_reason, Some(BTreeMap::from([(12, 18)])));
        let t = KvmEvents::total([&a, &b]);
        assert_eq!(t.exits, None);
        assert_eq!(t.exits_reason.as_deref(), Some("kvm_exit never fired"));
        assert_eq!(a.mean_sleep_ns(), Some(100.0));
        // The lost polls' bound: the smaller of window x slept and on-CPU less polls won.
        let mut w = a.clone();
        assert_eq!(w.lost_poll_bound_ns(None), None);
        assert_eq!(w.lost_poll_bound_ns(Some(1_000.0)), Some(970.0));
        assert_eq!(
            w.lost_poll_bound_ns(Some(10.0)),
            Some(0.0),
            "never negative"
        );
        w.poll_window_ns = Some(200);
        assert_eq!(w.lost_poll_bound_ns(None), Some(200.0));
        assert_eq!(w.lost_poll_bound_ns(Some(1_000.0)), Some(200.0));
        assert_eq!(a.won_share(), Some(0.75));
        assert_eq!(KvmEvents::default().won_share(), None);
    }
}
