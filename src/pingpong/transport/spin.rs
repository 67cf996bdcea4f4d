//! Spinning on one shared cache line, the core-to-core-latency method: the initiator stores
//! PING, the responder spins until it sees it and stores PONG, the initiator spins until it sees
//! that. A round trip is two cache-line transfers and no kernel at all, so it measures cache
//! distance alone. Meaningless on one CPU (the waiter spins out its time slice before the other
//! side can run), so it is skipped there; a waiter that has spun for a long time yields, so an
//! unpinned run whose ends land on one CPU crawls instead of hanging.

use super::{Abort, Connection, Initiator, Responder, SharedPage, peer_gone};
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const PING: u64 = 1;
const PONG: u64 = 2;
const STOP: u64 = 3;
/// Spins before yielding the CPU: a few milliseconds, far beyond any cross-CPU transfer.
const SPINS_BEFORE_YIELD: u32 = 1 << 16;

struct SpinEnd {
    page: Arc<SharedPage>,
}

impl SpinEnd {
    fn line(&self) -> &AtomicU64 {
        self.page.u64_at(0)
    }

    /// Sticky abort flag on its own cache line: a PING stored after an abort cannot hide it.
    fn aborted(&self) -> &AtomicU64 {
        self.page.u64_at(64)
    }

    /// Spins until the line holds `a` or `b` (`None` if aborted meanwhile).
    fn wait_for(&self, a: u64, b: u64) -> Option<u64> {
        let mut spins = 0u32;
        loop {
            let v = self.line().load(Ordering::Acquire);
            if v == a || v == b {
                return Some(v);
            }
            spins += 1;
            if spins == SPINS_BEFORE_YIELD {
                spins = 0;
                if self.aborted().load(Ordering::Acquire) != 0 {
                    return None;
                }
                std::thread::yield_now();
            }
            std::hint::spin_loop();
        }
    }
}

impl Initiator for SpinEnd {
    fn round_trip(&mut self) -> io::Result<()> {
        self.line().store(PING, Ordering::Release);
        match self.wait_for(PONG, PONG) {
            Some(_) => Ok(()),
            None => Err(peer_gone()),
        }
    }

    fn stop(&mut self) -> io::Result<()> {
        self.line().store(STOP, Ordering::Release);
        Ok(())
    }
}

impl Responder for SpinEnd {
    fn answer(&mut self) -> io::Result<bool> {
        if self.wait_for(PING, STOP) != Some(PING) {
            return Ok(false);
        }
        self.line().store(PONG, Ordering::Release);
        Ok(true)
    }
}

impl Abort for SpinEnd {
    fn abort(&self) {
        self.aborted().store(1, Ordering::Release);
    }
}

pub fn connect() -> io::Result<Connection> {
    let page = SharedPage::new()?;
    let end = || SpinEnd { page: page.clone() };
    Ok(Connection {
        initiator: Box::new(end()),
        responder: Box::new(end()),
        abort: Arc::new(end()),
    })
}
