//! `cpulab report RESULT.json [--html FILE]`: render a saved result again, for the terminal or
//! as a self-contained HTML page. A doctor result is rendered exactly as it was judged (its
//! findings are stored in it); other kinds get the charts or tables their figures allow.

use super::Global;
use crate::doctor::{DoctorReport, text};
use crate::error::bad_input;
use crate::output;
use crate::report::envelope::{Kind, Loaded};
use crate::report::html;
use anyhow::{Context, Result};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab report doctor.json\n  \
    cpulab report doctor.json --html doctor.html\n  \
    cpulab report pingpong.json --html pingpong.html")]
pub struct Args {
    /// A result written by a cpulab command's --json.
    pub result: PathBuf,
    /// Write a self-contained HTML report to FILE instead of printing text.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

fn doctor(l: &Loaded, name: &str) -> Result<DoctorReport> {
    serde_json::from_value(l.value.clone()).map_err(|e| {
        bad_input(format!(
            "{name} says it is a doctor result but does not match its schema ({e})"
        ))
    })
}

pub fn run(args: Args, g: &Global) -> Result<()> {
    let name = args.result.display().to_string();
    let l = crate::registry::load(&args.result)?;
    let (page, text) = match l.kind {
        Kind::Doctor => {
            let r = doctor(&l, &name)?;
            (crate::doctor::html::page(&r), text::render(&r))
        }
        Kind::Probe => {
            let p: crate::probe::Probe = serde_json::from_value(l.value.clone()).map_err(|e| {
                bad_input(format!(
                    "{name} says it is a probe result but does not match its schema ({e})"
                ))
            })?;
            (
                probe_page(&p),
                crate::probe::render(&p, &output::Style::new()),
            )
        }
        k => match crate::registry::lookup(k) {
            // The kind's own renderers; a document of the right kind but the wrong shape is bad
            // input, not something to flatten.
            Some(entry) => {
                let (text, page) = (entry.render)(&l.value, &output::Style::new())?;
                (page, text)
            }
            None => (generic_page(k.as_str(), &l.value), generic_text(&l)),
        },
    };
    match &args.html {
        Some(path) => {
            std::fs::write(path, page)
                .with_context(|| format!("cannot write {}", path.display()))?;
            output::status(
                g.quiet,
                &format!("HTML report written to {}", path.display()),
            );
            Ok(())
        }
        None => output::print_text(&text),
    }
}

/// A probe result as a page: the fingerprint as `cpulab probe` prints it, and its conditions.
fn probe_page(p: &crate::probe::Probe) -> String {
    let plain = output::Style { on: false };
    let body = maud::html! {
        section {
            h2 { "Machine fingerprint" }
            pre { (crate::probe::render(p, &plain)) }
        }
        (html::conditions(&p.conditions, &[]))
    };
    html::page("cpulab probe", html::facts_line(&p.conditions), body)
}

fn generic_text(l: &Loaded) -> String {
    let flat = crate::compare::walk::flatten(&l.value);
    let mut out = format!("cpulab {} result: {} figures\n", l.kind, flat.figures.len());
    for f in flat.figures.values() {
        out += &format!(
            "  {} = {}\n",
            f.path,
            crate::compare::text::fmt_value(&f.path, f.value)
        );
    }
    out
}

/// Any other result: its figures as a table (what `compare` would compare).
fn generic_page(kind: &str, doc: &serde_json::Value) -> String {
    let fmt = crate::compare::text::fmt_value;
    let flat = crate::compare::walk::flatten(doc);
    let rows: Vec<Vec<String>> = flat
        .figures
        .values()
        .map(|f| {
            let ci = f
                .samples
                .as_deref()
                .and_then(crate::stats::MeanCi::of)
                .map(|m| (m.ci95_low, m.ci95_high))
                .or(f.ci95)
                .map_or(String::new(), |(a, b)| {
                    format!("{} to {}", fmt(&f.path, a), fmt(&f.path, b))
                });
            vec![
                f.path.clone(),
                fmt(&f.path, f.value),
                ci,
                f.samples.as_ref().map_or(0, Vec::len).to_string(),
            ]
        })
        .collect();
    let conditions = doc
        .get("conditions")
        .and_then(|c| serde_json::from_value::<crate::machine::Conditions>(c.clone()).ok());
    let body = maud::html! {
        section {
            h2 { "Figures" }
            (html::table(&["figure", "value", "95% CI", "samples"], &rows, 1))
        }
        @if let Some(c) = &conditions {
            (html::conditions(c, &[]))
        }
    };
    html::page(&format!("cpulab {kind}"), maud::html! {}, body)
}
