//! Scheduler tracepoints through `perf_event_open(2)`, read from one ring buffer per CPU.
//!
//! Why this mechanism and not eBPF: a tracepoint perf event needs no BTF, no clang, no loader
//! crate, and works on every kernel since 2.6.32, so `cargo install cpulab` keeps working with
//! nothing else installed. Its cost is one record copied per event into a per-CPU buffer that
//! user space drains; `scripts/bench-watch.sh` measures what that costs a live PostgreSQL.
//!
//! One event is opened per tracepoint and CPU (`pid = -1`: every task on that CPU), and all the
//! events of one CPU write into the first one's buffer (`PERF_EVENT_IOC_SET_OUTPUT`), so each
//! buffer holds one CPU's records already in time order. Samples carry the current task's
//! pid/tid, a `CLOCK_MONOTONIC` timestamp (`use_clockid`, so buffers of different CPUs merge on
//! one clock, and cpulab can tell which records are old enough to be complete), the CPU, and the
//! tracepoint's raw record.
//!
//! Reading follows the protocol in `perf_event_open(2)`: load `data_head` with acquire ordering,
//! copy `[data_tail, data_head)` out of the ring (wrapping at its end), then store `data_tail` with
//! release ordering so the kernel may overwrite what was read. When the reader falls behind, the
//! kernel drops records and says how many in a `PERF_RECORD_LOST`; cpulab counts and reports
//! them. Record parsing ([`parse_records`]) is pure and tested on bytes captured from a real run.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::perf_event::{
    IOC_DISABLE as PERF_EVENT_IOC_DISABLE, IOC_ENABLE as PERF_EVENT_IOC_ENABLE,
    IOC_SET_OUTPUT as PERF_EVENT_IOC_SET_OUTPUT, TYPE_TRACEPOINT as PERF_TYPE_TRACEPOINT, ioctl,
    read_count,
};
const PERF_SAMPLE_TID: u64 = 1 << 1;
const PERF_SAMPLE_TIME: u64 = 1 << 2;
const PERF_SAMPLE_CPU: u64 = 1 << 7;
const PERF_SAMPLE_RAW: u64 = 1 << 10;
/// PERF_ATTR_SIZE_VER5: large enough to carry `clockid` (offset 92).
const ATTR_SIZE: usize = 112;
pub const PERF_RECORD_LOST: u32 = 2;
pub const PERF_RECORD_SAMPLE: u32 = 9;

/// One record of a ring, borrowed from the bytes it was copied into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawRecord<'a> {
    Sample {
        pid: i32,
        tid: i32,
        time_ns: u64,
        cpu: u32,
        raw: &'a [u8],
    },
    /// The kernel dropped this many records: the reader fell behind.
    Lost(u64),
}

/// Walks the records in `bytes` (whole records, as copied out of a ring), calling `f` for each
/// sample and loss. Returns the number of bytes that did not form a whole record (0 when the
/// copy was consistent).
pub fn parse_records(bytes: &[u8], mut f: impl FnMut(RawRecord<'_>)) -> usize {
    let u32_at = |b: &[u8], o: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(b.get(o..o + 4)?.try_into().ok()?))
    };
    let u64_at = |b: &[u8], o: usize| -> Option<u64> {
        Some(u64::from_ne_bytes(b.get(o..o + 8)?.try_into().ok()?))
    };
    let mut at = 0;
    while at + 8 <= bytes.len() {
        let Some(kind) = u32_at(bytes, at) else { break };
        let size = u16::from_ne_bytes([bytes[at + 6], bytes[at + 7]]) as usize;
        if size < 8 || at + size > bytes.len() {
            break;
        }
        let rec = &bytes[at..at + size];
        match kind {
            PERF_RECORD_SAMPLE => {
                // header(8) pid tid(8) time(8) cpu res(8) raw_size(4) raw...
                if let (Some(pid), Some(tid), Some(time_ns), Some(cpu), Some(raw_size)) = (
                    u32_at(rec, 8),
                    u32_at(rec, 12),
                    u64_at(rec, 16),
                    u32_at(rec, 24),
                    u32_at(rec, 32),
                ) && let Some(raw) = rec.get(36..36 + raw_size as usize)
                {
                    f(RawRecord::Sample {
                        pid: pid as i32,
                        tid: tid as i32,
                        time_ns,
                        cpu,
                        raw,
                    });
                }
            }
            PERF_RECORD_LOST => {
                if let Some(lost) = u64_at(rec, 16) {
                    f(RawRecord::Lost(lost));
                }
            }
            _ => {}
        }
        at += size;
    }
    bytes.len() - at
}

/// One tracepoint to open on every CPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSpec {
    pub id: u64,
    /// Write a record per event (else only count it: no record, a counter increment).
    pub sampled: bool,
    /// A tracepoint filter (`next_comm == "postgres" || ...`), if any.
    pub filter: Option<String>,
}

fn perf_open(spec: &EventSpec, cpu: u32) -> std::io::Result<OwnedFd> {
    let mut attr = [0u8; ATTR_SIZE];
    attr[0..4].copy_from_slice(&PERF_TYPE_TRACEPOINT.to_ne_bytes());
    attr[4..8].copy_from_slice(&(ATTR_SIZE as u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&spec.id.to_ne_bytes());
    if spec.sampled {
        attr[16..24].copy_from_slice(&1u64.to_ne_bytes()); // sample_period: every event
        let sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_RAW;
        attr[24..32].copy_from_slice(&sample_type.to_ne_bytes());
    }
    // wakeup_events and wakeup_watermark stay 0: the reader polls the rings on a timer and never
    // sleeps in poll(2), so the kernel only signals when a ring is half full.
    // flags: bit 0 disabled (enabled together once all are open), bit 25 use_clockid.
    let flags: u64 = 1 | (1 << 25);
    attr[40..48].copy_from_slice(&flags.to_ne_bytes());
    attr[92..96].copy_from_slice(&libc::CLOCK_MONOTONIC.to_ne_bytes());
    let fd = crate::perf_event::open(&attr, -1, cpu as libc::c_int)?;
    if let Some(f) = &spec.filter {
        crate::perf_event::set_filter(&fd, f)?;
    }
    Ok(fd)
}

/// One CPU's ring buffer and the events writing into it (and those only counted).
struct Ring {
    cpu: u32,
    events: Vec<OwnedFd>,
    base: *mut u8,
    map_len: usize,
    data_size: usize,
    page: usize,
}

impl Ring {
    fn head(&self) -> &AtomicU64 {
        // SAFETY: `base` maps the metadata page; data_head is an aligned u64 at offset 1024 that
        // the kernel updates concurrently, hence read through an atomic.
        unsafe { &*(self.base.add(1024) as *const AtomicU64) }
    }

    fn tail(&self) -> &AtomicU64 {
        // SAFETY: as for `head`; data_tail (offset 1032) is written by us, read by the kernel.
        unsafe { &*(self.base.add(1032) as *const AtomicU64) }
    }

    /// Appends every whole record written since the last drain to `out`.
    fn drain(&self, out: &mut Vec<u8>) {
        let head = self.head().load(Ordering::Acquire);
        let tail = self.tail().load(Ordering::Relaxed);
        let len = head.wrapping_sub(tail) as usize;
        let len = len.min(self.data_size);
        // SAFETY: the data area starts one page after the metadata page and is data_size long.
        let data = unsafe { std::slice::from_raw_parts(self.base.add(self.page), self.data_size) };
        let start = (tail as usize) % self.data_size;
        let first = len.min(self.data_size - start);
        out.extend_from_slice(&data[start..start + first]);
        out.extend_from_slice(&data[..len - first]);
        self.tail().store(head, Ordering::Release);
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        for fd in &self.events {
            let _ = ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
        }
        // SAFETY: base/map_len are exactly what mmap returned; nothing borrows the map now.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.map_len) };
    }
}

/// The open tracepoints on every CPU watched.
pub struct Tracer {
    rings: Vec<Ring>,
    scratch: Vec<u8>,
    /// The fullest ring's share of its size at the last drain (0..1).
    pub last_fill: f64,
}

impl Tracer {
    /// Opens every tracepoint of `specs` on every CPU in `cpus`, each CPU with a ring of `pages`
    /// data pages (a power of two) that its sampled events write into; the first spec must be
    /// sampled. Errors carry the `io::Error` so callers can tell a refusal for permission from
    /// anything else.
    pub fn open(specs: &[EventSpec], cpus: &[u32], pages: usize) -> std::io::Result<Self> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let mut rings = Vec::new();
        for &cpu in cpus {
            let mut events = Vec::new();
            for spec in specs {
                events.push(perf_open(spec, cpu)?);
            }
            let Some(leader) = events.first() else {
                continue;
            };
            let map_len = page * (1 + pages);
            // SAFETY: mapping a perf event descriptor as the man page describes: metadata page
            // plus 2^n data pages, shared and writable (so data_tail can be written).
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    map_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    leader.as_raw_fd(),
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            let ring = Ring {
                cpu,
                events,
                base: base as *mut u8,
                map_len,
                data_size: page * pages,
                page,
            };
            for (fd, spec) in ring.events.iter().zip(specs).skip(1) {
                if spec.sampled {
                    ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, ring.events[0].as_raw_fd())?;
                }
            }
            rings.push(ring);
        }
        Ok(Self {
            rings,
            scratch: Vec::new(),
            last_fill: 0.0,
        })
    }

    /// Stops every event, so that a last drain and the counts read after it cover the same
    /// events.
    pub fn disable(&self) {
        for r in &self.rings {
            for fd in &r.events {
                let _ = ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
            }
        }
    }

    /// Each CPU's count of each event (in the order of the specs): `None` where the read failed.
    pub fn counts(&self) -> Vec<(u32, Vec<Option<u64>>)> {
        self.rings
            .iter()
            .map(|r| (r.cpu, r.events.iter().map(read_count).collect()))
            .collect()
    }

    pub fn enable(&self) -> std::io::Result<()> {
        for r in &self.rings {
            for fd in &r.events {
                ioctl(fd, PERF_EVENT_IOC_ENABLE, 0)?;
            }
        }
        Ok(())
    }

    /// Copies out what every ring holds and hands its records to `f`, with the ring's CPU.
    /// Returns the bytes that did not form whole records (should be 0).
    pub fn drain(&mut self, mut f: impl FnMut(u32, RawRecord<'_>)) -> usize {
        let mut torn = 0;
        self.last_fill = 0.0;
        for r in &self.rings {
            self.scratch.clear();
            r.drain(&mut self.scratch);
            self.last_fill = self
                .last_fill
                .max(self.scratch.len() as f64 / r.data_size as f64);
            torn += parse_records(&self.scratch, |rec| f(r.cpu, rec));
        }
        torn
    }

    /// Raw bytes of the first ring's next drain (for capturing test fixtures).
    pub fn drain_bytes(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if let Some(r) = self.rings.first() {
            r.drain(&mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pid: u32, time: u64, cpu: u32, raw: &[u8]) -> Vec<u8> {
        let body = 36 + raw.len();
        let size = body.div_ceil(8) * 8;
        let mut v = Vec::new();
        v.extend_from_slice(&PERF_RECORD_SAMPLE.to_ne_bytes());
        v.extend_from_slice(&0u16.to_ne_bytes());
        v.extend_from_slice(&(size as u16).to_ne_bytes());
        v.extend_from_slice(&pid.to_ne_bytes());
        v.extend_from_slice(&pid.to_ne_bytes());
        v.extend_from_slice(&time.to_ne_bytes());
        v.extend_from_slice(&cpu.to_ne_bytes());
        v.extend_from_slice(&0u32.to_ne_bytes());
        v.extend_from_slice(&(raw.len() as u32).to_ne_bytes());
        v.extend_from_slice(raw);
        v.resize(size, 0);
        v
    }

    #[test]
    fn walks_samples_and_losses() {
        let mut bytes = sample(42, 1000, 1, &[1, 2, 3, 4]);
        let mut lost = Vec::new();
        lost.extend_from_slice(&PERF_RECORD_LOST.to_ne_bytes());
        lost.extend_from_slice(&0u16.to_ne_bytes());
        lost.extend_from_slice(&24u16.to_ne_bytes());
        lost.extend_from_slice(&7u64.to_ne_bytes());
        lost.extend_from_slice(&5u64.to_ne_bytes());
        bytes.extend(lost);
        let mut seen = Vec::new();
        let torn = parse_records(&bytes, |r| seen.push(format!("{r:?}")));
        assert_eq!(torn, 0);
        assert_eq!(seen.len(), 2);
        assert!(seen[0].contains("pid: 42") && seen[0].contains("raw: [1, 2, 3, 4]"));
        assert_eq!(seen[1], "Lost(5)");
    }

    #[test]
    fn a_torn_record_is_left_over_not_misread() {
        let bytes = sample(1, 2, 0, &[0; 12]);
        let cut = &bytes[..bytes.len() - 4];
        let mut n = 0;
        assert_eq!(parse_records(cut, |_| n += 1), cut.len());
        assert_eq!(n, 0);
    }

    #[test]
    fn records_captured_from_a_live_kernel_parse() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/watch/records.bin"
        );
        let bytes = std::fs::read(path).unwrap();
        let mut samples = 0;
        let mut last_time = 0;
        let torn = parse_records(&bytes, |r| {
            if let RawRecord::Sample { time_ns, raw, .. } = r {
                samples += 1;
                // One CPU's ring: time never goes backwards; every raw record starts with the
                // 8-byte common header.
                assert!(time_ns >= last_time);
                last_time = time_ns;
                assert!(raw.len() >= 8);
            }
        });
        assert_eq!(torn, 0);
        assert!(samples > 10, "{samples} samples");
    }
}
