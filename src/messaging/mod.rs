//! `cpulab messaging`: the scheduler under many short wakeups, as `perf bench sched messaging`
//! (hackbench) measures it.
//!
//! G groups, each of N senders and N receivers. Every receiver owns one socketpair (or pipe);
//! every sender of its group writes M messages of 100 bytes to every receiver's end, so each
//! group moves N x N x M messages and each receiver reads N x M of them. All tasks wait behind
//! one start gate (a pipe whose write end is closed to open it), then the time until the last
//! task has finished is one run. It stresses wakeups and run-queue placement rather than any one
//! CPU's speed, which is why `cpulab try` measures scheduler knobs with it.
//!
//! Tasks are processes by default (as perf does) or threads (`--tasks threads`). Processes are
//! forked with PR_SET_PDEATHSIG SIGKILL, so they die with cpulab however it ends, and between
//! `fork` and `_exit` they only make system calls on memory prepared before the fork. They run
//! on the allowed CPUs (`--cpus`), placed by the scheduler.

mod run;

use crate::cpulist::CpuSet;
use crate::error::bad_input;
use crate::experiment::{Command, Direction, Experiment, Figure, Progress, Unit};
use crate::machine::{Conditions, Machine};
use crate::output::Style;
use crate::report::envelope::Kind;
use crate::report::html::{self, chart, section};
use crate::report::svg::{self, Bar};
use crate::stats::MeanCi;
use anyhow::Result;
use serde::{Deserialize, Serialize};

/// Bytes per message, as perf and hackbench send.
pub const MESSAGE_BYTES: usize = 100;

/// What the tasks are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Tasks {
    Processes,
    Threads,
}

/// What the messages travel over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Channel {
    /// AF_UNIX stream socketpairs (perf's default).
    Socket,
    /// Pipes (perf's `--pipe`).
    Pipe,
}

/// Validated settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MessagingSettings {
    pub groups: usize,
    /// Senders per group, and receivers per group.
    pub senders: usize,
    /// Messages each sender sends to each receiver of its group.
    pub messages: usize,
    pub tasks: Tasks,
    pub channel: Channel,
    pub repeats: usize,
    /// The CPUs the tasks may use; `None`: every CPU this process may use (the conditions'
    /// `allowed_cpus`).
    pub cpus: Option<CpuSet>,
    /// Pin task k to the k-th of those CPUs, round-robin (receivers then senders, group by
    /// group), instead of letting the scheduler place them: the doctor's `spread` placement.
    #[serde(default)]
    pub spread: bool,
    pub check_load: bool,
}

impl MessagingSettings {
    /// perf's defaults: 10 groups of 20 senders and 20 receivers, 100 messages each.
    pub fn standard() -> Self {
        Self {
            groups: 10,
            senders: 20,
            messages: 100,
            tasks: Tasks::Processes,
            channel: Channel::Socket,
            repeats: 5,
            cpus: None,
            spread: false,
            check_load: true,
        }
    }

    /// For a trial round (`cpulab try`): half perf's groups, 3 runs, about a second here.
    pub fn quick() -> Self {
        Self {
            groups: 5,
            repeats: 3,
            ..Self::standard()
        }
    }

    /// Messages one run sends: G x N x N x M.
    pub fn messages_per_run(&self) -> u64 {
        (self.groups * self.senders * self.senders * self.messages) as u64
    }
}

/// One run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MessagingRun {
    /// From opening the start gate to the last task's end.
    pub wall_s: f64,
    pub messages_sent: u64,
    pub messages_received: u64,
    pub messages_per_s: f64,
    /// Voluntary plus involuntary context switches of the tasks, where they could be counted
    /// (children's rusage for processes, this process's for threads).
    pub context_switches: Option<u64>,
}

/// The result; this struct is the JSON schema.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MessagingReport {
    pub settings: MessagingSettings,
    pub conditions: Conditions,
    pub runs: Vec<MessagingRun>,
    /// Mean and 95% interval of `wall_s` over the runs.
    pub wall_s: Option<MeanCi>,
    pub messages_per_s: Option<MeanCi>,
}

/// `cpulab messaging` flags.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab messaging\n  \
    cpulab messaging --groups 4 --tasks threads --pipe\n  \
    cpulab messaging --cpus 0 --repeats 10 --json > one-cpu.json")]
pub struct Args {
    /// Groups of senders and receivers.
    #[arg(long, short = 'g', value_name = "N", default_value_t = 10)]
    pub groups: usize,
    /// Senders per group, and as many receivers (perf's `--nr_fds`).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub senders: usize,
    /// Messages of 100 bytes each sender sends to each receiver (perf's `--nr_loops`).
    #[arg(long, short = 'l', value_name = "N", default_value_t = 100)]
    pub messages: usize,
    /// Processes (as perf by default) or threads (perf's `--thread`).
    #[arg(long, value_enum, default_value_t = Tasks::Processes)]
    pub tasks: Tasks,
    /// Pipes instead of socketpairs.
    #[arg(long)]
    pub pipe: bool,
    /// Runs, for the confidence interval.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub repeats: usize,
    /// Use only these CPUs (taskset syntax); the scheduler places the tasks among them.
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// Pin each task to one of the CPUs, round-robin, instead of letting the scheduler place
    /// them.
    #[arg(long)]
    pub spread: bool,
    /// Skip the check for other load before measuring.
    #[arg(long)]
    pub no_load_check: bool,
    /// `--json`, `--html FILE`.
    #[command(flatten)]
    pub output: crate::emit::OutputArgs,
}

/// Tasks above which a run would exhaust file descriptors or the process table of a small box.
const MAX_TASKS: usize = 4096;

/// The messaging experiment.
pub struct Messaging;

impl Experiment for Messaging {
    type Settings = MessagingSettings;
    type Report = MessagingReport;
    const KIND: Kind = Kind::Experiment("messaging");

    fn load_watch(
        machine: &Machine,
        settings: &MessagingSettings,
    ) -> Result<Option<crate::experiment::LoadWatch>> {
        Ok(Some(crate::experiment::LoadWatch::on(
            machine,
            settings.cpus.as_ref(),
            std::time::Duration::from_millis(300),
            settings.check_load,
        )))
    }

    fn measure(
        machine: &Machine,
        settings: &MessagingSettings,
        conditions: Conditions,
        progress: &Progress,
    ) -> Result<MessagingReport> {
        run::measure(machine, settings, conditions, progress)
    }

    fn conditions(r: &MessagingReport) -> &Conditions {
        &r.conditions
    }

    fn figures(r: &MessagingReport) -> Vec<Figure> {
        let id = format!(
            "groups={},senders={},tasks={:?},channel={:?}{}",
            r.settings.groups,
            r.settings.senders,
            r.settings.tasks,
            r.settings.channel,
            if r.settings.spread { ",spread" } else { "" }
        )
        .to_lowercase();
        let what = format!(
            "{} groups of {} senders and receivers",
            r.settings.groups, r.settings.senders
        );
        let mut out = Vec::new();
        out.extend(Figure::from_samples(
            format!("wall_s[{id}]"),
            format!("time to deliver every message, {what}"),
            Unit::Seconds,
            Direction::LowerIsBetter,
            r.runs.iter().map(|x| x.wall_s).collect(),
        ));
        out.extend(Figure::from_samples(
            format!("messages_per_s[{id}]"),
            format!("messages delivered per second, {what}"),
            Unit::PerSecond,
            Direction::HigherIsBetter,
            r.runs.iter().map(|x| x.messages_per_s).collect(),
        ));
        out
    }

    fn render_text(r: &MessagingReport, st: &Style) -> String {
        render_text(r, st)
    }

    fn render_html(r: &MessagingReport) -> String {
        page(r)
    }
}

impl Command for Messaging {
    type Args = Args;
    const ABOUT: &'static str = "Many short wakeups: groups of senders and receivers exchanging \
                                 100-byte messages, as `perf bench sched messaging` (hackbench).";

    fn settings(a: &Args, machine: &Machine) -> Result<MessagingSettings> {
        let mut s = MessagingSettings::standard();
        for (flag, v) in [
            ("--groups", a.groups),
            ("--senders", a.senders),
            ("--messages", a.messages),
            ("--repeats", a.repeats),
        ] {
            if v == 0 {
                return Err(bad_input(format!("{flag} must be at least 1")));
            }
        }
        crate::units::flag_count("repeats", a.repeats, 1, crate::units::MAX_REPEATS)?;
        let tasks = a.groups.saturating_mul(a.senders).saturating_mul(2);
        if tasks > MAX_TASKS {
            return Err(bad_input(format!(
                "--groups {} x --senders {} makes {tasks} tasks; keep it at most {MAX_TASKS}",
                a.groups, a.senders
            )));
        }
        if a.senders.saturating_mul(a.messages) > 1_000_000 {
            return Err(bad_input(
                "--senders x --messages is above 1000000 messages per receiver; give fewer",
            ));
        }
        (s.groups, s.senders, s.messages, s.repeats) = (a.groups, a.senders, a.messages, a.repeats);
        s.tasks = a.tasks;
        s.channel = if a.pipe {
            Channel::Pipe
        } else {
            Channel::Socket
        };
        if let Some(text) = &a.cpus {
            s.cpus = Some(machine.flag_cpus("--cpus", text)?);
        }
        s.spread = a.spread;
        s.check_load = !a.no_load_check;
        Ok(s)
    }

    fn output(a: &Args) -> &crate::emit::OutputArgs {
        &a.output
    }
}

fn ci(m: &Option<MeanCi>, f: impl Fn(f64) -> String) -> String {
    m.as_ref().map_or("-".into(), |m| {
        format!("{} ± {}", f(m.mean), f(m.ci95_half_width))
    })
}

fn render_text(r: &MessagingReport, st: &Style) -> String {
    let s = &r.settings;
    let tasks = match s.tasks {
        Tasks::Processes => "processes",
        Tasks::Threads => "threads",
    };
    let channel = match s.channel {
        Channel::Socket => "socketpairs",
        Channel::Pipe => "pipes",
    };
    let mut out = format!(
        "{} {} groups x {} senders -> {} receivers, {} messages of {MESSAGE_BYTES} B each, {tasks} over {channel}, CPUs {}{}\n",
        st.bold("cpulab messaging:"),
        s.groups,
        s.senders,
        s.senders,
        s.messages,
        s.cpus
            .as_ref()
            .map_or(r.conditions.allowed_cpus.to_string(), |c| c.to_string()),
        if s.spread {
            " (each task pinned, round-robin)"
        } else {
            ""
        }
    );
    out += &format!(
        "  time        {} s (95% CI over {} runs)\n  messages/s  {}\n",
        ci(&r.wall_s, |v| format!("{v:.4}")),
        r.runs.len(),
        ci(&r.messages_per_s, crate::units::thousands),
    );
    for (i, x) in r.runs.iter().enumerate() {
        out += &format!(
            "  run {}: {:.4} s, {} sent, {} received{}\n",
            i + 1,
            x.wall_s,
            x.messages_sent,
            x.messages_received,
            x.context_switches
                .map_or(String::new(), |c| format!(", {c} context switches"))
        );
    }
    for n in &r.conditions.notes {
        out += &format!("{}\n", st.dim(&format!("note: {n}")));
    }
    out
}

fn page(r: &MessagingReport) -> String {
    let bars: Vec<Bar> = r
        .runs
        .iter()
        .enumerate()
        .map(|(i, x)| Bar {
            label: format!("run {}", i + 1),
            value: x.wall_s,
            ci: None,
            accent: false,
        })
        .chain(r.wall_s.as_ref().map(|m| Bar {
            label: "mean".into(),
            value: m.mean,
            ci: Some((m.ci95_low, m.ci95_high)),
            accent: true,
        }))
        .collect();
    let rows: Vec<Vec<String>> = r
        .runs
        .iter()
        .enumerate()
        .map(|(i, x)| {
            vec![
                (i + 1).to_string(),
                format!("{:.4}", x.wall_s),
                x.messages_sent.to_string(),
                x.messages_received.to_string(),
                crate::units::thousands(x.messages_per_s),
                x.context_switches.map_or("n/a".into(), |c| c.to_string()),
            ]
        })
        .collect();
    let s = &r.settings;
    let body = maud::html! {
        (section(
            "Time to deliver every message",
            &format!("{} groups of {} senders and {} receivers, {} messages each; whiskers the 95% interval.",
                s.groups, s.senders, s.senders, s.messages),
            chart(svg::bars("Seconds per run", &bars, &|v| format!("{v:.3} s"))),
        ))
        section {
            h2 { "Every run" }
            (html::table(&["run", "seconds", "sent", "received", "messages/s", "context switches"], &rows, 1))
        }
        (html::conditions(&r.conditions, &[]))
    };
    html::page("cpulab messaging", html::facts_line(&r.conditions), body)
}
