//! `cpulab watch`: flags, their validation into [`WatchSettings`], and output.

use crate::cli::Global;
use crate::error::bad_input;
use crate::experiment::{Experiment, Progress};
use crate::machine::Machine;
use crate::output::{self, Style};
use crate::report::envelope::Kind;
use crate::watch::{Target, Watch, WatchSettings};
use anyhow::{Context, Result};
use std::path::PathBuf;

/// What placement costs a live application: wakeups by placement class, wakeup-to-run latency,
/// the waker -> wakee graph, halts and IPIs, without restarting it.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab watch --comm postgres,pgbench --duration 10s\n  \
    cpulab watch --pid 1234 --json > watch.json\n  \
    cpulab watch --duration 5s --html watch.html\n  \
    cpulab watch -- pgbench -n -c 1 -T 5 postgres")]
pub struct Args {
    /// Processes to watch (with their descendants), comma-separated pids.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["comm", "cgroup", "command"])]
    pub pid: Vec<String>,
    /// Processes to watch by name, comma-separated (`postgres,pgbench`).
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["cgroup", "command"])]
    pub comm: Vec<String>,
    /// Processes in this cgroup (`/sys/fs/cgroup/system.slice/postgresql.service` or
    /// `/system.slice/postgresql.service`).
    #[arg(long, conflicts_with = "command")]
    pub cgroup: Option<String>,
    /// How long to watch (`10s`, `500ms`); Ctrl-C ends early and reports.
    #[arg(long, default_value = "10s", value_name = "SECONDS")]
    pub duration: String,
    /// One JSON document on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also write an HTML report here.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// A command to start (without a shell) and watch; cpulab ends it with the window.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Turns flags into settings, rejecting bad input with one line (exit 2).
pub fn settings(args: &Args) -> Result<WatchSettings> {
    let target = if !args.pid.is_empty() {
        let mut pids = Vec::new();
        for p in &args.pid {
            match p.trim().parse::<i32>() {
                Ok(v) if v > 0 => pids.push(v),
                _ => {
                    return Err(bad_input(format!(
                        "--pid `{p}` is not a process id; give numbers like `--pid 1234,5678`"
                    )));
                }
            }
        }
        Target::Pids(pids)
    } else if !args.comm.is_empty() {
        Target::Comm(args.comm.iter().map(|c| c.trim().to_string()).collect())
    } else if let Some(cg) = &args.cgroup {
        let rel = cg.strip_prefix("/sys/fs/cgroup").unwrap_or(cg);
        let rel = format!("/{}", rel.trim_matches('/'));
        if !std::path::Path::new("/sys/fs/cgroup")
            .join(rel.trim_start_matches('/'))
            .is_dir()
        {
            return Err(bad_input(format!(
                "--cgroup {cg}: no such cgroup under /sys/fs/cgroup; see `cat /proc/PID/cgroup`"
            )));
        }
        Target::Cgroup(rel)
    } else if !args.command.is_empty() {
        Target::Command(args.command.clone())
    } else {
        Target::All
    };
    let duration = crate::units::parse_duration(&args.duration)
        .map_err(|e| bad_input(format!("--duration: {e}")))?;
    if duration.is_zero() {
        return Err(bad_input(
            "--duration must be more than 0; give seconds like `10s`",
        ));
    }
    Ok(WatchSettings { target, duration })
}

pub fn run(args: Args, g: &Global) -> Result<()> {
    let settings = settings(&args)?;
    let machine = Machine::detect(&g.root)?;
    let quiet = g.quiet;
    let sink = output::progress_printer(quiet);
    let report = Watch::run(&machine, &settings, &Progress::new(&sink))?;
    if let Some(path) = &args.html {
        std::fs::write(path, Watch::render_html(&report))
            .with_context(|| format!("cannot write {}", path.display()))?;
        output::status(quiet, &format!("HTML report written to {}", path.display()));
    }
    super::print::emit(args.json, Kind::Watch, &report, |r| {
        Watch::render_text(r, &Style::new())
    })
}
