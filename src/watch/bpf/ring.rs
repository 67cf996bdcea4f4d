//! The BPF ring buffer mapped for reading, and the record header cpulab's programs write.

use super::HEADER;
use std::ops::Range;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// The ring buffer mapped for reading: the consumer position (ours to write) and the producer
/// position with the data pages mapped twice, so a record that wraps reads contiguously.
pub struct Ring {
    consumer: *mut u8,
    producer: *mut u8,
    page: usize,
    size: usize,
}

impl Ring {
    pub fn map(fd: &OwnedFd, size: usize) -> std::io::Result<Self> {
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
    pub fn drain(&mut self, mut f: impl FnMut(&[u8])) -> usize {
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
            let Some((body, step)) = entry(len_word, at, data.len()) else {
                break; // reserved, not yet committed
            };
            if let Some(rec) = body.and_then(|b| data.get(b)) {
                f(rec);
            }
            cons += step;
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

/// What the ring holds at offset `at` of its data (`data_len` bytes, the data pages mapped
/// twice), from the entry's length word as the kernel writes it (pure): `None` while the entry
/// is reserved but not yet committed (bit 31), else where its record lies, if it is to be read
/// (not discarded, bit 30, and wholly inside the data), and how far the next entry is (the
/// 8-byte header and the record, rounded up to 8).
pub fn entry(len_word: u32, at: usize, data_len: usize) -> Option<(Option<Range<usize>>, u64)> {
    const BUSY: u32 = 1 << 31;
    const DISCARD: u32 = 1 << 30;
    if len_word & BUSY != 0 {
        return None;
    }
    let len = (len_word & !(BUSY | DISCARD)) as usize;
    let body = at
        .checked_add(8)
        .and_then(|start| Some(start..start.checked_add(len)?))
        .filter(|b| len_word & DISCARD == 0 && b.end <= data_len);
    Some((body, ((len + 8 + 7) & !7) as u64))
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn ring_entries_by_their_length_word() {
        assert_eq!(entry(1 << 31 | 16, 0, 4096), None, "reserved: stop");
        assert_eq!(entry(16, 8, 4096), Some((Some(16..32), 24)));
        assert_eq!(entry(13, 0, 4096), Some((Some(8..21), 24)), "padded to 8");
        assert_eq!(entry(1 << 30 | 16, 0, 4096), Some((None, 24)), "discarded");
        assert_eq!(entry(4096, 8, 4096), Some((None, 4104)), "past the data");
    }
}
