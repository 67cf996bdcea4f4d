//! The single-threaded primitives: a syscall, a clock read, thread and process creation,
//! page faults and mappings. Each is the cheapest honest form of its kind, so what changes
//! between two kernels is the kernel's entry, exit and bookkeeping, not our code.

use super::batch::{BatchOutcome, Primitive};
use anyhow::{Context, Result, bail};
use std::ffi::CString;
use std::hint::black_box;
use std::time::{Duration, Instant};

fn timed(f: impl FnOnce() -> Result<()>) -> Result<Duration> {
    let t0 = Instant::now();
    f()?;
    Ok(t0.elapsed())
}

/// A batch timed by [`timed`] whose operations are not counted by anything but the loop.
fn uncounted(f: impl FnOnce() -> Result<()>) -> Result<BatchOutcome> {
    Ok(BatchOutcome {
        elapsed: timed(f)?,
        counted: None,
    })
}

/// Counters of the calling thread from `getrusage(RUSAGE_THREAD)`: (minor faults, voluntary
/// switches, involuntary switches).
pub fn thread_rusage() -> Option<(u64, u64, u64)> {
    use nix::sys::resource::{UsageWho, getrusage};
    let ru = getrusage(UsageWho::RUSAGE_THREAD).ok()?;
    let n = |v: libc::c_long| u64::try_from(v).unwrap_or(0);
    Some((
        n(ru.minor_page_faults()),
        n(ru.voluntary_context_switches()),
        n(ru.involuntary_context_switches()),
    ))
}

/// `getppid` through `syscall(2)`, so no C library can answer it from a cache.
pub struct Getppid;

impl Primitive for Getppid {
    fn name(&self) -> &'static str {
        "syscall_getppid"
    }
    fn what(&self) -> String {
        "getppid via syscall(SYS_getppid): kernel entry and exit".into()
    }
    fn batch(&mut self, ops: u64) -> Result<BatchOutcome> {
        uncounted(|| {
            for _ in 0..ops {
                // SAFETY: getppid takes no arguments and cannot fail. The raw system call is the
                // primitive measured, so no wrapper (nor C library cache) stands in between.
                black_box(unsafe { libc::syscall(libc::SYS_getppid) });
            }
            Ok(())
        })
    }
}

/// `clock_gettime(CLOCK_MONOTONIC)`: the vDSO on most systems, a real syscall when the
/// clocksource cannot be read from user space (some VMs, `hpet`, `acpi_pm`).
pub struct ClockGettime;

impl Primitive for ClockGettime {
    fn name(&self) -> &'static str {
        "clock_gettime"
    }
    fn what(&self) -> String {
        "clock_gettime(CLOCK_MONOTONIC) (vDSO unless the clocksource forbids it)".into()
    }
    fn batch(&mut self, ops: u64) -> Result<BatchOutcome> {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        uncounted(|| {
            for _ in 0..ops {
                // SAFETY: ts is valid and writable. The bare vDSO call is what is measured; a
                // wrapper would add its own cost to the figure.
                black_box(unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) });
            }
            Ok(())
        })
    }
}

/// Creating a thread and joining it (it does nothing).
pub struct ThreadCreate;

impl Primitive for ThreadCreate {
    fn name(&self) -> &'static str {
        "thread_create_join"
    }
    fn what(&self) -> String {
        "std::thread spawn of an empty thread + join (clone, stack mmap, exit, futex wake)".into()
    }
    fn max_ops(&self) -> u64 {
        100_000
    }
    fn batch(&mut self, ops: u64) -> Result<BatchOutcome> {
        uncounted(|| {
            for _ in 0..ops {
                let h = std::thread::Builder::new()
                    .spawn(|| black_box(0u64))
                    .context("cannot create a thread")?;
                let _ = h.join();
            }
            Ok(())
        })
    }
}

/// Forks a child that runs `child` (which must only call async-signal-safe functions and should
/// not return) and waits for it; fails unless it exits with status 0.
fn fork_and_wait(child: &dyn Fn()) -> Result<()> {
    // SAFETY: fork is unsafe in every wrapper; fork, exit and wait are the measured sequence.
    // The child branch only calls async-signal-safe functions (via `child`).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error()).context("fork failed");
    }
    if pid == 0 {
        child();
        // SAFETY: _exit is async-signal-safe; reached only if `child` returned.
        unsafe { libc::_exit(127) };
    }
    let mut status = 0;
    // SAFETY: pid is our child; status is writable.
    let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
    if rc != pid || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("child {pid} did not exit cleanly (status {status:#x})");
    }
    Ok(())
}

/// fork + `_exit(0)` in the child + `waitpid` in the parent.
pub struct ForkExit;

impl Primitive for ForkExit {
    fn name(&self) -> &'static str {
        "fork_exit_wait"
    }
    fn what(&self) -> String {
        "fork, child _exit(0), parent waitpid (cost grows with the parent's mappings)".into()
    }
    fn max_ops(&self) -> u64 {
        10_000
    }
    fn batch(&mut self, ops: u64) -> Result<BatchOutcome> {
        // SAFETY: _exit is async-signal-safe.
        let child = || unsafe { libc::_exit(0) };
        uncounted(|| {
            for _ in 0..ops {
                fork_and_wait(&child)?;
            }
            Ok(())
        })
    }
}

/// fork + exec of `/bin/true` + `waitpid`.
pub struct ForkExec {
    path: CString,
}

impl ForkExec {
    /// Finds `true`; fails (and the entry is reported unavailable) when there is none.
    pub fn new() -> Result<Self> {
        let found = ["/bin/true", "/usr/bin/true"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .context("no /bin/true or /usr/bin/true to exec")?;
        Ok(Self {
            path: CString::new(found)?,
        })
    }
}

impl Primitive for ForkExec {
    fn name(&self) -> &'static str {
        "fork_exec_wait"
    }
    fn what(&self) -> String {
        format!(
            "fork, child execv({}), parent waitpid: process creation and program load",
            self.path.to_string_lossy()
        )
    }
    fn max_ops(&self) -> u64 {
        10_000
    }
    fn batch(&mut self, ops: u64) -> Result<BatchOutcome> {
        let path = self.path.as_ptr();
        let argv = [path, std::ptr::null()];
        let child = || {
            // SAFETY: prctl, execv and _exit are async-signal-safe; argv is a null-terminated
            // array of valid C strings that outlives the call. The death signal ends the child
            // if cpulab is killed while it runs.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                libc::execv(path, argv.as_ptr());
                libc::_exit(127)
            }
        };
        uncounted(|| {
            for _ in 0..ops {
                fork_and_wait(&child)?;
            }
            Ok(())
        })
    }
}

fn page_size() -> usize {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE) {
        Ok(Some(p)) if p > 0 => p as usize,
        _ => 4096,
    }
}

/// An anonymous private mapping, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(len: usize) -> Result<Self> {
        // SAFETY: mapping memory is unsafe in nix too; mapping and faulting pages is what is
        // measured. A fresh anonymous mapping; the kernel picks the address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error()).context("mmap failed");
        }
        Ok(Self {
            ptr: ptr.cast(),
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from a successful mmap and are unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A minor page fault: the first write to each page of a fresh anonymous mapping.
pub struct PageFault;

impl Primitive for PageFault {
    fn name(&self) -> &'static str {
        "page_fault"
    }
    fn what(&self) -> String {
        format!(
            "first write to a fresh {} KiB anonymous page (minor fault, zeroing; THP off)",
            page_size() / 1024
        )
    }
    /// 1024 pages (4 MiB): each batch maps and touches this much, and at 16384 (64 MiB) the
    /// batches made most of the doctor's peak RSS (issue 22: 30.7 MB against 13.7 MB). A
    /// batch of 1024 faults still lasts about a millisecond.
    fn max_ops(&self) -> u64 {
        1024
    }
    fn counter(&self) -> Option<(&'static str, &'static str)> {
        Some(("minor_faults", "about 1 per page"))
    }
    fn batch(&mut self, ops: u64) -> Result<BatchOutcome> {
        let page = page_size();
        let m = Mapping::new(ops as usize * page)?;
        // SAFETY: the range is our mapping. Huge pages would fault 512 pages at once.
        unsafe { libc::madvise(m.ptr.cast(), m.len, libc::MADV_NOHUGEPAGE) };
        let before = thread_rusage();
        let elapsed = timed(|| {
            for i in 0..ops as usize {
                // SAFETY: i * page < m.len: inside the writable mapping.
                unsafe { std::ptr::write_volatile(m.ptr.add(i * page), 1) };
            }
            Ok(())
        })?;
        let counted = match (before, thread_rusage()) {
            (Some(b), Some(a)) => Some(a.0.saturating_sub(b.0)),
            _ => None,
        };
        drop(m);
        Ok(BatchOutcome { elapsed, counted })
    }
}

/// mmap and munmap of a 64 KiB anonymous region that is never touched.
pub struct MmapMunmap;

impl Primitive for MmapMunmap {
    fn name(&self) -> &'static str {
        "mmap_munmap_64k"
    }
    fn what(&self) -> String {
        "mmap + munmap of 64 KiB anonymous memory, untouched (VMA setup and teardown)".into()
    }
    fn batch(&mut self, ops: u64) -> Result<BatchOutcome> {
        uncounted(|| {
            for _ in 0..ops {
                black_box(Mapping::new(64 * 1024)?);
            }
            Ok(())
        })
    }
}
