//! Transports: how one endpoint wakes the other.
//!
//! Every method is a pair of ends behind two small traits, in the style of
//! core-to-core-latency's one-file-per-workload: the [`Initiator`] sends a ping and waits for the
//! pong, the [`Responder`] waits for a ping and answers it. Both ends are created before the
//! endpoints are started (before `fork` for two processes), so a transport never has to
//! rendezvous by name: pipes, socketpairs, a loopback TCP connection, eventfds and a shared
//! memory page are all inherited.
//!
//! Stopping is part of the protocol (a stop message), never a close: a forked child keeps copies
//! of the parent's descriptors, so end-of-file cannot be relied on to tell the responder to
//! leave. For the same reason a vanished responder (a child killed from outside, a thread that
//! failed) is reported by an [`Abort`], called by whoever watches the responder: it sends or
//! stores a poison value where the initiator waits, and the initiator returns an error instead
//! of waiting forever.

mod eventfd;
mod futex;
mod pipe;
mod spin;
mod stream;
mod tcp;
mod unix;

use super::clock::Timer;
use super::settings::{Endpoints, Method};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// The side that times: sends a ping, waits for the pong.
pub trait Initiator: Send {
    /// One ping and its pong. An error means the peer is gone or the transport broke.
    fn round_trip(&mut self) -> io::Result<()>;
    /// Tells the responder to leave its loop (best effort: it may already be gone).
    fn stop(&mut self) -> io::Result<()>;

    /// The timed loop: `laps.len()` round trips, each one's duration stored in ticks of
    /// `timer`; `prev` holds the tick count at which the first began and is left at the end of
    /// the last (the end of one round trip is the start of the next: one clock read each).
    /// Provided, so it is compiled for each transport and calls `round_trip` directly: no
    /// dynamic dispatch inside the loop.
    fn timed_laps(&mut self, laps: &mut [u64], timer: Timer, prev: &mut u64) -> io::Result<()> {
        for lap in laps.iter_mut() {
            self.round_trip()?;
            let now = timer.ticks();
            *lap = now.wrapping_sub(*prev);
            *prev = now;
        }
        Ok(())
    }

    /// [`Initiator::timed_laps`] with `work` touched (see [`touch`]) as soon as each pong has
    /// woken this side, timed apart: `laps` gets the round trips alone, and the ticks the work
    /// took are returned. The next round trip starts when the work ends.
    fn timed_laps_touching(
        &mut self,
        laps: &mut [u64],
        work: &mut [u64],
        timer: Timer,
        prev: &mut u64,
    ) -> io::Result<u64> {
        let mut touched = 0u64;
        for lap in laps.iter_mut() {
            self.round_trip()?;
            let woke = timer.ticks();
            touch(work);
            let now = timer.ticks();
            *lap = woke.wrapping_sub(*prev);
            touched += now.wrapping_sub(woke);
            *prev = now;
        }
        Ok(touched)
    }
}

/// Writes one word of every 64-byte line of `work`: the work done after each wakeup with
/// `--touch`, whose cost depends on how much of `work` the CPU's caches still hold.
#[inline(never)]
pub fn touch(work: &mut [u64]) {
    for w in work.iter_mut().step_by(8) {
        *w = w.wrapping_add(1);
    }
    std::hint::black_box(work);
}

/// The side that echoes.
pub trait Responder: Send {
    /// Waits for one ping and answers it; `Ok(false)` when told to stop.
    fn answer(&mut self) -> io::Result<bool>;
}

/// Unblocks an initiator waiting for a responder that will never answer.
pub trait Abort: Send + Sync {
    fn abort(&self);
}

/// Both ends of one transport, and how to unblock the initiator if the responder dies.
pub struct Connection {
    pub initiator: Box<dyn Initiator>,
    pub responder: Box<dyn Responder>,
    /// Async-signal-safe (only atomics and system calls), so a forked watcher may call it.
    pub abort: Arc<dyn Abort>,
}

/// Creates both ends of `method` for endpoints of kind `endpoints`.
pub fn connect(method: Method, endpoints: Endpoints) -> io::Result<Connection> {
    let shared = endpoints == Endpoints::Processes;
    match method {
        Method::Pipe => stream::connection(pipe::connect()?),
        Method::Unix => stream::connection(unix::connect()?),
        Method::Tcp => stream::connection(tcp::connect()?),
        Method::Futex => futex::connect(!shared),
        Method::Eventfd => eventfd::connect(),
        Method::Spin => spin::connect(),
    }
}

/// One page of memory shared by both endpoints, threads or forked processes alike
/// (`MAP_SHARED | MAP_ANONYMOUS` survives `fork`). Page-aligned, so a word at offset 0 has a
/// cache line to itself unless the caller puts more there.
pub struct SharedPage {
    ptr: *mut u8,
}

// SAFETY: the page is only accessed through atomics.
unsafe impl Send for SharedPage {}
// SAFETY: as above.
unsafe impl Sync for SharedPage {}

pub const PAGE_BYTES: usize = 4096;

impl SharedPage {
    pub fn new() -> io::Result<Arc<Self>> {
        // SAFETY: mapping memory is unsafe in nix too (the pointer is ours to manage). An
        // anonymous shared mapping with no address hint; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Arc::new(Self { ptr: ptr.cast() }))
    }

    /// The 32-bit atomic at byte `offset` (a multiple of 4 inside the page).
    pub fn u32_at(&self, offset: usize) -> &AtomicU32 {
        assert!(offset.is_multiple_of(4) && offset + 4 <= PAGE_BYTES);
        // SAFETY: in bounds and aligned (checked above); the mapping lives as long as self and
        // is zero-initialised, a valid AtomicU32.
        unsafe { &*self.ptr.add(offset).cast::<AtomicU32>() }
    }

    /// The 64-bit atomic at byte `offset` (a multiple of 8 inside the page).
    pub fn u64_at(&self, offset: usize) -> &AtomicU64 {
        assert!(offset.is_multiple_of(8) && offset + 8 <= PAGE_BYTES);
        // SAFETY: as for `u32_at`.
        unsafe { &*self.ptr.add(offset).cast::<AtomicU64>() }
    }
}

impl Drop for SharedPage {
    fn drop(&mut self) {
        // SAFETY: ptr came from mmap of PAGE_BYTES and is unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), PAGE_BYTES) };
    }
}

/// Writes all of `buf` to `fd`, retrying on EINTR.
pub(crate) fn write_all(fd: &OwnedFd, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match nix::unistd::write(fd, buf) {
            Ok(n) => buf = &buf[n..],
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Fills `buf` from `fd`, retrying on EINTR. `Ok(false)` on end-of-file before any byte.
pub(crate) fn read_exact(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        let n = match nix::unistd::read(fd, &mut buf[got..]) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        if n == 0 {
            if got == 0 {
                return Ok(false);
            }
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got += n;
    }
    Ok(true)
}

/// The error an initiator returns when its peer is gone.
pub(crate) fn peer_gone() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the responder stopped answering")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every method completes round trips between two threads and stops cleanly.
    #[test]
    fn every_method_round_trips_between_threads() {
        for m in Method::ALL {
            let Connection {
                mut initiator,
                mut responder,
                ..
            } = connect(m, Endpoints::Threads).unwrap();
            let h = std::thread::spawn(move || {
                let mut n = 0u64;
                while responder.answer().unwrap() {
                    n += 1;
                }
                n
            });
            for _ in 0..100 {
                initiator.round_trip().unwrap();
            }
            initiator.stop().unwrap();
            assert_eq!(h.join().unwrap(), 100, "{m}");
        }
    }

    /// A responder that disappears unblocks the initiator instead of hanging it.
    #[test]
    fn abort_unblocks_the_initiator() {
        for m in Method::ALL {
            let c = connect(m, Endpoints::Threads).unwrap();
            let mut ini = c.initiator;
            let abort = c.abort;
            let _keep_open = c.responder;
            let h = std::thread::spawn(move || ini.round_trip());
            std::thread::sleep(std::time::Duration::from_millis(20));
            abort.abort();
            assert!(h.join().unwrap().is_err(), "{m}");
        }
    }
}
