//! Where a result goes: the one output path of every command.
//!
//! A command that has a result builds an [`Emitter`] from its output flags ([`OutputArgs`],
//! flattened into its clap `Args`) *before* it measures, so a file that cannot be written is
//! refused in one line (exit 2) before minutes are spent; once the result exists it hands it
//! to [`Emitter::emit`] as one [`Emitted`]: the enveloped JSON document and the result's own
//! text and page renderers. Every sink then writes it at once, one after the other, and a sink
//! that fails does not stop the others (a closed stdout still leaves the HTML file and the
//! history written).
//!
//! The model is hyperfine's `export` module: one [`Sink`] trait, one file per format
//! ([`text`], [`json`], [`html`]: each turns the result into a string and does no I/O), one
//! file for the files ([`file`]: checked before the run, rescued to a temporary file when the
//! write fails at the end) and several sinks at once. The history is one more sink, handed
//! down by the dispatcher (`cli.rs`, above the commands) as `also`; it never fails the command.
//!
//! Errors: a file that cannot be written is one line naming the path, exit 2.

mod args;
mod file;
mod html;
mod json;
mod text;

pub use args::{JsonArg, OutputArgs};
pub use file::{check_writable, protect, write_file};

use crate::report::envelope::{Envelope, Kind};
use anyhow::Result;
use serde::Serialize;
use std::path::PathBuf;

/// One result, ready for every sink: its kind, its enveloped JSON document, and its renderers
/// (called only by the sinks that need them).
pub struct Emitted<'a> {
    pub kind: Kind,
    /// The result in its envelope (`cpulab_schema`, `kind`): what `--json` prints and the
    /// history stores.
    pub document: serde_json::Value,
    text: Box<dyn Fn() -> String + 'a>,
    page: Option<Box<dyn Fn() -> String + 'a>>,
}

impl<'a> Emitted<'a> {
    /// A typed result with its text renderer and, when it has one, its HTML page.
    pub fn new<T: Serialize>(
        kind: Kind,
        result: &'a T,
        text: fn(&T) -> String,
        page: Option<fn(&T) -> String>,
    ) -> Result<Self> {
        let document = serde_json::to_value(Envelope::new(kind, result))?;
        Ok(Self::with_document(kind, document, result, text, page))
    }

    /// A typed output that is not a result document, so it carries no envelope (the history's
    /// listings: `cpulab history list --json` is `{"history", "runs"}`), with its text renderer
    /// and, when it has one, its HTML page.
    pub fn bare<T: Serialize>(
        kind: Kind,
        result: &'a T,
        text: fn(&T) -> String,
        page: Option<fn(&T) -> String>,
    ) -> Result<Self> {
        let document = serde_json::to_value(result)?;
        Ok(Self::with_document(kind, document, result, text, page))
    }

    fn with_document<T>(
        kind: Kind,
        document: serde_json::Value,
        result: &'a T,
        text: fn(&T) -> String,
        page: Option<fn(&T) -> String>,
    ) -> Self {
        Self {
            kind,
            document,
            text: Box::new(move || text(result)),
            page: page.map(|p| Box::new(move || p(result)) as Box<dyn Fn() -> String + 'a>),
        }
    }

    /// A result already rendered: a loaded document (`cpulab report`), or one whose text
    /// depends on flags (`compare --all`).
    pub fn rendered(
        kind: Kind,
        document: serde_json::Value,
        text: String,
        page: Option<String>,
    ) -> Self {
        Self {
            kind,
            document,
            text: Box::new(move || text.clone()),
            page: page.map(|p| Box::new(move || p.clone()) as Box<dyn Fn() -> String + 'a>),
        }
    }
}

/// Somewhere a result is written.
pub trait Sink {
    /// Writes the result. An error is the command's (one line naming what failed); a sink that
    /// must never cost the result (the history) warns and returns `Ok`.
    fn write(&self, result: &Emitted) -> Result<()>;
}

/// The formats a result is written in, one file each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The result's own text for the terminal.
    Text,
    /// The enveloped document, pretty JSON.
    Json,
    /// The result's self-contained HTML page.
    Html,
}

impl Format {
    fn render(self, result: &Emitted) -> Result<String> {
        match self {
            Format::Text => Ok(text::render(result)),
            Format::Json => json::render(result),
            Format::Html => html::render(result),
        }
    }
}

/// Where a format goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Stdout,
    /// A file, with the flag that named it (for messages).
    File {
        flag: &'static str,
        path: PathBuf,
    },
}

/// A format written to a target: stdout text, stdout JSON, a JSON or HTML file.
pub struct Export {
    pub format: Format,
    pub target: Target,
    /// No "written to" status line on stderr.
    pub quiet: bool,
}

impl Sink for Export {
    fn write(&self, result: &Emitted) -> Result<()> {
        let content = self.format.render(result)?;
        match &self.target {
            Target::Stdout => crate::output::print_text(&content),
            Target::File { flag, path } => {
                write_file(flag, path, content.as_bytes())?;
                let what = match self.format {
                    Format::Html => "HTML report",
                    Format::Json => "JSON result",
                    Format::Text => "text report",
                };
                crate::output::status(self.quiet, &format!("{what} written to {}", path.display()));
                Ok(())
            }
        }
    }
}

/// The sinks of one command, in the order they are written: files first (the slowest to
/// redo), then stdout, then the sinks handed down from above (the history).
pub struct Emitter<'a> {
    own: Vec<Export>,
    also: &'a [&'a dyn Sink],
}

impl<'a> Emitter<'a> {
    /// Stdout as `--json` says, the HTML file of `--html` (checked writable now, before
    /// anything is measured), then `also`.
    pub fn new(args: &OutputArgs, quiet: bool, also: &'a [&'a dyn Sink]) -> Result<Self> {
        let mut own = Vec::new();
        if let Some(path) = args.html() {
            check_writable("--html", path)?;
            own.push(Export {
                format: Format::Html,
                target: Target::File {
                    flag: "--html",
                    path: path.to_path_buf(),
                },
                quiet,
            });
        }
        let mut e = Self::stdout(args.json(), quiet, also);
        own.append(&mut e.own);
        e.own = own;
        Ok(e)
    }

    /// Stdout only (JSON or text), then `also`.
    pub fn stdout(json: bool, quiet: bool, also: &'a [&'a dyn Sink]) -> Self {
        let format = if json { Format::Json } else { Format::Text };
        Self {
            own: vec![Export {
                format,
                target: Target::Stdout,
                quiet,
            }],
            also,
        }
    }

    /// Exactly these exports, then `also` (`cpulab report`: the page instead of the text).
    pub fn only(own: Vec<Export>, also: &'a [&'a dyn Sink]) -> Self {
        Self { own, also }
    }

    /// Writes the result to every sink in order. A sink that fails does not stop the next one:
    /// the first failure is returned once all have had their turn.
    pub fn emit(&self, result: &Emitted) -> Result<()> {
        let mut first = None;
        let sinks = self.own.iter().map(|e| e as &dyn Sink);
        for sink in sinks.chain(self.also.iter().copied()) {
            if let Err(e) = sink.write(result) {
                first.get_or_insert(e);
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[derive(Serialize)]
    struct Fake {
        figure: u32,
    }

    struct Collect(RefCell<Vec<serde_json::Value>>);

    impl Sink for Collect {
        fn write(&self, r: &Emitted) -> Result<()> {
            self.0.borrow_mut().push(r.document.clone());
            Ok(())
        }
    }

    fn fake_text(f: &Fake) -> String {
        format!("figure {}\n", f.figure)
    }

    fn fake_page(f: &Fake) -> String {
        format!("<p>{}</p>", f.figure)
    }

    #[test]
    fn every_sink_gets_the_result_even_after_one_fails() {
        let dir = tempfile::tempdir().unwrap();
        let page = dir.path().join("page.html");
        let json = dir.path().join("r.json");
        let collect = Collect(RefCell::new(Vec::new()));
        let also: [&dyn Sink; 1] = [&collect];
        let missing = dir.path().join("gone/x.html");
        let exports = vec![
            Export {
                format: Format::Html,
                target: Target::File {
                    flag: "--html",
                    path: missing.clone(),
                },
                quiet: true,
            },
            Export {
                format: Format::Html,
                target: Target::File {
                    flag: "--html",
                    path: page.clone(),
                },
                quiet: true,
            },
            Export {
                format: Format::Json,
                target: Target::File {
                    flag: "--output",
                    path: json.clone(),
                },
                quiet: true,
            },
        ];
        let fake = Fake { figure: 7 };
        let r = Emitted::new(Kind::Probe, &fake, fake_text, Some(fake_page)).unwrap();
        let e = Emitter::only(exports, &also).emit(&r).unwrap_err();
        // The failure names the path and is bad input (exit 2); the sinks after it were written.
        assert_eq!(crate::error::exit_code(&e), 2);
        let msg = format!("{e:#}");
        assert!(msg.contains(&missing.display().to_string()), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
        // The rescued copy is in the temporary directory, named in the message.
        let saved = msg
            .rsplit("saved to ")
            .next()
            .unwrap()
            .split(' ')
            .next()
            .unwrap();
        assert_eq!(std::fs::read_to_string(saved).unwrap(), "<p>7</p>");
        std::fs::remove_file(saved).unwrap();
        assert_eq!(std::fs::read_to_string(&page).unwrap(), "<p>7</p>");
        let written: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(written["kind"], "probe");
        assert_eq!(written["figure"], 7);
        assert_eq!(collect.0.borrow().as_slice(), &[written]);
    }

    #[test]
    fn a_result_without_a_page_refuses_html_in_one_line() {
        let fake = Fake { figure: 1 };
        let r = Emitted::new(Kind::Sim, &fake, fake_text, None).unwrap();
        let e = Format::Html.render(&r).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert_eq!(Format::Text.render(&r).unwrap(), "figure 1\n");
        assert!(Format::Json.render(&r).unwrap().ends_with("}\n"));
    }

    #[test]
    fn an_unwritable_html_path_is_refused_before_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let args = OutputArgs {
            stdout: JsonArg { json: true },
            html: Some(dir.path().join("missing/x.html")),
        };
        let e = Emitter::new(&args, true, &[]).err().unwrap();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(format!("{e:#}").contains("does not exist"), "{e:#}");
        let args = OutputArgs {
            stdout: JsonArg { json: false },
            html: Some(dir.path().to_path_buf()),
        };
        let e = Emitter::new(&args, true, &[]).err().unwrap();
        assert!(format!("{e:#}").contains("is a directory"), "{e:#}");
    }
}
