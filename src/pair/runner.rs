//! One measured run: counters around one client run against a running server.
//!
//! Order matters. The server tree's counters are opened first (perf with inherit must be in place
//! before the client connects, so the backend forked for it is counted), then the system
//! snapshot, then the client starts. While it runs, cpulab sleeps in `poll` on a pidfd for the
//! client (it wakes the moment the client exits, and otherwise five times a second to sample the
//! /proc counters, check the server is alive and notice Ctrl-C). After the client is reaped comes
//! the second system snapshot, then the server tree's last sample. Every figure is divided by the
//! interval actually measured.

use crate::counters::{SystemDelta, SystemSnapshot};
use crate::machine::Machine;
use crate::pair::metric::{Metric, Reading};
use crate::pair::observe::{self, Target, TreeCounters, TreeWatch};
use crate::pair::placement::Placement;
use crate::pair::presets::{ClientKind, Env, Setup, builtin};
use crate::pair::procs::{Launch, Proc, tail};
use crate::pair::settings::PairSettings;
use crate::signals;
use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// How often the wait loop samples /proc while the client runs.
const TICK: Duration = Duration::from_millis(200);
/// Near the client's expected end the loop samples this often: a process that exits with the
/// client (PostgreSQL's backend) loses at most this much of its counts.
const FINE_TICK: Duration = Duration::from_millis(20);
/// How long before the expected end the fine sampling starts.
const FINE_WINDOW: Duration = Duration::from_millis(400);

/// The sampling period at this moment of a run expected to end at `end`.
fn period(end: Option<Instant>) -> Duration {
    match end {
        Some(e) if Instant::now() + FINE_WINDOW >= e => FINE_TICK,
        _ => TICK,
    }
}

/// One client run under one placement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// Position of this run in the interleaved schedule (0-based).
    pub order: usize,
    /// The client's figure (`metric_unit` of the report).
    pub value: f64,
    /// Transactions or requests completed: as the client reported them, else value x duration.
    pub transactions: u64,
    /// True when `transactions` was reported by the client, false when estimated.
    pub transactions_reported: bool,
    /// Wall time from starting the client to reaping it, in seconds.
    pub client_elapsed_s: f64,
    /// The server's whole process tree (absent for a server with nothing to observe).
    pub server: Option<TreeCounters>,
    /// The client and everything it started.
    pub client: TreeCounters,
    /// System counters of the CPUs in use (both CPUs of a pinned pair, else all allowed).
    pub system: SystemDelta,
    /// Costs per transaction: context switches, migrations and CPU microseconds of server and
    /// client, idle entries (halts) and interrupts by type.
    pub per_transaction: BTreeMap<String, f64>,
}

struct ClientOutcome {
    reading: Reading,
    counters: TreeCounters,
    elapsed: Duration,
}

/// Runs the client once and measures around it.
pub fn run_once(
    machine: &Machine,
    placement: &Placement,
    setup: &mut Setup,
    env: &mut Env,
    settings: &PairSettings,
    secs: u32,
    order: usize,
) -> Result<RunResult> {
    let root = machine.root.clone();
    let mut server_watch = setup
        .server
        .target()
        .map(|t| TreeWatch::start(&root, t, false, settings.use_perf));
    let cpus = placement.cpus_in_use(&machine.allowed);
    let before = SystemSnapshot::take(&root);
    let kind = (setup.client)(secs);
    let limit = if setup.timed_by_us {
        Duration::from_secs(u64::from(secs) * 3 + 60)
    } else {
        Duration::from_secs(24 * 3600)
    };
    let server = &mut setup.server;
    let mut tick = || -> Result<()> {
        signals::check()?;
        server.check_alive()?;
        if let Some(w) = server_watch.as_mut() {
            w.sample();
        }
        Ok(())
    };
    let ctx = ClientCtx {
        root: &root,
        placement,
        use_perf: settings.use_perf,
        limit,
        metric: &setup.metric,
        expected: setup
            .timed_by_us
            .then(|| Duration::from_secs(u64::from(secs))),
    };
    let out = match kind {
        ClientKind::Process { label, argv, user } => {
            let mut l = Launch::new(&label, argv, &env.logs);
            l.cpus = placement.client_cpus.clone();
            l.user = user;
            l.cwd = Some(env.dir().to_path_buf());
            run_process(&ctx, &l, env, &mut tick)?
        }
        ClientKind::BuiltinHttp { port, path } => run_builtin(&ctx, port, path, secs, &mut tick)?,
    };
    let after = SystemSnapshot::take(&root);
    let server = server_watch.map(|w| w.finish());
    let system = before.delta(&after, &cpus);
    let (transactions, reported) = match out.reading.transactions {
        Some(t) => (t, true),
        None => (
            (out.reading.value * out.elapsed.as_secs_f64()).round() as u64,
            false,
        ),
    };
    let per_transaction = per_transaction(server.as_ref(), &out.counters, &system, transactions);
    Ok(RunResult {
        order,
        value: out.reading.value,
        transactions,
        transactions_reported: reported,
        client_elapsed_s: out.elapsed.as_secs_f64(),
        server,
        client: out.counters,
        system,
        per_transaction,
    })
}

fn per_transaction(
    server: Option<&TreeCounters>,
    client: &TreeCounters,
    system: &SystemDelta,
    tx: u64,
) -> BTreeMap<String, f64> {
    let mut m = system.per_op(tx);
    if tx == 0 {
        return m;
    }
    let per = |v: f64| v / tx as f64;
    for (name, c) in [("server", server), ("client", Some(client))] {
        let Some(c) = c else { continue };
        m.insert(
            format!("{name}_context_switches"),
            per(c.context_switches() as f64),
        );
        m.insert(format!("{name}_cpu_us"), per(c.cpu_s() * 1e6));
        if let Some(mig) = c.migrations_best() {
            m.insert(format!("{name}_migrations"), per(mig as f64));
        }
    }
    m
}

struct ClientCtx<'a> {
    root: &'a std::path::Path,
    placement: &'a Placement,
    use_perf: bool,
    limit: Duration,
    metric: &'a Metric,
    /// How long the client should run, when cpulab chose it.
    expected: Option<Duration>,
}

/// Blocks until `pid` exits or `timeout` passes (pidfd + poll; a plain sleep without pidfds).
fn wait_exit(pidfd: Option<&std::os::fd::OwnedFd>, timeout: Duration) {
    use std::os::fd::AsFd;
    match pidfd {
        Some(fd) => {
            let mut fds = [nix::poll::PollFd::new(
                fd.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
            let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms));
        }
        None => std::thread::sleep(timeout.min(Duration::from_millis(20))),
    }
}

fn pidfd_open(pid: i32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: nix 0.31 and stable std have no pidfd_open. It takes a pid and flags; a non-negative result is a new descriptor we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

fn run_process(
    ctx: &ClientCtx,
    l: &Launch,
    env: &mut Env,
    tick: &mut dyn FnMut() -> Result<()>,
) -> Result<ClientOutcome> {
    let start = Instant::now();
    let announce = env
        .watchdog
        .as_ref()
        .and_then(|w| w.announce(libc::SIGKILL));
    let mut p = Proc::spawn_announced(l, announce)?;
    let mut watch = TreeWatch::start(ctx.root, Target::Tree(p.pid), true, ctx.use_perf);
    let pidfd = pidfd_open(p.pid);
    let end = ctx.expected.map(|d| start + d);
    let mut last_tick = Instant::now();
    let exit = loop {
        if let Some(e) = p.try_wait() {
            break e;
        }
        if last_tick.elapsed() >= period(end) {
            tick()?;
            watch.sample();
            last_tick = Instant::now();
        }
        if start.elapsed() > ctx.limit {
            bail!(
                "client `{}` did not finish within {} s; last lines of its output:\n{}",
                l.label,
                ctx.limit.as_secs(),
                p.output_tail(15)
            );
        }
        wait_exit(
            pidfd.as_ref(),
            period(end).saturating_sub(last_tick.elapsed()),
        );
    };
    let elapsed = start.elapsed();
    let counters = observe::with_rusage(watch.finish(), &exit.rusage);
    if let Some(w) = env.watchdog.as_mut() {
        w.forget_group(p.pid);
    }
    if !exit.success() {
        bail!(
            "client `{}` {} (placement {}); last lines of its output:\n{}",
            l.label,
            exit.describe(),
            ctx.placement.label,
            p.output_tail(15)
        );
    }
    let text = format!(
        "{}\n{}",
        std::fs::read_to_string(&p.stdout).unwrap_or_default(),
        std::fs::read_to_string(&p.stderr).unwrap_or_default()
    );
    let Some(reading) = ctx.metric.read(&text) else {
        bail!(
            "client `{}` printed no figure matching {}; last lines of its output:\n{}",
            l.label,
            ctx.metric.describe(),
            tail(&text, 15)
        );
    };
    Ok(ClientOutcome {
        reading,
        counters,
        elapsed,
    })
}

fn run_builtin(
    ctx: &ClientCtx,
    port: u16,
    path: String,
    secs: u32,
    tick: &mut dyn FnMut() -> Result<()>,
) -> Result<ClientOutcome> {
    let stop = Arc::new(AtomicBool::new(false));
    let cpus = ctx.placement.client_cpus.clone();
    let (tid, handle) = builtin::spawn_client(port, path, cpus, secs, stop.clone())?;
    let pid = std::process::id() as i32;
    // A new thread's counters start from zero: everything it did belongs to the run.
    let mut watch = TreeWatch::start(ctx.root, Target::Task { pid, tid }, true, ctx.use_perf);
    let end = ctx.expected.map(|d| Instant::now() + d);
    let mut last_tick = Instant::now();
    while !handle.is_finished() {
        if last_tick.elapsed() >= period(end) {
            if let Err(e) = tick() {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                let _ = handle.join();
                return Err(e);
            }
            watch.sample();
            last_tick = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let counters = watch.finish();
    let r = handle
        .join()
        .map_err(|_| anyhow::anyhow!("the built-in HTTP client thread panicked"))?;
    if r.requests == 0 {
        bail!(
            "the built-in HTTP client completed no request ({} failed) against 127.0.0.1:{port}",
            r.failures
        );
    }
    Ok(ClientOutcome {
        reading: Reading {
            value: r.requests as f64 / r.elapsed.as_secs_f64(),
            transactions: Some(r.requests),
        },
        counters,
        elapsed: r.elapsed,
    })
}
