//! Writing results: one JSON document on stdout with `--json`, human text otherwise, colour
//! only on a terminal and never with `NO_COLOR`.

use anyhow::Result;
use serde::Serialize;
use std::io::{IsTerminal, Write};

/// Whether to colour stdout: a terminal, and `NO_COLOR` unset (https://no-color.org).
pub fn color_enabled() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stdout().is_terminal()
}

/// Whether stderr is a terminal (progress bars and live status go there).
pub fn stderr_is_terminal() -> bool {
    std::io::stderr().is_terminal()
}

/// Writes `value` as pretty JSON on stdout, with a final newline.
pub fn print_json<T: Serialize>(value: &T) -> Result<()> {
    // Serialise first, then write: a closed pipe then surfaces as an io::Error, which `main`
    // recognises, rather than inside a serde_json::Error.
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Writes text on stdout. A closed pipe comes back as an error that `main` treats as success.
pub fn print_text(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Where a command cpulab starts and does not read writes its standard output: cpulab's
/// stderr, so that stdout carries only cpulab's own result (with `--json`, exactly one
/// document) whatever the command prints. A command whose output cpulab reads for a figure
/// (pair's clients, `try --measure cmd:`) is captured instead and never reaches stdout either.
pub fn started_command_stdout() -> std::io::Result<std::process::Stdio> {
    use std::os::fd::AsFd;
    Ok(std::io::stderr().as_fd().try_clone_to_owned()?.into())
}

/// A status line on stderr (progress, warnings) unless quiet.
pub fn status(quiet: bool, msg: &str) {
    if !quiet {
        eprintln!("{msg}");
    }
}

/// Bold/colour helpers that do nothing when colour is off.
pub struct Style {
    pub on: bool,
}

impl Style {
    pub fn new() -> Self {
        Self {
            on: color_enabled(),
        }
    }
    fn wrap(&self, code: &str, s: &str) -> String {
        if self.on {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    pub fn bold(&self, s: &str) -> String {
        self.wrap("1", s)
    }
    pub fn red(&self, s: &str) -> String {
        self.wrap("31", s)
    }
    pub fn yellow(&self, s: &str) -> String {
        self.wrap("33", s)
    }
    pub fn green(&self, s: &str) -> String {
        self.wrap("32", s)
    }
    pub fn dim(&self, s: &str) -> String {
        self.wrap("2", s)
    }
}

impl Default for Style {
    fn default() -> Self {
        Self::new()
    }
}

pub use crate::units::fmt_ns;

/// How much a progress message matters. The printer decides what each level shows where.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Level {
    /// The step now running: shown on a terminal only, or as a progress bar's message.
    Step,
    /// Something that qualifies the figures: shown unless `--quiet`.
    Note,
    /// Something likely wrong with the figures or the run: shown unless `--quiet`.
    Warning,
}

impl Level {
    /// The prefix a plain-text line of this level carries (`warning: `), empty for a step.
    pub fn prefix(self) -> &'static str {
        match self {
            Self::Step => "",
            Self::Note => "note: ",
            Self::Warning => "warning: ",
        }
    }
}

/// The progress sink every measuring command hands its experiment: warnings and notes go to
/// stderr unless `--quiet`; steps only when stderr is a terminal.
pub fn progress_printer(quiet: bool) -> impl Fn(Level, &str) {
    let show_steps = !quiet && stderr_is_terminal();
    move |level: Level, msg: &str| match level {
        Level::Step if show_steps => eprintln!("{msg}"),
        Level::Step => {}
        Level::Note | Level::Warning => status(quiet, &format!("{}{msg}", level.prefix())),
    }
}
