//! One run: start both endpoints, pin them, time round trips, read counters, stop.
//!
//! Pin, then barrier, then time (core-to-core-latency's order): each end pins itself first,
//! and the warm-up's first round trip is the barrier, since the responder only answers once it
//! is pinned and in its loop. With two threads, both ends are threads of their own, so the
//! caller's affinity is never touched; with `--processes` the responder is a forked process
//! and the initiator is the calling thread (see `child` for why).

use super::clock::Timer;
use super::measure::{self, LoopLimits, Measured};
use super::observe::{Observer, RunCounters, TaskRef};
use super::plan::{Planned, cpus_in_use, cpus_of};
use super::report::{PingpongRun, Touch, WhereRan};
use super::settings::Endpoints;
use super::transport::{Abort, Connection, Initiator, Responder, SharedPage};
use crate::affinity;
use crate::cpulist::CpuSet;
use crate::stats::MeanCi;
use anyhow::{Context, Result, anyhow};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// Control page layout: the responder's thread id, its last CPU (+1, 0 = unknown), its errno.
pub(super) const RESPONDER_TID: usize = 0;
pub(super) const RESPONDER_CPU: usize = 64;
pub(super) const RESPONDER_ERRNO: usize = 128;

/// Everything one run needs.
pub struct RunSpec<'a> {
    pub root: &'a Path,
    pub planned: Planned,
    pub endpoints: Endpoints,
    /// The CPUs the experiment may use (unpinned ends may run on any of them).
    pub cpus: &'a CpuSet,
    pub limits: LoopLimits,
    /// Open perf events on both endpoints for the window.
    pub perf_counters: bool,
    /// What the loop reads once per round trip.
    pub timer: Timer,
    /// Bytes touched after each pong (0: none).
    pub touch_bytes: u64,
}

impl RunSpec<'_> {
    /// The initiator's (or the responder's) CPU when pinned, else every CPU it may use.
    pub(super) fn affinity(&self, initiator: bool) -> CpuSet {
        let p = self.planned.placement;
        match if initiator {
            p.initiator()
        } else {
            p.responder()
        } {
            Some(cpu) => CpuSet::from_iter_u32([cpu]),
            None => self.cpus.clone(),
        }
    }

    /// True when the scheduler places an end, so where both ran is tracked.
    pub(super) fn tracks_where(&self) -> bool {
        self.planned.placement.has_free_end()
    }
}

/// What the initiator brings back.
pub(super) struct Outcome {
    warmup_round_trips: u64,
    measured: Measured,
    counters: RunCounters,
    where_ran: Option<WhereRan>,
}

/// The responder's loop: answer until told to stop; optionally publish the CPU after each
/// answer. Allocation-free, so a forked child may run it.
pub(super) fn respond(
    responder: &mut dyn Responder,
    cpu_slot: Option<&AtomicU32>,
) -> std::io::Result<()> {
    match cpu_slot {
        None => while responder.answer()? {},
        Some(slot) => {
            while responder.answer()? {
                let cpu = crate::affinity::current_cpu().map_or(0, |c| c + 1);
                slot.store(cpu, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

/// Calls the abort when dropped, unless defused.
struct AbortOnDrop(Option<Arc<dyn Abort>>);

impl AbortOnDrop {
    fn defuse(mut self) {
        self.0 = None;
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(a) = self.0.take() {
            a.abort();
        }
    }
}

pub(super) fn run_threads(
    spec: &RunSpec,
    conn: Connection,
    control: &SharedPage,
) -> Result<Outcome> {
    let Connection {
        initiator,
        mut responder,
        abort,
    } = conn;
    let responder_cpus = spec.affinity(false);
    let pid = std::process::id() as i32;
    std::thread::scope(|s| {
        let resp = s.spawn(move || -> Result<()> {
            // Unblocks the initiator unless the loop ends normally, even on a panic.
            let guard = AbortOnDrop(Some(abort));
            affinity::set(0, &responder_cpus)?;
            control
                .u32_at(RESPONDER_TID)
                .store(affinity::gettid() as u32, Ordering::SeqCst);
            let slot = spec.tracks_where().then(|| control.u32_at(RESPONDER_CPU));
            respond(&mut *responder, slot).context("responder")?;
            guard.defuse();
            Ok(())
        });
        let ini = s.spawn(|| {
            let peer = || TaskRef {
                pid,
                tid: Some(control.u32_at(RESPONDER_TID).load(Ordering::SeqCst) as i32),
            };
            initiator_side(spec, initiator, &peer, control)
        });
        let out = ini
            .join()
            .map_err(|_| anyhow!("the initiator thread panicked"))?;
        let resp = resp
            .join()
            .map_err(|_| anyhow!("the responder thread panicked"))?;
        match (out, resp) {
            (Ok(o), Ok(())) => Ok(o),
            (_, Err(e)) => Err(e),
            (Err(e), Ok(())) => Err(e),
        }
    })
}

/// Pins, warms up, opens counters, times, reads counters; always tells the responder to stop.
pub(super) fn initiator_side(
    spec: &RunSpec,
    mut ini: Box<dyn Initiator>,
    peer: &dyn Fn() -> TaskRef,
    control: &SharedPage,
) -> Result<Outcome> {
    let r = timed(spec, &mut *ini, peer, control);
    let _ = ini.stop();
    r
}

fn timed(
    spec: &RunSpec,
    ini: &mut dyn Initiator,
    peer: &dyn Fn() -> TaskRef,
    control: &SharedPage,
) -> Result<Outcome> {
    affinity::set(0, &spec.affinity(true)).context("pinning the initiator")?;
    let (warmup_round_trips, batch) = measure::warm_up(ini, &spec.limits)?;
    let me = TaskRef {
        pid: std::process::id() as i32,
        tid: Some(affinity::gettid()),
    };
    let observer = Observer::open(
        spec.root,
        cpus_in_use(spec.planned.placement, spec.cpus),
        [me, peer()],
        spec.perf_counters,
    );
    let mut sampler = spec.tracks_where().then(WhereRan::default);
    let responder_cpu = control.u32_at(RESPONDER_CPU);
    let mut sample = || {
        if let Some(w) = sampler.as_mut() {
            sample_where(w, responder_cpu);
        }
    };
    // Written once here, so no page is first faulted in a timed batch.
    let mut work = touch_buffer(spec.touch_bytes)?;
    let work = (!work.is_empty()).then_some(work.as_mut_slice());
    let window = observer.begin();
    let measured = measure::measure(ini, &spec.limits, batch, spec.timer, work, &mut sample)?;
    let counters = observer.end(window, measured.round_trips);
    let where_ran = sampler.map(|mut w| {
        let migrations = |e: &super::observe::EndpointCounters| {
            e.task
                .and_then(|t| t.migrations)
                .or_else(|| e.perf.get("cpu-migrations").copied())
        };
        w.initiator_migrations = migrations(&counters.initiator);
        w.responder_migrations = migrations(&counters.responder);
        w
    });
    Ok(Outcome {
        warmup_round_trips,
        measured,
        counters,
        where_ran,
    })
}

/// The `--touch` buffer, written whole. Its size was checked against the memory free here
/// before any run; an allocation that fails all the same is an error, not an abort.
fn touch_buffer(bytes: u64) -> Result<Vec<u64>> {
    let words = usize::try_from(bytes.div_ceil(8))
        .map_err(|_| anyhow::anyhow!("--touch {bytes} bytes does not fit in this address space"))?;
    let mut work = Vec::new();
    work.try_reserve_exact(words)
        .map_err(|e| anyhow::anyhow!("allocating the --touch buffer of {bytes} bytes: {e}"))?;
    work.resize(words, 1u64);
    Ok(work)
}

/// One sample of where both ends are: this thread now, the responder at its last answer.
fn sample_where(w: &mut WhereRan, responder_cpu: &AtomicU32) {
    let (Some(mine), Some(theirs)) = (
        affinity::current_cpu(),
        responder_cpu.load(Ordering::Relaxed).checked_sub(1),
    ) else {
        return;
    };
    w.samples += 1;
    *w.initiator_cpus.entry(mine).or_insert(0) += 1;
    *w.responder_cpus.entry(theirs).or_insert(0) += 1;
    w.same_cpu_samples += u64::from(mine == theirs);
    w.same_cpu_share = w.same_cpu_samples as f64 / w.samples as f64;
}

pub(super) fn build_run(spec: &RunSpec, out: Outcome) -> PingpongRun {
    let m = out.measured;
    let (cpu_a, cpu_b) = cpus_of(spec.planned.placement);
    // One batch gives a zero-width interval with n = 1; none cannot happen (the loop times at
    // least one batch), but the exact mean is still derivable from the totals.
    let mean_rtt_ns = MeanCi::of(&m.batch_means_ns)
        .unwrap_or_else(|| MeanCi::single(m.measured_s * 1e9 / m.round_trips.max(1) as f64));
    PingpongRun {
        method: spec.planned.method,
        endpoints: spec.endpoints,
        placement: spec.planned.class,
        cpu_a,
        cpu_b,
        rtt: m.rtt,
        mean_rtt_ns,
        round_trips_per_s: if m.measured_s > 0.0 {
            m.round_trips as f64 / m.measured_s
        } else {
            0.0
        },
        round_trips: m.round_trips,
        measured_s: m.measured_s,
        warmup_round_trips: out.warmup_round_trips,
        batch_round_trips: m.batch_round_trips,
        batch_means_ns: m.batch_means_ns,
        ended_by: m.ended_by,
        p50_ratio_to_fastest: 1.0,
        where_ran: out.where_ran,
        counters: out.counters,
        touch: MeanCi::of(&m.touch_batch_means_ns).map(|mean_ns| Touch {
            bytes: spec.touch_bytes,
            mean_ns,
            batch_means_ns: m.touch_batch_means_ns,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_touch_buffer_covers_the_size_and_a_failed_allocation_is_an_error() {
        for (bytes, words) in [(0, 0), (1, 1), (8, 1), (9, 2), (64 << 10, 8192)] {
            let w = touch_buffer(bytes).unwrap();
            assert_eq!(w.len(), words, "{bytes} bytes");
            assert!(w.iter().all(|&x| x == 1), "written whole");
        }
        // More than any address space holds: `vec!` would abort the process here.
        let e = touch_buffer(u64::MAX).unwrap_err().to_string();
        assert!(e.contains("--touch buffer"), "{e}");
    }
}
