//! The servers and clients a pair experiment can run, behind one small trait.
//!
//! A [`Server`] prepares once (a database cluster, a configuration), then starts with its whole
//! tree on a CPU set and stops, as often as the placements require. A [`ClientKind`] is either a
//! program (pgbench, ab, wrk, redis-benchmark, the user's) or a load loop built into cpulab.
//! Each preset is one file that finds its programs (a missing one is bad input naming the Debian
//! package that provides it), writes its configuration into the run's private directory, and
//! returns the pair.

pub mod builtin;
pub mod generic;
pub mod http;
pub mod pgbench;
pub mod redis;

use crate::cpulist::CpuSet;
use crate::error::bad_input;
use crate::pair::cleanup::Scratch;
use crate::pair::metric::Metric;
use crate::pair::observe::Target;
use crate::pair::procs::{self, Launch, Proc, RunAs};
use crate::pair::settings::{PairSettings, Programs, Readiness};
use crate::signals;
use crate::signals::watchdog::Watchdog;
use anyhow::{Result, bail};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What a run has to work with: its private directory, its log directory and its watchdog.
pub struct Env {
    pub logs: PathBuf,
    pub ready_timeout: Duration,
    pub notes: Vec<String>,
    pub scratch: Scratch,
    /// Dropped after `scratch` (fields drop in order): the watchdog is told `done` only once the
    /// directory is gone.
    pub watchdog: Option<Watchdog>,
}

impl Env {
    /// Creates the private directory and starts the watchdog that removes it if cpulab is killed.
    pub fn create(ready_timeout: Duration) -> Result<Self> {
        let scratch = Scratch::create()?;
        let logs = scratch.subdir("logs")?;
        let mut notes = Vec::new();
        let watchdog = match Watchdog::start(scratch.path()) {
            Ok(w) => Some(w),
            Err(e) => {
                notes.push(format!("{e}: if cpulab is killed with SIGKILL its temporary directory stays until the next run"));
                None
            }
        };
        Ok(Self {
            logs,
            ready_timeout,
            notes,
            watchdog,
            scratch,
        })
    }

    pub fn dir(&self) -> &Path {
        self.scratch.path()
    }
}

/// A server that can be started on a CPU set, observed, and stopped.
pub trait Server {
    /// What it is, for the report (`PostgreSQL 15.10 (/usr/lib/postgresql/15/bin/postgres)`).
    fn describe(&self) -> String;
    /// Its command line (empty for a built-in server).
    fn command(&self) -> Vec<String>;
    /// One-time preparation that survives restarts (initdb, loading data).
    fn prepare(&mut self, _env: &mut Env) -> Result<()> {
        Ok(())
    }
    /// Starts it with its whole tree on `cpus` (`None`: unpinned) and waits until it is ready.
    fn start(&mut self, cpus: Option<&CpuSet>, env: &mut Env) -> Result<()>;
    /// Stops it and everything it started.
    fn stop(&mut self, env: &mut Env);
    /// What to count while it runs.
    fn target(&self) -> Option<Target>;
    /// `Err` with the tail of its output if it has died.
    fn check_alive(&mut self) -> Result<()>;
}

/// A server that is one external program: all it adds to [`ProcessServer`] is how it describes
/// itself and what it prepares. Every such type is a [`Server`] through the impl below, so the
/// start/stop/observe logic lives once, in `ProcessServer`.
pub trait ProcessBacked {
    /// What it is, for the report.
    fn describe(&self) -> String;
    fn process(&self) -> &ProcessServer;
    fn process_mut(&mut self) -> &mut ProcessServer;
    /// One-time preparation; by default, hand the private directory to the server's user.
    fn prepare(&mut self, env: &mut Env) -> Result<()> {
        if let Some(u) = &self.process().launch.user {
            env.scratch.chown_all(u.uid, u.gid)?;
        }
        Ok(())
    }
}

impl<T: ProcessBacked> Server for T {
    fn describe(&self) -> String {
        ProcessBacked::describe(self)
    }
    fn command(&self) -> Vec<String> {
        self.process().launch.argv.clone()
    }
    fn prepare(&mut self, env: &mut Env) -> Result<()> {
        ProcessBacked::prepare(self, env)
    }
    fn start(&mut self, cpus: Option<&CpuSet>, env: &mut Env) -> Result<()> {
        self.process_mut().start(cpus, env)
    }
    fn stop(&mut self, env: &mut Env) {
        self.process_mut().stop(env)
    }
    fn target(&self) -> Option<Target> {
        self.process().target()
    }
    fn check_alive(&mut self) -> Result<()> {
        self.process_mut().check_alive()
    }
}

/// How to generate load.
#[derive(Clone, Debug)]
pub enum ClientKind {
    Process {
        label: String,
        argv: Vec<String>,
        user: Option<RunAs>,
    },
    /// cpulab's own HTTP/1.0 client: one connection per request, like `ab -c 1`.
    BuiltinHttp { port: u16, path: String },
}

impl ClientKind {
    pub fn command(&self) -> Vec<String> {
        match self {
            ClientKind::Process { argv, .. } => argv.clone(),
            ClientKind::BuiltinHttp { port, path } => {
                vec![format!(
                    "(built-in HTTP client) http://127.0.0.1:{port}{path}"
                )]
            }
        }
    }
}

/// Builds the client for a run of `duration_s` seconds.
pub type ClientFactory = Box<dyn Fn(u32) -> ClientKind>;

/// A server, the way to build its client, and how to read the result.
pub struct Setup {
    pub server: Box<dyn Server>,
    pub client: ClientFactory,
    pub metric: Metric,
    /// Whether the client's duration is ours to choose (presets) or fixed by its command.
    pub timed_by_us: bool,
}

/// Builds the setup for `settings` (finds programs; starts nothing).
pub fn build(settings: &PairSettings, env: &mut Env) -> Result<Setup> {
    match &settings.programs {
        Programs::Generic {
            server,
            client,
            ready,
            metric,
        } => generic::setup(server, client, ready, metric, env),
        Programs::Pgbench(p) => pgbench::setup(p, env),
        Programs::Http { server, client } => http::setup(*server, *client, env),
        Programs::Redis => redis::setup(env),
    }
}

/// Directories searched for programs: `CPULAB_PATH` if set (tests use it to hide programs),
/// else `PATH` plus the system binary directories that a non-login root shell may lack.
pub fn search_dirs() -> Vec<PathBuf> {
    if let Some(p) = std::env::var_os("CPULAB_PATH") {
        return std::env::split_paths(&p).collect();
    }
    let mut v: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for d in [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ] {
        let d = PathBuf::from(d);
        if !v.contains(&d) {
            v.push(d);
        }
    }
    v
}

/// The first executable called `name` in [`search_dirs`].
pub fn find_program(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if name.contains('/') {
        return Some(PathBuf::from(name));
    }
    search_dirs().into_iter().map(|d| d.join(name)).find(|p| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// [`find_program`], or bad input naming the program and its Debian package.
pub fn require_program(name: &str, package: &str) -> Result<PathBuf> {
    find_program(name).ok_or_else(|| {
        bad_input(format!(
            "`{name}` not found: install the Debian package `{package}` (apt-get install {package})"
        ))
    })
}

/// The account servers run as: an unprivileged one when cpulab is root, else cpulab's own.
pub fn server_user(candidates: &[&str]) -> Result<Option<RunAs>> {
    if !procs::is_root() {
        return Ok(None);
    }
    match RunAs::lookup(candidates) {
        Some(u) => Ok(Some(u)),
        None => Err(bad_input(format!(
            "cpulab runs as root and the server must not: none of the accounts {} exists; \
             create one (adduser --system postgres) or run cpulab as an ordinary user",
            candidates.join(", ")
        ))),
    }
}

/// A server that is one program (and whatever it forks) with a readiness check.
pub struct ProcessServer {
    pub launch: Launch,
    pub ready: Readiness,
    pub proc: Option<Proc>,
}

impl ProcessServer {
    pub fn new(launch: Launch, ready: Readiness) -> Self {
        Self {
            launch,
            ready,
            proc: None,
        }
    }

    pub fn start(&mut self, cpus: Option<&CpuSet>, env: &mut Env) -> Result<()> {
        self.stop(env);
        let mut l = self.launch.clone();
        l.cpus = cpus.cloned();
        let announce = env
            .watchdog
            .as_ref()
            .and_then(|w| w.announce(l.stop_signal));
        let p = Proc::spawn_announced(&l, announce)?;
        let p = self.proc.insert(p);
        wait_ready(p, &self.ready, env.ready_timeout)
    }

    pub fn stop(&mut self, env: &mut Env) {
        if let Some(mut p) = self.proc.take() {
            p.stop(Duration::from_secs(10));
            if let Some(w) = env.watchdog.as_mut() {
                w.forget_group(p.pid);
            }
        }
    }

    pub fn target(&self) -> Option<Target> {
        self.proc.as_ref().map(|p| Target::Tree(p.pid))
    }

    pub fn check_alive(&mut self) -> Result<()> {
        let Some(p) = self.proc.as_mut() else {
            bail!("the server is not running");
        };
        if let Some(e) = p.try_wait() {
            bail!(
                "server `{}` {} during the run; last lines of its output:\n{}",
                p.label,
                e.describe(),
                p.output_tail(15)
            );
        }
        Ok(())
    }
}

/// Polls `ready` until it succeeds, the server dies, the timeout passes or a signal arrives.
pub fn wait_ready(p: &mut Proc, ready: &Readiness, timeout: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        signals::check()?;
        if let Some(e) = p.try_wait() {
            bail!(
                "server `{}` {} before it was ready; last lines of its output:\n{}",
                p.label,
                e.describe(),
                p.output_tail(15)
            );
        }
        if is_ready(ready) {
            return Ok(());
        }
        if start.elapsed() >= timeout {
            bail!(
                "server `{}` did not become ready within {} s ({}); last lines of its output:\n{}",
                p.label,
                timeout.as_secs_f64(),
                describe_ready(ready),
                p.output_tail(15)
            );
        }
        signals::sleep(Duration::from_millis(50))?;
    }
}

pub fn describe_ready(r: &Readiness) -> String {
    match r {
        Readiness::Port(p) => format!("waiting for a connection to 127.0.0.1:{p}"),
        Readiness::Socket(s) => format!("waiting for a connection to {}", s.display()),
        Readiness::Command(c) => format!("waiting for `{}` to succeed", c.join(" ")),
    }
}

fn is_ready(r: &Readiness) -> bool {
    match r {
        Readiness::Port(p) => std::net::TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], *p)),
            Duration::from_millis(500),
        )
        .is_ok(),
        Readiness::Socket(s) => std::os::unix::net::UnixStream::connect(s).is_ok(),
        Readiness::Command(argv) => probe_command(argv),
    }
}

/// Runs a readiness probe for at most five seconds; success is exit status 0.
fn probe_command(argv: &[String]) -> bool {
    let Some((prog, args)) = argv.split_first() else {
        return false;
    };
    let mut cmd = std::process::Command::new(prog);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // A probe that hangs ends with cpulab, even if cpulab is killed with SIGKILL.
    crate::signals::started::die_with_parent(&mut cmd);
    let Ok(mut child) = cmd.spawn() else {
        return false;
    };
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return s.success(),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}

/// A free TCP port on 127.0.0.1 (bound and released; the race with other programs is small).
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// Runs a preparation step (initdb, pgbench -i) to completion; `Err` with its output tail.
///
/// It is started as the servers and clients are: its own process group, which the child names
/// to the watchdog before exec, so what it forks (initdb's bootstrap backend, a script's
/// background job) ends too if cpulab is killed with SIGKILL mid-step, not just the step itself
/// (the parent-death signal). Whatever it left in its group is stopped when it ends.
pub fn run_step(l: &Launch, timeout: Duration, env: &mut Env) -> Result<()> {
    let announce = env
        .watchdog
        .as_ref()
        .and_then(|w| w.announce(l.stop_signal));
    let mut p = Proc::spawn_announced(l, announce)?;
    let r = finish_step(&mut p, l, timeout);
    p.stop(Duration::from_secs(5));
    if let Some(w) = env.watchdog.as_mut() {
        w.forget_group(p.pid);
    }
    r
}

/// Waits for a step to end by itself (success), fail, outlast `timeout` or be interrupted.
fn finish_step(p: &mut Proc, l: &Launch, timeout: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        signals::check()?;
        if let Some(e) = p.try_wait() {
            if e.success() {
                return Ok(());
            }
            bail!(
                "`{}` {}; last lines of its output:\n{}",
                l.argv.join(" "),
                e.describe(),
                p.output_tail(15)
            );
        }
        if start.elapsed() > timeout {
            bail!(
                "`{}` did not finish within {} s; last lines of its output:\n{}",
                l.argv.join(" "),
                timeout.as_secs(),
                p.output_tail(15)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
