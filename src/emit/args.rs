//! The output flags every result command shares, declared once and flattened into each
//! command's clap `Args` (`#[command(flatten)]`), so `--json` and `--html` mean the same
//! everywhere and `--help` still lists them with the command's other flags.

use std::path::{Path, PathBuf};

/// `--json`: the one flag of a command whose result has no HTML page (`compare`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct JsonArg {
    /// One JSON document on stdout (the result in its envelope) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `--json` and `--html FILE`: the output flags of a command whose result has a page.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct OutputArgs {
    #[command(flatten)]
    pub stdout: JsonArg,
    /// Also write the result as a self-contained HTML page to FILE.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

impl OutputArgs {
    /// Whether stdout gets one JSON document instead of text.
    pub fn json(&self) -> bool {
        self.stdout.json
    }

    /// The HTML page's file, when asked for.
    pub fn html(&self) -> Option<&Path> {
        self.html.as_deref()
    }
}
