//! A minimal HTTP server and client inside cpulab, for machines without a web server or load
//! generator installed.
//!
//! The server is one thread, pinned like any server, answering `GET` with a fixed page (HTTP/1.0
//! closes after each response, HTTP/1.1 keeps the connection). The client is one thread making
//! one HTTP/1.0 request per connection, like `ab -c 1`, and counts completed requests over the
//! time it actually ran. Being threads of cpulab, their counters are those of one task.

use super::{Env, Server};
use crate::affinity;
use crate::cpulist::CpuSet;
use crate::pair::metric::Metric;
use crate::pair::observe::Target;
use anyhow::{Context, Result, anyhow};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The page every request fetches, from this server and from the document root given to
/// apache or nginx: small, so the request is all round trip and no bandwidth.
pub const PAGE: &str = "<html><body><h1>It works!</h1><p>cpulab pair</p></body></html>\n";

pub struct HttpServer {
    port: u16,
    running: Option<Running>,
}

struct Running {
    stop: Arc<AtomicBool>,
    tid: i32,
    handle: JoinHandle<()>,
}

impl HttpServer {
    pub fn new(port: u16) -> Self {
        Self {
            port,
            running: None,
        }
    }

    /// Stops the thread: raise the flag, wake the blocking accept with a connection, join.
    fn halt(&mut self) {
        if let Some(r) = self.running.take() {
            r.stop.store(true, Ordering::Relaxed);
            let _ = TcpStream::connect(("127.0.0.1", self.port));
            let _ = r.handle.join();
        }
    }
}

fn response(keep_alive: bool) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: {}\r\n\r\n{PAGE}",
        PAGE.len(),
        if keep_alive { "keep-alive" } else { "close" }
    )
    .into_bytes()
}

/// Serves one connection until the client closes it or asks to.
fn serve(mut s: TcpStream, stop: &AtomicBool) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        let end = buf.windows(4).position(|w| w == b"\r\n\r\n");
        let Some(end) = end else {
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let keep = head.contains("http/1.1") && !head.contains("connection: close");
        if s.write_all(&response(keep)).is_err() || !keep {
            return;
        }
        buf.drain(..end + 4);
    }
}

impl Server for HttpServer {
    fn describe(&self) -> String {
        "cpulab built-in HTTP server (one thread of cpulab)".to_string()
    }
    fn command(&self) -> Vec<String> {
        Vec::new()
    }
    fn start(&mut self, cpus: Option<&CpuSet>, env: &mut Env) -> Result<()> {
        self.stop(env);
        let listener = TcpListener::bind(("127.0.0.1", self.port))
            .with_context(|| format!("cannot listen on 127.0.0.1:{}", self.port))?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let (flag, cpus) = (stop.clone(), cpus.cloned());
        let handle = std::thread::Builder::new()
            .name("cpulab-httpd".into())
            .spawn(move || {
                let pinned = cpus.as_ref().map(|c| affinity::set(0, c)).transpose();
                let _ = tx.send(
                    pinned
                        .map(|_| affinity::gettid())
                        .map_err(|e| format!("{e:#}")),
                );
                for conn in listener.incoming() {
                    if flag.load(Ordering::Relaxed) {
                        break;
                    }
                    if let Ok(s) = conn {
                        serve(s, &flag);
                    }
                }
            })
            .context("cannot start the built-in HTTP server thread")?;
        let tid = rx
            .recv()
            .map_err(|_| anyhow!("the built-in HTTP server thread ended at start"))?
            .map_err(|e| anyhow!("cannot pin the built-in HTTP server: {e}"))?;
        self.running = Some(Running { stop, tid, handle });
        Ok(())
    }
    fn stop(&mut self, _env: &mut Env) {
        self.halt();
    }
    fn target(&self) -> Option<Target> {
        self.running.as_ref().map(|r| Target::Task {
            pid: std::process::id() as i32,
            tid: r.tid,
        })
    }
    fn check_alive(&mut self) -> Result<()> {
        match &self.running {
            Some(r) if !r.handle.is_finished() => Ok(()),
            _ => Err(anyhow!("the built-in HTTP server thread has stopped")),
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The built-in client's metric: requests per second it measured itself.
pub fn client_metric() -> Metric {
    // The client formats its own summary line in this shape.
    Metric::parse(r"requests/s: (?P<value>[0-9.]+)", Some("requests/s"), true)
        .unwrap_or_else(|_| unreachable!("literal pattern"))
}

/// What the built-in client did.
#[derive(Clone, Copy, Debug)]
pub struct ClientResult {
    pub requests: u64,
    pub failures: u64,
    pub elapsed: Duration,
}

fn one_request(port: u16, path: &str) -> std::io::Result<bool> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut body = Vec::with_capacity(256);
    s.read_to_end(&mut body)?;
    Ok(body.starts_with(b"HTTP/1.1 200") || body.starts_with(b"HTTP/1.0 200"))
}

/// Starts the client thread on `cpus`; it sends its thread id, then runs for `secs`.
pub fn spawn_client(
    port: u16,
    path: String,
    cpus: Option<CpuSet>,
    secs: u32,
    stop: Arc<AtomicBool>,
) -> Result<(i32, JoinHandle<ClientResult>)> {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::Builder::new()
        .name("cpulab-http-client".into())
        .spawn(move || {
            let pinned = cpus.as_ref().map(|c| affinity::set(0, c)).transpose();
            let _ = tx.send(
                pinned
                    .map(|_| affinity::gettid())
                    .map_err(|e| format!("{e:#}")),
            );
            let start = Instant::now();
            let until = start + Duration::from_secs(u64::from(secs));
            let (mut requests, mut failures) = (0, 0);
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                match one_request(port, &path) {
                    Ok(true) => requests += 1,
                    _ => failures += 1,
                }
                if failures > 100 && requests == 0 {
                    break;
                }
            }
            ClientResult {
                requests,
                failures,
                elapsed: start.elapsed(),
            }
        })
        .context("cannot start the built-in HTTP client thread")?;
    let tid = rx
        .recv()
        .map_err(|_| anyhow!("the built-in HTTP client thread ended at start"))?
        .map_err(|e| anyhow!("cannot pin the built-in HTTP client: {e}"))?;
    Ok((tid, handle))
}
