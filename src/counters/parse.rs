//! Pure parsers for the kernel's counter files, tested on literal text.

use std::collections::BTreeMap;

/// One CPU's line of `/proc/stat`, in clock ticks (USER_HZ).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CpuTimes {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
}

impl CpuTimes {
    pub fn total(&self) -> u64 {
        self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
    }

    /// Ticks spent doing something other than idling (steal excluded: that is the host's).
    pub fn busy(&self) -> u64 {
        self.user + self.nice + self.system + self.irq + self.softirq
    }
}

/// `/proc/stat` per-CPU lines (`cpuN ...`), keyed by CPU number. The aggregate `cpu` line and
/// malformed lines are skipped.
pub fn parse_proc_stat(text: &str) -> BTreeMap<u32, CpuTimes> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let mut f = line.split_ascii_whitespace();
        let Some(name) = f.next() else { continue };
        let Some(id) = name.strip_prefix("cpu").and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let v: Vec<u64> = f.filter_map(|x| x.parse().ok()).collect();
        if v.len() < 4 {
            continue;
        }
        let g = |i: usize| v.get(i).copied().unwrap_or(0);
        out.insert(
            id,
            CpuTimes {
                user: g(0),
                nice: g(1),
                system: g(2),
                idle: g(3),
                iowait: g(4),
                irq: g(5),
                softirq: g(6),
                steal: g(7),
            },
        );
    }
    out
}

/// `/proc/interrupts`: for each row, its name and per-CPU counts, in the column order of the
/// header (`CPU0 CPU1 ...`), returned as a map from CPU number to count. Numeric rows (device
/// IRQs) are summed into `"device"`; named rows (`RES`, `CAL`, `TLB`, `LOC`, ...) keep their name.
pub fn parse_interrupts(text: &str) -> BTreeMap<String, BTreeMap<u32, u64>> {
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return BTreeMap::new();
    };
    let cols: Vec<u32> = header
        .split_ascii_whitespace()
        .filter_map(|h| h.strip_prefix("CPU").and_then(|n| n.parse().ok()))
        .collect();
    let mut out: BTreeMap<String, BTreeMap<u32, u64>> = BTreeMap::new();
    for line in lines {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let name = name.trim();
        let key = if name.chars().all(|c| c.is_ascii_digit()) {
            "device".to_string()
        } else {
            name.to_string()
        };
        let counts = rest
            .split_ascii_whitespace()
            .take(cols.len())
            .map_while(|x| x.parse::<u64>().ok());
        let row = out.entry(key).or_default();
        for (cpu, n) in cols.iter().zip(counts) {
            *row.entry(*cpu).or_insert(0) += n;
        }
    }
    out
}

/// Context switches from `/proc/<pid>/status` (or `/proc/<pid>/task/<tid>/status`):
/// `(voluntary, nonvoluntary)`.
pub fn parse_status_ctxt(text: &str) -> Option<(u64, u64)> {
    let mut vol = None;
    let mut invol = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("voluntary_ctxt_switches:") {
            vol = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("nonvoluntary_ctxt_switches:") {
            invol = v.trim().parse().ok();
        }
    }
    Some((vol?, invol?))
}

/// `se.nr_migrations` from `/proc/<pid>/sched` (present with CONFIG_SCHED_DEBUG).
pub fn parse_sched_migrations(text: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "se.nr_migrations")
            .then(|| v.trim().parse().ok())
            .flatten()
    })
}

/// Fields of `/proc/<pid>/stat` that cpulab uses. This is the one parser of that file: the
/// counters, the process tree walk and the clean-up all read it here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 3: `R`, `S`, `D`, `Z` (zombie), ...
    pub state: char,
    /// Field 4.
    pub ppid: i32,
    /// Field 14: user time in clock ticks.
    pub utime_ticks: u64,
    /// Field 15: system time in clock ticks.
    pub stime_ticks: u64,
    /// Fields 16 and 17: user and system time of the children it has waited for.
    pub reaped_children_ticks: u64,
    /// Field 22: start time in clock ticks after boot; with the pid it names one task for good.
    pub starttime_ticks: u64,
    /// CPU the task last ran on (field 39).
    pub processor: u32,
}

/// Parses `/proc/<pid>/stat`. The command name may contain spaces and parentheses, so fields
/// are counted from the last `)`.
pub fn parse_proc_pid_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    // rest starts at field 3 (state); field N is f[N - 3].
    let get = |n: usize| f.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    Some(ProcStat {
        state: f.first()?.chars().next()?,
        ppid: f.get(1).and_then(|v| v.parse().ok())?,
        utime_ticks: get(14)?,
        stime_ticks: get(15)?,
        reaped_children_ticks: get(16)? + get(17)?,
        starttime_ticks: get(22)?,
        processor: u32::try_from(get(39)?).ok()?,
    })
}

/// One cpuidle state's counters (`/sys/devices/system/cpu/cpuN/cpuidle/stateM/{name,usage,time}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IdleStateCount {
    pub name: String,
    /// Times the state was entered.
    pub usage: u64,
    /// Microseconds spent in the state.
    pub time_us: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 0 50 1000 2 0 3 7 0 0\n\
cpu0 60 0 30 500 1 0 2 4 0 0\n\
cpu1 40 0 20 500 1 0 1 3 0 0\n\
intr 12345\nctxt 999\n";

    #[test]
    fn proc_stat_per_cpu() {
        let m = parse_proc_stat(STAT);
        assert_eq!(m.len(), 2);
        assert_eq!(m[&0].user, 60);
        assert_eq!(m[&1].steal, 3);
        assert_eq!(m[&0].busy(), 60 + 30 + 2);
    }

    const INTERRUPTS: &str = "           CPU0       CPU1       \n\
 24:          1          0  IO-APIC   5-edge      ACPI:Ged\n\
 36:          0       4539 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0\n\
NMI:          0          0   Non-maskable interrupts\n\
LOC:       5794       6014   Local timer interrupts\n\
RES:       2134       3188   Rescheduling interrupts\n\
CAL:      19389      18825   Function call interrupts\n\
ERR:          0\n";

    #[test]
    fn interrupts_by_type_and_cpu() {
        let m = parse_interrupts(INTERRUPTS);
        assert_eq!(m["RES"][&1], 3188);
        assert_eq!(m["CAL"][&0], 19389);
        assert_eq!(m["device"][&0], 1);
        assert_eq!(m["device"][&1], 4539);
        assert_eq!(m["ERR"].get(&0), Some(&0));
    }

    #[test]
    fn status_context_switches() {
        let s = "Name:\tcat\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(parse_status_ctxt(s), Some((12, 3)));
        assert_eq!(parse_status_ctxt("Name: x\n"), None);
    }

    #[test]
    fn sched_migrations() {
        let s = "cat (1664, #threads: 1)\n---\nse.exec_start   :  91687.685568\nse.nr_migrations    :   7\n";
        assert_eq!(parse_sched_migrations(s), Some(7));
    }

    #[test]
    fn pid_stat_with_spaces_in_name() {
        let s = "1234 (my (odd) prog) S 1 1234 1234 0 -1 4194560 100 0 0 0 25 7 3 4 20 0 1 0 1000 \
                 1000000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let p = parse_proc_pid_stat(s).unwrap();
        assert_eq!(p.ppid, 1);
        assert_eq!(p.utime_ticks, 25);
        assert_eq!(p.stime_ticks, 7);
        assert_eq!(p.reaped_children_ticks, 3 + 4);
        assert_eq!(p.processor, 1);
        assert_eq!((p.state, p.starttime_ticks), ('S', 1000));
        assert_eq!(parse_proc_pid_stat("1234 (short) S 1 2 3"), None);
    }
}
