//! The command line: clap structures and dispatch. Each subcommand lives in its own file under
//! `commands/`, where its flags are turned into validated settings before anything runs.

use crate::commands::{self, Global};
use crate::registry;
use anyhow::Result;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::ffi::OsString;

/// Measure and explain how CPU placement, scheduling and system settings change an
/// application's speed, on bare metal and inside virtual machines.
#[derive(Debug, Parser)]
#[command(
    name = "cpulab",
    version = env!("CPULAB_VERSION"),
    about,
    long_about = None,
    after_help = "Start with `cpulab doctor`. `cpulab COMMAND --help` shows a command's flags with \
                  examples; docs/COMMAND.md in the source has its full reference."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Fingerprint the machine: topology, placement classes, virtualisation, idle, frequency,
    /// mitigations, scheduler and cgroup limits, counters.
    Probe(commands::probe::Args),
    /// The whole investigation in one command: findings with evidence and remedies.
    Doctor(commands::doctor::Args),
    /// Render a saved result again (`--html`).
    Report(commands::report::Args),
    /// Compare two saved results figure by figure, with a significance test.
    Compare(commands::compare::Args),
    /// Try a setting (halt polling, idle states, scheduler knobs, cpufreq, affinity, a tuned
    /// profile): measured A/B, always restored.
    Try(commands::try_::Args),
    /// Write each finding's remedy as the files a fleet deploys (systemd, modprobe.d, the
    /// kernel command line, tuned, Ansible, Kubernetes, libvirt), with verify and undo; applies
    /// nothing.
    Remedy(commands::remedy::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    Completions(commands::completions::Args),
    /// Write the man pages, cpulab.1 and one per command, into a directory.
    #[command(hide = true)]
    Manpages(commands::manpages::Args),
    /// Every measured result kept with the machine's fingerprint: list, show, diff, check for
    /// regressions and name the configuration change, report over time.
    History(commands::history::Args),
    /// Simulate the hypervisor layer: predictions checked against the field notes (SIMULATED).
    Sim(commands::sim::Args),
    /// Serve wakeup placement, halts, IPIs and machine facts as Prometheus metrics, until stopped.
    Exporter(commands::exporter::Args),
    /// Rank a fleet's hosts by what placement costs them, with their doctor findings and the
    /// machine facts that changed, from the Prometheus that scrapes their exporters.
    Fleet(commands::fleet::Args),
    /// The hypervisor side: `cpulab host bench` measures this machine's KVM with VMs of
    /// cpulab's own.
    Host(commands::host::Args),
}

/// The whole command line: the subcommands above plus one per experiment of the registry that
/// is its own command (its flags defined beside it), so help, completions and man pages see
/// them all.
pub fn command() -> clap::Command {
    registry::ENTRIES
        .iter()
        .filter_map(|e| e.command.as_ref())
        .fold(Cli::command(), |c, s| c.subcommand((s.clap)()))
}

/// What the command line asked for.
pub enum Invocation {
    /// One of the subcommands declared in [`Command`].
    Builtin(Box<Cli>),
    /// An experiment's subcommand from the registry.
    Registered {
        kind: crate::report::envelope::Kind,
        global: Global,
        matches: clap::ArgMatches,
        command: &'static registry::Subcommand,
    },
}

/// Parses a command line (`argv[0]` is the program name).
pub fn try_parse_from<I, T>(argv: I) -> Result<Invocation, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let m = command().try_get_matches_from(argv)?;
    if let Some((name, sub)) = m.subcommand()
        && let Some((entry, command)) = registry::command_named(name)
    {
        return Ok(Invocation::Registered {
            kind: entry.kind,
            global: Global::from_arg_matches(&m)?,
            matches: sub.clone(),
            command,
        });
    }
    Ok(Invocation::Builtin(Box::new(Cli::from_arg_matches(&m)?)))
}

/// Runs what [`try_parse_from`] parsed.
pub fn run_invocation(inv: Invocation) -> Result<()> {
    match inv {
        Invocation::Builtin(cli) => run(*cli),
        Invocation::Registered {
            global,
            matches,
            command,
            ..
        } => {
            start(&global);
            if command.orderly_interrupt {
                interrupts_in_order();
            }
            let history = crate::history::Recorder {
                root: global.root.clone(),
            };
            (command.run)(&matches, &global.root, global.quiet, &[&history])
        }
    }
}

/// What every command does first: where the history is, and the recovery of an interrupted
/// `cpulab try`.
fn start(g: &Global) {
    crate::history::configure(g.history.as_deref(), g.no_history, g.quiet);
    crate::trial::journal::recover_at_start(&g.root, g.quiet);
}

/// Installs the signal handlers (`crate::signals`) for a command that takes an interrupt in
/// order: from here Ctrl-C, SIGTERM and SIGHUP are recorded, the whole command (every stage,
/// every process it started) is torn down at its next check, and it exits 128 + signal. Once,
/// here, before the command starts; commands that never check for a signal keep the default
/// (an interrupt ends them at once), so no first Ctrl-C is ever swallowed. `watch` keeps its
/// own handler (`watch::session`), which ends the watch early and reports what it saw.
fn interrupts_in_order() {
    crate::signals::install();
}

pub fn run(cli: Cli) -> Result<()> {
    let g = cli.global;
    start(&g);
    // The built-in commands that stop servers, clients and settings in order on an interrupt.
    if matches!(
        cli.command,
        Command::Doctor(_) | Command::Try(_) | Command::Exporter(_)
    ) {
        interrupts_in_order();
    }
    // The sinks every result goes to after its own stdout and files (`crate::emit`).
    let history = crate::history::Recorder {
        root: g.root.clone(),
    };
    let also: &[&dyn crate::emit::Sink] = &[&history];
    match cli.command {
        Command::Probe(a) => commands::probe::run(a, &g, also),
        Command::Doctor(a) => commands::doctor::run(a, &g, also),
        Command::Report(a) => commands::report::run(a, &g),
        Command::Compare(a) => commands::compare::run(a, &g, also),
        Command::Try(a) => commands::try_::run(a, &g, also),
        Command::Remedy(a) => commands::remedy::run(a, &g),
        Command::Completions(a) => commands::completions::run(a, command()),
        Command::Manpages(a) => commands::manpages::run(a, command(), g.quiet),
        Command::Sim(a) => commands::sim::run(a, &g, also),
        Command::Exporter(a) => commands::exporter::run(a, &g),
        Command::History(a) => commands::history::run(a, &g),
        Command::Fleet(a) => commands::fleet::run(a, &g),
        Command::Host(a) => commands::host::run(a, &g, also),
    }
}
