//! `cpulab completions SHELL`: a completion script for bash, zsh, fish, elvish or PowerShell,
//! generated from the same clap definitions as `--help`, so the two cannot drift apart.

use anyhow::{Context, Result};
use std::io::Write;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab completions bash > ~/.local/share/bash-completion/completions/cpulab\n  \
    cpulab completions zsh > ~/.zfunc/_cpulab\n  \
    cpulab completions fish > ~/.config/fish/completions/cpulab.fish\n\n\
    See docs/completions.md for where each shell looks.")]
pub struct Args {
    /// The shell to write the script for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Prints the script for `cmd` (the whole cpulab command line) on stdout.
pub fn run(args: Args, mut cmd: clap::Command) -> Result<()> {
    // Generated into memory first: clap_complete panics on a failed write, and a closed pipe
    // (`cpulab completions bash | head`) must stay an ordinary, silent end.
    let mut script = Vec::new();
    let name = cmd.get_name().to_string();
    clap_complete::generate(args.shell, &mut cmd, name, &mut script);
    let mut out = std::io::stdout().lock();
    out.write_all(&script)
        .and_then(|()| out.flush())
        .context("cannot write the completion script to stdout")
}
