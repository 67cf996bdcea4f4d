//! Targets that follow the host: with no target named, the most active process groups get
//! their own label, re-ranked every refresh (`crate::watch::rank`), named by unit, container or
//! command (`crate::watch::groups`).
//!
//! **What activity is.** A group's activity over an interval is the voluntary context switches
//! its threads made in it, read from `/proc/PID/task/TID/status`. A voluntary switch is a
//! thread going to sleep, and every sleep ends in a wakeup: so the count stands for the
//! wakeups to come, which is what the exporter counts, at no cost to the scheduler (no BPF).
//! Involuntary switches (preemptions) are left out: a busy loop preempted a thousand times a
//! second is woken by nobody.
//!
//! **What it costs.** One `status` read per thread and interval is the whole price, so it is
//! bounded: at most [`THREAD_READS`] threads are read per refresh. Threads first listed in this
//! refresh come first (a new service is seen at once), then those read longest ago; a thread
//! read after `k` refreshes counts its switches over `k`. Each process's `stat` (kernel thread
//! or not, command) and `cgroup` (its group) are read when it is first seen, again at its next
//! two refreshes (a process is moved into its unit's or container's cgroup, and `exec`s, just
//! after it is born) and every [`REREAD_EVERY`] refreshes after. Kernel threads are never read
//! beyond their `stat`, and never named.
//!
//! A process's `task/` is listed again only when its thread count changed (the directory's
//! link count, one `fstat`), when one of its threads could not be read at the last refresh (it
//! ended: a thread born in the same second is then found a refresh later), and when its `stat`
//! is re-read; and the `status` and `task/` descriptors are held open between refreshes
//! (`crate::watch::held`), so a refresh costs mostly `pread`s and `fstat`s, not opens.

use super::groups::{self, group_name};
use super::held::{self, Held, Key};
use super::rank::Ranking;
use crate::wakeups::GroupBy;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Thread `status` files read per refresh at most.
pub const THREAD_READS: usize = 128;
/// Refreshes between re-reads of a known process's command and cgroup.
pub const REREAD_EVERY: u64 = 30;

/// A process as last read: its group, or none for a kernel thread (or one that ended).
#[derive(Clone, Debug)]
struct Proc {
    group: Option<String>,
    first_seen: u64,
    seen: u64,
    /// Its threads at the last listing of its `task/`, and that directory's link count then.
    tids: Vec<i32>,
    links: Option<u64>,
    /// One of its threads could not be read (it ended): list `task/` again.
    stale: bool,
}

#[derive(Clone, Debug)]
struct Thread {
    pid: i32,
    first_listed: u64,
    /// Voluntary switches at the last read, and that refresh.
    last: Option<(u64, u64)>,
    /// Switches per refresh at the last read.
    rate: u64,
    listed: u64,
}

/// The ranking's state between refreshes, reading /proc under a root.
#[derive(Clone, Debug)]
pub struct Follow {
    root: PathBuf,
    by: GroupBy,
    ranking: Ranking,
    procs: HashMap<i32, Proc>,
    threads: HashMap<i32, Thread>,
    step: u64,
    /// The watcher's own process, left out.
    me: i32,
    /// Descriptors kept open between refreshes.
    held: Held,
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn ids(dir: &Path) -> Vec<i32> {
    std::fs::read_dir(dir).map_or_else(
        |_| Vec::new(),
        |d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        },
    )
}

/// The group of process `pid` under `root` now (none: a kernel thread, or gone).
fn group_at(root: &Path, by: GroupBy, pid: i32) -> Option<String> {
    let dir = root.join("proc").join(pid.to_string());
    let stat = groups::parse_stat(&read(&dir.join("stat"))?)?;
    if stat.kernel_thread() {
        return None;
    }
    let cgroup = read(&dir.join("cgroup")).unwrap_or_default();
    let path = groups::cgroup_path(&cgroup).unwrap_or_else(|| "/".into());
    Some(group_name(&path, &stat.comm, by))
}

impl Follow {
    pub fn new(root: &Path, max: usize, by: GroupBy) -> Self {
        Self {
            root: root.to_path_buf(),
            by,
            ranking: Ranking::new(max),
            procs: HashMap::new(),
            threads: HashMap::new(),
            step: 0,
            me: std::process::id() as i32,
            held: Held::with_cap(held::default_cap()),
        }
    }

    /// The same, holding at most `cap` descriptors open.
    pub fn with_held(root: &Path, max: usize, by: GroupBy, cap: usize) -> Self {
        Self {
            held: Held::with_cap(cap),
            ..Self::new(root, max, by)
        }
    }

    /// The group of process `pid` now (none: a kernel thread, or gone).
    fn group_of(&self, pid: i32) -> Option<String> {
        group_at(&self.root, self.by, pid)
    }

    /// Lists the processes and their threads, reading a process's group when due.
    fn list(&mut self) {
        let step = self.step;
        for pid in ids(&self.root.join("proc")) {
            if pid == self.me {
                continue;
            }
            let due = self.visit(pid);
            let Some(p) = self.procs.get_mut(&pid).filter(|p| p.group.is_some()) else {
                continue;
            };
            let task = self.root.join("proc").join(pid.to_string()).join("task");
            let links = self.held.links(Key::Tasks(pid), &task);
            if links.is_some_and(|l| l < 3) {
                // A live process has a thread: a held task/ with none is of a process that
                // ended, its pid since taken by another. Opened afresh at the next refresh;
                // the newcomer's group is read now, and again at its first refreshes.
                self.held.forget(Key::Tasks(pid));
                p.group = group_at(&self.root, self.by, pid);
                p.first_seen = step;
                p.stale = true;
            }
            // A filesystem that gives a directory one link does not count its subdirectories.
            let counted = links.is_some_and(|l| l >= 2);
            if due || p.stale || !counted || p.links != links {
                p.tids = ids(&task);
                p.links = links;
                p.stale = false;
            }
            for &tid in &p.tids {
                let t = self.threads.entry(tid).or_insert(Thread {
                    pid,
                    first_listed: step,
                    last: None,
                    rate: 0,
                    listed: step,
                });
                t.listed = step;
            }
        }
        self.procs.retain(|_, p| p.seen == step);
        self.threads.retain(|_, t| t.listed == step);
        let (procs, threads) = (&self.procs, &self.threads);
        self.held.retain(|k| match k {
            Key::Tasks(pid) => procs.contains_key(pid),
            Key::Status(tid) => threads.contains_key(tid),
        });
    }

    /// Marks process `pid` seen at this refresh, reading its group when due (first seen, its
    /// next two refreshes, every [`REREAD_EVERY`]); true when it was.
    fn visit(&mut self, pid: i32) -> bool {
        let step = self.step;
        let due = self.procs.get(&pid).is_none_or(|p| {
            let age = step - p.first_seen;
            age <= 2 || age.is_multiple_of(REREAD_EVERY)
        });
        if !due {
            if let Some(p) = self.procs.get_mut(&pid) {
                p.seen = step;
            }
            return false;
        }
        let group = self.group_of(pid);
        let p = self.procs.entry(pid).or_insert(Proc {
            group: None,
            first_seen: step,
            seen: step,
            tids: Vec::new(),
            links: None,
            stale: false,
        });
        p.group = group;
        p.seen = step;
        true
    }

    /// Reads at most [`THREAD_READS`] threads' switches: the newly listed first, then those
    /// read longest ago.
    fn read_threads(&mut self) {
        let step = self.step;
        let mut order: Vec<(u64, i32)> = self
            .threads
            .iter()
            .map(|(tid, t)| {
                let key = match t.last {
                    _ if t.first_listed == step => 0,
                    None => 1,
                    Some((_, at)) => 2 + at,
                };
                (key, *tid)
            })
            .collect();
        order.sort_unstable();
        for &(_, tid) in order.iter().take(THREAD_READS) {
            let Some(t) = self.threads.get(&tid) else {
                continue;
            };
            let pid = t.pid;
            let path = self.root.join(format!("proc/{pid}/task/{tid}/status"));
            let read = self.held.read(Key::Status(tid), &path);
            let Some(now) = read.and_then(groups::voluntary_switches) else {
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.stale = true;
                }
                // It ended: a thread that takes its id later starts from a baseline of its own.
                if let Some(t) = self.threads.get_mut(&tid) {
                    t.last = None;
                }
                continue;
            };
            let Some(t) = self.threads.get_mut(&tid) else {
                continue;
            };
            t.rate = match t.last {
                Some((was, at)) => now.saturating_sub(was) / (step - at).max(1),
                // Born since the last refresh: every switch it made is in this interval. Listed
                // before but never read (the budget), or at the first refresh: a baseline.
                None if t.first_listed == step && step > 1 => now,
                None => 0,
            };
            t.last = Some((now, step));
        }
    }

    /// One refresh: every live group's activity, the ranking stepped, and the processes of the
    /// named groups with their group's name.
    pub fn refresh(&mut self) -> BTreeMap<i32, String> {
        self.step += 1;
        self.list();
        self.read_threads();
        let mut activity: BTreeMap<String, u64> = BTreeMap::new();
        for p in self.procs.values() {
            if let Some(g) = &p.group {
                activity.entry(g.clone()).or_insert(0);
            }
        }
        for t in self.threads.values() {
            let g = self.procs.get(&t.pid).and_then(|p| p.group.as_ref());
            // Every group is in `activity` already: no name copied per thread.
            if let Some(a) = g.and_then(|g| activity.get_mut(g)) {
                *a += t.rate;
            }
        }
        let named = self.ranking.step(&activity);
        self.procs
            .iter()
            .filter_map(|(pid, p)| {
                let g = p.group.as_ref()?;
                named.contains(g).then(|| (*pid, g.clone()))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One process of a fixture: (pid, command, ppid, flags, cgroup path, [(tid, switches)]).
    type Fixture<'a> = (i32, &'a str, i32, u64, &'a str, &'a [(i32, u64)]);

    /// A /proc tree of these processes. Files are written over in place, as a held descriptor
    /// of a /proc file reads the file as it is now; what is no longer there is removed.
    fn write(root: &Path, procs: &[Fixture]) {
        let dirs = |d: &Path| -> Vec<PathBuf> {
            std::fs::read_dir(d)
                .map_or_else(|_| Vec::new(), |r| r.flatten().map(|e| e.path()).collect())
        };
        for old in dirs(&root.join("proc")) {
            let pid = old
                .file_name()
                .and_then(|n| n.to_str()?.parse::<i32>().ok());
            let Some(new) = procs.iter().find(|p| Some(p.0) == pid) else {
                std::fs::remove_dir_all(&old).unwrap();
                continue;
            };
            for t in dirs(&old.join("task")) {
                let tid = t.file_name().and_then(|n| n.to_str()?.parse::<i32>().ok());
                if !new.5.iter().any(|(id, _)| Some(*id) == tid) {
                    std::fs::remove_dir_all(&t).unwrap();
                }
            }
        }
        for (pid, comm, ppid, flags, cgroup, threads) in procs {
            let d = root.join(format!("proc/{pid}"));
            std::fs::create_dir_all(d.join("task")).unwrap();
            let stat = format!("{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 {flags} 0 0 0 0");
            std::fs::write(d.join("stat"), stat).unwrap();
            std::fs::write(d.join("cgroup"), format!("0::{cgroup}\n")).unwrap();
            for (tid, sw) in *threads {
                let t = d.join(format!("task/{tid}"));
                std::fs::create_dir_all(&t).unwrap();
                let status = format!("Name:\t{comm}\nvoluntary_ctxt_switches:\t{sw}\n");
                std::fs::write(t.join("status"), status).unwrap();
            }
        }
    }

    /// True when directories here count their subdirectories in their links (the ranking's
    /// cue to list a process's `task/` again); skipped otherwise.
    fn links_counted(test: &str, root: &Path) -> bool {
        let d = root.join("links");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        let n = std::os::unix::fs::MetadataExt::nlink(&std::fs::metadata(&d).unwrap());
        std::fs::remove_dir_all(&d).unwrap();
        if n < 3 {
            crate::testing::skipped(test, "directories here do not count subdirectories");
        }
        n >= 3
    }

    /// A process in `service.service` past its first refreshes, with these threads.
    fn service(threads: &[(i32, u64)]) -> Fixture<'_> {
        (
            500,
            "svc",
            1,
            0x400100,
            "/system.slice/service.service",
            threads,
        )
    }

    /// A process of `other.service` that took the service's pid.
    fn other(threads: &[(i32, u64)]) -> Fixture<'_> {
        (
            500,
            "other",
            1,
            0x400100,
            "/system.slice/other.service",
            threads,
        )
    }

    /// Between two refreshes the service's process ends, so that another may take its pid: a
    /// held task/ is of the one that ended, and counts no thread (2 links, as /proc gives it).
    fn end_the_service(root: &Path) {
        let gone = root.join("gone");
        std::fs::rename(root.join("proc/500"), &gone).unwrap();
        for tid in [500, 501] {
            std::fs::remove_dir_all(gone.join(format!("task/{tid}"))).unwrap();
        }
    }

    /// Refreshes `f` until the service is past the re-reads of its first refreshes.
    fn settle(f: &mut Follow) {
        for _ in 0..4 {
            assert!(f.refresh().is_empty(), "an idle service is never named");
        }
    }

    #[test]
    fn a_thread_born_into_a_known_process_is_listed_and_counted_from_its_birth() {
        let t = tempfile::tempdir().unwrap();
        let test = "a_thread_born_into_a_known_process_is_listed_and_counted_from_its_birth";
        if !links_counted(test, t.path()) {
            return;
        }
        write(t.path(), &[service(&[(500, 3), (501, 3)])]);
        let mut f = Follow::with_held(t.path(), 2, GroupBy::Auto, 64);
        settle(&mut f);
        write(t.path(), &[service(&[(500, 3), (501, 3), (502, 900)])]);
        let m = f.refresh();
        assert_eq!(m.get(&500).map(String::as_str), Some("service.service"));
        assert!(
            f.held.count() >= 4,
            "task/ and three status held: {}",
            f.held.count()
        );
        write(t.path(), &[]);
        assert!(f.refresh().is_empty());
        assert_eq!(
            f.held.count(),
            0,
            "an ended process's descriptors are closed"
        );
    }

    #[test]
    fn a_pid_taken_by_a_new_process_has_its_task_opened_afresh() {
        let t = tempfile::tempdir().unwrap();
        if !links_counted(
            "a_pid_taken_by_a_new_process_has_its_task_opened_afresh",
            t.path(),
        ) {
            return;
        }
        write(t.path(), &[service(&[(500, 3), (501, 3)])]);
        let mut f = Follow::with_held(t.path(), 2, GroupBy::Auto, 64);
        settle(&mut f);
        end_the_service(t.path());
        write(t.path(), &[service(&[(500, 3), (502, 0)])]);
        assert!(f.refresh().is_empty());
        // It starts a thread: seen through its own task/, not the ended one's.
        write(t.path(), &[service(&[(500, 3), (502, 0), (503, 900)])]);
        let m = f.refresh();
        assert_eq!(m.get(&500).map(String::as_str), Some("service.service"));
    }

    #[test]
    fn a_pid_taken_by_a_process_of_another_unit_is_named_by_its_own_unit() {
        let t = tempfile::tempdir().unwrap();
        let test = "a_pid_taken_by_a_process_of_another_unit_is_named_by_its_own_unit";
        if !links_counted(test, t.path()) {
            return;
        }
        write(t.path(), &[service(&[(500, 3), (501, 3)])]);
        let mut f = Follow::with_held(t.path(), 2, GroupBy::Auto, 64);
        settle(&mut f);
        // One of another unit takes the pid and keeps busy.
        end_the_service(t.path());
        write(t.path(), &[other(&[(500, 3), (502, 0)])]);
        f.refresh();
        let mut named = Vec::new();
        for sw in [900, 1800, 2700] {
            write(t.path(), &[other(&[(500, 3), (502, sw)])]);
            named.push(f.refresh().get(&500).cloned());
        }
        assert!(
            named.iter().flatten().all(|g| g == "other.service"),
            "the newcomer is named by the ended process's unit: {named:?}"
        );
        assert_eq!(named.last(), Some(&Some("other.service".to_string())));
    }

    #[test]
    fn task_is_listed_again_when_a_thread_cannot_be_read_not_while_the_count_holds() {
        let t = tempfile::tempdir().unwrap();
        let test = "task_is_listed_again_when_a_thread_cannot_be_read_not_while_the_count_holds";
        if !links_counted(test, t.path()) {
            return;
        }
        write(t.path(), &[service(&[(500, 3), (501, 3)])]);
        // Nothing held: a thread that ended reads an error, as a held /proc descriptor would.
        let mut f = Follow::with_held(t.path(), 2, GroupBy::Auto, 0);
        settle(&mut f);
        // 501 ends and 502 is born between two refreshes: the same count.
        write(t.path(), &[service(&[(500, 3), (502, 900)])]);
        assert!(
            f.refresh().is_empty(),
            "the count held: task/ not listed, 502 unseen, 501 unreadable"
        );
        let m = f.refresh();
        assert_eq!(
            m.get(&500).map(String::as_str),
            Some("service.service"),
            "listed again: 502 counted from its birth"
        );
    }

    /// A thread whose `status` could not be read had ended as far as the ranking knows: one
    /// that answers under its id later (the id taken by a new thread, or a read that failed
    /// once) starts from a baseline of its own, rather than having the switches since its
    /// last good read counted as its rate, as a thread read late for the budget does.
    #[test]
    fn a_thread_read_again_after_a_failed_read_starts_from_its_own_baseline() {
        let t = tempfile::tempdir().unwrap();
        let status = t.path().join("proc/500/task/501/status");
        write(t.path(), &[service(&[(500, 3), (501, 3)])]);
        // Nothing held: a removed file reads an error, as a held /proc descriptor of a thread
        // that ended would.
        let mut f = Follow::with_held(t.path(), 2, GroupBy::Auto, 0);
        settle(&mut f);
        std::fs::remove_file(&status).unwrap();
        assert!(f.refresh().is_empty());
        // It answers again, 4,000 switches on.
        write(t.path(), &[service(&[(500, 3), (501, 4_003)])]);
        assert!(
            f.refresh().is_empty(),
            "the switches across the gap are not this refresh's"
        );
        assert_eq!(f.threads[&501].rate, 0, "a baseline, not a rate");
        // From its new baseline it counts as any thread does.
        write(t.path(), &[service(&[(500, 3), (501, 4_903)])]);
        let m = f.refresh();
        assert_eq!(f.threads[&501].rate, 900);
        assert_eq!(m.get(&500).map(String::as_str), Some("service.service"));
    }

    #[test]
    fn busy_groups_are_named_by_unit_and_kernel_threads_never() {
        let t = tempfile::tempdir().unwrap();
        let pg = "/system.slice/postgresql.service";
        let host = |pg_switches: u64, kw: u64, born: bool| {
            let mut v: Vec<Fixture> = vec![
                (2, "kthreadd", 0, 0x208040, "/", &[(2, 0)]),
                (40, "kworker/0:1", 2, 0x4208060, "/", &[]),
                (100, "postgres", 1, 0x400100, pg, &[]),
                (101, "postgres", 100, 0x400100, pg, &[]),
            ];
            v[1].5 = if kw > 0 {
                &[(40, 1_000_000)]
            } else {
                &[(40, 5)]
            };
            v[2].5 = if pg_switches > 0 {
                &[(100, 1_000)]
            } else {
                &[(100, 10)]
            };
            if born {
                v.push((
                    300,
                    "pingpong",
                    1,
                    0x400100,
                    "/",
                    &[(300, 7_000), (301, 7_000)],
                ));
            }
            v
        };
        write(t.path(), &host(0, 0, false));
        let mut f = Follow::new(t.path(), 4, GroupBy::Auto);
        assert!(f.refresh().is_empty(), "the first refresh is a baseline");
        write(t.path(), &host(1, 1, false));
        let m = f.refresh();
        assert_eq!(m.get(&100).map(String::as_str), Some("postgresql.service"));
        assert_eq!(m.get(&101).map(String::as_str), Some("postgresql.service"));
        assert!(
            !m.contains_key(&40) && !m.contains_key(&2),
            "kernel threads: {m:?}"
        );
        // Started since: its threads' switches since birth rank it at its first refresh.
        write(t.path(), &host(1, 1, true));
        let m = f.refresh();
        assert_eq!(m.get(&300).map(String::as_str), Some("pingpong"));
        // It ends: gone from the members, and from the ranking.
        write(t.path(), &host(1, 1, false));
        let m = f.refresh();
        assert!(!m.contains_key(&300));
        assert_eq!(f.ranking.named(), ["postgresql.service"]);
    }
}
