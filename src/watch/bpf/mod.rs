//! The BPF mechanism: the same four scheduler tracepoints, read by small eBPF programs that copy
//! each raw record into one BPF ring buffer, instead of perf's per-CPU sample rings.
//!
//! Why: on a KVM guest (kernel 6.18, measured on cpulab's 2-vCPU machine) perf's rings never get
//! the records a tracepoint emits while an idle vCPU is being woken: with PostgreSQL on CPU 0 and
//! `pgbench -c 1` on CPU 1, `perf record` delivered 361 `sched_wakeup` records from CPU 1 in 2 s
//! where a BPF program on the same tracepoint counted 21,360, and the switches out of idle on
//! CPU 1 were missing the same way. Those are the wakeups onto a halted vCPU, the very cost
//! cpulab exists to show; a BPF program attached to the tracepoint sees every one of them.
//!
//! How, with nothing but the kernel: no clang, no libbpf. Each program is a few dozen
//! instructions built here ([`crate::bpf::insn::Insn`]); `bpf(2)` creates two maps (the ring buffer, and a per-CPU
//! array counting every invocation and every record the ring had no room for) and loads the
//! programs; each is attached through a perf tracepoint event (`PERF_EVENT_IOC_SET_BPF`), which
//! runs it for the tracepoint on every CPU. The program returns 1, so other perf users of the
//! same tracepoints (a `perf record -e sched:*` running meanwhile) still get their records;
//! returning 0 would silence them for the window. Either way, while any BPF program is attached
//! to a tracepoint the kernel overwrites the first 8 bytes of the record it passes on (the
//! common type, flags, preempt count and pid) with a pointer: that is kernel behaviour for every
//! BPF tracepoint program (bpftrace's too), and why [`super::events::Decoder::decode_slot`]
//! never reads them.
//! The records carry the raw tracepoint record unchanged, so [`super::events::Decoder`] decodes
//! them exactly as it decodes perf's. Every descriptor is owned here: when cpulab ends, however
//! it ends, the kernel detaches and frees everything (nothing is pinned).

pub mod aggregate;
#[cfg(test)]
mod crosscheck;
pub mod programs;
pub mod ring;
pub mod table;

/// The `bpf(2)` calls, lifted to [`crate::bpf::sys`]; named here too for the callers that
/// reach them through `watch` (the exporter's tests).
pub use crate::bpf::sys;
pub use crate::bpf::{possible_cpus, record_size};

pub use programs::{RAW_BODY, RAW_RECORD, decode_raw, program, raw_program};
pub use ring::{Record, parse_record};

use super::btf::TaskOffsets;
use crate::bpf::sys::*;
use ring::Ring;
use std::os::fd::{AsRawFd, OwnedFd};

/// What the ring carries before each raw record: time (u64), pid_tgid (u64), cpu (u32), event
/// index (u32).
pub const HEADER: usize = 24;
/// The counters' slot for records the ring had no room for (slots 0-3 count invocations of the
/// four programs, in [`super::EVENT_NAMES`] order).
pub const DROPPED_SLOT: u32 = 4;

/// The loaded programs, running from [`Programs::load`] until [`Programs::disable`].
pub struct Programs {
    ring: Ring,
    counts: OwnedFd,
    links: Vec<OwnedFd>,
    _progs: Vec<OwnedFd>,
    _ringbuf: OwnedFd,
    /// How full the ring was at the last drain (0-1): the reader drains sooner when it fills.
    pub last_fill: f64,
    possible_cpus: usize,
    /// Which programs these are.
    pub kind: Kind,
}

/// The kinds of program, cheapest per event first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// BTF-typed raw tracepoint programs (`tp_btf`) reading task fields with plain loads,
    /// writing fixed [`RAW_RECORD`]s (decoded by [`decode_raw`]).
    TypedRaw,
    /// Raw tracepoint programs reading task fields with `bpf_probe_read_kernel`; same records.
    Raw,
    /// Tracepoint programs copying the tracepoint's record (decoded with its tracefs format).
    Tracepoint,
}

impl Kind {
    /// Whether the records are [`RAW_RECORD`]s.
    pub fn raw(self) -> bool {
        self != Kind::Tracepoint
    }
}

/// Bytes of ring buffer: about 80,000 records, 0.4 s of a pair making 60,000 wakeups a second
/// (about 3.5 records each),
/// where the reader drains every 20 ms (and every 2 ms once a drain finds it an eighth full).
pub const RING_BYTES: usize = 8 << 20;

impl Programs {
    /// Loads one program per tracepoint: `events` gives, in slot order, each tracepoint's id
    /// and the size of its raw record.
    pub fn load(events: &[(u64, usize)], possible_cpus: usize) -> std::io::Result<Self> {
        Self::load_each(
            Kind::Tracepoint,
            events.len(),
            possible_cpus,
            |slot, ring, counts| {
                let (id, size) = events[slot as usize];
                let insns = program(ring, counts, slot, size.div_ceil(8) * 8);
                let prog = prog_load(
                    &insns,
                    &format!("cpulab_tp{slot}"),
                    BPF_PROG_TYPE_TRACEPOINT,
                    None,
                )?;
                let link = attach(id, &prog)?;
                Ok((prog, link))
            },
        )
    }

    /// Loads one raw-tracepoint program per scheduler tracepoint (in [`super::EVENT_NAMES`]
    /// order), reading task fields at `offsets`. With `typed` (the kernel BTF ids of the
    /// tracepoints' `btf_trace_<name>` typedefs, same order) they are BTF-typed programs reading
    /// the fields with plain loads, else untyped ones reading them with helper calls. Each runs
    /// from its `BPF_RAW_TRACEPOINT_OPEN` until its descriptor closes.
    pub fn load_raw(
        offsets: &TaskOffsets,
        typed: Option<&[u32; 4]>,
        possible_cpus: usize,
    ) -> std::io::Result<Self> {
        let names = super::EVENT_NAMES;
        let kind = if typed.is_some() {
            Kind::TypedRaw
        } else {
            Kind::Raw
        };
        Self::load_each(kind, names.len(), possible_cpus, |slot, ring, counts| {
            let insns = raw_program(ring, counts, slot, offsets, typed.is_some());
            let prog = match typed {
                Some(ids) => prog_load(
                    &insns,
                    &format!("cpulab_btf{slot}"),
                    BPF_PROG_TYPE_TRACING,
                    Some(ids[slot as usize]),
                )?,
                None => prog_load(
                    &insns,
                    &format!("cpulab_raw{slot}"),
                    BPF_PROG_TYPE_RAW_TRACEPOINT,
                    None,
                )?,
            };
            // A typed program names its tracepoint by its BTF id: the name is left out.
            let link = raw_attach(typed.is_none().then_some(names[slot as usize]), &prog)?;
            Ok((prog, link))
        })
    }

    /// Creates the maps every program writes to (the ring buffer, mapped for reading, and the
    /// per-CPU invocation and drop counters), then loads and attaches `n` programs with `one`,
    /// given the slot and the two maps' descriptors; returns the program and its link.
    fn load_each(
        kind: Kind,
        n: usize,
        possible_cpus: usize,
        mut one: impl FnMut(u32, i32, i32) -> std::io::Result<(OwnedFd, OwnedFd)>,
    ) -> std::io::Result<Self> {
        let ringbuf = map_create(BPF_MAP_TYPE_RINGBUF, 0, 0, RING_BYTES as u32, "cpulab_ring")?;
        let counts = map_create(
            BPF_MAP_TYPE_PERCPU_ARRAY,
            4,
            8,
            DROPPED_SLOT + 1,
            "cpulab_counts",
        )?;
        let ring = Ring::map(&ringbuf, RING_BYTES)?;
        let mut progs = Vec::new();
        let mut links = Vec::new();
        for slot in 0..n as u32 {
            let (prog, link) = one(slot, ringbuf.as_raw_fd(), counts.as_raw_fd())?;
            progs.push(prog);
            links.push(link);
        }
        Ok(Self {
            ring,
            counts,
            links,
            _progs: progs,
            _ringbuf: ringbuf,
            last_fill: 0.0,
            possible_cpus,
            kind,
        })
    }

    /// Nothing to do: a tracepoint's BPF programs run from the moment they are attached
    /// (`PERF_EVENT_IOC_SET_BPF` puts them on the tracepoint itself), whether or not the perf
    /// event carrying them is enabled. Enabling it would only add that event to the per-CPU
    /// list the kernel walks after the program returns, a perf pass per event for nothing (the
    /// event is opened on CPU 0, where it would cost every event fired there).
    pub fn enable(&self) -> std::io::Result<()> {
        Ok(())
    }

    /// Detaches the programs (closing the perf events that carry them): no record is written
    /// after this returns, so a last drain reads exactly what the counters counted.
    pub fn disable(&mut self) {
        self.links.clear();
    }

    /// Reads every committed record.
    pub fn drain(&mut self, mut f: impl FnMut(Record<'_>)) {
        let used = self.ring.drain(|rec| {
            if let Some(r) = parse_record(rec) {
                f(r)
            }
        });
        self.last_fill = used as f64 / RING_BYTES as f64;
    }

    /// Per possible CPU, the five counters: invocations of each program, then drops.
    pub fn counts(&self) -> std::io::Result<Vec<[u64; 5]>> {
        let mut out = vec![[0u64; 5]; self.possible_cpus];
        for slot in 0..=DROPPED_SLOT {
            let key = slot;
            let mut values = vec![0u64; self.possible_cpus];
            let mut a = [0u8; ATTR];
            put_u32(&mut a, 0, self.counts.as_raw_fd() as u32);
            put_u64(&mut a, 8, std::ptr::addr_of!(key) as u64);
            put_u64(&mut a, 16, values.as_mut_ptr() as u64);
            sys_bpf(BPF_MAP_LOOKUP_ELEM, &mut a)?;
            for (cpu, v) in values.iter().enumerate() {
                out[cpu][slot as usize] = *v;
            }
        }
        Ok(out)
    }
}
