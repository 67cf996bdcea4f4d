//! `cpulab sim`: flags -> validated settings, simulate or validate, print.

use crate::cli::Global;
use crate::error::bad_input;
use crate::output;
use crate::report::envelope::Kind;
use crate::sim::params::{self, Calibration, Costs};
use crate::sim::{builtin, render, run_scenario, scenario, validate};
use anyhow::{Context, Result};
use serde::Serialize;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    /// Scenario file (TOML) to simulate; see `cpulab sim builtin NAME --toml` for the format.
    #[arg(value_name = "SCENARIO.toml")]
    pub scenario: Option<PathBuf>,
    #[command(subcommand)]
    pub action: Option<Action>,
    /// Seed of the simulation's random choices (same seed, same figures).
    #[arg(long, global = true, default_value_t = 1)]
    pub seed: u64,
    /// Take wakeup costs from a cpulab pingpong or doctor result measured on this machine.
    #[arg(long, global = true, value_name = "RESULT.json")]
    pub calibrate: Option<PathBuf>,
    /// One JSON document on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    /// Also write a self-contained HTML page here.
    #[arg(long, global = true, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Published tables of the field notes against the model, cell by cell.
    Validate,
    /// The built-in scenarios.
    List,
    /// Simulate a built-in scenario (or print it as a scenario file with --toml).
    Builtin {
        name: String,
        /// Print the scenario file instead of simulating it.
        #[arg(long)]
        toml: bool,
    },
    /// Events per second of the engine on this machine (for scripts/bench-sim.sh).
    #[command(hide = true)]
    Bench,
}

/// The validated settings.
struct Settings {
    seed: u64,
    calibration: Option<Calibration>,
    json: bool,
    html: Option<PathBuf>,
}

fn settings(args: &Args) -> Result<Settings> {
    let calibration = args
        .calibrate
        .as_deref()
        .map(params::load_calibration)
        .transpose()?;
    Ok(Settings {
        seed: args.seed,
        calibration,
        json: args.json,
        html: args.html.clone(),
    })
}

fn write_html(path: &Option<PathBuf>, page: impl FnOnce() -> String) -> Result<()> {
    if let Some(p) = path {
        std::fs::write(p, page()).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

pub fn run(args: Args, _g: &Global) -> Result<()> {
    let s = settings(&args)?;
    let base = s
        .calibration
        .as_ref()
        .map_or_else(Costs::default, |c| c.apply(&Costs::default()));
    match (&args.action, &args.scenario) {
        (Some(Action::Validate), _) => {
            let cal = s
                .calibration
                .clone()
                .unwrap_or_else(Calibration::field_notes);
            let v = validate::validate(&cal, s.seed)?;
            write_html(&s.html, || render::validation_html(&v))?;
            output::emit(s.json, Kind::Sim, &v, render::validation_text)
        }
        (Some(Action::List), _) => list(s.json),
        (Some(Action::Builtin { name, toml }), _) => {
            let cal = s
                .calibration
                .clone()
                .unwrap_or_else(Calibration::field_notes);
            let sc = builtin::all(&cal)
                .into_iter()
                .find(|b| &b.name == name)
                .ok_or_else(|| {
                    bad_input(format!(
                        "no built-in scenario {name:?}; `cpulab sim list` shows them"
                    ))
                })?;
            if *toml {
                return output::print_text(&toml::to_string(&sc)?);
            }
            simulate(&sc, &base, &s)
        }
        (Some(Action::Bench), _) => bench(s.json),
        (None, Some(path)) => simulate(&scenario::load(path)?, &base, &s),
        (None, None) => Err(bad_input(
            "give a scenario file, or one of: validate, list, builtin NAME (cpulab sim --help)",
        )),
    }
}

fn simulate(sc: &scenario::Scenario, base: &Costs, s: &Settings) -> Result<()> {
    let r = run_scenario(sc, base, s.calibration.clone(), s.seed)?;
    write_html(&s.html, || render::report_html(&r))?;
    output::emit(s.json, Kind::Sim, &r, render::report_text)
}

#[derive(Serialize)]
struct Listing {
    label: &'static str,
    scenarios: Vec<(String, String, usize)>,
}

fn list(json: bool) -> Result<()> {
    let l = Listing {
        label: crate::sim::SIMULATED,
        scenarios: builtin::all(&Calibration::field_notes())
            .into_iter()
            .map(|s| (s.name, s.description, s.configs.len()))
            .collect(),
    };
    output::emit(json, Kind::Sim, &l, |l| {
        let mut out = String::from("built-in scenarios (cpulab sim builtin NAME [--toml]):\n");
        for (n, d, k) in &l.scenarios {
            out += &format!("  {n:<22} {k:>2} configurations. {d}\n");
        }
        out
    })
}

/// The engine's speed on this machine: wall time of the built-in scenarios and one long
/// request/response run, events handled per second.
#[derive(Serialize)]
struct Bench {
    label: &'static str,
    events: u64,
    wall_s: f64,
    events_per_s: f64,
    /// Wall seconds each built-in scenario took.
    scenarios_s: Vec<(String, f64)>,
}

fn bench(json: bool) -> Result<()> {
    let t0 = std::time::Instant::now();
    let mut events = 0;
    let mut scenarios_s = Vec::new();
    let mut all = builtin::all(&Calibration::field_notes());
    let mut long = builtin::m(&Calibration::field_notes());
    long.name = "long pair run (20 s simulated)".into();
    long.duration_ms = 20_000.0;
    all.push(long);
    for sc in &all {
        let t = std::time::Instant::now();
        let r = run_scenario(sc, &Costs::default(), None, 1)?;
        events += r.configs.iter().map(|c| c.events).sum::<u64>();
        scenarios_s.push((sc.name.clone(), t.elapsed().as_secs_f64()));
    }
    let wall_s = t0.elapsed().as_secs_f64();
    let b = Bench {
        label: "measured wall time of the simulator (the figures it computes are SIMULATED)",
        events,
        wall_s,
        events_per_s: events as f64 / wall_s.max(1e-9),
        scenarios_s,
    };
    output::emit(json, Kind::Sim, &b, |b| {
        let mut out = format!(
            "{} events in {:.3} s: {:.1} million events/s on one core\n",
            b.events,
            b.wall_s,
            b.events_per_s / 1e6
        );
        for (n, s) in &b.scenarios_s {
            out += &format!("  {n}: {s:.3} s\n");
        }
        out
    })
}
