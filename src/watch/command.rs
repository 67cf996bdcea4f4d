//! `cpulab watch` as a subcommand of the registry: its flags and their validation into
//! [`WatchSettings`].
//!
//! Targets are checked here, before anything is opened: a pid that does not exist, a cgroup
//! directory without `cgroup.procs`, a duration that is not a time, are one line and exit 2.

use super::targets::{parse_comms, parse_pids};
use super::{Target, Watch, WatchSettings};
use crate::error::bad_input;
use crate::experiment::Command;
use crate::machine::Machine;
use anyhow::Result;
use std::path::PathBuf;

/// Watch a running application's wakeups: where they land and what each placement costs.
/// With no target, the whole machine, one row per process name.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab watch --comm postgres,pgbench --duration 10s\n  \
    cpulab watch --pid 1234,5678 --json > watch.json\n  \
    cpulab watch --cgroup /sys/fs/cgroup/system.slice/postgresql.service\n  \
    cpulab watch --duration 2s -- cpulab pingpong --processes --pairs 0:1")]
pub struct Args {
    /// Process ids to watch, comma-separated (all their threads).
    #[arg(long, value_delimiter = ',', value_name = "PID")]
    pub pid: Vec<String>,
    /// Process names to watch, comma-separated (as in /proc/PID/comm).
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    pub comm: Vec<String>,
    /// A cgroup directory: its processes (re-read every second).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// How long to watch (`10s`, `500ms`, `2`); Ctrl-C ends early and reports what was seen.
    #[arg(long, default_value = "10s", value_name = "TIME")]
    pub duration: String,
    /// `--json`, `--html FILE`.
    #[command(flatten)]
    pub output: crate::emit::OutputArgs,
    /// Write one drain of CPU 0's ring buffer here (parser fixtures).
    #[arg(long, hide = true, value_name = "FILE")]
    pub dump_records: Option<PathBuf>,
    /// Also take a record of every sched_wakeup (else only counted): checks each placement
    /// against its target CPU, at one more record per wakeup.
    #[arg(long, hide = true)]
    pub sample_wakeups: bool,
    /// Do not filter the tracepoints in the kernel (for measuring what the filter saves).
    #[arg(long, hide = true)]
    pub no_kernel_filter: bool,
    /// How to read the tracepoints: bpf (raw tracepoints, BTF) and bpf-tracepoint (no BTF)
    /// see every record (root, or CAP_BPF+CAP_PERFMON); perf misses some on VMs; auto is bpf
    /// when it loads, else perf.
    #[arg(long, default_value = "auto", value_name = "HOW",
          value_parser = crate::watch::Mechanism::value_parser(crate::wakeups::Shape::Events))]
    pub mechanism: crate::watch::Mechanism,
    /// A command to start and watch (without a shell), with its children; it ends with cpulab.
    /// What it prints goes to stderr: stdout holds only the watch's result. After the result,
    /// cpulab exits with the command's status if it failed by itself (128+S for a signal).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl Command for Watch {
    type Args = Args;
    const ABOUT: &'static str =
        "Watch a running application's wakeups: where they land, what each placement costs.";

    fn settings(args: &Args, machine: &Machine) -> Result<WatchSettings> {
        settings(args, machine)
    }

    fn output(args: &Args) -> &crate::emit::OutputArgs {
        &args.output
    }

    // An interrupt ends the window, and what was seen is reported (`watch::session`).
    const ORDERLY_INTERRUPT: bool = true;

    /// `watch -- COMMAND` exits with the command's own status when it failed by itself, as
    /// `time` and `perf stat` do; 0 when it succeeded or the watch stopped it (docs/watch.md).
    fn passed_on(report: &super::WatchReport) -> Option<crate::error::PassedOn> {
        let end = report.command.as_ref()?;
        Some(crate::error::PassedOn {
            code: end.passed_on()?,
            what: format!("the watched command ended: {}", end.describe()),
        })
    }
}

/// Turns flags into settings, rejecting bad input with one line (exit 2).
pub fn settings(args: &Args, machine: &Machine) -> Result<WatchSettings> {
    let given = [
        !args.pid.is_empty(),
        !args.comm.is_empty(),
        args.cgroup.is_some(),
        !args.command.is_empty(),
    ];
    if given.iter().filter(|g| **g).count() > 1 {
        return Err(bad_input(
            "give one target: --pid, --comm, --cgroup or -- COMMAND (none: the whole machine)",
        ));
    }
    let duration_s = crate::units::parse_duration(&args.duration)
        .map_err(|e| bad_input(format!("--duration: {e}")))?
        .as_secs_f64();
    if duration_s <= 0.0 {
        return Err(bad_input(
            "--duration must be more than 0; give one like `10s`",
        ));
    }
    let target = if !args.pid.is_empty() {
        Target::Pids(parse_pids(&args.pid, &machine.root, "--pid").map_err(bad_input)?)
    } else if !args.comm.is_empty() {
        Target::Comms(parse_comms(&args.comm, "--comm").map_err(bad_input)?)
    } else if let Some(dir) = &args.cgroup {
        if !dir.join("cgroup.procs").is_file() {
            return Err(bad_input(format!(
                "{} is not a cgroup directory (no cgroup.procs); give one under /sys/fs/cgroup",
                dir.display()
            )));
        }
        Target::Cgroup(dir.clone())
    } else {
        Target::All
    };
    Ok(WatchSettings {
        target,
        command: (!args.command.is_empty()).then(|| args.command.clone()),
        duration_s,
        dump_records: args.dump_records.clone(),
        sample_wakeups: args.sample_wakeups,
        kernel_filter: !args.no_kernel_filter,
        mechanism: args.mechanism,
        ..WatchSettings::default()
    })
}
