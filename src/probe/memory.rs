//! How much memory this process may still take, from each place that bounds it: the kernel's
//! estimate of memory available without swapping (`MemAvailable` in /proc/meminfo) and the
//! room left under the tightest cgroup memory limit (see [`super::cgroup::read_memory_limit`]).
//!
//! A command that allocates a buffer the user sized (`pingpong --touch`) checks it against the
//! smallest of these before it starts, so a buffer that does not fit is a message rather than
//! an OOM kill in the middle of a run.

use super::cgroup::{Layout, read_memory_limit};
use super::reading::{Reading, Reason, read_trim};
use crate::units::fmt_bytes;
use std::path::Path;

/// `MemAvailable` of /proc/meminfo, in bytes (pure); `None` when the line is missing (kernels
/// before 3.14) or not `N kB`.
pub fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let kb = line.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
    kb.checked_mul(1024)
}

/// Room this process has for new memory, and where the figure comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Room {
    /// Bytes that may still be taken.
    pub bytes: u64,
    /// Where it was read, in words: `MemAvailable in /proc/meminfo`, or the cgroup limit file
    /// with the limit and what the group uses under it.
    pub source: String,
}

/// Reads `MemAvailable` under `root`.
pub fn read_mem_available(root: &Path) -> Reading<Room> {
    let path = root.join("proc/meminfo");
    read_trim(&path).and_then(|text| match parse_mem_available(&text) {
        Some(bytes) => Reading::Value(Room {
            bytes,
            source: format!("MemAvailable in {}", path.display()),
        }),
        None => Reading::unavailable(
            Reason::Unreadable,
            format!("{}: no `MemAvailable: N kB` line", path.display()),
        ),
    })
}

/// Reads the room left under the tightest cgroup memory limit under `root`; `Value(None)` when
/// no group sets one.
pub fn read_cgroup_room(root: &Path) -> Reading<Option<Room>> {
    read_memory_limit(&Layout::read(root)).map(|limit| {
        limit.map(|l| Room {
            bytes: l.room(),
            source: format!(
                "the cgroup limit {} ({} there, {} in use{})",
                l.file.display(),
                fmt_bytes(l.limit),
                fmt_bytes(l.usage),
                match l.reclaimable {
                    Some(r) if r > 0 =>
                        format!(", of which {} is page cache reclaimed first", fmt_bytes(r)),
                    Some(_) => String::new(),
                    None => ", page cache counted as in use: memory.stat unreadable".to_string(),
                }
            ),
        })
    })
}

/// Every bound on new memory that could be read under `root`. What could not be read is left
/// out (each reader above says why), so an empty list means nothing is known, not that
/// nothing fits.
pub fn read_rooms(root: &Path) -> Vec<Room> {
    let mut rooms: Vec<Room> = read_cgroup_room(root)
        .into_value()
        .flatten()
        .into_iter()
        .collect();
    rooms.extend(read_mem_available(root).into_value());
    rooms
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::tree;

    #[test]
    fn mem_available_is_read_in_bytes() {
        let text = "MemTotal:       24684328 kB\nMemFree:         1159452 kB\n\
                    MemAvailable:   23917852 kB\nBuffers:          326408 kB\n";
        assert_eq!(parse_mem_available(text), Some(23917852 * 1024));
        // A kernel before 3.14 has no such line; a line without its unit is not guessed at.
        assert_eq!(
            parse_mem_available("MemTotal: 1024 kB\nMemFree: 512 kB\n"),
            None
        );
        assert_eq!(parse_mem_available("MemAvailable: 512\n"), None);
        assert_eq!(parse_mem_available("MemAvailable: lots kB\n"), None);
    }

    #[test]
    fn rooms_name_their_source() {
        let t = tree(&[
            ("proc/meminfo", "MemAvailable:   2097152 kB\n"),
            ("proc/self/cgroup", "0::/app\n"),
            (
                "proc/self/mountinfo",
                "41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
            ),
            ("sys/fs/cgroup/app/memory.max", "536870912\n"),
            ("sys/fs/cgroup/app/memory.current", "201326592\n"),
            (
                "sys/fs/cgroup/app/memory.stat",
                "anon 100663296\nfile 100663296\ninactive_file 67108864\nactive_file 33554432\n",
            ),
        ]);
        let rooms = read_rooms(t.path());
        assert_eq!(rooms.len(), 2, "{rooms:?}");
        assert_eq!(rooms[0].bytes, 384 << 20);
        assert!(
            rooms[0]
                .source
                .contains("app/memory.max (512 MiB there, 192 MiB in use, of which 64 MiB is page cache reclaimed first)"),
            "{}",
            rooms[0].source
        );
        assert_eq!(rooms[1].bytes, 2 << 30);
        assert!(rooms[1].source.starts_with("MemAvailable in "), "{rooms:?}");
        // An empty tree: nothing known, and each reader says why.
        let t = tree(&[]);
        assert!(read_rooms(t.path()).is_empty());
        assert_eq!(
            read_mem_available(t.path()).why().map(|u| u.reason),
            Some(Reason::Absent)
        );
        assert!(read_cgroup_room(t.path()).why().is_some());
    }
}
