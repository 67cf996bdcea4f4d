//! `cpulab sim`: flags -> validated settings, simulate or validate, print.

use super::Global;
use crate::emit::{Emitted, Emitter, Sink};
use crate::error::bad_input;
use crate::output;
use crate::report::envelope::Kind;
use crate::sim::hostcal::{self, Calibrated, HostCalibration};
use crate::sim::params::{Calibration, Costs};
use crate::sim::{builtin, render, run_scenario, scenario, validate};
use anyhow::Result;
use serde::Serialize;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab sim validate\n  \
    cpulab sim builtin c-fair-share --toml > c.toml\n  \
    cpulab sim c.toml --seed 7 --html c.html\n  \
    cpulab sim validate --calibrate pingpong.json --json > sim.json")]
pub struct Args {
    /// A scenario file (TOML) to simulate, or `validate` (published tables against the model),
    /// `list` (built-in scenarios), `builtin NAME` (simulate one, or print it with --toml).
    #[arg(value_name = "SCENARIO.toml | validate | list | builtin NAME", num_args = 0..=2)]
    pub what: Vec<String>,
    /// Seed of the simulation's random choices (same seed, same figures).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Take wakeup costs from a cpulab pingpong or doctor result measured on this machine, or
    /// the KVM layer's costs from a `cpulab host bench` result (and, with validate, check
    /// table H against it).
    #[arg(long, value_name = "RESULT.json")]
    pub calibrate: Option<PathBuf>,
    /// With `builtin NAME`: print the scenario file instead of simulating it.
    #[arg(long)]
    pub toml: bool,
    /// `--json`, `--html FILE`.
    #[command(flatten)]
    pub output: crate::emit::OutputArgs,
}

/// What to do, from the positional words.
#[derive(Debug, PartialEq)]
enum Action {
    Validate,
    List,
    Builtin {
        name: String,
    },
    /// Events per second of the engine (hidden; for scripts/bench-sim.sh).
    Bench,
    Scenario(PathBuf),
}

/// The validated settings.
struct Settings {
    action: Action,
    seed: u64,
    calibration: Option<Calibration>,
    host: Option<HostCalibration>,
    toml: bool,
}

fn action(words: &[String]) -> Result<Action> {
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    Ok(match w.as_slice() {
        ["validate"] => Action::Validate,
        ["list"] => Action::List,
        ["bench"] => Action::Bench,
        ["builtin", name] => Action::Builtin {
            name: name.to_string(),
        },
        ["builtin"] => {
            return Err(bad_input(
                "builtin needs a scenario name; `cpulab sim list` shows them",
            ));
        }
        [file] => Action::Scenario(PathBuf::from(file)),
        [] => {
            return Err(bad_input(
                "give a scenario file, or one of: validate, list, builtin NAME (cpulab sim --help)",
            ));
        }
        _ => {
            return Err(bad_input(format!(
                "unexpected arguments {w:?}; give a scenario file, or one of: validate, list, \
                 builtin NAME"
            )));
        }
    })
}

/// Flags the action would ignore, or whose output it has not, refused before anything runs
/// (once, `sim list --html` printed the list and then failed, and `--toml` beside a scenario
/// file was dropped without a word).
fn contradictions(action: &Action, args: &Args) -> Result<()> {
    let builtin = matches!(action, Action::Builtin { .. });
    let listing = matches!(action, Action::List | Action::Bench);
    let html = args.output.html().is_some();
    if args.toml && !builtin {
        return Err(bad_input(
            "--toml prints a built-in scenario's file; give it with `cpulab sim builtin NAME --toml`, or leave it out",
        ));
    }
    if args.toml && (html || args.output.json()) {
        return Err(bad_input(
            "--toml prints the scenario file on stdout; leave out --json and --html",
        ));
    }
    if listing && html {
        return Err(bad_input(
            "--html: this `cpulab sim` output has no HTML page; leave out --html",
        ));
    }
    if listing && args.calibrate.is_some() {
        return Err(bad_input(
            "--calibrate: this `cpulab sim` output simulates nothing; give it with validate, builtin NAME or a scenario file",
        ));
    }
    Ok(())
}

fn settings(args: &Args) -> Result<Settings> {
    let action = action(&args.what)?;
    contradictions(&action, args)?;
    if let Action::Scenario(path) = &action {
        crate::emit::protect(path, "the scenario this command reads");
    }
    if let Some(path) = &args.calibrate {
        crate::emit::protect(path, "a result this command reads");
    }
    let (calibration, host) = match args
        .calibrate
        .as_deref()
        .map(hostcal::load_any)
        .transpose()?
    {
        None => (None, None),
        Some(Calibrated::Guest(c)) => (Some(c), None),
        Some(Calibrated::Host(h)) => (None, Some(*h)),
    };
    Ok(Settings {
        action,
        seed: args.seed,
        calibration,
        host,
        toml: args.toml,
    })
}

pub fn run(args: Args, g: &Global, also: &[&dyn Sink]) -> Result<()> {
    let s = settings(&args)?;
    let out = Emitter::new(&args.output, g.quiet, also)?;
    let base = match (&s.calibration, &s.host) {
        (Some(c), _) => c.apply(&Costs::default()),
        // A host bench result sets the KVM costs over the scenario's own (`simulate`).
        (None, Some(_)) => Costs::default(),
        (None, None) => Costs::default(),
    };
    let cal = || {
        s.calibration
            .clone()
            .unwrap_or_else(Calibration::field_notes)
    };
    match &s.action {
        Action::Validate => {
            let host = match &s.host {
                Some(h) => h.clone(),
                None => hostcal::bundled()?,
            };
            let v = validate::validate(&cal(), &host, s.seed)?;
            out.emit(&Emitted::new(
                Kind::Sim,
                &v,
                render::validation_text,
                Some(render::validation_html),
            )?)
        }
        Action::List => list(&out),
        Action::Builtin { name } => {
            let sc = builtin::all(&cal())
                .into_iter()
                .find(|b| &b.name == name)
                .ok_or_else(|| {
                    bad_input(format!(
                        "no built-in scenario {name:?}; `cpulab sim list` shows them"
                    ))
                })?;
            if s.toml {
                return output::print_text(&toml::to_string(&sc)?);
            }
            simulate(&sc, &base, &s, &out)
        }
        Action::Bench => bench(&out),
        Action::Scenario(path) => simulate(&scenario::load(path)?, &base, &s, &out),
    }
}

fn simulate(sc: &scenario::Scenario, base: &Costs, s: &Settings, out: &Emitter) -> Result<()> {
    let calibrated;
    let sc = match &s.host {
        Some(h) => {
            calibrated = h.calibrate_scenario(sc)?;
            &calibrated
        }
        None => sc,
    };
    let mut r = run_scenario(sc, base, s.calibration.clone(), s.seed)?;
    r.host_calibration = s.host.as_ref().map(HostCalibration::describe);
    out.emit(&Emitted::new(
        Kind::Sim,
        &r,
        render::report_text,
        Some(render::report_html),
    )?)
}

#[derive(Serialize)]
struct Listing {
    label: &'static str,
    scenarios: Vec<(String, String, usize)>,
}

fn list(out: &Emitter) -> Result<()> {
    let l = Listing {
        label: crate::sim::SIMULATED,
        scenarios: builtin::all(&Calibration::field_notes())
            .into_iter()
            .map(|s| (s.name, s.description, s.configs.len()))
            .collect(),
    };
    let text = |l: &Listing| {
        let mut out = String::from("built-in scenarios (cpulab sim builtin NAME [--toml]):\n");
        for (n, d, k) in &l.scenarios {
            out += &format!("  {n:<22} {k:>2} configurations. {d}\n");
        }
        out
    };
    out.emit(&Emitted::new(Kind::Sim, &l, text, None)?)
}

/// The engine's speed on this machine: wall time of the built-in scenarios and one long
/// request/response run, events handled per second.
#[derive(Serialize)]
struct Bench {
    label: &'static str,
    events: u64,
    wall_s: f64,
    /// CPU time of the simulating thread: what "on one core" means when the machine is busy.
    cpu_s: f64,
    events_per_s: f64,
    /// Events per CPU second of the simulating thread.
    events_per_cpu_s: f64,
    /// Wall seconds each built-in scenario took.
    scenarios_s: Vec<(String, f64)>,
}

fn bench(out: &Emitter) -> Result<()> {
    let t0 = std::time::Instant::now();
    let c0 = crate::load::thread_cpu_s();
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
    let cpu_s = crate::load::thread_cpu_s() - c0;
    let b = Bench {
        label: "measured wall time of the simulator (the figures it computes are SIMULATED)",
        events,
        wall_s,
        cpu_s,
        events_per_s: events as f64 / wall_s.max(1e-9),
        events_per_cpu_s: events as f64 / cpu_s.max(1e-9),
        scenarios_s,
    };
    let text = |b: &Bench| {
        let mut out = format!(
            "{} events in {:.3} s wall, {:.3} s CPU: {:.1} million events per CPU second \
             ({:.1} per wall second)\n",
            b.events,
            b.wall_s,
            b.cpu_s,
            b.events_per_cpu_s / 1e6,
            b.events_per_s / 1e6
        );
        for (n, s) in &b.scenarios_s {
            out += &format!("  {n}: {s:.3} s\n");
        }
        out
    };
    out.emit(&Emitted::new(Kind::Sim, &b, text, None)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn words_become_one_action_or_one_line_of_bad_input() {
        assert_eq!(action(&words(&["validate"])).unwrap(), Action::Validate);
        assert_eq!(
            action(&words(&["builtin", "c-fair-share"])).unwrap(),
            Action::Builtin {
                name: "c-fair-share".into()
            }
        );
        assert_eq!(
            action(&words(&["s.toml"])).unwrap(),
            Action::Scenario("s.toml".into())
        );
        for bad in [&[][..], &["builtin"][..], &["a.toml", "b.toml"][..]] {
            let e = action(&words(bad)).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2);
        }
    }
}
