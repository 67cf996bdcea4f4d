//! `cpulab try SETTING=VALUE...`: flags, their validation into [`TrialSettings`], and output.
//! `--list`, `--dry-run` and `--restore` are answered here without measuring.

use super::Global;
use crate::emit::{Emitted, Emitter, Sink};
use crate::error::bad_input;
use crate::experiment::{Experiment, Level, Progress};
use crate::machine::Machine;
use crate::output::{self, Style};
use crate::registry::Registry;
use crate::report::envelope::Kind;
use crate::trial::precision::Goal;
use crate::trial::setting::{self, Availability, Roots};
use crate::trial::{self, Trial, TrialSettings, journal, measure};
use anyhow::Result;
use std::path::PathBuf;

/// Try a setting: measured A/B, always restored.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab try --list\n  \
    cpulab try haltpoll.guest_halt_poll_ns=200000 --dry-run\n  \
    sudo cpulab try haltpoll.guest_halt_poll_ns=200000\n  \
    sudo cpulab try cpuidle.disable=state1 --measure 'pingpong:--pairs 0:1'\n  \
    sudo cpulab try haltpoll.guest_halt_poll_ns=200000 --measure 'pair:--preset pgbench --pairs 0:1'\n  \
    sudo cpulab try tuned:latency-performance --each\n  \
    sudo cpulab try --restore")]
pub struct Args {
    /// Settings to try, `NAME=VALUE` (`haltpoll.guest_halt_poll_ns=200000`,
    /// `cpuidle.max_latency_us=10`, `sched.migration_cost_ns=5000000`, `pid:1234.affinity=0`),
    /// or `tuned:PROFILE`. `--list` shows the names.
    #[arg(value_name = "SETTING=VALUE")]
    pub settings: Vec<String>,
    /// List the settings with their current value, and whether they can be changed here.
    #[arg(long, conflicts_with_all = ["settings", "restore"])]
    pub list: bool,
    /// Print the plan and the exact writes; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Restore what an interrupted trial left changed (the journal in /run/cpulab).
    #[arg(long, conflicts_with = "settings")]
    pub restore: bool,
    /// Leave the changed values in place at the end, and print how to undo them.
    #[arg(long)]
    pub keep: bool,
    /// Also try each setting alone (which items of a tuned profile matter here).
    #[arg(long)]
    pub each: bool,
    /// Rounds per side at least (baseline and changed alternate: ABAB...); at least 3. More
    /// are added, a pair at a time, until a change of --detect could be seen.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// The smallest change the trial should be able to see, in percent of the baseline:
    /// rounds are added until every figure could have seen it, or --max-time is reached
    /// (then the figure is called inconclusive, with the rounds it would take).
    #[arg(long, value_name = "PCT", default_value = "10")]
    pub detect: String,
    /// Time limit for the rounds of the trial (of each trial with --each): `90s`, `5m` (a
    /// bare number is seconds). No pair of rounds is started that would pass it.
    #[arg(long, value_name = "TIME", default_value = "2m")]
    pub max_time: String,
    /// What to measure each round: `pingpong[:FLAGS]` (its own flags, e.g.
    /// `pingpong:--pairs 0:1`) or `cmd:COMMAND ARGS` with --metric. Default: the experiment the
    /// setting is about.
    #[arg(long, value_name = "SPEC")]
    pub measure: Option<String>,
    /// With `--measure cmd:...`: a regex with a named group `value`, or pgbench, ab, wrk.
    #[arg(long, value_name = "REGEX")]
    pub metric: Option<String>,
    /// With `--metric`: smaller values are better (a time rather than a rate).
    #[arg(long)]
    pub lower_is_better: bool,
    /// Directory of tuned profiles (`NAME/tuned.conf`), searched before /etc/tuned and
    /// /usr/lib/tuned.
    #[arg(long, value_name = "DIR")]
    pub profile_dir: Option<PathBuf>,
    /// `--json`, `--html FILE`.
    #[command(flatten)]
    pub output: crate::emit::OutputArgs,
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn list(roots: &Roots, json: bool) -> Result<()> {
    if json {
        // Every --json document is a result with its envelope; a listing is not one.
        return Err(bad_input(
            "--list is text only; use `cpulab probe --json` for the machine's settings as data",
        ));
    }
    let rows: Vec<serde_json::Value> = setting_rows(roots);
    let mut s = format!(
        "{:<38} {:<28} {}\n",
        "SETTING", "CURRENT", "CHANGEABLE HERE"
    );
    for r in &rows {
        s += &format!(
            "{:<38} {:<28} {}\n    {}\n",
            r["name"].as_str().unwrap_or(""),
            r["current"].as_str().unwrap_or(""),
            r["changeable"].as_str().unwrap_or(""),
            r["about"].as_str().unwrap_or("")
        );
    }
    s += "pid:PID.affinity                       CPU affinity of a process and all its threads\n";
    s += "cgroup:PATH:FILE                       cpu.max, cpu.weight, cpuset.cpus, cpu.cfs_quota_us of a cgroup\n";
    s += "tuned:PROFILE                          a tuned profile, expanded into the settings above\n";
    output::print_text(&s)
}

fn setting_rows(roots: &Roots) -> Vec<serde_json::Value> {
    crate::trial::changes::catalogue_all(roots)
        .iter()
        .map(|k| {
            let availability = k.availability();
            let current = match availability {
                Availability::NotHere(_) => "-".to_string(),
                _ => k.current().unwrap_or_else(|e| format!("? ({e:#})")),
            };
            let acts_here = !matches!(availability, Availability::Inert(_));
            let changeable = match availability {
                Availability::Changeable if k.needs_root() && !is_root() => "yes (as root)".into(),
                Availability::Changeable => "yes".to_string(),
                Availability::Inert(why) => format!("yes, but it acts on nothing here: {why}"),
                Availability::NotHere(why) => format!("no: {why}"),
                Availability::BootOnly(line) => format!("no: boot-time only ({line})"),
            };
            serde_json::json!({
                "name": k.name(),
                "current": current,
                "changeable": changeable,
                "acts_here": acts_here,
                "about": k.about(),
            })
        })
        .collect()
}

fn restore(root: &std::path::Path, quiet: bool) -> Result<()> {
    if !is_root() && root == std::path::Path::new("/") {
        return Err(bad_input(
            "restoring needs root (the journal in /run/cpulab is root's); run `sudo cpulab try --restore`",
        ));
    }
    if journal::load(root)?.is_none() {
        output::status(
            quiet,
            "nothing to restore: no journal of an interrupted `cpulab try`",
        );
        return Ok(());
    }
    match journal::restore_leftover(root, std::time::Duration::from_secs(5))? {
        Some((j, notes)) => {
            output::status(
                quiet,
                &format!(
                    "restored {} target(s) left changed by `{}` (pid {}); every value read back as journalled",
                    j.entries.len(),
                    j.command,
                    j.pid
                ),
            );
            for n in notes {
                output::status(quiet, &format!("note: {n}"));
            }
            Ok(())
        }
        None => match journal::load(root)? {
            Some(j) => Err(bad_input(format!(
                "a `cpulab try` (pid {}) is still running and holds the journal; it restores when it ends (stop it with `kill {}`)",
                j.pid, j.pid
            ))),
            None => {
                output::status(quiet, "nothing to restore");
                Ok(())
            }
        },
    }
}

/// `--metric` and `--lower-is-better` read the output of `--measure cmd:...`; beside any other
/// measurement they were dropped without a word.
fn unused_metric(args: &Args) -> Result<()> {
    let cmd = args
        .measure
        .as_deref()
        .is_some_and(|m| m.split_once(':').map_or(m, |(name, _)| name) == "cmd");
    if !cmd && (args.metric.is_some() || args.lower_is_better) {
        return Err(bad_input(
            "--metric and --lower-is-better read the output of `--measure cmd:COMMAND`; give that, \
             or leave them out (an experiment has its own figures)",
        ));
    }
    Ok(())
}

pub fn run(args: Args, g: &Global, also: &[&dyn Sink]) -> Result<()> {
    let roots = Roots::new(&g.root, args.profile_dir.as_deref());
    if args.restore {
        return restore(&g.root, g.quiet);
    }
    if args.list {
        return list(&roots, args.output.json());
    }
    if args.settings.is_empty() {
        return Err(bad_input(
            "give a setting to try, like `cpulab try haltpoll.guest_halt_poll_ns=200000`; `cpulab try --list` shows them",
        ));
    }
    if args.rounds < 3 {
        return Err(bad_input(format!(
            "--rounds {}: a trial needs at least 3 rounds per side",
            args.rounds
        )));
    }
    crate::units::flag_count("rounds", args.rounds, 3, crate::units::MAX_REPEATS)?;
    unused_metric(&args)?;
    let goal = goal(&args)?;
    let (changes, skipped) = crate::trial::parse::parse_changes(&roots, &args.settings)?;
    let machine = Machine::detect(&g.root)?;
    let (measure, measure_label) = match &args.measure {
        Some(spec) => (
            measure::parse(
                spec,
                args.metric.as_deref(),
                args.lower_is_better,
                &machine,
                &Registry,
            )?,
            spec.clone(),
        ),
        None => {
            let subject = changes[0].setting.subject();
            (
                measure::default_for(subject),
                measure::describe_default(subject),
            )
        }
    };
    if args.dry_run {
        return output::print_text(&plan(&changes, &skipped, &measure_label, &goal));
    }
    if let Some(c) = changes.iter().find(|c| c.setting.needs_root())
        && !is_root()
    {
        return Err(bad_input(format!(
            "{} needs root to change; run `sudo cpulab try ...` (or --dry-run to see the writes)",
            c.setting.name()
        )));
    }
    let settings = TrialSettings {
        root: g.root.clone(),
        changes,
        skipped,
        goal,
        measure,
        measure_label,
        keep: args.keep,
        each: args.each,
        command: format!("cpulab try {}", args.settings.join(" ")),
    };
    let quiet = g.quiet;
    let emitter = Emitter::new(&args.output, quiet, also)?;
    let show_steps = !quiet && output::stderr_is_terminal();
    let sink = move |level: Level, msg: &str| match level {
        Level::Step if show_steps => eprintln!("{msg}"),
        Level::Step => {}
        Level::Note => output::status(quiet, &format!("note: {msg}")),
        Level::Warning => output::status(quiet, &format!("warning: {msg}")),
    };
    let report = match Trial::run(&machine, &settings, &Progress::new(&sink)) {
        Ok(r) => r,
        Err(e) => {
            if let Some(i) = e.downcast_ref::<crate::signals::Interrupted>() {
                eprintln!(
                    "cpulab: interrupted by {}; every setting restored and read back",
                    i.name
                );
                std::process::exit(i.exit_code());
            }
            return Err(e);
        }
    };
    emitter.emit(&Emitted::new(
        Kind::Try,
        &report,
        |r| trial::render::text(r, &Style::new()),
        Some(Trial::render_html),
    )?)
}

/// `--detect PCT` as a fraction: `10`, `10%`, `2.5` (one line and exit 2 otherwise).
pub fn parse_detect(text: &str) -> Result<f64> {
    let t = text.trim().trim_end_matches('%').trim();
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v < 100.0 => Ok(v / 100.0),
        _ => Err(bad_input(format!(
            "--detect {text}: give the smallest change to be able to see as a percentage \
             above 0 and below 100, e.g. `--detect 10`"
        ))),
    }
}

/// The trial's goal from `--rounds`, `--detect` and `--max-time`.
fn goal(args: &Args) -> Result<Goal> {
    let max_time = crate::units::flag_duration("max-time", &args.max_time)?;
    let detect = parse_detect(&args.detect)?;
    Ok(Goal {
        target_rel: detect,
        target_from: if detect == trial::precision::DEFAULT_TARGET {
            "default".into()
        } else {
            "--detect".into()
        },
        max_time_s: max_time.as_secs_f64(),
        min_rounds: args.rounds,
        // A measured command's own figure decides; its wall time is context.
        held: args
            .measure
            .as_deref()
            .is_some_and(|m| m.starts_with("cmd:"))
            .then(|| "metric[".to_string()),
    })
}

/// `--dry-run`: what would be written and measured.
fn plan(changes: &[setting::Change], skipped: &[String], measure: &str, goal: &Goal) -> String {
    let rounds = goal.min_rounds;
    let mut s = String::from("cpulab try --dry-run: nothing is written\n\n");
    for c in changes {
        s += &format!(
            "{} = {} (now {}; needs root: {}; survives reboot: {})\n",
            c.setting.name(),
            c.value,
            c.setting
                .current()
                .unwrap_or_else(|e| format!("unreadable: {e:#}")),
            if c.setting.needs_root() { "yes" } else { "no" },
            if c.setting.survives_reboot() {
                "yes"
            } else {
                "no"
            }
        );
        match c.setting.plan(&c.value) {
            Ok(ops) => {
                for op in ops {
                    s += &format!("    {}\n", op.shell());
                }
            }
            Err(e) => s += &format!("    (cannot plan: {e:#})\n"),
        }
        let p = c.setting.permanent(&c.value);
        s += &format!(
            "  permanent form ({}{}):\n",
            p.form,
            p.file.map(|f| format!(", {f}")).unwrap_or_default()
        );
        for l in p.text.lines() {
            s += &format!("    {l}\n");
        }
    }
    for k in skipped {
        s += &format!("not tried: {k}\n");
    }
    s += &format!(
        "\nmeasure: {measure}\nrounds: {rounds} baseline and {rounds} changed, interleaved (ABAB...), the writes above before each changed round and the original values before each baseline round; then pairs of rounds until every figure could have seen a change of ±{:.1}%, within {:.0} s\njournal: /run/cpulab/try.journal (0600), written before the first write; restored on exit, signals and (by a watchdog) SIGKILL\n",
        goal.target_rel * 100.0,
        goal.max_time_s
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn bad_measure_specs_are_one_line() {
        let m = Machine::detect(Path::new("/")).unwrap();
        for (spec, metric) in [
            ("nothing", None),
            ("pingpong:--pairs 0:99", None),
            ("pingpong:--bogus", None),
            ("cmd:true", None),
            ("cmd:", Some("x (?P<value>1)")),
        ] {
            let e = measure::parse(spec, metric, false, &m, &Registry)
                .err()
                .unwrap();
            assert_eq!(crate::error::exit_code(&e), 2, "{spec}");
            assert!(!format!("{e:#}").contains('\n'), "{e:#}");
        }
        assert!(
            measure::parse(
                "pingpong:--pairs unpinned --max-time 0.1",
                None,
                false,
                &m,
                &Registry
            )
            .is_ok()
        );
    }
}
