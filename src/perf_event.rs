//! The one wrapper of `perf_event_open(2)` (neither std nor nix has it), for the three users:
//! per-task counters (`counters::perf`), the tracepoint sample rings (`watch::ring`) and the
//! perf events that carry BPF tracepoint programs (`watch::bpf`).
//!
//! Callers build their own `perf_event_attr` image (its size declared in its second word) and
//! get back an owned descriptor, closed on drop, opened close-on-exec so no child inherits a
//! system-wide event.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `PERF_FLAG_FD_CLOEXEC`.
const FLAG_FD_CLOEXEC: libc::c_ulong = 8;
/// `PERF_EVENT_IOC_ENABLE`.
pub const IOC_ENABLE: libc::c_ulong = 0x2400;
/// `PERF_EVENT_IOC_DISABLE`.
pub const IOC_DISABLE: libc::c_ulong = 0x2401;
/// `PERF_EVENT_IOC_SET_OUTPUT`.
pub const IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
/// `_IOW('$', 6, char *)`: a tracepoint filter string.
pub const IOC_SET_FILTER: libc::c_ulong = 0x4008_2406;
/// `_IOW('$', 8, __u32)`: attach a BPF program to a tracepoint event.
pub const IOC_SET_BPF: libc::c_ulong = 0x4004_2408;

pub const TYPE_HARDWARE: u32 = 0;
pub const TYPE_SOFTWARE: u32 = 1;
pub const TYPE_TRACEPOINT: u32 = 2;

/// Opens the event described by `attr` (a zero-filled `perf_event_attr` image whose `size`
/// field says its length) for task `pid` (-1: every task) on `cpu` (-1: any CPU), with no group.
pub fn open(attr: &[u8], pid: libc::pid_t, cpu: libc::c_int) -> std::io::Result<OwnedFd> {
    debug_assert!(attr.len() >= 64, "PERF_ATTR_SIZE_VER0 is the smallest attr");
    // SAFETY: attr is an initialised perf_event_attr image at least as long as the size it
    // declares (callers build it so); the other arguments are plain integers; the returned
    // descriptor is checked before use.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            pid,
            cpu,
            -1 as libc::c_int,
            FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor the kernel just returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// An `ioctl` on a perf event descriptor whose argument is an integer (or a descriptor).
pub fn ioctl(fd: &OwnedFd, request: libc::c_ulong, arg: libc::c_int) -> std::io::Result<()> {
    // SAFETY: a perf event descriptor we own, and a request that takes an integer argument.
    if unsafe { libc::ioctl(fd.as_raw_fd(), request, arg) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Sets a tracepoint filter (`next_comm == "postgres" || ...`), evaluated in the kernel before
/// a record is written.
pub fn set_filter(fd: &OwnedFd, filter: &str) -> std::io::Result<()> {
    let c = std::ffi::CString::new(filter)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: a perf event descriptor we own and a NUL-terminated string that outlives the call.
    if unsafe { libc::ioctl(fd.as_raw_fd(), IOC_SET_FILTER, c.as_ptr()) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A counting event's value: `read(2)` of a descriptor opened with `read_format` 0 is one u64.
pub fn read_count(fd: &OwnedFd) -> Option<u64> {
    let mut buf = [0u8; 8];
    let n = nix::unistd::read(fd, &mut buf).ok()?;
    (n == 8).then(|| u64::from_ne_bytes(buf))
}
