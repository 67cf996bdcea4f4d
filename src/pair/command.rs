//! `cpulab pair`: flags become validated [`PairSettings`]; the experiment lives in `crate::pair`.

use crate::cpulist::CpuSet;
use crate::error::bad_input;
use crate::experiment::Command;
use crate::machine::Machine;
use crate::pair::Pair;
use crate::pair::metric::Metric;
use crate::pair::settings::{
    HttpClientKind, HttpServerKind, MIN_REPEAT, PairSettings, PgbenchSettings, Placements, Preset,
    Programs, Readiness, Workload,
};
use crate::units::flag_duration;
use anyhow::Result;
use clap::builder::TypedValueParser;
use std::path::PathBuf;

/// `cpulab pair` flags, boxed: they are many, and the subcommand enum stays small.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  cpulab pair --preset pgbench --workload select1\n  \
    cpulab pair --preset http --duration 5s\n  \
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
    /// A ready-made experiment with real programs: pgbench, http or redis.
    #[arg(long, value_name = "NAME", value_parser = named::<Preset>(&["pgbench", "http", "redis"]),
          conflicts_with_all = ["server", "client"])]
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
    /// How long to wait for the server to become ready: `60s`, `2m` (a bare number is
    /// seconds).
    #[arg(long, value_name = "TIME", default_value = "60s")]
    pub ready_timeout: String,
    /// pgbench workload: select1 (`SELECT 1` with -n) or readonly (pgbench -S).
    #[arg(long, value_name = "NAME", value_parser = named::<Workload>(&["select1", "readonly"]))]
    pub workload: Option<Workload>,
    /// pgbench clients (-c).
    #[arg(long, value_name = "N")]
    pub clients: Option<u32>,
    /// pgbench worker threads (-j); `--threads` is an old spelling.
    #[arg(long, value_name = "N", alias = "threads")]
    pub jobs: Option<u32>,
    /// pgbench scale for the readonly workload (-i -s).
    #[arg(long, value_name = "N")]
    pub scale: Option<u32>,
    /// Web server of the http preset: auto (apache, else nginx, else built in), apache, nginx,
    /// builtin.
    #[arg(long, value_name = "NAME",
          value_parser = named::<HttpServerKind>(&["auto", "apache", "nginx", "builtin"]))]
    pub http_server: Option<HttpServerKind>,
    /// Load generator of the http preset: auto (ab, else wrk, else built in), ab, wrk, builtin.
    #[arg(long, value_name = "NAME",
          value_parser = named::<HttpClientKind>(&["auto", "ab", "wrk", "builtin"]))]
    pub http_client: Option<HttpClientKind>,
    /// Length of each client run (presets), in whole seconds: `10`, `10s`, `1m` (pgbench,
    /// ab and wrk take seconds).
    #[arg(long, value_name = "TIME", default_value = "10s")]
    pub duration: String,
    /// Runs per placement, interleaved across placements (at least 3). `--repeat` is an old
    /// spelling.
    #[arg(long, value_name = "N", default_value_t = MIN_REPEAT, alias = "repeat")]
    pub repeats: usize,
    /// Use only these CPUs (taskset syntax, e.g. `0-3,8`), as under `taskset -c`: automatic
    /// placements are chosen among them and unpinned programs run on them.
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// `auto`, or server:client pairs of CPU lists, `unpinned` for the OS's placement:
    /// `0:0,0:1,0:unpinned,unpinned:unpinned` (`any` and `*` mean unpinned too).
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
    /// `--json`, `--html FILE`.
    #[command(flatten)]
    pub output: crate::emit::OutputArgs,
}

/// A flag value that names one of the settings' kebab-case enums; the experiment's types stay
/// free of clap, and the names are their serde names, so flags and JSON say the same.
fn named<T>(names: &'static [&'static str]) -> impl TypedValueParser<Value = T>
where
    T: serde::de::DeserializeOwned + Clone + Send + Sync + 'static,
{
    clap::builder::PossibleValuesParser::new(names).try_map(|s: String| {
        serde_json::from_value::<T>(serde_json::Value::String(s)).map_err(|e| e.to_string())
    })
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
        "unpinned" | "any" | "*" => Ok(None),
        t => machine.flag_cpus("--pairs", t).map(Some),
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
                "--pairs entry `{item}` is not SERVER:CLIENT; write e.g. `0:0,0:1,0:unpinned`"
            ))
        })?;
        v.push((side(machine, s)?, side(machine, c)?));
    }
    Ok(Placements::Explicit(v))
}

fn programs(a: &Flags) -> Result<Programs> {
    let pg_only =
        a.workload.is_some() || a.clients.is_some() || a.jobs.is_some() || a.scale.is_some();
    if pg_only && a.preset != Some(Preset::Pgbench) {
        return Err(bad_input(
            "--workload, --clients, --jobs and --scale belong to --preset pgbench",
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
                threads: a.jobs.unwrap_or(1),
                scale: a.scale.unwrap_or(10),
            };
            if p.clients == 0 || p.threads == 0 || p.scale == 0 || p.threads > p.clients {
                return Err(bad_input(
                    "--clients, --jobs and --scale must be at least 1, and --jobs at most --clients",
                ));
            }
            Ok(Programs::Pgbench(p))
        }
        Some(Preset::Http) => Ok(Programs::Http {
            server: a.http_server.unwrap_or(HttpServerKind::Auto),
            client: a.http_client.unwrap_or(HttpClientKind::Auto),
        }),
        Some(Preset::Redis) => Ok(Programs::Redis),
        None => generic(a),
    }
}

/// The longest path a Unix socket address holds (`sun_path` is 108 bytes with its NUL).
const SOCKET_PATH_MAX: usize = 107;

/// `--ready-socket PATH` must name a socket the server can create and cpulab connect to: a
/// directory, a path in a directory that does not exist, or a path longer than a socket address
/// holds never accepts a connection, and the run would wait out --ready-timeout with the server
/// started. Checked before anything starts; `Err` is the one line naming the problem and the fix.
pub fn ready_socket(path: &std::path::Path) -> Result<(), String> {
    let shown = path.display();
    if path.as_os_str().is_empty() {
        return Err(
            "--ready-socket is empty; give the path of the socket the server creates".into(),
        );
    }
    if path.is_dir() {
        return Err(format!(
            "--ready-socket {shown} is a directory, which never accepts a connection; give the              socket file the server creates in it (e.g. {}/server.sock)",
            shown.to_string().trim_end_matches('/')
        ));
    }
    // A relative PATH with no directory part is in the current directory.
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    if !parent.is_dir() {
        return Err(format!(
            "--ready-socket {shown}: {} is not an existing directory, so no socket can appear              there; create it first or give the socket path the server creates",
            parent.display()
        ));
    }
    if path.as_os_str().len() > SOCKET_PATH_MAX {
        return Err(format!(
            "--ready-socket {shown} is {} bytes, longer than a Unix socket address holds              ({SOCKET_PATH_MAX}); give a shorter path (a relative one, or a directory nearer /)",
            path.as_os_str().len()
        ));
    }
    Ok(())
}

fn generic(a: &Flags) -> Result<Programs> {
    let (Some(server), Some(client)) = (&a.server, &a.client) else {
        return Err(bad_input(
            "give --preset pgbench|http|redis, or --server CMD --client CMD with a readiness check",
        ));
    };
    let server = words("--server", server, a.shell)?;
    let client = words("--client", client, a.shell)?;
    let ready = match (&a.ready_port, &a.ready_socket, &a.ready_cmd) {
        // Nothing accepts a connection on port 0: the server was started and waited on until
        // --ready-timeout ran out.
        (Some(0), _, _) => {
            return Err(bad_input(
                "--ready-port 0 is no port a server listens on; give the one it listens on (1 to 65535)",
            ));
        }
        (Some(p), _, _) => Readiness::Port(*p),
        (_, Some(s), _) => {
            ready_socket(s).map_err(bad_input)?;
            Readiness::Socket(s.clone())
        }
        (_, _, Some(c)) => Readiness::Command(words("--ready-cmd", c, a.shell)?),
        _ => {
            return Err(bad_input(
                "--server needs a readiness check: --ready-port PORT, --ready-socket PATH or --ready-cmd CMD",
            ));
        }
    };
    if a.metric_unit
        .as_deref()
        .is_some_and(|u| u.trim().is_empty())
    {
        return Err(bad_input(
            "--metric-unit is empty; give the unit the report shows (`req/s`, `ms`), or leave it out",
        ));
    }
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
    Ok(Programs::Generic {
        server,
        client,
        ready,
        metric,
    })
}

/// Flags to settings; every bad value ends here with one line and exit 2.
pub fn settings(a: &Flags, machine: &Machine) -> Result<PairSettings> {
    if a.repeats < MIN_REPEAT && !(a.allow_few_repeats && a.repeats >= 1) {
        return Err(bad_input(format!(
            "--repeats {} is too few: at least {MIN_REPEAT} runs per placement are needed for an interval",
            a.repeats
        )));
    }
    let fewest = if a.allow_few_repeats { 1 } else { MIN_REPEAT };
    crate::units::flag_count("repeats", a.repeats, fewest, crate::units::MAX_REPEATS)?;
    let duration = flag_duration("duration", &a.duration)?;
    if duration.subsec_nanos() != 0 || duration.is_zero() {
        return Err(bad_input(format!(
            "--duration {} is not a whole number of seconds; the clients take seconds (e.g. 10s)",
            a.duration
        )));
    }
    let ready_timeout = flag_duration("ready-timeout", &a.ready_timeout)?;
    if ready_timeout.is_zero() {
        return Err(bad_input("--ready-timeout must be more than 0 (e.g. 60s)"));
    }
    let most = 4 * machine.allowed.len().max(1);
    if a.neighbour_load > most {
        return Err(bad_input(format!(
            "--neighbour-load {} is more than {most} (4 per usable CPU); give a smaller number",
            a.neighbour_load
        )));
    }
    Ok(PairSettings {
        programs: programs(a)?,
        // invariant: parse_duration bounds every duration to a day, which fits in u32 seconds.
        duration_s: u32::try_from(duration.as_secs()).unwrap_or(u32::MAX),
        repeat: a.repeats,
        placements: parse_pairs(machine, &a.pairs)?,
        warmup: !a.no_warmup,
        ready_timeout,
        check_load: !a.no_load_check,
        use_perf: a.perf,
        neighbour_load: a.neighbour_load,
    })
}

impl Command for Pair {
    type Args = Args;
    const ABOUT: &'static str = "Run a real server and client (PostgreSQL + pgbench, a web server + load generator, any pair) under each placement";
    const STEPS_ALWAYS: bool = true;
    const ORDERLY_INTERRUPT: bool = true;

    fn settings(args: &Args, machine: &Machine) -> Result<PairSettings> {
        settings(&args.flags, machine)
    }

    fn output(args: &Args) -> &crate::emit::OutputArgs {
        &args.flags.output
    }

    fn cpus(args: &Args) -> Option<&str> {
        args.flags.cpus.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::FromArgMatches;

    fn parse(args: &[&str]) -> Result<PairSettings> {
        let m = <Args as clap::Args>::augment_args(clap::Command::new("pair"))
            .try_get_matches_from([&["pair"][..], args].concat())
            .unwrap();
        let a = Args::from_arg_matches(&m).unwrap();
        settings(
            &a.flags,
            &Machine::detect(std::path::Path::new("/")).unwrap(),
        )
    }

    const GENERIC: &[&str] = &["--server", "s", "--client", "pgbench", "--ready-port", "1"];

    /// A socket path that can never accept a connection is refused before the server starts.
    #[test]
    fn a_ready_socket_is_a_file_in_an_existing_directory() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().to_str().unwrap();
        let ok = format!("{dir}/server.sock");
        assert_eq!(ready_socket(std::path::Path::new(&ok)), Ok(()));
        // A stale socket or file there is the server's to replace.
        std::fs::write(&ok, "").unwrap();
        assert_eq!(ready_socket(std::path::Path::new(&ok)), Ok(()));
        assert_eq!(ready_socket(std::path::Path::new("relative.sock")), Ok(()));
        let bad = |p: &str| ready_socket(std::path::Path::new(p)).unwrap_err();
        let e = bad(dir);
        assert!(
            e.starts_with(&format!("--ready-socket {dir} is a directory"))
                && e.contains(&format!("{dir}/server.sock")),
            "{e}"
        );
        assert!(bad(&format!("{dir}/")).contains("is a directory"));
        let e = bad(&format!("{dir}/missing/server.sock"));
        assert!(
            e.contains(&format!("{dir}/missing is not an existing directory")),
            "{e}"
        );
        // A file where the directory should be.
        let e = bad(&format!("{ok}/server.sock"));
        assert!(e.contains("is not an existing directory"), "{e}");
        let long = format!("{dir}/{}.sock", "s".repeat(120));
        assert!(bad(&long).contains("longer than a Unix socket address"));
        assert!(bad("").contains("empty"));
        // Through the flags: bad input, exit 2.
        let missing = format!("{dir}/missing/s");
        for p in [dir, missing.as_str()] {
            let e =
                parse(&["--server", "s", "--client", "pgbench", "--ready-socket", p]).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{p}: {e}");
        }
    }

    /// `--ready-timeout 1e20` reached `Duration::from_secs_f64`, which panics on it.
    #[test]
    fn ready_timeout_1e20_is_bad_input_not_a_panic() {
        for v in ["1e20", "-1", "nan", "0"] {
            let flag = format!("--ready-timeout={v}");
            let e = parse(&[GENERIC, &[flag.as_str()]].concat()).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{v}");
        }
        let s = parse(&[GENERIC, &["--ready-timeout", "2m"]].concat()).unwrap();
        assert_eq!(s.ready_timeout, std::time::Duration::from_secs(120));
    }

    #[test]
    fn repeats_with_the_old_spelling_as_an_alias() {
        assert_eq!(
            parse(&[GENERIC, &["--repeats", "5"]].concat())
                .unwrap()
                .repeat,
            5
        );
        assert_eq!(
            parse(&[GENERIC, &["--repeat", "4"]].concat())
                .unwrap()
                .repeat,
            4
        );
    }

    #[test]
    fn duration_takes_units_in_whole_seconds() {
        let d = |v: &str| parse(&[GENERIC, &["--duration", v]].concat()).map(|s| s.duration_s);
        assert_eq!(d("10").unwrap(), 10);
        assert_eq!(d("2s").unwrap(), 2);
        assert_eq!(d("1m").unwrap(), 60);
        assert!(d("500ms").is_err());
        assert!(d("0").is_err());
    }

    #[test]
    fn unpinned_is_the_word_for_os_placement_and_any_still_works() {
        let p = |v: &str| {
            parse(&[GENERIC, &["--pairs", v]].concat())
                .unwrap()
                .placements
        };
        let want = Placements::Explicit(vec![(None, None)]);
        assert_eq!(p("unpinned:unpinned"), want);
        assert_eq!(p("any:any"), want);
        assert_eq!(p("*:unpinned"), want);
    }

    #[test]
    fn pgbench_jobs_with_the_old_spelling_as_an_alias() {
        let jobs = |flag: &str| match parse(&["--preset", "pgbench", "--clients", "4", flag, "2"])
            .unwrap()
            .programs
        {
            Programs::Pgbench(p) => p.threads,
            other => panic!("{other:?}"),
        };
        assert_eq!(jobs("--jobs"), 2);
        assert_eq!(jobs("--threads"), 2);
    }
}
