//! Two eventfds, one per direction: the lightest file-descriptor wakeup (what KVM's ioeventfd,
//! io_uring and many event loops use). A stop or abort is a large value added to the counter.

use super::{Abort, Connection, Initiator, Responder, peer_gone, read_exact, write_all};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;

const ONE: [u8; 8] = 1u64.to_ne_bytes();
/// Any counter value at or above this is a stop (towards the responder) or an abort
/// (towards the initiator).
const STOP: u64 = 1 << 32;

struct EventfdEnd {
    rx: OwnedFd,
    tx: OwnedFd,
}

fn eventfd() -> io::Result<OwnedFd> {
    use nix::sys::eventfd::{EfdFlags, EventFd};
    Ok(EventFd::from_flags(EfdFlags::EFD_CLOEXEC)?.into())
}

fn read_value(fd: &OwnedFd) -> io::Result<u64> {
    let mut buf = [0u8; 8];
    if !read_exact(fd, &mut buf)? {
        return Err(peer_gone());
    }
    Ok(u64::from_ne_bytes(buf))
}

impl Initiator for EventfdEnd {
    fn round_trip(&mut self) -> io::Result<()> {
        write_all(&self.tx, &ONE)?;
        if read_value(&self.rx)? >= STOP {
            return Err(peer_gone());
        }
        Ok(())
    }

    fn stop(&mut self) -> io::Result<()> {
        write_all(&self.tx, &STOP.to_ne_bytes())
    }
}

impl Responder for EventfdEnd {
    fn answer(&mut self) -> io::Result<bool> {
        if read_value(&self.rx)? >= STOP {
            return Ok(false);
        }
        write_all(&self.tx, &ONE)?;
        Ok(true)
    }
}

/// Holds its own descriptor of the initiator's receiving eventfd.
struct EventfdAbort(OwnedFd);

impl Abort for EventfdAbort {
    fn abort(&self) {
        let _ = write_all(&self.0, &STOP.to_ne_bytes());
    }
}

pub fn connect() -> io::Result<Connection> {
    let ping = eventfd()?;
    let pong = eventfd()?;
    let abort = EventfdAbort(pong.try_clone()?);
    Ok(Connection {
        initiator: Box::new(EventfdEnd {
            rx: pong,
            tx: ping.try_clone()?,
        }),
        responder: Box::new(EventfdEnd {
            rx: ping,
            tx: abort.0.try_clone()?,
        }),
        abort: Arc::new(abort),
    })
}
