//! `cpulab pair`: flags become validated [`PairSettings`]; the experiment lives in `crate::pair`.

use crate::cli::Global;
use crate::cpulist::CpuSet;
use crate::error::bad_input;
use crate::machine::Machine;
use crate::output;
use crate::pair::metric::Metric;
use crate::pair::settings::{
    Experiment, HttpClientKind, HttpServerKind, MIN_REPEAT, PairSettings, PgbenchSettings,
    Placements, Preset, Readiness, Workload,
};
use crate::pair::signals::Interrupted;
use anyhow::Result;
use std::path::PathBuf;
use std::time::Duration;

/// `cpulab pair` flags, boxed: they are many, and the subcommand enum stays small.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  cpulab pair --preset pgbench --workload select1\n  \
    cpulab pair --preset http --duration 5\n  \
    cpulab pair --server 'redis-server --bind 127.0.0.1 --port 7777 --save \"\"' --ready-port 7777 \\\n      \
    --client 'redis-benchmark -p 7777 -c 1 -n 200000 -t get -q' --metric redis-benchmark"
)]
pub struct Args {
    #[command(flatten)]
    pub flags: Box<Flags>,
}

/// Every flag of `cpulab pair`.
#[derive(Debug, clap::Args)]
pub struct Flags {
    /// A ready-made experiment with real programs.
    #[arg(long, value_enum, conflicts_with_all = ["server", "client"])]
    pub preset: Option<Preset>,
    /// Server command (split into words like a shell would, run without one unless --shell).
    #[arg(long, value_name = "CMD", requires = "client")]
    pub server: Option<String>,
    /// Client command; it must print the figure --metric finds.
    #[arg(long, value_name = "CMD", requires = "server")]
    pub client: Option<String>,
    /// A regex with a named group `value`, or a built-in parser: pgbench, ab, wrk,
    /// redis-benchmark. Default: the parser named after the client program.
    #[arg(long, value_name = "REGEX")]
    pub metric: Option<String>,
    /// Unit of a custom metric, for the report.
    #[arg(long, value_name = "UNIT")]
    pub metric_unit: Option<String>,
    /// The metric is a cost (latency), not a throughput: smaller is better.
    #[arg(long)]
    pub lower_is_better: bool,
    /// Run --server, --client and --ready-cmd through `sh -c`.
    #[arg(long)]
    pub shell: bool,
    /// The server is ready when 127.0.0.1:PORT accepts a connection.
    #[arg(long, value_name = "PORT", group = "ready")]
    pub ready_port: Option<u16>,
    /// The server is ready when this Unix socket accepts a connection.
    #[arg(long, value_name = "PATH", group = "ready")]
    pub ready_socket: Option<PathBuf>,
    /// The server is ready when this command exits with status 0.
    #[arg(long, value_name = "CMD", group = "ready")]
    pub ready_cmd: Option<String>,
    /// Seconds to wait for the server to become ready.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    pub ready_timeout: f64,
    /// pgbench workload.
    #[arg(long, value_enum)]
    pub workload: Option<Workload>,
    /// pgbench clients (-c).
    #[arg(long, value_name = "N")]
    pub clients: Option<u32>,
    /// pgbench threads (-j).
    #[arg(long, value_name = "N")]
    pub threads: Option<u32>,
    /// pgbench scale for the readonly workload (-i -s).
    #[arg(long, value_name = "N")]
    pub scale: Option<u32>,
    /// Web server of the http preset.
    #[arg(long, value_enum)]
    pub http_server: Option<HttpServerKind>,
    /// Load generator of the http preset.
    #[arg(long, value_enum)]
    pub http_client: Option<HttpClientKind>,
    /// Seconds per client run (presets).
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub duration: u32,
    /// Runs per placement, interleaved across placements (at least 3).
    #[arg(long, value_name = "N", default_value_t = MIN_REPEAT)]
    pub repeat: usize,
    /// `auto`, or server:client pairs of CPU lists, `any` for unpinned: `0:0,0:1,0:any,any:any`.
    #[arg(long, value_name = "LIST", default_value = "auto")]
    pub pairs: String,
    /// No discarded warm-up run after each server start.
    #[arg(long)]
    pub no_warmup: bool,
    /// Also count the server tree and the client with perf events (exact, including processes
    /// that end between samples). Costs throughput: about 10-15% on a same-CPU pgbench in a VM,
    /// so the figures of a --perf run are not comparable with those of a plain one.
    #[arg(long)]
    pub perf: bool,
    /// Skip the check for other load before measuring.
    #[arg(long)]
    pub no_load_check: bool,
    /// Run N busy neighbours (spinning threads, like `stress-ng -c N -l 100`) beside every
    /// placement: shows whether load makes the pair faster (field notes A).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub neighbour_load: usize,
    /// Allow fewer than 3 runs per placement (tests; the interval is then meaningless).
    #[arg(long, hide = true)]
    pub allow_few_repeats: bool,
    /// One JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Splits a command into words, or wraps it in `sh -c`.
fn words(what: &str, cmd: &str, shell: bool) -> Result<Vec<String>> {
    if shell {
        return Ok(vec!["/bin/sh".into(), "-c".into(), cmd.to_string()]);
    }
    let w = shell_words::split(cmd)
        .map_err(|e| bad_input(format!("{what} `{cmd}`: {e} (check the quotes)")))?;
    if w.is_empty() {
        return Err(bad_input(format!("{what} is empty: give a program to run")));
    }
    Ok(w)
}

fn side(machine: &Machine, text: &str) -> Result<Option<CpuSet>> {
    match text.trim() {
        "any" | "*" => Ok(None),
        t => machine.cpus(t).map(Some),
    }
}

/// `auto` or `S:C,S:C` (a CPU list containing commas must use ranges, e.g. `0-1:2`).
pub fn parse_pairs(machine: &Machine, text: &str) -> Result<Placements> {
    if text.trim() == "auto" {
        return Ok(Placements::Auto);
    }
    let mut v = Vec::new();
    for item in text.split(',') {
        let (s, c) = item.split_once(':').ok_or_else(|| {
            bad_input(format!(
                "--pairs entry `{item}` is not SERVER:CLIENT; write e.g. `0:0,0:1,0:any,any:any`"
            ))
        })?;
        v.push((side(machine, s)?, side(machine, c)?));
    }
    Ok(Placements::Explicit(v))
}

fn experiment(a: &Flags) -> Result<Experiment> {
    let pg_only =
        a.workload.is_some() || a.clients.is_some() || a.threads.is_some() || a.scale.is_some();
    if pg_only && a.preset != Some(Preset::Pgbench) {
        return Err(bad_input(
            "--workload, --clients, --threads and --scale belong to --preset pgbench",
        ));
    }
    if (a.http_server.is_some() || a.http_client.is_some()) && a.preset != Some(Preset::Http) {
        return Err(bad_input(
            "--http-server and --http-client belong to --preset http",
        ));
    }
    match a.preset {
        Some(Preset::Pgbench) => {
            let p = PgbenchSettings {
                workload: a.workload.unwrap_or(Workload::Select1),
                clients: a.clients.unwrap_or(1),
                threads: a.threads.unwrap_or(1),
                scale: a.scale.unwrap_or(10),
            };
            if p.clients == 0 || p.threads == 0 || p.scale == 0 || p.threads > p.clients {
                return Err(bad_input(
                    "--clients, --threads and --scale must be at least 1, and --threads at most --clients",
                ));
            }
            Ok(Experiment::Pgbench(p))
        }
        Some(Preset::Http) => Ok(Experiment::Http {
            server: a.http_server.unwrap_or(HttpServerKind::Auto),
            client: a.http_client.unwrap_or(HttpClientKind::Auto),
        }),
        Some(Preset::Redis) => Ok(Experiment::Redis),
        None => generic(a),
    }
}

fn generic(a: &Flags) -> Result<Experiment> {
    let (Some(server), Some(client)) = (&a.server, &a.client) else {
        return Err(bad_input(
            "give --preset pgbench|http|redis, or --server CMD --client CMD with a readiness check",
        ));
    };
    let server = words("--server", server, a.shell)?;
    let client = words("--client", client, a.shell)?;
    let ready = match (&a.ready_port, &a.ready_socket, &a.ready_cmd) {
        (Some(p), _, _) => Readiness::Port(*p),
        (_, Some(s), _) => Readiness::Socket(s.clone()),
        (_, _, Some(c)) => Readiness::Command(words("--ready-cmd", c, a.shell)?),
        _ => {
            return Err(bad_input(
                "--server needs a readiness check: --ready-port PORT, --ready-socket PATH or --ready-cmd CMD",
            ));
        }
    };
    let metric = match &a.metric {
        Some(m) => Metric::parse(m, a.metric_unit.as_deref(), !a.lower_is_better)?,
        None => {
            // Under --shell the program is the first word of the command.
            let prog = if a.shell {
                client[2]
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_string()
            } else {
                client[0].clone()
            };
            Metric::for_program(&prog).ok_or_else(|| {
                bad_input(format!(
                    "no built-in parser for `{prog}`: give --metric with a regex like \
                     'rate: (?P<value>[0-9.]+)' or a parser name (pgbench, ab, wrk, redis-benchmark)"
                ))
            })?
        }
    };
    Ok(Experiment::Generic {
        server,
        client,
        ready,
        metric,
    })
}

/// Flags to settings; every bad value ends here with one line and exit 2.
pub fn settings(a: &Flags, machine: &Machine) -> Result<PairSettings> {
    if a.repeat < MIN_REPEAT && !(a.allow_few_repeats && a.repeat >= 1) {
        return Err(bad_input(format!(
            "--repeat {} is too few: at least {MIN_REPEAT} runs per placement are needed for an interval",
            a.repeat
        )));
    }
    if a.duration == 0 {
        return Err(bad_input("--duration must be at least 1 second"));
    }
    if !(a.ready_timeout > 0.0 && a.ready_timeout.is_finite()) {
        return Err(bad_input(
            "--ready-timeout must be a positive number of seconds",
        ));
    }
    let most = 4 * machine.allowed.len().max(1);
    if a.neighbour_load > most {
        return Err(bad_input(format!(
            "--neighbour-load {} is more than {most} (4 per usable CPU); give a smaller number",
            a.neighbour_load
        )));
    }
    Ok(PairSettings {
        experiment: experiment(a)?,
        duration_s: a.duration,
        repeat: a.repeat,
        placements: parse_pairs(machine, &a.pairs)?,
        warmup: !a.no_warmup,
        ready_timeout: Duration::from_secs_f64(a.ready_timeout),
        check_load: !a.no_load_check,
        use_perf: a.perf,
        neighbour_load: a.neighbour_load,
    })
}

pub fn run(args: Args, g: &Global) -> Result<()> {
    let machine = Machine::detect(&g.root)?;
    let settings = settings(&args.flags, &machine)?;
    let quiet = g.quiet;
    let progress = |m: &str| output::status(quiet, &format!("cpulab pair: {m}"));
    let report = match crate::pair::run(&machine, &settings, &progress) {
        Ok(r) => r,
        Err(e) => {
            // Everything has been torn down by now; report the signal as a shell would.
            if let Some(i) = e.downcast_ref::<Interrupted>() {
                eprintln!("cpulab: {i}");
                std::process::exit(i.exit_code());
            }
            return Err(e);
        }
    };
    output::emit(
        args.flags.json,
        crate::report::envelope::Kind::Pair,
        &report,
        |r| crate::pair::report::render(r, &output::Style::new()),
    )
}
