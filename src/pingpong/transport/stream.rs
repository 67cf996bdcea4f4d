//! Byte-stream transports (pipes, Unix sockets, TCP): a 4-byte message each way per round
//! trip, as `perf bench sched pipe` sends, so the two are comparable call for call.

use super::{Abort, Connection, Initiator, Responder, peer_gone, read_exact, write_all};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;

const PING: [u8; 4] = 0u32.to_ne_bytes();
const STOP: [u8; 4] = 1u32.to_ne_bytes();
/// Sent on the responder's behalf when it is gone: anything but a pong is one.
const ABORT: [u8; 4] = 2u32.to_ne_bytes();

/// One end of a byte stream: where it reads and where it writes (the same socket, duplicated,
/// for bidirectional transports).
pub struct FdStream {
    pub rx: OwnedFd,
    pub tx: OwnedFd,
}

pub fn connection((initiator, responder): (FdStream, FdStream)) -> io::Result<Connection> {
    let abort = StreamAbort(responder.tx.try_clone()?);
    Ok(Connection {
        initiator: Box::new(initiator),
        responder: Box::new(responder),
        abort: Arc::new(abort),
    })
}

/// Holds its own descriptor of the responder's sending side.
struct StreamAbort(OwnedFd);

impl Abort for StreamAbort {
    fn abort(&self) {
        let _ = write_all(&self.0, &ABORT);
    }
}

impl Initiator for FdStream {
    fn round_trip(&mut self) -> io::Result<()> {
        write_all(&self.tx, &PING)?;
        let mut buf = [0u8; 4];
        if read_exact(&self.rx, &mut buf)? && buf == PING {
            Ok(())
        } else {
            Err(peer_gone())
        }
    }

    fn stop(&mut self) -> io::Result<()> {
        write_all(&self.tx, &STOP)
    }
}

impl Responder for FdStream {
    fn answer(&mut self) -> io::Result<bool> {
        let mut buf = [0u8; 4];
        if !read_exact(&self.rx, &mut buf)? || buf == STOP {
            return Ok(false);
        }
        write_all(&self.tx, &PING)?;
        Ok(true)
    }
}
