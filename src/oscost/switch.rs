//! The two-thread primitives: a pipe round trip and a context switch, both with the two threads
//! pinned to the same CPU.
//!
//! On one CPU there is no inter-processor interrupt and no idle exit (which is what a
//! cross-CPU round trip pays, see `pingpong`): only the kernel's own cost of blocking, waking
//! and switching, the part an upgrade or a mitigation changes. The pipe round trip is what
//! `perf bench sched pipe -T` and lmbench's `lat_pipe` measure; the context switch is a
//! `sched_yield` ping between two runnable threads, so each yield hands the CPU to the other
//! thread. Both count the switches they caused, so a yield that did not switch (another task
//! took the CPU, or the scheduler declined) shows up as fewer than one switch per operation
//! instead of as a suspiciously cheap figure.

use super::batch::{BatchOutcome, Primitive};
use super::primitives::thread_rusage;
use crate::affinity;
use crate::load::Gate;
use anyhow::{Context, Result, bail};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Total context switches (voluntary + involuntary) of the calling thread.
fn switches() -> Option<u64> {
    thread_rusage().map(|(_, v, i)| v + i)
}

fn write4(fd: &OwnedFd, buf: &[u8; 4]) -> bool {
    nix::unistd::write(fd, buf) == Ok(4)
}

fn read4(fd: &OwnedFd, buf: &mut [u8; 4]) -> bool {
    nix::unistd::read(fd, buf) == Ok(4)
}

/// A round trip through two pipes to an echo thread on the same CPU as the caller.
pub struct PipeRoundTrip {
    to_echo: Option<OwnedFd>,
    from_echo: OwnedFd,
    echo: Option<JoinHandle<()>>,
}

impl PipeRoundTrip {
    /// Starts the echo thread pinned to `cpu` (the caller is expected to be pinned there too).
    pub fn new(cpu: u32) -> Result<Self> {
        let (a_read, a_write) = nix::unistd::pipe().context("cannot create a pipe")?;
        let (b_read, b_write) = nix::unistd::pipe().context("cannot create a pipe")?;
        let echo = std::thread::Builder::new()
            .name("oscost-echo".into())
            .spawn(move || {
                let _ = affinity::pin_self(cpu);
                let mut buf = [0u8; 4];
                // Ends when the caller closes its write end (read returns 0).
                while read4(&a_read, &mut buf) && write4(&b_write, &buf) {}
            })
            .context("cannot start the echo thread")?;
        Ok(Self {
            to_echo: Some(a_write),
            from_echo: b_read,
            echo: Some(echo),
        })
    }
}

impl Drop for PipeRoundTrip {
    fn drop(&mut self) {
        self.to_echo = None;
        if let Some(h) = self.echo.take() {
            let _ = h.join();
        }
    }
}

impl Primitive for PipeRoundTrip {
    fn name(&self) -> &'static str {
        "pipe_round_trip_same_cpu"
    }
    fn what(&self) -> String {
        "4-byte write + read through two pipes to an echo thread pinned to the same CPU \
         (like perf bench sched pipe -T)"
            .into()
    }
    fn counter(&self) -> Option<(&'static str, &'static str)> {
        Some((
            "caller_context_switches",
            "at least 1: the caller blocks or is preempted once per round trip",
        ))
    }
    fn batch(&mut self, ops: u64) -> Result<BatchOutcome> {
        let Some(to) = &self.to_echo else {
            bail!("pipe already closed");
        };
        let mut buf = [7u8; 4];
        let before = switches();
        let t0 = Instant::now();
        for _ in 0..ops {
            if !write4(to, &buf) || !read4(&self.from_echo, &mut buf) {
                bail!(
                    "pipe round trip failed: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
        let elapsed = t0.elapsed();
        let counted = match (before, switches()) {
            (Some(b), Some(a)) => Some(a.saturating_sub(b)),
            _ => None,
        };
        Ok(BatchOutcome { elapsed, counted })
    }
}

/// Two threads on one CPU taking turns through `sched_yield`: one operation is one yield,
/// which hands the CPU to the other thread.
pub struct YieldSwitch {
    cpu: u32,
}

impl YieldSwitch {
    pub fn new(cpu: u32) -> Self {
        Self { cpu }
    }
}

impl Primitive for YieldSwitch {
    fn name(&self) -> &'static str {
        "context_switch_yield"
    }
    fn what(&self) -> String {
        "sched_yield between two threads pinned to the same CPU: one switch per yield, \
         measured directly (not derived from the pipe round trip)"
            .into()
    }
    fn max_ops(&self) -> u64 {
        1 << 22
    }
    fn counter(&self) -> Option<(&'static str, &'static str)> {
        Some((
            "context_switches",
            "about 1 per yield; fewer means yields returned without switching",
        ))
    }
    fn batch(&mut self, ops: u64) -> Result<BatchOutcome> {
        let each = ops.div_ceil(2).max(1);
        let gate = Gate::new();
        let ready = AtomicUsize::new(0);
        let cpu = self.cpu;
        let results: Vec<Result<(Duration, Option<u64>)>> = std::thread::scope(|s| {
            let run = || -> Result<(Duration, Option<u64>)> {
                // Pin before the gate but fail after it: both start together or not at all.
                let pinned = affinity::pin_self(cpu);
                ready.fetch_add(1, Ordering::SeqCst);
                gate.wait();
                pinned?;
                let before = switches();
                let t0 = Instant::now();
                for _ in 0..each {
                    let _ = nix::sched::sched_yield();
                }
                let elapsed = t0.elapsed();
                Ok((
                    elapsed,
                    before.zip(switches()).map(|(b, a)| a.saturating_sub(b)),
                ))
            };
            let spawned: Vec<_> = (0..2)
                .map(|_| std::thread::Builder::new().spawn_scoped(s, run))
                .collect();
            // Start both together once both are pinned; open even when a spawn failed, so the
            // thread that did start is not left waiting.
            let started = spawned.iter().filter(|h| h.is_ok()).count();
            while ready.load(Ordering::SeqCst) < started {
                std::thread::yield_now();
            }
            gate.open();
            spawned
                .into_iter()
                .map(|h| match h {
                    Ok(h) => h.join().unwrap_or_else(|_| bail!("yield thread panicked")),
                    Err(e) => Err(anyhow::Error::new(e).context("cannot start a yield thread")),
                })
                .collect()
        });
        let mut elapsed = Duration::ZERO;
        let mut counted = Some(0u64);
        for r in results {
            let (e, c) = r?;
            elapsed = elapsed.max(e);
            counted = counted.zip(c).map(|(a, b)| a + b);
        }
        // Both threads' yields together make the batch; scale to the ops requested.
        let done = 2 * each;
        Ok(BatchOutcome {
            elapsed: elapsed.mul_f64(ops as f64 / done as f64),
            counted: counted.map(|c| (c as f64 * ops as f64 / done as f64).round() as u64),
        })
    }
}
