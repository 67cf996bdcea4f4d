//! An array map whose values are mapped into this process (`BPF_F_MMAPABLE`), read and written
//! as atomic 64-bit words shared with the programs: watch's `targets` and `pending` tables,
//! `cpulab host`'s per-thread KVM counts.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// `BPF_F_MMAPABLE`: the array's values can be mapped into user space.
const BPF_F_MMAPABLE: u32 = 1 << 10;

/// An array map whose values are mapped into this process (`BPF_F_MMAPABLE`): the `targets`
/// table, and the `pending` wakeups that user space clears while no program is attached.
pub struct MappedArray {
    map: OwnedFd,
    words: *mut AtomicU64,
    len: usize,
}

// SAFETY: the mapping is only ever accessed as `AtomicU64`s, which are Sync, and lives until
// Drop.
unsafe impl Send for MappedArray {}
unsafe impl Sync for MappedArray {}

impl MappedArray {
    /// Creates an array map of `entries` values of `value_size` bytes (a multiple of 8) and
    /// maps its values.
    pub fn create(name: &str, value_size: u32, entries: u32) -> std::io::Result<Self> {
        if value_size == 0 || !value_size.is_multiple_of(8) {
            return Err(std::io::Error::other(format!(
                "a mapped array's values are whole u64s, not {value_size} bytes"
            )));
        }
        let map = crate::bpf::sys::map_create_flags(
            crate::bpf::sys::BPF_MAP_TYPE_ARRAY,
            4,
            value_size,
            entries,
            name,
            BPF_F_MMAPABLE,
        )?;
        let len = entries as usize * value_size as usize / 8;
        // SAFETY: an mmapable array's values start at offset 0, each `value_size` bytes (a
        // multiple of 8 is its own stride), `len` u64s in all; the mapping is checked here and
        // unmapped in Drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len * 8,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                map.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self {
            map,
            words: p.cast(),
            len,
        })
    }

    /// The map, for the programs.
    pub fn fd(&self) -> &OwnedFd {
        &self.map
    }

    /// The values' words, shared with the kernel.
    pub fn entries(&self) -> &[AtomicU64] {
        // SAFETY: `words` is a live mapping of `len` 8-byte aligned words (page-aligned start).
        unsafe { std::slice::from_raw_parts(self.words, self.len) }
    }

    /// Zeroes every value (for `pending`: only while no program that writes it is attached).
    pub fn clear(&self) {
        for w in self.entries() {
            w.store(0, Ordering::Relaxed);
        }
    }
}

impl Drop for MappedArray {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `create`, of that length, no longer referenced.
        unsafe {
            libc::munmap(self.words.cast(), self.len * 8);
        }
    }
}
