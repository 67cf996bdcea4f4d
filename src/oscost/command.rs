//! `cpulab oscost` as a subcommand of the registry: flags -> [`OscostSettings`], run, print.

use crate::error::bad_input;
use crate::experiment::Command;
use crate::machine::Machine;
use crate::oscost::Oscost;
use crate::oscost::OscostSettings;
use crate::units::flag_duration;
use anyhow::Result;
use std::time::Duration;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab oscost\n  \
    cpulab oscost --quick\n  \
    cpulab oscost --json > before.json")]
pub struct Args {
    /// Use only these CPUs (taskset syntax); every measurement runs pinned to the first of
    /// them [default: the first allowed CPU]. `--cpu` is an old spelling.
    #[arg(long, value_name = "LIST", alias = "cpu")]
    pub cpus: Option<String>,
    /// Fewer, shorter batches and a shorter frequency probe.
    #[arg(long)]
    pub quick: bool,
    /// Timed batches per primitive [default: 30, quick 10].
    #[arg(long, value_name = "N")]
    pub batches: Option<usize>,
    /// Approximate milliseconds per batch [default: 5, quick 2].
    #[arg(long, value_name = "MS")]
    pub batch_ms: Option<f64>,
    /// Skip the effective-frequency probe.
    #[arg(long)]
    pub no_freq: bool,
    /// Seconds of sustained load before the warm rate is taken [default: 1, quick 0.5].
    #[arg(long, value_name = "TIME", hide = true)]
    pub freq_load: Option<String>,
    /// Frequency probe trials [default: 3, quick 2].
    #[arg(long, value_name = "N", hide = true)]
    pub freq_trials: Option<usize>,
    /// Skip the check for other load before measuring.
    #[arg(long)]
    pub no_load_check: bool,
    /// `--json`, `--html FILE`.
    #[command(flatten)]
    pub output: crate::emit::OutputArgs,
}

fn secs(v: f64, flag: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(v)
        .map_err(|_| bad_input(format!("{flag} must be a positive number")))
}

/// Turns flags into validated settings (exit 2 with one line on bad input).
pub fn settings(args: &Args, machine: &Machine) -> Result<OscostSettings> {
    let mut s = if args.quick {
        OscostSettings::quick()
    } else {
        OscostSettings::standard()
    };
    if let Some(text) = &args.cpus {
        s.cpu = machine.flag_cpus("--cpus", text)?.first();
    }
    if let Some(b) = args.batches {
        s.batches = b;
    }
    if let Some(ms) = args.batch_ms {
        s.batch_target = secs(ms / 1000.0, "--batch-ms")?;
    }
    if args.no_freq {
        s.frequency = None;
    } else if let Some(f) = s.frequency.as_mut() {
        if let Some(l) = &args.freq_load {
            f.load = flag_duration("freq-load", l)?;
        }
        if let Some(t) = args.freq_trials {
            f.trials = t;
        }
    }
    s.check_load = !args.no_load_check;
    s.check(machine)?;
    Ok(s)
}

impl Command for Oscost {
    type Args = Args;
    const ABOUT: &'static str = "Cost of OS primitives (syscall, context switch, fork, page fault, ...) and the effective-frequency ramp";

    fn settings(args: &Args, machine: &Machine) -> Result<OscostSettings> {
        settings(args, machine)
    }

    fn output(args: &Args) -> &crate::emit::OutputArgs {
        &args.output
    }
}
