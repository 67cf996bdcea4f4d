//! A VM running: one thread per vCPU, each owning its fd, pinned where the placement says,
//! looping in `KVM_RUN`; the host side reads the guest's counts, stamps and KVM's statistics
//! while it runs, and stops it with a signal that makes `KVM_RUN` return.
//!
//! A halted vCPU stays inside `KVM_RUN` (the in-kernel irqchip halts it there) until an
//! interrupt or a signal, so stopping is: set the flag, then signal the thread until it has
//! left (a signal that arrives just before it enters `KVM_RUN` is followed by another).

use super::guest::{self, COUNT};
use super::stats::StatsFd;
use super::vm::{Memory, Vm};
use crate::cpulist::CpuSet;
use anyhow::{Context, Result, bail};
use kvm_ioctls::VcpuExit;
use std::collections::BTreeMap;
use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once, mpsc};
use std::time::{Duration, Instant};

/// The signal that kicks a vCPU thread out of `KVM_RUN` (its handler does nothing).
fn kick_signal() -> i32 {
    libc::SIGRTMIN() + 3
}

extern "C" fn on_kick(_: libc::c_int) {}

fn install_kick_handler() -> Result<()> {
    static ONCE: Once = Once::new();
    let mut err = None;
    ONCE.call_once(|| {
        // SAFETY: a handler that does nothing; no SA_RESTART, so KVM_RUN returns EINTR.
        let r = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_kick as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(kick_signal(), &sa, std::ptr::null_mut())
        };
        if r != 0 {
            err = Some(std::io::Error::last_os_error());
        }
    });
    match err {
        Some(e) => Err(e).context("installing the vCPU kick handler"),
        None => Ok(()),
    }
}

/// A vCPU as its thread runs it.
pub struct VcpuThread {
    /// The thread's id, for /proc/self/task/TID and for moving it.
    pub tid: i32,
    handle: Option<std::thread::JoinHandle<Result<()>>>,
    stats: StatsFd,
    /// Whether its program times its own run ([`Running::ran_cycles`]).
    timed: bool,
}

/// A started VM. Dropping it stops every vCPU and joins its thread.
pub struct Running {
    pub vcpus: Vec<VcpuThread>,
    /// The VM's fd, held while it runs as every VMM holds it (an outside observer finds a VM
    /// by it).
    _vm: Option<kvm_ioctls::VmFd>,
    memory: Arc<Memory>,
    stop: Arc<AtomicBool>,
    pub tsc_khz: u32,
    pub started: Instant,
}

/// One reading of everything the host side sees of a running VM.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub at: Instant,
    /// The guest's count of each vCPU (round trips, answers, loop iterations), widened from
    /// its 32 bits by the caller's previous snapshot.
    pub counts: Vec<u32>,
    /// The counts again, read after the statistics: the guest went on meanwhile, so a count of
    /// events between two snapshots' statistics lies between the two readings.
    pub counts_after: Vec<u32>,
    /// KVM's statistics of each vCPU.
    pub kvm: Vec<BTreeMap<String, u64>>,
    /// `/proc/self/task/TID/schedstat` of each vCPU thread: on-CPU ns, run-queue wait ns.
    pub sched: Vec<Option<(u64, u64)>>,
    /// The TSC cycles each burner vCPU counted itself running so far (`None` for the other
    /// programs, and where every read was torn).
    pub ran: Vec<Option<u64>>,
}

impl Running {
    /// Starts `vm`, vCPU n's thread restricted to `placement[n]` and named as QEMU names its
    /// (`CPU n/KVM`).
    pub fn start(vm: Vm, placement: &[CpuSet]) -> Result<Self> {
        Self::start_named(vm, placement, true)
    }

    /// [`Running::start`], the threads named as QEMU names them or left with the process's
    /// name (as some VMMs leave theirs).
    pub fn start_named(vm: Vm, placement: &[CpuSet], named: bool) -> Result<Self> {
        install_kick_handler()?;
        let tsc_khz = vm.tsc_khz()?;
        let stop = Arc::new(AtomicBool::new(false));
        let Vm {
            vcpus,
            memory,
            vm,
            timed,
            ..
        } = vm;
        let vm = Some(vm);
        let mut threads = Vec::new();
        for (i, mut fd) in vcpus.into_iter().enumerate() {
            let stats = StatsFd::open(&fd)?;
            let cpus = placement
                .get(i)
                .cloned()
                .context("a vCPU without a placement")?;
            let stop_flag = stop.clone();
            let (tx, rx) = mpsc::channel();
            let builder = std::thread::Builder::new();
            let builder = if named {
                builder.name(format!("CPU {i}/KVM"))
            } else {
                builder
            };
            let handle = builder
                .spawn(move || -> Result<()> {
                    let pinned = crate::affinity::set(0, &cpus);
                    let _ = tx.send((crate::affinity::gettid(), pinned.is_ok()));
                    pinned?;
                    run_until_stopped(&mut fd, &stop_flag, i)
                })
                .context("starting a vCPU thread")?;
            let (tid, pinned) = rx.recv().context("a vCPU thread ended before it started")?;
            threads.push(VcpuThread {
                tid,
                handle: Some(handle),
                stats,
                timed: timed.get(i).copied().unwrap_or(false),
            });
            if !pinned {
                let mut r = Running::from_parts(threads, vm, memory, stop, tsc_khz);
                return Err(r.stop_all().err().unwrap_or_else(|| {
                    anyhow::anyhow!("cannot pin vCPU {i} to CPUs {}", placement[i])
                }));
            }
        }
        Ok(Self::from_parts(threads, vm, memory, stop, tsc_khz))
    }

    fn from_parts(
        vcpus: Vec<VcpuThread>,
        vm: Option<kvm_ioctls::VmFd>,
        memory: Arc<Memory>,
        stop: Arc<AtomicBool>,
        tsc_khz: u32,
    ) -> Self {
        Self {
            vcpus,
            _vm: vm,
            memory,
            stop,
            tsc_khz,
            started: Instant::now(),
        }
    }

    /// Guest memory, for reading the rings.
    pub fn memory(&self) -> &Memory {
        &self.memory
    }

    /// vCPU `n`'s count now.
    pub fn count(&self, n: u32) -> u32 {
        self.memory.read_u32(guest::line(n, COUNT))
    }

    /// The TSC cycles a burner vCPU `n` counted itself running so far ([`guest::Program::Burner`]),
    /// or `None`: its program keeps no such count, or the guest kept changing it for every try.
    pub fn ran_cycles(&self, n: u32) -> Option<u64> {
        let timed = self.vcpus.get(n as usize).is_some_and(|v| v.timed);
        timed
            .then(|| ran_of(|off| self.memory.read_u32(guest::line(n, off))))
            .flatten()
    }

    /// Whether any vCPU's program times its own run.
    pub fn times_its_run(&self) -> bool {
        self.vcpus.iter().any(|v| v.timed)
    }

    /// Whether every vCPU thread is still in its loop (one that stopped on an error has ended).
    pub fn alive(&self) -> bool {
        self.vcpus
            .iter()
            .all(|v| v.handle.as_ref().is_some_and(|h| !h.is_finished()))
    }

    /// Everything the host side sees now.
    pub fn snapshot(&self) -> Result<Snapshot> {
        let counts = (0..self.vcpus.len() as u32)
            .map(|n| self.count(n))
            .collect();
        let at = Instant::now();
        let mut kvm = Vec::new();
        for v in &self.vcpus {
            kvm.push(v.stats.read()?);
        }
        Ok(Snapshot {
            at,
            counts,
            counts_after: (0..self.vcpus.len() as u32)
                .map(|n| self.count(n))
                .collect(),
            kvm,
            sched: self.vcpus.iter().map(|v| schedstat(v.tid)).collect(),
            ran: (0..self.vcpus.len() as u32)
                .map(|n| self.ran_cycles(n))
                .collect(),
        })
    }

    /// Moves vCPU `n`'s thread to `cpus` while it runs (what an operator's `taskset -p` does).
    pub fn move_vcpu(&self, n: usize, cpus: &CpuSet) -> Result<()> {
        let v = self.vcpus.get(n).context("no such vCPU")?;
        crate::affinity::set(v.tid, cpus)
    }

    /// Stops every vCPU and joins its thread; the first error a vCPU ended with.
    pub fn stop_all(&mut self) -> Result<()> {
        self.stop.store(true, Ordering::SeqCst);
        let mut first = None;
        for v in &mut self.vcpus {
            let Some(h) = v.handle.take() else { continue };
            let deadline = Instant::now() + Duration::from_secs(10);
            while !h.is_finished() && Instant::now() < deadline {
                // SAFETY: the thread has not been joined, so its pthread_t is valid.
                unsafe { libc::pthread_kill(h.as_pthread_t(), kick_signal()) };
                std::thread::sleep(Duration::from_micros(500));
            }
            if !h.is_finished() {
                first.get_or_insert(anyhow::anyhow!("a vCPU thread did not stop"));
                continue;
            }
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    first.get_or_insert(e);
                }
                Err(_) => {
                    first.get_or_insert(anyhow::anyhow!("a vCPU thread panicked"));
                }
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop_all();
    }
}

fn run_until_stopped(fd: &mut kvm_ioctls::VcpuFd, stop: &AtomicBool, n: usize) -> Result<()> {
    while !stop.load(Ordering::SeqCst) {
        match fd.run() {
            Ok(VcpuExit::Intr) => {}
            Ok(exit) => bail!("vCPU {n} left the guest unexpectedly: {exit:?}"),
            Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => {}
            Err(e) => bail!("KVM_RUN on vCPU {n}: {e}"),
        }
    }
    Ok(())
}

/// On-CPU and run-queue ns of thread `tid` of this process.
pub fn schedstat(tid: i32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    parse_schedstat(&text)
}

/// `run_ns wait_ns timeslices`.
pub fn parse_schedstat(text: &str) -> Option<(u64, u64)> {
    let mut it = text.split_whitespace().map(|w| w.parse::<u64>().ok());
    Some((it.next()??, it.next()??))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_reads_run_and_wait() {
        assert_eq!(parse_schedstat("123 45 6\n"), Some((123, 45)));
        assert_eq!(parse_schedstat("x"), None);
        assert_eq!(parse_schedstat(""), None);
    }
}

/// Reads a burner's 64-bit run time through its sequence word: sequence, low, high, sequence,
/// kept when both sequence readings are the same even value (x86 keeps the guest's stores and
/// the host's loads in order, and the volatile reads keep the compiler from reordering them).
fn ran_of(read: impl Fn(u64) -> u32) -> Option<u64> {
    for _ in 0..1000 {
        let s1 = read(guest::RAN_SEQ);
        if s1 % 2 == 1 {
            std::hint::spin_loop();
            continue;
        }
        let low = read(guest::RAN);
        let high = read(guest::RAN + 4);
        if read(guest::RAN_SEQ) == s1 {
            return Some(u64::from(high) << 32 | u64::from(low));
        }
    }
    None
}

#[cfg(test)]
mod ran_tests {
    use std::cell::Cell;

    /// A reading the guest interrupted (the sequence moved, or is odd) is read again; one
    /// that never settles is none.
    #[test]
    fn a_torn_run_time_is_read_again() {
        let calls = Cell::new(0u32);
        // The first sequence reading is odd (mid-carry), then a carry lands between the
        // second try's readings, then the third try is clean.
        let seq = [1, 2, 4, 4];
        let seen = Cell::new(0usize);
        let read = |off: u64| -> u32 {
            calls.set(calls.get() + 1);
            match off {
                super::guest::RAN_SEQ => {
                    let v = seq[seen.get().min(seq.len() - 1)];
                    seen.set(seen.get() + 1);
                    v
                }
                super::guest::RAN => 7,
                _ => 3,
            }
        };
        assert_eq!(super::ran_of(read), Some(3 << 32 | 7));
        let odd = |off: u64| if off == super::guest::RAN_SEQ { 1 } else { 0 };
        assert_eq!(super::ran_of(odd), None);
    }
}
