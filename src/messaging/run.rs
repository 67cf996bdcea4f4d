//! Running the messaging test: channels first, every task behind one start gate, the clock from
//! opening the gate to the last task's end.
//!
//! A run can stop midway: a task that cannot start (its pin fails) or a signal to cpulab sets
//! the shared `stop` flag, and tasks blocked in `read` or `write` are woken by [`WAKE`], whose
//! no-op handler is installed without `SA_RESTART`, so the call returns `EINTR` and the task
//! sees the flag. Forked tasks are killed instead. Without this, receivers whose sender never
//! started waited forever, and so did cpulab, deaf to Ctrl-C.

use super::{Channel, MESSAGE_BYTES, MessagingReport, MessagingRun, MessagingSettings, Tasks};
use crate::experiment::Progress;
use crate::machine::{Conditions, Machine};
use crate::stats::MeanCi;
use anyhow::{Context, Result, anyhow};
use nix::errno::Errno;
use nix::sys::resource::{UsageWho, getrusage};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Measures `settings.repeats` runs under `conditions`.
pub fn measure(
    machine: &Machine,
    s: &MessagingSettings,
    conditions: Conditions,
    progress: &Progress,
) -> Result<MessagingReport> {
    let cpus = s.cpus.clone().unwrap_or_else(|| machine.allowed.clone());
    let saved = crate::affinity::get(0)?;
    // Every task inherits this thread's affinity: the allowed set, placed by the scheduler.
    crate::affinity::set(0, &cpus)?;
    let mut runs = Vec::new();
    let mut failed = None;
    for i in 0..s.repeats {
        progress.step(&format!(
            "run {}/{}: {} messages",
            i + 1,
            s.repeats,
            s.messages_per_run()
        ));
        match one_run(s, &cpus) {
            Ok(r) => runs.push(r),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    crate::affinity::set(0, &saved).context("restoring this thread's CPU affinity")?;
    if let Some(e) = failed {
        return Err(e);
    }
    let wall: Vec<f64> = runs.iter().map(|r| r.wall_s).collect();
    let rate: Vec<f64> = runs.iter().map(|r| r.messages_per_s).collect();
    Ok(MessagingReport {
        settings: s.clone(),
        conditions,
        wall_s: MeanCi::of(&wall),
        messages_per_s: MeanCi::of(&rate),
        runs,
    })
}

/// One receiver's channel: the end it reads, the end every sender of its group writes.
struct Chan {
    read: OwnedFd,
    write: OwnedFd,
}

fn channel(kind: Channel) -> Result<Chan> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    let (read, write) = match kind {
        Channel::Socket => socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        ),
        Channel::Pipe => nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC),
    }
    .map_err(|e| {
        anyhow!(
            "cannot create a channel ({e}); give fewer --groups or --senders, or raise `ulimit -n`"
        )
    })?;
    Ok(Chan { read, write })
}

/// What a run counts, in memory every task can write (shared with forked children).
struct Counters {
    map: std::ptr::NonNull<std::ffi::c_void>,
    len: usize,
}

impl Counters {
    /// Five words: bytes sent, bytes received, the stop flag, the latest task end, the
    /// earliest task start.
    fn new() -> Result<Self> {
        use nix::sys::mman::{MapFlags, ProtFlags, mmap_anonymous};
        let len = 4096;
        // SAFETY: a fresh anonymous mapping, unmapped only in Drop.
        let map = unsafe {
            mmap_anonymous(
                None,
                std::num::NonZeroUsize::new(len).ok_or_else(|| anyhow!("zero length"))?,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
            )
        }
        .context("mmap of the shared counters failed")?;
        let c = Self { map, len };
        c.start_ns().store(u64::MAX, Ordering::SeqCst);
        Ok(c)
    }

    fn at(&self, i: usize) -> &AtomicU64 {
        // invariant: the page is 4096 bytes, aligned, and only accessed as five AtomicU64s.
        unsafe { &*(self.map.as_ptr() as *const AtomicU64).add(i) }
    }

    fn sent(&self) -> &AtomicU64 {
        self.at(0)
    }

    fn received(&self) -> &AtomicU64 {
        self.at(1)
    }

    /// Non-zero once the run is to stop (a task failed, or a signal arrived).
    fn stop(&self) -> &AtomicU64 {
        self.at(2)
    }

    /// The latest task end, in CLOCK_MONOTONIC nanoseconds: the run's clock stops there, not
    /// when cpulab notices.
    fn end_ns(&self) -> &AtomicU64 {
        self.at(3)
    }

    fn stopping(&self) -> bool {
        self.stop().load(Ordering::Relaxed) != 0
    }

    /// Records that this task ended now.
    fn ended(&self) {
        self.end_ns().fetch_max(monotonic_ns(), Ordering::SeqCst);
    }

    /// The earliest task start, in CLOCK_MONOTONIC nanoseconds: the run's clock starts there,
    /// when the gate let the first task through, not when cpulab's own thread got the CPU
    /// back (on a busy machine every task may have ended by then).
    fn start_ns(&self) -> &AtomicU64 {
        self.at(4)
    }

    /// Records that this task started now.
    fn began(&self) {
        self.start_ns().fetch_min(monotonic_ns(), Ordering::SeqCst);
    }

    /// From the first task's start to the last task's end (zero if none ran).
    fn wall(&self) -> Duration {
        let (t0, t1) = (
            self.start_ns().load(Ordering::SeqCst),
            self.end_ns().load(Ordering::SeqCst),
        );
        Duration::from_nanos(t1.saturating_sub(t0))
    }
}

/// CLOCK_MONOTONIC in nanoseconds (async-signal-safe, so forked tasks may call it too).
fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// The signal that wakes a task blocked in `read` or `write` so it sees `stop`. SIGURG is
/// ignored by default, so a stray one harms nothing.
const WAKE: libc::c_int = libc::SIGURG;

/// Installs the no-op handler for [`WAKE`] without `SA_RESTART` (once per process).
fn install_wake() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    extern "C" fn noop(_: libc::c_int) {}
    ONCE.call_once(|| {
        let action = nix::sys::signal::SigAction::new(
            nix::sys::signal::SigHandler::Handler(noop),
            nix::sys::signal::SaFlags::empty(),
            nix::sys::signal::SigSet::empty(),
        );
        // SAFETY: the handler does nothing, so it is async-signal-safe.
        let _ = unsafe { nix::sys::signal::sigaction(nix::sys::signal::Signal::SIGURG, &action) };
    });
}

impl Drop for Counters {
    fn drop(&mut self) {
        // SAFETY: mapped in `new` with this length; no reference outlives self.
        let _ = unsafe { nix::sys::mman::munmap(self.map, self.len) };
    }
}

// SAFETY: only atomics are accessed through the pointer.
unsafe impl Sync for Counters {}

/// Writes `MESSAGE_BYTES` to every `out` fd `messages` times; bytes written go to `sent`.
/// Gives up (false) once `stop` is set. Only system calls on memory prepared before: safe
/// between fork and _exit.
fn send(out: &[BorrowedFd], messages: usize, c: &Counters) -> bool {
    let msg = [0x5a_u8; MESSAGE_BYTES];
    let sent = c.sent();
    for _ in 0..messages {
        if c.stopping() {
            return false;
        }
        for fd in out {
            let mut done = 0;
            while done < MESSAGE_BYTES {
                match nix::unistd::write(fd, &msg[done..]) {
                    Ok(n) if n > 0 => done += n,
                    Err(Errno::EINTR) if c.stopping() => return false,
                    Err(Errno::EINTR) => continue,
                    _ => return false,
                }
            }
            sent.fetch_add(MESSAGE_BYTES as u64, Ordering::Relaxed);
        }
    }
    true
}

/// Reads until `expect` bytes have arrived; bytes read go to `received`. Gives up (false) once
/// `stop` is set.
fn receive(fd: BorrowedFd, expect: u64, c: &Counters) -> bool {
    let mut buf = [0_u8; MESSAGE_BYTES];
    let mut got = 0_u64;
    let received = c.received();
    while got < expect {
        if c.stopping() {
            return false;
        }
        match nix::unistd::read(fd, &mut buf) {
            Ok(n) if n > 0 => {
                got += n as u64;
                received.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(Errno::EINTR) => continue,
            _ => return false,
        }
    }
    true
}

fn switches(who: UsageWho) -> Option<u64> {
    getrusage(who)
        .ok()
        .map(|u| (u.voluntary_context_switches() + u.involuntary_context_switches()) as u64)
}

/// The CPU task `k` is pinned to (spawn order: each group's receivers, then its senders), when
/// the settings spread the tasks.
fn task_cpu(s: &MessagingSettings, cpus: &[u32], k: usize) -> Option<u32> {
    (s.spread && !cpus.is_empty()).then(|| cpus[k % cpus.len()])
}

fn one_run(s: &MessagingSettings, cpus: &crate::cpulist::CpuSet) -> Result<MessagingRun> {
    let cpus = cpus.to_vec();
    let groups: Vec<Vec<Chan>> = (0..s.groups)
        .map(|_| (0..s.senders).map(|_| channel(s.channel)).collect())
        .collect::<Result<_>>()?;
    let counters = Counters::new()?;
    let per_receiver = (s.senders * s.messages * MESSAGE_BYTES) as u64;
    let (wall, switches) = match s.tasks {
        Tasks::Threads => threads(s, &cpus, &groups, &counters, per_receiver)?,
        Tasks::Processes => processes(s, &cpus, &groups, &counters, per_receiver)?,
    };
    let sent = counters.sent().load(Ordering::SeqCst) / MESSAGE_BYTES as u64;
    let received = counters.received().load(Ordering::SeqCst) / MESSAGE_BYTES as u64;
    let secs = wall.as_secs_f64();
    Ok(MessagingRun {
        wall_s: secs,
        messages_sent: sent,
        messages_received: received,
        messages_per_s: if secs > 0.0 {
            received as f64 / secs
        } else {
            0.0
        },
        context_switches: switches,
    })
}

fn threads(
    s: &MessagingSettings,
    cpus: &[u32],
    groups: &[Vec<Chan>],
    c: &Counters,
    per_receiver: u64,
) -> Result<(Duration, Option<u64>)> {
    install_wake();
    let tasks = s.groups * s.senders * 2;
    let gate = std::sync::Barrier::new(tasks + 1);
    // Each task's pthread, so a blocked one can be woken.
    let ids: Vec<AtomicU64> = (0..tasks).map(|_| AtomicU64::new(0)).collect();
    let before = switches(UsageWho::RUSAGE_SELF);
    // Pin before the gate, and wait at it even when pinning failed (or the others would
    // wait forever); a failed pin stops the run.
    let start = |k: usize| {
        // pthread_t is an unsigned long on Linux.
        // SAFETY: pthread_self has no preconditions.
        ids[k].store(unsafe { libc::pthread_self() } as u64, Ordering::SeqCst);
        let pinned = task_cpu(s, cpus, k).is_none_or(|cpu| crate::affinity::pin_self(cpu).is_ok());
        if !pinned {
            c.stop().store(1, Ordering::SeqCst);
        }
        gate.wait();
        c.began();
        pinned
    };
    let ok = std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(tasks);
        for g in groups {
            let out: Vec<BorrowedFd> = g.iter().map(|ch| ch.write.as_fd()).collect();
            for ch in g {
                let (fd, start, k) = (ch.read.as_fd(), &start, handles.len());
                handles.push(scope.spawn(move || {
                    let ok = start(k) && receive(fd, per_receiver, c);
                    c.ended();
                    ok
                }));
            }
            for _ in 0..s.senders {
                let (out, start, k) = (out.clone(), &start, handles.len());
                handles.push(scope.spawn(move || {
                    let ok = start(k) && send(&out, s.messages, c);
                    c.ended();
                    ok
                }));
            }
        }
        gate.wait();
        // Watch rather than join: a signal or a failed task stops every task, blocked or not.
        while !handles.iter().all(|h| h.is_finished()) {
            if crate::signals::pending().is_some() {
                c.stop().store(1, Ordering::SeqCst);
            }
            if c.stopping() {
                for (h, id) in handles.iter().zip(&ids) {
                    if !h.is_finished() {
                        // SAFETY: the thread is not joined yet, so its pthread_t is valid.
                        unsafe { libc::pthread_kill(id.load(Ordering::SeqCst) as _, WAKE) };
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        handles.into_iter().all(|h| h.join().unwrap_or(false))
    });
    let after = switches(UsageWho::RUSAGE_SELF);
    crate::signals::check()?;
    if !ok {
        return Err(anyhow!(
            "a messaging thread failed to start, send or receive"
        ));
    }
    Ok((
        c.wall(),
        before.zip(after).map(|(b, a)| a.saturating_sub(b)),
    ))
}

/// Forked children, killed and reaped on every way out.
struct Children(Vec<nix::unistd::Pid>);

impl Drop for Children {
    fn drop(&mut self) {
        for &p in &self.0 {
            let _ = nix::sys::signal::kill(p, nix::sys::signal::SIGKILL);
        }
        for &p in &self.0 {
            let _ = nix::sys::wait::waitpid(p, None);
        }
    }
}

fn processes(
    s: &MessagingSettings,
    cpus: &[u32],
    groups: &[Vec<Chan>],
    c: &Counters,
    per_receiver: u64,
) -> Result<(Duration, Option<u64>)> {
    use nix::unistd::{ForkResult, fork};
    // The gate: each child reads one byte; cpulab writes them all at once (at most 4096, within
    // a pipe's buffer).
    let (gate_r, gate_w) = nix::unistd::pipe().context("cannot create the start gate")?;
    let parent = nix::unistd::getpid();
    // Everything a child touches is prepared here, before any fork.
    let outs: Vec<Vec<BorrowedFd>> = groups
        .iter()
        .map(|g| g.iter().map(|ch| ch.write.as_fd()).collect())
        .collect();
    let tasks = s.groups * s.senders * 2;
    let opening = vec![1_u8; tasks];
    // Each child's CPU set, when spread, built before any fork.
    let pins = child_pins(s, cpus, tasks)?;
    let mut children = Children(Vec::with_capacity(s.groups * s.senders * 2));
    let before = switches(UsageWho::RUSAGE_CHILDREN);
    for (g, out) in groups.iter().zip(&outs) {
        for role in (0..s.senders).map(Some).chain((0..s.senders).map(|_| None)) {
            let pin = pins.get(children.0.len()).copied().flatten();
            // SAFETY: the child runs only `child_main`: system calls on memory prepared before
            // the fork, then _exit.
            match unsafe { fork() }.context("fork failed")? {
                ForkResult::Child => {
                    // Pinned before the gate opens, so no move falls inside the timed window.
                    if let Some(set) = pin
                        && nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
                            .is_err()
                    {
                        // SAFETY: as in `child_main`: end the child without the parent's
                        // handlers; the parent counts the failure.
                        unsafe { libc::_exit(1) }
                    }
                    let work = || {
                        c.began();
                        let ok = match role {
                            Some(i) => receive(g[i].read.as_fd(), per_receiver, c),
                            None => send(out, s.messages, c),
                        };
                        c.ended();
                        ok
                    };
                    child_main(parent, gate_r.as_fd(), work)
                }
                ForkResult::Parent { child } => children.0.push(child),
            }
        }
    }
    open_gate(&gate_w, &opening)?;
    wait_all(&children)?;
    let wall = c.wall();
    children.0.clear();
    let after = switches(UsageWho::RUSAGE_CHILDREN);
    Ok((wall, before.zip(after).map(|(b, a)| a.saturating_sub(b))))
}

/// Each child's CPU set when the tasks are spread (`None`: the scheduler places it), built
/// before any fork.
fn child_pins(
    s: &MessagingSettings,
    cpus: &[u32],
    tasks: usize,
) -> Result<Vec<Option<nix::sched::CpuSet>>> {
    (0..tasks)
        .map(|k| {
            task_cpu(s, cpus, k)
                .map(|cpu| {
                    let mut set = nix::sched::CpuSet::new();
                    set.set(cpu as usize).map(|()| set)
                })
                .transpose()
        })
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow!("CPU out of range for a CPU set: {e}"))
}

/// Writes one byte per waiting child into the gate, all at once.
fn open_gate(gate_w: &OwnedFd, opening: &[u8]) -> Result<()> {
    let mut open = opening;
    while !open.is_empty() {
        match nix::unistd::write(gate_w, open) {
            Ok(n) => open = &open[n..],
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(anyhow!("cannot open the start gate: {e}")),
        }
    }
    Ok(())
}

/// Waits for every child to exit 0. Polls rather than waits in turn: a task that failed leaves
/// its peers blocked for ever, and a signal must stop the run; either way the caller's
/// `Children` kills the rest on the way out.
fn wait_all(children: &Children) -> Result<()> {
    let mut running = children.0.clone();
    while !running.is_empty() {
        crate::signals::check()?;
        let mut failed = false;
        running.retain(|&p| {
            match nix::sys::wait::waitpid(p, Some(nix::sys::wait::WaitPidFlag::WNOHANG)) {
                Ok(nix::sys::wait::WaitStatus::StillAlive) => true,
                Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => false,
                _ => {
                    failed = true;
                    false
                }
            }
        });
        if failed {
            return Err(anyhow!(
                "a messaging process failed to start, send or receive"
            ));
        }
        if !running.is_empty() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(())
}

/// A forked task: dies with cpulab, waits for the gate, works, exits. System calls only, on
/// memory prepared before the fork.
fn child_main(parent: nix::unistd::Pid, gate: BorrowedFd, work: impl Fn() -> bool) -> ! {
    let code = if nix::sys::prctl::set_pdeathsig(nix::sys::signal::SIGKILL).is_err()
        || nix::unistd::getppid() != parent
    {
        3
    } else {
        let mut b = [0_u8; 1];
        loop {
            match nix::unistd::read(gate, &mut b) {
                Err(Errno::EINTR) => continue,
                Ok(1) if work() => break 0,
                _ => break 1,
            }
        }
    };
    // SAFETY: _exit ends the child without running the parent's atexit handlers or flushing
    // its stdio buffers, which is what a forked child of a threaded process must do.
    unsafe { libc::_exit(code) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpulist::CpuSet;
    use crate::messaging::Channel;

    /// Runs `one_run` on another thread; `None` when it has not returned within a minute
    /// (a guard against the hang, not a speed bound).
    fn bounded(s: MessagingSettings, cpus: CpuSet) -> Option<Result<MessagingRun>> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(one_run(&s, &cpus));
        });
        rx.recv_timeout(Duration::from_secs(60)).ok()
    }

    fn spread_onto_a_missing_cpu(tasks: Tasks) -> (MessagingSettings, CpuSet) {
        let here = crate::affinity::current_cpu().unwrap_or(0);
        let s = MessagingSettings {
            groups: 1,
            senders: 2,
            messages: 1000,
            tasks,
            channel: Channel::Pipe,
            repeats: 1,
            cpus: None,
            spread: true,
            check_load: false,
        };
        // This machine has no CPU 1000 (within a CPU set's 1024): every other task fails to pin.
        (s, CpuSet::from_iter([here, 1000]))
    }

    // Regression: `doctor --root` on a 4-CPU fixture pinned messaging senders to CPUs this
    // machine lacks; their receivers waited for ever and so did cpulab.
    #[test]
    fn threads_that_cannot_pin_stop_the_run_instead_of_hanging() {
        let (s, cpus) = spread_onto_a_missing_cpu(Tasks::Threads);
        let r = bounded(s, cpus).expect("the run returned");
        let e = r.expect_err("a task that could not pin fails the run");
        assert!(format!("{e:#}").contains("failed to start"), "{e:#}");
    }

    #[test]
    fn processes_that_cannot_pin_stop_the_run_instead_of_hanging() {
        let (s, cpus) = spread_onto_a_missing_cpu(Tasks::Processes);
        let r = bounded(s, cpus).expect("the run returned");
        let e = r.expect_err("a process that could not pin fails the run");
        assert!(format!("{e:#}").contains("failed to start"), "{e:#}");
    }

    #[test]
    fn a_run_that_can_pin_counts_every_message_and_times_itself() {
        let here = crate::affinity::current_cpu().unwrap_or(0);
        for tasks in [Tasks::Threads, Tasks::Processes] {
            let (s, _) = spread_onto_a_missing_cpu(tasks);
            let r = bounded(s.clone(), CpuSet::from_iter([here]))
                .expect("the run returned")
                .expect("the run succeeds");
            assert_eq!(r.messages_sent, s.messages_per_run());
            assert_eq!(r.messages_received, r.messages_sent);
            assert!(r.wall_s > 0.0 && r.messages_per_s > 0.0);
        }
    }
}
