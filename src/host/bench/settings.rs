//! `cpulab host bench`'s flags and their validation into [`BenchSettings`]: every bad value is
//! one line and exit 2 here; nothing below re-validates.

use crate::cpulist::CpuSet;
use crate::error::bad_input;
use crate::machine::Machine;
use crate::units::{flag_count, flag_duration, parse_duration};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Fewest windows per point: two give an interval four times wider than their spread.
pub const MIN_REPEATS: usize = 3;
/// The longest halt-poll limit or polling window accepted (KVM's own default is 200 us).
const MAX_LIMIT: Duration = Duration::from_millis(10);

/// The parts of the bench.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Part {
    /// Halt, spin and polling ping-pong per placement of the two vCPU threads.
    Exchange,
    /// The VM's own halt-poll limit swept.
    HaltPoll,
    /// Two VMs of burners on the same CPUs (fair share).
    Share,
}

impl Part {
    const ALL: [Part; 3] = [Part::Exchange, Part::HaltPoll, Part::Share];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exchange => "exchange",
            Self::HaltPoll => "halt-poll",
            Self::Share => "share",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchSettings {
    /// One measured window.
    #[serde(rename = "duration_s", with = "crate::units::serde_secs")]
    pub duration: Duration,
    /// Windows per point.
    pub repeats: usize,
    /// Run before the first window of each point, not measured.
    #[serde(rename = "warmup_s", with = "crate::units::serde_secs")]
    pub warmup: Duration,
    pub parts: Vec<Part>,
    /// The host CPUs the vCPU threads may use; `None`: every CPU this process may use.
    pub cpus: Option<CpuSet>,
    /// The sweep's limits, ns.
    pub halt_poll_ns: Vec<u64>,
    /// The polling exchange's windows, ns.
    pub poll_window_ns: Vec<u64>,
    /// Fair-share rows: busy vCPUs of VM1 and of VM2.
    pub share: Vec<(u32, u32)>,
    pub check_load: bool,
}

#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab host bench\n  \
    cpulab host bench --parts exchange --duration 2s --repeats 5\n  \
    cpulab host bench --parts halt-poll --halt-poll 0,20us,50us,100us,200us,400us --json > hp.json\n  \
    cpulab host bench --parts share --share 2+2,1+2 --cpus 0-1")]
pub struct Args {
    /// Which parts to run: exchange (halt, spin and polling ping-pong per placement),
    /// halt-poll (the VM's own limit swept), share (two VMs of burners).
    #[arg(long, value_name = "LIST", default_value = "exchange,halt-poll,share")]
    pub parts: String,
    /// One measured window.
    #[arg(long, value_name = "TIME", default_value = "1s")]
    pub duration: String,
    /// Windows per point (3 to 100).
    #[arg(long, value_name = "N", default_value_t = MIN_REPEATS)]
    pub repeats: usize,
    /// The host CPUs the vCPU threads may use (taskset syntax).
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// The halt-poll limits the sweep sets on its own VM, in turn (0 turns polling off).
    #[arg(
        long,
        value_name = "LIST",
        default_value = "0,10us,25us,50us,100us,200us,400us"
    )]
    pub halt_poll: String,
    /// The polling ping-pong's windows: how long the waiting vCPU polls before it halts.
    #[arg(long, value_name = "LIST", default_value = "5us,500us")]
    pub poll_window: String,
    /// Fair-share rows, VM1's busy vCPUs + VM2's (each 1 to 8).
    #[arg(long, value_name = "LIST", default_value = "1+1,2+2,1+2,2+1")]
    pub share: String,
    /// Skip the check for other load before measuring.
    #[arg(long)]
    pub no_load_check: bool,
    #[command(flatten)]
    pub output: crate::emit::OutputArgs,
}

fn durations_ns(flag: &str, text: &str) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    for w in text.split(',').map(str::trim) {
        let d = if w == "0" {
            Duration::ZERO
        } else {
            parse_duration(w).map_err(|e| bad_input(format!("--{flag} {text}: {e}")))?
        };
        if d > MAX_LIMIT {
            return Err(bad_input(format!(
                "--{flag} {w}: above 10ms; give times such as 50us (KVM's default limit is 200us)"
            )));
        }
        out.push(d.as_nanos() as u64);
    }
    Ok(out)
}

fn parts(text: &str) -> Result<Vec<Part>> {
    let mut out = Vec::new();
    for w in text.split(',').map(str::trim) {
        let p = Part::ALL
            .into_iter()
            .find(|p| p.as_str() == w)
            .ok_or_else(|| {
                bad_input(format!(
                    "--parts {text}: no part named '{w}'; give some of exchange, halt-poll, share"
                ))
            })?;
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

fn share_rows(text: &str) -> Result<Vec<(u32, u32)>> {
    let bad = |w: &str| {
        bad_input(format!(
            "--share {text}: '{w}' is not VM1+VM2 busy vCPUs, each 1 to 8; give rows such as 2+2,1+2"
        ))
    };
    text.split(',')
        .map(str::trim)
        .map(|w| {
            let (a, b) = w.split_once('+').ok_or_else(|| bad(w))?;
            let n = |s: &str| s.trim().parse::<u32>().ok().filter(|v| (1..=8).contains(v));
            Ok((n(a).ok_or_else(|| bad(w))?, n(b).ok_or_else(|| bad(w))?))
        })
        .collect()
}

pub fn settings(a: &Args, machine: &Machine) -> Result<BenchSettings> {
    let duration = flag_duration("duration", &a.duration)?;
    if duration < Duration::from_millis(50) || duration > Duration::from_secs(60) {
        return Err(bad_input(format!(
            "--duration {}: give 50ms to 60s per window",
            a.duration
        )));
    }
    Ok(BenchSettings {
        duration,
        repeats: flag_count("repeats", a.repeats, MIN_REPEATS, crate::units::MAX_REPEATS)?,
        warmup: Duration::from_millis(200).min(duration),
        parts: parts(&a.parts)?,
        cpus: match &a.cpus {
            Some(t) => Some(machine.flag_cpus("--cpus", t)?),
            None => None,
        },
        halt_poll_ns: durations_ns("halt-poll", &a.halt_poll)?,
        poll_window_ns: durations_ns("poll-window", &a.poll_window)?,
        share: share_rows(&a.share)?,
        check_load: !a.no_load_check,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_bad_ones_are_one_line_exit_2() {
        assert_eq!(
            parts("share,exchange,share").unwrap(),
            vec![Part::Exchange, Part::Share]
        );
        assert_eq!(
            durations_ns("halt-poll", "0,50us,1ms").unwrap(),
            vec![0, 50_000, 1_000_000]
        );
        assert_eq!(share_rows("2+2, 1+2").unwrap(), vec![(2, 2), (1, 2)]);
        for e in [
            parts("exchange,bogus").unwrap_err(),
            durations_ns("halt-poll", "1s").unwrap_err(),
            durations_ns("halt-poll", "fast").unwrap_err(),
            share_rows("2+0").unwrap_err(),
            share_rows("9+1").unwrap_err(),
            share_rows("3").unwrap_err(),
        ] {
            assert_eq!(crate::error::exit_code(&e), 2);
            assert_eq!(format!("{e:#}").lines().count(), 1, "{e:#}");
        }
    }
}
