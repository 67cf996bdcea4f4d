//! Two pipes, one per direction: the classic blocking wakeup of `perf bench sched pipe` and
//! lmbench `lat_pipe`.

use super::stream::FdStream;
use nix::fcntl::OFlag;
use std::io;

/// (initiator, responder) ends.
pub fn connect() -> io::Result<(FdStream, FdStream)> {
    let (ping_rx, ping_tx) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let (pong_rx, pong_tx) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    Ok((
        FdStream {
            rx: pong_rx,
            tx: ping_tx,
        },
        FdStream {
            rx: ping_rx,
            tx: pong_tx,
        },
    ))
}
