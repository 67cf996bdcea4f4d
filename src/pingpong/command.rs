//! `cpulab pingpong`: flags, their validation into [`PingpongSettings`], and output.
//!
//! Every CPU number the user gives is checked here against the machine (exists, online,
//! allowed, inside `--cpus`); below this file nothing re-validates.

use crate::affinity;
use crate::cpulist::CpuSet;
use crate::error::bad_input;
use crate::experiment::Command;
use crate::machine::Machine;
use crate::pingpong::Pingpong;
use crate::pingpong::{self, Endpoints, Method, PairSpec, PingpongSettings};
use crate::units::flag_duration;
use anyhow::Result;

/// Round-trip cost between two endpoints for every placement class, with the counters that
/// explain it.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab pingpong\n  \
    cpulab pingpong --method pipe,futex,spin\n  \
    cpulab pingpong --pairs all\n  \
    cpulab pingpong --pairs 0:0,0:1,unpinned --json > pingpong.json\n  \
    cpulab pingpong --pairs 1:0,1:unpinned --processes")]
pub struct Args {
    /// Wakeup methods, comma-separated: pipe, unix, tcp, futex, eventfd, spin, or all.
    #[arg(long, short, value_delimiter = ',', default_value = "pipe")]
    pub method: Vec<String>,
    /// Placements: `auto` (one pair per placement class, plus unpinned), `all` (every ordered
    /// pair: a matrix), or initiator:responder pairs like `0:0,0:1,unpinned`; one end may be
    /// `unpinned` (or `any`, `*`): `1:unpinned` pins the initiator to CPU 1 and leaves the
    /// responder to the scheduler.
    #[arg(long, default_value = "auto")]
    pub pairs: String,
    /// Use only these CPUs (taskset syntax, e.g. `0-3,8`).
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// Two processes (cpulab and a forked child) instead of two threads.
    #[arg(long)]
    pub processes: bool,
    /// Untimed warm-up before each run: `100ms`, `0.1` (a bare number is seconds).
    #[arg(long, default_value = "100ms", value_name = "TIME")]
    pub warmup: String,
    /// Longest measured time of one run: `2s`, `500ms` (a bare number is seconds).
    #[arg(long, default_value = "2s", value_name = "TIME")]
    pub max_time: String,
    /// Stop a run once the 95% CI half-width is within this percentage of the mean (0 = always
    /// run for --max-time).
    #[arg(long, default_value = "2", value_name = "PERCENT")]
    pub target_ci: String,
    /// Also count with perf events on both endpoints (task clock; cycles and instructions where
    /// the CPU exposes them). They add cost to every context switch, so blocking round trips
    /// measured with them are slower.
    #[arg(long)]
    pub perf: bool,
    /// Skip the check for other load before measuring.
    #[arg(long)]
    pub no_load_check: bool,
    /// After each wakeup the initiator writes this much of its own memory (one word per 64-byte
    /// line: `256K`, `1M`), timed apart from the round trip: shows how much slower the first
    /// work after a wakeup runs in each placement (a vCPU that halted may return to cold caches)
    #[arg(long, value_name = "SIZE")]
    pub touch: Option<String>,
    /// `--json`, `--html FILE`.
    #[command(flatten)]
    pub output: crate::emit::OutputArgs,
}

/// Turns flags into settings, rejecting bad input with one line (exit 2).
pub fn settings(args: &Args, machine: &Machine) -> Result<PingpongSettings> {
    let mut methods = Vec::new();
    for m in &args.method {
        if m.trim() == "all" {
            methods.extend(Method::ALL);
        } else {
            methods.push(m.parse::<Method>().map_err(bad_input)?);
        }
    }
    methods.dedup();
    let cpus = match &args.cpus {
        Some(text) => Some(machine.cpus(text)?),
        None => None,
    };
    let usable = cpus.clone().unwrap_or_else(|| machine.allowed.clone());
    let pairs = pingpong::parse_pairs(&args.pairs).map_err(bad_input)?;
    if let PairSpec::List(list) = &pairs {
        let named: CpuSet = list
            .iter()
            .flat_map(|p| [p.initiator(), p.responder()])
            .flatten()
            .collect();
        affinity::validate(&named, &machine.topology, &usable)?;
    }
    let seconds = |flag: &str, text: &str| flag_duration(flag, text).map(|d| d.as_secs_f64());
    let warmup_s = seconds("warmup", &args.warmup)?;
    let max_time_s = seconds("max-time", &args.max_time)?;
    if max_time_s <= 0.0 {
        return Err(bad_input(
            "--max-time must be more than 0; give a time like `2s`",
        ));
    }
    let target = args.target_ci.trim().trim_end_matches('%');
    let target_ci_rel = match target.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..100.0).contains(&v) => v / 100.0,
        _ => {
            return Err(bad_input(format!(
                "--target-ci `{}` is not a percentage; give one like `2` (for ±2%)",
                args.target_ci
            )));
        }
    };
    Ok(PingpongSettings {
        methods,
        endpoints: if args.processes {
            Endpoints::Processes
        } else {
            Endpoints::Threads
        },
        pairs,
        cpus,
        warmup_s,
        max_time_s,
        target_ci_rel,
        load_check_s: if args.no_load_check { 0.0 } else { 0.2 },
        perf_counters: args.perf,
        touch_bytes: match &args.touch {
            Some(t) => {
                crate::units::parse_bytes(t).map_err(|e| bad_input(format!("--touch: {e}")))?
            }
            None => 0,
        },
        ..PingpongSettings::default()
    })
}

impl Command for Pingpong {
    type Args = Args;
    const ABOUT: &'static str = "Round-trip cost between two endpoints for every placement class, with the counters that explain it";

    fn settings(args: &Args, machine: &Machine) -> Result<PingpongSettings> {
        settings(args, machine)
    }

    fn output(args: &Args) -> &crate::emit::OutputArgs {
        &args.output
    }
}
