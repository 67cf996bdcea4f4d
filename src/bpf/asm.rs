//! The assembler cpulab's BPF programs are written with: instructions with named jump targets
//! ([`Asm`]), a per-CPU counter's increment ([`count`]), and the bucket arrays the programs keep
//! per id (a Fibonacci hash of the id picks a bucket of a few ways, each way tagged with its
//! full id and taken by compare-and-exchange from 0: [`bucket`], [`Asm::bucket`],
//! [`Asm::find_way`], [`Asm::claim_way`]). Shared by `watch`'s aggregation and `host`'s KVM
//! programs; what each program does stays with its experiment.

use super::insn::{Insn, helper};

/// The multiplier of [`bucket`] (Fibonacci hashing: 2^32 divided by the golden ratio), so ids
/// with a common stride (every 4096th, or a burst of consecutive forks) spread over the buckets.
pub const HASH: u32 = 0x9e37_79b1;

/// The bucket of `id` among `buckets` (a power of two, at least 2): the top bits of the
/// 32-bit product `id * HASH`. What [`hash_insns`] computes in the kernel.
pub fn bucket(id: u32, buckets: u32) -> u32 {
    id.wrapping_mul(HASH) >> (32 - buckets.trailing_zeros())
}

/// `r1 = bucket(reg, buckets)`: the low 32 bits of the 64-bit product are the 32-bit
/// product, whatever the sign extension of the immediate; their top bits are the bucket.
pub fn hash_insns(reg: u8, buckets: u32) -> [Insn; 4] {
    [
        Insn::mov64_reg(1, reg),
        Insn::mul64_imm(1, HASH as i32),
        Insn::lsh64_imm(1, 32),
        Insn::rsh64_imm(1, 64 - buckets.trailing_zeros() as i32),
    ]
}

/// The stack slot where [`Asm::bucket`] and [`count`] keep their u32 key (so a key there is
/// written again after either).
pub const KEY: i32 = -4;

/// `counts[slot] += 1` in the per-CPU array `counts_fd` (r0-r5 clobbered; r6-r9 kept).
pub fn count(p: &mut Vec<Insn>, counts_fd: i32, slot: u32) {
    p.push(Insn::st_w(10, KEY as i16, slot as i32));
    p.extend(Insn::ld_map_fd(1, counts_fd));
    p.push(Insn::mov64_reg(2, 10));
    p.push(Insn::add64_imm(2, KEY));
    p.push(Insn::call(helper::MAP_LOOKUP_ELEM));
    p.push(Insn::jeq_imm(0, 0, 3));
    // The slot is this CPU's and the program cannot be preempted: a plain add is exact.
    p.push(Insn::ldx_dw(1, 0, 0));
    p.push(Insn::add64_imm(1, 1));
    p.push(Insn::stx_dw(0, 0, 1));
}

/// Instructions with named jump targets, patched when the program is finished.
pub struct Asm {
    pub p: Vec<Insn>,
    fixups: Vec<(usize, &'static str)>,
    labels: Vec<(&'static str, usize)>,
}

impl Default for Asm {
    fn default() -> Self {
        Self::new()
    }
}

impl Asm {
    pub fn new() -> Self {
        Self {
            p: Vec::new(),
            fixups: Vec::new(),
            labels: Vec::new(),
        }
    }
    pub fn push(&mut self, i: Insn) {
        self.p.push(i);
    }
    pub fn map(&mut self, dst: u8, fd: i32) {
        self.p.extend(Insn::ld_map_fd(dst, fd));
    }
    /// A jump (its offset patched) to `label`.
    pub fn jump(&mut self, i: Insn, label: &'static str) {
        self.fixups.push((self.p.len(), label));
        self.p.push(i);
    }
    pub fn label(&mut self, name: &'static str) {
        self.labels.push((name, self.p.len()));
    }
    /// `r2 = r10 + off`, the stack address of a key or value.
    pub fn stack_ptr(&mut self, reg: u8, off: i32) {
        self.push(Insn::mov64_reg(reg, 10));
        self.push(Insn::add64_imm(reg, off));
    }
    /// `r0 = lookup(map, r10 + key)`.
    pub fn lookup(&mut self, fd: i32, key: i32) {
        self.map(1, fd);
        self.stack_ptr(2, key);
        self.push(Insn::call(helper::MAP_LOOKUP_ELEM));
    }
    /// `*(u64 *)(base + off) += src`, through `scratch`.
    pub fn add_dw(&mut self, base: u8, off: i16, src: u8, scratch: u8) {
        self.push(Insn::ldx_dw(scratch, base, off));
        self.push(Insn::add64_reg(scratch, src));
        self.push(Insn::stx_dw(base, off, scratch));
    }
    /// `r0 = &array[bucket(reg, buckets)]` (`buckets` a power of two), jumping to
    /// `miss` when none is returned (never, but the verifier asks). Clobbers r1-r5.
    pub fn bucket(&mut self, array: i32, buckets: u32, reg: u8, miss: &'static str) {
        self.p.extend(hash_insns(reg, buckets));
        self.push(Insn::stx_w(10, KEY as i16, 1));
        self.lookup(array, KEY);
        self.jump(Insn::jeq_imm(0, 0, 0), miss);
    }
    /// Jumps to `found` with `dst` = the address of the first of `ways` ways (`stride` bytes
    /// apart) from `bucket` whose u32 at `tag` equals `id`; falls through when none does.
    /// Clobbers r1 (and `dst` only when found).
    pub fn find_way(
        &mut self,
        bucket: u8,
        (ways, stride, tag): (u32, i16, i16),
        id: u8,
        dst: u8,
        found: &'static str,
    ) {
        for w in 0..ways as i16 {
            self.push(Insn::ldx_w(1, bucket, w * stride + tag));
            self.push(Insn::jne_reg(1, id, 3));
            self.push(Insn::mov64_reg(dst, bucket));
            self.push(Insn::add64_imm(dst, i32::from(w * stride)));
            self.jump(Insn::ja(0), found);
        }
    }
    /// Takes the first free way from `bucket`: atomically, its u64 (`dw`) or u32 at `tag`
    /// from 0 to `new`; jumps to `claimed` with `dst` = the way's address, falls through when
    /// every way is taken. Clobbers r0 (and `dst` only when claimed).
    pub fn claim_way(
        &mut self,
        bucket: u8,
        (ways, stride, tag): (u32, i16, i16),
        (dw, new): (bool, u8),
        dst: u8,
        claimed: &'static str,
    ) {
        for w in 0..ways as i16 {
            self.push(Insn::mov64_imm(0, 0));
            self.push(if dw {
                Insn::cmpxchg_dw(bucket, w * stride + tag, new)
            } else {
                Insn::cmpxchg_w(bucket, w * stride + tag, new)
            });
            self.push(Insn::jne_imm(0, 0, 3));
            self.push(Insn::mov64_reg(dst, bucket));
            self.push(Insn::add64_imm(dst, i32::from(w * stride)));
            self.jump(Insn::ja(0), claimed);
        }
    }
    /// The `exit` label: return 0.
    pub fn exit(self) -> Vec<Insn> {
        self.exit_with(0)
    }
    /// The `exit` label: return `ret` (a tracepoint program's 1 lets the kernel pass the event
    /// on to other perf users of the tracepoint).
    pub fn exit_with(mut self, ret: i32) -> Vec<Insn> {
        self.label("exit");
        self.push(Insn::mov64_imm(0, ret));
        self.push(Insn::exit());
        self.finish()
    }
    /// The instructions, every jump patched to its label.
    pub fn finish(mut self) -> Vec<Insn> {
        for (at, label) in &self.fixups {
            // invariant: every label a program jumps to is defined in it (the tests load each).
            let to = self
                .labels
                .iter()
                .find(|(n, _)| n == label)
                .map(|(_, i)| *i)
                .expect("defined label");
            self.p[*at].off = (to as i64 - *at as i64 - 1) as i16;
        }
        self.p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_land_on_their_labels() {
        let mut a = Asm::new();
        a.jump(Insn::jeq_imm(1, 0, 0), "exit");
        a.push(Insn::mov64_imm(0, 7));
        a.jump(Insn::ja(0), "exit");
        a.push(Insn::mov64_imm(0, 8));
        let p = a.exit();
        assert_eq!(
            p[0].off, 3,
            "to the exit label's mov, past three instructions"
        );
        assert_eq!(p[2].off, 1);
        assert_eq!(p[p.len() - 2], Insn::mov64_imm(0, 0));
        assert_eq!(p.last(), Some(&Insn::exit()));
    }

    #[test]
    fn buckets_spread_consecutive_ids_and_stay_in_range() {
        for buckets in [2u32, 256, 4096, 8192] {
            for id in (0..10_000u32).chain([u32::MAX, 4_194_304]) {
                assert!(bucket(id, buckets) < buckets);
            }
        }
        let used: std::collections::BTreeSet<u32> = (1000..1256).map(|i| bucket(i, 256)).collect();
        assert!(used.len() > 150, "{} of 256 buckets", used.len());
    }
}
