//! Experiments without their types: what a registry stores of each and what runs one chosen at
//! run time.
//!
//! [`Entry`] holds, as plain functions, what `report`, `compare`, the command line and
//! `try --measure` need of one kind of result; [`entry`] builds it from any [`Listed`] result
//! (every [`Command`] is one). [`Runnable`] is an experiment with its settings fixed,
//! which `try` runs each round without knowing which one it is. The list of entries itself is
//! `crate::registry`, above everything it lists; this module imports none of them.

use super::{Command, Experiment, Figure, Level, Progress};
use crate::emit::{Emitted, Emitter, Sink};
use crate::error::bad_input;
use crate::machine::Machine;
use crate::output::{self, Style};
use crate::report::envelope::{Envelope, Kind};
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
    /// Runs it from parsed flags (`root` and `quiet` are the global options) and emits the
    /// result to its output flags' sinks and to `also`, the sinks handed down by the command
    /// layer (the history), which stands above this module.
    pub run: fn(&clap::ArgMatches, &Path, bool, &[&dyn Sink]) -> Result<()>,
    /// `try --measure NAME:FLAGS`: the flags (without the name) parsed and validated into
    /// something to run each round.
    pub measure: MeasureFn,
    /// [`Command::ORDERLY_INTERRUPT`]: the dispatcher installs the signal handlers first.
    pub orderly_interrupt: bool,
}

/// Flags (without the name) -> an experiment ready to run each round.
pub type MeasureFn = fn(&[String], &Machine) -> Result<Box<dyn Runnable>>;

/// A kind of result as the registry lists it: its kind, how a saved document of it is rendered
/// and read into typed figures, and its subcommand when the registry builds one.
///
/// Every experiment that is a [`Command`] is listed as it is (the impl below); the other
/// results (the doctor's, the probe's, sim's, try's) implement it beside their types. The
/// registry builds every entry the one way, [`entry`].
pub trait Listed {
    const KIND: Kind;
    /// Text and HTML of a loaded document (envelope included).
    fn render_document(doc: &serde_json::Value, style: &Style) -> Result<(String, String)>;
    /// The typed figures of a loaded document.
    fn figures_of_document(doc: &serde_json::Value) -> Result<Vec<Figure>>;
    /// `cpulab NAME` built from the registry: an experiment's own subcommand. `None` for a
    /// result whose command is built in (`cpulab doctor`, `probe`, `sim`, `try`).
    const COMMAND: Option<Subcommand> = None;
}

impl<E: Command> Listed for E
where
    E::Settings: 'static,
{
    const KIND: Kind = <E as Experiment>::KIND;

    fn render_document(doc: &serde_json::Value, style: &Style) -> Result<(String, String)> {
        render_as::<E>(doc, style)
    }

    fn figures_of_document(doc: &serde_json::Value) -> Result<Vec<Figure>> {
        figures_as::<E>(doc)
    }

    const COMMAND: Option<Subcommand> = Some(Subcommand {
        clap: clap_of::<E>,
        run: run_command::<E>,
        measure: measure_of::<E>,
        orderly_interrupt: E::ORDERLY_INTERRUPT,
    });
}

/// The registry's entry of one listed result.
pub const fn entry<L: Listed>() -> Entry {
    Entry {
        kind: L::KIND,
        render: L::render_document,
        figures: L::figures_of_document,
        command: L::COMMAND,
    }
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

fn run_command<E: Command>(
    m: &clap::ArgMatches,
    root: &Path,
    quiet: bool,
    also: &[&dyn Sink],
) -> Result<()>
where
    E::Settings: 'static,
{
    let args = parse_args::<E>(m)?;
    let mut machine = Machine::detect(root)?;
    if let Some(text) = E::cpus(&args) {
        machine.restrict_to(text)?;
    }
    let settings = E::settings(&args, &machine)?;
    let emitter = Emitter::new(E::output(&args), quiet, also)?;
    let printer = output::progress_printer(quiet);
    let always = |level: Level, m: &str| {
        output::status(quiet, &format!("cpulab {}: {}{m}", E::NAME, level.prefix()))
    };
    let sink: &dyn Fn(Level, &str) = if E::STEPS_ALWAYS { &always } else { &printer };
    let report = match E::run(&machine, &settings, &Progress::new(sink)) {
        Ok(r) => r,
        Err(e) => {
            // Everything has been torn down by now; report the signal as a shell would.
            if let Some(i) = e.downcast_ref::<crate::signals::Interrupted>() {
                eprintln!("cpulab: {i}");
                std::process::exit(i.exit_code());
            }
            return Err(e);
        }
    };
    emitter.emit(&Emitted::new(
        E::KIND,
        &report,
        |r| E::render_text(r, &Style::new()),
        Some(E::render_html),
    )?)?;
    // After the result, so a script gets both the report and the command's own status.
    match E::passed_on(&report) {
        Some(p) => Err(anyhow::Error::new(p)),
        None => Ok(()),
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
    serde_json::from_value(doc.clone())
        .map(E::read_back)
        .map_err(|e| {
            bad_input(format!(
                "this {} result does not match its schema ({e}); write it again with `cpulab {} --json`",
                E::KIND,
                E::KIND
            ))
        })
}

/// A saved document of experiment `E` rendered by its own renderers (for [`Listed`]).
pub fn render_as<E: Experiment>(
    doc: &serde_json::Value,
    style: &Style,
) -> Result<(String, String)> {
    let r = typed::<E>(doc)?;
    Ok((E::render_text(&r, style), E::render_html(&r)))
}

/// The typed figures of a saved document of experiment `E` (for [`Listed`]).
pub fn figures_as<E: Experiment>(doc: &serde_json::Value) -> Result<Vec<Figure>> {
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

/// The experiments a name can choose at run time (`try --measure NAME:FLAGS`). The list is the
/// registry's, which stands above `trial`; the command layer hands it down as this.
pub trait Catalogue {
    /// NAME's flags parsed and validated into something to run each round; `None` when NAME is
    /// not an experiment here.
    fn measure(
        &self,
        name: &str,
        flags: &[String],
        machine: &Machine,
    ) -> Option<Result<Box<dyn Runnable>>>;

    /// The names [`Catalogue::measure`] knows, in the order a message lists them.
    fn names(&self) -> Vec<&'static str>;
}
