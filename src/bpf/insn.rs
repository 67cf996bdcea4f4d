//! The eBPF instruction assembler: each instruction cpulab's programs use, encoded as the
//! kernel reads `struct bpf_insn`, and the kernel helper ids they call. No clang, no libbpf:
//! the programs are a few dozen instructions each, built in [`super::programs`].

/// Helper function ids (`enum bpf_func_id`).
pub mod helper {
    pub const MAP_LOOKUP_ELEM: i32 = 1;
    pub const MAP_UPDATE_ELEM: i32 = 2;
    pub const MAP_DELETE_ELEM: i32 = 3;
    pub const KTIME_GET_NS: i32 = 5;
    pub const GET_SMP_PROCESSOR_ID: i32 = 8;
    pub const GET_CURRENT_PID_TGID: i32 = 14;
    /// Inlined by the verifier on 64-bit JITs: a load of `jiffies`, no call.
    pub const JIFFIES64: i32 = 118;
    pub const PROBE_READ_KERNEL: i32 = 113;
    pub const PROBE_READ_KERNEL_STR: i32 = 115;
    pub const RINGBUF_RESERVE: i32 = 131;
    pub const RINGBUF_SUBMIT: i32 = 132;
}
/// `BPF_RB_NO_WAKEUP`: cpulab polls the ring on a timer, so no reader needs waking.
pub const RB_NO_WAKEUP: i32 = 1;

/// One eBPF instruction (`struct bpf_insn`), encoded little-endian as the kernel reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    pub dst: u8,
    pub src: u8,
    pub off: i16,
    pub imm: i32,
}

impl Insn {
    const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Self {
        Self {
            code,
            dst,
            src,
            off,
            imm,
        }
    }
    /// `dst = src` (64-bit).
    pub const fn mov64_reg(dst: u8, src: u8) -> Self {
        Self::new(0xbf, dst, src, 0, 0)
    }
    /// `dst = imm` (64-bit, sign-extended).
    pub const fn mov64_imm(dst: u8, imm: i32) -> Self {
        Self::new(0xb7, dst, 0, 0, imm)
    }
    /// `dst += imm` (64-bit).
    pub const fn add64_imm(dst: u8, imm: i32) -> Self {
        Self::new(0x07, dst, 0, 0, imm)
    }
    /// `dst += src` (64-bit).
    pub const fn add64_reg(dst: u8, src: u8) -> Self {
        Self::new(0x0f, dst, src, 0, 0)
    }
    /// `dst -= src` (64-bit).
    pub const fn sub64_reg(dst: u8, src: u8) -> Self {
        Self::new(0x1f, dst, src, 0, 0)
    }
    /// `dst |= src` (64-bit).
    pub const fn or64_reg(dst: u8, src: u8) -> Self {
        Self::new(0x4f, dst, src, 0, 0)
    }
    /// `dst ^= src` (64-bit).
    pub const fn xor64_reg(dst: u8, src: u8) -> Self {
        Self::new(0xaf, dst, src, 0, 0)
    }
    /// `dst *= src` (64-bit).
    pub const fn mul64_reg(dst: u8, src: u8) -> Self {
        Self::new(0x2f, dst, src, 0, 0)
    }
    /// `dst &= imm` (64-bit).
    pub const fn and64_imm(dst: u8, imm: i32) -> Self {
        Self::new(0x57, dst, 0, 0, imm)
    }
    /// `dst *= imm` (64-bit).
    pub const fn mul64_imm(dst: u8, imm: i32) -> Self {
        Self::new(0x27, dst, 0, 0, imm)
    }
    /// `dst <<= imm` (64-bit).
    pub const fn lsh64_imm(dst: u8, imm: i32) -> Self {
        Self::new(0x67, dst, 0, 0, imm)
    }
    /// `dst >>= imm` (64-bit, logical).
    pub const fn rsh64_imm(dst: u8, imm: i32) -> Self {
        Self::new(0x77, dst, 0, 0, imm)
    }
    /// `if dst != imm goto pc + 1 + off`.
    pub const fn jne_imm(dst: u8, imm: i32, off: i16) -> Self {
        Self::new(0x55, dst, 0, off, imm)
    }
    /// `if dst <= imm goto pc + 1 + off` (unsigned).
    pub const fn jle_imm(dst: u8, imm: i32, off: i16) -> Self {
        Self::new(0xb5, dst, 0, off, imm)
    }
    /// `goto pc + 1 + off`.
    pub const fn ja(off: i16) -> Self {
        Self::new(0x05, 0, 0, off, 0)
    }
    /// `dst = *(u64 *)(src + off)`.
    pub const fn ldx_dw(dst: u8, src: u8, off: i16) -> Self {
        Self::new(0x79, dst, src, off, 0)
    }
    /// `dst = *(u32 *)(src + off)` (zero-extended).
    pub const fn ldx_w(dst: u8, src: u8, off: i16) -> Self {
        Self::new(0x61, dst, src, off, 0)
    }
    /// `dst = *(u16 *)(src + off)` (zero-extended).
    pub const fn ldx_h(dst: u8, src: u8, off: i16) -> Self {
        Self::new(0x69, dst, src, off, 0)
    }
    /// `dst = *(u8 *)(src + off)` (zero-extended).
    pub const fn ldx_b(dst: u8, src: u8, off: i16) -> Self {
        Self::new(0x71, dst, src, off, 0)
    }
    /// A zero-extending load of `size` bytes (1, 2, 4 or 8), `None` for another width.
    pub const fn ldx(size: usize, dst: u8, src: u8, off: i16) -> Option<Self> {
        match size {
            1 => Some(Self::ldx_b(dst, src, off)),
            2 => Some(Self::ldx_h(dst, src, off)),
            4 => Some(Self::ldx_w(dst, src, off)),
            8 => Some(Self::ldx_dw(dst, src, off)),
            _ => None,
        }
    }
    /// `*(u64 *)(dst + off) = src`.
    pub const fn stx_dw(dst: u8, off: i16, src: u8) -> Self {
        Self::new(0x7b, dst, src, off, 0)
    }
    /// `*(u32 *)(dst + off) = src`.
    pub const fn stx_w(dst: u8, off: i16, src: u8) -> Self {
        Self::new(0x63, dst, src, off, 0)
    }
    /// `*(u64 *)(dst + off) = imm` (sign-extended).
    pub const fn st_dw(dst: u8, off: i16, imm: i32) -> Self {
        Self::new(0x7a, dst, 0, off, imm)
    }
    /// `*(u32 *)(dst + off) = imm`.
    pub const fn st_w(dst: u8, off: i16, imm: i32) -> Self {
        Self::new(0x62, dst, 0, off, imm)
    }
    /// `if dst == imm goto pc + 1 + off`.
    pub const fn jeq_imm(dst: u8, imm: i32, off: i16) -> Self {
        Self::new(0x15, dst, 0, off, imm)
    }
    /// `if dst != src goto pc + 1 + off`.
    pub const fn jne_reg(dst: u8, src: u8, off: i16) -> Self {
        Self::new(0x5d, dst, src, off, 0)
    }
    /// `if dst == src goto pc + 1 + off`.
    pub const fn jeq_reg(dst: u8, src: u8, off: i16) -> Self {
        Self::new(0x1d, dst, src, off, 0)
    }
    /// `BPF_CMPXCHG` (with `BPF_FETCH`): the `imm` of an atomic compare-and-exchange.
    pub const CMPXCHG: i32 = 0xf1;
    /// Atomically: `if *(u64 *)(dst + off) == r0 then *(u64 *)(dst + off) = src`; r0 = the
    /// old value either way. A full memory barrier (`BPF_STX | BPF_ATOMIC | BPF_DW`).
    pub const fn cmpxchg_dw(dst: u8, off: i16, src: u8) -> Self {
        Self::new(0xdb, dst, src, off, Self::CMPXCHG)
    }
    /// [`Self::cmpxchg_dw`] on a u32 (compares r0's low half; r0 = the old value,
    /// zero-extended).
    pub const fn cmpxchg_w(dst: u8, off: i16, src: u8) -> Self {
        Self::new(0xc3, dst, src, off, Self::CMPXCHG)
    }
    /// A call of kernel helper `id`: arguments in r1-r5, result in r0, r1-r5 clobbered.
    pub const fn call(id: i32) -> Self {
        Self::new(0x85, 0, 0, 0, id)
    }
    pub const fn exit() -> Self {
        Self::new(0x95, 0, 0, 0, 0)
    }
    /// `dst = map` by descriptor: the two-slot `ld_imm64` with `BPF_PSEUDO_MAP_FD`.
    pub const fn ld_map_fd(dst: u8, fd: i32) -> [Self; 2] {
        [Self::new(0x18, dst, 1, 0, fd), Self::new(0, 0, 0, 0, 0)]
    }

    pub fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = (self.dst & 0x0f) | (self.src << 4);
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_encode_as_the_kernel_reads_them() {
        // From the kernel's own encodings (include/uapi/linux/bpf.h, little-endian): r6 = r1.
        assert_eq!(
            Insn::mov64_reg(6, 1).to_bytes(),
            [0xbf, 0x16, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            Insn::mov64_imm(0, 0).to_bytes(),
            [0xb7, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            Insn::add64_imm(2, -4).to_bytes(),
            [0x07, 0x02, 0, 0, 0xfc, 0xff, 0xff, 0xff]
        );
        assert_eq!(
            Insn::stx_dw(7, 8, 0).to_bytes(),
            [0x7b, 0x07, 8, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            Insn::st_w(10, -4, 3).to_bytes(),
            [0x62, 0x0a, 0xfc, 0xff, 3, 0, 0, 0]
        );
        // BPF_ATOMIC | BPF_DW | BPF_STX, imm BPF_CMPXCHG (0xf0 | BPF_FETCH).
        assert_eq!(
            Insn::cmpxchg_dw(0, 16, 3).to_bytes(),
            [0xdb, 0x30, 16, 0, 0xf1, 0, 0, 0]
        );
        assert_eq!(Insn::cmpxchg_w(4, 0, 7).to_bytes()[..2], [0xc3, 0x74]);
        // BPF_LDX | BPF_MEM | BPF_B and | BPF_H.
        assert_eq!(
            Insn::ldx_b(2, 1, 17).to_bytes(),
            [0x71, 0x12, 17, 0, 0, 0, 0, 0]
        );
        assert_eq!(Insn::ldx(2, 2, 1, 8), Some(Insn::ldx_h(2, 1, 8)));
        assert_eq!(Insn::ldx_h(2, 1, 8).to_bytes()[0], 0x69);
        assert_eq!(Insn::ldx(3, 2, 1, 8), None);
        assert_eq!(Insn::call(131).to_bytes(), [0x85, 0, 0, 0, 131, 0, 0, 0]);
        assert_eq!(Insn::exit().to_bytes(), [0x95, 0, 0, 0, 0, 0, 0, 0]);
        let [a, b] = Insn::ld_map_fd(1, 9);
        assert_eq!(a.to_bytes(), [0x18, 0x11, 0, 0, 9, 0, 0, 0]);
        assert_eq!(b.to_bytes(), [0; 8]);
    }
}
