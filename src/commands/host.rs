//! `cpulab host`: the hypervisor side. `cpulab host bench` measures this machine's KVM with
//! guests cpulab brings (`crate::host::bench`).

use super::Global;
use crate::emit::{Emitted, Emitter, Sink};
use crate::experiment::{Experiment, Progress};
use crate::host::HostBench;
use crate::host::bench::settings;
use crate::machine::Machine;
use crate::output::{self, Style};
use anyhow::Result;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab host bench\n  \
    cpulab host bench --parts exchange --json > host-bench.json")]
pub struct Args {
    #[command(subcommand)]
    pub command: HostCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum HostCommand {
    /// Measure this machine's KVM with VMs of cpulab's own: halt, spin and polling ping-pong
    /// per placement of their vCPU threads, the VM's halt-poll limit swept, two VMs sharing
    /// CPUs. Needs /dev/kvm (root or the kvm group); changes nothing on the host.
    Bench(settings::Args),
}

pub fn run(args: Args, g: &Global, also: &[&dyn Sink]) -> Result<()> {
    match args.command {
        HostCommand::Bench(a) => bench(a, g, also),
    }
}

fn bench(a: settings::Args, g: &Global, also: &[&dyn Sink]) -> Result<()> {
    let mut machine = Machine::detect(&g.root)?;
    if let Some(text) = &a.cpus {
        machine.restrict_to(text)?;
    }
    let s = settings::settings(&a, &machine)?;
    // Refused before anything runs: no /dev/kvm, no permission, no irqchip or x2APIC.
    crate::vmm::Access::open()?;
    let emitter = Emitter::new(&a.output, g.quiet, also)?;
    let printer = output::progress_printer(g.quiet);
    let report = HostBench::run(&machine, &s, &Progress::new(&printer))?;
    emitter.emit(&Emitted::new(
        <HostBench as Experiment>::KIND,
        &report,
        |r| HostBench::render_text(r, &Style::new()),
        Some(HostBench::render_html),
    )?)
}
