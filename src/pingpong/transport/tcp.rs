//! TCP over loopback with TCP_NODELAY: the wakeup path plus the TCP/IP stack and softirq
//! processing (lmbench `lat_tcp`). The listener binds 127.0.0.1 on an ephemeral port and is
//! closed as soon as the one connection is accepted.

use super::stream::FdStream;
use std::io;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;

/// (initiator, responder) ends.
pub fn connect() -> io::Result<(FdStream, FdStream)> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let client = TcpStream::connect(listener.local_addr()?)?;
    let (server, _) = listener.accept()?;
    drop(listener);
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let end = |s: TcpStream| -> io::Result<FdStream> {
        let rx = OwnedFd::from(s);
        Ok(FdStream {
            tx: rx.try_clone()?,
            rx,
        })
    };
    Ok((end(client)?, end(server)?))
}
