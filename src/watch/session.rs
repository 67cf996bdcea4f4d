//! A watch as a session: [`Session::open`] opens the events through the one front door
//! ([`super::open`]),
//! [`Session::enable`] starts the window (the system counters' first sample, the command under
//! watch), [`Session::read`] drains what arrived and feeds the analysis (as often as the caller
//! likes: `cpulab watch` every [`Session::poll_interval`]), and [`Session::close`] detaches
//! everything, then builds the report.
//!
//! `cpulab watch` and `doctor --comm/--pid` both drive one (through [`super::run`]); a
//! long-running consumer keeps one open. Nothing outlives it: every program, link, ring and perf
//! event is an owned descriptor, so dropping the session (a `?` on an error, a panic) detaches
//! them all, and an interrupt (SIGINT, SIGTERM, SIGHUP: `crate::signals`, installed once by the
//! dispatcher) makes the next `read` report the window ended, so the caller closes it and
//! reports what was seen.

use super::analyze::Analysis;
use super::events::Timed;
use super::mechanism::{Feed, Tally};
use super::{
    POLL, SETTLE_NS, Target, WatchReport, WatchSettings, bpf, mechanism, monotonic_ns, report,
    ring, targets, whole_records,
};
use crate::error::bad_input;
use crate::experiment::Progress;
use crate::machine::{Conditions, Machine};
use anyhow::Result;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// An open watch: the events are attached from [`Session::open`] until it is closed or dropped.
pub struct Session<'m> {
    machine: &'m Machine,
    settings: WatchSettings,
    source: Feed,
    cpus: Vec<u32>,
    /// Why BPF, the raw tracepoints, or their BTF-typed form were not used (for the report).
    refusals: super::open::Refusals,
    filters: Option<([String; 4], String)>,
    specs: Vec<ring::EventSpec>,
    /// Set by [`Session::close`] to end a window early; an interrupt is read from
    /// `crate::signals`, whose handlers the dispatcher installed once for the whole command.
    stop: AtomicBool,
    window: Option<Window<'m>>,
}

/// What [`Session::enable`] starts.
struct Window<'m> {
    conditions: Conditions,
    before: crate::counters::SystemSnapshot,
    started: Instant,
    deadline: Instant,
    child: Option<targets::Child>,
    target: Target,
    tasks: targets::LiveTasks,
    analysis: Analysis<'m>,
    pending: Vec<Timed>,
    tally: Tally,
    torn: u64,
    dump: Option<std::path::PathBuf>,
    last_refresh: Instant,
    ended: Option<String>,
    /// The aggregation's counts when the window began (`--mechanism bpf-counts`).
    counts_base: Option<crate::wakeups::Snapshot>,
}

impl<'m> Session<'m> {
    /// Opens the events through the one front door ([`super::open`]: BPF raw tracepoints,
    /// BPF tracepoint programs, perf, or the in-kernel counts, as the settings allow and the
    /// kernel takes them); a refusal the user can fix is one line (exit 2).
    pub fn open(machine: &'m Machine, s: &WatchSettings, progress: &Progress) -> Result<Self> {
        let opened = super::open::open(machine, &super::open::Request::Events(s))?;
        for note in &opened.notes {
            progress.note(note);
        }
        let cpus = machine.topology.online.to_vec();
        Ok(Self {
            machine,
            settings: s.clone(),
            source: opened.feed,
            cpus,
            refusals: opened.refusals,
            filters: opened.filters,
            specs: opened.specs,
            stop: AtomicBool::new(false),
            window: None,
        })
    }

    /// Shortens the window to `secs` (never lengthens it), before [`Session::enable`]: a caller
    /// with a deadline gives the window what opening left of it.
    pub fn shorten_window(&mut self, secs: f64) {
        self.settings.duration_s = self.settings.duration_s.min(secs);
    }

    /// Starts the window: the conditions and system counters' first sample, the events enabled,
    /// the command under watch started (after tracing began, so its first wakeups are seen).
    pub fn enable(&mut self, progress: &Progress) -> Result<()> {
        self.enable_under(Conditions::now(self.machine), progress)
    }

    /// [`Session::enable`] under conditions recorded by the caller (the experiment's start).
    pub fn enable_under(&mut self, conditions: Conditions, progress: &Progress) -> Result<()> {
        let machine = self.machine;
        let s = &self.settings;
        let before = crate::counters::SystemSnapshot::take(&machine.root);
        let started = Instant::now();
        self.source.enable()?;
        let counts_base = match &mut self.source {
            Feed::Counts(c) => Some(crate::wakeups::Source::snapshot(c.as_mut())?),
            _ => None,
        };
        let child = match &s.command {
            Some(argv) => Some(targets::Child::spawn(argv).map_err(bad_input)?),
            None => None,
        };
        if let Some(note) = child.as_ref().and_then(|c| c.0.note.as_deref()) {
            progress.warn(note);
        }
        let target = match &child {
            Some(c) => Target::Command(c.pid()),
            None => s.target.clone(),
        };
        progress.step(&format!(
            "watching {} for {:.1} s",
            target.describe(),
            s.duration_s
        ));
        self.window = Some(Window {
            conditions,
            before,
            started,
            deadline: started + Duration::from_secs_f64(s.duration_s),
            child,
            tasks: targets::LiveTasks::new(&machine.root, target.clone()),
            target,
            analysis: Analysis::new(&machine.topology),
            pending: Vec::new(),
            tally: Tally::default(),
            torn: 0,
            dump: s.dump_records.clone(),
            last_refresh: Instant::now(),
            ended: None,
            counts_base,
        });
        Ok(())
    }

    /// Drains what the events delivered and feeds the analysis every event old enough to be
    /// complete. Returns why the window ended once it has (elapsed, interrupted, the command or
    /// every watched process exited): the events are then stopped and fully drained.
    pub fn read(&mut self) -> Result<Option<String>> {
        let Some(w) = self.window.as_mut() else {
            anyhow::bail!("a watch session was read before it was enabled");
        };
        if let Some(ended) = &w.ended {
            return Ok(Some(ended.clone()));
        }
        let ended = if self.stop.load(Ordering::Relaxed) || crate::signals::pending().is_some() {
            Some("interrupted: reporting what was seen")
        } else if w.child.as_mut().is_some_and(|c| c.exited()) {
            Some("command exited")
        } else if let Target::Pids(p) = &w.target
            && p.iter().all(|pid| {
                !self
                    .machine
                    .root
                    .join("proc")
                    .join(pid.to_string())
                    .exists()
            })
        {
            Some("every watched process exited")
        } else if Instant::now() >= w.deadline {
            Some("window elapsed")
        } else {
            None
        };
        if ended.is_some() {
            // Stop the events before the last drain, so the counts read after it cover exactly
            // what could have been delivered.
            self.source.disable();
        }
        let cutoff = if ended.is_some() {
            u64::MAX
        } else {
            monotonic_ns().saturating_sub(SETTLE_NS)
        };
        if w.started.elapsed() > Duration::from_millis(300)
            && let Feed::Perf(tracer, decoder) = &mut self.source
            && let Some(path) = w.dump.take()
        {
            let bytes = tracer.drain_bytes();
            std::fs::write(&path, whole_records(&bytes, 32 * 1024))
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            let cpu = self.cpus.first().copied().unwrap_or(0);
            ring::parse_records(&bytes, |r| {
                mechanism::collect(decoder, cpu, r, &mut w.pending, &mut w.tally)
            });
        }
        w.torn += self.source.drain(&mut w.pending, &mut w.tally);
        for (tid, tgid) in w.tally.threads.drain() {
            crate::watch::analyze::Tasks::learn(&mut w.tasks, tid, tgid);
        }
        w.pending.sort_by_key(|t| t.time_ns);
        let ready = w.pending.partition_point(|t| t.time_ns <= cutoff);
        for ev in w.pending.drain(..ready) {
            w.analysis.feed(&ev, &mut w.tasks);
        }
        if w.last_refresh.elapsed() > Duration::from_secs(1) {
            w.tasks.refresh();
            w.last_refresh = Instant::now();
        }
        w.ended = ended.map(str::to_string);
        Ok(w.ended.clone())
    }

    /// How long to wait before the next [`Session::read`]: a ring an eighth full after one
    /// interval would overflow within a few more slow intervals on a busy machine, so it is
    /// drained ten times as often; never past the window's end.
    pub fn poll_interval(&self) -> Duration {
        let poll = if self.source.last_fill() > 0.125 {
            POLL / 10
        } else {
            POLL
        };
        match &self.window {
            Some(w) => poll.min(w.deadline.saturating_duration_since(Instant::now())),
            None => poll,
        }
    }

    /// Detaches everything, then builds the report of what was seen (a window not ended yet is
    /// ended here, as if interrupted).
    pub fn close(mut self) -> Result<WatchReport> {
        if self.window.as_ref().is_some_and(|w| w.ended.is_none()) {
            self.stop.store(true, Ordering::Relaxed);
            self.read()?;
        }
        let Some(mut w) = self.window.take() else {
            anyhow::bail!("a watch session was closed before it was enabled");
        };
        let machine = self.machine;
        let s = &self.settings;
        let interval_s = w.started.elapsed().as_secs_f64();
        w.analysis.finish(&mut w.tasks);
        if let (Feed::Counts(c), Some(base)) = (&mut self.source, &w.counts_base) {
            let now = crate::wakeups::Source::snapshot(c.as_mut())?;
            let lost = fill_from_counts(&mut w.analysis, base, &now);
            // The programs watch every CPU: the halts and IPIs around the window are all of them.
            w.analysis.cpus_involved = self.cpus.iter().copied().collect();
            *w.tally.lost.entry(0).or_default() += lost;
        }
        let counts = self.source.counts(&self.cpus, &mut w.tally);
        let bpf_kind = match &self.source {
            Feed::Bpf(p, _) => Some(p.kind),
            Feed::Perf(..) | Feed::Counts(_) => None,
        };
        let counts_only = matches!(self.source, Feed::Counts(_));
        // Detach before the second sample of the system counters, so the programs' own cost
        // ends inside the window.
        self.source.disable();
        let ended = w.ended.unwrap_or_else(|| "window elapsed".into());
        // Asked before the command is stopped: an exit cpulab caused is not the command's.
        let command = w.child.as_mut().map(|c| c.end(&ended));
        drop(w.child.take());
        let after = crate::counters::SystemSnapshot::take(&machine.root);
        let lost: u64 = w.tally.lost.values().sum();
        let delivery = report::delivery(&counts, &w.tally, &self.specs);
        let mut conditions = w.conditions;
        if report::incomplete(&delivery).is_some() {
            conditions.noisy = true;
        }
        let mechanism = if counts_only {
            report::COUNTS_MECHANISM.to_string()
        } else {
            self.describe(bpf_kind)
        };
        let r = report::build(report::Inputs {
            mechanism,
            per_event: !counts_only,
            delivery,
            lost_by_cpu: w.tally.lost.clone(),
            idle_switches: w
                .tally
                .idle
                .iter()
                .map(|(cpu, (to, from))| report::IdleSwitches {
                    cpu: *cpu,
                    to_idle: *to,
                    from_idle: *from,
                })
                .collect(),
            conditions,
            target: &w.target,
            requested_s: s.duration_s,
            interval_s,
            ended,
            command,
            lost,
            torn: w.torn,
            analysis: &w.analysis,
            before: &w.before,
            after: &after,
            root: &machine.root,
        });
        Ok(r)
    }

    /// The mechanism in words, for the report.
    fn describe(&self, bpf_kind: Option<bpf::Kind>) -> String {
        match bpf_kind {
            Some(bpf::Kind::TypedRaw) => format!(
                "eBPF programs on the BTF-typed raw tracepoints (tp_btf) sched_waking, \
                 sched_wakeup, sched_switch, sched_migrate_task, reading task fields with plain \
                 loads, each writing a {}-byte record per event into one BPF ring buffer ({} MiB); \
                 no in-kernel filter",
                bpf::RAW_RECORD,
                bpf::RING_BYTES >> 20
            ),
            Some(bpf::Kind::Raw) => format!(
                "eBPF programs on the raw tracepoints sched_waking, sched_wakeup, sched_switch, \
                 sched_migrate_task (task fields read with bpf_probe_read_kernel at offsets from the \
                 kernel's BTF), each writing a {}-byte record per event into one BPF ring buffer \
                 ({} MiB); no in-kernel filter (BTF-typed programs not used: {})",
                bpf::RAW_RECORD,
                bpf::RING_BYTES >> 20,
                self.refusals.typed.as_deref().unwrap_or("unknown")
            ),
            Some(bpf::Kind::Tracepoint) => format!(
                "eBPF programs on sched:sched_waking, sched_wakeup, sched_switch, \
                 sched_migrate_task, each copying every record into one BPF ring buffer ({} MiB); \
                 no in-kernel filter (raw tracepoints not used: {})",
                bpf::RING_BYTES >> 20,
                self.refusals.raw.as_deref().unwrap_or("unknown")
            ),
            None => {
                let mut m = format!(
                    "perf_event_open on every CPU: sched:sched_waking, sched_switch, sched_migrate_task \
                 sampled; sched_wakeup {}",
                    if self.settings.sample_wakeups {
                        "sampled (a check of each placement)"
                    } else {
                        "counted only"
                    }
                );
                if let Some((_, what)) = &self.filters {
                    m.push_str("; ");
                    m.push_str(what);
                }
                if let Some(why) = &self.refusals.bpf {
                    m.push_str(&format!("; BPF not used: {why}"));
                }
                m
            }
        }
    }
}

/// Puts what the aggregation counted between two snapshots where the report reads the
/// analysis: one row per target label (no pid: pid 0), its classes' wakeups, idle destinations,
/// latency sums and buckets (each recorded at its bucket's upper bound). Returns the events the
/// programs could not count.
fn fill_from_counts(
    a: &mut Analysis<'_>,
    base: &crate::wakeups::Snapshot,
    now: &crate::wakeups::Snapshot,
) -> u64 {
    use crate::wakeups::LATENCY_BOUNDS_NS;
    for t in &now.targets {
        let old = base.targets.iter().find(|o| o.target == t.target);
        let mut acc = super::analyze::ProcessAcc {
            comm: t.target.clone(),
            ..Default::default()
        };
        for (name, c) in &t.classes {
            let Some(class) = bpf::aggregate::CLASSES
                .iter()
                .find(|k| k.as_str() == name)
                .copied()
            else {
                continue;
            };
            let o = old.and_then(|o| o.classes.get(name));
            let sub = |f: fn(&crate::wakeups::ClassCounts) -> u64| f(c) - o.map_or(0, f);
            let wakeups = sub(|c| c.to_idle + c.to_busy);
            if wakeups == 0 {
                continue;
            }
            let mut x = super::analyze::ClassAcc::new();
            x.wakeups = wakeups;
            x.to_idle = sub(|c| c.to_idle);
            x.sum_ns = sub(|c| c.sum_ns);
            let mut in_buckets = 0;
            for (i, bound) in LATENCY_BOUNDS_NS.iter().enumerate() {
                let n = c.buckets[i] - o.map_or(0, |o| o.buckets[i]);
                in_buckets += n;
                let _ = x.latency.record_n(*bound, n);
            }
            let over = sub(|c| c.count).saturating_sub(in_buckets);
            let _ = x
                .latency
                .record_n(LATENCY_BOUNDS_NS[LATENCY_BOUNDS_NS.len() - 1] * 2, over);
            acc.runq_wait_ns += x.sum_ns;
            acc.classes.insert(class, x);
        }
        // Rows are keyed by name and pid: distinct labels stay distinct rows (the stand-in pids
        // are cleared from the report).
        let key = -(a.processes.len() as i32) - 1;
        a.processes.insert(key, acc);
    }
    a.events += now.events_seen - base.events_seen;
    now.events_lost - base.events_lost
}
