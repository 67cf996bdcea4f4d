//! `cpulab watch`: what placement costs a live application, without restarting it.
//!
//! The other experiments start their own processes; this one attaches to processes already
//! running (or to a command it starts) and reads the kernel's scheduler tracepoints for a
//! window: who wakes whom, on which CPU each wakeup lands relative to its waker, how long the
//! woken task waits before it runs, per placement class. See [`ring`] for the mechanism and
//! why, [`aggregate`] for how a wakeup is followed, [`report`] for the schema.
//!
//! Halts and IPIs come from the cpuidle and /proc/interrupts counters around the window (one
//! reading before, one after: no per-event cost), on the CPUs the watched tasks used.

pub mod aggregate;
pub mod format;
pub mod render;
pub mod report;
pub mod ring;
mod target;

use crate::counters::SystemSnapshot;
use crate::error::bad_input;
use crate::experiment::{Direction, Experiment, Figure, Progress, Unit};
use crate::machine::{Conditions, Machine};
use crate::output::Style;
use crate::report::envelope::Kind;
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use report::WatchReport;
pub use target::Target;

/// Validated settings.
#[derive(Clone, Debug)]
pub struct WatchSettings {
    pub target: Target,
    pub duration: Duration,
}

/// The experiment.
pub struct Watch;

const TRACEFS: &str = "sys/kernel/tracing";

/// Mounts tracefs for the window when it is not mounted; unmounts on drop.
struct TracefsMount {
    path: PathBuf,
    mounted_by_us: bool,
}

impl TracefsMount {
    fn ensure(root: &Path) -> Result<Self> {
        let path = root.join(TRACEFS);
        if path.join("events").is_dir() {
            return Ok(Self {
                path,
                mounted_by_us: false,
            });
        }
        if !nix::unistd::geteuid().is_root() {
            // Unreadable (tracefs is root-only by default) or not mounted: either way root is
            // what it takes.
            return Err(bad_input(permission_line()));
        }
        let c = |s: &str| std::ffi::CString::new(s).map_err(|e| anyhow::anyhow!("{e}"));
        let target = c(&path.to_string_lossy())?;
        let (src, fstype) = (c("nodev")?, c("tracefs")?);
        // SAFETY: NUL-terminated strings that outlive the call; no data argument.
        let r = unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if r != 0 {
            return Err(anyhow::anyhow!(
                "mounting tracefs at {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(Self {
            path,
            mounted_by_us: true,
        })
    }

    fn format(&self, event: &str) -> Result<format::Format> {
        let p = self.path.join("events").join(event).join("format");
        let text = std::fs::read_to_string(&p).map_err(|e| {
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                bad_input(permission_line())
            } else {
                anyhow::anyhow!("{}: {e}", p.display())
            }
        })?;
        format::parse_format(&text)
            .ok_or_else(|| anyhow::anyhow!("{}: not a tracepoint format", p.display()))
    }
}

impl Drop for TracefsMount {
    fn drop(&mut self) {
        if self.mounted_by_us
            && let Ok(p) = std::ffi::CString::new(self.path.to_string_lossy().as_bytes())
        {
            // SAFETY: a NUL-terminated path; MNT_DETACH leaves nothing busy behind.
            unsafe { libc::umount2(p.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

fn permission_line() -> String {
    "cpulab watch needs root (or CAP_PERFMON with tracefs mounted and readable): run it with \
     sudo, or `sudo setcap cap_perfmon,cap_dac_read_search+ep $(command -v cpulab)`"
        .to_string()
}

fn halt_poll_ns(root: &Path) -> Option<u64> {
    std::fs::read_to_string(root.join("sys/module/haltpoll/parameters/guest_halt_poll_ns"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn cpuidle_driver(root: &Path) -> Option<String> {
    let t = std::fs::read_to_string(root.join("sys/devices/system/cpu/cpuidle/current_driver"));
    t.ok().map(|s| s.trim().to_string())
}

impl Experiment for Watch {
    type Settings = WatchSettings;
    type Report = WatchReport;
    const KIND: Kind = Kind::Watch;

    fn run(machine: &Machine, s: &WatchSettings, progress: &Progress) -> Result<WatchReport> {
        let conditions = Conditions::now(machine);
        let mount = TracefsMount::ensure(&machine.root)?;
        if mount.mounted_by_us {
            progress.note("mounted tracefs for the window; it is unmounted on exit");
        }
        let decoder = format::Decoder::new(
            mount.format("sched/sched_waking")?,
            mount.format("sched/sched_wakeup")?,
            mount.format("sched/sched_switch")?,
            mount.format("sched/sched_migrate_task")?,
        )
        .map_err(anyhow::Error::msg)?;
        let mut rings = ring::Rings::open(&decoder.ids(), machine.topology.online.iter()).map_err(
            |e| match e {
                ring::OpenError::Denied => bad_input(permission_line()),
                ring::OpenError::Other(m) => anyhow::anyhow!(m),
            },
        )?;
        crate::pair::signals::install();
        // Recording starts before a command is started, so its whole life is seen.
        let before = SystemSnapshot::take(&machine.root);
        let started = Instant::now();
        rings.enable();
        let mut live = target::Live::start(&s.target, &machine.root)?;
        let mut resolver = target::ProcResolver::new(&s.target, &machine.root, live.pids());
        let topo = machine.topology.clone();
        let mut agg = aggregate::Aggregator::new(move |a, b| topo.class(a, b));

        progress.step(&format!(
            "watching {} for {:.1} s",
            s.target.describe(),
            s.duration.as_secs_f64()
        ));
        let mut records = Vec::new();
        let mut queue: Vec<(u64, u32, Vec<u8>)> = Vec::new();
        let mut lost = 0u64;
        let mut last_alive_check = Instant::now();
        let ended_by = loop {
            std::thread::sleep(Duration::from_millis(10));
            let watermark = ring::monotonic_ns().saturating_sub(2_000_000);
            rings.drain(&mut records);
            Self::process(
                &decoder,
                &mut agg,
                &mut resolver,
                &mut records,
                &mut queue,
                &mut lost,
                Some(watermark),
            );
            if crate::pair::signals::pending().is_some() {
                break "interrupted";
            }
            if started.elapsed() >= s.duration {
                break "duration";
            }
            if last_alive_check.elapsed() >= Duration::from_millis(100) {
                last_alive_check = Instant::now();
                if let Some(why) = live.ended() {
                    break why;
                }
            }
        };
        let window = started.elapsed();
        let after = SystemSnapshot::take(&machine.root);
        rings.drain(&mut records);
        Self::process(
            &decoder,
            &mut agg,
            &mut resolver,
            &mut records,
            &mut queue,
            &mut lost,
            None,
        );
        drop(rings);
        drop(live);
        drop(mount);
        if lost > 0 {
            progress.warn(&format!(
                "the kernel dropped {lost} trace records (cpulab read too slowly): figures \
                 undercount"
            ));
        }
        Ok(Self::assemble(
            machine, s, conditions, agg, lost, window, ended_by, &before, &after,
        ))
    }

    fn conditions(r: &WatchReport) -> &Conditions {
        &r.conditions
    }

    fn figures(r: &WatchReport) -> Vec<Figure> {
        let mut v = Vec::new();
        for g in &r.groups {
            v.push(Figure::single(
                format!("wakeups_per_s[group={}]", g.name),
                format!("{}: wakeups per second", g.name),
                Unit::PerSecond,
                Direction::Neither,
                g.wakeups_per_s,
            ));
            for c in &g.classes {
                v.push(Figure::single(
                    format!("wakeup_share[group={},class={}]", g.name, c.class),
                    format!("{}: share of wakeups {}", g.name, c.class),
                    Unit::Share,
                    Direction::Neither,
                    c.share,
                ));
                v.push(Figure::single(
                    format!("wakeup_latency_p50_ns[group={},class={}]", g.name, c.class),
                    format!("{}: wakeup-to-run p50, {}", g.name, c.class),
                    Unit::Nanoseconds,
                    Direction::LowerIsBetter,
                    c.latency.p50_ns as f64,
                ));
            }
        }
        v.push(Figure::single(
            "lost_records",
            "trace records lost",
            Unit::Count,
            Direction::LowerIsBetter,
            r.lost_records as f64,
        ));
        v
    }

    fn render_text(r: &WatchReport, style: &Style) -> String {
        render::text(r, style)
    }

    fn render_html(r: &WatchReport) -> String {
        render::html(r)
    }
}

impl Watch {
    /// Decodes queued records up to `watermark` (all of them with `None`), in time order.
    #[allow(clippy::too_many_arguments)]
    fn process<C: Fn(u32, u32) -> crate::topology::PlacementClass>(
        decoder: &format::Decoder,
        agg: &mut aggregate::Aggregator<C>,
        resolver: &mut target::ProcResolver,
        records: &mut Vec<ring::Record>,
        queue: &mut Vec<(u64, u32, Vec<u8>)>,
        lost: &mut u64,
        watermark: Option<u64>,
    ) {
        for r in records.drain(..) {
            match r {
                ring::Record::Sample {
                    time_ns, cpu, raw, ..
                } => queue.push((time_ns, cpu, raw)),
                ring::Record::Lost(n) => *lost += n,
            }
        }
        queue.sort_by_key(|(t, cpu, _)| (*t, *cpu));
        let upto = match watermark {
            Some(w) => queue.partition_point(|(t, _, _)| *t <= w),
            None => queue.len(),
        };
        for (t, cpu, raw) in queue.drain(..upto) {
            if let Some(ev) = decoder.decode(&raw) {
                agg.feed(&ev, cpu, t, resolver);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble<C: Fn(u32, u32) -> crate::topology::PlacementClass>(
        machine: &Machine,
        s: &WatchSettings,
        conditions: Conditions,
        agg: aggregate::Aggregator<C>,
        lost: u64,
        window: Duration,
        ended_by: &str,
        before: &SystemSnapshot,
        after: &SystemSnapshot,
    ) -> WatchReport {
        let window_s = window.as_secs_f64().max(1e-9);
        let mut groups: Vec<_> = agg
            .groups
            .iter()
            .map(|(n, g)| report::group(n, g, window_s))
            .filter(|g| g.wakeups + g.unattributed_wakeups > 0 || g.on_cpu_ns > 0)
            .collect();
        groups.sort_by(|a, b| b.wakeups.cmp(&a.wakeups).then(a.name.cmp(&b.name)));
        let mut pairs: Vec<_> = agg
            .pairs
            .iter()
            .map(|((w, e), p)| report::pair(w, e, p, window_s))
            .collect();
        pairs.sort_by_key(|p| std::cmp::Reverse(p.wakeups));
        pairs.truncate(10);
        let cpus: crate::cpulist::CpuSet = groups
            .iter()
            .flat_map(|g| g.cpus_used.iter().collect::<Vec<_>>())
            .collect();
        let delta = before.delta(after, &cpus);
        let wakeups: u64 = groups
            .iter()
            .map(|g| g.wakeups + g.unattributed_wakeups)
            .sum();
        let per = |n: u64| (wakeups > 0).then(|| n as f64 / wakeups as f64);
        let ipis: std::collections::BTreeMap<String, u64> = ["RES", "CAL", "IWI", "TLB"]
            .iter()
            .filter(|k| delta.interrupts.contains_key(**k))
            .map(|k| (k.to_string(), delta.interrupt_total(k)))
            .collect();
        let ipi_total: u64 = ipis.values().sum();
        let idle = (!delta.idle_entries.is_empty()).then(|| delta.idle_entries_total());
        let mechanism = report::Mechanism {
            cpus,
            idle_entries: idle,
            idle_entries_per_wakeup: idle.and_then(per),
            ipis_per_wakeup: (!ipis.is_empty()).then(|| per(ipi_total)).flatten(),
            ipis,
            steal_pct: (!delta.cpu_time.is_empty()).then(|| delta.steal_pct()),
            guest_halt_poll_ns: halt_poll_ns(&machine.root),
            cpuidle_driver: cpuidle_driver(&machine.root),
            unavailable: delta.unavailable.clone(),
        };
        let same_cpu = {
            let (n, sum) = groups
                .iter()
                .flat_map(|g| &g.classes)
                .filter(|c| c.class == crate::topology::PlacementClass::SameCpu)
                .fold((0u64, 0.0), |(n, s), c| {
                    (n + c.wakeups, s + c.latency.mean_ns * c.wakeups as f64)
                });
            // Too few same-CPU wakeups make no baseline.
            (n >= 100).then(|| sum / n as f64)
        };
        let estimate = pairs.iter().find_map(|p| report::estimate(p, same_cpu));
        WatchReport {
            conditions,
            target: s.target.describe(),
            window_s,
            ended_by: ended_by.to_string(),
            mechanism_used: "perf_event_open tracepoints (sched_waking, sched_wakeup, \
                             sched_switch, sched_migrate_task), one ring buffer per CPU; halts \
                             and IPIs from cpuidle and /proc/interrupts counters around the window"
                .to_string(),
            events: agg.events,
            lost_records: lost,
            groups,
            pairs,
            mechanism,
            estimate,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::format::SchedEvent;
    use super::ring::{Record, parse_records};

    const RECORDS: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/watch/records.bin"
    );

    /// Raw ring-buffer bytes recorded on a 6.18 kernel (`cargo test capture_records --
    /// --ignored` as root, with the same formats in tests/fixtures/watch), decoded with the
    /// layouts of that kernel's format files.
    #[test]
    fn recorded_ring_bytes_decode_into_every_event_kind() {
        let bytes = std::fs::read(RECORDS).expect("fixture");
        let mut recs = Vec::new();
        parse_records(&bytes, &mut recs);
        assert!(recs.len() > 20, "{} records", recs.len());
        let d = super::format::tests::decoder();
        let (mut waking, mut wakeup, mut switch) = (0, 0, 0);
        for r in &recs {
            let Record::Sample { raw, cpu, .. } = r else {
                continue;
            };
            assert!(*cpu < 2, "this machine has 2 CPUs");
            match d.decode(raw).expect("every recorded sample is one of ours") {
                SchedEvent::Waking { wakee, .. } => {
                    assert!(wakee > 0);
                    waking += 1
                }
                SchedEvent::Wakeup { target_cpu, wakee } => {
                    assert!(target_cpu < 2 && wakee > 0);
                    wakeup += 1
                }
                SchedEvent::Switch {
                    prev,
                    next,
                    prev_comm,
                    next_comm,
                    ..
                } => {
                    assert!(prev != next);
                    assert!(!prev_comm.is_empty() && !next_comm.is_empty());
                    switch += 1
                }
                SchedEvent::Migrate { dest_cpu, .. } => assert!(dest_cpu < 2),
            }
        }
        assert!(waking > 0 && wakeup > 0 && switch > 0);
        // Every wakeup was announced by a waking first (each is in the capture after its waking).
        assert!(waking >= wakeup);
    }

    /// Records a fresh fixture (root, tracefs mounted).
    #[test]
    #[ignore]
    fn capture_records() {
        let m = crate::machine::Machine::detect(std::path::Path::new("/")).unwrap();
        let dir = std::path::Path::new("/sys/kernel/tracing/events/sched");
        let f = |n: &str| {
            super::format::parse_format(
                &std::fs::read_to_string(dir.join(n).join("format")).unwrap(),
            )
            .unwrap()
        };
        let d = super::format::Decoder::new(
            f("sched_waking"),
            f("sched_wakeup"),
            f("sched_switch"),
            f("sched_migrate_task"),
        )
        .unwrap();
        let mut rings = super::ring::Rings::open(&d.ids(), m.topology.online.iter()).unwrap();
        rings.enable();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let bytes = rings.drain_bytes();
        std::fs::write(RECORDS, &bytes[..bytes.len().min(8192)]).unwrap();
    }
}
