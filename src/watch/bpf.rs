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
//! instructions built here ([`Insn`]); `bpf(2)` creates two maps (the ring buffer, and a per-CPU
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

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use super::btf::TaskOffsets;
use super::events::Event;

/// What the ring carries before each raw record: time (u64), pid_tgid (u64), cpu (u32), event
/// index (u32).
pub const HEADER: usize = 24;
/// The counters' slot for records the ring had no room for (slots 0-3 count invocations of the
/// four programs, in [`super::EVENT_NAMES`] order).
pub const DROPPED_SLOT: u32 = 4;

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
const BPF_MAP_TYPE_RINGBUF: u32 = 27;
const BPF_PROG_TYPE_TRACEPOINT: u32 = 5;
const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;
const BPF_PROG_TYPE_TRACING: u32 = 26;
/// `expected_attach_type` of a BTF-typed raw tracepoint program (`tp_btf`).
const BPF_TRACE_RAW_TP: u32 = 23;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
/// `_IOW('$', 8, __u32)`.
const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;
const PERF_TYPE_TRACEPOINT: u32 = 2;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
/// Size given for `union bpf_attr`: larger than every field used, zero beyond them (the
/// kernel accepts a shorter or longer union as long as unknown bytes are zero).
const ATTR: usize = 128;

/// Helper function ids (`enum bpf_func_id`).
mod helper {
    pub const MAP_LOOKUP_ELEM: i32 = 1;
    pub const KTIME_GET_NS: i32 = 5;
    pub const GET_SMP_PROCESSOR_ID: i32 = 8;
    pub const GET_CURRENT_PID_TGID: i32 = 14;
    pub const PROBE_READ_KERNEL: i32 = 113;
    pub const RINGBUF_RESERVE: i32 = 131;
    pub const RINGBUF_SUBMIT: i32 = 132;
}
/// `BPF_RB_NO_WAKEUP`: cpulab polls the ring on a timer, so no reader needs waking.
const RB_NO_WAKEUP: i32 = 1;

/// One eBPF instruction (`struct bpf_insn`), encoded little-endian as the kernel reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    code: u8,
    dst: u8,
    src: u8,
    off: i16,
    imm: i32,
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
    /// `dst = *(u64 *)(src + off)`.
    pub const fn ldx_dw(dst: u8, src: u8, off: i16) -> Self {
        Self::new(0x79, dst, src, off, 0)
    }
    /// `dst = *(u32 *)(src + off)` (zero-extended).
    pub const fn ldx_w(dst: u8, src: u8, off: i16) -> Self {
        Self::new(0x61, dst, src, off, 0)
    }
    /// `*(u64 *)(dst + off) = src`.
    pub const fn stx_dw(dst: u8, off: i16, src: u8) -> Self {
        Self::new(0x7b, dst, src, off, 0)
    }
    /// `*(u32 *)(dst + off) = src`.
    pub const fn stx_w(dst: u8, off: i16, src: u8) -> Self {
        Self::new(0x63, dst, src, off, 0)
    }
    /// `*(u32 *)(dst + off) = imm`.
    pub const fn st_w(dst: u8, off: i16, imm: i32) -> Self {
        Self::new(0x62, dst, 0, off, imm)
    }
    /// `if dst == imm goto pc + 1 + off`.
    pub const fn jeq_imm(dst: u8, imm: i32, off: i16) -> Self {
        Self::new(0x15, dst, 0, off, imm)
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

/// `counts[slot] += 1` in the per-CPU array `counts_fd` (r0-r5 clobbered; r6-r9 kept).
fn count(p: &mut Vec<Insn>, counts_fd: i32, slot: u32) {
    p.push(Insn::st_w(10, -4, slot as i32));
    p.extend(Insn::ld_map_fd(1, counts_fd));
    p.push(Insn::mov64_reg(2, 10));
    p.push(Insn::add64_imm(2, -4));
    p.push(Insn::call(helper::MAP_LOOKUP_ELEM));
    p.push(Insn::jeq_imm(0, 0, 3));
    // The slot is this CPU's and the program cannot be preempted: a plain add is exact.
    p.push(Insn::ldx_dw(1, 0, 0));
    p.push(Insn::add64_imm(1, 1));
    p.push(Insn::stx_dw(0, 0, 1));
}

/// The program for one tracepoint: count the invocation, reserve `HEADER + record` bytes in the
/// ring (or count a drop), fill the header, copy the raw record (`record` bytes from the
/// context, a multiple of 8), submit. Returns 1: the kernel then passes the event on to any
/// other perf listeners (there are none unless someone else traces these events).
pub fn program(ringbuf_fd: i32, counts_fd: i32, slot: u32, record: usize) -> Vec<Insn> {
    framed(ringbuf_fd, counts_fd, slot, HEADER + record, 1, |p| {
        p.push(Insn::mov64_reg(1, 7));
        p.push(Insn::add64_imm(1, HEADER as i32));
        p.push(Insn::mov64_imm(2, record as i32));
        p.push(Insn::mov64_reg(3, 6));
        // On a failed read the helper zeroes the destination: a zero record decodes to nothing.
        p.push(Insn::call(helper::PROBE_READ_KERNEL));
    })
}

/// What every program does around its own `body`: keep the context in r6, count the
/// invocation in slot `slot`, reserve `bytes` in the ring (or count a drop and return), fill
/// the [`HEADER`] (time, current pid/tgid, CPU, slot) with the record in r7, run `body`, submit
/// without waking the reader, and return `ret`.
fn framed(
    ringbuf_fd: i32,
    counts_fd: i32,
    slot: u32,
    bytes: usize,
    ret: i32,
    body: impl FnOnce(&mut Vec<Insn>),
) -> Vec<Insn> {
    let mut p = vec![Insn::mov64_reg(6, 1)];
    count(&mut p, counts_fd, slot);
    p.extend(Insn::ld_map_fd(1, ringbuf_fd));
    p.push(Insn::mov64_imm(2, bytes as i32));
    p.push(Insn::mov64_imm(3, 0));
    p.push(Insn::call(helper::RINGBUF_RESERVE));
    let null_check = p.len();
    p.push(Insn::jeq_imm(0, 0, 0)); // patched below to jump to the drop path
    p.push(Insn::mov64_reg(7, 0));
    p.push(Insn::call(helper::KTIME_GET_NS));
    p.push(Insn::stx_dw(7, 0, 0));
    p.push(Insn::call(helper::GET_CURRENT_PID_TGID));
    p.push(Insn::stx_dw(7, 8, 0));
    p.push(Insn::call(helper::GET_SMP_PROCESSOR_ID));
    p.push(Insn::stx_w(7, 16, 0));
    p.push(Insn::st_w(7, 20, slot as i32));
    body(&mut p);
    p.push(Insn::mov64_reg(1, 7));
    p.push(Insn::mov64_imm(2, RB_NO_WAKEUP));
    p.push(Insn::call(helper::RINGBUF_SUBMIT));
    p.push(Insn::mov64_imm(0, ret));
    p.push(Insn::exit());
    let drop_at = p.len();
    p[null_check] = Insn::jeq_imm(0, 0, (drop_at - null_check - 1) as i16);
    count(&mut p, counts_fd, DROPPED_SLOT);
    p.push(Insn::mov64_imm(0, ret));
    p.push(Insn::exit());
    p
}

fn sys_bpf(cmd: libc::c_long, attr: &mut [u8; ATTR]) -> std::io::Result<i64> {
    // SAFETY: `attr` is a zero-filled `union bpf_attr` image of the size passed, filled for
    // `cmd`; any pointers in it point to buffers the caller keeps alive across the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), ATTR as libc::c_uint) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn owned(fd: i64) -> OwnedFd {
    // SAFETY: a fresh descriptor the kernel just returned, owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

fn put_u32(a: &mut [u8], at: usize, v: u32) {
    a[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}
fn put_u64(a: &mut [u8], at: usize, v: u64) {
    a[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

fn map_create(
    kind: u32,
    key: u32,
    value: u32,
    entries: u32,
    name: &str,
) -> std::io::Result<OwnedFd> {
    let mut a = [0u8; ATTR];
    put_u32(&mut a, 0, kind);
    put_u32(&mut a, 4, key);
    put_u32(&mut a, 8, value);
    put_u32(&mut a, 12, entries);
    let n = name.as_bytes();
    a[28..28 + n.len().min(15)].copy_from_slice(&n[..n.len().min(15)]);
    sys_bpf(BPF_MAP_CREATE, &mut a).map(owned)
}

/// Loads a program; `attach_btf_id` (the kernel BTF id of a `btf_trace_<name>` typedef) makes it
/// a BTF-typed raw tracepoint program. On failure the error carries the verifier's log.
fn prog_load(
    insns: &[Insn],
    name: &str,
    prog_type: u32,
    attach_btf_id: Option<u32>,
) -> std::io::Result<OwnedFd> {
    let code: Vec<u8> = insns.iter().flat_map(|i| i.to_bytes()).collect();
    let license = c"GPL";
    let mut log = vec![0u8; 64 * 1024];
    let attempt = |log_level: u32, log: &mut [u8]| {
        let mut a = [0u8; ATTR];
        put_u32(&mut a, 0, prog_type);
        put_u32(&mut a, 4, insns.len() as u32);
        put_u64(&mut a, 8, code.as_ptr() as u64);
        put_u64(&mut a, 16, license.as_ptr() as u64);
        put_u32(&mut a, 24, log_level);
        put_u32(&mut a, 28, if log_level > 0 { log.len() as u32 } else { 0 });
        put_u64(
            &mut a,
            32,
            if log_level > 0 {
                log.as_mut_ptr() as u64
            } else {
                0
            },
        );
        let n = name.as_bytes();
        a[48..48 + n.len().min(15)].copy_from_slice(&n[..n.len().min(15)]);
        if let Some(id) = attach_btf_id {
            put_u32(&mut a, 68, BPF_TRACE_RAW_TP); // expected_attach_type
            put_u32(&mut a, 108, id); // attach_btf_id (in vmlinux: attach_btf_obj_fd stays 0)
        }
        sys_bpf(BPF_PROG_LOAD, &mut a).map(owned)
    };
    attempt(0, &mut log).or_else(|e| {
        if e.raw_os_error() == Some(libc::EPERM) {
            return Err(e);
        }
        // Load again with the log on, to say why.
        attempt(1, &mut log).map_err(|e| {
            let text = String::from_utf8_lossy(&log);
            let text = text.trim_end_matches('\0').trim();
            let tail: Vec<&str> = text.lines().rev().take(6).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            std::io::Error::new(e.kind(), format!("{e}; verifier: {}", tail.join(" | ")))
        })
    })
}

/// The fixed record a raw-tracepoint program writes after [`HEADER`]: four u32 words whose
/// meaning depends on the event (see [`decode_raw`]).
pub const RAW_BODY: usize = 16;
/// A raw-tracepoint program's whole record.
pub const RAW_RECORD: usize = HEADER + RAW_BODY;

/// `task->field`, a u32 of the task pointer in argument `arg` of the context (in r6), into the
/// record (in r7) at `at`. `direct`: a plain load, which the verifier checks against the BTF
/// type of the argument (a BTF-typed program) and turns into a load that cannot fault (a bad
/// pointer reads zero); else `bpf_probe_read_kernel`, which zeroes the destination on a failed
/// read (r0-r5 clobbered).
fn read_task_u32(p: &mut Vec<Insn>, arg: i16, field: u32, at: i16, direct: bool) {
    if direct {
        p.push(Insn::ldx_dw(1, 6, arg * 8));
        p.push(Insn::ldx_w(1, 1, field as i16));
        p.push(Insn::stx_w(7, at, 1));
        return;
    }
    p.push(Insn::mov64_reg(1, 7));
    p.push(Insn::add64_imm(1, at as i32));
    p.push(Insn::mov64_imm(2, 4));
    p.push(Insn::ldx_dw(3, 6, arg * 8));
    p.push(Insn::add64_imm(3, field as i32));
    p.push(Insn::call(helper::PROBE_READ_KERNEL));
}

/// `*(u32 *)(record + at) = (u32)args[arg]`.
fn copy_arg_u32(p: &mut Vec<Insn>, arg: i16, at: i16) {
    p.push(Insn::ldx_dw(1, 6, arg * 8));
    p.push(Insn::stx_w(7, at, 1));
}

/// The raw-tracepoint program for event `slot` (in [`super::EVENT_NAMES`] order): count the
/// invocation, reserve a [`RAW_RECORD`] in the ring (or count a drop), fill the header (time,
/// current pid/tgid, CPU, slot) and the body from the tracepoint's arguments (u64s in the
/// context, in the order of this kernel's `TP_PROTO`, checked against its BTF before loading):
/// - waking `(p)`, wakeup `(p)`: `p->pid`, `task_cpu(p)` (the wakee's run queue CPU: the
///   `target_cpu` the `sched_wakeup` tracepoint itself reports), `p->tgid`;
/// - switch `(preempt, prev, next, prev_state)`: `prev->pid`, `next->pid`, `prev_state`,
///   `preempt`;
/// - migrate `(p, dest_cpu)`: `p->pid`, `dest_cpu`, `p->tgid`.
///
/// `direct`: read the task fields with plain loads (a BTF-typed program, `tp_btf`; the helper
/// calls were about 40% of what an untyped program adds per event), else with
/// `bpf_probe_read_kernel`. Raw tracepoint programs return 0 (typed ones must).
pub fn raw_program(
    ringbuf_fd: i32,
    counts_fd: i32,
    slot: u32,
    o: &TaskOffsets,
    direct: bool,
) -> Vec<Insn> {
    let h = HEADER as i16;
    framed(ringbuf_fd, counts_fd, slot, RAW_RECORD, 0, |p| match slot {
        // switch(preempt, prev, next, prev_state)
        1 => {
            read_task_u32(p, 1, o.pid, h, direct);
            read_task_u32(p, 2, o.pid, h + 4, direct);
            copy_arg_u32(p, 3, h + 8);
            copy_arg_u32(p, 0, h + 12);
        }
        // migrate(p, dest_cpu)
        2 => {
            read_task_u32(p, 0, o.pid, h, direct);
            copy_arg_u32(p, 1, h + 4);
            read_task_u32(p, 0, o.tgid, h + 8, direct);
            p.push(Insn::st_w(7, h + 12, 0));
        }
        // waking(p), wakeup(p)
        _ => {
            read_task_u32(p, 0, o.pid, h, direct);
            read_task_u32(p, 0, o.cpu, h + 4, direct);
            read_task_u32(p, 0, o.tgid, h + 8, direct);
            p.push(Insn::st_w(7, h + 12, 0));
        }
    })
}

/// Decodes a raw-tracepoint program's record (see [`raw_program`]) into an event.
pub fn decode_raw(r: &Record<'_>) -> Option<Event> {
    let w = |i: usize| {
        Some(u32::from_ne_bytes(
            r.raw.get(i * 4..i * 4 + 4)?.try_into().ok()?,
        ))
    };
    Some(match r.slot {
        0 => Event::Waking {
            waker_tid: r.tid,
            waker_cpu: r.cpu,
            in_irq: false,
            wakee_tid: w(0)? as i32,
        },
        1 => Event::Switch {
            cpu: r.cpu,
            prev_tid: w(0)? as i32,
            // Preempted (or yielding: a state of TASK_RUNNING), the task stays runnable.
            prev_runnable: w(3)? & 1 != 0 || w(2)? == 0,
            next_tid: w(1)? as i32,
        },
        2 => Event::Migrate {
            tid: w(0)? as i32,
            dest_cpu: w(1)?,
        },
        3 => Event::Wakeup {
            wakee_tid: w(0)? as i32,
            target_cpu: w(1)?,
        },
        _ => return None,
    })
}

/// Attaches `prog` to the raw tracepoint `name` (`BPF_RAW_TRACEPOINT_OPEN`; no name for a
/// BTF-typed program, which names its tracepoint itself): it runs on every CPU until the
/// returned descriptor closes.
fn raw_attach(name: Option<&str>, prog: &OwnedFd) -> std::io::Result<OwnedFd> {
    let cname = name
        .map(std::ffi::CString::new)
        .transpose()
        .map_err(std::io::Error::other)?;
    let mut a = [0u8; ATTR];
    put_u64(&mut a, 0, cname.as_ref().map_or(0, |c| c.as_ptr() as u64));
    put_u32(&mut a, 8, prog.as_raw_fd() as u32);
    sys_bpf(BPF_RAW_TRACEPOINT_OPEN, &mut a).map(owned)
}

/// Opens tracepoint `id` (on CPU 0; a tracepoint's BPF programs run wherever it fires) and
/// attaches `prog`, which runs from then on (the event itself stays disabled).
fn attach(id: u64, prog: &OwnedFd) -> std::io::Result<OwnedFd> {
    const ATTR_SIZE: usize = 112;
    let mut attr = [0u8; ATTR_SIZE];
    put_u32(&mut attr, 0, PERF_TYPE_TRACEPOINT);
    put_u32(&mut attr, 4, ATTR_SIZE as u32);
    put_u64(&mut attr, 8, id);
    put_u64(&mut attr, 40, 1); // disabled
    // SAFETY: attr is a zero-initialised perf_event_attr of the size it declares; the other
    // arguments are plain integers; the returned descriptor is checked before use.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            -1 as libc::pid_t,
            0 as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fd = owned(fd);
    // SAFETY: both descriptors are ours and open; the argument is the program's descriptor.
    if unsafe { libc::ioctl(fd.as_raw_fd(), PERF_EVENT_IOC_SET_BPF, prog.as_raw_fd()) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd)
}

/// The ring buffer mapped for reading: the consumer position (ours to write) and the producer
/// position with the data pages mapped twice, so a record that wraps reads contiguously.
struct Ring {
    consumer: *mut u8,
    producer: *mut u8,
    page: usize,
    size: usize,
}

impl Ring {
    fn map(fd: &OwnedFd, size: usize) -> std::io::Result<Self> {
        let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .map(|p| p as usize)
            .unwrap_or(4096);
        // SAFETY: mapping a ring buffer map's descriptor as the kernel documents it: one
        // writable page for the consumer position at offset 0, and read-only the producer page
        // plus twice the data size at offset `page`. Both mappings are checked and unmapped in
        // Drop.
        unsafe {
            let consumer = libc::mmap(
                std::ptr::null_mut(),
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            );
            if consumer == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            let producer = libc::mmap(
                std::ptr::null_mut(),
                page + 2 * size,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                page as libc::off_t,
            );
            if producer == libc::MAP_FAILED {
                let e = std::io::Error::last_os_error();
                libc::munmap(consumer, page);
                return Err(e);
            }
            Ok(Self {
                consumer: consumer.cast(),
                producer: producer.cast(),
                page,
                size,
            })
        }
    }

    /// Reads every committed record, calling `f` with each one's bytes; returns the bytes used.
    fn drain(&mut self, mut f: impl FnMut(&[u8])) -> usize {
        // SAFETY: both positions are 8-byte aligned u64s at the start of their mapped pages,
        // shared with the kernel, so they are accessed atomically (acquire for what the kernel
        // published, release for what we hand back).
        let (cons_pos, prod_pos) = unsafe {
            (
                &*(self.consumer.cast::<AtomicU64>()),
                &*(self.producer.cast::<AtomicU64>()),
            )
        };
        let start = cons_pos.load(Ordering::Acquire);
        let mut cons = start;
        let prod = prod_pos.load(Ordering::Acquire);
        let mask = (self.size - 1) as u64;
        // SAFETY: the data pages follow the producer page and are mapped twice over, so any
        // offset below `size` plus a record no longer than `size` stays inside the mapping.
        let data =
            unsafe { std::slice::from_raw_parts(self.producer.add(self.page), 2 * self.size) };
        while cons < prod {
            let at = (cons & mask) as usize;
            // SAFETY: the record header is an aligned u32 inside the mapping; its length word
            // is written by the kernel when it commits, hence the atomic acquire load.
            let len_word =
                unsafe { &*(data.as_ptr().add(at).cast::<std::sync::atomic::AtomicU32>()) }
                    .load(Ordering::Acquire);
            if len_word & (1 << 31) != 0 {
                break; // reserved, not yet committed
            }
            let len = (len_word & !(3 << 30)) as usize;
            if len_word & (1 << 30) == 0
                && let Some(rec) = data.get(at + 8..at + 8 + len)
            {
                f(rec);
            }
            cons += ((len + 8 + 7) & !7) as u64;
        }
        cons_pos.store(cons, Ordering::Release);
        (cons - start) as usize
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the two mappings made in `map`.
        unsafe {
            libc::munmap(self.consumer.cast(), self.page);
            libc::munmap(self.producer.cast(), self.page + 2 * self.size);
        }
    }
}

/// One record read from the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub time_ns: u64,
    pub tid: i32,
    pub tgid: i32,
    pub cpu: u32,
    pub slot: u32,
    pub raw: &'a [u8],
}

/// Splits one ring record into its header and raw tracepoint record.
pub fn parse_record(rec: &[u8]) -> Option<Record<'_>> {
    let u64_at = |o: usize| Some(u64::from_ne_bytes(rec.get(o..o + 8)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_ne_bytes(rec.get(o..o + 4)?.try_into().ok()?));
    let pid_tgid = u64_at(8)?;
    Some(Record {
        time_ns: u64_at(0)?,
        tid: pid_tgid as u32 as i32,
        tgid: (pid_tgid >> 32) as u32 as i32,
        cpu: u32_at(16)?,
        slot: u32_at(20)?,
        raw: rec.get(HEADER..)?,
    })
}

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

/// The number of possible CPUs, which sizes a per-CPU map's values (`/sys/devices/system/cpu/
/// possible`, a CPU list such as `0-7`).
pub fn possible_cpus(root: &std::path::Path) -> Option<usize> {
    let text = std::fs::read_to_string(root.join("sys/devices/system/cpu/possible")).ok()?;
    let set = crate::cpulist::CpuSet::parse_list(text.trim(), false).ok()?;
    Some(set.iter().max()? as usize + 1)
}

/// The size of a tracepoint's raw record: the end of its last field.
pub fn record_size(f: &super::format::Format) -> usize {
    f.fields
        .values()
        .map(|x| x.offset + x.size)
        .max()
        .unwrap_or(0)
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
        assert_eq!(Insn::call(131).to_bytes(), [0x85, 0, 0, 0, 131, 0, 0, 0]);
        assert_eq!(Insn::exit().to_bytes(), [0x95, 0, 0, 0, 0, 0, 0, 0]);
        let [a, b] = Insn::ld_map_fd(1, 9);
        assert_eq!(a.to_bytes(), [0x18, 0x11, 0, 0, 9, 0, 0, 0]);
        assert_eq!(b.to_bytes(), [0; 8]);
    }

    #[test]
    fn the_reserve_failure_jumps_to_the_drop_count_and_every_path_exits() {
        let p = program(3, 4, 2, 64);
        let at = p
            .iter()
            .position(|i| *i == Insn::call(helper::RINGBUF_RESERVE))
            .unwrap();
        let jump = p[at + 1];
        assert_eq!((jump.code, jump.dst, jump.imm), (0x15, 0, 0));
        let target = at + 2 + jump.off as usize;
        // The drop path starts by storing the drop slot as the key.
        assert_eq!(p[target], Insn::st_w(10, -4, DROPPED_SLOT as i32));
        assert_eq!(p.last(), Some(&Insn::exit()));
        assert_eq!(
            p[target - 1],
            Insn::exit(),
            "the record path ends before the drop path"
        );
        // The reservation holds the header and the record.
        assert_eq!(p[at - 2], Insn::mov64_imm(2, (HEADER + 64) as i32));
    }

    #[test]
    fn a_ring_record_splits_into_header_and_raw_record() {
        let mut rec = Vec::new();
        rec.extend_from_slice(&123_456_789u64.to_ne_bytes());
        rec.extend_from_slice(&(((4242u64) << 32) | 4243).to_ne_bytes());
        rec.extend_from_slice(&1u32.to_ne_bytes());
        rec.extend_from_slice(&2u32.to_ne_bytes());
        rec.extend_from_slice(&[7u8; 16]);
        let r = parse_record(&rec).unwrap();
        assert_eq!(
            (r.time_ns, r.tid, r.tgid, r.cpu, r.slot),
            (123_456_789, 4243, 4242, 1, 2)
        );
        assert_eq!(r.raw, &[7u8; 16]);
        assert_eq!(
            parse_record(&rec[..20]),
            None,
            "a short record is no record"
        );
    }

    fn raw_record(slot: u32, words: [u32; 4]) -> Vec<u8> {
        let mut rec = Vec::new();
        rec.extend_from_slice(&5_000u64.to_ne_bytes());
        rec.extend_from_slice(&((100u64 << 32) | 101).to_ne_bytes());
        rec.extend_from_slice(&1u32.to_ne_bytes());
        rec.extend_from_slice(&slot.to_ne_bytes());
        for w in words {
            rec.extend_from_slice(&w.to_ne_bytes());
        }
        rec
    }

    #[test]
    fn raw_records_decode_into_the_events_the_analysis_reads() {
        let decode = |slot, words| decode_raw(&parse_record(&raw_record(slot, words)).unwrap());
        assert_eq!(
            decode(0, [202, 0, 200, 0]),
            Some(Event::Waking {
                waker_tid: 101,
                waker_cpu: 1,
                in_irq: false,
                wakee_tid: 202
            })
        );
        assert_eq!(
            decode(3, [202, 0, 200, 0]),
            Some(Event::Wakeup {
                wakee_tid: 202,
                target_cpu: 0
            })
        );
        // Blocked (TASK_INTERRUPTIBLE), not preempted: no longer runnable.
        assert_eq!(
            decode(1, [101, 0, 1, 0]),
            Some(Event::Switch {
                cpu: 1,
                prev_tid: 101,
                prev_runnable: false,
                next_tid: 0
            })
        );
        // Preempted in TASK_KILLABLE (0x102 has the bit perf's records use for preemption,
        // which the raw arguments keep apart): runnable because preempted.
        let Some(Event::Switch { prev_runnable, .. }) = decode(1, [101, 7, 0x102, 1]) else {
            panic!("a switch")
        };
        assert!(prev_runnable);
        // Yielded (TASK_RUNNING): stays runnable.
        let Some(Event::Switch { prev_runnable, .. }) = decode(1, [101, 7, 0, 0]) else {
            panic!("a switch")
        };
        assert!(prev_runnable);
        assert_eq!(
            decode(2, [202, 1, 200, 0]),
            Some(Event::Migrate {
                tid: 202,
                dest_cpu: 1
            })
        );
        assert_eq!(decode(9, [0; 4]), None);
        let short = raw_record(3, [0; 4]);
        assert_eq!(
            decode_raw(&parse_record(&short[..HEADER + 4]).unwrap()),
            None
        );
    }

    #[test]
    fn raw_programs_read_each_tracepoints_arguments_in_its_order() {
        let o = TaskOffsets {
            pid: 2464,
            tgid: 2468,
            cpu: 68,
        };
        // switch(preempt, prev, next, prev_state): prev->pid, next->pid, then the two scalars.
        let p = raw_program(3, 4, 1, &o, false);
        let loads: Vec<i16> = p
            .iter()
            .filter(|i| i.code == 0x79 && i.src == 6)
            .map(|i| i.off)
            .collect();
        assert_eq!(loads, [8, 16, 24, 0]);
        // wakeup(p): the task's pid, CPU and tgid, all through the one argument.
        let p = raw_program(3, 4, 3, &o, false);
        let fields: Vec<i32> = p
            .windows(2)
            .filter(|w| w[0].code == 0x79 && w[0].src == 6 && w[1].code == 0x07)
            .map(|w| w[1].imm)
            .collect();
        assert_eq!(fields, [2464, 68, 2468]);
        // The reservation is the fixed record; a failed one counts a drop; both paths exit.
        let at = p
            .iter()
            .position(|i| *i == Insn::call(helper::RINGBUF_RESERVE))
            .unwrap();
        assert_eq!(p[at - 2], Insn::mov64_imm(2, RAW_RECORD as i32));
        let target = at + 2 + p[at + 1].off as usize;
        assert_eq!(p[target], Insn::st_w(10, -4, DROPPED_SLOT as i32));
        assert_eq!(p[target - 1], Insn::exit());
        assert_eq!(p.last(), Some(&Insn::exit()));
        // No store reaches past the record.
        assert!(
            p.iter()
                .filter(|i| (i.code == 0x63 || i.code == 0x62 || i.code == 0x7b) && i.dst == 7)
                .all(|i| (i.off as usize) + 4 <= RAW_RECORD)
        );
    }

    #[test]
    fn typed_programs_load_task_fields_directly() {
        let o = TaskOffsets {
            pid: 2464,
            tgid: 2468,
            cpu: 68,
        };
        for slot in 0..4 {
            let p = raw_program(3, 4, slot, &o, true);
            // No helper reads kernel memory: each field is an argument load then a field load.
            assert!(!p.contains(&Insn::call(helper::PROBE_READ_KERNEL)));
            let direct = p.windows(3).filter(|w| {
                w[0].code == 0x79 && w[0].src == 6 && w[1] == Insn::ldx_w(1, 1, w[1].off)
            });
            let fields: Vec<i16> = direct.map(|w| w[1].off).collect();
            let want: &[i16] = match slot {
                1 => &[2464, 2464],
                2 => &[2464, 2468],
                _ => &[2464, 68, 2468],
            };
            assert_eq!(fields, want, "slot {slot}");
            // Same record as the untyped program: the same stores into it.
            let stores = |p: &[Insn]| -> Vec<i16> {
                p.iter()
                    .filter(|i| (i.code == 0x63 || i.code == 0x62) && i.dst == 7)
                    .map(|i| i.off)
                    .collect()
            };
            let untyped = raw_program(3, 4, slot, &o, false);
            let mut a = stores(&p);
            let mut b = stores(&untyped);
            // The untyped program's helper writes the fields instead of a store.
            b.extend(
                untyped
                    .windows(2)
                    .filter(|w| w[0] == Insn::mov64_reg(1, 7) && w[1].code == 0x07)
                    .map(|w| w[1].imm as i16),
            );
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b, "slot {slot}");
        }
    }
}
