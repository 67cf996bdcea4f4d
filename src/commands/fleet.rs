//! `cpulab fleet`: flags -> validated settings -> [`crate::fleet::run`], whose report leaves
//! through one [`Emitter`]. It only queries Prometheus; it changes nothing, measures nothing on
//! this machine and records nothing in the history.

use super::Global;
use crate::emit::{Emitted, Emitter, OutputArgs};
use crate::error::bad_input;
use crate::fleet::{self, Settings, client::Prometheus, webconfig};
use crate::report::envelope::Kind;
use anyhow::Result;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab fleet --prometheus http://prometheus:9090\n  \
    cpulab fleet --prometheus https://prom.example:9090 --web.config.file fleet-web.yml --since 24h\n  \
    cpulab fleet --prometheus http://prometheus:9090 --limit 20 --json\n  \
    cpulab fleet --prometheus http://prometheus:9090 --html fleet.html")]
pub struct Args {
    /// The Prometheus server that scrapes the exporters, its base URL
    /// (`http://prometheus:9090`; a path prefix is kept).
    #[arg(long, value_name = "URL")]
    pub prometheus: String,
    /// The window: an age (`7d`, `36h`, `90m`) or a time (`2026-11-20`, Unix seconds).
    #[arg(long, default_value = "7d", value_name = "TIME")]
    pub since: String,
    /// Most targets ranked (and hosts listed for drift); every query returns at most this many
    /// series.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub limit: usize,
    /// Seconds each request may take (Prometheus is asked to give up at the same time).
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub timeout: String,
    /// The minimum move of a host's placement cost across a fact change, in percent, 0 to 1000
    /// (as `history check --threshold`).
    #[arg(long, default_value_t = 5.0, value_name = "PCT")]
    pub threshold: f64,
    /// TLS (`tls_config`: `ca_file`, `cert_file`, `key_file`, `insecure_skip_verify`) and
    /// `basic_auth` (`username`, `password` or `password_file`) for the queries, as a scrape
    /// job's HTTP client configuration spells them.
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub web_config_file: Option<PathBuf>,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The validated settings, the timeout and the server's access.
fn settings(args: &Args) -> Result<(Settings, Duration, webconfig::Access)> {
    let t = crate::history::when::now_unix_s() as i64;
    let since = crate::history::when::parse(&args.since, t).ok_or_else(|| {
        bad_input(format!(
            "--since {}: not a time; give an age like 7d, 36h or 90m, or a time like 2026-11-20",
            args.since
        ))
    })?;
    if since >= t {
        return Err(bad_input(format!(
            "--since {}: the window would be empty; give a time in the past",
            args.since
        )));
    }
    if !(1..=1000).contains(&args.limit) {
        return Err(bad_input(format!(
            "--limit {}: give from 1 to 1000 (each query returns at most this many series)",
            args.limit
        )));
    }
    let timeout = crate::units::flag_duration("timeout", &args.timeout)?;
    if timeout < Duration::from_secs(1) {
        return Err(bad_input(format!(
            "--timeout {}: give 1s or more",
            args.timeout
        )));
    }
    crate::units::flag_percent("threshold", args.threshold)?;
    let access = match &args.web_config_file {
        Some(p) => webconfig::load(p)?,
        None => webconfig::Access::default(),
    };
    let s = Settings {
        since_s: (t - since) as u64,
        limit: args.limit,
        threshold_pct: args.threshold,
    };
    Ok((s, timeout, access))
}

pub fn run(args: Args, g: &Global) -> Result<()> {
    let (s, timeout, access) = settings(&args)?;
    let out = Emitter::new(&args.output, g.quiet, &[])?;
    let p = Prometheus::new(&args.prometheus, &access, timeout)?;
    let report = fleet::run(&p, &s)?;
    out.emit(&Emitted::new(
        Kind::Fleet,
        &report,
        fleet::text::render,
        Some(fleet::html::render),
    )?)
}
