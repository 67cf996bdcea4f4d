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
