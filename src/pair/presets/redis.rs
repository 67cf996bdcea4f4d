//! `--preset redis`: redis-server on a Unix socket in the private directory (no TCP port, no
//! persistence) and `redis-benchmark` with one connection running GET, for a third kind of
//! request-response server beside PostgreSQL and a web server.
//!
//! redis-benchmark has no time limit, so each run makes `duration x 20,000` requests, however
//! long that takes (a fifth of the duration on one CPU here, one and a half across two); the
//! figure is its own requests per second. The report says so and has no `duration_s`.

use super::{ClientKind, Env, ProcessBacked, ProcessServer, Setup, require_program};
use crate::pair::metric::Metric;
use crate::pair::procs::Launch;
use crate::pair::settings::Readiness;
use anyhow::{Context, Result};

/// Requests per second of duration: redis-benchmark -c 1 over a Unix socket rarely passes this.
const REQUESTS_PER_S: u64 = 20_000;

struct Redis(ProcessServer);

impl ProcessBacked for Redis {
    fn describe(&self) -> String {
        format!("redis-server ({})", self.0.launch.argv[0])
    }
    fn process(&self) -> &ProcessServer {
        &self.0
    }
    fn process_mut(&mut self) -> &mut ProcessServer {
        &mut self.0
    }
}

pub fn setup(env: &mut Env) -> Result<Setup> {
    let server = require_program("redis-server", "redis-server")?;
    let bench = require_program("redis-benchmark", "redis-tools")?;
    let d = env.dir().to_path_buf();
    let sock = d.join("redis.sock");
    let argv: Vec<String> = [
        server.display().to_string(),
        "--port".into(),
        "0".into(),
        "--unixsocket".into(),
        sock.display().to_string(),
        "--unixsocketperm".into(),
        "700".into(),
        "--save".into(),
        "".into(),
        "--appendonly".into(),
        "no".into(),
        "--daemonize".into(),
        "no".into(),
        "--dir".into(),
        d.display().to_string(),
    ]
    .to_vec();
    let mut l = Launch::new("redis-server", argv, &env.logs);
    l.user = super::server_user(&["redis", "nobody"])?;
    l.cwd = Some(d);
    let s = Redis(ProcessServer::new(l, Readiness::Socket(sock.clone())));
    env.notes.push(format!(
        "redis-benchmark has no time limit: each run makes duration x {REQUESTS_PER_S} requests"
    ));
    let client = move |secs: u32| ClientKind::Process {
        label: "redis-benchmark".into(),
        argv: vec![
            bench.display().to_string(),
            "-s".into(),
            sock.display().to_string(),
            "-c".into(),
            "1".into(),
            "-t".into(),
            "get".into(),
            "-n".into(),
            (u64::from(secs.max(1)) * REQUESTS_PER_S).to_string(),
        ],
        user: None,
    };
    Ok(Setup {
        server: Box::new(s),
        client: Box::new(client),
        metric: Metric::builtin("redis-benchmark").context("built-in redis-benchmark parser")?,
        timed_by_us: false,
    })
}

pub fn available() -> Result<(), String> {
    require_program("redis-server", "redis-server").map_err(|e| e.to_string())?;
    require_program("redis-benchmark", "redis-tools").map_err(|e| e.to_string())?;
    Ok(())
}
