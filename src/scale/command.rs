//! `cpulab scale` as a subcommand of the registry: flags -> [`ScaleSettings`], run, print.

use crate::cpulist::CpuSet;
use crate::error::bad_input;
use crate::experiment::Command;
use crate::machine::Machine;
use crate::scale::Scale;
use crate::scale::{Policy, ScaleSettings, Workload};
use crate::units::flag_duration;
use anyhow::Result;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab scale\n  \
    cpulab scale --policy compact,scatter\n  \
    cpulab scale --workload triad --threads 1,2")]
pub struct Args {
    /// `fib` (work-stealing recursive Fibonacci, compute-bound) or `triad` (STREAM triad,
    /// memory-bound).
    #[arg(long, short = 'w', value_name = "NAME", default_value = "fib",
          value_parser = ["fib", "triad"])]
    pub workload: String,
    /// Placement policies, comma-separated: os (no pinning), compact (fill SMT siblings and
    /// shared-L2 modules first), scatter (one thread per core and module first)
    /// [default: os,compact,scatter; only the explicit order when --order is given].
    #[arg(long, short = 'p', value_name = "LIST", value_delimiter = ',')]
    pub policy: Option<Vec<String>>,
    /// Use only these CPUs (taskset syntax, e.g. `0-3,8`): every policy places its threads
    /// among them, and `os` lets the scheduler choose among them.
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// An explicit placement: thread i on the i-th CPU of this list, in the order written
    /// (e.g. `0,2,4,6` or `8-15`).
    #[arg(long, value_name = "LIST")]
    pub order: Option<String>,
    /// Worker thread counts, comma-separated [default: 1..=allowed CPUs up to 8; above, the
    /// powers of two, the count where compact doubles up the most, and all; 1..=CPUs in
    /// --order].
    #[arg(long, short = 't', value_name = "LIST", value_delimiter = ',')]
    pub threads: Option<Vec<usize>>,
    /// Target length of one single-thread run (the work is sized to it once, then fixed):
    /// `500ms`, `2s` (a bare number is seconds).
    #[arg(long, value_name = "TIME", default_value = "500ms")]
    pub duration: String,
    /// Runs per point at least, for the confidence interval. More sweeps follow until compact
    /// and scatter are told apart or every speedup interval is within --target-ci, or until
    /// --max-time.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub repeats: usize,
    /// Time limit for the sweeps added after --repeats: `90s`, `5m` (a bare number is
    /// seconds). No sweep is started that would pass it.
    #[arg(long, value_name = "TIME", default_value = "1m")]
    pub max_time: String,
    /// Speedup intervals within this percentage of their mean answer the question when the
    /// policies do not separate.
    #[arg(long, value_name = "PERCENT", default_value = "10")]
    pub target_ci: String,
    /// Fibonacci argument instead of calibrating it to --duration.
    #[arg(long, value_name = "N", hide = true)]
    pub fib_n: Option<u32>,
    /// Fibonacci calls at or below this argument run serially.
    #[arg(long, value_name = "N", default_value_t = 18, hide = true)]
    pub fib_cutoff: u32,
    /// Size of each triad array in MiB [default: 4x the LLCs, 64..=1024].
    #[arg(long, value_name = "MIB", hide = true)]
    pub triad_mib: Option<u64>,
    /// Skip the check for other load before measuring.
    #[arg(long)]
    pub no_load_check: bool,
    /// `--json`, `--html FILE`.
    #[command(flatten)]
    pub output: crate::emit::OutputArgs,
}

/// Parses `--order` keeping the order written: `4,0-1` is threads on 4, 0, 1.
fn ordered_cpus(text: &str, machine: &Machine) -> Result<Vec<u32>> {
    machine.flag_cpus("--order", text)?;
    let mut out = Vec::new();
    for part in text.split(',').filter(|p| !p.trim().is_empty()) {
        let set = CpuSet::parse_list(part.trim(), false).map_err(|e| bad_input(e.to_string()))?;
        out.extend(set.iter().filter(|c| !out.contains(c)).collect::<Vec<_>>());
    }
    Ok(out)
}

/// Every count up to 8 CPUs; above, the powers of two, the count where compact doubles up the
/// most against scatter, and all CPUs: each run lasts about --duration at every count now, so
/// 1..=64 would take 64 runs a policy a sweep.
pub fn default_counts(machine: &Machine) -> Vec<usize> {
    let n = machine.allowed.len().max(1);
    let all: Vec<usize> = (1..=n).collect();
    if n <= 8 {
        return all;
    }
    let (q, _) = crate::scale::answer::question_threads(&machine.topology, &machine.allowed, &all);
    let mut counts: Vec<usize> = std::iter::successors(Some(1usize), |c| Some(c * 2))
        .take_while(|c| *c < n)
        .chain([q, n])
        .collect();
    counts.sort_unstable();
    counts.dedup();
    counts
}

/// Turns flags into validated settings (exit 2 with one line on bad input).
pub fn settings(args: &Args, machine: &Machine) -> Result<ScaleSettings> {
    let mut s = ScaleSettings::quick(machine);
    s.workload = if args.workload == "triad" {
        Workload::Triad
    } else {
        Workload::Fib
    };
    let explicit = args
        .order
        .as_deref()
        .map(|t| ordered_cpus(t, machine))
        .transpose()?;
    let names = match (&args.policy, &explicit) {
        (Some(p), _) => p.clone(),
        (None, Some(_)) => Vec::new(),
        (None, None) => vec!["os".into(), "compact".into(), "scatter".into()],
    };
    s.policies = names
        .iter()
        .map(|n| {
            Policy::parse(n).ok_or_else(|| {
                bad_input(format!(
                    "unknown policy `{n}`; use os, compact or scatter (or --order LIST)"
                ))
            })
        })
        .collect::<Result<_>>()?;
    if let Some(list) = &explicit {
        s.policies.push(Policy::Explicit(list.clone()));
    }
    let width = explicit
        .as_ref()
        .map(|l| l.len())
        .unwrap_or(machine.allowed.len())
        .max(1);
    s.threads = match (&args.threads, &explicit) {
        (Some(t), _) => t.clone(),
        (None, Some(_)) => (1..=width).collect(),
        (None, None) => default_counts(machine),
    };
    s.duration = flag_duration("duration", &args.duration)?;
    s.repeats = args.repeats;
    s.max_time = flag_duration("max-time", &args.max_time)?;
    s.target_rel = match args
        .target_ci
        .trim()
        .trim_end_matches('%')
        .trim()
        .parse::<f64>()
    {
        Ok(v) if v.is_finite() => v / 100.0,
        _ => {
            return Err(bad_input(format!(
                "--target-ci `{}` is not a percentage; give one like `10` (for ±10%)",
                args.target_ci
            )));
        }
    };
    s.fib_n = args.fib_n;
    s.fib_cutoff = args.fib_cutoff;
    s.triad_mib = args.triad_mib;
    s.check_load = !args.no_load_check;
    s.check(machine)?;
    Ok(s)
}

impl Command for Scale {
    type Args = Args;
    const ABOUT: &'static str =
        "Parallel scaling by placement policy (os, compact, scatter, explicit)";

    fn settings(args: &Args, machine: &Machine) -> Result<ScaleSettings> {
        settings(args, machine)
    }

    fn output(args: &Args) -> &crate::emit::OutputArgs {
        &args.output
    }

    fn cpus(args: &Args) -> Option<&str> {
        args.cpus.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Machine {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        Machine::detect(&root).unwrap()
    }

    #[test]
    fn default_counts_are_every_count_on_small_machines_and_thinned_on_large() {
        assert_eq!(default_counts(&fixture("kvm-guest")), vec![1, 2]);
        // 2 x 8 cores x 2 threads: powers of two, 16 (compact: 8 cores doubled up), 32.
        assert_eq!(
            default_counts(&fixture("intel-2s")),
            vec![1, 2, 4, 8, 16, 32]
        );
    }
}
