//! The `targets` table the aggregation programs read on every waking, and the bucket layout it
//! shares with `pending` (see [`super::aggregate`]).
//!
//! **Any `pid_max`.** Linux numbers processes up to `pid_max`, 4,194,304 (`PID_MAX_LIMIT`) where
//! systemd raises it, as Debian's does. An array with one entry per possible id would take 32
//! MiB here and 96 MiB for `pending`, charged to the exporter's cgroup (`MemoryMax=64M`), so the
//! tables are hashed: [`TARGET_BUCKETS`] buckets of [`WAYS`] u64 entries, each entry holding
//! `slot << 32 | tgid` (0: free), a process's bucket [`bucket`]`(tgid)`. The full id is in
//! the entry (its tag), so two processes whose ids share a bucket are told apart, never mixed
//! up; a bucket whose ways all hold other processes refuses the next one, and the refusal is
//! counted (`Targets::apply`, published in `events_lost`).
//!
//! **Why not a BPF hash map.** These programs run on every scheduler event of the machine. An
//! array look-up is inlined by the verifier into a few instructions; a hash map look-up is a
//! helper call, about 200 ns a waking on this project's 2-vCPU guest (`kernel.bpf_stats_enabled`,
//! docs/exporter.md, Cost), the most of the waking program's cost, and the pending stamps
//! would add a hash update and delete (each taking a bucket lock) on every wakeup. A bucket
//! of [`WAYS`] entries is one cache line: a miss compares eight 32-bit words. User space also
//! keeps the mapped array (`BPF_F_MMAPABLE`) with atomic 64-bit loads and stores, so a refresh
//! is a scan of memory, not a system call per process.
//!
//! **Who writes.** User space (the refresh) and the kernel (a target's child at fork, a
//! `--comm` name at exec) both take a free entry only by compare-and-exchange from 0
//! (`BPF_ATOMIC | BPF_CMPXCHG` in the programs), so neither overwrites the other's new entry;
//! whole entries are written with one 64-bit store, so no side ever sees half an entry. If both
//! add the same process at the same instant it may hold two entries of its bucket with one slot;
//! look-ups find either, [`remove`] frees both.

use std::sync::atomic::{AtomicU64, Ordering};

/// Entries per bucket: eight u64s, one 64-byte cache line.
pub const WAYS: u32 = 8;
/// Buckets of the table (a power of two).
pub const TARGET_BUCKETS: u32 = 4096;
/// Entries of the table: 32,768 processes, 256 KiB, the size of the array indexed by pid it
/// replaces.
pub const TARGET_ENTRIES: u32 = TARGET_BUCKETS * WAYS;
pub use crate::bpf::asm::{HASH, bucket};

/// An entry's word for (`tgid`, `slot`).
pub fn entry(tgid: u32, slot: u32) -> u64 {
    (u64::from(slot) << 32) | u64::from(tgid)
}

/// The (tgid, slot) an entry's word holds, or `None` when free.
pub fn decode(word: u64) -> Option<(u32, u32)> {
    let tgid = word as u32;
    (tgid != 0).then_some((tgid, (word >> 32) as u32))
}

/// The ways of `tgid`'s bucket in `entries` (the table's words, [`WAYS`] per bucket).
fn ways(entries: &[AtomicU64], tgid: u32) -> &[AtomicU64] {
    let buckets = (entries.len() / WAYS as usize) as u32;
    let b = bucket(tgid, buckets) as usize * WAYS as usize;
    &entries[b..b + WAYS as usize]
}

/// The processes the entries hold, in entry order (pure).
pub fn held(entries: &[AtomicU64]) -> Vec<u32> {
    entries
        .iter()
        .filter_map(|e| decode(e.load(Ordering::Relaxed)).map(|(t, _)| t))
        .collect()
}

/// The slot of `tgid`, if an entry of its bucket holds it (pure).
pub fn slot_of(entries: &[AtomicU64], tgid: u32) -> Option<u32> {
    ways(entries, tgid).iter().find_map(|e| {
        decode(e.load(Ordering::Relaxed))
            .filter(|(t, _)| *t == tgid)
            .map(|(_, s)| s)
    })
}

/// Puts `tgid` in `slot` (pure): its own entries are rewritten, else a free entry of its bucket
/// is taken; false, and nothing written, when every entry of the bucket holds another process.
pub fn set(entries: &[AtomicU64], tgid: u32, slot: u32) -> bool {
    let ways = ways(entries, tgid);
    let word = entry(tgid, slot);
    let mut own = false;
    for e in ways {
        // Its own entry, unless it is removed meanwhile (then a free one is taken below).
        let mine = |w: u64| (decode(w).map(|(t, _)| t) == Some(tgid)).then_some(word);
        own |= e
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, mine)
            .is_ok();
    }
    own || ways.iter().any(|e| {
        e.compare_exchange(0, word, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    })
}

/// Frees every entry of its bucket that holds `tgid` (pure).
pub fn remove(entries: &[AtomicU64], tgid: u32) {
    for e in ways(entries, tgid) {
        let _ = e.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
            (decode(w).map(|(t, _)| t) == Some(tgid)).then_some(0)
        });
    }
}

pub use crate::bpf::mapped::MappedArray;

impl MappedArray {
    /// The `targets` table: [`TARGET_BUCKETS`] values of [`WAYS`] u64 entries.
    pub fn targets(name: &str) -> std::io::Result<Self> {
        Self::create(name, 8 * WAYS, TARGET_BUCKETS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Vec<AtomicU64> {
        (0..TARGET_ENTRIES).map(|_| AtomicU64::new(0)).collect()
    }

    /// The first `n` ids above `from` (up to `PID_MAX_LIMIT`) whose bucket is `b`'s.
    fn same_bucket(b: u32, from: u32, n: usize) -> Vec<u32> {
        let ids: Vec<u32> = (from..=4_194_304)
            .filter(|&id| bucket(id, TARGET_BUCKETS) == b)
            .take(n)
            .collect();
        assert_eq!(ids.len(), n, "ids enough in bucket {b}");
        ids
    }

    #[test]
    fn an_entry_round_trips_and_zero_is_free() {
        assert_eq!(decode(entry(4242, 7)), Some((4242, 7)));
        assert_eq!(decode(entry(4_194_303, 0)), Some((4_194_303, 0)));
        assert_eq!(decode(0), None);
        assert!(TARGET_BUCKETS.is_power_of_two());
        for id in [0, 1, 32_767, 32_768, 4_194_303, 4_194_304, u32::MAX] {
            assert!(bucket(id, TARGET_BUCKETS) < TARGET_BUCKETS);
        }
        // Ids that agree modulo the old array's size land in different buckets.
        let twins: std::collections::BTreeSet<u32> = (0..128)
            .map(|k| bucket(4242 + k * 32_768, TARGET_BUCKETS))
            .collect();
        assert!(twins.len() > 100, "{}", twins.len());
    }

    #[test]
    fn ids_that_agree_modulo_32768_are_both_placed() {
        let t = table();
        let ids: Vec<u32> = (0..128).map(|k| 4242 + k * 32_768).collect();
        assert!(ids.iter().all(|&id| id <= 4_194_304));
        for (slot, &id) in ids.iter().enumerate() {
            assert!(set(&t, id, slot as u32), "{id}");
        }
        for (slot, &id) in ids.iter().enumerate() {
            assert_eq!(slot_of(&t, id), Some(slot as u32), "{id}");
        }
        let mut held = held(&t);
        held.sort_unstable();
        assert_eq!(held, ids);
    }

    #[test]
    fn set_look_up_and_remove() {
        let t = table();
        let [a, b] = same_bucket(5, 100_000, 2)[..] else {
            unreachable!()
        };
        assert!(set(&t, a, 3));
        assert_eq!(slot_of(&t, a), Some(3));
        // Another process of the same bucket is absent until set, then both are there.
        assert_eq!(slot_of(&t, b), None);
        assert!(set(&t, b, 4));
        assert_eq!((slot_of(&t, a), slot_of(&t, b)), (Some(3), Some(4)));
        // Its own entry moves to another slot, in place.
        assert!(set(&t, a, 5));
        assert_eq!(slot_of(&t, a), Some(5));
        assert_eq!(held(&t).len(), 2);
        // Removing one leaves the other.
        remove(&t, b);
        assert_eq!((slot_of(&t, a), slot_of(&t, b)), (Some(5), None));
        remove(&t, a);
        assert_eq!(held(&t), Vec::<u32>::new());
        // Removing what is not there changes nothing.
        remove(&t, a);
        assert_eq!(held(&t), Vec::<u32>::new());
    }

    #[test]
    fn a_full_bucket_refuses_the_next_process_and_takes_it_once_one_leaves() {
        let t = table();
        let ids = same_bucket(77, 4_000_000, WAYS as usize + 1);
        let (last, fill) = ids.split_last().unwrap();
        for &id in fill {
            assert!(set(&t, id, 1));
        }
        assert!(!set(&t, *last, 2), "the bucket is full");
        assert_eq!(slot_of(&t, *last), None);
        // Nothing else was touched: every other process keeps its entry.
        assert!(fill.iter().all(|&id| slot_of(&t, id) == Some(1)));
        // A process already there still moves slots in a full bucket.
        assert!(set(&t, fill[3], 6));
        assert_eq!(slot_of(&t, fill[3]), Some(6));
        remove(&t, fill[0]);
        assert!(set(&t, *last, 2));
        assert_eq!(slot_of(&t, *last), Some(2));
    }

    #[test]
    fn a_duplicate_entry_is_found_and_removed_whole() {
        // The kernel and user space added the same process at once: two entries.
        let t = table();
        let id = 4_100_000;
        let b = bucket(id, TARGET_BUCKETS) as usize * WAYS as usize;
        t[b + 2].store(entry(id, 1), Ordering::Relaxed);
        t[b + 5].store(entry(id, 1), Ordering::Relaxed);
        assert_eq!(slot_of(&t, id), Some(1));
        assert!(set(&t, id, 3));
        assert_eq!(held(&t), vec![id, id]);
        assert_eq!(slot_of(&t, id), Some(3));
        remove(&t, id);
        assert!(held(&t).is_empty());
    }
}
