//! The `bpf(2)` system calls cpulab makes (create a map, look an element up, load a program,
//! attach it to a raw tracepoint) and the perf event that carries a tracepoint program. Each
//! takes a zero-filled `union bpf_attr` image; every descriptor returned is owned, so closing it
//! (on drop, or when cpulab ends however it ends) detaches and frees what it holds.

use super::insn::Insn;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub const BPF_MAP_CREATE: libc::c_long = 0;
pub const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
pub const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
pub const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
pub const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;
pub const BPF_MAP_TYPE_HASH: u32 = 1;
pub const BPF_MAP_TYPE_ARRAY: u32 = 2;
pub const BPF_PROG_LOAD: libc::c_long = 5;
pub const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
pub const BPF_MAP_TYPE_RINGBUF: u32 = 27;
pub const BPF_PROG_TYPE_TRACEPOINT: u32 = 5;
pub const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;
pub const BPF_PROG_TYPE_TRACING: u32 = 26;
/// `expected_attach_type` of a BTF-typed raw tracepoint program (`tp_btf`).
pub const BPF_TRACE_RAW_TP: u32 = 23;
pub const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
/// Size given for `union bpf_attr`: larger than every field used, zero beyond them (the
/// kernel accepts a shorter or longer union as long as unknown bytes are zero).
pub const ATTR: usize = 128;

pub fn sys_bpf(cmd: libc::c_long, attr: &mut [u8; ATTR]) -> std::io::Result<i64> {
    // SAFETY: `attr` is a zero-filled `union bpf_attr` image of the size passed, filled for
    // `cmd`; any pointers in it point to buffers the caller keeps alive across the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), ATTR as libc::c_uint) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

pub fn owned(fd: i64) -> OwnedFd {
    // SAFETY: a fresh descriptor the kernel just returned, owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

pub fn put_u32(a: &mut [u8], at: usize, v: u32) {
    a[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}
pub fn put_u64(a: &mut [u8], at: usize, v: u64) {
    a[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

pub fn map_create(
    kind: u32,
    key: u32,
    value: u32,
    entries: u32,
    name: &str,
) -> std::io::Result<OwnedFd> {
    map_create_flags(kind, key, value, entries, name, 0)
}

/// [`map_create`] with `map_flags` (`BPF_F_MMAPABLE`, ...).
pub fn map_create_flags(
    kind: u32,
    key: u32,
    value: u32,
    entries: u32,
    name: &str,
    flags: u32,
) -> std::io::Result<OwnedFd> {
    let mut a = [0u8; ATTR];
    put_u32(&mut a, 0, kind);
    put_u32(&mut a, 4, key);
    put_u32(&mut a, 8, value);
    put_u32(&mut a, 12, entries);
    put_u32(&mut a, 16, flags);
    let n = name.as_bytes();
    a[28..28 + n.len().min(15)].copy_from_slice(&n[..n.len().min(15)]);
    sys_bpf(BPF_MAP_CREATE, &mut a).map(owned)
}

/// Loads a program; `attach_btf_id` (the kernel BTF id of a `btf_trace_<name>` typedef) makes it
/// a BTF-typed raw tracepoint program. On failure the error carries the verifier's log.
pub fn prog_load(
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

/// Attaches `prog` to the raw tracepoint `name` (`BPF_RAW_TRACEPOINT_OPEN`; no name for a
/// BTF-typed program, which names its tracepoint itself): it runs on every CPU until the
/// returned descriptor closes.
pub fn raw_attach(name: Option<&str>, prog: &OwnedFd) -> std::io::Result<OwnedFd> {
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
pub fn attach(id: u64, prog: &OwnedFd) -> std::io::Result<OwnedFd> {
    const ATTR_SIZE: usize = 112;
    let mut attr = [0u8; ATTR_SIZE];
    put_u32(&mut attr, 0, crate::perf_event::TYPE_TRACEPOINT);
    put_u32(&mut attr, 4, ATTR_SIZE as u32);
    put_u64(&mut attr, 8, id);
    put_u64(&mut attr, 40, 1); // disabled
    let fd = crate::perf_event::open(&attr, -1, 0)?;
    crate::perf_event::ioctl(&fd, crate::perf_event::IOC_SET_BPF, prog.as_raw_fd())?;
    Ok(fd)
}

/// Looks `key` up in map `map`, writing its value into `value` (for a per-CPU map: one value
/// per possible CPU, each rounded up to 8 bytes). `ENOENT` when the key is absent.
pub fn map_lookup(map: &OwnedFd, key: &[u8], value: &mut [u8]) -> std::io::Result<()> {
    let mut a = [0u8; ATTR];
    put_u32(&mut a, 0, map.as_raw_fd() as u32);
    put_u64(&mut a, 8, key.as_ptr() as u64);
    put_u64(&mut a, 16, value.as_mut_ptr() as u64);
    sys_bpf(BPF_MAP_LOOKUP_ELEM, &mut a).map(|_| ())
}

/// Sets `key` to `value` in map `map` (created or replaced).
pub fn map_update(map: &OwnedFd, key: &[u8], value: &[u8]) -> std::io::Result<()> {
    let mut a = [0u8; ATTR];
    put_u32(&mut a, 0, map.as_raw_fd() as u32);
    put_u64(&mut a, 8, key.as_ptr() as u64);
    put_u64(&mut a, 16, value.as_ptr() as u64);
    sys_bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(|_| ())
}

/// Removes `key` from hash map `map` (absent already: `ENOENT`).
pub fn map_delete(map: &OwnedFd, key: &[u8]) -> std::io::Result<()> {
    let mut a = [0u8; ATTR];
    put_u32(&mut a, 0, map.as_raw_fd() as u32);
    put_u64(&mut a, 8, key.as_ptr() as u64);
    sys_bpf(BPF_MAP_DELETE_ELEM, &mut a).map(|_| ())
}

/// Every key of hash map `map` with 4-byte keys, as it holds them now (a key removed while
/// walking may end the walk early; the next walk sees the rest).
pub fn map_keys_u32(map: &OwnedFd) -> std::io::Result<Vec<u32>> {
    let mut keys = Vec::new();
    let mut at: Option<u32> = None;
    loop {
        let mut next = 0u32;
        let key = at.unwrap_or(0);
        let mut a = [0u8; ATTR];
        put_u32(&mut a, 0, map.as_raw_fd() as u32);
        // A null key asks for the first one.
        if at.is_some() {
            put_u64(&mut a, 8, &key as *const u32 as u64);
        }
        put_u64(&mut a, 16, &mut next as *mut u32 as u64);
        match sys_bpf(BPF_MAP_GET_NEXT_KEY, &mut a) {
            Ok(_) => {
                keys.push(next);
                at = Some(next);
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(keys),
            Err(e) => return Err(e),
        }
        if keys.len() > 1 << 20 {
            return Ok(keys);
        }
    }
}

const BPF_PROG_GET_NEXT_ID: libc::c_long = 11;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;

/// `BPF_ENABLE_STATS`: the kernel times every BPF program run for as long as the returned
/// descriptor stays open (`BPF_STATS_RUN_TIME`), so closing it (on drop, or however cpulab
/// ends, SIGKILL included) turns the timing off again: nothing is left changed. Needs
/// CAP_SYS_ADMIN.
pub fn enable_stats() -> std::io::Result<OwnedFd> {
    const BPF_ENABLE_STATS: libc::c_long = 32;
    let mut a = [0u8; ATTR];
    put_u32(&mut a, 0, 0); // BPF_STATS_RUN_TIME
    sys_bpf(BPF_ENABLE_STATS, &mut a).map(owned)
}

/// A program's runs and their total run time in ns (`bpf_prog_info.run_cnt`, `run_time_ns`):
/// counted only while statistics are on ([`enable_stats`] or `kernel.bpf_stats_enabled`).
pub fn prog_run_stats(prog: &OwnedFd) -> std::io::Result<(u64, u64)> {
    let mut info = [0u8; 256];
    let mut a = [0u8; ATTR];
    put_u32(&mut a, 0, prog.as_raw_fd() as u32);
    put_u32(&mut a, 4, info.len() as u32);
    put_u64(&mut a, 8, info.as_mut_ptr() as u64);
    sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a)?;
    // The kernel writes back how much of the info it filled: older ones stop before the stats.
    let filled = u32::from_ne_bytes([a[4], a[5], a[6], a[7]]) as usize;
    if filled < 208 {
        return Err(std::io::Error::other(
            "this kernel reports no run statistics for BPF programs",
        ));
    }
    let word = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&info[at..at + 8]);
        u64::from_ne_bytes(b)
    };
    Ok((word(200), word(192)))
}

/// The kernel's id of a loaded program (`bpf_prog_info.id`).
pub fn prog_id(prog: &OwnedFd) -> std::io::Result<u32> {
    let mut info = [0u8; 64];
    let mut a = [0u8; ATTR];
    put_u32(&mut a, 0, prog.as_raw_fd() as u32);
    put_u32(&mut a, 4, info.len() as u32);
    put_u64(&mut a, 8, info.as_mut_ptr() as u64);
    sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a)?;
    Ok(u32::from_ne_bytes([info[4], info[5], info[6], info[7]]))
}

/// The ids of every BPF program loaded on the machine (`BPF_PROG_GET_NEXT_ID`; needs
/// CAP_SYS_ADMIN).
pub fn prog_ids() -> std::io::Result<Vec<u32>> {
    let mut ids = Vec::new();
    let mut at = 0u32;
    loop {
        let mut a = [0u8; ATTR];
        put_u32(&mut a, 0, at);
        match sys_bpf(BPF_PROG_GET_NEXT_ID, &mut a) {
            Ok(_) => {
                at = u32::from_ne_bytes([a[4], a[5], a[6], a[7]]);
                ids.push(at);
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(ids),
            Err(e) => return Err(e),
        }
    }
}

/// A descriptor of loaded program `id` (`BPF_PROG_GET_FD_BY_ID`; needs CAP_SYS_ADMIN).
pub fn prog_by_id(id: u32) -> std::io::Result<OwnedFd> {
    let mut a = [0u8; ATTR];
    put_u32(&mut a, 0, id);
    sys_bpf(BPF_PROG_GET_FD_BY_ID, &mut a).map(owned)
}

/// Whether program `id` is still loaded (`BPF_PROG_GET_FD_BY_ID`; needs CAP_SYS_ADMIN).
pub fn prog_loaded(id: u32) -> std::io::Result<bool> {
    let mut a = [0u8; ATTR];
    put_u32(&mut a, 0, id);
    match sys_bpf(BPF_PROG_GET_FD_BY_ID, &mut a) {
        Ok(fd) => {
            drop(owned(fd));
            Ok(true)
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}
