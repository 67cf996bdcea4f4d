//! Reading the figure of merit out of a client's output.
//!
//! A load generator prints its own throughput; cpulab trusts that figure (it is what a user would
//! quote) and checks it against what it measured itself (the client's wall time). A metric is a
//! regular expression with a named group `value`; built-in ones know pgbench, ab, wrk and
//! redis-benchmark, and also read how many transactions the client completed, which turns
//! counters into costs per transaction. Without a count, transactions are metric x measured
//! duration.

use crate::error::bad_input;
use anyhow::Result;
use regex::Regex;
use serde::{Deserialize, Serialize};

/// What a metric is and how to find it.
#[derive(Clone, Debug)]
pub struct Metric {
    /// `pgbench`, `ab`, `wrk`, `redis-benchmark` or `custom`.
    pub parser: String,
    /// Unit of the value (`tps`, `requests/s`, or what the user says).
    pub unit: String,
    /// Larger is better (throughput) unless the user says otherwise.
    pub higher_is_better: bool,
    patterns: Vec<Regex>,
    count: Option<Regex>,
}

/// A parsed client result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reading {
    pub value: f64,
    /// Transactions or requests the client reports completing, when it says.
    pub transactions: Option<u64>,
}

fn re(s: &str) -> Regex {
    // The built-in patterns are literals checked by the tests below.
    Regex::new(s).unwrap_or_else(|e| panic!("built-in metric pattern {s}: {e}"))
}

impl Metric {
    /// Built-in parsers by name.
    pub fn builtin(name: &str) -> Option<Self> {
        let (unit, patterns, count): (&str, Vec<&str>, Option<&str>) = match name {
            // PostgreSQL 14+: "(without initial connection time)"; older: "(excluding connections
            // establishing)". Prefer those over the figure that includes connecting.
            "pgbench" => (
                "tps",
                vec![
                    r"tps = (?P<value>[0-9.]+) \((?:without|excluding)",
                    r"tps = (?P<value>[0-9.]+)",
                ],
                Some(r"number of transactions actually processed: (?P<value>\d+)"),
            ),
            "ab" => (
                "requests/s",
                vec![r"Requests per second:\s+(?P<value>[0-9.]+)"],
                Some(r"Complete requests:\s+(?P<value>\d+)"),
            ),
            "wrk" => (
                "requests/s",
                vec![r"Requests/sec:\s+(?P<value>[0-9.]+)"],
                Some(r"(?P<value>\d+) requests in "),
            ),
            "redis-benchmark" => (
                "requests/s",
                vec![r"(?P<value>[0-9.]+) requests per second"],
                Some(r"(?P<value>\d+) requests completed in"),
            ),
            _ => return None,
        };
        Some(Self {
            parser: name.to_string(),
            unit: unit.to_string(),
            higher_is_better: true,
            patterns: patterns.into_iter().map(re).collect(),
            count: count.map(re),
        })
    }

    /// The built-in parser for a client program, from its file name (`/usr/bin/ab` -> ab).
    pub fn for_program(program: &str) -> Option<Self> {
        let base = program.rsplit('/').next().unwrap_or(program);
        Self::builtin(base)
    }

    /// A user's `--metric`: a built-in name, or a regex with a named group `value`.
    pub fn parse(spec: &str, unit: Option<&str>, higher_is_better: bool) -> Result<Self> {
        if let Some(mut m) = Self::builtin(spec) {
            m.higher_is_better = higher_is_better;
            if let Some(u) = unit {
                m.unit = u.to_string();
            }
            return Ok(m);
        }
        // The regex crate's message spans lines (the pattern, a caret, the error): its last
        // line names the error, and one line is what bad input gets.
        let r = Regex::new(spec).map_err(|e| {
            let text = e.to_string();
            let why = text.lines().last().unwrap_or_default().trim();
            let why = why.strip_prefix("error: ").unwrap_or(why);
            bad_input(format!(
                "--metric `{spec}` is not a regular expression ({why}); write it like \
                 `tps = (?P<value>[0-9.]+)`"
            ))
        })?;
        if !r.capture_names().any(|n| n == Some("value")) {
            return Err(bad_input(format!(
                "--metric `{spec}` has no named group `value`; write it like `tps = (?P<value>[0-9.]+)` \
                 or name a built-in parser: pgbench, ab, wrk, redis-benchmark"
            )));
        }
        Ok(Self {
            parser: "custom".to_string(),
            unit: unit.unwrap_or("value").to_string(),
            higher_is_better,
            patterns: vec![r],
            count: None,
        })
    }

    /// Finds the value in `output`. `None` when the client printed no metric.
    pub fn read(&self, output: &str) -> Option<Reading> {
        let value = self.patterns.iter().find_map(|p| capture_f64(p, output))?;
        let transactions = self
            .count
            .as_ref()
            .and_then(|c| capture_f64(c, output))
            .map(|v| v as u64);
        Some(Reading {
            value,
            transactions,
        })
    }

    /// The patterns, for error messages.
    pub fn describe(&self) -> String {
        let p: Vec<String> = self.patterns.iter().map(|r| r.to_string()).collect();
        format!("{} ({})", self.parser, p.join(" | "))
    }
}

/// The last match of `value` (a client that prints progress lines ends with its summary).
fn capture_f64(r: &Regex, text: &str) -> Option<f64> {
    r.captures_iter(text)
        .filter_map(|c| c.name("value")?.as_str().parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .last()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PGBENCH: &str = "pgbench (15.10 (Debian 15.10-0+deb12u1))\ntransaction type: select1.sql\n\
scaling factor: 1\nquery mode: simple\nnumber of clients: 1\nnumber of threads: 1\n\
maximum number of tries: 1\nduration: 5 s\nnumber of transactions actually processed: 346567\n\
number of failed transactions: 0 (0.000%)\nlatency average = 0.014 ms\n\
initial connection time = 2.345 ms\ntps = 69356.123372 (without initial connection time)\n";

    #[test]
    fn a_pattern_that_is_no_regex_is_one_line_naming_it() {
        // The regex crate's own message spans three lines.
        let Err(e) = Metric::parse("tps = (", None, true) else {
            panic!("an unclosed group parsed")
        };
        let text = format!("{e:#}");
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(!text.contains('\n'), "{text}");
        assert!(
            text.starts_with("--metric `tps = (` is not a regular expression (unclosed group)"),
            "{text}"
        );
    }

    #[test]
    fn pgbench_output() {
        let r = Metric::builtin("pgbench").unwrap().read(PGBENCH).unwrap();
        assert_eq!(r.value, 69356.123372);
        assert_eq!(r.transactions, Some(346567));
    }

    #[test]
    fn old_pgbench_prefers_excluding_connections() {
        let t = "tps = 100.5 (including connections establishing)\n\
                 tps = 101.5 (excluding connections establishing)\n";
        assert_eq!(
            Metric::builtin("pgbench").unwrap().read(t).unwrap().value,
            101.5
        );
    }

    #[test]
    fn ab_output() {
        let t = "Complete requests:      9650\nFailed requests:        0\n\
                 Requests per second:    4824.91 [#/sec] (mean)\n";
        let r = Metric::builtin("ab").unwrap().read(t).unwrap();
        assert_eq!((r.value, r.transactions), (4824.91, Some(9650)));
    }

    #[test]
    fn wrk_output() {
        let t = "Running 2s test @ http://127.0.0.1:8080/\n  1 threads and 1 connections\n\
                 \x20 20123 requests in 2.00s, 4.9MB read\nRequests/sec:  10061.20\n";
        let r = Metric::builtin("wrk").unwrap().read(t).unwrap();
        assert_eq!((r.value, r.transactions), (10061.20, Some(20123)));
    }

    #[test]
    fn redis_benchmark_output() {
        let q = "PING_INLINE: 52356.02 requests per second, p50=0.015 msec\n";
        assert_eq!(
            Metric::builtin("redis-benchmark")
                .unwrap()
                .read(q)
                .unwrap()
                .value,
            52356.02
        );
        let full = "====== GET ======\n  100000 requests completed in 1.91 seconds\n\
                    Summary:\n  throughput summary: 52356.02 requests per second\n";
        let r = Metric::builtin("redis-benchmark")
            .unwrap()
            .read(full)
            .unwrap();
        assert_eq!(r.transactions, Some(100000));
    }

    #[test]
    fn custom_regex_needs_value_group() {
        assert!(Metric::parse("rate: ([0-9]+)", None, true).is_err());
        assert!(Metric::parse("(", None, true).is_err());
        let m = Metric::parse(r"rate: (?P<value>[0-9]+)", Some("ops/s"), true).unwrap();
        assert_eq!(m.read("x\nrate: 12\nrate: 15\n").unwrap().value, 15.0);
        assert!(m.read("nothing").is_none());
    }

    #[test]
    fn parser_from_program_name() {
        assert_eq!(Metric::for_program("/usr/bin/ab").unwrap().parser, "ab");
        assert!(Metric::for_program("curl").is_none());
    }
}
