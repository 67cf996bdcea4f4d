//! A Unix stream socketpair: the wakeup path of local client/server protocols (PostgreSQL's
//! Unix socket, lmbench `lat_unix`).

use super::stream::FdStream;
use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
use std::io;

/// (initiator, responder) ends.
pub fn connect() -> io::Result<(FdStream, FdStream)> {
    let (a, b) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    Ok((
        FdStream {
            tx: a.try_clone()?,
            rx: a,
        },
        FdStream {
            tx: b.try_clone()?,
            rx: b,
        },
    ))
}
