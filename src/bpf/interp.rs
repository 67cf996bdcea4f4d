//! An eBPF interpreter for tests: it runs the very instructions [`super::aggregate`] builds, so
//! the in-kernel aggregation can be checked against watch's per-event analysis on the same
//! events (`super::crosscheck`) without a kernel.
//!
//! It knows exactly the instructions [`super::insn::Insn`] can encode and the helpers cpulab's
//! programs call, and nothing else: an unknown opcode or helper, a read of a register or stack
//! byte never written (what the verifier refuses), an access outside every region, a store into
//! read-only memory, a jump out of the program or more than [`Vm::step_limit`] steps is a
//! [`Fault`] naming the instruction, never a silent zero.
//!
//! Memory is a flat fake address space of regions, region `i` at `(i + 1) << 32`: the 512-byte
//! stack (`r10` points at its end), the context (a raw tracepoint's u64 arguments), whatever
//! the test allocates (fake `task_struct`s, read-only) and each map's values. A map is named in
//! a program by its descriptor (`ld_imm64` with `BPF_PSEUDO_MAP_FD`); per-CPU arrays keep one
//! copy of their values per CPU, and a look-up returns the copy of [`Vm::cpu`].

use super::insn::{Insn, helper};
use std::collections::BTreeMap;

/// What a register holds after `ld_imm64` of map `fd`: a tag no region address can equal.
const MAP_TAG: u64 = 0xffff_0000_0000_0000;
/// The stack the kernel gives every program, bytes.
pub const STACK: usize = 512;
const STACK_REGION: usize = 0;
const CTX_REGION: usize = 1;

/// A program stopped on something the kernel would refuse, or that the interpreter does not
/// know: at instruction `pc`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    pub pc: usize,
    pub what: String,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "eBPF fault at pc {}: {}", self.pc, self.what)
    }
}

/// The map types cpulab's programs use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapKind {
    Array,
    PerCpuArray,
    /// Looked up only (the `--comm` names): entries are put in by the test.
    Hash,
}

struct Map {
    kind: MapKind,
    key_size: u32,
    value_size: u32,
    entries: u32,
    region: usize,
    /// Hash keys, in entry order.
    keys: Vec<Vec<u8>>,
}

impl Map {
    /// Bytes between two values (the kernel rounds array values up to 8).
    fn stride(&self) -> usize {
        (self.value_size as usize).div_ceil(8) * 8
    }
}

struct Region {
    name: String,
    data: Vec<u8>,
    writable: bool,
    /// Per byte, whether it was written (the stack only: the verifier refuses reads of stack
    /// never written).
    init: Option<Vec<bool>>,
}

/// The machine: memory, maps and what the helpers answer for the event being run.
pub struct Vm {
    regions: Vec<Region>,
    maps: BTreeMap<i32, Map>,
    /// CPUs a per-CPU map has copies for.
    pub ncpu: u32,
    /// `bpf_get_smp_processor_id()`.
    pub cpu: u32,
    /// `bpf_ktime_get_ns()`.
    pub time_ns: u64,
    /// `bpf_jiffies64()`.
    pub jiffies: u64,
    /// `bpf_get_current_pid_tgid()`: tgid << 32 | pid of the task the event runs in.
    pub current: u64,
    /// Instructions one run may execute.
    pub step_limit: usize,
}

fn base(region: usize) -> u64 {
    (region as u64 + 1) << 32
}

impl Vm {
    pub fn new(ncpu: u32) -> Self {
        let stack = Region {
            name: "stack".into(),
            data: vec![0; STACK],
            writable: true,
            init: Some(vec![false; STACK]),
        };
        let ctx = Region {
            name: "context".into(),
            data: Vec::new(),
            writable: false,
            init: None,
        };
        Self {
            regions: vec![stack, ctx],
            maps: BTreeMap::new(),
            ncpu,
            cpu: 0,
            time_ns: 0,
            jiffies: 0,
            current: 0,
            step_limit: 10_000,
        }
    }

    /// A new region holding `data`; returns its address.
    pub fn alloc(&mut self, name: &str, data: Vec<u8>, writable: bool) -> u64 {
        self.regions.push(Region {
            name: name.into(),
            data,
            writable,
            init: None,
        });
        base(self.regions.len() - 1)
    }

    /// Overwrites bytes at `addr` (a test changing a fake task it allocated, read-only to the
    /// programs).
    pub fn poke(&mut self, addr: u64, bytes: &[u8]) {
        let (r, off) = self
            .locate(addr, bytes.len())
            .expect("an allocated address");
        self.regions[r].data[off..off + bytes.len()].copy_from_slice(bytes);
    }

    /// Creates map `fd`, its values zeroed.
    pub fn map(&mut self, fd: i32, kind: MapKind, key_size: u32, value_size: u32, entries: u32) {
        assert!(!self.maps.contains_key(&fd), "map {fd} created twice");
        let mut m = Map {
            kind,
            key_size,
            value_size,
            entries,
            region: 0,
            keys: Vec::new(),
        };
        let copies = if kind == MapKind::PerCpuArray {
            self.ncpu as usize
        } else {
            1
        };
        let bytes = copies * entries as usize * m.stride();
        m.region = self.regions.len();
        self.alloc(&format!("map {fd}"), vec![0; bytes], true);
        self.maps.insert(fd, m);
    }

    fn value_offset(&self, fd: i32, index: u32, cpu: u32) -> (usize, usize) {
        let m = &self.maps[&fd];
        assert!(index < m.entries, "map {fd} has no entry {index}");
        let copy = match m.kind {
            MapKind::PerCpuArray => {
                assert!(cpu < self.ncpu, "no CPU {cpu}");
                cpu as usize
            }
            _ => 0,
        };
        let at = (copy * m.entries as usize + index as usize) * m.stride();
        (m.region, at)
    }

    /// The value at `index` of map `fd` (an array's key; a hash map's entry in insertion
    /// order), `cpu`'s copy for a per-CPU array.
    pub fn value(&self, fd: i32, index: u32, cpu: u32) -> &[u8] {
        let (r, at) = self.value_offset(fd, index, cpu);
        let n = self.maps[&fd].value_size as usize;
        &self.regions[r].data[at..at + n]
    }

    /// Writes `bytes` at the start of that value.
    pub fn set_value(&mut self, fd: i32, index: u32, cpu: u32, bytes: &[u8]) {
        let (r, at) = self.value_offset(fd, index, cpu);
        assert!(bytes.len() <= self.maps[&fd].value_size as usize);
        self.regions[r].data[at..at + bytes.len()].copy_from_slice(bytes);
    }

    /// Adds `key` -> `value` to hash map `fd`.
    pub fn hash_insert(&mut self, fd: i32, key: &[u8], value: &[u8]) {
        let m = self.maps.get_mut(&fd).expect("map");
        assert_eq!(m.kind, MapKind::Hash);
        assert_eq!(key.len(), m.key_size as usize);
        assert!((m.keys.len() as u32) < m.entries, "hash map {fd} full");
        m.keys.push(key.to_vec());
        let i = m.keys.len() as u32 - 1;
        self.set_value(fd, i, 0, value);
    }

    /// Word `i` (u64, native order) of a value.
    pub fn word(&self, fd: i32, index: u32, cpu: u32, i: usize) -> u64 {
        let v = self.value(fd, index, cpu);
        u64::from_ne_bytes(v[i * 8..i * 8 + 8].try_into().unwrap())
    }

    fn locate(&self, addr: u64, size: usize) -> Result<(usize, usize), String> {
        let r = (addr >> 32) as usize;
        let off = (addr & 0xffff_ffff) as usize;
        match r
            .checked_sub(1)
            .and_then(|r| self.regions.get(r).map(|x| (r, x)))
        {
            Some((i, reg)) if off + size <= reg.data.len() => Ok((i, off)),
            Some((_, reg)) => Err(format!(
                "{size} bytes at {addr:#x}: outside {} ({} bytes)",
                reg.name,
                reg.data.len()
            )),
            None => Err(format!("{size} bytes at {addr:#x}: no memory there")),
        }
    }

    fn read(&self, addr: u64, size: usize) -> Result<&[u8], String> {
        let (r, off) = self.locate(addr, size)?;
        let reg = &self.regions[r];
        if let Some(init) = &reg.init
            && let Some(i) = (off..off + size).find(|&i| !init[i])
        {
            return Err(format!(
                "read of {} byte {} never written",
                reg.name,
                i as i64 - reg.data.len() as i64
            ));
        }
        Ok(&reg.data[off..off + size])
    }

    fn write(&mut self, addr: u64, bytes: &[u8]) -> Result<(), String> {
        let (r, off) = self.locate(addr, bytes.len())?;
        let reg = &mut self.regions[r];
        if !reg.writable {
            return Err(format!("store into read-only {} at {addr:#x}", reg.name));
        }
        reg.data[off..off + bytes.len()].copy_from_slice(bytes);
        if let Some(init) = &mut reg.init {
            init[off..off + bytes.len()].fill(true);
        }
        Ok(())
    }

    fn load(&self, addr: u64, size: usize) -> Result<u64, String> {
        let b = self.read(addr, size)?;
        let mut w = [0u8; 8];
        w[..size].copy_from_slice(b);
        Ok(u64::from_le_bytes(w))
    }

    fn store(&mut self, addr: u64, size: usize, v: u64) -> Result<(), String> {
        self.write(addr, &v.to_le_bytes()[..size])
    }

    /// Runs `prog` with the context `record` (a tracepoint program's raw record, as bytes).
    pub fn run_record(&mut self, prog: &[Insn], record: &[u8]) -> Result<u64, Fault> {
        let words: Vec<u64> = record
            .chunks(8)
            .map(|c| {
                let mut w = [0u8; 8];
                w[..c.len()].copy_from_slice(c);
                u64::from_le_bytes(w)
            })
            .collect();
        self.run(prog, &words)
    }

    /// Runs `prog` with the context `args` (a raw tracepoint's u64 arguments) at
    /// [`Self::cpu`] and [`Self::time_ns`]; returns r0.
    pub fn run(&mut self, prog: &[Insn], args: &[u64]) -> Result<u64, Fault> {
        self.regions[STACK_REGION].data.fill(0);
        self.regions[STACK_REGION].init = Some(vec![false; STACK]);
        self.regions[CTX_REGION].data = args.iter().flat_map(|a| a.to_le_bytes()).collect();
        let mut r = [0u64; 11];
        let mut set = [false; 11];
        r[1] = base(CTX_REGION);
        r[10] = base(STACK_REGION) + STACK as u64;
        set[1] = true;
        set[10] = true;
        let mut pc = 0usize;
        for _ in 0..self.step_limit {
            let i = *prog.get(pc).ok_or_else(|| Fault {
                pc,
                what: format!("no instruction (the program has {})", prog.len()),
            })?;
            let fault = |what: String| Fault { pc, what };
            let (d, s) = (i.dst as usize, i.src as usize);
            if d > 10 || s > 10 {
                return Err(fault(format!("register r{d} or r{s} does not exist")));
            }
            let get = |reg: usize| {
                if set[reg] {
                    Ok(r[reg])
                } else {
                    Err(fault(format!("r{reg} read before it is written")))
                }
            };
            let imm = i.imm as i64 as u64;
            let off = i.off as i64 as u64;
            let mut next = pc + 1;
            let target = || pc as i64 + 1 + i.off as i64;
            let mut out: Option<u64> = None;
            match i.code {
                // ALU64: dst = dst op src/imm (mov does not read dst).
                0xb7 => out = Some(imm),
                0xbf => out = Some(get(s)?),
                0x07 => out = Some(get(d)?.wrapping_add(imm)),
                0x0f => out = Some(get(d)?.wrapping_add(get(s)?)),
                0x1f => out = Some(get(d)?.wrapping_sub(get(s)?)),
                0x27 => out = Some(get(d)?.wrapping_mul(imm)),
                0x2f => out = Some(get(d)?.wrapping_mul(get(s)?)),
                0x4f => out = Some(get(d)? | get(s)?),
                0x57 => out = Some(get(d)? & imm),
                0xaf => out = Some(get(d)? ^ get(s)?),
                0x67 | 0x77 => {
                    if !(0..64).contains(&i.imm) {
                        return Err(fault(format!("shift by {}", i.imm)));
                    }
                    let v = get(d)?;
                    out = Some(if i.code == 0x67 {
                        v << i.imm
                    } else {
                        v >> i.imm
                    });
                }
                // JMP: conditional on dst against imm or src.
                0x05 | 0x15 | 0x55 | 0xb5 | 0x1d | 0x5d => {
                    let taken = match i.code {
                        0x05 => true,
                        0x15 => get(d)? == imm,
                        0x55 => get(d)? != imm,
                        0xb5 => get(d)? <= imm,
                        0x1d => get(d)? == get(s)?,
                        _ => get(d)? != get(s)?,
                    };
                    if taken {
                        let t = target();
                        if t < 0 || t as usize >= prog.len() {
                            return Err(fault(format!("jump to {t}, outside the program")));
                        }
                        next = t as usize;
                    }
                }
                // LDX, STX, ST.
                0x79 | 0x61 | 0x69 | 0x71 => {
                    let size = match i.code {
                        0x79 => 8,
                        0x61 => 4,
                        0x69 => 2,
                        _ => 1,
                    };
                    let v = self.load(get(s)?.wrapping_add(off), size).map_err(fault)?;
                    out = Some(v);
                }
                0x7b | 0x63 | 0x7a | 0x62 => {
                    let size = if i.code & 0x18 == 0x18 { 8 } else { 4 };
                    let v = if i.code & 0x01 == 0x01 { get(s)? } else { imm };
                    self.store(get(d)?.wrapping_add(off), size, v)
                        .map_err(fault)?;
                }
                // Atomic compare-and-exchange (the only atomic operation insn.rs encodes).
                0xdb | 0xc3 => {
                    if i.imm != Insn::CMPXCHG {
                        return Err(fault(format!("atomic operation {:#x}", i.imm)));
                    }
                    let size = if i.code == 0xdb { 8 } else { 4 };
                    let addr = get(d)?.wrapping_add(off);
                    let expected = if size == 8 {
                        get(0)?
                    } else {
                        get(0)? & 0xffff_ffff
                    };
                    let src = get(s)?;
                    let old = self.load(addr, size).map_err(fault)?;
                    if old == expected {
                        self.store(addr, size, src).map_err(fault)?;
                    }
                    r[0] = old;
                    set[0] = true;
                }
                0x18 => {
                    let second = prog.get(pc + 1).copied();
                    if i.src != 1 || second != Some(Insn::ld_map_fd(0, 0)[1]) {
                        return Err(fault(format!(
                            "ld_imm64 other than a map by descriptor: {i:?} {second:?}"
                        )));
                    }
                    if !self.maps.contains_key(&i.imm) {
                        return Err(fault(format!("no map {}", i.imm)));
                    }
                    out = Some(MAP_TAG | i.imm as u32 as u64);
                    next = pc + 2;
                }
                0x85 => {
                    let args = [get(1), get(2), get(3), get(4), get(5)];
                    r[0] = self.helper(i.imm, &args).map_err(fault)?;
                    set[0] = true;
                    set[1..=5].fill(false);
                }
                0x95 => return get(0),
                c => return Err(fault(format!("opcode {c:#04x} not interpreted"))),
            }
            if let Some(v) = out {
                if d == 10 {
                    return Err(fault("r10 is read-only".into()));
                }
                r[d] = v;
                set[d] = true;
            }
            pc = next;
        }
        Err(Fault {
            pc,
            what: format!("more than {} steps", self.step_limit),
        })
    }

    /// Helper `id` with arguments r1-r5 (each an error when never written: a helper reads only
    /// the ones it takes).
    fn helper(&mut self, id: i32, a: &[Result<u64, Fault>; 5]) -> Result<u64, String> {
        let arg = |i: usize| a[i - 1].clone().map_err(|f| f.what);
        match id {
            helper::MAP_LOOKUP_ELEM => {
                let tag = arg(1)?;
                let fd = (tag & !MAP_TAG) as i32;
                if tag & MAP_TAG != MAP_TAG || !self.maps.contains_key(&fd) {
                    return Err(format!("map_lookup_elem of {tag:#x}, not a map"));
                }
                let m = &self.maps[&fd];
                let key = self.read(arg(2)?, m.key_size as usize)?.to_vec();
                let index = match m.kind {
                    MapKind::Array | MapKind::PerCpuArray => {
                        let k = u32::from_le_bytes(key[..4].try_into().unwrap());
                        (k < m.entries).then_some(k)
                    }
                    MapKind::Hash => m.keys.iter().position(|k| *k == key).map(|i| i as u32),
                };
                Ok(match index {
                    Some(i) => {
                        let (r, at) = self.value_offset(fd, i, self.cpu);
                        base(r) + at as u64
                    }
                    None => 0,
                })
            }
            helper::KTIME_GET_NS => Ok(self.time_ns),
            helper::GET_SMP_PROCESSOR_ID => Ok(u64::from(self.cpu)),
            helper::JIFFIES64 => Ok(self.jiffies),
            helper::GET_CURRENT_PID_TGID => Ok(self.current),
            helper::PROBE_READ_KERNEL => {
                let (dst, size, src) = (arg(1)?, arg(2)? as usize, arg(3)?);
                let bytes = self.read(src, size)?.to_vec();
                self.write(dst, &bytes)?;
                Ok(0)
            }
            helper::PROBE_READ_KERNEL_STR => {
                let (dst, size, src) = (arg(1)?, arg(2)? as usize, arg(3)?);
                if size == 0 {
                    return Err("probe_read_kernel_str of 0 bytes".into());
                }
                let mut bytes = Vec::new();
                while bytes.len() < size - 1 {
                    let b = self.load(src + bytes.len() as u64, 1)? as u8;
                    if b == 0 {
                        break;
                    }
                    bytes.push(b);
                }
                bytes.push(0);
                self.write(dst, &bytes)?;
                Ok(bytes.len() as u64)
            }
            other => Err(format!("helper {other} not interpreted")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(p: &[Insn]) -> Result<u64, Fault> {
        Vm::new(1).run(p, &[])
    }

    #[test]
    fn arithmetic_is_64_bit_and_wraps() {
        let p = [
            Insn::mov64_imm(0, -1), // sign-extended: u64::MAX
            Insn::add64_imm(0, 2),  // wraps to 1
            Insn::mov64_imm(1, 6),
            Insn::mul64_reg(0, 1), // 6
            Insn::mul64_imm(0, 7), // 42
            Insn::mov64_imm(2, 2),
            Insn::sub64_reg(0, 2),  // 40
            Insn::lsh64_imm(0, 60), // 40 << 60 keeps the low 4 bits of 40 (8): 1 << 63
            Insn::rsh64_imm(0, 62), // logical: 2
            Insn::mov64_imm(3, 0x10),
            Insn::or64_reg(0, 3),     // 0x12
            Insn::xor64_reg(0, 3),    // 0x02
            Insn::add64_reg(0, 3),    // 0x12
            Insn::and64_imm(0, 0x1e), // 0x12
            Insn::exit(),
        ];
        assert_eq!(run(&p), Ok(0x12));
        // and with a negative immediate is sign-extended too.
        let p = [
            Insn::mov64_imm(0, -1),
            Insn::and64_imm(0, -16),
            Insn::exit(),
        ];
        assert_eq!(run(&p), Ok(u64::MAX - 15));
    }

    #[test]
    fn jumps_go_where_their_offsets_say() {
        // r0 = r1 == 5 ? 10 : r1 <= 7 ? 20 : 30, for a register loaded with each value.
        let prog = |v: i32| {
            vec![
                Insn::mov64_imm(1, v),
                Insn::mov64_imm(2, 7),
                Insn::jne_imm(1, 5, 2),
                Insn::mov64_imm(0, 10),
                Insn::ja(5),
                Insn::jeq_reg(1, 2, 1), // 7 goes to the 30 arm
                Insn::jle_imm(1, 7, 2),
                Insn::mov64_imm(0, 30),
                Insn::ja(1),
                Insn::mov64_imm(0, 20),
                Insn::jne_reg(1, 2, 0), // a jump of 0 goes to the next instruction
                Insn::exit(),
            ]
        };
        assert_eq!(run(&prog(5)), Ok(10));
        assert_eq!(run(&prog(6)), Ok(20));
        assert_eq!(run(&prog(7)), Ok(30));
        assert_eq!(run(&prog(8)), Ok(30));
        // Unsigned: -1 is not <= 7.
        assert_eq!(run(&prog(-1)), Ok(30));
    }

    /// `counts[key]++` on this CPU's copy, the way every cpulab program counts.
    fn increment(fd: i32, key: i32) -> Vec<Insn> {
        let mut p = vec![Insn::st_w(10, -4, key)];
        p.extend(Insn::ld_map_fd(1, fd));
        p.extend([
            Insn::mov64_reg(2, 10),
            Insn::add64_imm(2, -4),
            Insn::call(helper::MAP_LOOKUP_ELEM),
            Insn::jeq_imm(0, 0, 4),
            Insn::ldx_dw(1, 0, 0),
            Insn::add64_imm(1, 1),
            Insn::stx_dw(0, 0, 1),
            Insn::mov64_imm(0, 1),
            Insn::exit(),
        ]);
        p
    }

    #[test]
    fn a_map_lookup_finds_this_cpus_value_and_misses_past_the_end() {
        let mut vm = Vm::new(2);
        vm.map(7, MapKind::PerCpuArray, 4, 8, 3);
        vm.map(8, MapKind::Array, 4, 8, 3);
        vm.set_value(8, 2, 0, &40u64.to_ne_bytes());
        for (cpu, times) in [(0, 2), (1, 3)] {
            vm.cpu = cpu;
            for _ in 0..times {
                assert_eq!(vm.run(&increment(7, 1), &[]), Ok(1));
                assert_eq!(vm.run(&increment(8, 2), &[]), Ok(1));
            }
        }
        assert_eq!((vm.word(7, 1, 0, 0), vm.word(7, 1, 1, 0)), (2, 3));
        assert_eq!((vm.word(7, 0, 0, 0), vm.word(7, 2, 1, 0)), (0, 0));
        assert_eq!(vm.word(8, 2, 0, 0), 45, "one array, shared by the CPUs");
        // Key 3 of 3 entries: a null pointer, and the program jumps around the update.
        assert_eq!(vm.run(&increment(7, 3), &[]), Ok(0));
    }

    #[test]
    fn a_hash_lookup_matches_the_whole_key() {
        let mut vm = Vm::new(1);
        vm.map(9, MapKind::Hash, 8, 4, 4);
        vm.hash_insert(9, b"postgres", &7u32.to_ne_bytes());
        let lookup = |key: &[u8; 8]| {
            let mut p = vec![
                Insn::mov64_imm(1, i32::from_le_bytes(key[..4].try_into().unwrap())),
                Insn::stx_w(10, -8, 1),
                Insn::mov64_imm(1, i32::from_le_bytes(key[4..].try_into().unwrap())),
                Insn::stx_w(10, -4, 1),
            ];
            p.extend(Insn::ld_map_fd(1, 9));
            p.extend([
                Insn::mov64_reg(2, 10),
                Insn::add64_imm(2, -8),
                Insn::call(helper::MAP_LOOKUP_ELEM),
                Insn::jeq_imm(0, 0, 1),
                Insn::ldx_w(0, 0, 0),
                Insn::exit(),
            ]);
            p
        };
        assert_eq!(vm.run(&lookup(b"postgres"), &[]), Ok(7));
        assert_eq!(vm.run(&lookup(b"postgreS"), &[]), Ok(0));
    }

    #[test]
    fn helpers_read_tasks_and_answer_for_the_event() {
        let mut vm = Vm::new(4);
        let mut task = vec![0u8; 64];
        task[16..20].copy_from_slice(&4242u32.to_le_bytes());
        task[32..38].copy_from_slice(b"pgbenc");
        let t = vm.alloc("task", task, false);
        (vm.cpu, vm.time_ns, vm.jiffies) = (3, 1_000_000_007, 99);
        // r0 = probe_read(task + 16, 4) + cpu + ktime + jiffies, through the stack.
        let p = [
            Insn::mov64_reg(6, 1),
            Insn::mov64_reg(1, 10),
            Insn::add64_imm(1, -8),
            Insn::mov64_imm(2, 4),
            Insn::ldx_dw(3, 6, 0),
            Insn::add64_imm(3, 16),
            Insn::call(helper::PROBE_READ_KERNEL),
            Insn::ldx_w(7, 10, -8),
            Insn::call(helper::GET_SMP_PROCESSOR_ID),
            Insn::add64_reg(7, 0),
            Insn::call(helper::KTIME_GET_NS),
            Insn::add64_reg(7, 0),
            Insn::call(helper::JIFFIES64),
            Insn::add64_reg(7, 0),
            Insn::mov64_reg(0, 7),
            Insn::exit(),
        ];
        assert_eq!(vm.run(&p, &[t]), Ok(4242 + 3 + 1_000_000_007 + 99));
        // A string read stops at the terminator and returns its length with it.
        let str_read = |last: Insn| {
            vec![
                Insn::mov64_reg(6, 1),
                Insn::st_dw(10, -16, 0),
                Insn::st_dw(10, -8, -1),
                Insn::mov64_reg(1, 10),
                Insn::add64_imm(1, -16),
                Insn::mov64_imm(2, 16),
                Insn::ldx_dw(3, 6, 0),
                Insn::add64_imm(3, 32),
                Insn::call(helper::PROBE_READ_KERNEL_STR),
                last,
                Insn::exit(),
            ]
        };
        assert_eq!(vm.run(&str_read(Insn::mov64_reg(0, 0)), &[t]), Ok(7));
        assert_eq!(
            vm.run(&str_read(Insn::ldx_dw(0, 10, -16)), &[t]),
            Ok(u64::from_le_bytes(*b"pgbenc\0\0"))
        );
        // A direct load reads the same memory.
        let p = [Insn::ldx_dw(2, 1, 0), Insn::ldx_w(0, 2, 16), Insn::exit()];
        assert_eq!(vm.run(&p, &[t]), Ok(4242));
    }

    #[test]
    fn a_compare_and_exchange_stores_only_over_the_expected_value() {
        let mut vm = Vm::new(1);
        vm.map(8, MapKind::Array, 4, 16, 1);
        vm.set_value(
            8,
            0,
            0,
            &[7u64.to_ne_bytes(), u64::MAX.to_ne_bytes()].concat(),
        );
        // r0 = cmpxchg(&v[0], r0 = expected, 9): the old value either way.
        let prog = |expected: i32, size_w: bool, off: i16| {
            let mut p = vec![Insn::st_w(10, -4, 0)];
            p.extend(Insn::ld_map_fd(1, 8));
            p.extend([
                Insn::mov64_reg(2, 10),
                Insn::add64_imm(2, -4),
                Insn::call(helper::MAP_LOOKUP_ELEM),
                Insn::jeq_imm(0, 0, 4),
                Insn::mov64_reg(1, 0),
                Insn::mov64_imm(3, 9),
                Insn::mov64_imm(0, expected),
                if size_w {
                    Insn::cmpxchg_w(1, off, 3)
                } else {
                    Insn::cmpxchg_dw(1, off, 3)
                },
                Insn::exit(),
            ]);
            p
        };
        assert_eq!(vm.run(&prog(5, false, 0), &[]), Ok(7), "not 5: kept");
        assert_eq!(vm.word(8, 0, 0, 0), 7);
        assert_eq!(vm.run(&prog(7, false, 0), &[]), Ok(7), "7: swapped");
        assert_eq!(vm.word(8, 0, 0, 0), 9);
        // 32-bit: the low half of r0 against the u32; the old value zero-extended.
        assert_eq!(vm.run(&prog(-1, true, 8), &[]), Ok(0xffff_ffff));
        assert_eq!(vm.word(8, 0, 0, 1), 0xffff_ffff_0000_0009);
        // An atomic operation other than cmpxchg is refused.
        let mut add = Insn::cmpxchg_dw(1, 0, 3);
        add.imm = 0;
        let mut p = prog(7, false, 0);
        let at = p.len() - 2;
        p[at] = add;
        assert!(vm.run(&p, &[]).is_err());
    }

    #[test]
    fn what_the_kernel_would_refuse_is_a_fault_at_its_pc() {
        let pc = |p: &[Insn]| run(p).expect_err("a fault").pc;
        // An opcode insn.rs cannot encode (a 64-bit divide).
        let mut div = Insn::mov64_imm(0, 1);
        div.code = 0x37;
        assert_eq!(pc(&[Insn::mov64_imm(0, 1), div, Insn::exit()]), 1);
        // Past the context's one argument; a store into it.
        let mut vm = Vm::new(1);
        let f = vm.run(&[Insn::ldx_dw(0, 1, 8), Insn::exit()], &[5]);
        assert!(
            f.as_ref().unwrap_err().what.contains("outside context"),
            "{f:?}"
        );
        assert_eq!(vm.run(&[Insn::ldx_dw(0, 1, 0), Insn::exit()], &[5]), Ok(5));
        let f = vm.run(
            &[Insn::st_dw(1, 0, 0), Insn::mov64_imm(0, 0), Insn::exit()],
            &[5],
        );
        assert!(f.unwrap_err().what.contains("read-only"));
        // Below the stack; a stack byte never written; a register never written; r1-r5 after a
        // call; a null pointer.
        assert_eq!(pc(&[Insn::st_dw(10, -520, 0), Insn::exit()]), 0);
        assert_eq!(pc(&[Insn::ldx_w(0, 10, -4), Insn::exit()]), 0);
        assert_eq!(pc(&[Insn::mov64_reg(0, 3), Insn::exit()]), 0);
        assert_eq!(pc(&[Insn::exit()]), 0);
        let p = [
            Insn::mov64_imm(1, 1),
            Insn::call(helper::KTIME_GET_NS),
            Insn::mov64_reg(0, 1),
            Insn::exit(),
        ];
        assert_eq!(pc(&p), 2);
        assert_eq!(
            pc(&[Insn::mov64_imm(1, 0), Insn::ldx_dw(0, 1, 0), Insn::exit()]),
            1
        );
        // An unknown helper, an unknown map, a jump out, falling off the end, a loop.
        assert_eq!(pc(&[Insn::call(helper::RINGBUF_RESERVE), Insn::exit()]), 0);
        let [a, b] = Insn::ld_map_fd(1, 3);
        assert_eq!(pc(&[a, b, Insn::exit()]), 0);
        assert_eq!(pc(&[Insn::ja(5), Insn::exit()]), 0);
        assert_eq!(pc(&[Insn::mov64_imm(0, 0)]), 1);
        let f = run(&[Insn::mov64_imm(0, 0), Insn::ja(-2)]).unwrap_err();
        assert!(f.what.contains("steps"), "{f}");
    }
}
