//! `cpulab oscost`: flags -> [`OscostSettings`], run, print.

use crate::cli::Global;
use crate::error::bad_input;
use crate::machine::Machine;
use crate::oscost::{self, OscostReport, OscostSettings};
use crate::output::{self, fmt_ns};
use crate::report::envelope::Kind;
use anyhow::Result;
use comfy_table::{CellAlignment, Table, presets};
use std::time::Duration;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab oscost\n  \
    cpulab oscost --quick\n  \
    cpulab oscost --json > before.json")]
pub struct Args {
    /// CPU to pin every measurement to [default: the first allowed CPU].
    #[arg(long, value_name = "CPU")]
    pub cpu: Option<String>,
    /// Fewer, shorter batches and a shorter frequency probe.
    #[arg(long)]
    pub quick: bool,
    /// Timed batches per primitive [default: 30, quick 10].
    #[arg(long, value_name = "N")]
    pub batches: Option<usize>,
    /// Approximate milliseconds per batch [default: 5, quick 2].
    #[arg(long, value_name = "MS")]
    pub batch_ms: Option<f64>,
    /// Skip the effective-frequency probe.
    #[arg(long)]
    pub no_freq: bool,
    /// Seconds of sustained load before the warm rate is taken [default: 1, quick 0.5].
    #[arg(long, value_name = "SECS", hide = true)]
    pub freq_load: Option<f64>,
    /// Frequency probe trials [default: 3, quick 2].
    #[arg(long, value_name = "N", hide = true)]
    pub freq_trials: Option<usize>,
    /// One JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

fn secs(v: f64, flag: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(v)
        .map_err(|_| bad_input(format!("{flag} must be a positive number")))
}

/// Turns flags into validated settings (exit 2 with one line on bad input).
pub fn settings(args: &Args, machine: &Machine) -> Result<OscostSettings> {
    let mut s = if args.quick {
        OscostSettings::quick()
    } else {
        OscostSettings::standard()
    };
    if let Some(text) = &args.cpu {
        let set = machine.cpus(text)?;
        if set.len() != 1 {
            return Err(bad_input(format!(
                "--cpu takes one CPU, not the list `{text}`; e.g. --cpu {}",
                set.first().unwrap_or(0)
            )));
        }
        s.cpu = set.first();
    }
    if let Some(b) = args.batches {
        s.batches = b;
    }
    if let Some(ms) = args.batch_ms {
        s.batch_target = secs(ms / 1000.0, "--batch-ms")?;
    }
    if args.no_freq {
        s.frequency = None;
    } else if let Some(f) = s.frequency.as_mut() {
        if let Some(l) = args.freq_load {
            f.load = secs(l, "--freq-load")?;
        }
        if let Some(t) = args.freq_trials {
            f.trials = t;
        }
    }
    s.check(machine)?;
    Ok(s)
}

pub fn run(args: Args, g: &Global) -> Result<()> {
    let machine = Machine::detect(&g.root)?;
    let settings = settings(&args, &machine)?;
    let report = oscost::run(&machine, &settings, &output::progress_printer(g.quiet))?;
    output::emit(args.json, Kind::Oscost, &report, render)
}

/// The human report: one row per primitive, the frequency probe, the platform, how to read it.
pub fn render(r: &OscostReport) -> String {
    let st = output::Style::new();
    let mut out = format!(
        "{} kernel {}, pinned to CPU {}, {} batches per primitive\n",
        st.bold("cpulab oscost:"),
        r.conditions.kernel,
        r.cpu,
        r.batches
    );
    out.push_str(&format!(
        "mitigations: {}{}; clocksource {}; THP {}\n\n",
        r.platform.mitigations_summary,
        if r.platform.cmdline_mitigation_options.is_empty() {
            String::new()
        } else {
            format!(" ({})", r.platform.cmdline_mitigation_options.join(" "))
        },
        r.platform.clocksource.as_deref().unwrap_or("unknown"),
        r.platform.thp_enabled.as_deref().unwrap_or("unknown"),
    ));
    let mut t = Table::new();
    t.load_style(presets::NOTHING);
    t.set_header(vec![
        "primitive",
        "mean ±95%",
        "median",
        "min",
        "check",
        "ops/batch",
    ]);
    for op in &r.ops {
        let row = match (&op.per_op_ns, &op.unavailable) {
            (Some(m), _) => vec![
                op.name.clone(),
                format!("{} ± {:.1}%", fmt_ns(m.mean), 100.0 * m.rel_half_width()),
                op.median_ns.map(fmt_ns).unwrap_or_default(),
                op.min_ns.map(fmt_ns).unwrap_or_default(),
                op.counted
                    .as_ref()
                    .map(|c| format!("{:.2} {}/op", c.per_op, c.counter))
                    .unwrap_or_default(),
                op.ops_per_batch.to_string(),
            ],
            (None, reason) => vec![
                op.name.clone(),
                format!("unavailable: {}", reason.as_deref().unwrap_or("unknown")),
            ],
        };
        t.add_row(row);
    }
    if let Some(c) = t.column_mut(5) {
        c.set_cell_alignment(CellAlignment::Right);
    }
    out.push_str(&t.to_string());
    out.push('\n');
    if let Some(f) = &r.frequency {
        let m = |x: &Option<crate::stats::MeanCi>, d: usize| {
            x.as_ref()
                .map(|m| format!("{:.*} ± {:.*}", d, m.mean, d, m.ci95_half_width))
                .unwrap_or_else(|| "n/a".into())
        };
        out.push_str(&format!(
            "\n{} ({})\n  cold (median of the first 3 slices of {:.0} us after {:.1} s idle): {}\n  warm (after {:.1} s \
             of load): {}\n  cold/warm: {}   ramp-up to 95% of warm: {} us\n",
            st.bold("effective frequency"),
            f.unit,
            f.slice_us,
            f.idle_s,
            m(&f.cold_per_ns, 2),
            f.load_s,
            m(&f.warm_per_ns, 2),
            m(&f.cold_to_warm_ratio, 2),
            m(&f.ramp_up_us, 0),
        ));
    }
    out.push_str(&format!(
        "\n{}\n",
        st.dim(
            "mean ±95% = batch means with the interval's half-width in percent; every batch is \
             kept in --json (batch_samples_ns) so two runs compare with a significance test \
             (cpulab compare). check = a kernel counter per operation that confirms what was \
             timed. context_switch_yield is measured with sched_yield between two threads on \
             one CPU, not derived from the pipe round trip."
        )
    ));
    for n in &r.conditions.notes {
        out.push_str(&format!("{} {n}\n", st.yellow("note:")));
    }
    out
}
