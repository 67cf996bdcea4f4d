//! In-kernel aggregation: programs that count and bucket each watched wakeup in maps, so no
//! per-event record crosses to user space (the way rezolus and ebpf_exporter keep their counts).
//!
//! Two programs on the scheduler's raw tracepoints, and five maps:
//! - `sched_waking(p)`: looks the wakee's process up in `targets` (its [`super::table`] entry:
//!   tgid -> target slot, kept by user space; a miss is skipped, or counted under the `other`
//!   slot when the whole machine is watched). A wakee already on a run queue (`task_struct.on_rq`
//!   set: running, or preempted and still queued) has nothing to wait for: its wakeup is counted
//!   at once, to a busy CPU (the one the task is on), with no latency. Otherwise the program
//!   notes in `pending` (a [`PENDING`] way of the tid's [`pending_bucket`]) when it was woken,
//!   from which CPU, and for which slot.
//! - `sched_switch(prev, next)`: for `next` with a pending wakeup, the wakeup is counted where
//!   it landed: its class is that of (waker's CPU, this CPU) from `classes` (a CPU-pair table
//!   user space fills from `topology`), the destination was idle when `prev` is the idle task
//!   (pid 0: the CPU had nothing to run until the wakee came), and the time since its waking is
//!   the wakeup-to-run latency. The row of [`row_key`] in `rows` gets the wakeup, its
//!   [`bucket_of`] bucket and the latency's sum. A pending wakeup of `prev` was one of a thread
//!   still on its CPU: it ran on, so it counts as a wakeup to a busy CPU with no latency.
//!
//! These are the rules of watch's per-event analysis (`crate::watch::analyze`), which also
//! places a wakeup by the switch-in rather than by `sched_wakeup`. There is no `sched_wakeup`
//! program: everything it could add (the run-queue CPU, that CPU's idleness) is known at the
//! switch-in, and one program fewer on every wakeup of the machine is a part of the cost saved.
//!
//! `rows` and `stats` are per-CPU arrays: each CPU adds to its own copy with plain loads and
//! stores (a program is not preempted), and user space sums the copies when asked. Everything is
//! bounded by construction: `targets` and `pending` are arrays of fixed buckets, `rows` has one
//! row per (slot, class, idle).
//!
//! `pending` is an array of buckets, not a hash map keyed by tid, for cost (the reasons of
//! [`super::table`]: an inlined array look-up where a hash update and delete would take a
//! bucket lock on every wakeup). A tid's wakeup takes a way of its bucket whose tid is 0 by an
//! atomic compare-and-exchange of the tid (so two CPUs never take one way), is placed by the
//! switch-in that finds its tid there, and the way is given back by a second compare-and-exchange
//! (a full barrier: the reads of the way come before it is free again). A reader matches the
//! full tid, so a wakeup is never timed for another thread; a waking that finds every way of
//! its bucket taken by other tids (more than [`PENDING_WAYS`] pending at once in one bucket of
//! [`PENDING_BUCKETS`]) is counted lost in `stats` and not followed.

use super::table::{TARGET_BUCKETS, WAYS};
pub use crate::bpf::asm::hash_insns;
use crate::bpf::asm::{Asm, count};
use crate::bpf::insn::{Insn, helper};
use crate::topology::PlacementClass;
use crate::wakeups::{EXACT_PER_TICK, LATENCY_BOUNDS_NS};

/// The placement classes a wakeup can land in, in row order (`same-cpu` first).
pub const CLASSES: [PlacementClass; 7] = [
    PlacementClass::SameCpu,
    PlacementClass::SmtSibling,
    PlacementClass::SharedL2,
    PlacementClass::SharedLlc,
    PlacementClass::SameNode,
    PlacementClass::CrossPackage,
    PlacementClass::CrossNode,
];
/// Classes per slot in `rows`.
pub const NCLASS: u32 = CLASSES.len() as u32;
/// Latency buckets per row: one per bound of [`LATENCY_BOUNDS_NS`], then one above the last.
pub const BUCKETS: usize = LATENCY_BOUNDS_NS.len() + 1;
/// A row's word holding its wakeup count.
pub const ROW_WAKEUPS: usize = BUCKETS;
/// A row's word holding its latencies' sum, ns.
pub const ROW_SUM: usize = BUCKETS + 1;
/// u64 words per row.
pub const ROW_WORDS: usize = BUCKETS + 2;
/// `stats` slots: program runs, and events that could not be counted.
pub const STAT_SEEN: u32 = 0;
pub const STAT_LOST: u32 = 1;
pub const STATS: u32 = 2;
/// One `pending` way: waking time (u64; 0 while not yet noted, 1 when noted but not timed),
/// waker CPU, slot, the tid (0: the way is free) and the latency's weight (u32 each; 0: not
/// timed).
pub const PENDING: u32 = 24;
/// Ways of a `pending` bucket.
pub const PENDING_WAYS: u32 = 4;
/// Buckets of `pending` (a power of two): 32,768 ways, 768 KiB, as many as the array indexed
/// by tid it replaces. A tid's bucket is [`pending_bucket`].
pub const PENDING_BUCKETS: u32 = 8192;
/// Offsets in a `pending` way.
const P_TIME: i16 = 0;
const P_WAKER: i16 = 8;
const P_SLOT: i16 = 12;
const P_TID: i16 = 16;
const P_WEIGHT: i16 = 20;
/// `targets` buckets: ways, bytes between ways, where a way's id is.
const TARGET_WAY: (u32, i16, i16) = (WAYS, 8, T_TGID);
/// `targets` buckets for a compare-and-exchange of the whole u64 entry.
const TARGET_WAY_WORD: (u32, i16, i16) = (WAYS, 8, 0);
/// `pending` buckets, the same.
const PENDING_WAY: (u32, i16, i16) = (PENDING_WAYS, PENDING as i16, P_TID);
/// Where a `targets` entry keeps its tgid: the low half of the u64 (at byte 0 little-endian).
const T_TGID: i16 = if cfg!(target_endian = "little") { 0 } else { 4 };
/// `sampler`'s one per-CPU value: the tick (jiffies) being counted, target wakeups noted on
/// this CPU in it, and the random state (u64 each).
pub const SAMPLER: u32 = 24;
const S_TICK: i16 = 0;
const S_COUNT: i16 = 8;
const S_RNG: i16 = 16;

/// The `pending` bucket of thread `tid`.
pub fn pending_bucket(tid: u32) -> u32 {
    super::table::bucket(tid, PENDING_BUCKETS)
}

/// The `rows` index of (target slot, class index, destination idle).
pub fn row_key(slot: u32, class: u32, idle: bool) -> u32 {
    (slot * NCLASS + class) * 2 + u32::from(idle)
}

/// Rows for `slots` target slots.
pub fn rows(slots: u32) -> u32 {
    row_key(slots, 0, false)
}

/// The index of `c` in [`CLASSES`] (`unpinned` is no placement: none).
pub fn class_index(c: PlacementClass) -> Option<u32> {
    CLASSES.iter().position(|x| *x == c).map(|i| i as u32)
}

/// The latency bucket of `ns`: the first `i` with `ns <= LATENCY_BOUNDS_NS[i]`, or
/// `LATENCY_BOUNDS_NS.len()` above the last bound. What [`bucket_insns`] computes in the kernel.
pub fn bucket_of(ns: u64) -> usize {
    let v = ns.saturating_sub(1) >> 10;
    let bits = (u64::BITS - v.leading_zeros()) as usize;
    bits.min(BUCKETS - 1)
}

/// The CPU-pair table: entry `waker * ncpu + dest` is the class index of that pair, for every
/// pair of possible CPUs (CPUs the topology does not know are far apart, as `class` says).
pub fn class_table(topology: &crate::topology::Topology, ncpu: u32) -> Vec<u32> {
    let mut t = Vec::with_capacity((ncpu * ncpu) as usize);
    for a in 0..ncpu {
        for b in 0..ncpu {
            // invariant: `class` of two CPUs is never `Unpinned`; far apart if it were.
            t.push(class_index(topology.class(a, b)).unwrap_or(NCLASS - 1));
        }
    }
    t
}

/// Descriptors of the maps the programs use.
#[derive(Clone, Copy, Debug)]
pub struct Maps {
    pub targets: i32,
    /// `--comm` names (16 bytes, zero-padded) to their slots, for [`exec`]; -1 when none.
    pub comms: i32,
    pub pending: i32,
    pub classes: i32,
    pub rows: i32,
    pub stats: i32,
    /// Per-CPU state of the latency sampling ([`SAMPLER`] bytes, one entry).
    pub sampler: i32,
}

/// What the programs are built for.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// Possible CPUs: the `classes` table is `ncpu * ncpu`.
    pub ncpu: u32,
    /// The slot of processes `targets` does not list (the whole machine is watched), or none
    /// (they are not counted).
    pub unmatched: Option<u32>,
    /// Read task fields with plain loads (BTF-typed programs), else `bpf_probe_read_kernel`.
    pub direct: bool,
    /// Latency sampling: 0 or 1 times every wakeup. A power of two `n` times the first
    /// [`EXACT_PER_TICK`] target wakeups of each tick on a CPU (weight 1) and, beyond them, one in
    /// `n` at random (weight `n`): the buckets and the sum add each latency times its weight, an
    /// unbiased estimate of every wakeup's (Horvitz-Thompson). Counts are never sampled. Reading
    /// the clock is most of the programs' cost (an indirect call, a retpoline where the CPU needs
    /// one), so this bounds it where wakeups are many and costs nothing where they are few.
    pub sample: u32,
}

impl Asm {
    /// `dst = the slot` of the `targets` entry at `way`, jumping to `miss` unless the entry
    /// (read whole, one 64-bit load) holds process `reg`. Clobbers r1 and r2.
    fn target_slot(&mut self, way: u8, reg: u8, dst: u8, miss: &'static str) {
        self.push(Insn::ldx_dw(1, way, 0));
        self.push(Insn::mov64_reg(2, 1));
        self.push(Insn::lsh64_imm(2, 32));
        self.push(Insn::rsh64_imm(2, 32));
        self.jump(Insn::jne_reg(2, reg, 0), miss);
        self.push(Insn::rsh64_imm(1, 32));
        self.push(Insn::mov64_reg(dst, 1));
    }
    /// `r3 = slot << 32 | tgid`, a `targets` entry. Clobbers r2.
    fn target_word(&mut self, tgid: u8, slot: u8) {
        self.push(Insn::mov64_reg(3, slot));
        self.push(Insn::lsh64_imm(3, 32));
        self.push(Insn::mov64_reg(2, tgid));
        self.push(Insn::lsh64_imm(2, 32));
        self.push(Insn::rsh64_imm(2, 32));
        self.push(Insn::or64_reg(3, 2));
    }
    /// Gives the `pending` way at `way` back: not pending (time 0), then free (tid 0, by a
    /// compare-and-exchange: a full barrier, so every read of the way comes before another
    /// waking can take it). Clobbers r0 and r1.
    fn release(&mut self, way: u8) {
        self.push(Insn::st_dw(way, P_TIME, 0));
        self.push(Insn::ldx_w(0, way, P_TID));
        self.push(Insn::mov64_imm(1, 0));
        self.push(Insn::cmpxchg_w(way, P_TID, 1));
    }
    /// `r0 = &classes[entry.waker_cpu * ncpu + this CPU]` for the `pending` entry at `entry`,
    /// jumping to `miss` when none is returned. Clobbers r1-r5.
    fn class_of(&mut self, classes: i32, entry: u8, ncpu: u32, miss: &'static str) {
        self.push(Insn::call(helper::GET_SMP_PROCESSOR_ID));
        self.push(Insn::ldx_w(1, entry, P_WAKER));
        self.push(Insn::mul64_imm(1, ncpu as i32));
        self.push(Insn::add64_reg(1, 0));
        self.push(Insn::stx_w(10, KEY2 as i16, 1));
        self.lookup(classes, KEY2);
        self.jump(Insn::jeq_imm(0, 0, 0), miss);
    }
    /// `dst = (u32) task->field` for the task pointer in argument `arg` of the context (r6).
    fn task_u32(&mut self, arg: i16, field: u32, dst: u8, direct: bool) {
        if direct {
            self.push(Insn::ldx_dw(dst, 6, arg * 8));
            self.push(Insn::ldx_w(dst, dst, field as i16));
            return;
        }
        self.stack_ptr(1, SCRATCH);
        self.push(Insn::mov64_imm(2, 4));
        self.push(Insn::ldx_dw(3, 6, arg * 8));
        self.push(Insn::add64_imm(3, field as i32));
        // A failed read zeroes the scratch: pid 0, which no target and no pending wakeup has.
        self.push(Insn::call(helper::PROBE_READ_KERNEL));
        self.push(Insn::ldx_w(dst, 10, SCRATCH as i16));
    }
}

/// Stack slots (below [`crate::bpf::asm::KEY`], the u32 key of `pending` or `targets` where [`count`] keeps its
/// key too, so it is written again after a count): a second u32 key, probe scratch.
const KEY2: i32 = -8;
const SCRATCH: i32 = -16;
/// The 16-byte command name of [`exec`] (below the keys and scratch).
const COMM: i32 = -32;

/// `r1 = bucket_of(r9)`, clobbering r2 and r3 (see [`bucket_of`]: the bit length of
/// `(ns - 1) >> 10`, found by halving, capped at the overflow bucket).
pub fn bucket_insns() -> Vec<Insn> {
    let mut p = vec![
        Insn::mov64_reg(2, 9),
        Insn::jeq_imm(2, 0, 1),
        Insn::add64_imm(2, -1),
        Insn::rsh64_imm(2, 10),
        Insn::mov64_imm(1, 0),
    ];
    for s in [32, 16, 8, 4, 2, 1] {
        p.push(Insn::mov64_reg(3, 2));
        p.push(Insn::rsh64_imm(3, s));
        p.push(Insn::jeq_imm(3, 0, 2));
        p.push(Insn::mov64_reg(2, 3));
        p.push(Insn::add64_imm(1, s));
    }
    p.push(Insn::add64_reg(1, 2));
    p.push(Insn::jle_imm(1, (BUCKETS - 1) as i32, 1));
    p.push(Insn::mov64_imm(1, (BUCKETS - 1) as i32));
    p
}

/// The `sched_waking(p)` program.
pub fn waking(m: &Maps, l: &Layout, o: &crate::watch::btf::TaskOffsets) -> Vec<Insn> {
    let mut a = Asm::new();
    a.push(Insn::mov64_reg(6, 1));
    count(&mut a.p, m.stats, STAT_SEEN);
    a.task_u32(0, o.tgid, 7, l.direct);
    a.bucket(m.targets, TARGET_BUCKETS, 7, "unmatched");
    a.push(Insn::mov64_reg(9, 0));
    a.find_way(9, TARGET_WAY, 7, 9, "target");
    a.jump(Insn::ja(0), "unmatched");
    a.label("target");
    a.target_slot(9, 7, 8, "unmatched");
    a.jump(Insn::ja(0), "have");
    a.label("unmatched");
    match l.unmatched {
        None => a.jump(Insn::ja(0), "exit"),
        Some(slot) => a.push(Insn::mov64_imm(8, slot as i32)),
    }
    a.label("have");
    if let Some(on_rq) = o.on_rq {
        queued(&mut a, m, l, o, on_rq);
    }
    a.task_u32(0, o.pid, 7, l.direct);
    a.bucket(m.pending, PENDING_BUCKETS, 7, "exit");
    a.push(Insn::mov64_reg(9, 0));
    // The tid's own way (woken again before it ran), else a free one; none: lost.
    a.find_way(9, PENDING_WAY, 7, 9, "take");
    a.claim_way(9, PENDING_WAY, (false, 7), 9, "take");
    count(&mut a.p, m.stats, STAT_LOST);
    a.jump(Insn::ja(0), "exit");
    a.label("take");
    // Not pending while it is written: the time, written last, says it is.
    a.push(Insn::st_dw(9, P_TIME, 0));
    weight(&mut a, m, l);
    a.push(Insn::stx_w(9, P_WEIGHT, 6));
    a.push(Insn::call(helper::GET_SMP_PROCESSOR_ID));
    a.push(Insn::stx_w(9, P_WAKER, 0));
    a.push(Insn::stx_w(9, P_SLOT, 8));
    a.push(Insn::mov64_imm(1, 1));
    a.jump(Insn::jeq_imm(6, 0, 0), "publish");
    a.push(Insn::call(helper::KTIME_GET_NS));
    a.push(Insn::mov64_reg(1, 0));
    a.label("publish");
    // The time last: the switch-in of this tid cannot come before this program ends (the task
    // is enqueued after `sched_waking`); a switch-out of it on another CPU (woken while still
    // switching out) reads the way only once the time is non-zero, and on CPUs that keep
    // stores in order (x86) then reads this waking's waker and slot. A barrier here (an atomic
    // store) cost about 50 ns a waking under load, more than the rest of the noting.
    a.push(Insn::stx_dw(9, P_TIME, 1));
    a.exit()
}

/// The waking's branch for a wakee already on a run queue (`task_struct.on_rq` at `on_rq`
/// non-zero: running, or preempted and still queued): counted at once in the row of (this
/// CPU, the task's CPU), to a busy CPU, with no latency, as the analysis counts it; nothing is
/// noted. The process's slot is in r8; the context in r6.
fn queued(a: &mut Asm, m: &Maps, l: &Layout, o: &crate::watch::btf::TaskOffsets, on_rq: u32) {
    let w = (ROW_WAKEUPS * 8) as i16;
    a.task_u32(0, on_rq, 9, l.direct);
    a.jump(Insn::jeq_imm(9, 0, 0), "sleeping");
    a.task_u32(0, o.cpu, 9, l.direct);
    a.push(Insn::call(helper::GET_SMP_PROCESSOR_ID));
    a.push(Insn::mul64_imm(0, l.ncpu as i32));
    a.push(Insn::add64_reg(0, 9));
    a.push(Insn::stx_w(10, KEY2 as i16, 0));
    a.lookup(m.classes, KEY2);
    a.jump(Insn::jeq_imm(0, 0, 0), "queued_lost");
    a.push(Insn::ldx_w(1, 0, 0));
    a.push(Insn::mov64_reg(2, 8));
    a.push(Insn::mul64_imm(2, NCLASS as i32));
    a.push(Insn::add64_reg(2, 1));
    a.push(Insn::mul64_imm(2, 2));
    a.push(Insn::stx_w(10, KEY2 as i16, 2));
    a.lookup(m.rows, KEY2);
    a.jump(Insn::jeq_imm(0, 0, 0), "queued_lost");
    a.push(Insn::ldx_dw(1, 0, w));
    a.push(Insn::add64_imm(1, 1));
    a.push(Insn::stx_dw(0, w, 1));
    a.jump(Insn::ja(0), "exit");
    a.label("queued_lost");
    count(&mut a.p, m.stats, STAT_LOST);
    a.jump(Insn::ja(0), "exit");
    a.label("sleeping");
}

/// `r6 = the weight` of this wakeup's latency (0: not timed); see [`Layout::sample`].
/// Reads the tid in r7 (the random state's seed). Clobbers r0-r5.
fn weight(a: &mut Asm, m: &Maps, l: &Layout) {
    if l.sample > 1 {
        a.push(Insn::call(helper::JIFFIES64));
        a.push(Insn::mov64_reg(6, 0));
        a.push(Insn::st_w(10, KEY2 as i16, 0));
        a.lookup(m.sampler, KEY2);
        a.jump(Insn::jeq_imm(0, 0, 0), "every");
        // A new tick: its count starts again.
        a.push(Insn::ldx_dw(1, 0, S_TICK));
        a.jump(Insn::jeq_reg(1, 6, 0), "counted");
        a.push(Insn::stx_dw(0, S_TICK, 6));
        a.push(Insn::st_dw(0, S_COUNT, 0));
        a.label("counted");
        a.push(Insn::ldx_dw(1, 0, S_COUNT));
        a.push(Insn::add64_imm(1, 1));
        a.push(Insn::stx_dw(0, S_COUNT, 1));
        a.jump(Insn::jle_imm(1, EXACT_PER_TICK as i32, 0), "every");
        // Beyond them, one in `sample` at random (xorshift64, seeded from the first tid).
        a.push(Insn::ldx_dw(1, 0, S_RNG));
        a.jump(Insn::jne_imm(1, 0, 0), "seeded");
        a.push(Insn::mov64_reg(1, 7));
        a.push(Insn::add64_imm(1, 1));
        a.label("seeded");
        for (shift, left) in [(13, true), (7, false), (17, true)] {
            a.push(Insn::mov64_reg(2, 1));
            a.push(if left {
                Insn::lsh64_imm(2, shift)
            } else {
                Insn::rsh64_imm(2, shift)
            });
            a.push(Insn::xor64_reg(1, 2));
        }
        a.push(Insn::stx_dw(0, S_RNG, 1));
        a.push(Insn::and64_imm(1, (l.sample - 1) as i32));
        a.jump(Insn::jne_imm(1, 0, 0), "untimed");
        a.push(Insn::mov64_imm(6, l.sample as i32));
        a.jump(Insn::ja(0), "weighed");
        a.label("untimed");
        a.push(Insn::mov64_imm(6, 0));
        a.jump(Insn::ja(0), "weighed");
    }
    a.label("every");
    a.push(Insn::mov64_imm(6, 1));
    a.label("weighed");
}

/// The `sched_process_fork(parent, child)` program: a new process whose parent is a target
/// joins its parent's slot at once, so a short-lived child (a PostgreSQL backend, a pingpong
/// responder) is counted from its first wakeup instead of after the next one-second refresh.
/// The refresh stays the authority: it removes what no longer matches (a child that ran
/// `exec` into another command), and counts a child its bucket had no room for when it tries
/// to place it. New threads share their process' entry already.
pub fn fork(m: &Maps, l: &Layout, o: &crate::watch::btf::TaskOffsets) -> Vec<Insn> {
    let mut a = Asm::new();
    a.push(Insn::mov64_reg(6, 1));
    a.task_u32(0, o.tgid, 7, l.direct); // parent
    a.bucket(m.targets, TARGET_BUCKETS, 7, "exit");
    a.push(Insn::mov64_reg(9, 0));
    a.find_way(9, TARGET_WAY, 7, 9, "parent");
    a.jump(Insn::ja(0), "exit");
    a.label("parent");
    a.target_slot(9, 7, 8, "exit");
    a.task_u32(1, o.tgid, 9, l.direct); // child
    a.jump(Insn::jeq_reg(9, 7, 0), "exit");
    a.bucket(m.targets, TARGET_BUCKETS, 9, "exit");
    a.push(Insn::mov64_reg(7, 0));
    // Only into a free entry: what the refresh installed stands, and another process's entry
    // is not taken.
    a.find_way(7, TARGET_WAY, 9, 5, "exit");
    a.target_word(9, 8);
    a.claim_way(7, TARGET_WAY_WORD, (true, 3), 5, "exit");
    a.exit()
}

/// The `sched_process_exec(p, old_pid, bprm)` program: a process that becomes one of the
/// `--comm` names by `exec` joins that name's slot at once (the name is set before the event).
/// Always untyped: it reads the name with `bpf_probe_read_kernel_str` into a zeroed key, so
/// bytes left after the terminator by an older kernel's copy never spoil the match.
/// None when the BTF gave no `task_struct.comm`.
pub fn exec(m: &Maps, o: &crate::watch::btf::TaskOffsets) -> Option<Vec<Insn>> {
    let comm = o.comm?;
    let mut a = Asm::new();
    a.push(Insn::mov64_reg(6, 1));
    for off in [COMM, COMM + 4, COMM + 8, COMM + 12] {
        a.push(Insn::st_w(10, off as i16, 0));
    }
    a.stack_ptr(1, COMM);
    a.push(Insn::mov64_imm(2, 16));
    a.push(Insn::ldx_dw(3, 6, 0));
    a.push(Insn::add64_imm(3, comm as i32));
    a.push(Insn::call(helper::PROBE_READ_KERNEL_STR));
    a.lookup(m.comms, COMM);
    a.jump(Insn::jeq_imm(0, 0, 0), "exit");
    a.push(Insn::ldx_w(8, 0, 0));
    a.task_u32(0, o.tgid, 9, false);
    a.bucket(m.targets, TARGET_BUCKETS, 9, "exit");
    a.push(Insn::mov64_reg(7, 0));
    // The process is this name now: its own entry, or a free one; never another process's.
    a.target_word(9, 8);
    a.find_way(7, TARGET_WAY, 9, 5, "own");
    a.claim_way(7, TARGET_WAY_WORD, (true, 3), 5, "exit");
    a.jump(Insn::ja(0), "exit");
    a.label("own");
    a.push(Insn::stx_dw(5, 0, 3));
    Some(a.exit())
}

/// A `--comm` name as the [`exec`] program's key: its first 15 bytes (what the kernel keeps),
/// zero-padded to 16.
pub fn comm_key(name: &str) -> [u8; 16] {
    let mut k = [0u8; 16];
    let b = name.as_bytes();
    let n = b.len().min(15);
    k[..n].copy_from_slice(&b[..n]);
    k
}

/// The `sched_switch(preempt, prev, next, prev_state)` program.
pub fn switch(m: &Maps, l: &Layout, o: &crate::watch::btf::TaskOffsets) -> Vec<Insn> {
    let w = (ROW_WAKEUPS * 8) as i16;
    let mut a = Asm::new();
    a.push(Insn::mov64_reg(6, 1));
    count(&mut a.p, m.stats, STAT_SEEN);
    a.task_u32(2, o.pid, 7, l.direct); // next
    a.task_u32(1, o.pid, 8, l.direct); // prev
    // A wakeup of `prev` still pending: it was woken while on its CPU and ran on. It counts as
    // a wakeup (to a busy CPU, its own) with no latency: there was nothing to wait for.
    a.jump(Insn::jeq_imm(8, 0, 0), "next");
    a.bucket(m.pending, PENDING_BUCKETS, 8, "next");
    a.push(Insn::mov64_reg(9, 0));
    a.find_way(9, PENDING_WAY, 8, 9, "prev");
    a.jump(Insn::ja(0), "next");
    a.label("prev");
    a.push(Insn::ldx_dw(1, 9, P_TIME));
    a.jump(Insn::jeq_imm(1, 0, 0), "next");
    a.class_of(m.classes, 9, l.ncpu, "prev_lost");
    a.push(Insn::ldx_w(1, 0, 0));
    a.push(Insn::ldx_w(2, 9, P_SLOT));
    a.push(Insn::mul64_imm(2, NCLASS as i32));
    a.push(Insn::add64_reg(2, 1));
    a.push(Insn::mul64_imm(2, 2));
    a.push(Insn::stx_w(10, KEY2 as i16, 2));
    a.lookup(m.rows, KEY2);
    a.jump(Insn::jeq_imm(0, 0, 0), "prev_lost");
    a.push(Insn::ldx_dw(1, 0, w));
    a.push(Insn::add64_imm(1, 1));
    a.push(Insn::stx_dw(0, w, 1));
    a.jump(Insn::ja(0), "prev_done");
    a.label("prev_lost");
    count(&mut a.p, m.stats, STAT_LOST);
    a.label("prev_done");
    a.release(9);
    a.label("next");
    a.jump(Insn::jeq_imm(7, 0, 0), "exit");
    // r6 = destination idle: `prev` is the idle task (the context is not read again).
    a.push(Insn::mov64_imm(6, 0));
    a.push(Insn::jne_imm(8, 0, 1));
    a.push(Insn::mov64_imm(6, 1));
    a.bucket(m.pending, PENDING_BUCKETS, 7, "exit");
    a.push(Insn::mov64_reg(8, 0));
    a.find_way(8, PENDING_WAY, 7, 8, "found");
    a.jump(Insn::ja(0), "exit");
    a.label("found");
    a.push(Insn::ldx_dw(1, 8, P_TIME));
    a.jump(Insn::jeq_imm(1, 0, 0), "exit");
    placed(&mut a, m, l);
    a.exit()
}

/// The switch's count of `next`'s pending wakeup, its way at r8, the destination's idleness in
/// r6: its row gets the wakeup, and when the waking timed it, the latency's bucket and sum
/// (times its weight); then the way is given back. Clobbers r0-r7, r9.
fn placed(a: &mut Asm, m: &Maps, l: &Layout) {
    let w = (ROW_WAKEUPS * 8) as i16;
    // r7 = the class of (waker's CPU, this CPU)
    a.class_of(m.classes, 8, l.ncpu, "lost");
    a.push(Insn::ldx_w(7, 0, 0));
    // r9 = wakeup-to-run latency, when the waking timed it
    a.push(Insn::mov64_imm(9, 0));
    a.push(Insn::ldx_w(1, 8, P_WEIGHT));
    a.jump(Insn::jeq_imm(1, 0, 0), "untimed");
    a.push(Insn::call(helper::KTIME_GET_NS));
    a.push(Insn::ldx_dw(1, 8, P_TIME));
    a.push(Insn::sub64_reg(0, 1));
    a.push(Insn::mov64_reg(9, 0));
    a.label("untimed");
    // rows[row_key(slot, class, idle)]
    a.push(Insn::ldx_w(1, 8, P_SLOT));
    a.push(Insn::mul64_imm(1, NCLASS as i32));
    a.push(Insn::add64_reg(1, 7));
    a.push(Insn::mul64_imm(1, 2));
    a.push(Insn::add64_reg(1, 6));
    a.push(Insn::stx_w(10, KEY2 as i16, 1));
    a.lookup(m.rows, KEY2);
    a.jump(Insn::jeq_imm(0, 0, 0), "lost");
    a.push(Insn::mov64_reg(6, 0));
    // The latency's bucket and the sum get its weight: an estimate of every wakeup's.
    a.push(Insn::ldx_w(4, 8, P_WEIGHT));
    a.jump(Insn::jeq_imm(4, 0, 0), "count");
    for i in bucket_insns() {
        a.push(i);
    }
    a.push(Insn::lsh64_imm(1, 3));
    a.push(Insn::mov64_reg(2, 6));
    a.push(Insn::add64_reg(2, 1));
    a.add_dw(2, 0, 4, 3);
    a.push(Insn::mul64_reg(9, 4));
    a.add_dw(6, (ROW_SUM * 8) as i16, 9, 3);
    a.label("count");
    a.push(Insn::ldx_dw(3, 6, w));
    a.push(Insn::add64_imm(3, 1));
    a.push(Insn::stx_dw(6, w, 3));
    a.jump(Insn::ja(0), "forget");
    a.label("lost");
    count(&mut a.p, m.stats, STAT_LOST);
    a.label("forget");
    a.release(8);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the ALU and jump instructions of `p` (no calls, no memory) from registers `r`.
    fn interpret(p: &[Insn], r: &mut [u64; 11]) {
        let mut pc = 0usize;
        while pc < p.len() {
            let i = p[pc];
            let (d, s) = (i.dst as usize, i.src as usize);
            let imm = i.imm as i64 as u64;
            let mut next = pc + 1;
            let jump = |taken: bool| {
                if taken {
                    (pc as i64 + 1 + i.off as i64) as usize
                } else {
                    pc + 1
                }
            };
            match i.code {
                0xbf => r[d] = r[s],
                0xb7 => r[d] = imm,
                0x07 => r[d] = r[d].wrapping_add(imm),
                0x0f => r[d] = r[d].wrapping_add(r[s]),
                0x1f => r[d] = r[d].wrapping_sub(r[s]),
                0x27 => r[d] = r[d].wrapping_mul(imm),
                0x67 => r[d] <<= i.imm,
                0x77 => r[d] >>= i.imm,
                0x15 => next = jump(r[d] == imm),
                0x55 => next = jump(r[d] != imm),
                0xb5 => next = jump(r[d] <= imm),
                0x05 => next = jump(true),
                c => panic!("opcode {c:#x} not interpreted"),
            }
            pc = next;
        }
    }

    #[test]
    fn buckets_follow_the_exp2_bounds() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 0);
        assert_eq!(bucket_of(1024), 0);
        assert_eq!(bucket_of(1025), 1);
        assert_eq!(bucket_of(2048), 1);
        assert_eq!(bucket_of(2049), 2);
        assert_eq!(bucket_of(1 << 30), 20);
        assert_eq!(
            bucket_of((1 << 30) + 1),
            21,
            "above the last bound: overflow"
        );
        assert_eq!(bucket_of(u64::MAX), 21);
        // Every value lands in the first bucket whose bound holds it.
        for (i, &bound) in LATENCY_BOUNDS_NS.iter().enumerate() {
            assert_eq!(bucket_of(bound), i);
            assert_eq!(bucket_of(bound + 1), i + 1);
        }
    }

    #[test]
    fn the_kernels_bucket_code_agrees_with_bucket_of() {
        let code = bucket_insns();
        let mut values: Vec<u64> = vec![0, 1, 2, 1023, 1024, 1025, u64::MAX, u64::MAX - 1];
        for b in 0..64 {
            let v = 1u64 << b;
            values.extend([v - 1, v, v + 1, v.wrapping_mul(3) / 2]);
        }
        for v in values {
            let mut r = [0u64; 11];
            r[9] = v;
            interpret(&code, &mut r);
            assert_eq!(r[1] as usize, bucket_of(v), "latency {v}");
            assert_eq!(r[9], v, "r9 (the latency) is kept");
        }
    }

    #[test]
    fn row_keys_are_dense_and_distinct() {
        let slots = 3;
        let mut seen = std::collections::BTreeSet::new();
        for slot in 0..slots {
            for class in 0..NCLASS {
                for idle in [false, true] {
                    assert!(seen.insert(row_key(slot, class, idle)));
                }
            }
        }
        assert_eq!(seen.len() as u32, rows(slots));
        assert_eq!(seen.iter().max().copied(), Some(rows(slots) - 1));
        assert_eq!(row_key(1, 0, false), 2 * NCLASS);
    }

    #[test]
    fn the_class_table_reads_the_topology() {
        let root = std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/intel-2s"
        ));
        let topo = crate::topology::Topology::read(root).unwrap();
        let n = topo.online.iter().max().unwrap() + 1;
        let t = class_table(&topo, n);
        assert_eq!(t.len() as u32, n * n);
        for a in 0..n {
            assert_eq!(t[(a * n + a) as usize], 0, "a CPU with itself is same-cpu");
            for b in 0..n {
                let want = class_index(topo.class(a, b)).unwrap();
                assert_eq!(t[(a * n + b) as usize], want);
                assert_eq!(
                    t[(a * n + b) as usize],
                    t[(b * n + a) as usize],
                    "symmetric"
                );
            }
        }
        // Two sockets with SMT: more than one class away.
        let classes: std::collections::BTreeSet<u32> = t.iter().copied().collect();
        assert!(classes.len() >= 3, "{classes:?}");
    }

    #[test]
    fn every_jump_lands_inside_its_program_and_every_path_exits() {
        let m = Maps {
            targets: 3,
            comms: 9,
            pending: 4,
            classes: 5,
            rows: 7,
            stats: 8,
            sampler: 10,
        };
        let o = crate::watch::btf::TaskOffsets {
            pid: 2464,
            tgid: 2468,
            cpu: 68,
            comm: Some(2800),
            on_rq: Some(120),
        };
        for direct in [true, false] {
            for unmatched in [None, Some(16)] {
                for sample in [0, 1, 8] {
                    let l = Layout {
                        ncpu: 4,
                        unmatched,
                        direct,
                        sample,
                    };
                    let w = waking(&m, &l, &o);
                    for p in [&w, &switch(&m, &l, &o), &fork(&m, &l, &o)] {
                        jumps_stay_inside(p);
                        // Direct loads only where asked; the helper otherwise.
                        assert_eq!(p.contains(&Insn::call(helper::PROBE_READ_KERNEL)), !direct);
                    }
                    // The sampler is read only when sampling.
                    assert_eq!(w.contains(&Insn::call(helper::JIFFIES64)), sample > 1);
                }
            }
        }
        let p = exec(&m, &o).unwrap();
        jumps_stay_inside(&p);
        assert!(p.contains(&Insn::call(helper::PROBE_READ_KERNEL_STR)));
    }

    /// The last instruction exits and every jump goes forward to an instruction of `p`.
    fn jumps_stay_inside(p: &[Insn]) {
        assert_eq!(p.last(), Some(&Insn::exit()));
        for (at, i) in p.iter().enumerate() {
            let jumps = i.code & 0x07 == 0x05 && i.code != 0x85 && i.code != 0x95;
            if jumps {
                let to = at as i64 + 1 + i.off as i64;
                assert!(to > at as i64 && (to as usize) < p.len(), "forward, inside");
            }
        }
    }

    #[test]
    fn the_kernels_bucket_of_an_id_is_the_tables() {
        assert!(PENDING_BUCKETS.is_power_of_two() && TARGET_BUCKETS.is_power_of_two());
        let ids = [
            0u32, 1, 2, 4242, 32_767, 32_768, 32_769, 4_194_303, 4_194_304,
        ];
        for buckets in [PENDING_BUCKETS, TARGET_BUCKETS] {
            let code = hash_insns(7, buckets);
            for id in ids.into_iter().chain((0..2_000).map(|k| k * 2_097 + 13)) {
                let mut r = [0u64; 11];
                r[7] = u64::from(id);
                interpret(&code, &mut r);
                assert_eq!(r[1], u64::from(super::super::table::bucket(id, buckets)));
                assert!(r[1] < u64::from(buckets));
            }
        }
        assert_eq!(
            pending_bucket(77),
            super::super::table::bucket(77, PENDING_BUCKETS)
        );
    }

    #[test]
    fn a_comm_key_is_the_kernels_fifteen_bytes_zero_padded() {
        assert_eq!(&comm_key("postgres")[..9], b"postgres\0");
        assert_eq!(comm_key("postgres")[8..], [0; 8]);
        let long = comm_key("a-very-long-command-name");
        assert_eq!(&long[..15], b"a-very-long-com");
        assert_eq!(long[15], 0);
    }
}
