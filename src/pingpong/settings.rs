//! What a pingpong run measures, already validated.
//!
//! The command line (or the doctor) builds a [`PingpongSettings`]; nothing below it sees clap
//! types or re-checks CPU numbers. The settings are recorded in the result as they were used,
//! so a saved result says exactly how it was taken.

use crate::cpulist::CpuSet;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How the two endpoints wake each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// Two pipes, one per direction, 4-byte messages (what `perf bench sched pipe` does).
    Pipe,
    /// A Unix stream socketpair.
    Unix,
    /// A TCP connection over loopback (127.0.0.1) with TCP_NODELAY.
    Tcp,
    /// A futex word: store, FUTEX_WAKE, FUTEX_WAIT.
    Futex,
    /// Two eventfds, one per direction.
    Eventfd,
    /// Spinning on one shared cache line: no sleep, no wakeup, only cache-line transfer.
    Spin,
}

impl Method {
    pub const ALL: [Method; 6] = [
        Method::Pipe,
        Method::Unix,
        Method::Tcp,
        Method::Futex,
        Method::Eventfd,
        Method::Spin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Method::Pipe => "pipe",
            Method::Unix => "unix",
            Method::Tcp => "tcp",
            Method::Futex => "futex",
            Method::Eventfd => "eventfd",
            Method::Spin => "spin",
        }
    }

    /// True for the methods where the waiting side sleeps in the kernel until woken.
    pub fn is_blocking(self) -> bool {
        self != Method::Spin
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Method {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Method::ALL
            .into_iter()
            .find(|m| m.as_str() == s.trim())
            .ok_or_else(|| {
                format!(
                    "--method `{}` is no method; choose from pipe, unix, tcp, futex, eventfd, spin (or all)",
                    s.trim()
                )
            })
    }
}

/// What the two endpoints are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Endpoints {
    /// Two threads of the cpulab process: a wakeup switches threads, not address spaces.
    #[default]
    Threads,
    /// cpulab and one forked child: every switch between them also switches address space.
    Processes,
}

/// One placement to measure: two pinned CPUs, one end pinned and the other free, or unpinned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// The initiator pinned to `a`, the responder pinned to `b`.
    Pinned { a: u32, b: u32 },
    /// The initiator pinned to `a`; the responder free on any CPU of the allowed set.
    ResponderUnpinned { a: u32 },
    /// The initiator free on any CPU of the allowed set; the responder pinned to `b`.
    InitiatorUnpinned { b: u32 },
    /// Both ends free to run on any CPU of the allowed set; the scheduler places them.
    Unpinned,
}

impl Placement {
    /// The placement with the initiator on `a` and the responder on `b` (`None`: free).
    pub fn of_ends(a: Option<u32>, b: Option<u32>) -> Self {
        match (a, b) {
            (Some(a), Some(b)) => Placement::Pinned { a, b },
            (Some(a), None) => Placement::ResponderUnpinned { a },
            (None, Some(b)) => Placement::InitiatorUnpinned { b },
            (None, None) => Placement::Unpinned,
        }
    }

    /// The CPU the initiator is pinned to; `None` when it is free.
    pub fn initiator(self) -> Option<u32> {
        match self {
            Placement::Pinned { a, .. } | Placement::ResponderUnpinned { a } => Some(a),
            Placement::InitiatorUnpinned { .. } | Placement::Unpinned => None,
        }
    }

    /// The CPU the responder is pinned to; `None` when it is free.
    pub fn responder(self) -> Option<u32> {
        match self {
            Placement::Pinned { b, .. } | Placement::InitiatorUnpinned { b } => Some(b),
            Placement::ResponderUnpinned { .. } | Placement::Unpinned => None,
        }
    }

    /// True when the scheduler places at least one end (so where it ran is worth recording).
    pub fn has_free_end(self) -> bool {
        !matches!(self, Placement::Pinned { .. })
    }
}

/// Which placements to measure.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PairSpec {
    /// One representative pair per placement class among the allowed CPUs, plus unpinned.
    #[default]
    Auto,
    /// Every ordered pair of allowed CPUs (the diagonal included): a matrix.
    All,
    /// Exactly these placements, in this order.
    List(Vec<Placement>),
}

/// Validated settings of one `pingpong` invocation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PingpongSettings {
    /// Wakeup methods to measure, in order.
    pub methods: Vec<Method>,
    /// Two threads of one process, or two processes.
    pub endpoints: Endpoints,
    /// Placements to measure.
    pub pairs: PairSpec,
    /// CPUs the experiment may use; `None` means every CPU this process is allowed.
    pub cpus: Option<CpuSet>,
    /// Seconds of untimed round trips before each run (also sizes the batches).
    pub warmup_s: f64,
    /// Upper bound on the measured time of one run, in seconds.
    pub max_time_s: f64,
    /// A run stops early once the 95% CI half-width is within this fraction of the mean
    /// (0.02 = 2%); 0 means always run for `max_time_s`.
    pub target_ci_rel: f64,
    /// Fewest batches before a run may stop on the CI target.
    pub min_batches: usize,
    /// Target length of one batch, in seconds: batch means are the samples of the CI.
    pub batch_s: f64,
    /// How long to watch for other load before measuring, in seconds (0 = do not check).
    pub load_check_s: f64,
    /// Open perf events (software, and hardware where available) on both endpoints. Off by
    /// default: each open event adds work to every context switch of its task, which inflates
    /// blocking round trips; the /proc counters cost nothing.
    pub perf_counters: bool,
    /// Bytes of its own memory the initiator writes (one word per 64-byte line) as soon as each
    /// pong wakes it, timed apart from the round trip: how much slower the first work after a
    /// wakeup runs in each placement (a vCPU that halted may come back to cold caches). 0: none.
    #[serde(default)]
    pub touch_bytes: u64,
}

impl Default for PingpongSettings {
    fn default() -> Self {
        Self {
            methods: vec![Method::Pipe],
            endpoints: Endpoints::Threads,
            pairs: PairSpec::Auto,
            cpus: None,
            warmup_s: 0.1,
            max_time_s: 2.0,
            target_ci_rel: 0.02,
            min_batches: 10,
            batch_s: 0.005,
            load_check_s: 0.2,
            perf_counters: false,
            touch_bytes: 0,
        }
    }
}

impl PingpongSettings {
    /// Settings for a quick measurement of the given methods and placements (the doctor's
    /// entry point): everything else at its default.
    pub fn quick(methods: &[Method], pairs: PairSpec, max_time_s: f64) -> Self {
        Self {
            methods: methods.to_vec(),
            pairs,
            max_time_s,
            ..Self::default()
        }
    }
}

/// Parses a `--pairs` value: `auto`, `all`, or a list like `0:0,0:1,1:unpinned,unpinned`,
/// where either end may be `unpinned` (or `any`, `*`) to leave it to the scheduler. CPU numbers
/// are checked against the machine by the caller.
pub fn parse_pairs(text: &str) -> Result<PairSpec, String> {
    let t = text.trim();
    match t {
        "auto" => return Ok(PairSpec::Auto),
        "all" => return Ok(PairSpec::All),
        "" => return Err("empty --pairs; give `auto`, `all` or pairs like `0:0,0:1`".into()),
        _ => {}
    }
    let mut list = Vec::new();
    for part in t.split(',').map(str::trim) {
        if part == "unpinned" {
            list.push(Placement::Unpinned);
            continue;
        }
        let bad = || {
            format!(
                "--pairs `{part}` is not a CPU pair; write initiator:responder pairs like \
                 `0:0,0:1,1:unpinned` (or `unpinned`)"
            )
        };
        let end = |text: &str| match text.trim() {
            "unpinned" | "any" | "*" => Ok(None),
            n => n.parse::<u32>().map(Some).map_err(|_| bad()),
        };
        let (a, b) = part.split_once(':').ok_or_else(bad)?;
        list.push(Placement::of_ends(end(a)?, end(b)?));
    }
    Ok(PairSpec::List(list))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pairs() {
        assert_eq!(parse_pairs("auto"), Ok(PairSpec::Auto));
        assert_eq!(parse_pairs("all"), Ok(PairSpec::All));
        assert_eq!(
            parse_pairs("0:0, 0:1,unpinned"),
            Ok(PairSpec::List(vec![
                Placement::Pinned { a: 0, b: 0 },
                Placement::Pinned { a: 0, b: 1 },
                Placement::Unpinned
            ]))
        );
        for bad in ["0", "0:", ":1", "a:b", "0-1", "0:1,", ""] {
            assert!(parse_pairs(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_half_pinned_pairs_either_way_round() {
        assert_eq!(
            parse_pairs("1:unpinned, unpinned:0,2:any,any:3, 4 : * ,*:5"),
            Ok(PairSpec::List(vec![
                Placement::ResponderUnpinned { a: 1 },
                Placement::InitiatorUnpinned { b: 0 },
                Placement::ResponderUnpinned { a: 2 },
                Placement::InitiatorUnpinned { b: 3 },
                Placement::ResponderUnpinned { a: 4 },
                Placement::InitiatorUnpinned { b: 5 },
            ]))
        );
        // Both ends free, however written, is the plain unpinned placement.
        assert_eq!(
            parse_pairs("unpinned:unpinned,*:*,any:unpinned"),
            Ok(PairSpec::List(vec![Placement::Unpinned; 3]))
        );
        for bad in [
            "1:unpin",
            "x:unpinned",
            "unpinned:x",
            "unpinned:",
            ":unpinned",
            "-1:*",
            "1:unpinned:0",
            "any",
            "*",
            "4294967296:*",
            "1:**",
        ] {
            let e = parse_pairs(bad).unwrap_err();
            assert!(
                e.contains("not a CPU pair") && !e.contains('\n'),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn each_end_reads_back_from_the_placement() {
        for (a, b) in [
            (Some(1), Some(0)),
            (Some(1), None),
            (None, Some(0)),
            (None, None),
        ] {
            let p = Placement::of_ends(a, b);
            assert_eq!((p.initiator(), p.responder()), (a, b));
            assert_eq!(p.has_free_end(), a.is_none() || b.is_none());
        }
    }

    #[test]
    fn methods_round_trip_through_names() {
        for m in Method::ALL {
            assert_eq!(m.as_str().parse::<Method>(), Ok(m));
        }
        assert!("pipes".parse::<Method>().is_err());
    }
}
