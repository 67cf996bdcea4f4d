//! `--preset pgbench`: a throwaway PostgreSQL cluster and pgbench, as in field notes A and B.
//!
//! The cluster lives in the run's private directory: `initdb` (as the unprivileged `postgres`
//! account when cpulab is root, since the server refuses to run as root), then the postmaster is
//! started directly as cpulab's child (not through `pg_ctl`, which would detach it and lose the
//! parent-death signal), listening on a Unix socket in that directory and nowhere else
//! (`listen_addresses=''`). Its affinity is set before exec, so the backend it forks for
//! pgbench's connection, which does all the work, inherits it.
//!
//! Settings that differ from a default cluster, and why: `fsync=off` (only `pgbench -i` and
//! checkpoints write; the measured workloads are read-only), `dynamic_shared_memory_type=mmap`
//! (segments are files in the data directory, removed with it even after a SIGKILL).
//! PostgreSQL's fast shutdown (SIGINT) is both its stop and its parent-death signal: it ends
//! every backend and removes its shared memory; SIGKILL follows if it hangs.

use super::{ClientKind, Env, ProcessBacked, ProcessServer, Setup, require_program, run_step};
use crate::pair::metric::Metric;
use crate::pair::procs::{Launch, RunAs};
use crate::pair::settings::{PgbenchSettings, Readiness, Workload};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Database superuser created by initdb (any OS user may connect as it: trust on the socket).
const DB_USER: &str = "cpulab";
/// Port number: only names the socket file, in a directory nobody else uses.
const PORT: u16 = 5432;

/// The directory of `initdb` on the search path, symlinks followed (/usr/local/bin/initdb ->
/// /usr/lib/postgresql/15/bin/initdb): pgbench and pg_isready live beside the real one.
fn bindir_on_path() -> Option<PathBuf> {
    let initdb = super::find_program("initdb")?;
    let initdb = std::fs::canonicalize(&initdb).unwrap_or(initdb);
    initdb.parent().map(Path::to_path_buf)
}

/// `pg_config --bindir`, if pg_config is installed.
fn bindir_of_pg_config() -> Option<PathBuf> {
    let mut cmd = std::process::Command::new(super::find_program("pg_config")?);
    cmd.arg("--bindir");
    crate::signals::started::die_with_parent(&mut cmd);
    let out = cmd.output().ok().filter(|o| o.status.success())?;
    let d = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!d.is_empty()).then(|| PathBuf::from(d))
}

/// Debian's `/usr/lib/postgresql/<major>/bin`, highest version first.
fn versioned_bindirs() -> Vec<PathBuf> {
    let mut v: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let major = name.split('.').next()?.parse().ok()?;
            Some((major, e.path().join("bin")))
        })
        .collect();
    v.sort_by_key(|x| std::cmp::Reverse(x.0));
    v.into_iter().map(|(_, p)| p).collect()
}

/// The directory holding `initdb` and `postgres`, or bad input naming the package. Looks on the
/// search path, then asks `pg_config`, then takes Debian's highest version; each step runs only
/// if the one before found nothing. With `CPULAB_PATH` set, only that path is searched.
pub fn find_bindir() -> Result<PathBuf> {
    let usable = |d: &PathBuf| d.join("initdb").is_file() && d.join("postgres").is_file();
    let restricted = std::env::var_os("CPULAB_PATH").is_some();
    bindir_on_path()
        .filter(usable)
        .or_else(|| {
            (!restricted)
                .then(bindir_of_pg_config)
                .flatten()
                .filter(usable)
        })
        .or_else(|| {
            (!restricted)
                .then(|| versioned_bindirs().into_iter().find(usable))
                .flatten()
        })
        .ok_or_else(|| {
            crate::error::bad_input(
                "PostgreSQL server programs (`initdb`, `postgres`) not found: install the Debian \
                 package `postgresql` (apt-get install postgresql)",
            )
        })
}

fn program_in(bindir: &Path, name: &str, package: &str) -> Result<PathBuf> {
    let p = bindir.join(name);
    if p.is_file() {
        Ok(p)
    } else {
        require_program(name, package)
    }
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

struct Postgres {
    version: String,
    bindir: PathBuf,
    user: Option<RunAs>,
    data: PathBuf,
    sock: PathBuf,
    pgbench: PathBuf,
    settings: PgbenchSettings,
    inner: ProcessServer,
}

impl Postgres {
    fn step(&self, label: &str, argv: Vec<String>, env: &Env, user: Option<RunAs>) -> Launch {
        let mut l = Launch::new(label, argv, &env.logs);
        l.user = user;
        l.cwd = Some(env.dir().to_path_buf());
        l
    }

    fn conn_args(&self) -> Vec<String> {
        vec![
            "-h".into(),
            s(&self.sock),
            "-p".into(),
            PORT.to_string(),
            "-U".into(),
            DB_USER.into(),
        ]
    }
}

impl ProcessBacked for Postgres {
    fn describe(&self) -> String {
        format!(
            "{} ({})",
            self.version,
            self.bindir.join("postgres").display()
        )
    }
    fn prepare(&mut self, env: &mut Env) -> Result<()> {
        if let Some(u) = &self.user {
            env.scratch.chown_all(u.uid, u.gid)?;
        }
        let initdb = vec![
            s(&self.bindir.join("initdb")),
            "-D".into(),
            s(&self.data),
            "-A".into(),
            "trust".into(),
            "-U".into(),
            DB_USER.into(),
            "-E".into(),
            "UTF8".into(),
            "--locale=C".into(),
            "--no-sync".into(),
        ];
        let step = self.step("initdb", initdb, env, self.user.clone());
        run_step(&step, Duration::from_secs(300), env)?;
        if self.settings.workload == Workload::Readonly {
            self.inner.start(None, env)?;
            let mut init = vec![s(&self.pgbench), "-i".into(), "-q".into()];
            init.extend(["-s".into(), self.settings.scale.to_string()]);
            init.extend(self.conn_args());
            init.push("postgres".into());
            let step = self.step("pgbench-init", init, env, None);
            let r = run_step(&step, Duration::from_secs(3600), env);
            self.inner.stop(env);
            r?;
        }
        Ok(())
    }
    fn process(&self) -> &ProcessServer {
        &self.inner
    }
    fn process_mut(&mut self) -> &mut ProcessServer {
        &mut self.inner
    }
}

fn version(postgres: &Path) -> String {
    let mut cmd = std::process::Command::new(postgres);
    cmd.arg("--version");
    // A query that forks nothing: the parent-death signal alone ends it with cpulab.
    crate::signals::started::die_with_parent(&mut cmd);
    cmd.output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|v| !v.is_empty())
        .map(|v| v.replace("postgres (PostgreSQL)", "PostgreSQL"))
        .unwrap_or_else(|| "PostgreSQL".to_string())
}

pub fn setup(p: &PgbenchSettings, env: &mut Env) -> Result<Setup> {
    let bindir = find_bindir()?;
    let pgbench = program_in(&bindir, "pgbench", "postgresql")?;
    let user = super::server_user(&["postgres"])?;
    let data = env.dir().join("data");
    let sock = env.scratch.subdir("sock")?;
    let script = env.dir().join("select1.sql");
    std::fs::write(&script, "SELECT 1;\n")
        .with_context(|| format!("cannot write {}", script.display()))?;
    let postgres = bindir.join("postgres");
    let argv: Vec<String> = vec![
        s(&postgres),
        "-D".into(),
        s(&data),
        "-k".into(),
        s(&sock),
        "-p".into(),
        PORT.to_string(),
        "-c".into(),
        "listen_addresses=".into(),
        "-c".into(),
        "fsync=off".into(),
        "-c".into(),
        "dynamic_shared_memory_type=mmap".into(),
    ];
    let mut launch = Launch::new("postgres", argv, &env.logs);
    launch.user = user.clone();
    launch.cwd = Some(env.dir().to_path_buf());
    launch.stop_signal = libc::SIGINT;
    launch.death_signal = libc::SIGINT;
    let ready = match program_in(&bindir, "pg_isready", "postgresql-client") {
        Ok(isready) => Readiness::Command(vec![
            s(&isready),
            "-q".into(),
            "-t".into(),
            "2".into(),
            "-h".into(),
            s(&sock),
            "-p".into(),
            PORT.to_string(),
        ]),
        Err(_) => Readiness::Socket(sock.join(format!(".s.PGSQL.{PORT}"))),
    };
    let pg = Postgres {
        version: version(&postgres),
        bindir,
        user,
        data,
        sock,
        pgbench: pgbench.clone(),
        settings: p.clone(),
        inner: ProcessServer::new(launch, ready),
    };
    let conn = pg.conn_args();
    let settings = p.clone();
    let client = move |secs: u32| {
        let mut argv = vec![s(&pgbench), "-n".to_string()];
        match settings.workload {
            Workload::Select1 => argv.extend(["-f".to_string(), s(&script)]),
            Workload::Readonly => argv.push("-S".to_string()),
        }
        argv.extend([
            "-c".to_string(),
            settings.clients.to_string(),
            "-j".to_string(),
            settings.threads.to_string(),
            "-T".to_string(),
            secs.to_string(),
        ]);
        argv.extend(conn.iter().cloned());
        argv.push("postgres".to_string());
        ClientKind::Process {
            label: "pgbench".to_string(),
            argv,
            user: None,
        }
    };
    Ok(Setup {
        server: Box::new(pg),
        client: Box::new(client),
        metric: Metric::builtin("pgbench").context("built-in pgbench parser")?,
        timed_by_us: true,
    })
}

/// Whether the preset can run here, cheaply (no process started beyond `pg_config`).
pub fn available() -> Result<(), String> {
    let bindir = find_bindir().map_err(|e| e.to_string())?;
    program_in(&bindir, "pgbench", "postgresql").map_err(|e| e.to_string())?;
    super::server_user(&["postgres"]).map_err(|e| e.to_string())?;
    Ok(())
}
