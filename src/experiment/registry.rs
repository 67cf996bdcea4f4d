//! The one list of experiments.
//!
//! Everything that needs "any experiment" by kind or by name reads it from here: `cpulab report`
//! renders a loaded document with its kind's own renderer, `compare` and `try` read a result's
//! typed [`Figure`]s, and `try --measure` runs an experiment chosen at run time. Adding an
//! experiment is one line in [`ENTRIES`].

use super::{Experiment, Figure, Progress};
use crate::error::bad_input;
use crate::machine::Machine;
use crate::output::Style;
use crate::report::envelope::{Envelope, Kind};
use anyhow::Result;

/// What the registry knows of one kind of result, without its types.
pub struct Entry {
    pub kind: Kind,
    /// Text and HTML of a loaded document (envelope included).
    pub render: fn(&serde_json::Value, &Style) -> Result<(String, String)>,
    /// The typed figures of a loaded document.
    pub figures: fn(&serde_json::Value) -> Result<Vec<Figure>>,
}

/// Builds the entry of one experiment.
pub const fn entry<E: Experiment>() -> Entry {
    Entry {
        kind: E::KIND,
        render: render_as::<E>,
        figures: figures_as::<E>,
    }
}

/// Every experiment whose results cpulab can load, render and compare.
pub const ENTRIES: &[Entry] = &[
    entry::<crate::pingpong::Pingpong>(),
    entry::<crate::pair::Pair>(),
    entry::<crate::share::Share>(),
    entry::<crate::scale::Scale>(),
    entry::<crate::oscost::Oscost>(),
    entry::<crate::watch::Watch>(),
    // A model, not an experiment: its documents are loaded and rendered like the others, and
    // every figure it gives is labelled SIMULATED.
    Entry {
        kind: Kind::Sim,
        render: crate::sim::render::render_document,
        figures: crate::sim::render::figures,
    },
    entry::<crate::trial::Trial>(),
];

/// The entry for a kind, if it is an experiment's.
pub fn lookup(kind: Kind) -> Option<&'static Entry> {
    ENTRIES.iter().find(|e| e.kind == kind)
}

/// Reads a loaded document back into the kind's typed result: a document with the right schema
/// number but the wrong shape is bad input (one line, exit 2).
pub fn typed<E: Experiment>(doc: &serde_json::Value) -> Result<E::Report> {
    serde_json::from_value(doc.clone()).map_err(|e| {
        bad_input(format!(
            "this {} result does not match its schema ({e}); write it again with `cpulab {} --json`",
            E::KIND,
            E::KIND
        ))
    })
}

fn render_as<E: Experiment>(doc: &serde_json::Value, style: &Style) -> Result<(String, String)> {
    let r = typed::<E>(doc)?;
    Ok((E::render_text(&r, style), E::render_html(&r)))
}

fn figures_as<E: Experiment>(doc: &serde_json::Value) -> Result<Vec<Figure>> {
    Ok(E::figures(&typed::<E>(doc)?))
}

/// One run of an experiment chosen at run time, its result kept both typed-erased (the enveloped
/// document, for `--json` and reports) and as figures (for comparison).
#[derive(Clone, Debug)]
pub struct Outcome {
    pub kind: Kind,
    /// The enveloped result document.
    pub document: serde_json::Value,
    pub figures: Vec<Figure>,
    /// The run's own verdict on background load.
    pub noisy: bool,
}

/// An experiment with its settings fixed, runnable without knowing its types.
pub trait Runnable {
    fn kind(&self) -> Kind;
    fn run(&self, machine: &Machine, progress: &Progress) -> Result<Outcome>;
}

/// An experiment and the settings to run it with.
pub struct Configured<E: Experiment> {
    pub settings: E::Settings,
}

impl<E: Experiment> Configured<E> {
    pub fn new(settings: E::Settings) -> Self {
        Self { settings }
    }
}

impl<E: Experiment> Runnable for Configured<E> {
    fn kind(&self) -> Kind {
        E::KIND
    }

    fn run(&self, machine: &Machine, progress: &Progress) -> Result<Outcome> {
        let report = E::run(machine, &self.settings, progress)?;
        Ok(Outcome {
            kind: E::KIND,
            noisy: E::conditions(&report).noisy,
            figures: E::figures(&report),
            document: serde_json::to_value(Envelope::new(E::KIND, &report))?,
        })
    }
}
