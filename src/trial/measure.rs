//! What a trial measures in each round: an experiment through the common interface, chosen by
//! the setting's subject or by `--measure`, plus the cost samplers the settings ask for.
//!
//! Everything here yields [`Figure`]s; the trial loop compares figures by name and never knows
//! which experiment made them. `--measure NAME[:ARGS]` takes the experiment's own flags
//! (`pingpong:--pairs 0:1 --max-time 1`), parsed by that subcommand's clap struct and validated
//! by its `settings` function, so the spec means exactly what the subcommand means.

use super::setting::{Cost, Subject};
use crate::error::bad_input;
use crate::experiment::erased::{Catalogue, Configured, Outcome, Runnable, Sequence};
use crate::experiment::{Direction, Figure, Progress, Unit};
use crate::machine::Machine;
use crate::pingpong::{PairSpec, Pingpong, PingpongSettings, Placement};
use crate::report::envelope::Kind;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Parses `--measure NAME[:ARGS]` into something to run each round. `experiments` are the ones
/// NAME may choose (the registry's, handed down by the command layer, which stands above this).
pub fn parse(
    spec: &str,
    metric: Option<&str>,
    lower: bool,
    machine: &Machine,
    experiments: &dyn Catalogue,
) -> Result<Box<dyn Runnable>> {
    let (name, args) = spec.split_once(':').unwrap_or((spec, ""));
    let words =
        shell_words::split(args).map_err(|e| bad_input(format!("--measure `{spec}`: {e}")))?;
    if name == "cmd" {
        let Some(m) = metric else {
            return Err(bad_input(
                "--measure cmd:... needs --metric REGEX (a named group `value`) or a built-in parser name such as pgbench",
            ));
        };
        if words.is_empty() {
            return Err(bad_input("--measure cmd: give the command after `cmd:`"));
        }
        return Ok(Box::new(UserCommand {
            argv: words,
            metric: crate::pair::metric::Metric::parse(m, None, !lower)?,
        }));
    }
    experiments
        .measure(name, &words, machine)
        .unwrap_or_else(|| {
            Err(bad_input(format!(
                "--measure `{name}` is not an experiment; give {} [:FLAGS], or cmd:COMMAND with --metric",
                experiments.names().join(", ")
            )))
        })
}

/// The default measurement for what the settings are about.
pub fn default_for(subject: Subject) -> Box<dyn Runnable> {
    let short = PingpongSettings {
        max_time_s: 1.0,
        warmup_s: 0.05,
        ..PingpongSettings::default()
    };
    match subject {
        Subject::Wakeup => Box::new(Configured::<Pingpong>::new(short)),
        // The effective-frequency ramp and the cost of OS primitives, and what a sleep costs
        // the work after it.
        Subject::Frequency => Box::new(Sequence(vec![
            Box::new(Configured::<crate::oscost::Oscost>::new(
                crate::oscost::OscostSettings::quick(),
            )),
            Box::new(Configured::<crate::bursty::Bursty>::new(
                crate::bursty::BurstySettings::quick(),
            )),
        ])),
        Subject::Scheduler => Box::new(Sequence(vec![
            Box::new(Configured::<Pingpong>::new(PingpongSettings {
                pairs: PairSpec::List(vec![Placement::Unpinned]),
                ..short
            })),
            Box::new(Configured::<crate::messaging::Messaging>::new(
                crate::messaging::MessagingSettings::quick(),
            )),
        ])),
        Subject::Process { pid } => Box::new(ProcessWatch { pid, seconds: 2.0 }),
    }
}

/// What the default measurement is, in words.
pub fn describe_default(subject: Subject) -> String {
    match subject {
        Subject::Wakeup => "pingpong (pipe) on every placement class plus unpinned".into(),
        Subject::Frequency => {
            "oscost --quick (OS primitives and the effective-frequency ramp), then bursty (1 ms of work after 10 ms asleep)".into()
        }
        Subject::Scheduler => {
            "pingpong (pipe), unpinned, then messaging (5 groups of 20 senders and receivers)".into()
        }
        Subject::Process { pid } => {
            format!("process {pid}: context switches and CPU time over 2 s")
        }
    }
}

/// What a measured command printed, for an error: the last lines of each stream, so that its
/// output is shown when it fails rather than lost with the capture.
fn last_lines(stdout: &str, stderr: &str) -> String {
    use crate::pair::procs::tail;
    format!(
        "last lines of its output:\n{}\nand of its standard error:\n{}",
        tail(stdout, 15),
        tail(stderr, 15)
    )
}

/// A user's command run once per round, its metric read from its output.
struct UserCommand {
    argv: Vec<String>,
    metric: crate::pair::metric::Metric,
}

impl Runnable for UserCommand {
    fn kind(&self) -> Kind {
        Kind::Try
    }
    fn run(&self, _machine: &Machine, progress: &Progress) -> Result<Outcome> {
        progress.step(&format!("running {}", self.argv.join(" ")));
        // Both streams are captured (the metric is read from them) in unlinked files, so none of
        // it reaches cpulab's stdout, which holds only the trial's result, and nothing stays on
        // disk. The command and all it starts end with the trial (`signals::started`): an
        // interrupt stops it at once instead of after its round.
        let capture = || {
            tempfile::tempfile().context("cannot create an unlinked file for the command's output")
        };
        let (mut out_file, mut err_file) = (capture()?, capture()?);
        let mut cmd = std::process::Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..])
            .stdin(std::process::Stdio::null())
            .stdout(out_file.try_clone()?)
            .stderr(err_file.try_clone()?);
        let mut started = crate::signals::started::Started::spawn(&mut cmd)
            .map_err(|e| bad_input(format!("cannot run {}: {e}", self.argv[0])))?;
        if let Some(note) = &started.note {
            progress.warn(note);
        }
        let (status, ended) = started.wait()?;
        let wall = (ended - started.started_at()).as_secs_f64();
        drop(started);
        let read_all = |f: &mut std::fs::File| -> Result<String> {
            use std::io::{Read, Seek};
            let mut bytes = Vec::new();
            f.seek(std::io::SeekFrom::Start(0))?;
            f.read_to_end(&mut bytes)?;
            Ok(String::from_utf8_lossy(&bytes).into_owned())
        };
        let (stdout, stderr) = (read_all(&mut out_file)?, read_all(&mut err_file)?);
        let text = format!("{stdout}\n{stderr}");
        if !status.success() {
            anyhow::bail!(
                "{} failed ({}); {}",
                self.argv[0],
                status,
                last_lines(&stdout, &stderr)
            );
        }
        let reading = self.metric.read(&text).ok_or_else(|| {
            anyhow::anyhow!(
                "the output of {} has no match for the metric {}; {}",
                self.argv[0],
                self.metric.describe(),
                last_lines(&stdout, &stderr)
            )
        })?;
        let dir = if self.metric.higher_is_better {
            Direction::HigherIsBetter
        } else {
            Direction::LowerIsBetter
        };
        let figures = vec![
            Figure::single(
                format!("metric[{}]", self.metric.unit),
                format!("{} ({})", self.argv[0], self.metric.unit),
                Unit::Count,
                dir,
                reading.value,
            ),
            Figure::single(
                "wall_s",
                "command wall time",
                Unit::Seconds,
                Direction::LowerIsBetter,
                wall,
            ),
        ];
        Ok(Outcome {
            kind: Kind::Try,
            document: serde_json::json!({ "command": self.argv, "metric": reading.value, "wall_s": wall }),
            figures,
            noisy: false,
        })
    }
}

/// A live process watched for a while: its context switches and CPU time per second.
struct ProcessWatch {
    pid: i32,
    seconds: f64,
}

/// Context switches (voluntary + involuntary, all threads) and CPU ticks (user + system) of a
/// process, read under `root` with the counters' parsers (the one reader of these files).
fn process_counts(root: &Path, pid: i32) -> Option<(u64, u64)> {
    use crate::counters::parse::parse_status_ctxt;
    let proc_dir = root.join(format!("proc/{pid}"));
    let mut switches = 0;
    for t in std::fs::read_dir(proc_dir.join("task")).ok()?.flatten() {
        // A thread that ended between the listing and the read has nothing left to count.
        if let Some((vol, invol)) = std::fs::read_to_string(t.path().join("status"))
            .ok()
            .and_then(|s| parse_status_ctxt(&s))
        {
            switches += vol + invol;
        }
    }
    Some((switches, process_ticks(root, pid)?))
}

/// utime + stime of a process, in clock ticks.
fn process_ticks(root: &Path, pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(root.join(format!("proc/{pid}/stat"))).ok()?;
    let st = crate::counters::parse::parse_proc_pid_stat(&text)?;
    Some(st.utime_ticks + st.stime_ticks)
}

impl Runnable for ProcessWatch {
    fn kind(&self) -> Kind {
        Kind::Try
    }
    fn run(&self, machine: &Machine, progress: &Progress) -> Result<Outcome> {
        progress.step(&format!(
            "watching process {} for {} s",
            self.pid, self.seconds
        ));
        let gone = || anyhow::anyhow!("process {} ended during the trial", self.pid);
        let (s0, c0) = process_counts(&machine.root, self.pid).ok_or_else(gone)?;
        let t0 = Instant::now();
        crate::signals::sleep(Duration::from_secs_f64(self.seconds))?;
        let (s1, c1) = process_counts(&machine.root, self.pid).ok_or_else(gone)?;
        let dt = t0.elapsed().as_secs_f64();
        let figures = vec![
            Figure::single(
                "context_switches_per_s",
                format!("context switches of process {}", self.pid),
                Unit::PerSecond,
                Direction::LowerIsBetter,
                s1.saturating_sub(s0) as f64 / dt,
            ),
            Figure::single(
                "process_cpu_s_per_s",
                format!("CPU time of process {}", self.pid),
                Unit::CpuSecondsPerSecond,
                Direction::Neither,
                c1.saturating_sub(c0) as f64 / crate::counters::clock_ticks_per_sec() / dt,
            ),
        ];
        Ok(Outcome {
            kind: Kind::Try,
            document: serde_json::json!({ "pid": self.pid, "seconds": dt }),
            figures,
            noisy: false,
        })
    }
}

/// A cost sampler: snapshot before the round, delta after, divided by the measured interval.
pub struct CostSampler {
    cost: Cost,
    root: PathBuf,
    start: Option<(Instant, f64)>,
}

impl CostSampler {
    pub fn new(cost: Cost, root: &Path) -> Self {
        Self {
            cost,
            root: root.to_path_buf(),
            start: None,
        }
    }

    fn read(&self) -> Option<f64> {
        match self.cost {
            Cost::PollTime => poll_time_s(&self.root),
            Cost::ProcessCpu { pid } => process_ticks(&self.root, pid)
                .map(|t| t as f64 / crate::counters::clock_ticks_per_sec()),
            Cost::Unmeasured => None,
        }
    }

    /// Whether this sampler measures `cost`.
    pub fn is(&self, cost: Cost) -> bool {
        self.cost == cost
    }

    pub fn begin(&mut self) {
        self.start = self.read().map(|v| (Instant::now(), v));
    }

    /// The cost figure of the round, if it could be measured.
    pub fn end(&mut self) -> Option<Figure> {
        let (t0, v0) = self.start.take()?;
        let v1 = self.read()?;
        let dt = t0.elapsed().as_secs_f64();
        let per_s = (v1 - v0).max(0.0) / dt;
        Some(match self.cost {
            Cost::PollTime => Figure::single(
                "cost.poll_cpu_s_per_s",
                "CPU time spent polling in idle (cpuidle POLL state), all CPUs",
                Unit::CpuSecondsPerSecond,
                Direction::LowerIsBetter,
                per_s,
            ),
            Cost::ProcessCpu { pid } => Figure::single(
                "cost.process_cpu_s_per_s",
                format!("CPU time of process {pid}"),
                Unit::CpuSecondsPerSecond,
                Direction::Neither,
                per_s,
            ),
            Cost::Unmeasured => return None,
        })
    }
}

/// Seconds spent in the cpuidle poll state (the state named POLL), summed over all CPUs.
pub fn poll_time_s(root: &Path) -> Option<f64> {
    let base = root.join("sys/devices/system/cpu");
    let mut total_us = 0u64;
    let mut any = false;
    for e in std::fs::read_dir(&base).ok()?.flatten() {
        let name = e.file_name();
        let n = name.to_string_lossy();
        if !(n.starts_with("cpu") && n[3..].chars().all(|c| c.is_ascii_digit()) && n.len() > 3) {
            continue;
        }
        let d = e.path().join("cpuidle/state0");
        if std::fs::read_to_string(d.join("name")).is_ok_and(|s| s.trim() == "POLL")
            && let Some(us) = std::fs::read_to_string(d.join("time"))
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
        {
            total_us += us;
            any = true;
        }
    }
    any.then_some(total_us as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_counts_read_every_thread_under_the_root() {
        let d = tempfile::tempdir().unwrap();
        let stat = "42 (a b) S 1 42 42 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 1 0 9 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 0";
        std::fs::create_dir_all(d.path().join("proc/42/task/42")).unwrap();
        std::fs::create_dir_all(d.path().join("proc/42/task/43")).unwrap();
        std::fs::write(d.path().join("proc/42/stat"), stat).unwrap();
        let status = |v, n| {
            format!("Name:\tx\nvoluntary_ctxt_switches:\t{v}\nnonvoluntary_ctxt_switches:\t{n}\n")
        };
        std::fs::write(d.path().join("proc/42/task/42/status"), status(10, 3)).unwrap();
        std::fs::write(d.path().join("proc/42/task/43/status"), status(4, 1)).unwrap();
        assert_eq!(process_counts(d.path(), 42), Some((18, 12)));
        assert_eq!(process_counts(d.path(), 7), None, "no such process");
    }
}
