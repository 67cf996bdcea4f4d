//! What every command does with its result: one enveloped JSON document with `--json`, the
//! result's own text otherwise. It lives with the commands because it joins the two layers
//! below them that must not know each other: the result format (`report::envelope`) and the
//! terminal (`output`).

use crate::experiment::{Experiment, Progress};
use crate::machine::Machine;
use crate::output::{self, Style};
use crate::report::envelope::{Envelope, Kind};
use anyhow::Result;
use serde::Serialize;

/// Prints a result: with `json`, one enveloped document (`cpulab_schema`, `kind`); otherwise
/// the text `render` makes of it. Then records it in the history (after printing, so a history
/// that cannot be written never costs the result; see [`crate::history::record`]).
pub fn emit<T: Serialize>(
    json: bool,
    kind: Kind,
    report: &T,
    render: impl FnOnce(&T) -> String,
) -> Result<()> {
    let envelope = Envelope::new(kind, report);
    if json {
        output::print_json(&envelope)?;
    } else {
        output::print_text(&render(report))?;
    }
    if let Ok(doc) = serde_json::to_value(&envelope) {
        crate::history::record(kind, &doc, std::path::Path::new("/"));
    }
    Ok(())
}

/// What every measuring subcommand does once its flags are settings: run the experiment with
/// the terminal's progress printer, then print the result as JSON or as the experiment's text.
pub fn run_experiment<E: Experiment>(
    machine: &Machine,
    settings: &E::Settings,
    quiet: bool,
    json: bool,
) -> Result<()> {
    let sink = output::progress_printer(quiet);
    let report = E::run(machine, settings, &Progress::new(&sink))?;
    emit(json, E::KIND, &report, |r| E::render_text(r, &Style::new()))
}
