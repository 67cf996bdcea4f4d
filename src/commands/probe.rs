//! `cpulab probe`: the machine fingerprint, as a page or one JSON document.
//!
//! The only input is the hidden `--root`, which must look like a machine's root (it has
//! `sys/devices/system/cpu/online`); anything else is bad input, exit 2, before reading starts.

use super::Global;
use crate::emit::{Emitted, Emitter, Sink};
use crate::machine::Machine;
use crate::output::{Style, print_text};
use crate::probe;
use crate::report::envelope::Kind;
use anyhow::Result;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab probe\n  \
    cpulab probe --json > probe.json\n  \
    cpulab probe --json | jq .topology.matrix")]
pub struct Args {
    /// `--json`, `--html FILE`.
    #[command(flatten)]
    pub output: crate::emit::OutputArgs,
    /// Print this CPU's CPUID leaves in the fixture format (`cpuid.txt`) and exit.
    #[arg(long, hide = true)]
    pub cpuid_dump: bool,
}

pub fn run(args: Args, g: &Global, also: &[&dyn Sink]) -> Result<()> {
    if args.cpuid_dump {
        return match probe::cpuid::live_dump() {
            probe::Reading::Value(text) => print_text(&text),
            r => anyhow::bail!("{}", r.show(|_| String::new())),
        };
    }
    g.machine_root()?;
    let emitter = Emitter::new(&args.output, g.quiet, also)?;
    let machine = Machine::detect(&g.root)?;
    let p = probe::probe(&machine);
    emitter.emit(&Emitted::new(
        Kind::Probe,
        &p,
        |p| probe::render(p, &Style::new()),
        Some(probe::page),
    )?)
}
