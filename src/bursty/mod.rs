//! `cpulab bursty`: what a sleep costs the work that follows it.
//!
//! A fixed amount of CPU work W, then a sleep S, repeated: the duty cycle of a request handler,
//! a periodic job, a game loop. Each burst is timed (wall clock, and the thread's own CPU time).
//! Beside the bursts, the same work is run back to back without sleeping, on a CPU that is
//! already busy: the warm time of one burst. When a frequency governor lets the clock drop
//! during the sleep, or the CPU goes into a deep idle state, the first microseconds after the
//! wakeup run slow and the burst takes longer than its warm time; that ratio is what a
//! frequency setting changes, which is why `cpulab try` measures frequency settings with it
//! (beside the oscost ramp).
//!
//! The work is a dependent chain of integer operations calibrated on a warm CPU to take W;
//! the thread runs on the allowed CPUs (`--cpus`), placed by the scheduler.

mod run;

use crate::cpulist::CpuSet;
use crate::error::bad_input;
use crate::experiment::{Command, Direction, Experiment, Figure, Progress, Unit};
use crate::machine::{Conditions, Machine};
use crate::output::Style;
use crate::report::envelope::Kind;
use crate::report::html::{self, chart, section};
use crate::report::svg::{self, Bar};
use crate::stats::MeanCi;
use crate::units::{flag_duration, fmt_ns};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Fewest runs `--repeats` accepts: as `pair`, two runs give an interval four times wider than
/// their spread (Student's t with one degree of freedom is 12.7), most often reaching below zero.
pub const MIN_REPEATS: usize = 3;

/// Validated settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BurstySettings {
    /// Warm time of one burst's work.
    #[serde(rename = "work_s", with = "crate::units::serde_secs")]
    pub work: Duration,
    /// Sleep between bursts.
    #[serde(rename = "sleep_s", with = "crate::units::serde_secs")]
    pub sleep: Duration,
    /// Length of one measured run.
    #[serde(rename = "duration_s", with = "crate::units::serde_secs")]
    pub duration: Duration,
    pub repeats: usize,
    /// The CPUs the tasks may use; `None`: every CPU this process may use (the conditions'
    /// `allowed_cpus`).
    pub cpus: Option<CpuSet>,
    pub check_load: bool,
}

impl BurstySettings {
    /// 1 ms of work every 10 ms, 1 s runs, 3 of them.
    pub fn standard() -> Self {
        Self {
            work: Duration::from_millis(1),
            sleep: Duration::from_millis(10),
            duration: Duration::from_secs(1),
            repeats: 3,
            cpus: None,
            check_load: true,
        }
    }

    /// For a trial round (`cpulab try`): two runs of half a second.
    pub fn quick() -> Self {
        Self {
            duration: Duration::from_millis(500),
            repeats: 2,
            ..Self::standard()
        }
    }
}

/// One run: every burst after a sleep, and the same work back to back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BurstyRun {
    /// Wall time of each burst that followed a sleep, in order.
    pub burst_ns: Vec<f64>,
    /// The thread's CPU time during each of those bursts.
    pub burst_cpu_ns: Vec<f64>,
    /// Wall time of each burst run back to back, without sleeping (the warm reference).
    pub warm_ns: Vec<f64>,
    pub p50_ns: f64,
    pub p99_ns: f64,
    pub mean_ns: f64,
    pub warm_p50_ns: f64,
    /// `p50_ns / warm_p50_ns`: what sleeping costs the typical burst after it (medians, so a
    /// preemption of the back-to-back loop on a busy machine does not set the reference).
    pub slowdown: f64,
}

/// The result; this struct is the JSON schema.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BurstyReport {
    pub settings: BurstySettings,
    pub conditions: Conditions,
    /// Loop iterations that make one burst, calibrated on a warm CPU.
    pub iterations: u64,
    pub runs: Vec<BurstyRun>,
    /// Over the runs' figures: mean and 95% interval.
    pub p50_ns: Option<MeanCi>,
    pub p99_ns: Option<MeanCi>,
    pub mean_ns: Option<MeanCi>,
    pub warm_p50_ns: Option<MeanCi>,
    pub slowdown: Option<MeanCi>,
}

/// `cpulab bursty` flags.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab bursty\n  \
    cpulab bursty --work 200us --sleep 50ms\n  \
    cpulab bursty --cpus 1 --duration 2s --repeats 5 --json > bursty.json")]
pub struct Args {
    /// CPU work per burst, as its time on a warm CPU: `1ms`, `200us`.
    #[arg(long, value_name = "TIME", default_value = "1ms")]
    pub work: String,
    /// Sleep between bursts: `10ms`, `1s`.
    #[arg(long, value_name = "TIME", default_value = "10ms")]
    pub sleep: String,
    /// Length of one measured run: `1s`, `500ms`.
    #[arg(long, value_name = "TIME", default_value = "1s")]
    pub duration: String,
    /// Runs, for the confidence interval (at least 3).
    #[arg(long, value_name = "N", default_value_t = MIN_REPEATS)]
    pub repeats: usize,
    /// Use only these CPUs (taskset syntax); the scheduler places the thread among them.
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// Skip the check for other load before measuring.
    #[arg(long)]
    pub no_load_check: bool,
    /// `--json`, `--html FILE`.
    #[command(flatten)]
    pub output: crate::emit::OutputArgs,
}

/// The bursty experiment.
pub struct Bursty;

impl Experiment for Bursty {
    type Settings = BurstySettings;
    type Report = BurstyReport;
    const KIND: Kind = Kind::Experiment("bursty");

    fn load_watch(
        machine: &Machine,
        settings: &BurstySettings,
    ) -> Result<Option<crate::experiment::LoadWatch>> {
        Ok(Some(crate::experiment::LoadWatch::on(
            machine,
            settings.cpus.as_ref(),
            std::time::Duration::from_millis(300),
            settings.check_load,
        )))
    }

    fn measure(
        machine: &Machine,
        settings: &BurstySettings,
        conditions: Conditions,
        progress: &Progress,
    ) -> Result<BurstyReport> {
        run::measure(machine, settings, conditions, progress)
    }

    fn conditions(r: &BurstyReport) -> &Conditions {
        &r.conditions
    }

    /// One sample per run for each figure.
    fn figures(r: &BurstyReport) -> Vec<Figure> {
        let id = format!(
            "work={}us,sleep={}us",
            r.settings.work.as_micros(),
            r.settings.sleep.as_micros()
        );
        let per_run = |f: fn(&BurstyRun) -> f64| r.runs.iter().map(f).collect::<Vec<_>>();
        let ns = |name: &str, label: &str, f: fn(&BurstyRun) -> f64| {
            Figure::from_samples(
                format!("{name}[{id}]"),
                format!(
                    "{label}, {} of work after {} asleep",
                    fmt_dur(r.settings.work),
                    fmt_dur(r.settings.sleep)
                ),
                Unit::Nanoseconds,
                Direction::LowerIsBetter,
                per_run(f),
            )
        };
        let mut out: Vec<Figure> = [
            ns("burst_p50_ns", "burst time, median", |x| x.p50_ns),
            ns("burst_p99_ns", "burst time, 99th percentile", |x| x.p99_ns),
            ns("burst_mean_ns", "burst time, mean", |x| x.mean_ns),
            ns("warm_p50_ns", "the same work back to back, median", |x| {
                x.warm_p50_ns
            }),
        ]
        .into_iter()
        .flatten()
        .collect();
        out.extend(Figure::from_samples(
            format!("slowdown[{id}]"),
            "median burst time after a sleep over its median warm time".to_string(),
            Unit::Ratio,
            Direction::LowerIsBetter,
            per_run(|x| x.slowdown),
        ));
        out
    }

    fn render_text(r: &BurstyReport, st: &Style) -> String {
        render_text(r, st)
    }

    fn render_html(r: &BurstyReport) -> String {
        page(r)
    }
}

impl Command for Bursty {
    type Args = Args;
    const ABOUT: &'static str = "A work/sleep duty cycle: how much longer a burst of work takes \
                                 after a sleep than on a warm CPU (frequency governors, idle states).";

    fn settings(a: &Args, machine: &Machine) -> Result<BurstySettings> {
        let mut s = BurstySettings::standard();
        s.work = flag_duration("work", &a.work)?;
        s.sleep = flag_duration("sleep", &a.sleep)?;
        s.duration = flag_duration("duration", &a.duration)?;
        if s.work < Duration::from_micros(10) || s.work > Duration::from_secs(1) {
            return Err(bad_input(format!(
                "--work {} is outside 10us..1s; give the CPU time of one burst, such as 1ms",
                a.work
            )));
        }
        if s.sleep > Duration::from_secs(10) {
            return Err(bad_input(format!(
                "--sleep {} is above 10s; give the pause between bursts, such as 10ms",
                a.sleep
            )));
        }
        if s.duration < (s.work + s.sleep) * 2 {
            return Err(bad_input(format!(
                "--duration {} holds fewer than two bursts of --work {} and --sleep {}; give a longer duration",
                a.duration, a.work, a.sleep
            )));
        }
        s.repeats =
            crate::units::flag_count("repeats", a.repeats, MIN_REPEATS, crate::units::MAX_REPEATS)?;
        if let Some(text) = &a.cpus {
            s.cpus = Some(machine.flag_cpus("--cpus", text)?);
        }
        s.check_load = !a.no_load_check;
        Ok(s)
    }

    fn output(a: &Args) -> &crate::emit::OutputArgs {
        &a.output
    }
}

fn fmt_dur(d: Duration) -> String {
    fmt_ns(d.as_nanos() as f64)
}

/// Mean and 95% interval over runs of a figure that cannot be negative (a time, a ratio of
/// times): an interval reaching below zero is cut at zero, which still holds the true value
/// whenever the whole interval did; `ci95_half_width` keeps the interval's real half-width.
pub fn nonnegative_ci(values: &[f64]) -> Option<MeanCi> {
    MeanCi::of(values).map(|mut m| {
        m.ci95_low = m.ci95_low.max(0.0);
        m
    })
}

/// An interval wider than its mean reaches below zero: it bounds nothing on that side.
fn too_wide(m: &MeanCi) -> bool {
    m.ci95_half_width >= m.mean
}

fn ci_with(
    m: &Option<MeanCi>,
    mean: impl Fn(f64) -> String,
    half: impl Fn(f64) -> String,
) -> String {
    match m {
        None => "-".into(),
        Some(m) if too_wide(m) => format!(
            "{}  (interval too wide over {} runs: ± {} reaches below zero)",
            mean(m.mean),
            m.n,
            half(m.ci95_half_width)
        ),
        Some(m) => format!("{} ± {}", mean(m.mean), half(m.ci95_half_width)),
    }
}

fn ci_ns(m: &Option<MeanCi>) -> String {
    ci_with(m, fmt_ns, fmt_ns)
}

fn render_text(r: &BurstyReport, st: &Style) -> String {
    let s = &r.settings;
    let bursts: usize = r.runs.iter().map(|x| x.burst_ns.len()).sum();
    let mut out = format!(
        "{} {} of work after {} asleep, {} runs of {} on CPUs {} ({bursts} bursts)\n",
        st.bold("cpulab bursty:"),
        fmt_dur(s.work),
        fmt_dur(s.sleep),
        r.runs.len(),
        fmt_dur(s.duration),
        r.conditions.allowed_cpus
    );
    out += &format!("  burst p50   {}\n", ci_ns(&r.p50_ns));
    out += &format!("  burst p99   {}\n", ci_ns(&r.p99_ns));
    out += &format!("  burst mean  {}\n", ci_ns(&r.mean_ns));
    out += &format!(
        "  warm p50    {}  (same work back to back)\n",
        ci_ns(&r.warm_p50_ns)
    );
    out += &format!(
        "  slowdown    {}  (burst p50 / warm p50; 95% CI over runs)\n",
        ci_with(&r.slowdown, |v| format!("{v:.3}x"), |v| format!("{v:.3}"))
    );
    for n in &r.conditions.notes {
        out += &format!("{}\n", st.dim(&format!("note: {n}")));
    }
    out
}

fn page(r: &BurstyReport) -> String {
    let bar = |label: &str, m: &Option<MeanCi>, accent: bool| {
        m.as_ref().map(|m| Bar {
            label: label.to_string(),
            value: m.mean,
            ci: Some((m.ci95_low, m.ci95_high)),
            accent,
        })
    };
    let bars: Vec<Bar> = [
        bar("warm p50", &r.warm_p50_ns, false),
        bar("burst p50", &r.p50_ns, true),
        bar("burst mean", &r.mean_ns, true),
        bar("burst p99", &r.p99_ns, true),
    ]
    .into_iter()
    .flatten()
    .collect();
    let rows: Vec<Vec<String>> = r
        .runs
        .iter()
        .enumerate()
        .map(|(i, x)| {
            vec![
                (i + 1).to_string(),
                x.burst_ns.len().to_string(),
                fmt_ns(x.p50_ns),
                fmt_ns(x.p99_ns),
                fmt_ns(x.mean_ns),
                fmt_ns(x.warm_p50_ns),
                format!("{:.3}x", x.slowdown),
            ]
        })
        .collect();
    let s = &r.settings;
    let body = maud::html! {
        (section(
            "Burst time after a sleep, against the same work warm",
            &format!("{} of work after {} asleep; whiskers the 95% interval over runs.",
                fmt_dur(s.work), fmt_dur(s.sleep)),
            chart(svg::bars("Time of one burst", &bars, &fmt_ns)),
        ))
        section {
            h2 { "Every run" }
            (html::table(&["run", "bursts", "p50", "p99", "mean", "warm p50", "slowdown"], &rows, 1))
        }
        (html::conditions(&r.conditions, &[]))
    };
    html::page("cpulab bursty", html::facts_line(&r.conditions), body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_interval_never_bounds_below_zero_and_a_wide_one_says_so() {
        // Two runs far apart: Student's t with one degree of freedom reaches below zero.
        let wide = nonnegative_ci(&[100_000.0, 400_000.0]).unwrap();
        assert!(wide.ci95_half_width > wide.mean);
        assert_eq!(wide.ci95_low, 0.0);
        assert!(wide.ci95_high > wide.mean);
        let text = ci_ns(&Some(wide));
        assert!(text.contains("interval too wide over 2 runs"), "{text}");
        assert!(!text.contains('-'), "{text}");
        // A tight interval is left as it is and shown as mean ± half-width.
        let tight = nonnegative_ci(&[100.0, 101.0, 99.0]).unwrap();
        assert_eq!(tight, MeanCi::of(&[100.0, 101.0, 99.0]).unwrap());
        assert!(ci_ns(&Some(tight)).contains(" ± "));
    }

    #[test]
    fn fewer_than_three_repeats_are_refused() {
        let root =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kvm-guest");
        let machine = Machine::detect(&root).unwrap();
        let args = |repeats| Args {
            work: "1ms".into(),
            sleep: "10ms".into(),
            duration: "1s".into(),
            repeats,
            cpus: None,
            no_load_check: true,
            output: Default::default(),
        };
        for few in [0, 1, 2] {
            let e = Bursty::settings(&args(few), &machine).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2);
            assert!(
                format!("{e:#}").contains(&format!("--repeats {few}: give 3 to 100")),
                "{e:#}"
            );
        }
        assert_eq!(Bursty::settings(&args(3), &machine).unwrap().repeats, 3);
    }
}
