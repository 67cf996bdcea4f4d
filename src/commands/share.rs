//! `cpulab share`: flags -> [`ShareSettings`], run, print.

use crate::cli::Global;
use crate::error::bad_input;
use crate::machine::Machine;
use crate::output;
use crate::report::envelope::Kind;
use crate::share::{self, ShareReport, ShareSettings};
use crate::stats::MeanCi;
use anyhow::Result;
use comfy_table::{Table, presets};
use std::time::Duration;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab share\n  \
    cpulab share --threads 1 --burners 2\n  \
    cpulab share --sweep --json > share.json")]
pub struct Args {
    /// Worker threads running the CPU-bound kernel [default: allowed CPUs].
    #[arg(long, short = 't', value_name = "N")]
    pub threads: Option<usize>,
    /// Busy burner threads beside the workers [default: allowed CPUs].
    #[arg(long, short = 'b', value_name = "N")]
    pub burners: Option<usize>,
    /// Burner duty cycle in percent: busy this share of each period, asleep the rest.
    #[arg(long, value_name = "PCT", default_value_t = 100.0)]
    pub duty: f64,
    /// Pin burners round-robin to these CPUs (taskset syntax, e.g. `1` or `0-1`).
    #[arg(long, value_name = "LIST")]
    pub burner_cpus: Option<String>,
    /// Sweep workers over 1..=allowed CPUs and burners over 0..=allowed CPUs.
    #[arg(long, conflicts_with_all = ["threads", "burners"])]
    pub sweep: bool,
    /// Seconds per measured run.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub duration: f64,
    /// Runs per configuration, for the confidence interval.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub repeats: usize,
    /// Size of one work unit: primes are searched up to this number (sysbench's default).
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub max_prime: u64,
    /// Burner busy/sleep cycle in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10.0, hide = true)]
    pub duty_period_ms: f64,
    /// One JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Turns flags into validated settings (exit 2 with one line on bad input).
pub fn settings(args: &Args, machine: &Machine) -> Result<ShareSettings> {
    let n = machine.allowed.len().max(1);
    let mut s = if args.sweep {
        ShareSettings::sweep(machine)
    } else {
        ShareSettings::single(args.threads.unwrap_or(n), args.burners.unwrap_or(n))
    };
    s.duty_pct = args.duty;
    s.duration = secs(args.duration, "--duration")?;
    s.duty_period = secs(args.duty_period_ms / 1000.0, "--duty-period-ms")?;
    s.repeats = args.repeats;
    s.max_prime = args.max_prime;
    s.burner_cpus = args
        .burner_cpus
        .as_deref()
        .map(|t| machine.cpus(t))
        .transpose()?;
    s.check(machine)?;
    Ok(s)
}

fn secs(v: f64, flag: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(v)
        .map_err(|_| bad_input(format!("{flag} must be a positive number of seconds")))
}

pub fn run(args: Args, g: &Global) -> Result<()> {
    let machine = Machine::detect(&g.root)?;
    let settings = settings(&args, &machine)?;
    let report = share::run(&machine, &settings, &output::progress_printer(g.quiet))?;
    output::emit(args.json, Kind::Share, &report, render)
}

fn pct(v: f64) -> String {
    format!("{:.1}%", 100.0 * v)
}

fn pct_ci(m: &Option<MeanCi>) -> String {
    match m {
        Some(m) if m.n > 1 => format!("{} ± {:.1}", pct(m.mean), 100.0 * m.ci95_half_width),
        Some(m) => pct(m.mean),
        None => "-".into(),
    }
}

/// The human report: one row per configuration, then how to read it.
pub fn render(r: &ShareReport) -> String {
    let st = output::Style::new();
    let mut out = format!(
        "{} prime check up to {} per work unit; model shares {:.2} CPUs ({})\n",
        st.bold("cpulab share:"),
        r.max_prime,
        r.usable_cpus,
        r.usable_cpus_from
    );
    match &r.cgroup {
        Some(c) => out.push_str(&format!(
            "cgroup v{} {}: {}\n",
            c.version,
            c.path,
            match (c.quota_us, c.period_us) {
                (Some(q), Some(p)) => match c.limit_dir.as_ref().filter(|d| **d != c.dir) {
                    Some(d) => format!("quota {q} us per {p} us period, set by {}", d.display()),
                    None => format!("quota {q} us per {p} us period"),
                },
                _ => "no CPU quota".into(),
            }
        )),
        None => out.push_str("cgroup: unreadable (see notes)\n"),
    }
    out.push_str(&format!(
        "burners at {:.0}% duty{}; {} run(s) of {:.2} s per row\n\n",
        r.duty_pct,
        r.burner_cpus
            .as_ref()
            .map(|c| format!(", pinned to CPUs {c}"))
            .unwrap_or_default(),
        r.repeats,
        r.requested_duration_s
    ));
    let mut t = Table::new();
    t.load_style(presets::NOTHING);
    t.set_header(vec![
        "workers",
        "burners",
        "model",
        "measured ±95%",
        "vs model",
        "per worker",
        "worker CPU",
        "burner CPU",
        "other load",
        "steal",
        "throttled",
    ]);
    for c in &r.configs {
        t.add_row(vec![
            c.threads.to_string(),
            c.burners.to_string(),
            pct(c.model_relative),
            pct_ci(&c.relative),
            c.deviation_pp
                .map(|d| format!("{d:+.1} pp"))
                .unwrap_or_else(|| "-".into()),
            match (c.worker_relative_min, c.worker_relative_max) {
                (Some(a), Some(b)) => format!("{:.0}-{:.0}%", 100.0 * a, 100.0 * b),
                _ => "-".into(),
            },
            pct_ci(&c.worker_cpu_share),
            pct_ci(&c.burner_cpu_share),
            c.other_load_cpus
                .as_ref()
                .map(|o| format!("{:.2} CPU", o.mean))
                .unwrap_or_else(|| "n/a".into()),
            c.steal_pct
                .as_ref()
                .map(|s| format!("{:.1}%", s.mean))
                .unwrap_or_else(|| "n/a".into()),
            c.throttle
                .map(|d| format!("{}/{}", d.nr_throttled, d.nr_periods))
                .unwrap_or_else(|| "n/a".into()),
        ]);
    }
    out.push_str(&t.to_string());
    out.push_str(&format!(
        "\n\n{}\n",
        st.dim(
            "measured = each worker's work units/s relative to the same workers alone (mean of \
             runs, 95% CI in points); model = max-min fair share, min(1, usable CPUs / (workers \
             + burners x duty)), relative to alone; per worker = lowest and highest single \
             worker; worker/burner CPU = thread CPU time / interval; other load = CPU time other \
             processes took on the allowed CPUs during the runs; steal = time the \
             hypervisor gave this VM's CPUs to someone else; throttled = CFS periods throttled \
             / periods."
        )
    ));
    for n in &r.conditions.notes {
        out.push_str(&format!("{} {n}\n", st.yellow("note:")));
    }
    out
}
