//! Scheduler tracepoints through perf_event_open, read from per-CPU ring buffers.
//!
//! Why this mechanism: it needs no BTF, no eBPF toolchain and nothing installed beside cpulab,
//! and it works on any kernel since 2.6.32. Each CPU gets one ring buffer; the four tracepoints
//! of that CPU write into it (`PERF_EVENT_IOC_SET_OUTPUT`), so a CPU's records arrive in the
//! order they happened. Records carry the raw tracepoint data, the emitting task, a
//! CLOCK_MONOTONIC timestamp and the CPU (`sample_type` RAW|TID|TIME|CPU). Records the kernel
//! had to drop because cpulab read too slowly come as `PERF_RECORD_LOST` and are counted.
//!
//! [`parse_records`] is pure and tested on bytes; [`Rings`] owns the descriptors and mappings.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const PERF_TYPE_TRACEPOINT: u32 = 2;
const SAMPLE_TID: u64 = 1 << 1;
const SAMPLE_TIME: u64 = 1 << 2;
const SAMPLE_CPU: u64 = 1 << 7;
const SAMPLE_RAW: u64 = 1 << 10;
const RECORD_LOST: u32 = 2;
const RECORD_SAMPLE: u32 = 9;
const IOC_ENABLE: libc::c_ulong = 0x2400;
const IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
const ATTR_SIZE: usize = 120;
/// Ring memory over all CPUs: 32 MiB keeps peak memory well under 50 MB.
const RING_BUDGET_BYTES: usize = 32 << 20;

/// Data pages per CPU: a power of two between 16 and 1024 (4 MiB, about 200 ms of a CPU
/// switching 100,000 times a second), within [`RING_BUDGET_BYTES`] over all CPUs.
pub fn data_pages(cpus: usize, page: usize) -> usize {
    let per_cpu = RING_BUDGET_BYTES / cpus.max(1) / page.max(1);
    let mut n = 16;
    while n * 2 <= per_cpu && n < 1024 {
        n *= 2;
    }
    n
}

/// One record from a ring buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Sample {
        /// Process (tgid) and thread of the task current when the event fired.
        pid: i32,
        tid: i32,
        /// CLOCK_MONOTONIC nanoseconds.
        time_ns: u64,
        cpu: u32,
        raw: Vec<u8>,
    },
    /// The kernel dropped this many records.
    Lost(u64),
}

fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(o..o + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// Parses consecutive perf records (`struct perf_event_header` + body) written with
/// `sample_type` RAW|TID|TIME|CPU. Stops at the first truncated record; other record types
/// are skipped by their size.
pub fn parse_records(bytes: &[u8], out: &mut Vec<Record>) {
    let mut at = 0;
    while at + 8 <= bytes.len() {
        let (Some(ty), Some(size)) = (
            u32_at(bytes, at),
            bytes
                .get(at + 6..at + 8)
                .map(|b| u16::from_ne_bytes([b[0], b[1]])),
        ) else {
            return;
        };
        let size = size as usize;
        if size < 8 || at + size > bytes.len() {
            return;
        }
        let body = &bytes[at + 8..at + size];
        match ty {
            RECORD_SAMPLE => {
                // pid, tid (u32 each), time (u64), cpu, res (u32 each), raw size (u32), raw.
                let parsed = (|| {
                    let pid = u32_at(body, 0)? as i32;
                    let tid = u32_at(body, 4)? as i32;
                    let time_ns = u64_at(body, 8)?;
                    let cpu = u32_at(body, 16)?;
                    let len = u32_at(body, 24)? as usize;
                    let raw = body.get(28..28 + len)?.to_vec();
                    Some(Record::Sample {
                        pid,
                        tid,
                        time_ns,
                        cpu,
                        raw,
                    })
                })();
                if let Some(r) = parsed {
                    out.push(r);
                }
            }
            RECORD_LOST => {
                if let Some(n) = u64_at(body, 8) {
                    out.push(Record::Lost(n));
                }
            }
            _ => {}
        }
        at += size;
    }
}

/// Why the tracepoints could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("permission denied")]
    Denied,
    #[error("{0}")]
    Other(String),
}

fn open_tracepoint(id: u64, cpu: u32) -> Result<OwnedFd, std::io::Error> {
    let mut attr = [0u8; ATTR_SIZE];
    attr[0..4].copy_from_slice(&PERF_TYPE_TRACEPOINT.to_ne_bytes());
    attr[4..8].copy_from_slice(&(ATTR_SIZE as u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&id.to_ne_bytes());
    attr[16..24].copy_from_slice(&1u64.to_ne_bytes()); // sample every event
    let st = SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_RAW;
    attr[24..32].copy_from_slice(&st.to_ne_bytes());
    // flags: disabled (bit 0), use_clockid (bit 25): timestamps comparable across CPUs and with
    // our own clock.
    let flags: u64 = 1 | (1 << 25);
    attr[40..48].copy_from_slice(&flags.to_ne_bytes());
    attr[92..96].copy_from_slice(&libc::CLOCK_MONOTONIC.to_ne_bytes());
    // SAFETY: attr is an initialised perf_event_attr of the size it declares; the rest are
    // integers. The descriptor is checked before use.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            -1 as libc::pid_t,
            cpu as libc::c_int,
            -1 as libc::c_int,
            8 as libc::c_ulong, // PERF_FLAG_FD_CLOEXEC
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// One CPU's ring buffer.
struct Ring {
    base: *mut u8,
    len: usize,
    page: usize,
    _fds: Vec<OwnedFd>,
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: base/len are the mapping made in `Rings::open`, unmapped once.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len);
        }
    }
}

/// The ring buffers of every watched CPU.
pub struct Rings {
    rings: Vec<Ring>,
    scratch: Vec<u8>,
}

impl Rings {
    /// Opens every tracepoint in `ids` on every CPU in `cpus`, one ring per CPU, disabled.
    pub fn open(ids: &[u64], cpus: impl Iterator<Item = u32>) -> Result<Self, OpenError> {
        let cpus: Vec<u32> = cpus.collect();
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let len = page * (1 + data_pages(cpus.len(), page));
        let mut rings = Vec::new();
        for cpu in cpus {
            let mut fds = Vec::new();
            for &id in ids {
                let fd = open_tracepoint(id, cpu).map_err(|e| match e.raw_os_error() {
                    Some(libc::EACCES) | Some(libc::EPERM) => OpenError::Denied,
                    _ => OpenError::Other(format!(
                        "perf_event_open(tracepoint {id}, cpu {cpu}): {e}"
                    )),
                })?;
                fds.push(fd);
            }
            // SAFETY: maps the first descriptor's ring buffer; the result is checked.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fds[0].as_raw_fd(),
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                return Err(OpenError::Other(format!(
                    "mmap of the cpu {cpu} ring buffer: {}",
                    std::io::Error::last_os_error()
                )));
            }
            for fd in &fds[1..] {
                // SAFETY: both are perf descriptors of the same CPU.
                let r = unsafe { libc::ioctl(fd.as_raw_fd(), IOC_SET_OUTPUT, fds[0].as_raw_fd()) };
                if r < 0 {
                    // SAFETY: unmapping what was just mapped.
                    unsafe { libc::munmap(base, len) };
                    return Err(OpenError::Other(format!(
                        "PERF_EVENT_IOC_SET_OUTPUT on cpu {cpu}: {}",
                        std::io::Error::last_os_error()
                    )));
                }
            }
            rings.push(Ring {
                base: base as *mut u8,
                len,
                page,
                _fds: fds,
            });
        }
        Ok(Self {
            rings,
            scratch: Vec::new(),
        })
    }

    /// Starts every event.
    pub fn enable(&self) {
        for r in &self.rings {
            for fd in &r._fds {
                // SAFETY: a perf descriptor; ENABLE takes no argument.
                unsafe { libc::ioctl(fd.as_raw_fd(), IOC_ENABLE, 0) };
            }
        }
    }

    /// Reads everything written since the last call, appending parsed records to `out`.
    pub fn drain(&mut self, out: &mut Vec<Record>) {
        for i in 0..self.rings.len() {
            self.copy_out(i);
            parse_records(&self.scratch, out);
        }
    }

    /// The unparsed bytes of the first ring (for capturing test fixtures).
    #[cfg(test)]
    pub fn drain_bytes(&mut self) -> Vec<u8> {
        self.copy_out(0);
        let mut end = 0;
        // Keep whole records only.
        while end + 8 <= self.scratch.len() {
            let size = u16::from_ne_bytes([self.scratch[end + 6], self.scratch[end + 7]]) as usize;
            if size < 8 || end + size > self.scratch.len() || end + size > 8192 {
                break;
            }
            end += size;
        }
        self.scratch[..end].to_vec()
    }

    /// Copies ring `i`'s unread bytes into `scratch` and releases them to the kernel.
    fn copy_out(&mut self, i: usize) {
        self.scratch.clear();
        {
            let r = &self.rings[i];
            let data_size = r.len - r.page;
            // SAFETY: the metadata page is mapped for the ring's lifetime; data_head (offset
            // 1024) is written by the kernel, read with acquire ordering; data_tail (1032) is
            // ours, written with release ordering after the bytes are copied.
            unsafe {
                let head_ptr = r.base.add(1024) as *const std::sync::atomic::AtomicU64;
                let tail_ptr = r.base.add(1032) as *const std::sync::atomic::AtomicU64;
                let head = (*head_ptr).load(std::sync::atomic::Ordering::Acquire);
                let tail = (*tail_ptr).load(std::sync::atomic::Ordering::Relaxed);
                let n = head.wrapping_sub(tail) as usize;
                if n == 0 {
                    return;
                }
                let data = r.base.add(r.page);
                let start = (tail as usize) % data_size;
                let first = n.min(data_size - start);
                self.scratch
                    .extend_from_slice(std::slice::from_raw_parts(data.add(start), first));
                if first < n {
                    self.scratch
                        .extend_from_slice(std::slice::from_raw_parts(data, n - first));
                }
                (*tail_ptr).store(head, std::sync::atomic::Ordering::Release);
            }
        }
    }
}

/// CLOCK_MONOTONIC now, in nanoseconds (the clock the records are stamped with).
pub fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pid: u32, time: u64, cpu: u32, raw: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&pid.to_ne_bytes());
        body.extend_from_slice(&pid.to_ne_bytes());
        body.extend_from_slice(&time.to_ne_bytes());
        body.extend_from_slice(&cpu.to_ne_bytes());
        body.extend_from_slice(&0u32.to_ne_bytes());
        body.extend_from_slice(&(raw.len() as u32).to_ne_bytes());
        body.extend_from_slice(raw);
        while (body.len() + 8) % 8 != 0 {
            body.push(0);
        }
        let mut rec = Vec::new();
        rec.extend_from_slice(&RECORD_SAMPLE.to_ne_bytes());
        rec.extend_from_slice(&0u16.to_ne_bytes());
        rec.extend_from_slice(&((body.len() + 8) as u16).to_ne_bytes());
        rec.extend_from_slice(&body);
        rec
    }

    #[test]
    fn ring_size_is_a_power_of_two_within_budget() {
        for cpus in [1, 2, 8, 64, 512, 4096] {
            let n = data_pages(cpus, 4096);
            assert!(n.is_power_of_two() && (16..=1024).contains(&n));
            assert!(cpus > 512 || n * 4096 * cpus <= RING_BUDGET_BYTES);
        }
        assert_eq!(data_pages(2, 4096), 1024);
    }

    #[test]
    fn samples_and_lost_records_parse_and_truncation_stops() {
        let mut bytes = sample(42, 1000, 1, &[1, 2, 3, 4, 5]);
        let mut lost = Vec::new();
        lost.extend_from_slice(&RECORD_LOST.to_ne_bytes());
        lost.extend_from_slice(&0u16.to_ne_bytes());
        lost.extend_from_slice(&24u16.to_ne_bytes());
        lost.extend_from_slice(&7u64.to_ne_bytes());
        lost.extend_from_slice(&13u64.to_ne_bytes());
        bytes.extend_from_slice(&lost);
        let full = bytes.len();
        bytes.extend_from_slice(&sample(43, 2000, 0, &[9; 12])[..20]);
        let mut out = Vec::new();
        parse_records(&bytes, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(
            out[0],
            Record::Sample {
                pid: 42,
                tid: 42,
                time_ns: 1000,
                cpu: 1,
                raw: vec![1, 2, 3, 4, 5]
            }
        );
        assert_eq!(out[1], Record::Lost(13));
        let mut again = Vec::new();
        parse_records(&bytes[..full], &mut again);
        assert_eq!(again, out);
    }
}
