//! The responder as a forked child (`--processes`).
//!
//! The child gets PR_SET_PDEATHSIG, so it dies with cpulab however cpulab ends (even SIGKILL;
//! the signal follows the thread that forked, which waits for the whole run). Between `fork`
//! and `_exit` it only makes system calls on memory prepared before the fork (no allocation,
//! no locks), which is what makes forking a threaded process safe. A reaper thread waits for
//! it; if the child dies early, the reaper unblocks the initiator instead of letting it wait
//! forever, and if it outlives the run it is killed.

use super::observe::TaskRef;
use super::runner::{Outcome, RESPONDER_CPU, RESPONDER_ERRNO, RunSpec, initiator_side, respond};
use super::transport::{Abort, Connection, Responder, SharedPage};
use anyhow::{Context, Result, anyhow, bail};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Forks the responder, runs the initiator on a thread of this process, reaps the child.
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
