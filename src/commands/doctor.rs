//! `cpulab doctor`: probe, measure, and name the causes, with evidence and remedies.

use super::Global;
use crate::doctor::battery::{DoctorSettings, Mode};
use crate::doctor::{self, text};
use crate::error::bad_input;
use crate::machine::Machine;
use crate::output;
use crate::report::envelope::Kind;
use anyhow::Result;
use std::path::{Path, PathBuf};

/// Presets `--with` understands.
pub const PRESETS: &[&str] = &["pgbench", "http"];

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab doctor\n  \
    cpulab doctor --quick\n  \
    cpulab doctor --with pgbench,http\n  \
    cpulab doctor --json > doctor.json")]
pub struct Args {
    /// At most about 15 seconds: the essentials at short intervals.
    #[arg(long, conflicts_with = "thorough")]
    pub quick: bool,
    /// Longer runs for tighter intervals.
    #[arg(long)]
    pub thorough: bool,
    /// Also run real applications under each placement: `pgbench`, `http`, a list, or `all`.
    #[arg(long, value_name = "PRESETS")]
    pub with: Option<String>,
    /// One JSON document on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained HTML report to FILE.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// After the battery, run `cpulab try` on every remedy that is a setting and add the
    /// measured effect and cost to it (root only; every setting is restored).
    #[arg(long = "try")]
    pub try_remedies: bool,
    /// Skip the check for other load before measuring.
    #[arg(long)]
    pub no_load_check: bool,
    /// Also watch a live application's wakeups (its processes, comma-separated) and say what
    /// crossing CPUs costs it, with the battery's measured penalty (root: scheduler tracepoints).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "PID",
        conflicts_with = "comm"
    )]
    pub pid: Vec<String>,
    /// Like --pid, by process name (as in /proc/PID/comm).
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    pub comm: Vec<String>,
}

/// Turns the flags into settings; unknown presets are bad input.
pub fn settings(a: &Args) -> Result<DoctorSettings> {
    let mode = if a.quick {
        Mode::Quick
    } else if a.thorough {
        Mode::Thorough
    } else {
        Mode::Default
    };
    let mut presets = Vec::new();
    if let Some(w) = &a.with {
        for p in w.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if p == "all" {
                presets = PRESETS.iter().map(|s| s.to_string()).collect();
                break;
            }
            if !PRESETS.contains(&p) {
                return Err(bad_input(format!(
                    "--with {p}: unknown preset; choose from {} or all",
                    PRESETS.join(", ")
                )));
            }
            if !presets.iter().any(|x| x == p) {
                presets.push(p.to_string());
            }
        }
    }
    let watch = if !a.pid.is_empty() {
        let mut pids = std::collections::BTreeSet::new();
        for p in &a.pid {
            let pid: i32 = p.trim().parse().ok().filter(|p| *p > 0).ok_or_else(|| {
                bad_input(format!(
                    "--pid `{p}` is not a process id; give one like `1234`"
                ))
            })?;
            if !Path::new("/proc").join(pid.to_string()).is_dir() {
                return Err(bad_input(format!(
                    "no process with pid {pid} (it may have exited); see `ps -e`"
                )));
            }
            pids.insert(pid);
        }
        Some(crate::watch::Target::Pids(pids))
    } else if !a.comm.is_empty() {
        Some(crate::watch::Target::Comms(
            a.comm.iter().map(|c| c.trim().to_string()).collect(),
        ))
    } else {
        None
    };
    Ok(DoctorSettings {
        mode,
        presets,
        watch,
        check_load: !a.no_load_check,
    })
}

/// Fails with one line (exit 2) when `path` cannot be written, so a long run is not lost to a
/// missing directory at the end. Creating and removing a scratch file beside it is the only
/// test that also catches read-only mounts and permissions.
pub fn check_writable(flag: &str, path: &Path) -> Result<()> {
    if path.is_dir() {
        return Err(bad_input(format!(
            "{flag} {}: is a directory; give a file name",
            path.display()
        )));
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(bad_input(format!(
            "{flag} {}: directory {} does not exist; create it or choose another path",
            path.display(),
            parent.display()
        )));
    }
    tempfile::Builder::new()
        .prefix(".cpulab-write-check")
        .tempfile_in(parent)
        .map(drop)
        .map_err(|e| {
            bad_input(format!(
                "{flag} {}: cannot write in {} ({e}); choose another path",
                path.display(),
                parent.display()
            ))
        })
}

/// Writes `bytes` to `path`; when that fails, to a new file in the temporary directory, whose
/// name is returned with the error so the result is not lost.
fn write_or_rescue(path: &Path, bytes: &[u8], suffix: &str) -> Result<(), anyhow::Error> {
    let Err(e) = std::fs::write(path, bytes) else {
        return Ok(());
    };
    let rescued = tempfile::Builder::new()
        .prefix("cpulab-doctor-")
        .suffix(suffix)
        .tempfile()
        .and_then(|mut f| {
            std::io::Write::write_all(&mut f, bytes)?;
            f.keep().map_err(|k| k.error)
        });
    Err(match rescued {
        Ok((_, saved)) => anyhow::anyhow!(
            "cannot write {} ({e}); the report was saved to {} instead",
            path.display(),
            saved.display()
        ),
        Err(e2) => anyhow::anyhow!(
            "cannot write {} ({e}), nor a file in the temporary directory ({e2})",
            path.display()
        ),
    })
}

pub fn run(args: Args, g: &Global) -> Result<()> {
    let settings = settings(&args)?;
    if args.try_remedies && !nix::unistd::geteuid().is_root() {
        return Err(crate::error::bad_input(
            "doctor --try changes settings for its trials and needs root; run `sudo cpulab doctor --try`",
        ));
    }
    if let Some(path) = &args.html {
        check_writable("--html", path)?;
    }
    let machine = Machine::detect(&g.root)?;
    let visible = !g.quiet && output::stderr_is_terminal();
    let mut report = doctor::run(&machine, &settings, visible, g.quiet);
    // An interrupted battery tries nothing more: the interrupt stops the whole command.
    if args.try_remedies && report.interrupted.is_none() {
        crate::trial::doctor::try_remedies(&machine, &g.root, &mut report.findings, g.quiet)?;
    }
    let mut failed = None;
    if let Some(path) = &args.html {
        let html = crate::doctor::html::page(&report);
        match write_or_rescue(path, html.as_bytes(), ".html") {
            Ok(()) => output::status(
                g.quiet,
                &format!("HTML report written to {}", path.display()),
            ),
            Err(e) => failed = Some(e),
        }
    }
    super::print::emit(args.json, Kind::Doctor, &report, text::render)?;
    if let Some(i) = &report.interrupted {
        if let Some(e) = &failed {
            eprintln!("cpulab: {e:#}");
        }
        // Every process has ended and every directory is gone; report the signal as a shell
        // would.
        eprintln!(
            "cpulab: interrupted by {} during {}; the partial result above is marked interrupted",
            i.name, i.during
        );
        std::process::exit(i.exit_code());
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
