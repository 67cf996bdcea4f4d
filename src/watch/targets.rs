//! Which tasks are watched, who they are, and the system state a watch borrows.
//!
//! A watch observes a running application, so its target is named the ways operators name
//! one: process ids, command names, a cgroup, or a command cpulab starts itself. Each becomes a
//! predicate over a task's process, evaluated once per thread and cached ([`LiveTasks`]): the
//! analysis asks about every event's tasks, and /proc is read only the first time a thread is
//! seen.
//!
//! The child of `watch -- COMMAND` ends with cpulab ([`Child`]); tracefs, which the watch also
//! needs, is read without changing the machine's mounts (`super::tracefs`).

use super::analyze::{TaskInfo, Tasks};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// What to watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Every task, grouped by process name.
    All,
    Pids(BTreeSet<i32>),
    Comms(BTreeSet<String>),
    /// The processes in a cgroup directory (re-read as the watch goes).
    Cgroup(PathBuf),
    /// A command cpulab started: its process and its descendants.
    Command(i32),
}

impl Target {
    pub fn describe(&self) -> String {
        let join = |v: Vec<String>| v.join(",");
        match self {
            Self::All => "whole machine".into(),
            Self::Pids(p) => format!("pid {}", join(p.iter().map(|p| p.to_string()).collect())),
            Self::Comms(c) => format!("comm {}", join(c.iter().cloned().collect())),
            Self::Cgroup(p) => format!("cgroup {}", p.display()),
            Self::Command(p) => format!("command (pid {p})"),
        }
    }
}

/// The kernel keeps this many bytes of a task's name (`TASK_COMM_LEN` less its NUL): a longer
/// name given to match /proc/PID/comm would match nothing.
pub const COMM_MAX: usize = 15;

/// `--pid` values (`flag` names the option in messages): process ids that exist under `root`.
/// A value that is not a positive number, or a process that is not there, is one line naming
/// it and the fix.
pub fn parse_pids(values: &[String], root: &Path, flag: &str) -> Result<BTreeSet<i32>, String> {
    let mut pids = BTreeSet::new();
    for v in values {
        let pid: i32 = v
            .trim()
            .parse()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("{flag} `{v}` is not a process id; give one like `1234`"))?;
        if !root.join("proc").join(pid.to_string()).is_dir() {
            return Err(format!(
                "{flag} {pid}: no such process (it may have exited); check it with `ps -p {pid}`"
            ));
        }
        pids.insert(pid);
    }
    Ok(pids)
}

/// `--comm` values: names as /proc/PID/comm holds them. An empty name, or one longer than the
/// kernel keeps (which no task can have), is one line; the second names the 15 bytes to give.
pub fn parse_comms(values: &[String], flag: &str) -> Result<BTreeSet<String>, String> {
    let mut comms = BTreeSet::new();
    for v in values {
        let name = v.trim();
        if name.is_empty() {
            return Err(format!(
                "{flag} has an empty name; give process names as in /proc/PID/comm, like \
                 `postgres,pgbench`"
            ));
        }
        if name.len() > COMM_MAX {
            let mut cut = COMM_MAX;
            while !name.is_char_boundary(cut) {
                cut -= 1;
            }
            return Err(format!(
                "{flag} `{name}`: the kernel keeps only the first {COMM_MAX} bytes of a process \
                 name, so this one matches nothing; give `{}` (see `ps -o comm`)",
                &name[..cut]
            ));
        }
        comms.insert(name.to_string());
    }
    Ok(comms)
}

/// The parts of /proc/<tid>/status cpulab reads: (Tgid, PPid).
pub fn parse_status(text: &str) -> Option<(i32, i32)> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<i32>().ok())
    };
    Some((field("Tgid:")?, field("PPid:")?))
}

/// Process ids listed in a cgroup's `cgroup.procs`.
pub fn parse_procs(text: &str) -> BTreeSet<i32> {
    text.split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Tasks resolved from /proc under a root, cached per thread.
pub struct LiveTasks {
    root: PathBuf,
    target: Target,
    cgroup_pids: BTreeSet<i32>,
    cache: HashMap<i32, Option<TaskInfo>>,
}

impl LiveTasks {
    pub fn new(root: &Path, target: Target) -> Self {
        let mut t = Self {
            root: root.to_path_buf(),
            target,
            cgroup_pids: BTreeSet::new(),
            cache: HashMap::new(),
        };
        t.refresh();
        t
    }

    /// Re-reads a cgroup's members (new processes join while watching).
    pub fn refresh(&mut self) {
        if let Target::Cgroup(dir) = &self.target {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            let now = parse_procs(&procs);
            if now != self.cgroup_pids {
                self.cgroup_pids = now;
                self.cache
                    .retain(|_, v| v.as_ref().is_some_and(|i| i.watched));
            }
        }
    }

    /// True when process `p` is `ancestor` or one of its descendants (up to 32 generations).
    fn descends_from(&self, mut p: i32, ancestor: i32) -> bool {
        for _ in 0..32 {
            if p == ancestor {
                return true;
            }
            if p <= 1 {
                return false;
            }
            let path = self.root.join("proc").join(p.to_string()).join("status");
            match std::fs::read_to_string(path)
                .ok()
                .as_deref()
                .and_then(parse_status)
            {
                Some((_, ppid)) => p = ppid,
                None => return false,
            }
        }
        false
    }

    fn read(&self, tid: i32) -> Option<TaskInfo> {
        let proc = self.root.join("proc");
        let status = std::fs::read_to_string(proc.join(tid.to_string()).join("status")).ok()?;
        let (tgid, ppid) = parse_status(&status)?;
        Some(self.info(tgid, ppid))
    }

    /// What is known of process `tgid` (parent `ppid`): its name, and whether it is watched.
    fn info(&self, tgid: i32, ppid: i32) -> TaskInfo {
        let proc = self.root.join("proc");
        let comm = std::fs::read_to_string(proc.join(tgid.to_string()).join("comm"))
            .map(|c| c.trim().to_string())
            .unwrap_or_else(|_| "?".into());
        let watched = tgid != std::process::id() as i32
            && match &self.target {
                Target::All => true,
                Target::Pids(p) => p.contains(&tgid),
                Target::Comms(c) => c.contains(&comm),
                Target::Cgroup(_) => self.cgroup_pids.contains(&tgid),
                Target::Command(pid) => tgid == *pid || self.descends_from(ppid, *pid),
            };
        TaskInfo {
            tgid,
            comm,
            watched,
        }
    }
}

impl Tasks for LiveTasks {
    fn lookup(&mut self, tid: i32) -> Option<TaskInfo> {
        if tid <= 0 {
            return None;
        }
        if let Some(hit) = self.cache.get(&tid) {
            return hit.clone();
        }
        let info = self.read(tid);
        self.cache.insert(tid, info.clone());
        info
    }

    fn learn(&mut self, tid: i32, tgid: i32) {
        if tid <= 0 || matches!(self.cache.get(&tid), Some(Some(_))) {
            return;
        }
        // The thread may be gone already; its process usually is not. The parent only matters
        // for a command's descendants, read from the process itself.
        let ppid =
            std::fs::read_to_string(self.root.join("proc").join(tgid.to_string()).join("status"))
                .ok()
                .as_deref()
                .and_then(parse_status)
                .map_or(0, |(_, ppid)| ppid);
        let info = self.info(tgid, ppid);
        self.cache.insert(tid, Some(info));
    }
}

/// The child of `watch -- COMMAND`: run without a shell, in its own process group, and ended
/// with everything it started when the watch ends or cpulab does (`crate::signals::started`).
/// Its standard output goes to cpulab's stderr (`output::started_command_stdout`), so stdout
/// holds only the watch's own result.
pub struct Child(pub crate::signals::started::Started);

impl Child {
    pub fn spawn(argv: &[String]) -> Result<Self, String> {
        let (prog, args) = argv.split_first().ok_or("no command after `--`")?;
        let stdout = crate::output::started_command_stdout()
            .map_err(|e| format!("cannot give `{prog}` cpulab's stderr as its output: {e}"))?;
        let mut cmd = std::process::Command::new(prog);
        cmd.args(args).stdout(stdout);
        crate::signals::started::Started::spawn(&mut cmd)
            .map(Self)
            .map_err(|e| format!("cannot run `{prog}`: {e}"))
    }

    pub fn pid(&self) -> i32 {
        self.0.pid()
    }

    /// True once the command has exited.
    pub fn exited(&mut self) -> bool {
        self.0.try_wait().is_some()
    }

    /// How the command ended, asked just before the watch stops it: its own exit status or
    /// signal if it had ended by itself, else stopped by cpulab because the window ended `why`.
    pub fn end(&mut self, why: &str) -> CommandEnd {
        match self.0.try_wait() {
            Some(status) => CommandEnd::of(status),
            None => CommandEnd::StoppedByCpulab {
                why: why.to_string(),
            },
        }
    }
}

/// How the command of `watch -- COMMAND` ended (the report's `command`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "how", rename_all = "snake_case")]
pub enum CommandEnd {
    /// It exited by itself with this status.
    Exited { status: i32 },
    /// A signal that was not cpulab's ended it (a crash, the OOM killer, another user's kill).
    Killed { signal: i32, name: String },
    /// It still ran when the watch ended (`--duration` elapsed, Ctrl-C): cpulab stopped it, so
    /// how it ended is not its failure.
    StoppedByCpulab { why: String },
}

impl CommandEnd {
    /// From the status the kernel gave when the command was reaped.
    pub fn of(status: std::process::ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(status), _) => Self::Exited { status },
            (None, Some(signal)) => Self::Killed {
                signal,
                name: nix::sys::signal::Signal::try_from(signal)
                    .map_or("an unnamed signal", |s| s.as_str())
                    .to_string(),
            },
            // A reaped process either exited or was killed; a raw status says which if not.
            (None, None) => Self::Exited {
                status: status.into_raw(),
            },
        }
    }

    /// The status cpulab exits with after its report: the command's own when it failed by
    /// itself (128 + S for a signal S, as a shell says), `None` (exit 0) when it succeeded or
    /// cpulab stopped it.
    pub fn passed_on(&self) -> Option<u8> {
        let code = match self {
            Self::Exited { status } => *status,
            Self::Killed { signal, .. } => 128 + signal,
            Self::StoppedByCpulab { .. } => 0,
        };
        // An exit status is one byte; a value outside it (none on Linux) still says failure.
        (code != 0).then(|| u8::try_from(code).unwrap_or(1))
    }

    /// In words, for the report: `exited with status 3`.
    pub fn describe(&self) -> String {
        match self {
            Self::Exited { status } => format!("exited with status {status}"),
            Self::Killed { signal, name } => format!("killed by signal {signal} ({name})"),
            Self::StoppedByCpulab { why } => {
                format!("stopped by cpulab when the watch ended ({why}); not its own failure")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_and_comm_flags_are_checked_once_for_every_command() {
        let t = crate::testing::tree(&[("proc/42/comm", "postgres\n")]);
        let ok = parse_pids(&[" 42".into()], t.path(), "--pid").unwrap();
        assert_eq!(ok, BTreeSet::from([42]));
        for (bad, says) in [
            ("0", "not a process id"),
            ("-3", "not a process id"),
            ("x", "not a process id"),
            ("43", "no such process"),
        ] {
            let e = parse_pids(&[bad.into()], t.path(), "--pid").unwrap_err();
            assert!(e.starts_with("--pid ") && e.contains(says), "{bad}: {e}");
        }
        let ok = parse_comms(&["postgres".into(), " pgbench ".into()], "--comm").unwrap();
        assert_eq!(ok, BTreeSet::from(["pgbench".into(), "postgres".into()]));
        // Exactly 15 bytes is a name the kernel keeps whole.
        assert!(parse_comms(&["systemd-journal".into()], "--comm").is_ok());
        let e = parse_comms(&["systemd-journald".into()], "--comm").unwrap_err();
        assert!(e.contains("give `systemd-journal`"), "{e}");
        // The cut never splits a character: eight two-byte letters give seven, 14 bytes.
        let e = parse_comms(&["éééééééé".into()], "--comm").unwrap_err();
        assert!(e.contains("give `ééééééé`"), "{e}");
        assert!(
            parse_comms(&["".into()], "--comm")
                .unwrap_err()
                .contains("empty name")
        );
        assert!(parse_comms(&["a".into(), " ".into()], "--comm").is_err());
    }

    /// The status passed on: the command's own failure, never cpulab's stop.
    #[test]
    fn a_command_end_passes_on_only_its_own_failure() {
        use std::os::unix::process::ExitStatusExt;
        let of = |raw| CommandEnd::of(std::process::ExitStatus::from_raw(raw));
        // Wait statuses: exit N is N << 8, a signal S is S.
        assert_eq!(of(3 << 8), CommandEnd::Exited { status: 3 });
        assert_eq!(of(3 << 8).passed_on(), Some(3));
        assert_eq!(of(0).passed_on(), None);
        assert_eq!(
            of(libc::SIGSEGV),
            CommandEnd::Killed {
                signal: libc::SIGSEGV,
                name: "SIGSEGV".into()
            }
        );
        assert_eq!(of(libc::SIGSEGV).passed_on(), Some(128 + 11));
        let stopped = CommandEnd::StoppedByCpulab {
            why: "window elapsed".into(),
        };
        assert_eq!(stopped.passed_on(), None);
        assert!(stopped.describe().contains("not its own failure"));
        let json = serde_json::to_value(of(3 << 8)).unwrap();
        assert_eq!(json, serde_json::json!({"how": "exited", "status": 3}));
    }

    #[test]
    fn status_gives_tgid_and_ppid() {
        let text = "Name:\tpostgres\nUmask:\t0077\nState:\tS (sleeping)\nTgid:\t812\nNgid:\t0\nPid:\t815\nPPid:\t1\n";
        assert_eq!(parse_status(text), Some((812, 1)));
        assert_eq!(parse_status("Name: x\n"), None);
    }

    #[test]
    fn cgroup_procs_are_pids() {
        assert_eq!(parse_procs("12\n34\n\n"), BTreeSet::from([12, 34]));
    }

    #[test]
    fn live_lookup_finds_this_process() {
        let me = std::process::id() as i32;
        let mut t = LiveTasks::new(Path::new("/"), Target::Pids(BTreeSet::from([me])));
        let info = t.lookup(me).unwrap();
        assert_eq!(info.tgid, me);
        assert!(!info.watched, "cpulab never watches itself");
        assert_eq!(t.lookup(0), None);
    }

    /// A thread that ended before /proc was read is resolved through what a sample said of it:
    /// its process, named from the process' own files.
    #[test]
    fn a_learned_thread_resolves_after_it_is_gone() {
        let root = tempfile::tempdir().unwrap();
        let proc = root.path().join("proc/812");
        std::fs::create_dir_all(&proc).unwrap();
        std::fs::write(proc.join("comm"), "postgres\n").unwrap();
        std::fs::write(proc.join("status"), "Tgid:\t812\nPid:\t812\nPPid:\t1\n").unwrap();
        let target = Target::Comms(BTreeSet::from(["postgres".to_string()]));
        let mut t = LiveTasks::new(root.path(), target.clone());
        // Thread 815 has no directory: unresolved, as before.
        assert_eq!(t.lookup(815), None);
        let mut t = LiveTasks::new(root.path(), target);
        t.learn(815, 812);
        let info = t.lookup(815).unwrap();
        assert_eq!(
            (info.tgid, info.comm.as_str(), info.watched),
            (812, "postgres", true)
        );
        // A learned thread does not replace what /proc said.
        t.learn(815, 900);
        assert_eq!(t.lookup(815).unwrap().tgid, 812);
    }
}
