//! A private Prometheus on loopback for tests that need a real one (Debian's `prometheus`):
//! started in a temporary directory with a configuration the test writes, killed on drop and
//! with the test process (parent-death signal), every wait bounded by a deadline; and the
//! exporter, port and query helpers tests/exporter_prometheus.rs and tests/fleet.rs share
//! (exporter_prometheus keeps its own one-target `Prometheus`).

use serde_json::Value;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn contrib() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("contrib/prometheus")
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn wait_listening(port: u16, what: &str) {
    let until = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < until, "{what} never listened on {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A child process killed on drop, and with the test process (parent-death signal).
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn spawn(mut c: Command) -> Killed {
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    Killed(
        c.stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// `cpulab exporter` listening on `port`, with `extra` flags; returns once it listens.
pub fn exporter(port: u16, extra: &[&str]) -> Killed {
    let mut c = super::cpulab_process();
    c.args([
        "exporter",
        "--quiet",
        "--listen",
        &format!("127.0.0.1:{port}"),
    ])
    .args(extra);
    let k = spawn(c);
    wait_listening(port, "the exporter");
    k
}

/// The shipped recording rules with every group evaluated each second, so a test sees rule
/// series within seconds (the rules' own expressions are unchanged).
pub fn rules_every_second(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(contrib().join("cpulab.rules.yml")).unwrap();
    assert!(text.contains("interval: 30s"), "the rules' interval moved");
    let path = dir.join("cpulab.rules.yml");
    std::fs::write(&path, text.replace("interval: 30s", "interval: 1s")).unwrap();
    path
}

/// A file a web configuration names: its name beside the configuration, and its bytes.
pub type WebFile<'a> = (&'a str, &'a [u8]);

/// A private Prometheus scraping every second.
pub struct Prometheus {
    pub dir: tempfile::TempDir,
    pub child: Killed,
    pub port: u16,
    /// What curl needs to reach it (`-k`, `-u user:password` behind TLS and basic auth).
    pub curl_args: Vec<String>,
    pub scheme: &'static str,
    /// Its command line, to restart it on the same storage.
    args: Vec<String>,
}

impl Prometheus {
    /// Starts one whose `prometheus.yml` is `config` (global settings are added), and waits
    /// until it is ready.
    pub fn start(config: &str) -> Self {
        Self::start_with(config, None, Vec::new())
    }

    /// Starts one serving with `web_config`: its `--web.config.file` text and the files it
    /// names, written beside it; curl reaches it with `curl_args`.
    pub fn start_with(
        config: &str,
        web_config: Option<(&str, &[WebFile])>,
        curl_args: Vec<String>,
    ) -> Self {
        Self::start_full(config, web_config, curl_args, None)
    }

    /// Starts one serving the console templates in `templates`, with an empty console
    /// libraries directory: Prometheus 3 ships none, so a page must render without them.
    pub fn start_with_consoles(config: &str, templates: &Path) -> Self {
        Self::start_full(config, None, Vec::new(), Some(templates))
    }

    fn start_full(
        config: &str,
        web_config: Option<(&str, &[WebFile])>,
        curl_args: Vec<String>,
        consoles: Option<&Path>,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prometheus.yml");
        std::fs::write(&path, Self::with_globals(config)).unwrap();
        let port = free_port();
        let mut args = vec![
            format!("--config.file={}", path.display()),
            format!("--storage.tsdb.path={}", dir.path().join("data").display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
            "--web.enable-lifecycle".to_string(),
        ];
        if let Some(templates) = consoles {
            let libs = dir.path().join("console_libraries");
            std::fs::create_dir(&libs).unwrap();
            args.push(format!("--web.console.templates={}", templates.display()));
            args.push(format!("--web.console.libraries={}", libs.display()));
        }
        let mut scheme = "http";
        if let Some((text, files)) = web_config {
            for (name, bytes) in files {
                std::fs::write(dir.path().join(name), bytes).unwrap();
            }
            let web = dir.path().join("web.yml");
            std::fs::write(&web, text).unwrap();
            args.push(format!("--web.config.file={}", web.display()));
            if text.contains("tls_server_config") {
                scheme = "https";
            }
        }
        let child = Self::spawn_on(&args, port);
        let p = Self {
            dir,
            child,
            port,
            curl_args,
            scheme,
            args,
        };
        p.wait_ready();
        p
    }

    fn spawn_on(args: &[String], port: u16) -> Killed {
        let mut c = Command::new("prometheus");
        c.args(args);
        let child = spawn(c);
        wait_listening(port, "prometheus");
        child
    }

    /// Its TSDB directory.
    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Moves the TSDB blocks in `blocks` (promtool's output) into its storage and restarts it
    /// on the same port and storage, so it serves them at once (it would pick them up by itself
    /// at its next reload of blocks, within a minute).
    pub fn add_blocks(&mut self, blocks: &Path) {
        for b in std::fs::read_dir(blocks).unwrap().flatten() {
            std::fs::rename(b.path(), self.data().join(b.file_name())).unwrap();
        }
        let _ = self.child.0.kill();
        let _ = self.child.0.wait();
        wait_until_free(self.port);
        self.child = Self::spawn_on(&self.args, self.port);
        self.wait_ready();
    }

    fn with_globals(config: &str) -> String {
        format!("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n{config}")
    }

    /// Listening is not ready: until its storage is open Prometheus answers 503.
    fn wait_ready(&self) {
        let until = Instant::now() + Duration::from_secs(90);
        while !self.get_ok("/-/ready") {
            assert!(Instant::now() < until, "prometheus never became ready");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn get_ok(&self, path: &str) -> bool {
        Command::new("curl")
            .args(["-sf", "--max-time", "5", "-o", "/dev/null"])
            .args(&self.curl_args)
            .arg(format!("{}{path}", self.url()))
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Replaces the configuration and reloads it (`/-/reload`).
    pub fn reload(&self, config: &str) {
        let path = self.dir.path().join("prometheus.yml");
        std::fs::write(&path, Self::with_globals(config)).unwrap();
        let ok = Command::new("curl")
            .args(["-sf", "--max-time", "10", "-X", "POST"])
            .arg(format!("http://127.0.0.1:{}/-/reload", self.port))
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "prometheus did not reload its configuration");
    }

    pub fn url(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme, self.port)
    }

    /// The result vector of an instant query.
    pub fn query(&self, q: &str) -> Vec<Value> {
        let out = Command::new("curl")
            .args(["-s", "--max-time", "10", "-G"])
            .args(&self.curl_args)
            .arg(format!("{}/api/v1/query", self.url()))
            .args(["--data-urlencode", &format!("query={q}")])
            .output()
            .unwrap();
        let body = String::from_utf8_lossy(&out.stdout);
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        assert_eq!(v["status"], "success", "{q}: {body}");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// Waits (at most 120 s) until `q` returns at least one sample.
    pub fn wait_for(&self, q: &str) -> Vec<Value> {
        self.wait_for_n(q, 1)
    }

    /// Waits (at most 120 s) until `q` returns at least `n` samples.
    pub fn wait_for_n(&self, q: &str, n: usize) -> Vec<Value> {
        let until = Instant::now() + Duration::from_secs(120);
        loop {
            let r = self.query(q);
            if r.len() >= n {
                return r;
            }
            assert!(
                Instant::now() < until,
                "{} of {n} samples for {q}: {r:?}",
                r.len()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

pub fn value(sample: &Value) -> f64 {
    sample["value"][1].as_str().unwrap().parse().unwrap()
}

pub fn label<'a>(sample: &'a Value, name: &str) -> &'a str {
    sample["metric"][name].as_str().unwrap_or("")
}

/// Prometheus, promtool and curl, or a visible skip (a failure under CI).
pub fn prometheus_installed(test: &str) -> bool {
    super::installed(
        test,
        &[
            ("prometheus", "prometheus"),
            ("promtool", "prometheus (promtool on newer Debian)"),
            ("curl", "curl"),
        ],
    )
}

/// Waits until nothing listens on `port` (a process just killed), so it can be taken again.
pub fn wait_until_free(port: u16) {
    let until = Instant::now() + Duration::from_secs(30);
    while TcpListener::bind(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < until, "port {port} never came free");
        std::thread::sleep(Duration::from_millis(100));
    }
}
