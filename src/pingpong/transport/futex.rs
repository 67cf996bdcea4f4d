//! A futex word in shared memory: the primitive under every mutex and condition variable.
//! The sender stores the new state and calls FUTEX_WAKE (always, so each direction costs one
//! wake and one wait, as a blocking handoff does); the receiver sleeps in FUTEX_WAIT until the
//! word changes. Threads use the private futex hash (FUTEX_PRIVATE_FLAG, faster); processes
//! the shared one.

use super::{Abort, Connection, Initiator, Responder, SharedPage, peer_gone};
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

const PING: u32 = 1;
const PONG: u32 = 2;
const STOP: u32 = 3;
const ABORT: u32 = 4;

struct FutexEnd {
    page: Arc<SharedPage>,
    op_flags: i32,
}

impl FutexEnd {
    fn word(&self) -> &AtomicU32 {
        self.page.u32_at(0)
    }

    /// Sticky abort flag: a PING stored after an abort cannot hide it.
    fn aborted(&self) -> bool {
        self.page.u32_at(64).load(SeqCst) != 0
    }

    fn send(&self, v: u32) {
        self.word().store(v, SeqCst);
        futex(
            self.word(),
            libc::FUTEX_WAKE | self.op_flags,
            i32::MAX as u32,
        );
    }

    /// Sleeps until the word holds one of `wanted`, and returns it.
    fn wait_for(&self, wanted: &[u32]) -> u32 {
        loop {
            let v = self.word().load(SeqCst);
            if wanted.contains(&v) {
                return v;
            }
            if self.aborted() {
                return ABORT;
            }
            // Returns at once with EAGAIN if the word already changed, or EINTR: both fine.
            futex(self.word(), libc::FUTEX_WAIT | self.op_flags, v);
        }
    }
}

fn futex(word: &AtomicU32, op: i32, val: u32) {
    // SAFETY: neither nix nor std wraps futex(2). word is a valid, aligned u32 in memory that
    // outlives the call; no timeout.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op,
            val,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

impl Initiator for FutexEnd {
    fn round_trip(&mut self) -> io::Result<()> {
        self.send(PING);
        match self.wait_for(&[PONG]) {
            PONG => Ok(()),
            _ => Err(peer_gone()),
        }
    }

    fn stop(&mut self) -> io::Result<()> {
        self.send(STOP);
        Ok(())
    }
}

impl Responder for FutexEnd {
    fn answer(&mut self) -> io::Result<bool> {
        if self.wait_for(&[PING, STOP]) != PING {
            return Ok(false);
        }
        self.send(PONG);
        Ok(true)
    }
}

impl Abort for FutexEnd {
    fn abort(&self) {
        self.page.u32_at(64).store(1, SeqCst);
        self.send(ABORT);
    }
}

pub fn connect(private: bool) -> io::Result<Connection> {
    let page = SharedPage::new()?;
    let op_flags = if private { libc::FUTEX_PRIVATE_FLAG } else { 0 };
    let end = || FutexEnd {
        page: page.clone(),
        op_flags,
    };
    Ok(Connection {
        initiator: Box::new(end()),
        responder: Box::new(end()),
        abort: Arc::new(end()),
    })
}
