//! `cpulab exporter`: bad input refused before anything is bound or attached, and an HTTP side
//! that survives being reachable (malformed, oversized, slow and hundreds of idle clients, other
//! paths, TLS and basic auth), with SIGTERM ending it with 0. The wakeup counts come from the
//! hidden test double (`--mechanism fake`) so these tests need no BPF.

mod common;

use common::prom::free_port;
use common::{bad_input, cpulab_process};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A running exporter, killed on drop.
struct Exporter {
    child: Child,
    port: u16,
}

impl Exporter {
    fn start(extra: &[&str]) -> Self {
        Self::start_with(cpulab_process(), extra)
    }

    /// Started by `command` (the binary, or a wrapper that runs it).
    fn start_with(mut command: std::process::Command, extra: &[&str]) -> Self {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let child = command
            .args([
                "exporter",
                "--quiet",
                "--mechanism",
                "fake",
                "--listen",
                &listen,
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let e = Self { child, port };
        let until = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < until, "the exporter never listened");
            std::thread::sleep(Duration::from_millis(50));
        }
        e
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s
    }

    /// Sends raw bytes, returns everything the server wrote before closing.
    fn raw(&self, bytes: &[u8]) -> String {
        let mut s = self.connect();
        let _ = s.write_all(bytes);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).to_string()
    }

    fn get(&self, path: &str) -> String {
        self.raw(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
    }

    /// Stops it (SIGKILL) and returns what it wrote on stderr.
    fn stderr_after_stop(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut text = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut text);
        }
        text
    }

    fn threads(&self) -> usize {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn status_of(response: &str) -> u16 {
    response
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[test]
fn bad_input_is_one_line_and_exit_2_before_anything_runs() {
    bad_input(&["exporter", "--mechanism", "fake", "--listen", "localhost"]);
    bad_input(&[
        "exporter",
        "--mechanism",
        "fake",
        "--listen",
        "1.2.3.4:99999",
    ]);
    bad_input(&[
        "exporter",
        "--mechanism",
        "fake",
        "--cgroup",
        "no-such.slice/*.service",
    ]);
    bad_input(&["exporter", "--mechanism", "fake", "--cgroup", "../etc"]);
    bad_input(&["exporter", "--mechanism", "fake", "--pid", "999999999"]);
    bad_input(&[
        "exporter",
        "--mechanism",
        "fake",
        "--comm",
        "a-name-longer-than-15",
    ]);
    bad_input(&["exporter", "--mechanism", "fake", "--probe-interval", "1s"]);
    // Once taken as an interval of three thousand years.
    bad_input(&[
        "exporter",
        "--mechanism",
        "fake",
        "--probe-interval",
        "99999999999",
    ]);
    // A grouping names the busiest groups; named targets keep their own meaning.
    bad_input(&[
        "exporter",
        "--mechanism",
        "fake",
        "--comm",
        "postgres",
        "--group-by",
        "unit",
    ]);
    bad_input(&["exporter", "--mechanism", "fake", "--series-budget", "20"]);
    // VMs: a label cap of 0, more than 4 VMs listed per vCPU, one listed twice.
    bad_input(&["exporter", "--mechanism", "fake", "--max-vms", "0"]);
    let five = ["a", "b", "c", "d", "e"].map(|v| ["--vm", v]).concat();
    bad_input(&[&["exporter", "--mechanism", "fake"][..], &five].concat());
    bad_input(&[
        "exporter",
        "--mechanism",
        "fake",
        "--vm",
        "db",
        "--vm",
        "db",
    ]);
    for t in ["500ms", "soon"] {
        bad_input(&["exporter", "--mechanism", "fake", "--facts-interval", t]);
    }
    for n in ["0", "3", "2048"] {
        bad_input(&["exporter", "--mechanism", "fake", "--latency-sample", n]);
    }
    bad_input(&[
        "exporter",
        "--mechanism",
        "fake",
        "--web.config.file",
        "/nonexistent.yml",
    ]);
    let d = tempfile::tempdir().unwrap();
    let web = d.path().join("web.yml");
    std::fs::write(&web, "basic_auth_users:\n  prometheus: plaintext\n").unwrap();
    let w = web.to_str().unwrap();
    bad_input(&["exporter", "--mechanism", "fake", "--web.config.file", w]);
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n",
    )
    .unwrap();
    bad_input(&["exporter", "--mechanism", "fake", "--web.config.file", w]);
    std::fs::write(&web, "unknown_section: 1\n").unwrap();
    bad_input(&["exporter", "--mechanism", "fake", "--web.config.file", w]);
    // mTLS half given: a policy that verifies without a CA, a CA without a policy; a key of
    // exporter-toolkit's that cpulab does not implement.
    for tls in [
        "client_auth_type: RequireAndVerifyClientCert",
        "client_ca_file: ca.pem",
        "client_allowed_sans: [prometheus]",
        "client_auth_type: Sometimes",
    ] {
        std::fs::write(
            &web,
            format!("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  {tls}\n"),
        )
        .unwrap();
        bad_input(&[
            "exporter",
            "--mechanism",
            "fake",
            "--web.listen-address",
            "127.0.0.1:1",
            "--web.config.file",
            w,
        ]);
    }
}

#[test]
fn a_port_in_use_is_bad_input() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = taken.local_addr().unwrap().to_string();
    bad_input(&["exporter", "--mechanism", "fake", "--listen", &listen]);
}

#[test]
fn without_capabilities_it_refuses_before_attaching() {
    let Some(out) =
        common::cpulab_as_nobody(test_name!(), &["exporter", "--listen", "127.0.0.1:1"])
    else {
        return;
    };
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("CAP_BPF"), "{err}");
}

#[test]
fn only_the_landing_page_and_metrics_answer() {
    let e = Exporter::start(&["--comm", "postgres"]);
    let landing = e.get("/");
    assert_eq!(status_of(&landing), 200, "{landing}");
    assert!(landing.contains("href=\"/metrics\""));
    let m = e.get("/metrics?x=1");
    assert_eq!(status_of(&m), 200);
    assert!(m.contains("text/plain; version=0.0.4"));
    assert!(m.contains("cpulab_wakeups_total{target=\"postgres\""));
    for path in [
        "/etc/passwd",
        "/../../etc/passwd",
        "/metrics/",
        "/debug/pprof",
        "/index.html",
    ] {
        let r = e.get(path);
        assert_eq!(status_of(&r), 404, "{path}: {r}");
        assert!(!r.contains("root:"), "{path}");
        assert!(!r.contains("cpulab_"), "{path}");
    }
    let head = e.raw(b"HEAD /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(status_of(&head), 200);
    assert!(head.ends_with("\r\n\r\n"), "HEAD has no body");
    let om = e.raw(
        b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n\r\n",
    );
    assert!(om.contains("application/openmetrics-text"));
    assert!(om.trim_end().ends_with("# EOF"));
}

#[test]
fn malformed_and_oversized_requests_get_4xx() {
    let e = Exporter::start(&[]);
    assert_eq!(status_of(&e.raw(b"GARBAGE\r\n\r\n")), 400);
    assert_eq!(status_of(&e.raw(b"GET /metrics HTTP/7.0\r\n\r\n")), 400);
    assert_eq!(status_of(&e.raw(b"POST /metrics HTTP/1.1\r\n\r\n")), 405);
    assert_eq!(status_of(&e.raw(b"\xff\xfe\xfd\r\n\r\n")), 400);
    let mut big = b"GET /metrics HTTP/1.1\r\nX-Big: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 64 * 1024));
    assert_eq!(status_of(&e.raw(&big)), 431);
    // More header lines than allowed (64), in a head well under its size limit.
    let mut many = b"GET /metrics HTTP/1.1\r\n".to_vec();
    for i in 0..80 {
        many.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(status_of(&e.raw(&many)), 431);
    let put = e.raw(b"PUT /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(status_of(&put), 405);
    assert!(
        put.to_ascii_lowercase().contains("allow: get, head"),
        "{put}"
    );
    assert_eq!(status_of(&e.raw(b"DELETE /nothing HTTP/1.1\r\n\r\n")), 404);
    // Still serving afterwards.
    assert_eq!(status_of(&e.get("/metrics")), 200);
}

/// A client trickling its request a byte a second is cut off once the head timeout has passed,
/// long before its request is complete, and one that sends nothing is closed too. (The hand-
/// written server answered 408 first; hyper, like Go's net/http, closes without an answer.)
#[test]
fn a_slow_client_is_cut_off() {
    let e = Exporter::start(&["--request-timeout-s", "2"]);
    let request =
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Padding: trickled-a-byte-a-second\r\n\r\n";
    let mut s = e.connect();
    // A second between bytes, spent waiting for the server to answer or close.
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut sent = 0;
    let closed = loop {
        if sent == request.len() {
            break false;
        }
        if s.write_all(&request[sent..=sent]).is_err() {
            break true;
        }
        sent += 1;
        let mut buf = [0u8; 512];
        match (&s).read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => panic!(
                "answered a partial request: {}",
                String::from_utf8_lossy(&buf[..n])
            ),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break true,
        }
    };
    assert!(
        closed && sent < request.len(),
        "{sent} of {} bytes sent at a byte a second and still open",
        request.len()
    );
    // One that sends nothing is closed without an answer (read gives end of stream, not the
    // 30 s read timeout of `connect`).
    let idle = e.connect();
    let mut buf = [0u8; 64];
    assert_eq!((&idle).read(&mut buf).unwrap(), 0);
    assert_eq!(status_of(&e.get("/metrics")), 200);
}

#[test]
fn hundreds_of_idle_connections_neither_block_a_scrape_nor_grow_threads() {
    let cap = 16;
    let e = Exporter::start(&["--max-connections", &cap.to_string()]);
    let base = e.threads();
    let idle: Vec<TcpStream> = (0..300).map(|_| e.connect()).collect();
    // Each scrape gets through although 300 clients hold connections open.
    for _ in 0..3 {
        let r = e.get("/metrics");
        assert_eq!(status_of(&r), 200, "{r}");
    }
    let threads = e.threads();
    assert!(
        threads <= base + cap,
        "{threads} threads with {} idle connections (cap {cap}, {base} at start)",
        idle.len()
    );
    let m = e.get("/metrics");
    let evicted: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("cpulab_exporter_connections_evicted_total "))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(evicted >= (300 - cap) as u64, "{evicted}");
}

#[test]
fn sigterm_ends_it_with_0() {
    let mut e = Exporter::start(&[]);
    assert_eq!(status_of(&e.get("/metrics")), 200);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(e.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = e.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < until, "still running after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
}

/// A self-signed certificate and key for 127.0.0.1, through the openssl CLI.
fn self_signed(dir: &std::path::Path) -> bool {
    let Some(openssl) = common::program(test_name!(), "openssl", "openssl") else {
        return false;
    };
    let ok = std::process::Command::new(openssl)
        .current_dir(dir)
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            "key.pem",
            "-out",
            "cert.pem",
        ])
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    true
}

#[test]
fn tls_and_basic_auth_from_a_web_config_file() {
    if !common::installed(test_name!(), &[("curl", "curl"), ("openssl", "openssl")]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    if !self_signed(d.path()) {
        return;
    }
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let web = d.path().join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\nbasic_auth_users:\n  prometheus: '{hash}'\n"
        ),
    )
    .unwrap();
    let e = Exporter::start(&["--web.config.file", web.to_str().unwrap()]);
    let url = format!("https://127.0.0.1:{}/metrics", e.port);
    let cacert = d.path().join("cert.pem");
    let curl = |auth: Option<&str>| {
        let mut c = std::process::Command::new("curl");
        c.args(["-s", "-o", "-", "-w", "\n%{http_code}", "--cacert"])
            .arg(&cacert)
            .arg(&url);
        if let Some(a) = auth {
            c.args(["-u", a]);
        }
        let out = c.output().unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let ok = curl(Some("prometheus:s3cret"));
    assert!(ok.ends_with("200"), "{ok}");
    assert!(ok.contains("cpulab_machine_info"));
    assert!(curl(Some("prometheus:wrong")).ends_with("401"));
    assert!(curl(None).ends_with("401"));
    // Plain HTTP to the TLS port gets no metrics.
    let plain = e.get("/metrics");
    assert!(!plain.contains("cpulab_"), "{plain}");
}

/// The sample lines of a scrape whose name is `name` exactly (labels aside).
fn samples<'a>(scrape: &'a str, name: &str) -> Vec<&'a str> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with(['{', ' ']))
        })
        .collect()
}

/// The fleet view of the doctor: the newest doctor run of this host in the history, one series
/// per finding with its id and severity, its size as a ratio, the run's history id and time;
/// the history file read, never written.
#[test]
fn the_newest_doctor_findings_of_this_host_are_published_from_the_history() {
    let dir = tempfile::tempdir().unwrap();
    let (history, doc) = common::doctor_history(dir.path());
    let before = std::fs::read(&history).unwrap();
    let h = history.to_str().unwrap();
    let e = Exporter::start(&["--history", h]);
    let m = e.get("/metrics");
    assert_eq!(status_of(&m), 200, "{m}");
    let findings = doc["findings"].as_array().unwrap();
    assert!(!findings.is_empty());
    let published = samples(&m, "cpulab_doctor_finding");
    assert_eq!(published.len(), findings.len(), "{m}");
    let mut ratios = 0;
    for f in findings {
        let (id, severity) = (f["id"].as_str().unwrap(), f["severity"].as_str().unwrap());
        let line = format!("cpulab_doctor_finding{{id=\"{id}\",severity=\"{severity}\"}} 1");
        assert!(published.contains(&line.as_str()), "{line} missing:\n{m}");
        if let Some(r) = f["magnitude"]["ratio"].as_f64() {
            let ratio = samples(&m, "cpulab_doctor_finding_ratio")
                .into_iter()
                .find(|l| l.contains(&format!("id=\"{id}\"")))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("no ratio for {id}:\n{m}"));
            assert!(
                ratio >= 1.0 && (ratio - r).abs() <= 1e-9 * r,
                "{id}: {ratio} vs {r}"
            );
            ratios += 1;
        }
    }
    // Every rule of today words its effect as a ratio, so the ratio check above ran.
    assert!(ratios > 0, "no finding with a ratio was checked");
    let started = doc["conditions"]["started_unix_s"].as_i64().unwrap();
    assert_eq!(
        samples(&m, "cpulab_doctor_last_run_timestamp_seconds"),
        [format!(
            "cpulab_doctor_last_run_timestamp_seconds {started}"
        )],
        "{m}"
    );
    assert!(
        m.contains("cpulab_doctor_history_info{state=\"ok\"} 1"),
        "{m}"
    );
    // The history id is the one `history list` gives.
    let list = common::cpulab()
        .args(["--history", h, "history", "list", "--json"])
        .output()
        .unwrap();
    let runs = common::json_of(&list);
    let id = runs["runs"]
        .as_array()
        .and_then(|r| r.last())
        .map(|r| r["id"].clone())
        .unwrap();
    assert!(
        m.contains(&format!(
            "cpulab_doctor_run_info{{history_id=\"{id}\",mode=\"quick\"}} 1"
        )),
        "{id}\n{m}"
    );
    assert_eq!(
        samples(&m, "cpulab_exporter_doctor_findings_dropped"),
        ["cpulab_exporter_doctor_findings_dropped 0"]
    );
    drop(e);
    assert_eq!(
        std::fs::read(&history).unwrap(),
        before,
        "the exporter wrote the history"
    );
}

/// No history file, `--no-history`, or a history without a doctor run of this host: no finding
/// series, the reason in `cpulab_doctor_history_info`, and no file created.
#[test]
fn without_a_doctor_run_there_are_no_findings_and_the_reason_is_published() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none/history.sqlite");
    let e = Exporter::start(&["--history", missing.to_str().unwrap()]);
    let m = e.get("/metrics");
    assert!(
        m.contains("cpulab_doctor_history_info{state=\"missing\"} 1"),
        "{m}"
    );
    assert!(samples(&m, "cpulab_doctor_finding").is_empty(), "{m}");
    assert!(!missing.exists() && !dir.path().join("none").exists());
    drop(e);

    let e = Exporter::start(&["--no-history"]);
    let m = e.get("/metrics");
    assert!(
        m.contains("cpulab_doctor_history_info{state=\"off\"} 1"),
        "{m}"
    );
    assert!(samples(&m, "cpulab_doctor_run_info").is_empty(), "{m}");
    drop(e);

    // A history with a pingpong run only.
    let saved = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/results/pingpong.json");
    let h = dir.path().join("h.sqlite");
    common::cpulab()
        .arg("--history")
        .arg(&h)
        .args(["history", "import", "-q"])
        .arg(saved)
        .assert()
        .success();
    let e = Exporter::start(&["--history", h.to_str().unwrap()]);
    let m = e.get("/metrics");
    assert!(
        m.contains("cpulab_doctor_history_info{state=\"no-doctor-run\"} 1"),
        "{m}"
    );
    assert!(samples(&m, "cpulab_doctor_finding").is_empty(), "{m}");
}

/// A corrupt history: one warning line, however many scrapes, and the exporter keeps serving.
#[test]
fn a_corrupt_history_is_one_warning_and_the_exporter_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("h.sqlite");
    let mut bytes = b"SQLite format 3\0".to_vec();
    bytes.extend(std::iter::repeat_n(0xA5u8, 8192));
    std::fs::write(&h, &bytes).unwrap();
    let mut e = Exporter::start(&["--history", h.to_str().unwrap()]);
    for _ in 0..3 {
        let m = e.get("/metrics");
        assert_eq!(status_of(&m), 200, "{m}");
        assert!(
            m.contains("cpulab_doctor_history_info{state=\"unreadable\"} 1"),
            "{m}"
        );
        assert!(m.contains("cpulab_wakeups_total"), "{m}");
    }
    let stderr = e.stderr_after_stop();
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("doctor findings"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains(h.to_str().unwrap()), "{stderr}");
    assert_eq!(
        std::fs::read(&h).unwrap(),
        bytes,
        "the exporter wrote the corrupt file"
    );
}

/// The packaged service runs as a dynamic user under ProtectSystem=strict: it may read the
/// history but create nothing beside it, so SQLite cannot make the WAL index a reader needs.
/// The findings are still read (as an immutable file), and nothing is written.
#[test]
fn a_user_who_may_only_read_the_history_still_gets_the_findings() {
    let Some(setpriv) = common::program(test_name!(), "setpriv", "util-linux") else {
        return;
    };
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (history, doc) = common::doctor_history(dir.path());
    for (p, mode) in [(dir.path(), 0o755), (history.as_path(), 0o644)] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let before = std::fs::read(&history).unwrap();
    let mut nobody = std::process::Command::new(setpriv);
    nobody
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(common::cpulab_path())
        .env("CPULAB_HISTORY", "off");
    let e = Exporter::start_with(nobody, &["--history", history.to_str().unwrap()]);
    let m = e.get("/metrics");
    assert!(
        m.contains("cpulab_doctor_history_info{state=\"ok\"} 1"),
        "{m}"
    );
    assert_eq!(
        samples(&m, "cpulab_doctor_finding").len(),
        doc["findings"].as_array().unwrap().len(),
        "{m}"
    );
    drop(e);
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert!(left.iter().all(|n| !n.ends_with("-shm")), "{left:?}");
    assert_eq!(std::fs::read(&history).unwrap(), before);
}

/// `--quiet` keeps only errors; `--log.level` and `--log.format` write one logfmt or JSON line
/// per event.
#[test]
fn logs_are_logfmt_or_json_and_quiet_keeps_only_errors() {
    let mut quiet = Exporter::start(&[]);
    assert_eq!(status_of(&quiet.get("/metrics")), 200);
    assert_eq!(quiet.stderr_after_stop(), "");
    let mut e = Exporter::start(&["--log.level", "info"]);
    assert_eq!(status_of(&e.get("/metrics")), 200);
    let text = e.stderr_after_stop();
    assert!(!text.is_empty());
    for l in text.lines() {
        assert!(
            l.starts_with("ts=") && l.contains(" level=info msg="),
            "{l}"
        );
    }
    assert!(text.contains("msg=\"serving http://127.0.0.1:"), "{text}");
    let mut e = Exporter::start(&["--log.level", "debug", "--log.format", "json"]);
    assert_eq!(status_of(&e.get("/metrics")), 200);
    let text = e.stderr_after_stop();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}")))
        .collect();
    assert!(
        lines.iter().any(|v| v["level"] == "info"
            && v["msg"]
                .as_str()
                .is_some_and(|m| m.starts_with("serving http://"))),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .all(|v| v["ts"].as_str().is_some_and(|t| t.ends_with('Z')))
    );
}

/// CPU seconds a process has used so far (user + system, /proc/PID/stat fields 14 and 15).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The command name may hold spaces; the fields counted from its closing parenthesis.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .unwrap()
        .unwrap() as f64;
    ticks / hz
}

/// This thread's CPU time so far.
fn thread_cpu() -> Duration {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).unwrap();
    Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32)
}

fn basic(credentials: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(credentials)
    )
}

/// 1,000 wrong passwords in parallel from 20 clients (five distinct ones among them) cost the
/// exporter far less CPU than 1,000 bcrypt checks, measured here at the same cost: each
/// distinct password is checked once. An authorised scrape sent during the flood is answered.
/// (Twenty distinct passwords at cost 10, checked one at a time by a debug build, took longer
/// than the 10 s answer timeout on this 2-vCPU guest at load 12: the queue, not the cost, so
/// the test keeps it short.)
#[test]
fn a_flood_of_wrong_passwords_costs_one_check_per_distinct_password() {
    let (clients, per_client) = (20usize, 50usize);
    // Cost 8 (a quarter of htpasswd's 10) keeps the queue of the first checks short on a loaded
    // debug build; the ratio is the same at any cost, as both sides are checks at this one.
    let hash = bcrypt::hash("s3cret", 8).unwrap();
    // What one check at this cost takes here, now: five of them on this thread.
    let t0 = thread_cpu();
    for _ in 0..5 {
        assert!(!bcrypt::verify("wrong", &hash).unwrap());
    }
    let per_check = (thread_cpu() - t0).as_secs_f64() / 5.0;
    let d = tempfile::tempdir().unwrap();
    let web = d.path().join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prometheus: '{hash}'\n")).unwrap();
    let e = Exporter::start(&["--web.config.file", web.to_str().unwrap()]);
    let pid = e.child.id();
    let before = cpu_seconds(pid);
    let refused = std::sync::atomic::AtomicUsize::new(0);
    let scrape = std::thread::scope(|s| {
        for c in 0..clients {
            let (e, refused) = (&e, &refused);
            s.spawn(move || {
                let auth = basic(&format!("prometheus:wrong-{}", c % 5));
                for _ in 0..per_client {
                    let r = e.raw(
                        format!("GET /metrics HTTP/1.1\r\nAuthorization: {auth}\r\n\r\n")
                            .as_bytes(),
                    );
                    assert_eq!(status_of(&r), 401, "{r:?} at {:?}", Instant::now());
                    refused.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            });
        }
        // Once the flood is under way (a first answer to every client, about), scrape.
        let until = Instant::now() + Duration::from_secs(60);
        while refused.load(std::sync::atomic::Ordering::SeqCst) < clients {
            assert!(Instant::now() < until, "the flood was never answered");
            std::thread::yield_now();
        }
        let auth = basic("prometheus:s3cret");
        e.raw(format!("GET /metrics HTTP/1.1\r\nAuthorization: {auth}\r\n\r\n").as_bytes())
    });
    let spent = cpu_seconds(pid) - before;
    assert_eq!(status_of(&scrape), 200, "{scrape}");
    assert!(scrape.contains("cpulab_wakeups_total"));
    assert_eq!(refused.into_inner(), clients * per_client);
    let thousand = per_check * (clients * per_client) as f64;
    eprintln!(
        "flood: exporter {spent:.2} CPU-s for {} wrong passwords; one bcrypt check {:.1} ms, \
         so {thousand:.1} CPU-s for one each",
        clients * per_client,
        per_check * 1e3
    );
    // 6 distinct passwords' checks and 1,001 plain requests, against 1,000 checks.
    assert!(
        spent < 0.1 * thousand,
        "the flood cost {spent:.2} CPU-s, not well under the {thousand:.1} of a check per request"
    );
}

/// Runs openssl with these arguments in `dir`, failing the test on an error.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`{ca}.pem`, `{ca}.key`) and a client certificate it signs (`{name}.pem`, `{name}.key`).
fn client_certificate(dir: &std::path::Path, ca: &str, name: &str) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let (ca_pem, ca_key) = (format!("{ca}.pem"), format!("{ca}.key"));
    let (ca_subject, subject) = (format!("/CN={ca}"), format!("/CN={name}"));
    let mut args = vec!["req", "-x509"];
    args.extend(ec);
    args.extend([
        "-days",
        "1",
        "-subj",
        &ca_subject,
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout",
        &ca_key,
        "-out",
        &ca_pem,
    ]);
    openssl(dir, &args);
    let (csr, key, pem) = (
        format!("{name}.csr"),
        format!("{name}.key"),
        format!("{name}.pem"),
    );
    let mut args = vec!["req"];
    args.extend(ec);
    args.extend(["-subj", &subject, "-keyout", &key, "-out", &csr]);
    openssl(dir, &args);
    let ext = format!("{name}.ext");
    std::fs::write(
        dir.join(&ext),
        "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_pem,
            "-CAkey",
            &ca_key,
            "-set_serial",
            "2",
            "-days",
            "1",
            "-extfile",
            &ext,
            "-out",
            &pem,
        ],
    );
}

/// curl over TLS to the exporter: the HTTP status, or 0 when the handshake failed.
fn curl_tls(port: u16, dir: &std::path::Path, client: Option<&str>) -> u16 {
    let mut c = std::process::Command::new("curl");
    c.current_dir(dir)
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--cacert",
            "cert.pem",
        ])
        .arg(format!("https://127.0.0.1:{port}/metrics"));
    if let Some(name) = client {
        c.args([
            "--cert",
            &format!("{name}.pem"),
            "--key",
            &format!("{name}.key"),
        ]);
    }
    let out = c.output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// mTLS: under RequireAndVerifyClientCert a client without a certificate, or with one from
/// another CA, is refused in the handshake; one with a certificate the CA signed is served.
/// Under VerifyClientCertIfGiven the one without is served, the foreign one still refused.
#[test]
fn client_certificates_are_required_and_verified() {
    if !common::installed(test_name!(), &[("curl", "curl"), ("openssl", "openssl")]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    if !self_signed(d.path()) {
        return;
    }
    client_certificate(d.path(), "ca", "prometheus");
    client_certificate(d.path(), "other-ca", "stranger");
    let web = d.path().join("web.yml");
    let config = |mode: &str| {
        std::fs::write(
            &web,
            format!(
                "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n  \
                 client_ca_file: ca.pem\n  client_auth_type: {mode}\n"
            ),
        )
        .unwrap();
    };
    config("RequireAndVerifyClientCert");
    let e = Exporter::start(&["--web.config.file", web.to_str().unwrap()]);
    assert_eq!(curl_tls(e.port, d.path(), Some("prometheus")), 200);
    assert_eq!(curl_tls(e.port, d.path(), None), 0);
    assert_eq!(curl_tls(e.port, d.path(), Some("stranger")), 0);
    drop(e);
    config("VerifyClientCertIfGiven");
    let e = Exporter::start(&["--web.config.file", web.to_str().unwrap()]);
    assert_eq!(curl_tls(e.port, d.path(), None), 200);
    assert_eq!(curl_tls(e.port, d.path(), Some("prometheus")), 200);
    assert_eq!(curl_tls(e.port, d.path(), Some("stranger")), 0);
}

/// The certificate the exporter presents now, as PEM (`openssl s_client`).
fn served_certificate(port: u16) -> String {
    let out = std::process::Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let begin = text.find("-----BEGIN CERTIFICATE-----").unwrap_or(0);
    let end = text
        .find("-----END CERTIFICATE-----")
        .map_or(0, |i| i + "-----END CERTIFICATE-----".len());
    text.get(begin..end).unwrap_or_default().to_string()
}

/// A certificate replaced on disk is served on the next connection; a broken one is logged and
/// the last good one stays served.
#[test]
fn a_certificate_replaced_on_disk_is_served_on_the_next_connection() {
    if !common::installed(test_name!(), &[("curl", "curl"), ("openssl", "openssl")]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let (first, second) = (d.path().join("first"), d.path().join("second"));
    for dir in [&first, &second] {
        std::fs::create_dir(dir).unwrap();
        if !self_signed(dir) {
            return;
        }
    }
    let pem = |dir: &std::path::Path| std::fs::read_to_string(dir.join("cert.pem")).unwrap();
    assert_ne!(pem(&first), pem(&second));
    for f in ["cert.pem", "key.pem"] {
        std::fs::copy(first.join(f), d.path().join(f)).unwrap();
    }
    let web = d.path().join("web.yml");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n",
    )
    .unwrap();
    let mut e = Exporter::start(&["--web.config.file", web.to_str().unwrap()]);
    assert_eq!(served_certificate(e.port).trim(), pem(&first).trim());
    // Renewed as a tool like certbot does: new files renamed over the old.
    for f in ["key.pem", "cert.pem"] {
        let tmp = d.path().join(format!("{f}.new"));
        std::fs::copy(second.join(f), &tmp).unwrap();
        std::fs::rename(&tmp, d.path().join(f)).unwrap();
    }
    assert_eq!(served_certificate(e.port).trim(), pem(&second).trim());
    assert_eq!(curl_tls(e.port, &second, None), 200);
    std::fs::write(d.path().join("cert.pem"), "not a certificate\n").unwrap();
    assert_eq!(served_certificate(e.port).trim(), pem(&second).trim());
    assert_eq!(served_certificate(e.port).trim(), pem(&second).trim());
    let stderr = e.stderr_after_stop();
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("does not load"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
}
