//! The perf fallback of [`super::source`]: where BPF does not load, the same counts aggregated in
//! user space.
//!
//! Its cost is higher, and grows with the event rate instead of staying in the kernel: every
//! scheduler event on every CPU is copied into a per-CPU perf ring (one sample record of about
//! 100 bytes), a thread wakes every 20 ms to copy the rings out, decode each record and run
//! watch's analysis on it. `scripts/bench-watch.sh` measures that path as `--mechanism perf`
//! (watch's own figures). On KVM guests perf's rings also miss the records emitted while an idle
//! vCPU is being woken (see `docs/watch.md`), so cross-CPU wakeups are undercounted there. The
//! latency buckets come from watch's histograms (2 significant digits), so a latency within 1%
//! of a bucket bound may land in the next bucket.

use super::analyze::{Analysis, TaskInfo, Tasks};
use super::bpf::aggregate::{BUCKETS, bucket_of};
use super::mechanism::{self, Feed as Events, Tally};
use super::slots::{OTHER, Resolver, Slots};
use super::{Mechanism, SETTLE_NS, WatchSettings, monotonic_ns};
use crate::machine::Machine;
use crate::wakeups::{
    ClassCounts, LATENCY_BOUNDS_NS, Snapshot, Source, SourceOptions, TargetCounts,
};
use anyhow::Result;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Tasks resolved to target labels: a thread's process from /proc, the process's label from the
/// targets re-read every second (the label stands in the analysis' `comm`).
struct LabelTasks {
    root: std::path::PathBuf,
    resolver: Resolver,
    members: BTreeMap<i32, String>,
    tgid: HashMap<i32, Option<i32>>,
}

impl LabelTasks {
    fn refresh(&mut self) {
        self.members = self.resolver.members();
        // Threads of processes gone are forgotten, so the cache stays as large as what runs.
        if self.tgid.len() > 4 * self.members.len().max(1024) {
            self.tgid.clear();
        }
    }
}

impl Tasks for LabelTasks {
    fn learn(&mut self, tid: i32, tgid: i32) {
        self.tgid.insert(tid, Some(tgid));
    }

    fn lookup(&mut self, tid: i32) -> Option<TaskInfo> {
        if tid <= 0 {
            return None;
        }
        let root = &self.root;
        let tgid = *self.tgid.entry(tid).or_insert_with(|| {
            let status =
                std::fs::read_to_string(root.join("proc").join(tid.to_string()).join("status"));
            super::targets::parse_status(&status.ok()?).map(|(tgid, _)| tgid)
        });
        let tgid = tgid?;
        let label = self.members.get(&tgid).cloned();
        // Watching the whole machine, the watcher leaves itself out; named, it is counted.
        let whole = self.resolver.whole_machine();
        let watched = label.is_some() || (whole && tgid != std::process::id() as i32);
        Some(TaskInfo {
            tgid,
            comm: label.unwrap_or_else(|| OTHER.to_string()),
            watched,
        })
    }
}

/// What the reader thread has summed so far.
#[derive(Default)]
struct Sums {
    slots: Slots,
    /// Per label (`other` included), per class name: kept by label, so a slot that passes to
    /// another label (targets that follow the host) carries none of its counts along.
    counts: BTreeMap<String, BTreeMap<String, ClassCounts>>,
    events: u64,
    lost: u64,
    failed: Option<String>,
}

/// The perf fallback: a reader thread from [`PerfSource::open`] until dropped.
pub struct PerfSource {
    sums: Arc<Mutex<Sums>>,
    stop: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
    classes: Vec<String>,
    whole_machine: bool,
    /// Why the in-kernel aggregation was not used, where perf is `auto`'s fallback.
    fallback: Option<String>,
}

impl PerfSource {
    /// Records why the preferred mechanism was not used (see [`Source::fallback_reason`]).
    pub fn fell_back_because(&mut self, why: Option<String>) {
        self.fallback = why;
    }

    /// Opens the tracepoints through perf (root: their layouts come from tracefs) on a reader
    /// thread; a refusal is returned from here, before anything is counted.
    pub fn open(machine: &Machine, opts: &SourceOptions) -> Result<Self> {
        let resolver = Resolver::new(&machine.root, opts);
        let max = opts.max_targets.clamp(1, 1024);
        let mut slots = if resolver.whole_machine() {
            Slots::ranked(max)
        } else {
            Slots::new(max)
        };
        for label in resolver.named_labels() {
            slots.slot(&label);
        }
        let sums = Arc::new(Mutex::new(Sums {
            slots,
            ..Sums::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let whole_machine = resolver.whole_machine();
        let online = machine.topology.online.to_vec();
        let classes = machine.topology.classes_among(&online);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
        let machine = machine.clone();
        let (t_sums, t_stop) = (sums.clone(), stop.clone());
        let reader = std::thread::Builder::new()
            .name("cpulab-perf".into())
            .spawn(move || read_loop(&machine, resolver, &t_sums, &t_stop, ready_tx))?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = reader.join();
                return Err(e);
            }
            Err(_) => anyhow::bail!("the perf reader thread ended before opening"),
        }
        Ok(Self {
            sums,
            stop,
            reader: Some(reader),
            classes: classes.iter().map(|c| c.as_str().to_string()).collect(),
            whole_machine,
            fallback: None,
        })
    }
}

/// The reader thread: opens perf, then drains, analyses and folds every 20 ms until `stop`.
fn read_loop(
    machine: &Machine,
    resolver: Resolver,
    sums: &Mutex<Sums>,
    stop: &AtomicBool,
    ready: std::sync::mpsc::Sender<Result<()>>,
) {
    let settings = WatchSettings {
        mechanism: Mechanism::Perf,
        kernel_filter: false,
        ..WatchSettings::default()
    };
    let cpus = machine.topology.online.to_vec();
    let opened = (|| -> Result<Events> {
        let root_user = nix::unistd::geteuid().is_root();
        let formats = mechanism::read_formats(root_user, super::PERF_PERMISSION_LINE)?;
        let decoder =
            super::events::Decoder::new(&formats[0], &formats[1], &formats[2], &formats[3])
                .map_err(|e| anyhow::anyhow!(e))?;
        let (tracer, _, _) = mechanism::open_perf(machine, &settings, &decoder, &cpus)?;
        let events = Events::Perf(tracer, decoder);
        events.enable()?;
        Ok(events)
    })();
    let mut events = match opened {
        Ok(e) => {
            let _ = ready.send(Ok(()));
            e
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let mut tasks = LabelTasks {
        root: machine.root.clone(),
        resolver,
        members: BTreeMap::new(),
        tgid: HashMap::new(),
    };
    tasks.refresh();
    let mut analysis = Analysis::new(&machine.topology);
    let mut pending = Vec::new();
    let mut tally = Tally::default();
    let mut last_refresh = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
        events.drain(&mut pending, &mut tally);
        for (tid, tgid) in tally.threads.drain() {
            tasks.learn(tid, tgid);
        }
        pending.sort_by_key(|t: &super::events::Timed| t.time_ns);
        let cutoff = monotonic_ns().saturating_sub(SETTLE_NS);
        let ready = pending.partition_point(|t| t.time_ns <= cutoff);
        for ev in pending.drain(..ready) {
            analysis.feed(&ev, &mut tasks);
        }
        if last_refresh.elapsed() >= super::source::REFRESH {
            last_refresh = Instant::now();
            if let Ok(mut s) = sums.lock() {
                fold(&mut analysis, &mut tally, &mut s);
                tasks.refresh();
                follow(&tasks.members, &mut s);
            }
        }
    }
    // The events close with `events`: detached when this thread ends.
}

/// Gives up the slots of labels no longer among the members (targets that follow the host):
/// their counts stay under their label, so a slot is settled at once.
fn follow(members: &BTreeMap<i32, String>, s: &mut Sums) {
    let keep: std::collections::HashSet<&str> = members.values().map(String::as_str).collect();
    s.slots.release_all_but(&keep);
    for (slot, _) in s.slots.leaving() {
        s.slots.settle(slot);
    }
    if s.counts.len() > super::ledger::CARRIED_REMEMBERED {
        let held: Vec<String> = s.slots.held().into_iter().map(|(l, _)| l).collect();
        s.counts.retain(|l, _| l == OTHER || held.contains(l));
    }
}

/// Moves what the analysis counted into the sums, so the analysis holds one second at most.
fn fold(analysis: &mut Analysis<'_>, tally: &mut Tally, s: &mut Sums) {
    for (_, p) in std::mem::take(&mut analysis.processes) {
        let label = if s.slots.slot(&p.comm) == s.slots.other() {
            OTHER.to_string()
        } else {
            p.comm
        };
        let classes = s.counts.entry(label).or_default();
        for (class, acc) in p.classes {
            let c = classes
                .entry(class.as_str().to_string())
                .or_insert_with(|| ClassCounts {
                    buckets: vec![0; LATENCY_BOUNDS_NS.len()],
                    ..ClassCounts::default()
                });
            c.to_idle += acc.to_idle;
            c.to_busy += acc.wakeups - acc.to_idle;
            c.sum_ns += acc.sum_ns;
            for v in acc.latency.iter_recorded() {
                let n = v.count_since_last_iteration();
                let b = bucket_of(v.value_iterated_to());
                if b < BUCKETS - 1 {
                    c.buckets[b] += n;
                }
                c.count += n;
            }
        }
    }
    analysis.pairs.clear();
    s.events += std::mem::take(&mut analysis.events);
    s.lost += tally.lost.values().sum::<u64>();
    tally.lost.clear();
    tally.delivered.clear();
    tally.idle.clear();
}

impl Source for PerfSource {
    fn mechanism(&self) -> &str {
        "perf"
    }

    fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    fn snapshot(&mut self) -> Result<Snapshot> {
        let s = self
            .sums
            .lock()
            .map_err(|_| anyhow::anyhow!("the perf reader thread panicked"))?;
        if let Some(why) = &s.failed {
            anyhow::bail!("the perf reader stopped: {why}");
        }
        let mut named: Vec<String> = s.slots.held().into_iter().map(|(l, _)| l).collect();
        if self.whole_machine || s.slots.dropped() > 0 {
            named.push(OTHER.to_string());
        }
        let targets = named
            .into_iter()
            .map(|label| {
                let have = s.counts.get(&label);
                let classes = self
                    .classes
                    .iter()
                    .map(|c| {
                        let counts =
                            have.and_then(|h| h.get(c))
                                .cloned()
                                .unwrap_or_else(|| ClassCounts {
                                    buckets: vec![0; LATENCY_BOUNDS_NS.len()],
                                    ..ClassCounts::default()
                                });
                        (c.clone(), counts)
                    })
                    .collect();
                TargetCounts {
                    target: label,
                    classes,
                }
            })
            .collect();
        Ok(Snapshot {
            targets,
            events_seen: s.events,
            events_lost: s.lost,
            targets_dropped: s.slots.dropped(),
            programs: Vec::new(),
            latency_sample: 1,
            attach_every: 1,
            attached_ns: 0,
        })
    }
}

impl Drop for PerfSource {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.reader.take() {
            let _ = t.join();
        }
    }
}
