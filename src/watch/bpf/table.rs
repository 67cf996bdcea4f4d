//! The `targets` table the aggregation programs read on every waking: an array of
//! [`TARGET_ENTRIES`] u64 entries, a process's entry at `tgid & (TARGET_ENTRIES - 1)`, each
//! holding `slot << 32 | tgid` (0: free). The programs look their entry up with an inlined
//! array access and compare the tgid; a hash map look-up there cost about 200 ns a waking on
//! this project's 2-vCPU guest (`kernel.bpf_stats_enabled`, docs/exporter.md, Cost), the most
//! of the waking program's cost.
//!
//! User space maps the array (`BPF_F_MMAPABLE`) and keeps it with atomic 64-bit loads and
//! stores, so a refresh is a scan of memory, not a system call per process. The programs write
//! whole entries with one 64-bit store too (a child joins its parent's slot, an `exec` its
//! name's), so neither side ever sees half an entry. Two live targets whose tgids are equal
//! modulo the size cannot both have their entry: the second is refused and counted.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// Entries of the table (a power of two): Linux's default `pid_max` on a small machine, so
/// there no two processes share an entry.
pub const TARGET_ENTRIES: u32 = 32768;

/// `BPF_F_MMAPABLE`: the array's values can be mapped into user space.
const BPF_F_MMAPABLE: u32 = 1 << 10;

/// The entry index of process `tgid`.
pub fn index(tgid: u32) -> usize {
    (tgid & (TARGET_ENTRIES - 1)) as usize
}

/// An entry's word for (`tgid`, `slot`).
pub fn entry(tgid: u32, slot: u32) -> u64 {
    (u64::from(slot) << 32) | u64::from(tgid)
}

/// The (tgid, slot) an entry's word holds, or `None` when free.
pub fn decode(word: u64) -> Option<(u32, u32)> {
    let tgid = word as u32;
    (tgid != 0).then_some((tgid, (word >> 32) as u32))
}

/// The processes the entries hold, in entry order (pure).
pub fn held(entries: &[AtomicU64]) -> Vec<u32> {
    entries
        .iter()
        .filter_map(|e| decode(e.load(Ordering::Relaxed)).map(|(t, _)| t))
        .collect()
}

/// The slot of `tgid`, if its entry holds it (pure).
pub fn slot_of(entries: &[AtomicU64], tgid: u32) -> Option<u32> {
    decode(entries[index(tgid)].load(Ordering::Relaxed))
        .filter(|(t, _)| *t == tgid)
        .map(|(_, s)| s)
}

/// Puts `tgid` in `slot` (pure): false, and nothing written, when its entry holds another
/// process.
pub fn set(entries: &[AtomicU64], tgid: u32, slot: u32) -> bool {
    let e = &entries[index(tgid)];
    match decode(e.load(Ordering::Relaxed)) {
        Some((t, _)) if t != tgid => false,
        _ => {
            e.store(entry(tgid, slot), Ordering::Relaxed);
            true
        }
    }
}

/// Frees `tgid`'s entry if it holds `tgid` (pure).
pub fn remove(entries: &[AtomicU64], tgid: u32) {
    let e = &entries[index(tgid)];
    let _ = e.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
        (decode(w).map(|(t, _)| t) == Some(tgid)).then_some(0)
    });
}

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
    /// The `targets` table: [`TARGET_ENTRIES`] u64 entries.
    pub fn targets(name: &str) -> std::io::Result<Self> {
        Self::create(name, 8, TARGET_ENTRIES)
    }

    /// Creates an array map of `entries` values of `value_size` bytes (a multiple of 8) and
    /// maps its values.
    pub fn create(name: &str, value_size: u32, entries: u32) -> std::io::Result<Self> {
        if value_size == 0 || !value_size.is_multiple_of(8) {
            return Err(std::io::Error::other(format!(
                "a mapped array's values are whole u64s, not {value_size} bytes"
            )));
        }
        let map = super::sys::map_create_flags(
            super::sys::BPF_MAP_TYPE_ARRAY,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Vec<AtomicU64> {
        (0..TARGET_ENTRIES).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn an_entry_round_trips_and_zero_is_free() {
        assert_eq!(decode(entry(4242, 7)), Some((4242, 7)));
        assert_eq!(decode(entry(1, 0)), Some((1, 0)));
        assert_eq!(decode(0), None);
        assert!(TARGET_ENTRIES.is_power_of_two());
        assert_eq!(index(5), index(5 + TARGET_ENTRIES));
        assert!(index(u32::MAX) < TARGET_ENTRIES as usize);
    }

    #[test]
    fn set_look_up_and_remove() {
        let t = table();
        assert!(set(&t, 100, 3));
        assert_eq!(slot_of(&t, 100), Some(3));
        // A process sharing the entry reads as absent, and cannot take it while it is held.
        let twin = 100 + TARGET_ENTRIES;
        assert_eq!(slot_of(&t, twin), None);
        assert!(!set(&t, twin, 4));
        assert_eq!(slot_of(&t, 100), Some(3));
        // Its own entry moves to another slot.
        assert!(set(&t, 100, 5));
        assert_eq!(slot_of(&t, 100), Some(5));
        assert_eq!(held(&t), vec![100]);
        // Removing the twin leaves the holder; removing the holder frees the entry.
        remove(&t, twin);
        assert_eq!(held(&t), vec![100]);
        remove(&t, 100);
        assert_eq!(held(&t), Vec::<u32>::new());
        assert!(set(&t, twin, 4));
        assert_eq!(slot_of(&t, twin), Some(4));
    }
}
