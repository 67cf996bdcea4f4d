//! A small std HTTP server that survives being reachable: one thread per connection, one request
//! per connection, and every resource bounded.
//!
//! - A connection must deliver its whole request head within [`Limits::head_timeout`] of being
//!   accepted (TLS handshake included), however slowly it trickles: the read timeout is set to
//!   what is left of that deadline before every read, so a client sending a byte a second is
//!   cut off like an idle one (408).
//! - At most [`Limits::max_connections`] connections are open. A new connection beyond that
//!   evicts the oldest one still waiting for its head, so hundreds of idle or slow clients
//!   cannot keep a scraper out, and memory stays bounded (a small thread stack and an 8 KiB head
//!   buffer per connection). Only when every slot is busy answering does a newcomer get 503.
//! - The accept loop wakes every 100 ms to notice SIGTERM; the caller then drops its source.

use super::http::{self, MAX_HEAD, Refusal, Request, Response};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What one connection may take.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_connections: usize,
    pub head_timeout: Duration,
    pub write_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 64,
            head_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
        }
    }
}

/// Answers one parsed request.
pub type Handler = Arc<dyn Fn(&Request) -> Response + Send + Sync>;

struct Slot {
    id: u64,
    accepted: Instant,
    stream: TcpStream,
    reading: Arc<AtomicBool>,
}

/// Counters the metrics read.
#[derive(Debug, Default)]
pub struct Stats {
    pub evicted: AtomicU64,
    pub refused_busy: AtomicU64,
}

/// Serves until `stop` returns true. Never returns an error for a client's misbehaviour.
pub fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    handler: Handler,
    limits: Limits,
    stats: Arc<Stats>,
    stop: &dyn Fn() -> bool,
) -> std::io::Result<()> {
    use nix::poll::{PollFd, PollFlags, poll};
    listener.set_nonblocking(true)?;
    let slots: Arc<Mutex<Vec<Slot>>> = Arc::new(Mutex::new(Vec::new()));
    let mut next_id = 0u64;
    while !stop() {
        let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        // EINTR (a signal) just loops back to the stop check.
        if poll(&mut fds, 100u16).unwrap_or(0) <= 0 {
            continue;
        }
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(_) => continue,
        };
        let _ = stream.set_nonblocking(false);
        next_id += 1;
        let id = next_id;
        let reading = Arc::new(AtomicBool::new(true));
        if !admit(&slots, &stream, id, &reading, limits, &stats) {
            stats.refused_busy.fetch_add(1, Ordering::Relaxed);
            let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
            let r = Response::text((503, "Service Unavailable"), "503 busy\n");
            let _ = (&stream).write_all(&r.to_bytes(false));
            continue;
        }
        let (handler, tls, slots2) = (handler.clone(), tls.clone(), slots.clone());
        let spawned = std::thread::Builder::new()
            .name("cpulab-http".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                connection(stream, tls, &handler, limits, &reading);
                if let Ok(mut s) = slots2.lock() {
                    s.retain(|x| x.id != id);
                }
            });
        if spawned.is_err()
            && let Ok(mut s) = slots.lock()
        {
            s.retain(|x| x.id != id);
        }
    }
    Ok(())
}

/// Makes room for a new connection: evicts the oldest one still reading its head when the cap
/// is reached. False when every slot is busy answering.
fn admit(
    slots: &Mutex<Vec<Slot>>,
    stream: &TcpStream,
    id: u64,
    reading: &Arc<AtomicBool>,
    limits: Limits,
    stats: &Stats,
) -> bool {
    let Ok(mut s) = slots.lock() else {
        return false;
    };
    if s.len() >= limits.max_connections {
        let oldest = s
            .iter()
            .enumerate()
            .filter(|(_, x)| x.reading.load(Ordering::SeqCst))
            .min_by_key(|(_, x)| x.accepted)
            .map(|(i, _)| i);
        match oldest {
            Some(i) => {
                let old = s.swap_remove(i);
                let _ = old.stream.shutdown(Shutdown::Both);
                stats.evicted.fetch_add(1, Ordering::Relaxed);
            }
            None => return false,
        }
    }
    let Ok(clone) = stream.try_clone() else {
        return false;
    };
    s.push(Slot {
        id,
        accepted: Instant::now(),
        stream: clone,
        reading: reading.clone(),
    });
    true
}

/// A stream whose read timeout can be set (plain TCP, or TLS over TCP).
trait Conn: Read + Write {
    fn tcp(&self) -> &TcpStream;
    fn close(&mut self) {}
}

impl Conn for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

impl Conn for rustls::StreamOwned<rustls::ServerConnection, TcpStream> {
    fn tcp(&self) -> &TcpStream {
        &self.sock
    }
    fn close(&mut self) {
        self.conn.send_close_notify();
        let _ = self.flush();
    }
}

fn connection(
    stream: TcpStream,
    tls: Option<Arc<rustls::ServerConfig>>,
    handler: &Handler,
    limits: Limits,
    reading: &AtomicBool,
) {
    let _ = stream.set_write_timeout(Some(limits.write_timeout));
    let _ = stream.set_nodelay(true);
    let deadline = Instant::now() + limits.head_timeout;
    match tls {
        None => exchange(stream, handler, deadline, reading),
        Some(cfg) => {
            let Ok(conn) = rustls::ServerConnection::new(cfg) else {
                return;
            };
            exchange(
                rustls::StreamOwned::new(conn, stream),
                handler,
                deadline,
                reading,
            )
        }
    }
}

fn exchange(mut c: impl Conn, handler: &Handler, deadline: Instant, reading: &AtomicBool) {
    let (response, head_only) = match read_head(&mut c, deadline) {
        Ok(head) => match http::parse_head(&head) {
            Ok(req) => {
                reading.store(false, Ordering::SeqCst);
                (handler(&req), req.head_only)
            }
            Err(r) => (Response::refusal(r), false),
        },
        // A TLS client that failed its handshake gets nothing: there is no channel to write on.
        Err(None) => return,
        Err(Some(r)) => (Response::refusal(r), false),
    };
    reading.store(false, Ordering::SeqCst);
    if c.write_all(&response.to_bytes(head_only)).is_ok() {
        let _ = c.flush();
        c.close();
    }
    let _ = c.tcp().shutdown(Shutdown::Write);
}

/// Reads up to the end of the head. `Err(Some(refusal))` for a head that is too long or too
/// slow, `Err(None)` when the peer went away or the stream failed.
fn read_head(c: &mut impl Conn, deadline: Instant) -> Result<Vec<u8>, Option<Refusal>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Some(Refusal::Timeout));
        }
        let _ = c.tcp().set_read_timeout(Some(left));
        match c.read(&mut chunk) {
            Ok(0) => return Err(None),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(Some(Refusal::Timeout));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(None),
        }
        if let Some(end) = http::head_end(&buf) {
            buf.truncate(end);
            return Ok(buf);
        }
        if buf.len() > MAX_HEAD {
            return Err(Some(Refusal::HeadTooLarge));
        }
    }
}
