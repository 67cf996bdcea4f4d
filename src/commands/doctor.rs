//! `cpulab doctor`: probe, measure, and name the causes, with evidence and remedies.

use crate::cli::Global;
use crate::doctor::battery::{DoctorSettings, Mode};
use crate::doctor::{self, text};
use crate::error::bad_input;
use crate::machine::Machine;
use crate::output;
use crate::report::envelope::{Envelope, Kind};
use anyhow::{Context, Result};
use std::path::PathBuf;

/// Presets `--with` understands.
pub const PRESETS: &[&str] = &["pgbench", "http"];

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab doctor\n  \
    cpulab doctor --quick\n  \
    cpulab doctor --with pgbench,http\n  \
    cpulab doctor --json > doctor.json")]
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
    /// One JSON document on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained HTML report to FILE.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
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
    }
    Ok(DoctorSettings { mode, presets })
}

pub fn run(args: Args, g: &Global) -> Result<()> {
    let settings = settings(&args)?;
    let machine = Machine::detect(&g.root)?;
    let visible = !g.quiet && output::stderr_is_terminal();
    let report = doctor::run(&machine, &settings, visible, g.quiet);
    let doc = Envelope::new(Kind::Doctor, &report);
    if let Some(path) = &args.html {
        let html = crate::doctor::html::page(&report);
        std::fs::write(path, html).with_context(|| format!("cannot write {}", path.display()))?;
        output::status(
            g.quiet,
            &format!("HTML report written to {}", path.display()),
        );
    }
    if args.json {
        output::print_json(&doc)
    } else {
        output::print_text(&text::render(&report))
    }
}
