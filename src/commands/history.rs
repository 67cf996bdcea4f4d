//! `cpulab history`: flags -> validated settings -> [`crate::history::actions`], where each
//! subcommand's work is; every output leaves through one [`Emitter`]. See [`crate::history`]
//! for the store and the method.

use super::Global;
use crate::emit::{Emitter, Export, Format, OutputArgs, Target};
use crate::error::bad_input;
use crate::history::actions;
use crate::history::check::Settings;
use crate::history::store::Filter;
use crate::history::when;
use crate::report::envelope::Kind;
use anyhow::Result;
use std::path::PathBuf;

/// `--json` and `--html FILE` are declared once, here, and hold for every subcommand (global),
/// so `cpulab history list --json` reads as before; a subcommand refuses the one it has no
/// output for.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  \
    cpulab history list --kind doctor --since 7d\n  \
    cpulab history diff 11 12\n  \
    cpulab history check --threshold 5\n  \
    cpulab history report --html history.html",
    mut_arg("json", |a| a.global(true)),
    mut_arg("html", |a| a.global(true))
)]
pub struct Args {
    /// `--json` (list, show, diff, check), `--html FILE` (report).
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(subcommand)]
    pub action: Action,
}

/// Which runs (list, export, prune, report).
#[derive(Debug, Clone, clap::Args)]
pub struct Which {
    /// Only runs of this kind (`doctor`, `pingpong`, ...).
    #[arg(long)]
    pub kind: Option<String>,
    /// Only runs of this host (its host name).
    #[arg(long)]
    pub host: Option<String>,
    /// Only runs at or after TIME: Unix seconds, `YYYY-MM-DD[THH:MM]` (UTC) or an age (`7d`, `36h`).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Only runs at or before TIME (same forms as --since).
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// List runs, oldest first.
    List {
        #[command(flatten)]
        which: Which,
    },
    /// One run: its command line, fingerprint facts and figures (`--json`: with its document).
    Show { id: String },
    /// Two runs figure by figure (as `compare`), and the fingerprint facts that differ.
    Diff {
        a: String,
        b: String,
        /// Also list the plain numbers that have no samples and are not judged.
        #[arg(long)]
        all: bool,
    },
    /// Test the newest run of each kind against the earlier runs on the same hardware, and name
    /// the facts that changed with each change. Exit 1 on a regression beyond the threshold.
    Check {
        /// Only this kind.
        #[arg(long)]
        kind: Option<String>,
        /// Runs in each series, the newest included.
        #[arg(long, default_value_t = 20, value_name = "N")]
        window: usize,
        /// The minimum effect, in percent (0 to 1000): smaller moves are never a change.
        #[arg(long, default_value_t = 5.0, value_name = "PCT")]
        threshold: f64,
    },
    /// Every figure over time as a page (`--html FILE`): change points marked, the facts that
    /// changed beside them.
    Report {
        #[command(flatten)]
        which: Which,
        /// The minimum effect of a change point, in percent (0 to 1000).
        #[arg(long, default_value_t = 5.0, value_name = "PCT")]
        threshold: f64,
    },
    /// Write runs as JSON Lines on stdout (one object per run, its document inside).
    Export {
        #[command(flatten)]
        which: Which,
    },
    /// Record result files written by `--json` (or lines of `history export`).
    Import {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Delete runs: all but the newest N of each kind and hardware, or those before a time.
    Prune {
        /// Keep the newest N runs of each kind on each hardware key.
        #[arg(long, value_name = "N")]
        keep: Option<usize>,
        /// Delete runs before TIME (same forms as list --since).
        #[arg(long, value_name = "TIME")]
        before: Option<String>,
        /// Say what would go, delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Now, whole seconds since the Unix epoch.
fn now() -> i64 {
    crate::history::when::now_unix_s() as i64
}

fn time_flag(flag: &str, v: &Option<String>) -> Result<Option<i64>> {
    v.as_deref()
        .map(|t| {
            when::parse(t, now()).ok_or_else(|| {
                bad_input(format!(
                    "{flag} {t}: not a time; give Unix seconds, 2026-11-25, 2026-11-25T17:30 (UTC) or an age like 7d"
                ))
            })
        })
        .transpose()
}

/// A `--kind` value: a kind cpulab writes results of, else one line with the kinds to give (a
/// misspelt kind matched nothing and listed an empty history).
fn kind_flag(kind: &Option<String>) -> Result<Option<String>> {
    let Some(k) = kind else {
        return Ok(None);
    };
    let registered = crate::registry::kinds();
    if Kind::parse(k.trim(), &registered).is_some() {
        return Ok(Some(k.trim().to_string()));
    }
    let mut names: Vec<&str> = Vec::new();
    for k in registered.iter().chain(&[Kind::Doctor, Kind::Try]) {
        if !names.contains(&k.as_str()) {
            names.push(k.as_str());
        }
    }
    Err(bad_input(format!(
        "--kind `{k}` is no kind of result; give one of {} (`cpulab history list` shows them)",
        names.join(", ")
    )))
}

impl Which {
    fn filter(&self) -> Result<Filter> {
        if self.host.as_deref().is_some_and(|h| h.trim().is_empty()) {
            return Err(bad_input(
                "--host is empty; give a host name as `cpulab history list` shows it, or leave out --host",
            ));
        }
        let since = time_flag("--since", &self.since)?;
        let until = time_flag("--until", &self.until)?;
        if let Some(why) = when::empty_window(since, until, now()) {
            return Err(bad_input(why));
        }
        Ok(Filter {
            kind: kind_flag(&self.kind)?,
            host: self.host.clone(),
            hardware_key: None,
            since_unix_s: since,
            until_unix_s: until,
        })
    }
}

impl Action {
    fn name(&self) -> &'static str {
        match self {
            Action::List { .. } => "list",
            Action::Show { .. } => "show",
            Action::Diff { .. } => "diff",
            Action::Check { .. } => "check",
            Action::Report { .. } => "report",
            Action::Export { .. } => "export",
            Action::Import { .. } => "import",
            Action::Prune { .. } => "prune",
        }
    }
}

/// The output of `action`: stdout as `--json` says, or (report) the page; a flag the
/// subcommand has no output for is one line, exit 2.
fn emitter(output: &OutputArgs, action: &Action, quiet: bool) -> Result<Emitter<'static>> {
    let name = action.name();
    let has_json = matches!(
        action,
        Action::List { .. } | Action::Show { .. } | Action::Diff { .. } | Action::Check { .. }
    );
    if output.json() && !has_json {
        return Err(bad_input(format!(
            "--json: `cpulab history {name}` has no JSON output; leave out --json"
        )));
    }
    match (action, output.html()) {
        (Action::Report { .. }, Some(path)) => {
            crate::emit::check_writable("--html", path)?;
            Ok(Emitter::only(
                vec![Export {
                    format: Format::Html,
                    target: Target::File {
                        flag: "--html",
                        path: path.to_path_buf(),
                    },
                    quiet,
                }],
                &[],
            ))
        }
        (Action::Report { .. }, None) => Err(bad_input(
            "`cpulab history report` writes a page: give --html FILE",
        )),
        (_, Some(_)) => Err(bad_input(format!(
            "--html: `cpulab history {name}` has no HTML page; leave out --html"
        ))),
        // The history's own listings are not runs: nothing is handed down to record them.
        (_, None) => Ok(Emitter::stdout(output.json(), quiet, &[])),
    }
}

pub fn run(args: Args, g: &Global) -> Result<()> {
    let out = emitter(&args.output, &args.action, g.quiet)?;
    match args.action {
        Action::List { which } => actions::list(&which.filter()?, &out),
        Action::Show { id } => actions::show(actions::parse_id(&id)?, &out),
        Action::Diff { a, b, all } => {
            let (a, b) = (actions::parse_id(&a)?, actions::parse_id(&b)?);
            actions::diff(a, b, all, &out)
        }
        Action::Check {
            kind,
            window,
            threshold,
        } => {
            if window < 3 {
                return Err(bad_input(format!(
                    "--window {window}: a change needs at least 2 earlier runs; give 3 or more"
                )));
            }
            let settings = Settings {
                window,
                threshold_pct: crate::units::flag_percent("threshold", threshold)?,
            };
            actions::check(kind_flag(&kind)?.as_deref(), &settings, &out)
        }
        Action::Report { which, threshold } => {
            let threshold = crate::units::flag_percent("threshold", threshold)?;
            actions::report(&which.filter()?, threshold, g.quiet, &out)
        }
        Action::Export { which } => actions::export(&which.filter()?, &out),
        Action::Import { files } => actions::import(&files, g.quiet),
        Action::Prune {
            keep,
            before,
            dry_run,
        } => {
            if keep.is_none() && before.is_none() {
                return Err(bad_input(
                    "prune needs --keep N or --before TIME; nothing was deleted",
                ));
            }
            if keep == Some(0) {
                return Err(bad_input(
                    "--keep 0 would delete every run; give 1 or more (to empty the history, delete its file)",
                ));
            }
            let before = time_flag("--before", &before)?;
            if let Some(t) = before
                && t > now()
            {
                return Err(bad_input(format!(
                    "--before {} is in the future, so every run would go; give a time in the past, such as 30d",
                    when::utc(t)
                )));
            }
            actions::prune(before, keep, dry_run, g.quiet, &out)
        }
    }
}
