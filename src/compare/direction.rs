//! Which way is worse, read from a figure's name.
//!
//! cpulab names every figure with its unit or its meaning (`rtt_ns`, `round_trips_per_s`,
//! `speedup`), which is what lets `compare` judge a figure it has never seen: a time or a cost got
//! worse when it grew, a rate or a share got worse when it shrank. The name is read from the
//! innermost key outwards, so `tps.samples` is a rate and `wakeup[...].rtt_ns` a time. Rates are
//! checked first because `per_s` also ends in `_s`. A figure whose name says neither is compared
//! but never called better or worse, and never fails a `--fail-on-regression` gate.

use serde::Serialize;

/// The direction in which a figure gets worse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Worse {
    /// Times, latencies, costs, counts of overhead events.
    Higher,
    /// Rates, throughput, shares, speedups.
    Lower,
    /// The name does not say.
    Unknown,
}

const LOWER_IS_WORSE: &[&str] = &[
    "per_ns",
    "per_us",
    "per_s",
    "per_sec",
    "tps",
    "throughput",
    "share",
    "speedup",
    "efficiency",
    "bandwidth",
    "ops",
    "rate",
    "ghz",
    "mhz",
    "freq",
    "score",
    "events",
];

const HIGHER_IS_WORSE: &[&str] = &[
    "latency",
    "rtt",
    "cost",
    "overhead",
    "penalty",
    "steal",
    "throttl",
    "switches",
    "migrations",
    "idle_entries",
    "irq_",
    "halts",
    "ipis",
    "duration",
    "elapsed",
    "wait",
];

const TIME_SUFFIXES: &[&str] = &["_ns", "_us", "_ms", "_s", "_cycles"];

fn of_key(key: &str) -> Worse {
    let k = key.to_ascii_lowercase();
    if LOWER_IS_WORSE.iter().any(|w| k.contains(w)) {
        Worse::Lower
    } else if HIGHER_IS_WORSE.iter().any(|w| k.contains(w))
        || TIME_SUFFIXES.iter().any(|s| k.ends_with(s))
    {
        Worse::Higher
    } else {
        Worse::Unknown
    }
}

/// The direction of worse for a figure path such as `runs[method=pipe].rtt_ns`.
pub fn of_path(path: &str) -> Worse {
    // Keys only: the identity in brackets (`class=shared-l2`) is not part of the name.
    let mut keys: Vec<String> = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for ch in path.chars() {
        match ch {
            '[' => depth += 1,
            ']' => depth -= 1,
            '.' if depth == 0 => keys.push(std::mem::take(&mut cur)),
            c if depth == 0 => cur.push(c),
            _ => {}
        }
    }
    keys.push(cur);
    keys.iter()
        .rev()
        .map(|k| of_key(k))
        .find(|w| *w != Worse::Unknown)
        .unwrap_or(Worse::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_say_the_direction() {
        assert_eq!(of_path("runs[method=pipe].rtt_ns"), Worse::Higher);
        assert_eq!(of_path("runs[method=pipe].round_trips_per_s"), Worse::Lower);
        assert_eq!(of_path("pgbench.tps"), Worse::Lower);
        assert_eq!(of_path("share[threads=2].measured_share"), Worse::Lower);
        assert_eq!(of_path("scale[policy=compact].speedup"), Worse::Lower);
        assert_eq!(of_path("oscost.getppid.cost_ns"), Worse::Higher);
        // A rate per nanosecond is not a time.
        assert_eq!(of_path("frequency.cold_per_ns"), Worse::Lower);
        assert_eq!(of_path("latency.samples"), Worse::Higher);
        assert_eq!(of_path("throughput.values"), Worse::Lower);
        assert_eq!(of_path("widgets"), Worse::Unknown);
        // The identity is not the name: `class=shared-l2` says nothing about direction.
        assert_eq!(of_path("x[class=shared-l2,rate=1].widgets"), Worse::Unknown);
    }
}
