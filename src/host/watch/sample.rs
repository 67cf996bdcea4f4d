//! One look at a vCPU thread from /proc, and the window of looks that gives its figures: where
//! it ran (its on-CPU time split by the CPU `stat` names at each look), how often it moved,
//! its run time and run-queue wait (`schedstat`), its affinity at the start and the end.

use super::discover::parse_stat;
use std::collections::BTreeMap;
use std::path::Path;

/// A thread at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Look {
    pub state: char,
    pub cpu: u32,
    pub run_ns: u64,
    pub wait_ns: u64,
    /// `se.nr_migrations` from `sched`, where the kernel has it (CONFIG_SCHED_DEBUG).
    pub migrations: Option<u64>,
}

/// `se.nr_migrations` from a thread's `sched` file.
pub fn parse_nr_migrations(sched: &str) -> Option<u64> {
    sched.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "se.nr_migrations").then(|| v.trim().parse().ok())?
    })
}

/// `Cpus_allowed_list` from a `status` file.
pub fn parse_allowed(status: &str) -> Option<String> {
    status.lines().find_map(|l| {
        l.strip_prefix("Cpus_allowed_list:")
            .map(|v| v.trim().to_string())
    })
}

/// `voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` from a `status` file.
pub fn parse_switches(status: &str) -> Option<(u64, u64)> {
    let get = |k: &str| {
        status.lines().find_map(|l| {
            l.strip_prefix(k)
                .and_then(|v| v.trim_start_matches(':').trim().parse().ok())
        })
    };
    Some((
        get("voluntary_ctxt_switches")?,
        get("nonvoluntary_ctxt_switches")?,
    ))
}

/// A thread's affinity and context switches now, from its `status`.
pub fn status(root: &Path, pid: i32, tid: i32) -> Option<(String, Option<(u64, u64)>)> {
    let s = std::fs::read_to_string(root.join(format!("proc/{pid}/task/{tid}/status"))).ok()?;
    Some((parse_allowed(&s)?, parse_switches(&s)))
}

/// Looks at thread `tid` of `pid`; `None` once it has gone.
pub fn look(root: &Path, pid: i32, tid: i32) -> Option<Look> {
    let dir = root.join(format!("proc/{pid}/task/{tid}"));
    let (state, cpu) = parse_stat(&std::fs::read_to_string(dir.join("stat")).ok()?)?;
    let ss = std::fs::read_to_string(dir.join("schedstat")).ok()?;
    let mut w = ss.split_whitespace().map(|x| x.parse::<u64>().ok());
    let (run_ns, wait_ns) = (w.next()??, w.next()??);
    let migrations = std::fs::read_to_string(dir.join("sched"))
        .ok()
        .and_then(|s| parse_nr_migrations(&s));
    Some(Look {
        state,
        cpu,
        run_ns,
        wait_ns,
        migrations,
    })
}

/// Every thread's run time (`schedstat`) and the CPU it was last on (`stat`) now, by (pid, tid):
/// two of these a window apart say what else ran on a host CPU beside the vCPUs. A thread that
/// ends or cannot be read is left out.
pub fn all_threads(root: &Path) -> BTreeMap<(i32, i32), (u64, u32)> {
    let mut out = BTreeMap::new();
    let id = |e: &std::fs::DirEntry| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok());
    let Ok(procs) = std::fs::read_dir(root.join("proc")) else {
        return out;
    };
    for p in procs.flatten() {
        let Some(pid) = id(&p) else { continue };
        let Ok(tasks) = std::fs::read_dir(p.path().join("task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Some(tid) = id(&t) else { continue };
            let run = std::fs::read_to_string(t.path().join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok());
            let cpu = std::fs::read_to_string(t.path().join("stat"))
                .ok()
                .and_then(|s| parse_stat(&s))
                .map(|(_, c)| c);
            if let (Some(run), Some(cpu)) = (run, cpu) {
                out.insert((pid, tid), (run, cpu));
            }
        }
    }
    out
}

/// What ran on each CPU over the window besides the threads in `skip` (pure): each thread's run
/// time between the two readings, put on the CPU the later one names, as a share of `secs`;
/// the `top` largest per CPU of at least `floor`, largest first. A thread that moved has all its
/// time put on its last CPU (so a share here is the CPU its time ended on, an approximation the
/// report names).
pub fn others_by_cpu(
    before: &BTreeMap<(i32, i32), (u64, u32)>,
    after: &BTreeMap<(i32, i32), (u64, u32)>,
    skip: &std::collections::BTreeSet<i32>,
    secs: f64,
    (top, floor): (usize, f64),
) -> BTreeMap<u32, Vec<(i32, i32, f64)>> {
    let mut by: BTreeMap<u32, Vec<(i32, i32, f64)>> = BTreeMap::new();
    if secs <= 0.0 {
        return by;
    }
    for (&(pid, tid), &(run, cpu)) in after {
        if skip.contains(&tid) {
            continue;
        }
        // A thread born in the window ran all of its run time in it.
        let start = before.get(&(pid, tid)).map_or(0, |b| b.0);
        let share = run.saturating_sub(start) as f64 / 1e9 / secs;
        if share >= floor {
            by.entry(cpu).or_default().push((pid, tid, share));
        }
    }
    for v in by.values_mut() {
        v.sort_by(|a, b| b.2.total_cmp(&a.2));
        v.truncate(top);
    }
    by
}

/// A thread's affinity now.
pub fn affinity(root: &Path, pid: i32, tid: i32) -> Option<String> {
    std::fs::read_to_string(root.join(format!("proc/{pid}/task/{tid}/status")))
        .ok()
        .and_then(|s| parse_allowed(&s))
}

/// What the looks at one thread add up to over a window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Track {
    pub first: Option<Look>,
    pub last: Option<Look>,
    /// On-CPU ns between looks, put on the CPU the later look names.
    pub on_cpu_ns: BTreeMap<u32, u64>,
    /// Looks that found it on another CPU than the look before.
    pub moves_seen: u64,
    pub looks: u64,
}

impl Track {
    pub fn add(&mut self, l: Look) {
        if let Some(p) = self.last {
            let ran = l.run_ns.saturating_sub(p.run_ns);
            *self.on_cpu_ns.entry(l.cpu).or_default() += ran;
            if l.cpu != p.cpu {
                self.moves_seen += 1;
            }
        }
        self.first.get_or_insert(l);
        self.last = Some(l);
        self.looks += 1;
    }

    /// Run and wait ns over the window, and the kernel's migrations where it counts them.
    pub fn totals(&self) -> Option<(u64, u64, Option<u64>)> {
        let (a, b) = (self.first?, self.last?);
        Some((
            b.run_ns.checked_sub(a.run_ns)?,
            b.wait_ns.checked_sub(a.wait_ns)?,
            match (a.migrations, b.migrations) {
                (Some(x), Some(y)) => y.checked_sub(x),
                _ => None,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sched_and_status_fields() {
        let sched = "CPU 0/KVM (4242, #threads: 3)\n----\nse.exec_start : 1.0\nse.nr_migrations                             :                   17\nnr_switches : 9\n";
        assert_eq!(parse_nr_migrations(sched), Some(17));
        assert_eq!(parse_nr_migrations("nr_switches : 9\n"), None);
        assert_eq!(
            parse_allowed("Name:\tx\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\n"),
            Some("0-1".into())
        );
        let st = "Name:\tx\nvoluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n";
        assert_eq!(parse_switches(st), Some((120, 7)));
        assert_eq!(parse_switches("Name:\tx\n"), None);
    }

    #[test]
    fn a_track_puts_run_time_on_the_cpu_seen_and_counts_moves() {
        let l = |cpu, run_ns| Look {
            state: 'R',
            cpu,
            run_ns,
            wait_ns: run_ns / 2,
            migrations: Some(run_ns / 100),
        };
        let mut t = Track::default();
        for (cpu, run) in [(0, 100), (0, 300), (1, 600), (1, 700), (0, 1000)] {
            t.add(l(cpu, run));
        }
        assert_eq!(t.on_cpu_ns.get(&0), Some(&(200 + 300)));
        assert_eq!(t.on_cpu_ns.get(&1), Some(&(300 + 100)));
        assert_eq!(t.moves_seen, 2);
        assert_eq!(t.totals(), Some((900, 450, Some(9))));
        // The split adds up to the run time.
        assert_eq!(t.on_cpu_ns.values().sum::<u64>(), 900);
    }
}

#[cfg(test)]
mod others_tests {
    use super::*;

    #[test]
    fn what_else_ran_is_put_on_its_last_cpu_largest_first_and_vcpus_left_out() {
        let before = BTreeMap::from([
            ((1, 1), (1_000_000_000, 0)),
            ((5, 6), (0, 1)),
            ((7, 8), (500, 1)),
            ((9, 9), (0, 0)),
        ]);
        let after = BTreeMap::from([
            // 0.3 s of 2 s on CPU 0.
            ((1, 1), (1_600_000_000, 0)),
            // A vCPU thread: skipped.
            ((5, 6), (1_900_000_000, 1)),
            // Moved to CPU 0: all of its 0.1 s put there.
            ((7, 8), (200_000_500, 0)),
            // Born in the window: all its run time counts.
            ((10, 11), (40_000_000, 1)),
            // Below the floor.
            ((9, 9), (1_000, 0)),
        ]);
        let skip = std::collections::BTreeSet::from([6]);
        let by = others_by_cpu(&before, &after, &skip, 2.0, (3, 0.01));
        assert_eq!(by[&0], vec![(1, 1, 0.3), (7, 8, 0.1)]);
        assert_eq!(by[&1], vec![(10, 11, 0.02)]);
        assert!(others_by_cpu(&before, &after, &skip, 0.0, (3, 0.01)).is_empty());
        // A counter read lower later (another thread took the id) is no negative time.
        let back = BTreeMap::from([((1, 1), (10, 0))]);
        assert!(others_by_cpu(&before, &back, &skip, 2.0, (3, 0.0))[&0][0].2 == 0.0);
    }
}
