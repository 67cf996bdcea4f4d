//! One run: start both endpoints, pin them, time round trips, read counters, stop.
//!
//! Pin, then barrier, then time (core-to-core-latency's order): each end pins itself first,
//! and the warm-up's first round trip is the barrier, since the responder only answers once it
//! is pinned and in its loop. The initiator runs on its own thread so the caller's affinity is
//! never touched.
//!
//! With `--processes` the responder is a forked child. It gets PR_SET_PDEATHSIG, so it dies
//! with cpulab however cpulab ends (even SIGKILL), and between fork and `_exit` it only makes
//! system calls on memory prepared before the fork (no allocation, no locks), which is what
//! makes forking a threaded process safe. A reaper thread waits for it; if the child dies
//! early, the reaper unblocks the initiator instead of letting it wait forever.

use super::clock::Timer;
use super::measure::{self, LoopLimits, Measured};
use super::observe::{Observer, RunCounters, TaskRef};
use super::plan::{Planned, cpus_in_use, cpus_of};
use super::report::{PingpongRun, WhereRan};
use super::settings::{Endpoints, Placement};
use super::transport::{self, Abort, Connection, Initiator, Responder, SharedPage};
use crate::affinity;
use crate::cpulist::CpuSet;
use crate::stats::MeanCi;
use anyhow::{Context, Result, anyhow, bail};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

/// Control page layout: the responder's thread id, its last CPU (+1, 0 = unknown), its errno.
const RESPONDER_TID: usize = 0;
const RESPONDER_CPU: usize = 64;
const RESPONDER_ERRNO: usize = 128;

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
}

impl RunSpec<'_> {
    fn affinity(&self, initiator: bool) -> CpuSet {
        match self.planned.placement {
            Placement::Pinned { a, b } => CpuSet::from_iter_u32([if initiator { a } else { b }]),
            Placement::Unpinned => self.cpus.clone(),
        }
    }

    fn unpinned(&self) -> bool {
        self.planned.placement == Placement::Unpinned
    }
}

/// What the initiator brings back.
struct Outcome {
    warmup_round_trips: u64,
    measured: Measured,
    counters: RunCounters,
    where_ran: Option<WhereRan>,
}

/// Measures one method at one placement.
pub fn run_one(spec: &RunSpec) -> Result<PingpongRun> {
    let conn = transport::connect(spec.planned.method, spec.endpoints)
        .with_context(|| format!("cannot set up the {} transport", spec.planned.method))?;
    let control = SharedPage::new().context("cannot map the control page")?;
    let out = match spec.endpoints {
        Endpoints::Threads => run_threads(spec, conn, &control)?,
        Endpoints::Processes => run_processes(spec, conn, &control)?,
    };
    Ok(build_run(spec, out))
}

/// The responder's loop: answer until told to stop; optionally publish the CPU after each
/// answer. Allocation-free, so a forked child may run it.
fn respond(responder: &mut dyn Responder, cpu_slot: Option<&AtomicU32>) -> std::io::Result<()> {
    match cpu_slot {
        None => while responder.answer()? {},
        Some(slot) => {
            while responder.answer()? {
                // SAFETY: sched_getcpu has no preconditions (a vDSO/rseq read in glibc).
                let cpu = unsafe { libc::sched_getcpu() };
                slot.store((cpu + 1).max(0) as u32, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

fn run_threads(spec: &RunSpec, conn: Connection, control: &SharedPage) -> Result<Outcome> {
    let Connection {
        initiator,
        mut responder,
        abort,
    } = conn;
    let responder_cpus = spec.affinity(false);
    let pid = std::process::id() as i32;
    std::thread::scope(|s| {
        let resp = s.spawn(move || -> Result<()> {
            let r = affinity::set(0, &responder_cpus).and_then(|()| {
                control
                    .u32_at(RESPONDER_TID)
                    .store(affinity::gettid() as u32, Ordering::SeqCst);
                let slot = spec.unpinned().then(|| control.u32_at(RESPONDER_CPU));
                respond(&mut *responder, slot).context("responder")
            });
            // Dropping the responder closes streams; the rest need an explicit abort.
            drop(responder);
            if r.is_err()
                && let Some(a) = &abort
            {
                a.abort();
            }
            r
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

fn run_processes(spec: &RunSpec, conn: Connection, control: &SharedPage) -> Result<Outcome> {
    let Connection {
        initiator,
        responder,
        abort,
    } = conn;
    let mut set = nix::sched::CpuSet::new();
    for c in spec.affinity(false).iter() {
        set.set(c as usize)
            .with_context(|| format!("CPU {c} is beyond what sched_setaffinity supports"))?;
    }
    let parent = std::process::id() as i32;
    let track = spec.unpinned();
    // SAFETY: the child runs only `child_main`, which makes system calls on memory prepared
    // before the fork and never returns.
    match unsafe { nix::unistd::fork() }.context("fork failed")? {
        nix::unistd::ForkResult::Child => child_main(responder, &set, track, control, parent),
        nix::unistd::ForkResult::Parent { child } => {
            drop(responder);
            let reaper = Reaper::start(child, abort)?;
            let peer = || TaskRef {
                pid: child.as_raw(),
                tid: None,
            };
            let out = std::thread::scope(|s| {
                s.spawn(|| initiator_side(spec, initiator, &peer, control))
                    .join()
                    .map_err(|_| anyhow!("the initiator thread panicked"))
            });
            let status = reaper.finish();
            let out = out?;
            match (out, status) {
                (Ok(o), Ok(0)) => Ok(o),
                (Err(e), Ok(0)) => Err(e),
                (r, Ok(code)) => {
                    let errno = control.u32_at(RESPONDER_ERRNO).load(Ordering::SeqCst) as i32;
                    let why = std::io::Error::from_raw_os_error(errno);
                    let msg = format!("the responder process exited with status {code} ({why})");
                    Err(match r {
                        Err(r) => r.context(msg),
                        Ok(_) => anyhow!(msg),
                    })
                }
                (Ok(_), Err(e)) => Err(e),
                (Err(r), Err(e)) => Err(r.context(format!("{e:#}"))),
            }
        }
    }
}

/// The forked responder. Never returns.
fn child_main(
    mut responder: Box<dyn Responder>,
    set: &nix::sched::CpuSet,
    track: bool,
    control: &SharedPage,
    parent: i32,
) -> ! {
    let fail = |code: i32| -> ! {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        control
            .u32_at(RESPONDER_ERRNO)
            .store(errno as u32, Ordering::SeqCst);
        // SAFETY: _exit ends the child at once, without running the parent's destructors.
        unsafe { libc::_exit(code) }
    };
    // SAFETY: plain system calls. PDEATHSIG first, then check the parent did not die before
    // it took effect (then we were reparented).
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::getppid() != parent {
            libc::_exit(0);
        }
    }
    if nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), set).is_err() {
        fail(2);
    }
    let slot = track.then(|| control.u32_at(RESPONDER_CPU));
    if respond(&mut *responder, slot).is_err() {
        fail(1);
    }
    // SAFETY: as above.
    unsafe { libc::_exit(0) }
}

/// Waits for the child; unblocks the initiator if the child ends before the run does; kills
/// the child if it outlives the run.
struct Reaper {
    child: nix::unistd::Pid,
    finished: Arc<AtomicBool>,
    status: std::sync::mpsc::Receiver<Result<i32>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Reaper {
    fn start(child: nix::unistd::Pid, abort: Option<Arc<dyn Abort>>) -> Result<Self> {
        let finished = Arc::new(AtomicBool::new(false));
        let (tx, status) = std::sync::mpsc::channel();
        let done = finished.clone();
        let spawned = std::thread::Builder::new()
            .name("pingpong-reaper".into())
            .spawn(move || {
                use nix::sys::wait::{WaitStatus, waitpid};
                let st = match waitpid(child, None) {
                    Ok(WaitStatus::Exited(_, code)) => Ok(code),
                    Ok(WaitStatus::Signaled(_, sig, _)) => {
                        Err(anyhow!("the responder process was killed by {sig}"))
                    }
                    Ok(other) => Err(anyhow!("the responder process ended oddly: {other:?}")),
                    Err(e) => Err(anyhow!("waitpid on the responder failed: {e}")),
                };
                if !done.load(Ordering::SeqCst)
                    && let Some(a) = &abort
                {
                    a.abort();
                }
                let _ = tx.send(st);
            });
        match spawned {
            Ok(t) => Ok(Self {
                child,
                finished,
                status,
                thread: Some(t),
            }),
            Err(e) => {
                let _ = nix::sys::signal::kill(child, nix::sys::signal::SIGKILL);
                let _ = nix::sys::wait::waitpid(child, None);
                bail!("cannot start the reaper thread: {e}")
            }
        }
    }

    /// The child's exit code, after giving it a moment to leave on its own.
    fn finish(mut self) -> Result<i32> {
        self.finished.store(true, Ordering::SeqCst);
        let st = match self.status.recv_timeout(Duration::from_secs(2)) {
            Ok(st) => st,
            Err(_) => {
                let _ = nix::sys::signal::kill(self.child, nix::sys::signal::SIGKILL);
                self.status
                    .recv()
                    .unwrap_or_else(|_| Err(anyhow!("the reaper thread vanished")))
            }
        };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        st
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.finished.store(true, Ordering::SeqCst);
            let _ = nix::sys::signal::kill(self.child, nix::sys::signal::SIGKILL);
            let _ = t.join();
        }
    }
}

/// Pins, warms up, opens counters, times, reads counters; always tells the responder to stop.
fn initiator_side(
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
    let mut sampler = spec.unpinned().then(WhereRan::default);
    let responder_cpu = control.u32_at(RESPONDER_CPU);
    let mut sample = || {
        if let Some(w) = sampler.as_mut() {
            sample_where(w, responder_cpu);
        }
    };
    let window = observer.begin();
    let measured = measure::measure(ini, &spec.limits, batch, spec.timer, &mut sample)?;
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

fn build_run(spec: &RunSpec, out: Outcome) -> PingpongRun {
    let m = out.measured;
    let (cpu_a, cpu_b) = cpus_of(spec.planned.placement);
    let mean_rtt_ns = MeanCi::of(&m.batch_means_ns).unwrap_or_else(|| MeanCi::single(m.mean_ns));
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
    }
}
