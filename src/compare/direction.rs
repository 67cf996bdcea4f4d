//! Which way is worse: from a figure's type where its kind has typed figures, else guessed
//! from its name (the fallback).
//!
//! Every experiment's figures carry their [`Direction`] in their type
//! ([`crate::experiment::Figure`]); `compare` reads it from there through the registry, and
//! [`from_direction`] turns it into the direction of worse (the doctor's and the probe's figures
//! are typed too). Only for documents without typed figures (doctor or probe results older than
//! theirs) does `compare` fall back to [`of_path`], which reads
//! the key's spelling: a time or a cost got worse when it grew, a rate or a share when it
//! shrank. The name is read from the innermost key outwards, so `tps.samples` is a rate and
//! `wakeup[...].rtt_ns` a time. A key that names both an overhead and a rate
//! (`migrations_per_s`: more migrations per second is worse, but `per_s` reads as a rate) is
//! ambiguous, and the guess says "unknown" rather than pick one: the first version called more
//! migrations an improvement. A figure of unknown direction is compared but never called better
//! or worse, and never fails a `--fail-on-regression` gate.

use crate::experiment::Direction;
use serde::Serialize;

/// The direction in which a figure gets worse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Worse {
    /// Times, latencies, costs, counts of overhead events.
    Higher,
    /// Rates, throughput, shares, speedups.
    Lower,
    /// The type says neither is better, or the name does not say: direction unknown.
    Unknown,
}

/// Where a figure's direction came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DirectionSource {
    /// The figure's type (its experiment's `figures()`).
    Typed,
    /// Guessed from the key's spelling: the fallback for kinds without typed figures.
    Name,
}

/// The direction of worse of a typed figure.
pub fn from_direction(d: Direction) -> Worse {
    match d {
        Direction::LowerIsBetter => Worse::Higher,
        Direction::HigherIsBetter => Worse::Lower,
        Direction::Neither => Worse::Unknown,
    }
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
    let rate = LOWER_IS_WORSE.iter().any(|w| k.contains(w));
    let overhead = HIGHER_IS_WORSE.iter().any(|w| k.contains(w));
    match (rate, overhead) {
        // Both words: a rate of an overhead (`migrations_per_s`) or worse. Do not guess.
        (true, true) => Worse::Unknown,
        (true, false) => Worse::Lower,
        (false, true) => Worse::Higher,
        // Rates were ruled out above, so a time suffix means a time (`per_s` ends in `_s`).
        (false, false) if TIME_SUFFIXES.iter().any(|s| k.ends_with(s)) => Worse::Higher,
        (false, false) => Worse::Unknown,
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
    // The innermost key that says anything decides; an ambiguous one stops the search (an outer
    // key does not know better).
    for k in keys.iter().rev() {
        let k = k.to_ascii_lowercase();
        let says = LOWER_IS_WORSE
            .iter()
            .chain(HIGHER_IS_WORSE)
            .any(|w| k.contains(w))
            || TIME_SUFFIXES.iter().any(|s| k.ends_with(s));
        if says {
            return of_key(&k);
        }
    }
    Worse::Unknown
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

    /// The first version read `migrations_per_s` as a rate (`per_s`), so more migrations
    /// counted as an improvement. The name alone cannot tell; the guess must say so.
    #[test]
    fn migrations_per_s_is_not_guessed_to_be_better_when_it_grows() {
        assert_eq!(
            of_path("wakeup[class=unpinned].migrations_per_s"),
            Worse::Unknown
        );
        assert_eq!(of_path("switches_per_s"), Worse::Unknown);
        assert_eq!(
            from_direction(Direction::LowerIsBetter),
            Worse::Higher,
            "typed: more migrations per second is worse"
        );
    }

    #[test]
    fn every_typed_direction_maps_to_its_worse() {
        assert_eq!(from_direction(Direction::LowerIsBetter), Worse::Higher);
        assert_eq!(from_direction(Direction::HigherIsBetter), Worse::Lower);
        assert_eq!(from_direction(Direction::Neither), Worse::Unknown);
    }

    #[test]
    fn a_time_suffix_alone_says_higher_is_worse() {
        assert_eq!(of_path("runs[n=2].total_ms"), Worse::Higher);
        assert_eq!(of_path("loop.body_cycles"), Worse::Higher);
        assert_eq!(of_path("TOTAL_US"), Worse::Higher);
        // An outer key decides only when the inner one says nothing.
        assert_eq!(of_path("rtt_ns[cpu=1].widgets"), Worse::Higher);
        assert_eq!(of_path("tps.latency_ns"), Worse::Higher);
        assert_eq!(of_path("latency.tps"), Worse::Lower);
        // Nested brackets: the identity ends at its own closing bracket.
        assert_eq!(of_path("a[x=[1]].b[rate=2].widgets"), Worse::Unknown);
        assert_eq!(of_path("a[x=[1]].steal"), Worse::Higher);
    }
}
