//! The exporter's HTTP side: hyper 1.x (HTTP/1.1 only) on a current-thread tokio runtime, TLS
//! through tokio-rustls, every resource bounded, as it faces a network.
//!
//! - **One request per connection** (`Connection: close`), as before: Prometheus reconnects per
//!   scrape, and each connection is served with the web config current when it was accepted
//!   ([`WebConfig::current`]), so a renewed certificate is served on the next one.
//! - **A connection must deliver its request head within [`Limits::head_timeout`] of being
//!   accepted**, TLS handshake included, however slowly it trickles; then it is closed. Once
//!   its head is in, it has [`Limits::answer_timeout`] to be answered and read.
//! - **Heads are bounded** by hyper: [`MAX_HEAD`] bytes and [`MAX_HEADERS`] lines, beyond which
//!   it answers 431.
//! - **At most [`Limits::max_connections`] are open.** A new connection beyond that evicts the
//!   oldest one still sending its head (`cpulab_exporter_connections_evicted_total`), so hundreds
//!   of idle or slow clients cannot keep a scraper out; only when every slot is being answered
//!   is the newcomer closed.
//! - **bcrypt checks run one at a time** on the runtime's blocking pool, after the cache of
//!   [`super::auth`]: a flood of wrong passwords costs one check per distinct password and at
//!   most one CPU, and the runtime's thread keeps serving meanwhile. Scrapes run there too,
//!   through the one [`Handler`] seam.
//! - **SIGTERM**: the accept loop looks at `stop` every [`STOP_CHECK`]; the runtime is then shut
//!   down, closing every connection.

use super::http::{self, MAX_HEAD, MAX_HEADERS, Request, Response};
use super::webconfig::{Generation, WebConfig};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::task::AbortHandle;
use tokio::time::Instant;

/// How often the accept loop looks for SIGTERM or Ctrl-C.
pub const STOP_CHECK: Duration = Duration::from_millis(250);
/// Threads that may run scrapes and bcrypt checks at once, beside the runtime's own.
const BLOCKING_THREADS: usize = 2;

/// What one connection may take.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_connections: usize,
    /// From accept to the end of the request head, TLS handshake included.
    pub head_timeout: Duration,
    /// From the end of the head to the end of the response.
    pub answer_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 64,
            head_timeout: Duration::from_secs(10),
            answer_timeout: Duration::from_secs(10),
        }
    }
}

/// Answers one accepted, authorised request (the pages: the landing page and the scrape).
pub type Handler = Arc<dyn Fn(&Request) -> Response + Send + Sync>;

/// Counters the metrics read.
#[derive(Debug, Default)]
pub struct Stats {
    pub evicted: AtomicU64,
    pub refused_busy: AtomicU64,
}

/// What every connection task shares.
struct Shared {
    web: Option<Arc<WebConfig>>,
    handler: Handler,
    limits: Limits,
    stats: Arc<Stats>,
    slots: Mutex<Vec<Slot>>,
    /// One bcrypt check at a time.
    bcrypt: Arc<tokio::sync::Mutex<()>>,
}

struct Slot {
    id: u64,
    accepted: Instant,
    state: Arc<ConnState>,
    task: AbortHandle,
}

/// When a connection's request head arrived, if it has.
#[derive(Default)]
struct ConnState {
    dispatched: OnceLock<Instant>,
}

/// Serves until `stop` returns true. Never returns an error for a client's misbehaviour.
pub fn serve(
    listener: std::net::TcpListener,
    web: Option<Arc<WebConfig>>,
    handler: Handler,
    limits: Limits,
    stats: Arc<Stats>,
    stop: &dyn Fn() -> bool,
) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .max_blocking_threads(BLOCKING_THREADS)
        .thread_name("cpulab-http")
        .build()?;
    listener.set_nonblocking(true)?;
    let shared = Arc::new(Shared {
        web,
        handler,
        limits,
        stats,
        slots: Mutex::new(Vec::new()),
        bcrypt: Arc::new(tokio::sync::Mutex::new(())),
    });
    let served = rt.block_on(async {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        accept_loop(&listener, &shared, stop).await;
        Ok(())
    });
    // Every connection is dropped (closed); a scrape or bcrypt check under way may finish.
    rt.shutdown_timeout(Duration::from_millis(500));
    served
}

async fn accept_loop(
    listener: &tokio::net::TcpListener,
    shared: &Arc<Shared>,
    stop: &dyn Fn() -> bool,
) {
    let mut tick = tokio::time::interval(STOP_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next_id = 0u64;
    loop {
        tokio::select! {
            _ = tick.tick() => if stop() { return },
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    next_id += 1;
                    admit(shared, stream, next_id);
                }
                // Out of descriptors or memory: let the connections end before trying again.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
        }
    }
}

/// Starts a connection's task, making room first: beyond the cap the oldest connection still
/// sending its head is evicted; when every one is being answered, the newcomer is closed.
fn admit(shared: &Arc<Shared>, stream: TcpStream, id: u64) {
    let Ok(mut slots) = shared.slots.lock() else {
        return;
    };
    let mut evicted = None;
    if slots.len() >= shared.limits.max_connections {
        let oldest = slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state.dispatched.get().is_none())
            .min_by_key(|(_, s)| s.accepted)
            .map(|(i, _)| i);
        match oldest {
            Some(i) => evicted = Some(slots.swap_remove(i).task),
            None => {
                shared.stats.refused_busy.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }
    let state = Arc::new(ConnState::default());
    let task = tokio::spawn(connection(shared.clone(), stream, id, state.clone()));
    slots.push(Slot {
        id,
        accepted: Instant::now(),
        state,
        task: task.abort_handle(),
    });
    drop(slots);
    if let Some(task) = evicted {
        task.abort();
        shared.stats.evicted.fetch_add(1, Ordering::Relaxed);
    }
}

/// Frees a connection's slot however its task ends (finished, timed out, evicted).
struct SlotGuard {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        if let Ok(mut slots) = self.shared.slots.lock() {
            slots.retain(|s| s.id != self.id);
        }
    }
}

async fn connection(shared: Arc<Shared>, tcp: TcpStream, id: u64, state: Arc<ConnState>) {
    let _slot = SlotGuard {
        shared: shared.clone(),
        id,
    };
    let accepted = Instant::now();
    let _ = tcp.set_nodelay(true);
    let web = shared.web.as_ref().map(|w| w.current());
    let limits = shared.limits;
    let deadline = async {
        tokio::time::sleep_until(accepted + limits.head_timeout).await;
        if let Some(&at) = state.dispatched.get() {
            tokio::time::sleep_until(at + limits.answer_timeout).await;
        }
    };
    let exchange = async {
        match web.as_ref().and_then(|w| w.tls.clone()) {
            Some(tls) => {
                let Ok(stream) = tokio_rustls::TlsAcceptor::from(tls).accept(tcp).await else {
                    return; // no channel to answer on
                };
                http1(stream, &shared, web, &state).await
            }
            None => http1(tcp, &shared, web, &state).await,
        }
    };
    tokio::select! {
        _ = exchange => {},
        _ = deadline => {},
    }
}

/// One HTTP/1.1 exchange on an accepted (and, with TLS, handshaken) stream.
async fn http1<S>(io: S, shared: &Arc<Shared>, web: Option<Arc<Generation>>, state: &Arc<ConnState>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(|req: hyper::Request<Incoming>| {
        let (shared, web, state) = (shared.clone(), web.clone(), state.clone());
        async move {
            let _ = state.dispatched.set(Instant::now());
            Ok::<_, Infallible>(to_hyper(answer(&shared, web, &req).await))
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        .max_buf_size(MAX_HEAD)
        .max_header_size(MAX_HEAD)
        .max_headers(MAX_HEADERS)
        .serve_connection(TokioIo::new(io), service)
        .await;
}

/// Which page, whether the client may see it, then the page (off the runtime's thread).
async fn answer(
    shared: &Arc<Shared>,
    web: Option<Arc<Generation>>,
    req: &hyper::Request<Incoming>,
) -> Response {
    let path = req.uri().path();
    let head_only = match http::check(req.method().as_str(), path) {
        Ok(h) => h,
        Err(refused) => return refused,
    };
    let header = |name| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    if let Some(w) = web.filter(|w| !w.users.is_empty())
        && !authorized(shared, w, header(hyper::header::AUTHORIZATION)).await
    {
        return Response::unauthorized();
    }
    let request = Request {
        head_only,
        path: path.to_string(),
        accept: header(hyper::header::ACCEPT),
    };
    let handler = shared.handler.clone();
    tokio::task::spawn_blocking(move || handler(&request))
        .await
        .unwrap_or_else(|_| Response::text((500, "Internal Server Error"), "500\n"))
}

/// Basic auth: a remembered answer at once, else one bcrypt check at a time.
async fn authorized(shared: &Shared, web: Arc<Generation>, value: Option<String>) -> bool {
    let Some((user, password)) = value.as_deref().and_then(http::basic_credentials) else {
        return false;
    };
    if let Some(known) = web.users.remembered(&user, &password) {
        return known;
    }
    let one_at_a_time = shared.bcrypt.clone().lock_owned().await;
    // The check before this one may have been of the same credentials.
    if let Some(known) = web.users.remembered(&user, &password) {
        return known;
    }
    // The lock goes with the check, so a request cut off while it runs (its future dropped)
    // does not let the next check start beside it.
    tokio::task::spawn_blocking(move || {
        let _held = one_at_a_time;
        web.users.verify(&user, &password)
    })
    .await
    .unwrap_or(false)
}

fn to_hyper(r: Response) -> hyper::Response<Full<Bytes>> {
    let mut b = hyper::Response::builder()
        .status(r.status.0)
        .header(hyper::header::CONTENT_TYPE, r.content_type)
        .header("X-Content-Type-Options", "nosniff")
        .header(hyper::header::CACHE_CONTROL, "no-store");
    for (k, v) in r.extra_headers {
        b = b.header(k, v);
    }
    b.body(Full::new(Bytes::from(r.body))).unwrap_or_else(|_| {
        let mut fallback = hyper::Response::new(Full::new(Bytes::from_static(b"500\n")));
        *fallback.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
        fallback
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::sync::atomic::AtomicBool;

    /// Serves `web` on a loopback port with a handler that answers `scraped`, until dropped.
    struct Running {
        port: u16,
        stop: Arc<AtomicBool>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl Running {
        fn start(web: Arc<WebConfig>) -> Self {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            let stop = Arc::new(AtomicBool::new(false));
            let handler: Handler = Arc::new(|_| Response::text((200, "OK"), "scraped\n"));
            let flag = stop.clone();
            let thread = std::thread::spawn(move || {
                let stop = move || flag.load(Ordering::Relaxed);
                serve(
                    listener,
                    Some(web),
                    handler,
                    Limits::default(),
                    Arc::default(),
                    &stop,
                )
                .unwrap();
            });
            Self {
                port,
                stop,
                thread: Some(thread),
            }
        }

        /// A plain-HTTP GET of /metrics; what came back (empty when the connection closed).
        fn get(&self, authorization: Option<&str>) -> String {
            let mut c = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let auth = authorization
                .map(|a| format!("Authorization: {a}\r\n"))
                .unwrap_or_default();
            let _ = write!(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n{auth}\r\n");
            let mut out = Vec::new();
            let _ = c.read_to_end(&mut out);
            String::from_utf8_lossy(&out).into_owned()
        }
    }

    impl Drop for Running {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    #[test]
    fn a_poisoned_web_config_serves_no_scrape_without_its_basic_auth() {
        use base64::Engine;
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("web.yml");
        let hash = bcrypt::hash("secret", 4).unwrap();
        std::fs::write(
            &path,
            format!("basic_auth_users:\n  prometheus: '{hash}'\n"),
        )
        .unwrap();
        let web = Arc::new(WebConfig::load(&path).unwrap());
        let server = Running::start(web.clone());
        let good = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("prometheus:secret")
        );
        // Before: refused without the password, served with it.
        assert!(server.get(None).starts_with("HTTP/1.1 401"));
        let served = server.get(Some(&good));
        assert!(
            served.starts_with("HTTP/1.1 200") && served.contains("scraped"),
            "{served}"
        );
        web.poison();
        let refused = server.get(None);
        assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
        assert!(!refused.contains("scraped"), "{refused}");
        let served = server.get(Some(&good));
        assert!(
            served.starts_with("HTTP/1.1 200") && served.contains("scraped"),
            "{served}"
        );
    }

    #[test]
    fn a_poisoned_web_config_serves_no_scrape_without_its_tls() {
        let test = "a_poisoned_web_config_serves_no_scrape_without_its_tls";
        let Some(openssl) = crate::pair::presets::find_program("openssl") else {
            crate::testing::skipped(test, "openssl is not installed (apt-get install openssl)");
            return;
        };
        let d = tempfile::tempdir().unwrap();
        let made = std::process::Command::new(openssl)
            .current_dir(d.path())
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"])
            .args([
                "-subj",
                "/CN=127.0.0.1",
                "-keyout",
                "key.pem",
                "-out",
                "cert.pem",
            ])
            .output()
            .unwrap();
        assert!(made.status.success(), "{made:?}");
        let path = d.path().join("web.yml");
        std::fs::write(
            &path,
            "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n",
        )
        .unwrap();
        let web = Arc::new(WebConfig::load(&path).unwrap());
        let server = Running::start(web.clone());
        web.poison();
        let plain = server.get(None);
        assert!(!plain.contains("scraped"), "served in plain text: {plain}");
        assert!(!plain.starts_with("HTTP/1.1 200"), "{plain}");
        assert!(web.has_tls(), "the last good configuration keeps its TLS");
    }
}
