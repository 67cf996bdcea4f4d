//! `cpulab host`: the hypervisor side. `cpulab host bench` measures this machine's KVM with
//! guests cpulab brings (`crate::host::bench`).

use super::Global;
use crate::emit::{Emitted, Emitter, Sink};
use crate::experiment::{Experiment, Progress};
use crate::host::bench::settings;
use crate::host::{HostBench, HostWatch};
use crate::machine::Machine;
use crate::output::{self, Style};
use anyhow::Result;

#[derive(Debug, clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    after_help = "Examples:\n  \
    cpulab host --duration 10s --bpf-program-costs --json > host.json\n  \
    cpulab host --pid 4242 --expect-absent stacked-vcpus\n  \
    cpulab host bench\n  \
    cpulab host bench --parts exchange --json > host-bench.json"
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<HostCommand>,
    /// Without a subcommand: watch this host's VMs.
    #[command(flatten)]
    pub watch: crate::host::watch::WatchArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum HostCommand {
    /// Measure this machine's KVM with VMs of cpulab's own: halt, spin and polling ping-pong
    /// per placement of their vCPU threads, the VM's halt-poll limit swept, two VMs sharing
    /// CPUs. Needs /dev/kvm (root or the kvm group); changes nothing on the host.
    Bench(settings::Args),
    /// Run one of cpulab's guests until the time is up or cpulab is stopped: a VM to watch
    /// with `cpulab host` (tests, demonstrations). Measures nothing.
    #[command(hide = true)]
    Guest(GuestArgs),
}

#[derive(Debug, clap::Args)]
pub struct GuestArgs {
    /// halt (IPI ping-pong, both vCPUs halting), spin, or burn (busy vCPUs).
    #[arg(long, default_value = "halt")]
    pub program: String,
    /// Busy vCPUs of a burn guest (1 to 8).
    #[arg(long, default_value_t = 2)]
    pub vcpus: u32,
    /// Host CPUs of the vCPU threads: `A:B` (one each, ping-pong), or a list they share.
    #[arg(long, value_name = "CPUS")]
    pub cpus: Option<String>,
    /// How long to run.
    #[arg(long, value_name = "TIME", default_value = "10s")]
    pub duration: String,
    /// Leave the vCPU threads with the process's name instead of QEMU's `CPU N/KVM`.
    #[arg(long)]
    pub unnamed: bool,
    /// The VM's own halt-poll limit in ns (0: every halt sleeps); the module's when absent.
    #[arg(long, value_name = "NS")]
    pub halt_poll_ns: Option<u64>,
    /// Print one JSON line at the end: each vCPU's running count (loop iterations, round
    /// trips), sampled this often from the start, each sample with its CLOCK_MONOTONIC time in
    /// ns (so a watcher can cut the series at its own instants).
    #[arg(long, value_name = "TIME")]
    pub series: Option<String>,
}

pub fn run(args: Args, g: &Global, also: &[&dyn Sink]) -> Result<()> {
    match args.command {
        Some(HostCommand::Bench(a)) => bench(a, g, also),
        Some(HostCommand::Guest(a)) => guest(a, g),
        None => watch(args.watch, g, also),
    }
}

/// Checks the `--expect-absent` ids (trimmed): an unknown one would make the check always pass.
fn expected_ids(ids: &[String]) -> Result<Vec<String>> {
    use crate::host::watch::findings::IDS;
    ids.iter()
        .map(|id| {
            let id = id.trim();
            if IDS.contains(&id) {
                Ok(id.to_string())
            } else {
                Err(crate::error::bad_input(format!(
                    "--expect-absent `{id}`: cpulab host has no such finding; choose from {}",
                    IDS.join(", ")
                )))
            }
        })
        .collect()
}

fn watch(a: crate::host::watch::WatchArgs, g: &Global, also: &[&dyn Sink]) -> Result<()> {
    let machine = Machine::detect(&g.root)?;
    let s = crate::host::watch::settings(&a)?;
    let expected = expected_ids(&a.expect_absent)?;
    let emitter = Emitter::new(&a.output, g.quiet, also)?;
    let printer = output::progress_printer(g.quiet);
    let report = HostWatch::run(&machine, &s, &Progress::new(&printer))?;
    emitter.emit(&Emitted::new(
        <HostWatch as Experiment>::KIND,
        &report,
        |r| HostWatch::render_text(r, &Style::new()),
        Some(HostWatch::render_html),
    )?)?;
    let present: Vec<String> = report
        .findings
        .iter()
        .filter(|f| expected.contains(&f.id))
        .map(|f| format!("{} on {}", f.id, f.vm))
        .collect();
    if !present.is_empty() {
        anyhow::bail!("--expect-absent: still present: {}", present.join("; "));
    }
    Ok(())
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

fn guest(a: GuestArgs, g: &Global) -> Result<()> {
    use crate::error::bad_input;
    use crate::vmm::{Program, Running, Vm};
    let machine = Machine::detect(&g.root)?;
    let duration = crate::units::flag_duration("duration", &a.duration)?;
    let programs: Vec<(Program, u32)> = match a.program.as_str() {
        "halt" => vec![(Program::HaltPing, 1), (Program::HaltPong, 0)],
        "spin" => vec![(Program::SpinPing, 1), (Program::SpinPong, 0)],
        "burn" if (1..=8).contains(&a.vcpus) => {
            (0..a.vcpus).map(|i| (Program::Burner, i)).collect()
        }
        "burn" => return Err(bad_input(format!("--vcpus {}: give 1 to 8", a.vcpus))),
        p => {
            return Err(bad_input(format!("--program {p}: give halt, spin or burn")));
        }
    };
    let n = programs.len();
    let placement = match a.cpus.as_deref() {
        None => vec![machine.allowed.clone(); n],
        Some(t) => match t.split_once(':') {
            Some((x, y)) if n == 2 => vec![
                machine.flag_cpus("--cpus", x)?,
                machine.flag_cpus("--cpus", y)?,
            ],
            _ => vec![machine.flag_cpus("--cpus", t)?; n],
        },
    };
    let access = crate::vmm::Access::open()?;
    let mut vm = Vm::new(&access, &programs)?;
    if let Some(ns) = a.halt_poll_ns {
        vm.set_halt_poll_ns(ns)?;
    }
    let mut r = Running::start_named(vm, &placement, !a.unnamed)?;
    crate::output::status(
        g.quiet,
        &format!(
            "cpulab host guest: pid {}, {n} vCPUs running {}",
            std::process::id(),
            a.program
        ),
    );
    let start = std::time::Instant::now();
    let end = start + duration;
    let every = a
        .series
        .as_deref()
        .map(|t| crate::units::flag_duration("series", t))
        .transpose()?;
    if every.is_some_and(|d| d < std::time::Duration::from_millis(10) || d >= duration) {
        return Err(bad_input(
            "--series: give at least 10ms and less than --duration",
        ));
    }
    let counts = |r: &Running| (0..n as u32).map(|i| r.count(i)).collect::<Vec<u32>>();
    // A burner's own run time; the other programs keep none.
    let ran = |r: &Running| {
        r.times_its_run().then(|| {
            (0..n as u32)
                .map(|i| r.ran_cycles(i))
                .collect::<Vec<Option<u64>>>()
        })
    };
    let mut series = every.map(|_| Series::new(n));
    let mut next_sample = start;
    while std::time::Instant::now() < end && r.alive() {
        if let (Some(s), Some(d)) = (series.as_mut(), every)
            && std::time::Instant::now() >= next_sample
        {
            s.add(crate::host::monotonic_ns()?, &counts(&r), ran(&r));
            next_sample += d;
        }
        let now = std::time::Instant::now();
        let nap = std::time::Duration::from_millis(20);
        let nap = if series.is_some() {
            nap.min(next_sample.saturating_duration_since(now))
        } else {
            nap
        };
        std::thread::sleep(nap.max(std::time::Duration::from_millis(1)));
    }
    if let Some(mut s) = series {
        s.add(crate::host::monotonic_ns()?, &counts(&r), ran(&r));
        println!(
            "{}",
            serde_json::json!({ "tsc_khz": r.tsc_khz, "samples": s.samples })
        );
    }
    r.stop_all()
}

/// A guest's counts sampled over its run, widened from the guest's u32 counters (each sample's
/// step taken modulo 2^32, so a counter that wraps between samples still adds up).
#[derive(Debug, serde::Serialize)]
struct Series {
    samples: Vec<Sample>,
    #[serde(skip)]
    last: Vec<u32>,
}

#[derive(Debug, serde::Serialize)]
struct Sample {
    t_ns: u64,
    counts: Vec<u64>,
    /// A burner's own run time so far, TSC cycles, per vCPU (null: torn on every read);
    /// absent for the other programs.
    #[serde(skip_serializing_if = "Option::is_none")]
    ran_cycles: Option<Vec<Option<u64>>>,
}

impl Series {
    fn new(n: usize) -> Self {
        Self {
            samples: Vec::new(),
            last: vec![0; n],
        }
    }

    fn add(&mut self, t_ns: u64, now: &[u32], ran_cycles: Option<Vec<Option<u64>>>) {
        let counts = match self.samples.last() {
            None => now.iter().map(|&c| u64::from(c)).collect(),
            Some(prev) => prev
                .counts
                .iter()
                .zip(now.iter().zip(&self.last))
                .map(|(total, (c, l))| total + u64::from(c.wrapping_sub(*l)))
                .collect(),
        };
        self.last = now.to_vec();
        self.samples.push(Sample {
            t_ns,
            counts,
            ran_cycles,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::Series;

    #[test]
    fn a_series_adds_up_across_a_wrapping_counter() {
        let mut s = Series::new(2);
        s.add(1, &[10, u32::MAX - 1], None);
        s.add(2, &[15, 3], None);
        s.add(3, &[15, 8], Some(vec![Some(1), None]));
        let counts: Vec<&Vec<u64>> = s.samples.iter().map(|x| &x.counts).collect();
        let top = u64::from(u32::MAX);
        assert_eq!(
            counts,
            [&vec![10, top - 1], &vec![15, top + 4], &vec![15, top + 9]]
        );
    }
}
