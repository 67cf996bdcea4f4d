//! The one list of experiments.
//!
//! Everything that needs "any experiment" by kind or by name reads it from here: `cpulab report`
//! renders a loaded document with its kind's own renderer, `compare` and `try` read a result's
//! typed [`Figure`]s, `try --measure` runs an experiment chosen at run time, and an experiment
//! that implements [`super::Command`] is also a subcommand built from here.
//!
//! Adding an experiment is one new module (its `Experiment` and `Command`, with
//! `const KIND: Kind = Kind::Experiment("name")`) plus one line in [`ENTRIES`]:
//! `command::<crate::name::Name>()`. Its kind is then known to `report` and `compare` (which
//! read a document into its typed result, so a wrong shape is bad input), its subcommand, help, completions and man page
//! exist, and `try --measure name:FLAGS` runs it.

use super::{Command, Experiment, Figure, Progress};
use crate::error::bad_input;
use crate::machine::Machine;
use crate::output::{self, Style};
use crate::report::envelope::{self, Envelope, Kind, Loaded};
use anyhow::Result;
use std::path::Path;

/// What the registry knows of one kind of result, without its types.
pub struct Entry {
    pub kind: Kind,
    /// Text and HTML of a loaded document (envelope included).
    pub render: fn(&serde_json::Value, &Style) -> Result<(String, String)>,
    /// The typed figures of a loaded document.
    pub figures: fn(&serde_json::Value) -> Result<Vec<Figure>>,
    /// The subcommand, when the experiment is one of [`Command`]'s.
    pub command: Option<Subcommand>,
}

/// An experiment's subcommand, without its types.
pub struct Subcommand {
    /// The clap definition: flags, help, examples.
    pub clap: fn() -> clap::Command,
    /// Runs it from parsed flags: `root` and `quiet` are the global options.
    pub run: fn(&clap::ArgMatches, &Path, bool) -> Result<()>,
    /// `try --measure NAME:FLAGS`: the flags (without the name) parsed and validated into
    /// something to run each round.
    pub measure: MeasureFn,
}

/// Flags (without the name) -> an experiment ready to run each round.
pub type MeasureFn = fn(&[String], &Machine) -> Result<Box<dyn Runnable>>;

/// Builds the entry of one experiment.
pub const fn entry<E: Experiment>() -> Entry {
    Entry {
        kind: E::KIND,
        render: render_as::<E>,
        figures: figures_as::<E>,
        command: None,
    }
}

/// Builds the entry of an experiment that is also a subcommand.
pub const fn command<E: Command>() -> Entry
where
    E::Settings: 'static,
{
    Entry {
        kind: E::KIND,
        render: render_as::<E>,
        figures: figures_as::<E>,
        command: Some(Subcommand {
            clap: clap_of::<E>,
            run: run_command::<E>,
            measure: measure_of::<E>,
        }),
    }
}

/// Every experiment whose results cpulab can load, render and compare.
pub const ENTRIES: &[Entry] = &[
    entry::<crate::pingpong::Pingpong>(),
    entry::<crate::pair::Pair>(),
    entry::<crate::share::Share>(),
    entry::<crate::scale::Scale>(),
    entry::<crate::oscost::Oscost>(),
    command::<crate::watch::Watch>(),
    // A model, not an experiment: its documents are loaded and rendered like the others, and
    // every figure it gives is labelled SIMULATED.
    Entry {
        kind: Kind::Sim,
        render: crate::sim::render::render_document,
        figures: crate::sim::render::figures,
        command: None,
    },
    entry::<crate::trial::Trial>(),
    // Not experiments but results all the same: their typed figures (unit, direction,
    // samples) are what `compare` and the history read, never a walk of the JSON.
    Entry {
        kind: Kind::Doctor,
        render: crate::doctor::measured::render_document,
        figures: crate::doctor::measured::figures_of_document,
        command: None,
    },
    Entry {
        kind: Kind::Probe,
        render: crate::probe::render_document,
        figures: crate::probe::figures_of_document,
        command: None,
    },
    command::<crate::messaging::Messaging>(),
    command::<crate::bursty::Bursty>(),
];

/// The entry for a kind, if it is an experiment's.
pub fn lookup(kind: Kind) -> Option<&'static Entry> {
    ENTRIES.iter().find(|e| e.kind == kind)
}

/// The entry whose subcommand is called `name`.
pub fn command_named(name: &str) -> Option<(&'static Entry, &'static Subcommand)> {
    ENTRIES
        .iter()
        .filter_map(|e| e.command.as_ref().map(|c| (e, c)))
        .find(|(e, _)| e.kind.as_str() == name)
}

/// Every registered kind, for reading documents back.
pub fn kinds() -> Vec<Kind> {
    ENTRIES.iter().map(|e| e.kind).collect()
}

/// Reads a saved result whose kind may be any cpulab kind, registered ones included.
pub fn load(path: &Path) -> Result<Loaded> {
    envelope::load(path, &kinds())
}

fn clap_of<E: Command>() -> clap::Command
where
    E::Settings: 'static,
{
    <E::Args as clap::Args>::augment_args(clap::Command::new(E::NAME)).about(E::ABOUT)
}

fn parse_args<E: Command>(m: &clap::ArgMatches) -> Result<E::Args>
where
    E::Settings: 'static,
{
    <E::Args as clap::FromArgMatches>::from_arg_matches(m)
        .map_err(|e| bad_input(format!("{}: {}", E::NAME, e.to_string().trim())))
}

fn run_command<E: Command>(m: &clap::ArgMatches, root: &Path, quiet: bool) -> Result<()>
where
    E::Settings: 'static,
{
    let args = parse_args::<E>(m)?;
    let machine = Machine::detect(root)?;
    let settings = E::settings(&args, &machine)?;
    let sink = output::progress_printer(quiet);
    let report = E::run(&machine, &settings, &Progress::new(&sink))?;
    if let Some(path) = E::html(&args) {
        std::fs::write(path, E::render_html(&report))
            .map_err(|e| bad_input(format!("cannot write {}: {e}", path.display())))?;
    }
    if E::json(&args) {
        output::print_json(&Envelope::new(E::KIND, &report))
    } else {
        output::print_text(&E::render_text(&report, &Style::new()))
    }
}

fn measure_of<E: Command>(words: &[String], machine: &Machine) -> Result<Box<dyn Runnable>>
where
    E::Settings: 'static,
{
    let m = clap_of::<E>()
        .no_binary_name(true)
        .try_get_matches_from(words)
        .map_err(|e| {
            let first = e.to_string().lines().next().unwrap_or("").to_string();
            bad_input(format!(
                "--measure {}: {}",
                E::NAME,
                first.trim_start_matches("error: ")
            ))
        })?;
    let args = parse_args::<E>(&m)?;
    let settings =
        E::settings(&args, machine).map_err(|e| e.context(format!("--measure {}", E::NAME)))?;
    Ok(Box::new(Configured::<E>::new(settings)))
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

/// Several experiments run one after the other as one measurement (what `cpulab try` measures
/// a scheduler knob or a frequency setting with): their figures side by side, noisy when any
/// part was. Figure names stay distinct because each experiment names its own.
pub struct Sequence(pub Vec<Box<dyn Runnable>>);

impl Runnable for Sequence {
    fn kind(&self) -> Kind {
        self.0.first().map_or(Kind::Try, |r| r.kind())
    }

    fn run(&self, machine: &Machine, progress: &Progress) -> Result<Outcome> {
        let mut parts = Vec::new();
        let (mut figures, mut noisy) = (Vec::new(), false);
        for r in &self.0 {
            let o = r.run(machine, progress)?;
            figures.extend(o.figures);
            noisy |= o.noisy;
            parts.push(o.document);
        }
        Ok(Outcome {
            kind: self.kind(),
            document: serde_json::json!({ "parts": parts }),
            figures,
            noisy,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_kind_is_found_by_its_name_and_its_subcommand() {
        for e in ENTRIES {
            let name = e.kind.as_str();
            assert_eq!(Kind::parse(name, &kinds()), Some(e.kind), "{name}");
            if let Some(c) = &e.command {
                assert_eq!((c.clap)().get_name(), name);
                assert!(command_named(name).is_some());
            }
        }
        // Two kinds never share a name.
        let mut names: Vec<_> = ENTRIES.iter().map(|e| e.kind.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ENTRIES.len());
    }

    #[test]
    fn measure_specs_are_parsed_and_validated_by_the_experiment() {
        let machine = Machine::detect(Path::new("/")).unwrap();
        let (_, messaging) = command_named("messaging").unwrap();
        let words = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert!((messaging.measure)(&words("--groups 2 --repeats 2"), &machine).is_ok());
        for bad in ["--groups 0", "--bogus", "--cpus 1-0"] {
            let e = (messaging.measure)(&words(bad), &machine).err().unwrap();
            assert_eq!(crate::error::exit_code(&e), 2, "{bad}");
            assert!(format!("{e:#}").contains("--measure messaging"), "{e:#}");
        }
    }
}
