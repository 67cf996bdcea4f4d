//! Reading the process table: who descends from whom, who is still alive, what shared memory a
//! killed process left.
//!
//! Processes are found by their parent links in `/proc/<pid>/stat`, not by process group or
//! session: PostgreSQL makes every backend a session leader of its own (`setsid` in each child),
//! so only the parent links lead from the postmaster to the backend that serves the client.
//! (`/proc/<pid>/task/<tid>/children` would be cheaper, but needs CONFIG_PROC_CHILDREN, which many
//! kernels, this project's among them, lack.)

use crate::counters::parse::{ProcStat, parse_proc_pid_stat};
use std::path::Path;
use std::time::{Duration, Instant};

/// `/proc/<pid>/stat` under `root`, parsed by the one parser of that file.
fn stat(root: &Path, pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(root.join(format!("proc/{pid}/stat"))).ok()?;
    parse_proc_pid_stat(&text)
}

/// True while `pid` exists and is not a zombie.
pub fn alive(root: &Path, pid: i32) -> bool {
    stat(root, pid).is_some_and(|s| s.state != 'Z')
}

/// Start time of `pid` in clock ticks after boot: with the pid, it names one process for good.
pub fn start_time(root: &Path, pid: i32) -> Option<u64> {
    stat(root, pid).map(|s| s.starttime_ticks)
}

/// Waits until none of `procs` (pid, start time) is still running, at most `timeout`.
pub fn wait_gone(root: &Path, procs: &[(i32, u64)], timeout: Duration) {
    let until = Instant::now() + timeout;
    let running = |&(p, start): &(i32, u64)| start_time(root, p) == Some(start) && alive(root, p);
    while procs.iter().any(running) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `(pid, ppid)` of every process under `root`/proc.
pub fn process_table(root: &Path) -> Vec<(i32, i32)> {
    let Ok(dir) = std::fs::read_dir(root.join("proc")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, stat(root, pid)?.ppid)))
        .collect()
}

/// Every process descending from `pid` (not `pid` itself), found through parent links.
pub fn descendants(root: &Path, pid: i32) -> Vec<i32> {
    descendants_in(&process_table(root), pid)
}

/// [`descendants`] with their start times, to recognise them later.
pub fn descendants_with_start(root: &Path, pid: i32) -> Vec<(i32, u64)> {
    descendants(root, pid)
        .into_iter()
        .filter_map(|p| Some((p, start_time(root, p)?)))
        .collect()
}

/// Pure part of [`descendants`]: walk the parent links of a process table.
pub fn descendants_in(table: &[(i32, i32)], pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        for &(c, pp) in table {
            if pp == p && c != pid && !out.contains(&c) {
                out.push(c);
                frontier.push(c);
            }
        }
    }
    out
}

/// Removes System V shared memory segments created by `pids` that nobody is attached to any
/// more (what a SIGKILLed PostgreSQL leaves behind).
pub fn remove_orphan_shm(root: &Path, pids: &[i32]) {
    let Ok(text) = std::fs::read_to_string(root.join("proc/sysvipc/shm")) else {
        return;
    };
    for (shmid, cpid, nattch) in parse_sysvipc_shm(&text) {
        if nattch == 0 && pids.contains(&cpid) {
            // SAFETY: nix has no System V shared memory wrapper. IPC_RMID takes no buffer.
            unsafe { libc::shmctl(shmid, libc::IPC_RMID, std::ptr::null_mut()) };
        }
    }
}

/// `(shmid, cpid, nattch)` rows of `/proc/sysvipc/shm`.
pub fn parse_sysvipc_shm(text: &str) -> Vec<(i32, i32, u64)> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_ascii_whitespace().collect();
            Some((
                f.get(1)?.parse().ok()?,
                f.get(4)?.parse().ok()?,
                f.get(6)?.parse().ok()?,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_follow_parent_links() {
        let t = [(1, 0), (10, 1), (11, 10), (12, 10), (13, 11), (20, 1)];
        let mut d = descendants_in(&t, 10);
        d.sort();
        assert_eq!(d, vec![11, 12, 13]);
        assert!(descendants_in(&t, 13).is_empty());
    }

    /// A `/proc/<pid>/stat` line with the fields cpulab reads set.
    fn stat_line(pid: i32, name: &str, state: char, ppid: i32, start: u64) -> String {
        format!(
            "{pid} ({name}) {state} {ppid} {pid} {pid} 0 -1 4194560 100 0 0 0 25 7 0 0 20 0 1 0 \
             {start} 1000000 100 1 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0"
        )
    }

    #[test]
    fn reads_a_fixture_process_table() {
        let t = tempfile::tempdir().unwrap();
        for (pid, name, state, ppid, start) in [
            (10, "postgres", 'S', 1, 500),
            (11, "postgres: a) b", 'S', 10, 600),
            (12, "gone", 'Z', 10, 700),
        ] {
            let d = t.path().join(format!("proc/{pid}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("stat"), stat_line(pid, name, state, ppid, start)).unwrap();
        }
        std::fs::create_dir_all(t.path().join("proc/self")).unwrap();
        let mut table = process_table(t.path());
        table.sort();
        assert_eq!(table, vec![(10, 1), (11, 10), (12, 10)]);
        assert_eq!(start_time(t.path(), 11), Some(600));
        assert!(alive(t.path(), 11) && !alive(t.path(), 12) && !alive(t.path(), 13));
        let mut d = descendants_with_start(t.path(), 10);
        d.sort();
        assert_eq!(d, vec![(11, 600), (12, 700)]);
    }

    #[test]
    fn this_process_is_alive() {
        let (root, me) = (Path::new("/"), std::process::id() as i32);
        assert!(start_time(root, me).is_some() && alive(root, me));
    }

    #[test]
    fn sysvipc_rows() {
        let t = "       key      shmid perms                  size  cpid  lpid nattch   uid\n\
                 \x20  5432001         3  600                    56  1234  1240      0   101\n";
        assert_eq!(parse_sysvipc_shm(t), vec![(3, 1234, 0)]);
    }
}
