//! `cpulab manpages DIR` (hidden): writes `cpulab.1` and one `cpulab-<command>.1` per visible
//! subcommand, generated from the same clap definitions as `--help` (for packagers; see
//! docs/completions.md).

use crate::error::bad_input;
use anyhow::{Context, Result};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab manpages target/man\n  \
    man -l target/man/cpulab-doctor.1\n  \
    cpulab manpages /usr/local/share/man/man1")]
pub struct Args {
    /// Directory to write the pages into (created if missing).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

/// Writes the pages for `cmd` (the whole cpulab command line) into `args.dir`.
pub fn run(args: Args, cmd: clap::Command, quiet: bool) -> Result<()> {
    let dir = &args.dir;
    if dir.exists() && !dir.is_dir() {
        return Err(bad_input(format!(
            "{} is not a directory; pass a directory for the man pages",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the directory {}", dir.display()))?;
    clap_mangen::generate_to(cmd, dir)
        .with_context(|| format!("cannot write the man pages into {}", dir.display()))?;
    crate::output::status(quiet, &format!("man pages written to {}", dir.display()));
    Ok(())
}
