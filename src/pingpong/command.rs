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
use crate::probe::memory::{self, Room};
use crate::units::{flag_duration, fmt_bytes, parse_bytes};
use anyhow::Result;
use std::path::Path;

/// Round-trip cost between two endpoints for every placement class, with the counters that
/// explain it.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab pingpong\n  \
    cpulab pingpong --method pipe,futex,spin --pairs all\n  \
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
        Some(text) => Some(machine.flag_cpus("--cpus", text)?),
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
        affinity::validate(&named, &machine.topology, &usable)
            .map_err(|e| e.context(format!("--pairs `{}`", args.pairs)))?;
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
        touch_bytes: touch_bytes(args.touch.as_deref(), &machine.root)?,
        ..PingpongSettings::default()
    })
}

/// `--touch SIZE` in bytes (0 without it), refused when it does not fit in memory here.
fn touch_bytes(text: Option<&str>, root: &Path) -> Result<u64> {
    let Some(text) = text else { return Ok(0) };
    let bytes = parse_bytes(text).map_err(|e| bad_input(format!("--touch: {e}")))?;
    check_touch_fits(bytes, &memory::read_rooms(root)).map_err(bad_input)?;
    Ok(bytes)
}

/// Refuses a `--touch` buffer of more than half the smallest room this process has for new
/// memory (pure). The buffer is written whole before the first batch and kept through the
/// run, so one that does not fit is an OOM kill mid-run; half leaves room for everything else
/// the process and its neighbours take meanwhile. With no room known there is nothing to
/// check against, and the run goes ahead.
pub fn check_touch_fits(bytes: u64, rooms: &[Room]) -> Result<(), String> {
    let Some(tightest) = rooms.iter().min_by_key(|r| r.bytes) else {
        return Ok(());
    };
    if bytes.saturating_mul(2) <= tightest.bytes {
        return Ok(());
    }
    let half = tightest.bytes / 2;
    let fix = match half {
        0..1024 => "free memory first, or run where more is free".to_string(),
        1024..1_048_576 => format!("give `--touch {}K` or less", half >> 10),
        _ => format!("give `--touch {}M` or less", half >> 20),
    };
    Err(format!(
        "--touch {} is more than half of the {} this process may still take, by {}; {fix}",
        fmt_bytes(bytes),
        fmt_bytes(tightest.bytes),
        tightest.source,
    ))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn room(bytes: u64, source: &str) -> Room {
        Room {
            bytes,
            source: source.to_string(),
        }
    }

    /// The `--touch SIZE` a refusal suggests.
    fn suggested(message: &str) -> Option<u64> {
        let (_, rest) = message.split_once("give `--touch ")?;
        parse_bytes(rest.split_once('`')?.0).ok()
    }

    #[test]
    fn a_touch_buffer_may_take_half_the_tightest_room() {
        let rooms = [
            room(8 << 30, "MemAvailable in /proc/meminfo"),
            room(300 << 20, "the cgroup limit /sys/fs/cgroup/box/memory.max"),
        ];
        assert_eq!(check_touch_fits(150 << 20, &rooms), Ok(()));
        let e = check_touch_fits((150 << 20) + 1, &rooms).unwrap_err();
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(
            e.starts_with("--touch 150.00 MiB is more than half of the 300 MiB"),
            "{e}"
        );
        assert!(
            e.contains("/sys/fs/cgroup/box/memory.max"),
            "names the source: {e}"
        );
        assert_eq!(suggested(&e), Some(150 << 20), "{e}");
        // In either order, the smaller room binds.
        let swapped = [rooms[1].clone(), rooms[0].clone()];
        assert_eq!(
            check_touch_fits(1 << 30, &swapped),
            Err(check_touch_fits(1 << 30, &rooms).unwrap_err())
        );
        // Nothing known: nothing to refuse on.
        assert_eq!(check_touch_fits(1 << 30, &[]), Ok(()));
    }

    #[test]
    fn the_size_a_refusal_suggests_fits() {
        for room_bytes in [(300 << 20) + 12345, 3 << 20, 700 << 10, 5000] {
            let rooms = [room(room_bytes, "MemAvailable in /proc/meminfo")];
            let e = check_touch_fits(1 << 30, &rooms).unwrap_err();
            let s = suggested(&e).unwrap_or_else(|| panic!("{e}"));
            assert_eq!(check_touch_fits(s, &rooms), Ok(()), "{e}");
            assert!(
                s * 4 > room_bytes,
                "{s} is far below half of {room_bytes}: {e}"
            );
        }
        // Less than 2 KiB free: no size to suggest, the message says what to do instead.
        let e = check_touch_fits(1024, &[room(1500, "MemAvailable in /proc/meminfo")]).unwrap_err();
        assert_eq!(suggested(&e), None, "{e}");
        assert!(e.contains("free memory first"), "{e}");
    }
}
