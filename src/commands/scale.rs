//! `cpulab scale` (not yet built).

use crate::cli::Global;
use anyhow::Result;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// One JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(_args: Args, _g: &Global) -> Result<()> {
    anyhow::bail!("`cpulab scale` is not built yet")
}
