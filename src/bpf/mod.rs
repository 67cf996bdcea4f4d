//! BPF and tracefs, from the kernel's own interfaces and nothing else (no clang, no libbpf):
//! what any experiment that runs BPF programs on tracepoints needs, apart from the programs.
//!
//! - [`insn`]: the eBPF instructions, encoded as the kernel reads them, and the helper ids;
//! - [`asm`]: the assembler with named jump targets, per-CPU counters and the bucket arrays of
//!   ids the programs keep;
//! - [`sys`]: the `bpf(2)` calls (maps, loading, attaching to a raw tracepoint or through a perf
//!   tracepoint event) and the programs' run statistics;
//! - [`tracefs`]: tracefs read in place, or mounted in a private mount namespace of one thread
//!   where it is not mounted (no other process sees it, nothing is left behind);
//! - [`format`]: a tracepoint's record layout, parsed from its `format` file;
//! - [`btf`]: what the raw-tracepoint programs need from the kernel's BTF (task offsets, each
//!   tracepoint's arguments);
//! - [`mapped`]: an array map mapped into this process.
//!
//! `watch` (the scheduler's tracepoints) and `host` (KVM's) each write their programs on these.
//! A test-only interpreter (`interp`) runs the programs those build without a kernel.

pub mod asm;
pub mod btf;
pub mod format;
pub mod insn;
#[cfg(test)]
pub(crate) mod interp;
pub mod mapped;
pub mod sys;
pub mod tracefs;

/// The number of possible CPUs, which sizes a per-CPU map's values (`/sys/devices/system/cpu/
/// possible`, a CPU list such as `0-7`).
pub fn possible_cpus(root: &std::path::Path) -> Option<usize> {
    let text = std::fs::read_to_string(root.join("sys/devices/system/cpu/possible")).ok()?;
    let set = crate::cpulist::CpuSet::parse_list(text.trim(), false).ok()?;
    Some(set.iter().max()? as usize + 1)
}

/// The size of a tracepoint's raw record: the end of its last field.
pub fn record_size(f: &format::Format) -> usize {
    f.fields
        .values()
        .map(|x| x.offset + x.size)
        .max()
        .unwrap_or(0)
}
