//! `cpulab remedy`: a doctor or `cpulab host` result's remedies as the files a fleet deploys,
//! written into a directory. Nothing is applied: `cpulab try` remains the only command that changes a setting.

use super::Global;
use crate::doctor::findings::Finding;
use crate::emit::{Emitted, Emitter};
use crate::error::bad_input;
use crate::host::watch::findings::HostFinding;
use crate::remedy::trials::{Trials, TriedHere};
use crate::remedy::{self, Context, Format, Plan};
use crate::report::envelope::Kind;
use crate::trial::recorded::Stored;
use anyhow::{Context as _, Result};
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab remedy --out remedies\n  \
    cpulab remedy doctor.json --out remedies --format systemd,cmdline\n  \
    cpulab remedy doctor.json --out remedies --force --json\n  \
    cpulab remedy host.json --out pins")]
pub struct Args {
    /// A saved doctor or host result (`cpulab doctor --json > doctor.json`, `cpulab host
    /// --json > host.json`) or a run of the history as `@ID`; without it, the newest doctor run
    /// of this host in the history, or its newest host run when it holds no doctor run.
    #[arg(value_name = "RESULT")]
    pub result: Option<PathBuf>,
    /// The directory the files are written into (made when missing).
    #[arg(long, value_name = "DIR", default_value = "cpulab-remedy")]
    pub out: PathBuf,
    /// The formats to write, comma-separated: systemd, modprobe, sysctl, cmdline, tuned,
    /// ansible, containers, kubernetes, libvirt, taskset, or all.
    #[arg(long, value_name = "LIST", default_value = "all")]
    pub format: String,
    /// Write into an output directory that is not empty (files of the same name are replaced,
    /// others left as they are).
    #[arg(long)]
    pub force: bool,
    /// `--json`: the files and commands as one JSON document.
    #[command(flatten)]
    pub output: crate::emit::JsonArg,
}

/// A doctor or host result, read from a file or the history: its findings' remedies as
/// offers, its facts and where it is from.
struct Source {
    offers: Vec<remedy::Offer>,
    findings: usize,
    document: serde_json::Value,
    words: String,
}

/// `cpulab host`'s result kind.
const HOST: Kind = <crate::host::HostWatch as crate::experiment::Experiment>::KIND;

fn from_file(path: &Path) -> Result<Source> {
    let name = path.display().to_string();
    // `@ID` is a run of the history, as `report` and `compare` take it (it was read as a file
    // name: "cannot read @2").
    let l = super::report::load(path)?;
    match l.kind {
        Kind::Doctor => of_document(l.value, &name),
        k if k == HOST => of_host_document(l.value, &name),
        k => Err(bad_input(format!(
            "{name} is a `cpulab {}` result; cpulab remedy takes one written by `cpulab doctor --json` or `cpulab host --json`",
            k.as_str()
        ))),
    }
}

/// A `cpulab host` result: its findings' pins and settings as offers.
fn of_host_document(document: serde_json::Value, name: &str) -> Result<Source> {
    let again = "write it again with `cpulab host --json`";
    let findings = document
        .get("findings")
        .cloned()
        .ok_or_else(|| bad_input(format!("{name} has no \"findings\"; {again}")))?;
    let findings: Vec<HostFinding> = serde_json::from_value(findings)
        .map_err(|e| bad_input(format!("{name}: its findings do not read ({e}); {again}")))?;
    let c = &document["conditions"];
    let hostname = c["hostname"].as_str().unwrap_or_default().to_string();
    let allowed = c["allowed_cpus"]
        .as_str()
        .and_then(|a| crate::cpulist::CpuSet::parse_list(a, false).ok())
        .unwrap_or_default();
    let words = format!(
        "{name} (`cpulab host` run on {} at Unix time {})",
        if hostname.is_empty() {
            "an unrecorded host"
        } else {
            &hostname
        },
        c["started_unix_s"]
            .as_f64()
            .map_or("unrecorded".to_string(), |t| format!("{t:.0}"))
    );
    Ok(Source {
        offers: remedy::host::offers(&findings, &hostname, &allowed),
        findings: findings.len(),
        document,
        words,
    })
}

fn of_document(document: serde_json::Value, name: &str) -> Result<Source> {
    let findings = document.get("findings").cloned().ok_or_else(|| {
        bad_input(format!(
            "{name} has no \"findings\"; write it again with `cpulab doctor --json`"
        ))
    })?;
    let findings: Vec<Finding> = serde_json::from_value(findings).map_err(|e| {
        bad_input(format!(
            "{name}: its findings do not read ({e}); write it again with `cpulab doctor --json`"
        ))
    })?;
    let c = &document["conditions"];
    let words = format!(
        "{name} (doctor run on {} at Unix time {})",
        c["hostname"].as_str().unwrap_or("an unrecorded host"),
        c["started_unix_s"]
            .as_f64()
            .map_or("unrecorded".to_string(), |t| format!("{t:.0}"))
    );
    Ok(Source {
        offers: remedy::offers_of(&findings),
        findings: findings.len(),
        document,
        words,
    })
}

/// The newest doctor run of this host in the history, or its newest `cpulab host` run when it
/// holds no doctor run.
fn from_history() -> Result<Source> {
    let crate::history::Location::At(path) = crate::history::location() else {
        return Err(bad_input(
            "no result given and the history is off; give a saved result: `cpulab remedy doctor.json`",
        ));
    };
    let host = crate::machine::hostname();
    let none = || {
        bad_input(format!(
            "no doctor or host run of this host ({host}) in the history {}; run `cpulab doctor` (or `cpulab host` on a KVM host) first, or give a saved result",
            path.display()
        ))
    };
    if !path.exists() {
        return Err(none());
    }
    let store = crate::history::store::Store::open_read_only(&path)?;
    for kind in [Kind::Doctor, HOST] {
        let filter = crate::history::store::Filter {
            kind: Some(kind.as_str().to_string()),
            host: Some(host.clone()),
            ..Default::default()
        };
        let Some(run) = store.newest(&filter)? else {
            continue;
        };
        let document = store.document(run.id)?.ok_or_else(none)?;
        let name = format!("history run @{}", run.id);
        return if kind == Kind::Doctor {
            of_document(document, &name)
        } else {
            of_host_document(document, &name)
        };
    }
    Err(none())
}

/// The facts of the host the generators use: from the result, and read live when the result is
/// this host's (the online CPUs when the result lacks them, the bootloader tooling). The values
/// an undo puts back are not read here: the apply keeps them on the host when it runs.
fn context(s: &Source, root: &Path) -> Context {
    let facts = &s.document["facts"];
    let this_host =
        s.document["conditions"]["hostname"].as_str() == Some(crate::machine::hostname().as_str());
    let mut ctx = Context {
        source: s.words.clone(),
        cgroup_version: facts["cgroup_version"].as_u64().map(|v| v as u8),
        guest: facts["hypervisor"].is_string(),
        hostname: s.document["conditions"]["hostname"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        online_cpus: facts["online_cpus"].as_str().map(str::to_string),
        smt: facts["smt_active"].as_bool(),
        tuned_profile: facts["tuned_profile"].as_str().map(str::to_string),
        ..Context::default()
    };
    ctx.trials = trials_here(this_host, &s.offers);
    if !this_host {
        return ctx;
    }
    if ctx.online_cpus.is_none() {
        ctx.online_cpus = std::fs::read_to_string(root.join("sys/devices/system/cpu/online"))
            .ok()
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty());
    }
    ctx.bootloaders = ["update-grub", "grub2-mkconfig", "grubby"]
        .iter()
        .filter(|t| crate::pair::presets::find_program(t).is_some())
        .map(|t| t.to_string())
        .collect();
    ctx
}

/// The newest trial on this host of each remedy's `cpulab try` line, from the history, when the
/// result is this host's: a trial here says nothing of another host.
fn trials_here(this_host: bool, offers: &[remedy::Offer]) -> Trials {
    if !this_host {
        return Trials::NotRead(
            "the result is another host's, and trials recorded on this host say nothing of it"
                .into(),
        );
    }
    let crate::history::Location::At(path) = crate::history::location() else {
        return Trials::NotRead("the history is off (--no-history or CPULAB_HISTORY=off)".into());
    };
    if !path.exists() {
        return Trials::Read(vec![]);
    }
    let stored = match stored_trials(&path) {
        Ok(s) => s,
        Err(e) => {
            return Trials::NotRead(format!(
                "the history {} does not read ({})",
                path.display(),
                format!("{e:#}").replace('\n', " ")
            ));
        }
    };
    let mut found: Vec<(String, TriedHere)> = Vec::new();
    let lines = offers.iter().filter_map(|o| o.remedy.try_command.clone());
    for line in lines {
        if found.iter().any(|(l, _)| *l == line) {
            continue;
        }
        if let Some((s, report)) = crate::trial::recorded::newest(&line, &stored) {
            let text = format!(
                "{} (`{line}`, {}, history @{})",
                crate::trial::doctor::measured_line(&report),
                crate::history::when::utc(s.time_unix_s),
                s.run
            );
            let tried = TriedHere {
                run: Some(s.run),
                time_unix_s: Some(s.time_unix_s),
                figures: crate::trial::doctor::measured_figures(&report),
                text,
            };
            found.push((line, tried));
        }
    }
    Trials::Read(found)
}

/// This host's `try` runs in the history at `path`.
fn stored_trials(path: &Path) -> Result<Vec<Stored>> {
    let store = crate::history::store::Store::open_read_only(path)?;
    let filter = crate::history::store::Filter {
        kind: Some(Kind::Try.as_str().to_string()),
        host: Some(crate::machine::hostname()),
        ..Default::default()
    };
    let mut runs = Vec::new();
    for run in store.list(&filter)? {
        if let Some(document) = store.document(run.id)? {
            runs.push(Stored {
                run: run.id,
                time_unix_s: run.time_unix_s,
                document,
            });
        }
    }
    Ok(runs)
}

/// Refuses an output directory that holds files, unless `--force`.
fn check_out(out: &Path, force: bool) -> Result<()> {
    match std::fs::read_dir(out) {
        Ok(mut entries) => {
            if entries.next().is_some() && !force {
                return Err(bad_input(format!(
                    "{} exists and is not empty; choose another --out directory, or give --force to write into it",
                    out.display()
                )));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => Err(bad_input(format!(
            "--out {} is a file, not a directory; choose a directory",
            out.display()
        ))),
        Err(e) => Err(bad_input(format!(
            "cannot read --out {}: {e}",
            out.display()
        ))),
    }
}

/// Writes every file of the plan below `out`.
fn write(plan: &Plan, out: &Path) -> Result<()> {
    for f in plan.all_files() {
        let path = out.join(&f.path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| bad_input(format!("cannot make {}: {e}", dir.display())))?;
        }
        std::fs::write(&path, &f.contents)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

pub fn run(args: Args, g: &Global) -> Result<()> {
    let formats = Format::parse_list(&args.format).map_err(bad_input)?;
    let source = match &args.result {
        Some(p) => from_file(p)?,
        None => from_history()?,
    };
    let ctx = context(&source, &g.root);
    let out_words = args.out.display().to_string();
    let plan = remedy::plan_offers(&source.offers, source.findings, &ctx, &formats, &out_words);
    // Refused alike whether or not this result has something to write.
    check_out(&args.out, args.force)?;
    if plan.all_files().next().is_some() {
        write(&plan, &args.out)?;
    }
    // What was written is output, not a run: no history sink.
    Emitter::stdout(args.output.json, g.quiet, &[]).emit(&Emitted::bare(
        Kind::Remedy,
        &plan,
        remedy::text::render,
        None,
    )?)
}
