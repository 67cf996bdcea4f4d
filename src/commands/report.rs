//! `cpulab report RESULT.json [--html FILE]`: render a saved result again, for the terminal or
//! as a self-contained HTML page. A doctor result is rendered exactly as it was judged (its
//! findings are stored in it); other kinds get the charts or tables their figures allow.

use super::Global;
use crate::emit::{Emitted, Emitter, Export, Format, Target, check_writable};
use crate::error::bad_input;
use crate::output;
use crate::report::envelope::Loaded;
use crate::report::html;
use anyhow::Result;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab report doctor.json\n  \
    cpulab report doctor.json --html doctor.html\n  \
    cpulab report pingpong.json --html pingpong.html")]
pub struct Args {
    /// A result written by a cpulab command's --json, or a run of the history as `@ID`.
    pub result: PathBuf,
    /// Write a self-contained HTML report to FILE instead of printing text.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

pub fn run(args: Args, g: &Global) -> Result<()> {
    let name = args.result.display().to_string();
    let l = load(&args.result)?;
    let (page, text) = match crate::registry::lookup(l.kind) {
        // The kind's own renderers (a doctor result exactly as it was judged); a document of
        // the right kind but the wrong shape is bad input, not something to flatten.
        Some(entry) => {
            let (text, page) = (entry.render)(&l.value, &output::Style::new())
                .map_err(|e| bad_input(format!("{name}: {e:#}")))?;
            (page, text)
        }
        None => (generic_page(l.kind.as_str(), &l.value), generic_text(&l)),
    };
    // The page instead of the text; nothing else: the result is already in the history.
    let export = match &args.html {
        Some(path) => {
            check_writable("--html", path)?;
            Export {
                format: Format::Html,
                target: Target::File {
                    flag: "--html",
                    path: path.clone(),
                },
                quiet: g.quiet,
            }
        }
        None => Export {
            format: Format::Text,
            target: Target::Stdout,
            quiet: g.quiet,
        },
    };
    Emitter::only(vec![export], &[]).emit(&Emitted::rendered(l.kind, l.value, text, Some(page)))
}

/// Reads a saved result: `@ID` is run ID of the history (`cpulab history list`), anything else a
/// file written by `--json`.
pub fn load(arg: &std::path::Path) -> Result<Loaded> {
    match arg.to_str().filter(|s| s.starts_with('@')) {
        Some(id) => crate::history::actions::load_ref(id),
        None => {
            crate::emit::protect(arg, "a result this command reads");
            crate::registry::load(arg)
        }
    }
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
