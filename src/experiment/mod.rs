//! One interface for every experiment.
//!
//! An experiment is anything that takes validated settings, measures on the live machine and
//! returns one typed result: pingpong, pair, share, scale, oscost, and whatever comes next. The
//! subcommands, the doctor's battery, `cpulab try --measure` and `cpulab report` all go through
//! [`Experiment`], so adding one is one new module plus one line in `crate::registry`.
//!
//! What every experiment shares lives here and nowhere else:
//! - [`Progress`]: the messages a run emits, each with its [`Level`] as data (the printer decides
//!   what a terminal, `--quiet` or a progress bar shows; nothing below it spells "warning:").
//! - [`Figure`]: a headline number with its unit, its [`Direction`] (which way is better), its
//!   95% interval and its raw samples. `try` compares figures round by round, `compare` reads the
//!   direction from here instead of guessing it from a key's spelling.
//! - the text and HTML renderers of each result, beside the experiment, so `cpulab report` renders
//!   every kind it can load with that kind's own renderer.
//! - [`Experiment::run`]: the start of every run (the conditions now, then a watch of the CPUs
//!   [`Experiment::load_watch`] names for other load: warn, record), then
//!   [`Experiment::measure`].
//!
//! [`Level`] is defined with the terminal printer in `output` (the bottom layer, which must not
//! import this one) and re-exported here.

pub mod erased;

use crate::machine::{Conditions, Machine};
use crate::output::Style;
use crate::report::envelope::Kind;
use crate::stats::MeanCi;
use anyhow::Result;
use serde::{Deserialize, Serialize, de::DeserializeOwned};

/// Which way a figure is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// Times, latencies, costs, counts of overhead events.
    LowerIsBetter,
    /// Rates, throughput, shares, speedups.
    HigherIsBetter,
    /// Neither is better (a count of CPUs used, a share of time on one CPU).
    Neither,
}

/// The unit of a figure. Units are data, so a reader never parses them out of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Nanoseconds,
    Seconds,
    PerSecond,
    /// A share of something, 0..1.
    Share,
    /// A ratio of two like figures.
    Ratio,
    /// Events per operation (context switches per round trip, ...).
    PerOperation,
    Count,
    /// CPU-seconds per wall-clock second (0..number of CPUs).
    CpuSecondsPerSecond,
    Megahertz,
    Cycles,
    Bytes,
    /// The unit the figure's label names (a custom metric's own unit, like `ms` or `req`).
    Other,
}

impl Unit {
    /// Short suffix for text output.
    pub fn suffix(self) -> &'static str {
        match self {
            Self::Nanoseconds => "ns",
            Self::Seconds => "s",
            Self::PerSecond => "/s",
            Self::Share => "",
            Self::Ratio => "x",
            Self::PerOperation => "/op",
            Self::Count => "",
            Self::CpuSecondsPerSecond => "CPU-s/s",
            Self::Megahertz => "MHz",
            Self::Cycles => "cycles",
            Self::Bytes => "B",
            Self::Other => "",
        }
    }
}

/// One headline number of a result, typed all the way to the edge.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// Stable identity inside its result: `rtt_ns[method=pipe,placement=same-cpu,cpus=0:0]`.
    /// Two results' figures with the same name measure the same thing.
    pub name: String,
    /// What it is, for people: "pipe round trip, same CPU (0:0)".
    pub label: String,
    pub unit: Unit,
    pub direction: Direction,
    /// The value (the mean where `ci` is present).
    pub value: f64,
    /// Mean and 95% interval over `samples`, where there are at least two.
    pub ci: Option<MeanCi>,
    /// The raw samples behind `value` (batch means, per-repeat figures), for significance tests.
    pub samples: Vec<f64>,
}

impl Figure {
    /// A figure from raw samples; the value is their mean (`None` when there are none or any is
    /// not finite).
    pub fn from_samples(
        name: impl Into<String>,
        label: impl Into<String>,
        unit: Unit,
        direction: Direction,
        samples: Vec<f64>,
    ) -> Option<Self> {
        if samples.is_empty() || samples.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let ci = crate::stats::Samples::new(&samples).map(|s| s.mean_ci());
        let value = samples.iter().sum::<f64>() / samples.len() as f64;
        Some(Self {
            name: name.into(),
            label: label.into(),
            unit,
            direction,
            value,
            ci,
            samples,
        })
    }

    /// A single value without samples (a count, a setting read back).
    pub fn single(
        name: impl Into<String>,
        label: impl Into<String>,
        unit: Unit,
        direction: Direction,
        value: f64,
    ) -> Self {
        Self {
            name: name.into(),
            label: label.into(),
            unit,
            direction,
            value,
            ci: None,
            samples: vec![value],
        }
    }
}

pub use crate::output::Level;

/// Where an experiment reports what it is doing. Cheap to pass by reference; the sink decides
/// where messages go (stderr, a progress bar, a collecting test).
pub struct Progress<'a> {
    sink: &'a dyn Fn(Level, &str),
}

impl<'a> Progress<'a> {
    pub fn new(sink: &'a dyn Fn(Level, &str)) -> Self {
        Self { sink }
    }

    pub fn step(&self, msg: &str) {
        (self.sink)(Level::Step, msg)
    }

    pub fn note(&self, msg: &str) {
        (self.sink)(Level::Note, msg)
    }

    pub fn warn(&self, msg: &str) {
        (self.sink)(Level::Warning, msg)
    }

    pub fn emit(&self, level: Level, msg: &str) {
        (self.sink)(level, msg)
    }
}

/// What the prologue watches for other load before an experiment measures: the CPUs the run
/// will use, for how long, and whether the user asked for the check (`--no-load-check` says
/// not).
#[derive(Clone, Debug, PartialEq)]
pub struct LoadWatch {
    pub cpus: crate::cpulist::CpuSet,
    pub window: std::time::Duration,
    pub enabled: bool,
}

impl LoadWatch {
    /// `cpus`, or the allowed set when the settings name none, watched for `window` when
    /// `enabled`.
    pub fn on(
        machine: &Machine,
        cpus: Option<&crate::cpulist::CpuSet>,
        window: std::time::Duration,
        enabled: bool,
    ) -> Self {
        Self {
            cpus: cpus.unwrap_or(&machine.allowed).clone(),
            window,
            enabled,
        }
    }
}

/// The prologue every experiment runs before measuring: the [`Conditions`] as they are now,
/// then, unless the watch is disabled, its CPUs watched for other load for its window (a
/// warning when there is some, the check recorded in the conditions); otherwise a note in the
/// conditions that no check was made. [`Experiment::run`] calls it; nothing else does.
fn prologue(machine: &Machine, watch: &LoadWatch, progress: &Progress) -> Conditions {
    let mut conditions = Conditions::now(machine);
    if !watch.enabled || watch.cpus.is_empty() {
        conditions.load_not_checked();
        return conditions;
    }
    let cpus = &watch.cpus;
    progress.step(&format!("checking CPUs {cpus} for other load"));
    let check = crate::counters::check_background_load(&machine.root, cpus, watch.window);
    if let (true, Some(r)) = (check.noisy, &check.reason) {
        progress.warn(&format!("{r}; results are marked noisy"));
    }
    conditions.record_load(check);
    conditions
}

/// A sink that drops everything (tests, nested runs whose caller reports progress itself).
pub fn silent(_: Level, _: &str) {}

/// Every experiment: validated settings in, one typed result out, its renderers beside it.
///
/// The start is the same for all and lives in one place, [`Experiment::run`]: settings were
/// validated against the machine when they were made (the subcommand's `settings` function);
/// `run` records the [`Conditions`], checks the CPUs [`Experiment::load_watch`] names for
/// other load, and hands the conditions to [`Experiment::measure`]. An experiment writes the
/// two halves and never `run` (tests/architecture.rs checks that no implementation overrides
/// it).
pub trait Experiment {
    /// Validated settings; nothing below `run` re-validates.
    type Settings;
    /// The result; this struct *is* the JSON schema.
    type Report: Serialize + DeserializeOwned;
    /// Its `kind` in the result envelope.
    const KIND: Kind;

    /// The CPUs the run will use and how long to watch them for other load first; `None` for
    /// an experiment that judges other load its own way (`try` checks every round, `watch`
    /// observes the load itself), whose conditions then carry no prologue check.
    fn load_watch(machine: &Machine, settings: &Self::Settings) -> Result<Option<LoadWatch>>;

    /// Measures on the live machine, under the conditions the prologue recorded.
    fn measure(
        machine: &Machine,
        settings: &Self::Settings,
        conditions: Conditions,
        progress: &Progress,
    ) -> Result<Self::Report>;

    /// The prologue, then the measurement: the one way every experiment starts.
    fn run(
        machine: &Machine,
        settings: &Self::Settings,
        progress: &Progress,
    ) -> Result<Self::Report> {
        let conditions = match Self::load_watch(machine, settings)? {
            Some(w) => prologue(machine, &w, progress),
            None => Conditions::now(machine),
        };
        Self::measure(machine, settings, conditions, progress)
    }

    /// The conditions the result was taken under.
    fn conditions(report: &Self::Report) -> &Conditions;

    /// The figures that summarise the result, each with unit, direction, interval and samples.
    fn figures(report: &Self::Report) -> Vec<Figure>;

    /// A saved report as read back from a file, with what an older build wrote in a form this
    /// one no longer uses put right (a figure it could not measure but wrote as 0 becomes
    /// absent). The default keeps the report as it was read.
    fn read_back(report: Self::Report) -> Self::Report {
        report
    }

    /// Text for the terminal.
    fn render_text(report: &Self::Report, style: &Style) -> String;

    /// A self-contained HTML page.
    fn render_html(report: &Self::Report) -> String;
}

/// An experiment that is its own subcommand, `cpulab NAME`, and a `cpulab try --measure
/// NAME:FLAGS`: its flags and their validation live beside it, and the registry builds the
/// subcommand, its help and man page from them. Listing it with
/// [`erased::entry`] in `crate::registry::ENTRIES` is all the wiring it needs.
pub trait Command: Experiment + Sized + 'static
where
    Self::Settings: 'static,
{
    /// Its flags; their doc comments are the subcommand's help, `#[command(after_help)]` its
    /// examples.
    type Args: clap::Args;
    /// The subcommand's name, also its `--measure` name and its result kind.
    const NAME: &'static str = Self::KIND.as_str();
    /// One line for `cpulab --help`.
    const ABOUT: &'static str;

    /// Flags -> validated settings: every bad value is one line and exit 2 here, nothing below
    /// re-validates.
    fn settings(args: &Self::Args, machine: &Machine) -> Result<Self::Settings>;

    /// Its output flags (`--json`, `--html FILE`), flattened into [`Command::Args`].
    fn output(args: &Self::Args) -> &crate::emit::OutputArgs;

    /// The CPUs the flags restrict the run to (`--cpus LIST`): the machine is narrowed to them
    /// before [`Command::settings`] sees it.
    fn cpus(_args: &Self::Args) -> Option<&str> {
        None
    }

    /// A run that takes minutes shows its steps even when stderr is a log file, each line
    /// prefixed with `cpulab NAME: `; others show steps only on a terminal.
    const STEPS_ALWAYS: bool = false;

    /// Whether `cpulab NAME` takes an interrupt (Ctrl-C, SIGTERM, SIGHUP) in order
    /// ([`crate::signals`]): recorded, every process it started stopped, exit 128 + signal.
    /// True for an experiment that starts servers and clients and checks for the signal while
    /// they run; the dispatcher installs the handlers before the command starts.
    const ORDERLY_INTERRUPT: bool = false;

    /// The exit status `cpulab NAME` passes on once its result is written, when it is not 0:
    /// the status of a command it ran for the user that failed by itself (`watch -- COMMAND`).
    /// `None` (the default): exit 0 after a result.
    fn passed_on(_report: &Self::Report) -> Option<crate::error::PassedOn> {
        None
    }
}
