//! Validated settings of a pair experiment: what to run, where, for how long, how often.
//!
//! `pair::command` turns flags into these; the doctor builds them directly with
//! [`PairSettings::preset`]. Nothing below this module sees clap types or re-validates.

use crate::cpulist::CpuSet;
use crate::pair::metric::Metric;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// Ready-made experiments with real programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// A throwaway PostgreSQL cluster and pgbench (field notes A and B).
    Pgbench,
    /// Apache httpd (else nginx, else built in) and ab (else wrk, else built in).
    Http,
    /// redis-server on a Unix socket and redis-benchmark.
    Redis,
}

/// pgbench workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// A script of `SELECT 1;` run with `-n`: one round trip per transaction, nothing else.
    Select1,
    /// `pgbench -i -s SCALE`, then the built-in select-only script (`-S`).
    Readonly,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgbenchSettings {
    /// What each transaction does.
    pub workload: Workload,
    /// pgbench `-c`.
    pub clients: u32,
    /// pgbench `-j`.
    pub threads: u32,
    /// pgbench `-i -s`, for `readonly`.
    pub scale: u32,
}

/// Which web server the http preset uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HttpServerKind {
    /// Apache if installed, else nginx, else built in.
    Auto,
    Apache,
    Nginx,
    /// A small HTTP server on a thread of cpulab.
    Builtin,
}

/// Which load generator the http preset uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HttpClientKind {
    /// ab if installed, else wrk, else built in.
    Auto,
    /// `ab -c 1`: a new connection per request.
    Ab,
    /// `wrk -t 1 -c 1`: one keep-alive connection.
    Wrk,
    /// One connection per request from a thread of cpulab.
    Builtin,
}

/// How to tell that a server is ready to serve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// A TCP connection to 127.0.0.1:PORT succeeds.
    Port(u16),
    /// A connection to a Unix socket succeeds.
    Socket(PathBuf),
    /// A command exits with status 0.
    Command(Vec<String>),
}

/// What runs.
#[derive(Clone, Debug)]
pub enum Programs {
    /// Any server and client given on the command line.
    Generic {
        server: Vec<String>,
        client: Vec<String>,
        ready: Readiness,
        metric: Metric,
    },
    Pgbench(PgbenchSettings),
    Http {
        server: HttpServerKind,
        client: HttpClientKind,
    },
    Redis,
}

/// Which placements to measure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placements {
    /// Same CPU, one pair per placement class, server pinned with client unpinned, both unpinned.
    Auto,
    /// Explicit `(server, client)` CPUs; `None` is unpinned.
    Explicit(Vec<(Option<CpuSet>, Option<CpuSet>)>),
}

/// Everything a pair experiment needs, validated.
#[derive(Clone, Debug)]
pub struct PairSettings {
    /// What runs.
    pub programs: Programs,
    /// Seconds each client run lasts (presets; a generic client decides for itself).
    pub duration_s: u32,
    /// Runs per placement, interleaved round-robin across placements.
    pub repeat: usize,
    /// Which placements to measure.
    pub placements: Placements,
    /// One discarded client run after every server start (warm caches, settled frequency).
    pub warmup: bool,
    /// How long a server may take to become ready.
    pub ready_timeout: Duration,
    /// Look for other load before measuring (half a second of sampling).
    pub check_load: bool,
    /// Also count with perf events (exact for short-lived processes, but every context switch
    /// of a counted task pays for it: measured here at 10-15% of a same-CPU pgbench's
    /// throughput). Off by default: the figures must not be changed by watching them.
    pub use_perf: bool,
    /// Busy neighbours: spinning normal-priority threads, unpinned, running beside every
    /// measured run (field notes A: adding load can make a request/response pair faster).
    pub neighbour_load: usize,
}

/// The smallest number of runs per placement a user may ask for: fewer gives no interval worth
/// reading.
pub const MIN_REPEAT: usize = 3;

impl PairSettings {
    /// A preset with its defaults: 3 runs of `duration_s` per placement, automatic placements.
    pub fn preset(preset: Preset, duration_s: u32) -> Self {
        let programs = match preset {
            Preset::Pgbench => Programs::Pgbench(PgbenchSettings {
                workload: Workload::Select1,
                clients: 1,
                threads: 1,
                scale: 10,
            }),
            Preset::Http => Programs::Http {
                server: HttpServerKind::Auto,
                client: HttpClientKind::Auto,
            },
            Preset::Redis => Programs::Redis,
        };
        Self {
            programs,
            duration_s: duration_s.max(1),
            repeat: MIN_REPEAT,
            placements: Placements::Auto,
            warmup: true,
            ready_timeout: Duration::from_secs(60),
            check_load: true,
            use_perf: false,
            neighbour_load: 0,
        }
    }

    pub fn preset_name(&self) -> Option<&'static str> {
        match self.programs {
            Programs::Generic { .. } => None,
            Programs::Pgbench(_) => Some("pgbench"),
            Programs::Http { .. } => Some("http"),
            Programs::Redis => Some("redis"),
        }
    }
}
