//! `cpulab doctor`: probe, measure, and name the causes, with evidence and remedies.

use super::Global;
use crate::doctor::battery::{DoctorSettings, Mode};
use crate::doctor::{self, text};
use crate::emit::{Emitted, Emitter, Sink};
use crate::error::bad_input;
use crate::machine::Machine;
use crate::output;
use crate::report::envelope::Kind;
use crate::watch::targets::{parse_comms, parse_pids};
use anyhow::Result;
use std::path::Path;

/// Presets `--with` understands.
pub const PRESETS: &[&str] = &["pgbench", "http"];

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab doctor\n  \
    cpulab doctor --quick\n  \
    cpulab doctor --json > doctor.json\n  \
    cpulab doctor --quick --expect-absent cross-cpu-wakeup")]
pub struct Args {
    /// At most about 15 seconds: the essentials at short intervals.
    #[arg(long, conflicts_with = "thorough")]
    pub quick: bool,
    /// Longer runs for tighter intervals.
    #[arg(long)]
    pub thorough: bool,
    /// Also run real applications under each placement: `pgbench`, `http`, a list, or `all`.
    #[arg(long, value_name = "PRESETS")]
    pub with: Option<String>,
    /// `--json`, `--html FILE`.
    #[command(flatten)]
    pub output: crate::emit::OutputArgs,
    /// After the battery, run `cpulab try` on every remedy that is a setting and add the
    /// measured effect and cost to it (root only; every setting is restored).
    #[arg(long = "try")]
    pub try_remedies: bool,
    /// Skip the check for other load before measuring.
    #[arg(long)]
    pub no_load_check: bool,
    /// Also watch a live application's wakeups (its processes, comma-separated) and say what
    /// crossing CPUs costs it, with the battery's measured penalty (root: scheduler tracepoints).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "PID",
        conflicts_with = "comm"
    )]
    pub pid: Vec<String>,
    /// Like --pid, by process name (as in /proc/PID/comm).
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    pub comm: Vec<String>,
    /// Measure nothing: judge the measurements of a saved doctor result (its --json, or `@ID`
    /// of the history) with this cpulab's rules, against this machine's facts or those of
    /// --root. Recorded in no history.
    #[arg(
        long,
        value_name = "RESULT",
        conflicts_with_all = ["quick", "thorough", "with", "try_remedies", "no_load_check", "pid", "comm"]
    )]
    pub replay: Option<std::path::PathBuf>,
    /// Exit 1 when any of these findings is present (one marked uncertain counts as present),
    /// 0 when none is: the check that a remedy holds. Ids as `--json` names them
    /// (`cross-cpu-wakeup`), comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "ID")]
    pub expect_absent: Vec<String>,
}

/// Refuses an `--expect-absent` id no rule has: a typo would make the check always pass.
/// Checks the `--expect-absent` ids, trimmed in place (`a, b` as typed in quotes was refused as
/// ` b`); an empty one (`a,,b`) is named as empty rather than as the rule ``.
fn check_expected_ids(ids: &mut [String]) -> Result<()> {
    let known: Vec<&str> = crate::doctor::rules::all().iter().map(|r| r.id()).collect();
    for id in ids {
        *id = id.trim().to_string();
        if id.is_empty() {
            return Err(bad_input(
                "--expect-absent has an empty id; give finding ids comma-separated, like \
                 `cross-cpu-wakeup,unpinned-placement`",
            ));
        }
        if !known.contains(&id.as_str()) {
            return Err(bad_input(format!(
                "--expect-absent {id}: no rule finds `{id}`; choose from {}",
                known.join(", ")
            )));
        }
    }
    Ok(())
}

/// `--expect-absent`: an error (exit 1) naming each expected-absent finding that is present.
fn expect_absent(findings: &[crate::doctor::findings::Finding], ids: &[String]) -> Result<()> {
    let present: Vec<String> = findings
        .iter()
        .filter(|f| ids.contains(&f.id))
        .map(|f| match &f.uncertain {
            Some(why) => format!("{} (marked uncertain: {why})", f.id),
            None => f.id.clone(),
        })
        .collect();
    if present.is_empty() {
        return Ok(());
    }
    anyhow::bail!("--expect-absent: still present: {}", present.join("; "))
}

/// Turns the flags into settings; unknown presets are bad input.
pub fn settings(a: &Args) -> Result<DoctorSettings> {
    let mode = if a.quick {
        Mode::Quick
    } else if a.thorough {
        Mode::Thorough
    } else {
        Mode::Default
    };
    let mut presets = Vec::new();
    if let Some(w) = &a.with {
        for p in w.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if p == "all" {
                presets = PRESETS.iter().map(|s| s.to_string()).collect();
                break;
            }
            if !PRESETS.contains(&p) {
                return Err(bad_input(format!(
                    "--with {p}: unknown preset; choose from {} or all",
                    PRESETS.join(", ")
                )));
            }
            if !presets.iter().any(|x| x == p) {
                presets.push(p.to_string());
            }
        }
        if presets.is_empty() {
            return Err(bad_input(format!(
                "--with `{w}` names no preset; give {} or all, or leave out --with",
                PRESETS.join(", ")
            )));
        }
    }
    let watch = if !a.pid.is_empty() {
        Some(crate::watch::Target::Pids(
            parse_pids(&a.pid, Path::new("/"), "--pid").map_err(bad_input)?,
        ))
    } else if !a.comm.is_empty() {
        Some(crate::watch::Target::Comms(
            parse_comms(&a.comm, "--comm").map_err(bad_input)?,
        ))
    } else {
        None
    };
    Ok(DoctorSettings {
        mode,
        presets,
        watch,
        check_load: !a.no_load_check,
    })
}

/// `--replay`: the saved result's measurements, judged against the facts of `g.root`.
fn replay(path: &Path, args: &Args, g: &Global) -> Result<()> {
    let name = path.display().to_string();
    let l = super::report::load(path)?;
    if l.kind != Kind::Doctor {
        return Err(bad_input(format!(
            "{name} is a `cpulab {}` result; --replay takes one written by `cpulab doctor --json`",
            l.kind.as_str()
        )));
    }
    let field = |key: &str| {
        l.value.get(key).cloned().ok_or_else(|| {
            bad_input(format!(
                "{name} has no \"{key}\"; write it again with `cpulab doctor --json`"
            ))
        })
    };
    let m = serde_json::from_value(field("measurements")?).map_err(|e| {
        bad_input(format!(
            "{name}: its measurements do not read ({e}); write it again with `cpulab doctor --json`"
        ))
    })?;
    let mode = serde_json::from_value(field("mode")?)
        .map_err(|e| bad_input(format!("{name}: its mode does not read ({e})")))?;
    let taken: crate::machine::Conditions = serde_json::from_value(field("conditions")?)
        .map_err(|e| bad_input(format!("{name}: its conditions do not read ({e})")))?;
    let machine = Machine::detect(&g.root)?;
    let source = format!(
        "{name} (measured on {} at Unix time {:.0}, cpulab {} {})",
        taken.hostname,
        taken.started_unix_s,
        taken.cpulab_version,
        taken
            .cpulab_revision
            .as_deref()
            .unwrap_or("(revision not recorded)")
    );
    let report = doctor::replay(&machine, m, mode, &source);
    // A replay measured nothing: no history sink.
    Emitter::new(&args.output, g.quiet, &[])?.emit(&Emitted::new(
        Kind::Doctor,
        &report,
        text::render,
        Some(crate::doctor::html::page),
    )?)?;
    expect_absent(&report.findings, &args.expect_absent)
}

pub fn run(mut args: Args, g: &Global, also: &[&dyn Sink]) -> Result<()> {
    check_expected_ids(&mut args.expect_absent)?;
    g.machine_root()?;
    if let Some(path) = &args.replay {
        return replay(path, &args, g);
    }
    let settings = settings(&args)?;
    if args.try_remedies && !nix::unistd::geteuid().is_root() {
        return Err(crate::error::bad_input(
            "doctor --try changes settings for its trials and needs root; run `sudo cpulab doctor --try`",
        ));
    }
    let emitter = Emitter::new(&args.output, g.quiet, also)?;
    let mut machine = Machine::detect(&g.root)?;
    // A fixture root describes another machine, but every stage runs here.
    let left_out = machine.measurable_here()?;
    let visible = !g.quiet && output::stderr_is_terminal();
    let mut report = doctor::run(&machine, &settings, visible, g.quiet);
    if g.root != std::path::Path::new("/") {
        report.conditions.notes.insert(
            0,
            format!(
                "fixture root {}: the topology and facts are the fixture's, but every figure was \
                 measured on this machine's CPUs {}{}",
                g.root.display(),
                machine.allowed,
                if left_out.is_empty() {
                    String::new()
                } else {
                    format!(" (the fixture's CPUs {left_out} do not exist or are not allowed here)")
                }
            ),
        );
    }
    // An interrupted battery tries nothing more: the interrupt stops the whole command.
    if args.try_remedies && report.interrupted.is_none() {
        crate::trial::doctor::try_remedies(&machine, &g.root, &mut report.findings, g.quiet)?;
    }
    let emitted = emitter.emit(&Emitted::new(
        Kind::Doctor,
        &report,
        text::render,
        Some(crate::doctor::html::page),
    )?);
    if let Some(i) = &report.interrupted {
        if let Err(e) = &emitted {
            eprintln!("cpulab: {e:#}");
        }
        // Every process has ended and every directory is gone; report the signal as a shell
        // would.
        eprintln!(
            "cpulab: interrupted by {} during {}; the partial result above is marked interrupted",
            i.name, i.during
        );
        std::process::exit(i.exit_code());
    }
    emitted?;
    expect_absent(&report.findings, &args.expect_absent)
}
