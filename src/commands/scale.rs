//! `cpulab scale`: flags -> [`ScaleSettings`], run, print.

use crate::cli::Global;
use crate::cpulist::CpuSet;
use crate::error::bad_input;
use crate::machine::Machine;
use crate::output;
use crate::report::envelope::Kind;
use crate::scale::{self, Contention, Policy, ScaleReport, ScaleSettings, Workload};
use crate::stats::MeanCi;
use anyhow::Result;
use comfy_table::{Table, presets};
use std::time::Duration;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab scale\n  \
    cpulab scale --policy compact,scatter\n  \
    cpulab scale --workload triad --threads 1,2")]
pub struct Args {
    /// `fib` (work-stealing recursive Fibonacci, compute-bound) or `triad` (STREAM triad,
    /// memory-bound).
    #[arg(long, short = 'w', value_name = "NAME", default_value = "fib",
          value_parser = ["fib", "triad"])]
    pub workload: String,
    /// Placement policies, comma-separated: os (no pinning), compact (fill SMT siblings and
    /// shared-L2 modules first), scatter (one thread per core and module first)
    /// [default: os,compact,scatter; only the explicit list when --cpus is given].
    #[arg(long, short = 'p', value_name = "LIST", value_delimiter = ',')]
    pub policy: Option<Vec<String>>,
    /// Explicit placement: thread i on the i-th CPU of this list, in the order written
    /// (e.g. `0,2,4,6` or `8-15`).
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// Thread counts, comma-separated [default: 1..=allowed CPUs, or 1..=CPUs in --cpus].
    #[arg(long, short = 't', value_name = "LIST", value_delimiter = ',')]
    pub threads: Option<Vec<usize>>,
    /// Target seconds of one single-thread run (the work is sized to it once, then fixed).
    #[arg(long, value_name = "SECS", default_value_t = 0.5)]
    pub duration: f64,
    /// Runs per point, for the confidence interval.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub repeats: usize,
    /// Fibonacci argument instead of calibrating it to --duration.
    #[arg(long, value_name = "N", hide = true)]
    pub fib_n: Option<u32>,
    /// Fibonacci calls at or below this argument run serially.
    #[arg(long, value_name = "N", default_value_t = 18, hide = true)]
    pub fib_cutoff: u32,
    /// Size of each triad array in MiB [default: 4x the LLCs, 64..=1024].
    #[arg(long, value_name = "MIB", hide = true)]
    pub triad_mib: Option<u64>,
    /// One JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Parses `--cpus` keeping the order written: `4,0-1` is threads on 4, 0, 1.
fn ordered_cpus(text: &str, machine: &Machine) -> Result<Vec<u32>> {
    machine.cpus(text)?;
    let mut out = Vec::new();
    for part in text.split(',').filter(|p| !p.trim().is_empty()) {
        let set = CpuSet::parse_list(part.trim(), false).map_err(|e| bad_input(e.to_string()))?;
        out.extend(set.iter().filter(|c| !out.contains(c)).collect::<Vec<_>>());
    }
    Ok(out)
}

/// Turns flags into validated settings (exit 2 with one line on bad input).
pub fn settings(args: &Args, machine: &Machine) -> Result<ScaleSettings> {
    let mut s = ScaleSettings::quick(machine);
    s.workload = if args.workload == "triad" {
        Workload::Triad
    } else {
        Workload::Fib
    };
    let explicit = args
        .cpus
        .as_deref()
        .map(|t| ordered_cpus(t, machine))
        .transpose()?;
    let names = match (&args.policy, &explicit) {
        (Some(p), _) => p.clone(),
        (None, Some(_)) => Vec::new(),
        (None, None) => vec!["os".into(), "compact".into(), "scatter".into()],
    };
    s.policies = names
        .iter()
        .map(|n| {
            Policy::parse(n).ok_or_else(|| {
                bad_input(format!(
                    "unknown policy `{n}`; use os, compact or scatter (or --cpus LIST)"
                ))
            })
        })
        .collect::<Result<_>>()?;
    if let Some(list) = &explicit {
        s.policies.push(Policy::Explicit(list.clone()));
    }
    let width = explicit
        .as_ref()
        .map(|l| l.len())
        .unwrap_or(machine.allowed.len())
        .max(1);
    s.threads = args
        .threads
        .clone()
        .unwrap_or_else(|| (1..=width).collect());
    s.duration = Duration::try_from_secs_f64(args.duration)
        .map_err(|_| bad_input("--duration must be a positive number of seconds"))?;
    s.repeats = args.repeats;
    s.fib_n = args.fib_n;
    s.fib_cutoff = args.fib_cutoff;
    s.triad_mib = args.triad_mib;
    s.check(machine)?;
    Ok(s)
}

pub fn run(args: Args, g: &Global) -> Result<()> {
    let machine = Machine::detect(&g.root)?;
    let settings = settings(&args, &machine)?;
    let report = scale::run(&machine, &settings, &output::progress_printer(g.quiet))?;
    output::emit(args.json, Kind::Scale, &report, render)
}

fn ci(m: &Option<MeanCi>, digits: usize) -> String {
    match m {
        Some(m) => format!("{:.*} ± {:.*}", digits, m.mean, digits, m.ci95_half_width),
        None => "-".into(),
    }
}

fn contended(c: &Option<Contention>) -> String {
    match c {
        None => "-".into(),
        Some(c) if c.smt_cores + c.l2_modules == 0 => "none shared".into(),
        Some(c) => {
            let mut parts = Vec::new();
            if c.smt_cores > 0 {
                parts.push(format!("{}/{} cores", c.smt_cores_contended, c.smt_cores));
            }
            if c.l2_modules > 0 {
                parts.push(format!(
                    "{}/{} modules",
                    c.l2_modules_contended, c.l2_modules
                ));
            }
            parts.join(", ")
        }
    }
}

/// The human report: one table per policy, then how to read it.
pub fn render(r: &ScaleReport) -> String {
    let st = output::Style::new();
    let mut out = format!("{} {}\n", st.bold("cpulab scale:"), r.work);
    if let Some(l) = r.llc_total_kib {
        out.push_str(&format!("last-level caches: {} MiB in all\n", l / 1024));
    }
    for p in &r.policies {
        out.push_str(&format!("\n{}\n", st.bold(&format!("policy {}", p.policy))));
        let mut t = Table::new();
        t.load_style(presets::NOTHING);
        t.set_header(vec![
            "threads".to_string(),
            "CPUs".into(),
            "time s".into(),
            r.throughput_unit.clone(),
            "speedup ±95%".into(),
            "efficiency".into(),
            "doubled up (planned)".into(),
            "both busy (observed)".into(),
            "other load".into(),
        ]);
        for x in &p.points {
            t.add_row(vec![
                x.threads.to_string(),
                x.cpus
                    .as_ref()
                    .map(|c| {
                        c.iter()
                            .map(|c| c.to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .unwrap_or_else(|| "any".into()),
                format!("{:.3}", x.time_s.mean),
                format!("{:.2}", x.throughput.mean),
                ci(&x.speedup, 2),
                x.efficiency
                    .as_ref()
                    .map(|e| format!("{:.0}%", 100.0 * e.mean))
                    .unwrap_or_else(|| "-".into()),
                contended(&x.planned),
                contended(&x.observed),
                x.other_load_cpus
                    .map(|o| format!("{o:.2} CPU"))
                    .unwrap_or_else(|| "n/a".into()),
            ]);
        }
        out.push_str(&t.to_string());
        out.push('\n');
        for f in &p.pin_failures {
            out.push_str(&format!("{} could not pin {f}\n", st.yellow("warning:")));
        }
    }
    out.push_str(&format!(
        "\n{}\n",
        st.dim(
            "speedup = single-thread time / time, same policy (95% CI from the runs); \
             efficiency = speedup / threads; doubled up = SMT cores or shared-L2 modules with \
             two threads pinned to them; both busy = the same counted from per-CPU \
             utilisation (>= 50% busy) during the runs; other load = CPU time other processes took \
             on the allowed CPUs meanwhile."
        )
    ));
    for n in &r.conditions.notes {
        out.push_str(&format!("{} {n}\n", st.yellow("note:")));
    }
    out
}
