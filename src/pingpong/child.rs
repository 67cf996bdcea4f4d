//! The responder as a separate process (`--processes`).
//!
//! Like `perf bench sched pipe`, the two ends are then two single-threaded processes: the
//! initiator runs on the calling thread (its affinity is restored afterwards), not on a helper
//! thread, because a wakeup into a multi-threaded process measured ~6% dearer here than into a
//! single-threaded one, and that is a property of the harness, not of the method.
//!
//! Nothing may wait in a thread of cpulab, then, for the responder to die. A small reaper
//! process does: cpulab forks the reaper, the reaper forks the responder and waits for it;
//! when it ends (told to stop, failed, or killed from outside) the reaper records how and
//! calls the transport's abort, which unblocks an initiator still waiting. Both children get
//! PR_SET_PDEATHSIG (the reaper from cpulab, the responder from the reaper), so they die with
//! cpulab however it ends, even by SIGKILL; the responder's is SIGTERM with a handler that
//! aborts too, so killing the reaper from outside cannot leave the initiator waiting. Between `fork` and `_exit` they only make system
//! calls on memory prepared before the fork (no allocation, no locks), which is what makes
//! forking a threaded process safe.

use super::observe::TaskRef;
use super::runner::{
    Outcome, RESPONDER_CPU, RESPONDER_ERRNO, RESPONDER_TID, RunSpec, initiator_side, respond,
};
use super::transport::{Abort, Connection, Responder, SharedPage};
use crate::affinity;
use anyhow::{Context, Result, anyhow};
use nix::sys::signal::{SIGKILL, SaFlags, SigAction, SigHandler, SigSet, Signal, kill, sigaction};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::{Duration, Instant};

/// How the responder ended, written by the reaper: 0 unknown, 1 + exit code, or
/// `SIGNALLED + signal number`.
const RESPONDER_STATUS: usize = 192;
const SIGNALLED: u32 = 1000;

/// Starts the reaper and the responder, runs the initiator on this thread, reaps.
pub fn run_processes(spec: &RunSpec, conn: Connection, control: &SharedPage) -> Result<Outcome> {
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
    let track = spec.tracks_where();
    // SAFETY: the child runs only `reaper_main`, which makes system calls on memory prepared
    // before the fork and never returns.
    match unsafe { nix::unistd::fork() }.context("fork failed")? {
        nix::unistd::ForkResult::Child => {
            reaper_main(responder, abort, &set, track, control, parent)
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop((responder, abort));
            let reaper = Reaper(Some(child));
            let out = initiate_here(spec, initiator, control);
            let reaped = reaper.finish();
            verdict(out, reaped, control)
        }
    }
}

/// The initiator on the calling thread, whose affinity is put back afterwards.
fn initiate_here(
    spec: &RunSpec,
    initiator: Box<dyn super::transport::Initiator>,
    control: &SharedPage,
) -> Result<Outcome> {
    let saved = affinity::get(0)?;
    let peer = || TaskRef {
        pid: control.u32_at(RESPONDER_TID).load(Ordering::SeqCst) as i32,
        tid: None,
    };
    let out = initiator_side(spec, initiator, &peer, control);
    affinity::set(0, &saved).context("restoring this thread's CPU affinity")?;
    out
}

/// Combines the initiator's result with how the responder ended.
fn verdict(out: Result<Outcome>, reaped: Result<()>, control: &SharedPage) -> Result<Outcome> {
    let status = control.u32_at(RESPONDER_STATUS).load(Ordering::SeqCst);
    let problem = match status {
        1 => None,
        0 => Some("the responder process ended in an unknown way".to_string()),
        s if s >= SIGNALLED => {
            let sig = Signal::try_from((s - SIGNALLED) as i32)
                .map_or(format!("signal {}", s - SIGNALLED), |s| s.to_string());
            Some(format!("the responder process was killed by {sig}"))
        }
        s => {
            let errno = control.u32_at(RESPONDER_ERRNO).load(Ordering::SeqCst) as i32;
            let why = std::io::Error::from_raw_os_error(errno);
            Some(format!(
                "the responder process exited with status {} ({why})",
                s - 1
            ))
        }
    };
    match (out, problem, reaped) {
        (Ok(o), None, Ok(())) => Ok(o),
        (Ok(_), None, Err(e)) => Err(e),
        (Ok(_), Some(p), _) => Err(anyhow!(p)),
        (Err(e), None, _) => Err(e),
        (Err(e), Some(p), _) => Err(e.context(p)),
    }
}

/// The reaper process: forks the responder, waits for it, records how it ended, aborts the
/// initiator's wait. Never returns.
fn reaper_main(
    responder: Box<dyn Responder>,
    abort: Arc<dyn Abort>,
    set: &nix::sched::CpuSet,
    track: bool,
    control: &SharedPage,
    parent: i32,
) -> ! {
    die_with(parent, libc::SIGKILL);
    let me = nix::unistd::getpid().as_raw();
    // SAFETY: no safe fork exists. This process is the single-threaded reaper just forked by
    // cpulab; the child runs only `responder_main`, which never returns.
    let forked = unsafe { nix::unistd::fork() };
    if let Ok(nix::unistd::ForkResult::Child) = forked {
        responder_main(responder, &abort, set, track, control, me);
    }
    if let Ok(nix::unistd::ForkResult::Parent { child }) = forked {
        let status = loop {
            match waitpid(child, None) {
                Err(nix::errno::Errno::EINTR) => continue,
                r => break r,
            }
        };
        let code = match status {
            Ok(WaitStatus::Exited(_, c)) => 1 + c as u32,
            Ok(WaitStatus::Signaled(_, sig, _)) => SIGNALLED + sig as u32,
            _ => 0,
        };
        control
            .u32_at(RESPONDER_STATUS)
            .store(code, Ordering::SeqCst);
    } else {
        record_errno(control);
        control
            .u32_at(RESPONDER_STATUS)
            .store(1 + 3, Ordering::SeqCst);
    }
    // Harmless after a normal stop (the initiator no longer waits); vital otherwise.
    abort.abort();
    // SAFETY: _exit ends the process at once, without running destructors.
    unsafe { libc::_exit(0) }
}

/// The responder process: pin, publish its pid, answer until told to stop. Never returns.
fn responder_main(
    mut responder: Box<dyn Responder>,
    abort: &Arc<dyn Abort>,
    set: &nix::sched::CpuSet,
    track: bool,
    control: &SharedPage,
    reaper: i32,
) -> ! {
    ORPHAN_ABORT.store(std::ptr::from_ref(abort).cast_mut(), Ordering::SeqCst);
    let on_term = SigAction::new(
        SigHandler::Handler(abort_and_exit),
        SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: the handler only calls the abort (atomics and system calls) and _exit.
    let _ = unsafe { sigaction(Signal::SIGTERM, &on_term) };
    die_with(reaper, libc::SIGTERM);
    let code = if nix::sched::sched_setaffinity(Pid::from_raw(0), set).is_err() {
        2
    } else {
        let me = nix::unistd::getpid().as_raw();
        control
            .u32_at(RESPONDER_TID)
            .store(me as u32, Ordering::SeqCst);
        let slot = track.then(|| control.u32_at(RESPONDER_CPU));
        match respond(&mut *responder, slot) {
            Ok(()) => 0,
            Err(_) => 1,
        }
    };
    if code != 0 {
        record_errno(control);
    }
    // SAFETY: as above.
    unsafe { libc::_exit(code) }
}

/// The responder's abort, for its SIGTERM handler (set in the responder process only).
static ORPHAN_ABORT: AtomicPtr<Arc<dyn Abort>> = AtomicPtr::new(std::ptr::null_mut());

extern "C" fn abort_and_exit(_: libc::c_int) {
    let a = ORPHAN_ABORT.load(Ordering::SeqCst);
    if !a.is_null() {
        // SAFETY: set to an Arc that lives until the responder process exits.
        unsafe { (*a).abort() };
    }
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(1) }
}

/// PR_SET_PDEATHSIG, then make sure the parent did not die before it took effect.
fn die_with(parent: i32, signal: libc::c_int) {
    let _ = nix::sys::prctl::set_pdeathsig(Signal::try_from(signal).ok());
    if nix::unistd::getppid().as_raw() != parent {
        // SAFETY: no safe wrapper for _exit; it ends this forked process without running the
        // parent's destructors or atexit handlers, which is what a forked child must do.
        unsafe { libc::_exit(0) }
    }
}

fn record_errno(control: &SharedPage) {
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    control
        .u32_at(RESPONDER_ERRNO)
        .store(errno as u32, Ordering::SeqCst);
}

/// The reaper as cpulab sees it: reaped by `finish`, killed (with the responder, by
/// PDEATHSIG) if it does not leave in time or if the run unwinds.
struct Reaper(Option<Pid>);

impl Reaper {
    fn finish(mut self) -> Result<()> {
        let Some(pid) = self.0.take() else {
            return Ok(());
        };
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(WaitStatus::StillAlive) => {
                    let _ = kill(pid, SIGKILL);
                    let _ = waitpid(pid, None);
                    return Err(anyhow!("the responder did not stop; it was killed"));
                }
                Ok(WaitStatus::Exited(_, 0)) => return Ok(()),
                Ok(other) => return Err(anyhow!("the reaper process ended oddly: {other:?}")),
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(anyhow!("waitpid on the reaper process failed: {e}")),
            }
        }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(pid) = self.0.take() {
            let _ = kill(pid, SIGKILL);
            let _ = waitpid(pid, None);
        }
    }
}
