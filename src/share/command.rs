//! `cpulab share` as a subcommand of the registry: flags -> [`ShareSettings`], run, print.

use crate::error::bad_input;
use crate::experiment::Command;
use crate::machine::Machine;
use crate::share::Share;
use crate::share::ShareSettings;
use crate::units::flag_duration;
use anyhow::Result;
use std::time::Duration;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab share\n  \
    cpulab share --threads 1 --burners 2\n  \
    cpulab share --sweep --json > share.json")]
pub struct Args {
    /// Worker threads running the CPU-bound kernel [default: allowed CPUs].
    #[arg(long, short = 't', value_name = "N")]
    pub threads: Option<usize>,
    /// Busy burner threads beside the workers [default: allowed CPUs].
    #[arg(long, short = 'b', value_name = "N")]
    pub burners: Option<usize>,
    /// Burner duty cycle in percent: busy this share of each period, asleep the rest.
    #[arg(long, value_name = "PCT", default_value_t = 100.0)]
    pub duty: f64,
    /// Use only these CPUs (taskset syntax, e.g. `0-3,8`), as under `taskset -c`: workers and
    /// burners run there and the model shares out only them.
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// Pin burners round-robin to these CPUs (taskset syntax, e.g. `1` or `0-1`).
    #[arg(long, value_name = "LIST")]
    pub burner_cpus: Option<String>,
    /// Sweep workers over 1..=allowed CPUs and burners over 0..=allowed CPUs.
    #[arg(long, conflicts_with_all = ["threads", "burners"])]
    pub sweep: bool,
    /// Length of one measured run: `1s`, `500ms`, `2m` (a bare number is seconds).
    #[arg(long, value_name = "TIME", default_value = "1s")]
    pub duration: String,
    /// Runs per configuration, for the confidence interval.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub repeats: usize,
    /// Size of one work unit: primes are searched up to this number, 3 to 1000000 (the default
    /// is sysbench's).
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub max_prime: u64,
    /// Burner busy/sleep cycle in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10.0, hide = true)]
    pub duty_period_ms: f64,
    /// Skip the check for other load before measuring.
    #[arg(long)]
    pub no_load_check: bool,
    /// `--json`, `--html FILE`.
    #[command(flatten)]
    pub output: crate::emit::OutputArgs,
}

/// Turns flags into validated settings (exit 2 with one line on bad input).
pub fn settings(args: &Args, machine: &Machine) -> Result<ShareSettings> {
    let n = machine.allowed.len().max(1);
    let mut s = if args.sweep {
        ShareSettings::sweep(machine)
    } else {
        ShareSettings::single(args.threads.unwrap_or(n), args.burners.unwrap_or(n))
    };
    s.duty_pct = args.duty;
    s.duration = flag_duration("duration", &args.duration)?;
    s.duty_period = secs(args.duty_period_ms / 1000.0, "--duty-period-ms")?;
    s.repeats = args.repeats;
    s.max_prime = args.max_prime;
    s.burner_cpus = args
        .burner_cpus
        .as_deref()
        .map(|t| machine.flag_cpus("--burner-cpus", t))
        .transpose()?;
    s.check_load = !args.no_load_check;
    s.check(machine)?;
    Ok(s)
}

fn secs(v: f64, flag: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(v)
        .map_err(|_| bad_input(format!("{flag} must be a positive number of seconds")))
}

impl Command for Share {
    type Args = Args;
    const ABOUT: &'static str = "Noisy neighbours: a CPU-bound workload's share of the CPU beside busy burners, against the fair-share model";

    fn settings(args: &Args, machine: &Machine) -> Result<ShareSettings> {
        settings(args, machine)
    }

    fn output(args: &Args) -> &crate::emit::OutputArgs {
        &args.output
    }

    fn cpus(args: &Args) -> Option<&str> {
        args.cpus.as_deref()
    }
}
