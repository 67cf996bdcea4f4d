//! Descriptors the ranking keeps open between refreshes (`crate::watch::follow`).
//!
//! Opening a /proc file is most of what reading it costs: a `status` read that opens, reads
//! and closes took 34 us of CPU on the 2-vCPU guest, a `pread` from offset 0 of a descriptor
//! held open 16 us, and an `fstat` of a held `task/` directory 3 us against 23 us to list it.
//! A /proc descriptor held open reads the file as it is now (the kernel writes it afresh at
//! each read from offset 0), and reads an error once its thread or process has ended: the
//! descriptor is then closed and the caller told (`None`).
//!
//! The number held is capped ([`Held::new`]: at most half the soft `RLIMIT_NOFILE`, and
//! [`HELD_MAX`]): beyond it, files are opened, read and closed as before. Each held `status`
//! descriptor also keeps the kernel's page-sized read buffer, so the cap bounds that memory too
//! (4 KiB each, 4 MiB at [`HELD_MAX`]).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

/// Descriptors held at most, whatever the file limit.
pub const HELD_MAX: usize = 1024;
/// Bytes read of a file: `status` is about 1.5 KiB.
const READ_MAX: usize = 8192;

/// What a held descriptor is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    /// `/proc/PID/task`, for its link count.
    Tasks(i32),
    /// `/proc/PID/task/TID/status`.
    Status(i32),
}

/// The descriptors held, and how many may be.
#[derive(Debug)]
pub struct Held {
    cap: usize,
    files: HashMap<Key, File>,
    buf: Vec<u8>,
}

/// A copy holds nothing: descriptors are a cache, re-opened at need.
impl Clone for Held {
    fn clone(&self) -> Self {
        Self::with_cap(self.cap)
    }
}

/// Half the soft limit on open files, or [`HELD_MAX`] when that is lower (or the limit
/// cannot be read: then as many as the usual default of 1024 allows).
pub fn default_cap() -> usize {
    let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| soft);
    usize::try_from(soft / 2).unwrap_or(HELD_MAX).min(HELD_MAX)
}

impl Held {
    /// At most `cap` descriptors held.
    pub fn with_cap(cap: usize) -> Self {
        Self {
            cap,
            files: HashMap::new(),
            buf: vec![0; READ_MAX],
        }
    }

    /// Descriptors held now.
    pub fn count(&self) -> usize {
        self.files.len()
    }

    /// The bytes of the file `key` names (at `path`) as it is now: from the descriptor held,
    /// else opened (and held, room permitting). Bytes, not text: a thread's name may be any
    /// bytes, and checking 1.5 KiB for UTF-8 cost more than the parse. None: it cannot be read,
    /// or its held descriptor no longer can (closed then).
    pub fn read(&mut self, key: Key, path: &Path) -> Option<&[u8]> {
        let n = if let Some(f) = self.files.get(&key) {
            match f.read_at(&mut self.buf, 0) {
                Ok(n) => n,
                Err(_) => {
                    self.files.remove(&key);
                    return None;
                }
            }
        } else {
            let f = File::open(path).ok()?;
            let n = f.read_at(&mut self.buf, 0).ok()?;
            self.hold(key, f);
            n
        };
        self.buf.get(..n)
    }

    /// The link count of the directory `key` names (at `path`): for `/proc/PID/task`, 2 and
    /// one per live thread.
    pub fn links(&mut self, key: Key, path: &Path) -> Option<u64> {
        if let Some(f) = self.files.get(&key) {
            return f.metadata().ok().map(|m| m.nlink());
        }
        let f = File::open(path).ok()?;
        let links = f.metadata().ok()?.nlink();
        self.hold(key, f);
        Some(links)
    }

    /// Closes the descriptor of `key`, if held: the next use opens its path again.
    pub fn forget(&mut self, key: Key) {
        self.files.remove(&key);
    }

    fn hold(&mut self, key: Key, f: File) {
        if self.files.len() < self.cap {
            self.files.insert(key, f);
        }
    }

    /// Closes every descriptor `keep` refuses.
    pub fn retain(&mut self, keep: impl Fn(&Key) -> bool) {
        self.files.retain(|k, _| keep(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_descriptor_reads_the_file_as_it_is_now_and_the_cap_is_kept() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::write(&a, "one").unwrap();
        std::fs::write(&b, "two").unwrap();
        let mut h = Held::with_cap(1);
        assert_eq!(h.read(Key::Status(1), &a), Some(&b"one"[..]));
        assert_eq!(h.read(Key::Status(2), &b), Some(&b"two"[..]));
        assert_eq!(h.count(), 1, "the cap");
        assert_eq!(h.clone().count(), 0, "a copy holds nothing");
        std::fs::write(&a, "three").unwrap();
        std::fs::write(&b, "four").unwrap();
        assert_eq!(h.read(Key::Status(1), &a), Some(&b"three"[..]));
        assert_eq!(h.read(Key::Status(2), &b), Some(&b"four"[..]));
        // Held: the path no longer matters (a /proc descriptor keeps reading its own thread).
        assert_eq!(h.read(Key::Status(1), &b), Some(&b"three"[..]));
        assert_eq!(h.read(Key::Status(3), &d.path().join("none")), None);
        h.retain(|k| *k != Key::Status(1));
        assert_eq!(h.count(), 0);
        assert_eq!(
            Held::with_cap(0).read(Key::Status(1), &a),
            Some(&b"three"[..])
        );
    }

    #[test]
    fn a_held_descriptor_that_fails_is_closed() {
        // A directory opens but cannot be read: as a /proc file of a thread that has ended.
        let d = tempfile::tempdir().unwrap();
        let mut h = Held::with_cap(4);
        assert!(h.links(Key::Tasks(1), d.path()).is_some());
        assert_eq!(h.count(), 1);
        assert_eq!(h.read(Key::Tasks(1), d.path()), None);
        assert_eq!(h.count(), 0, "closed");
    }

    #[test]
    fn a_directory_counts_its_subdirectories_in_its_links() {
        let d = tempfile::tempdir().unwrap();
        let mut h = Held::with_cap(4);
        let before = h.links(Key::Tasks(1), d.path()).unwrap();
        std::fs::create_dir(d.path().join("7")).unwrap();
        let after = h.links(Key::Tasks(1), d.path()).unwrap();
        if before < 2 {
            // btrfs and some others give directories one link: the ranking then lists always.
            return crate::testing::skipped(
                "a_directory_counts_its_subdirectories_in_its_links",
                "this filesystem does not count subdirectories in a directory's links",
            );
        }
        assert_eq!(after, before + 1, "held: the count as it is now");
    }
}
