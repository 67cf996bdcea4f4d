//! `--preset http`: a web server serving one small static file on a free loopback port, and a
//! load generator with one connection (field notes B: Apache httpd + `ab -c 1`).
//!
//! Servers, first installed wins under `auto`: Apache httpd with the event MPM in one process
//! (`-X`: a listener thread hands each connection to a worker thread, as in production, but no
//! forked children that could outlive cpulab), nginx with `master_process off` (one process),
//! else the built-in server. Clients: `ab -c 1` (a new connection per request, like the field
//! notes), else `wrk -t 1 -c 1` (one keep-alive connection: fewer wakeups per request, so not
//! directly comparable), else the built-in client. Configuration, document root, pid file and
//! error log all live in the run's private directory; nothing listens beyond 127.0.0.1.

use super::{
    ClientKind, Env, ProcessBacked, ProcessServer, Server, Setup, builtin, find_program, free_port,
};
use crate::error::bad_input;
use crate::pair::metric::Metric;
use crate::pair::procs::Launch;
use crate::pair::settings::{HttpClientKind, HttpServerKind, Readiness};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

pub const PATH: &str = "/index.html";
const USERS: &[&str] = &["www-data", "apache", "nginx", "nobody"];

const APACHE_MODULE_DIRS: &[&str] = &[
    "/usr/lib/apache2/modules",
    "/usr/lib/httpd/modules",
    "/usr/lib64/httpd/modules",
    "/usr/libexec/apache2",
];

struct Web {
    name: String,
    inner: ProcessServer,
}

impl ProcessBacked for Web {
    fn describe(&self) -> String {
        format!("{} ({})", self.name, self.inner.launch.argv[0])
    }
    fn process(&self) -> &ProcessServer {
        &self.inner
    }
    fn process_mut(&mut self) -> &mut ProcessServer {
        &mut self.inner
    }
}

fn apache_modules() -> Option<(PathBuf, &'static str)> {
    APACHE_MODULE_DIRS.iter().map(PathBuf::from).find_map(|d| {
        ["event", "prefork"]
            .iter()
            .find(|m| d.join(format!("mod_mpm_{m}.so")).is_file())
            .map(|m| (d.clone(), *m))
    })
}

fn find_apache() -> Option<(PathBuf, PathBuf, &'static str)> {
    let bin = find_program("apache2").or_else(|| find_program("httpd"))?;
    let (mods, mpm) = apache_modules()?;
    Some((bin, mods, mpm))
}

fn apache(env: &mut Env, port: u16) -> Result<Web> {
    let (bin, mods, mpm) = find_apache().ok_or_else(|| {
        bad_input("Apache httpd (`apache2` and its modules) not found: install the Debian package `apache2`")
    })?;
    let d = env.dir().to_path_buf();
    let authz = if mods.join("mod_authz_core.so").is_file() {
        format!(
            "LoadModule authz_core_module {m}/mod_authz_core.so\n<Directory {d}/htdocs>\n    Require all granted\n</Directory>\n",
            m = mods.display(),
            d = d.display()
        )
    } else {
        String::new()
    };
    let conf = format!(
        "ServerRoot {d}\nServerName 127.0.0.1\nListen 127.0.0.1:{port}\n\
         LoadModule mpm_{mpm}_module {m}/mod_mpm_{mpm}.so\n{authz}\
         PidFile {d}/run/httpd.pid\nDefaultRuntimeDir {d}/run\nErrorLog {d}/error.log\nLogLevel warn\n\
         DocumentRoot {d}/htdocs\nServerLimit 1\nStartServers 1\nThreadLimit 4\nThreadsPerChild 4\n\
         MaxRequestWorkers 4\nKeepAlive On\n",
        d = d.display(),
        m = mods.display(),
    );
    std::fs::create_dir_all(d.join("run"))?;
    let conf_path = d.join("httpd.conf");
    std::fs::write(&conf_path, conf).context("cannot write the Apache configuration")?;
    let argv = vec![
        bin.display().to_string(),
        "-X".into(),
        "-f".into(),
        conf_path.display().to_string(),
    ];
    let mut l = Launch::new("apache2", argv, &env.logs);
    l.user = super::server_user(USERS)?;
    l.cwd = Some(d);
    Ok(Web {
        name: format!("Apache httpd, mpm_{mpm}, one process (-X)"),
        inner: ProcessServer::new(l, Readiness::Port(port)),
    })
}

fn nginx_supports_e(bin: &Path) -> bool {
    let mut cmd = std::process::Command::new(bin);
    cmd.arg("-v");
    // A query that forks nothing: the parent-death signal alone ends it with cpulab.
    crate::signals::started::die_with_parent(&mut cmd);
    let out = cmd.output();
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stderr).to_string())
        .unwrap_or_default();
    let v: Vec<u32> = text
        .rsplit('/')
        .next()
        .unwrap_or("")
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|x| x.parse().ok())
        .take(3)
        .collect();
    v >= vec![1, 19, 5]
}

fn nginx(env: &mut Env, port: u16) -> Result<Web> {
    let bin = find_program("nginx")
        .ok_or_else(|| bad_input("`nginx` not found: install the Debian package `nginx`"))?;
    let d = env.dir().to_path_buf();
    let t = |n: &str| format!("{n}_temp_path {}/tmp/{n};", d.display());
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log warn;\nevents {{ worker_connections 256; }}\n\
         http {{\n  access_log off;\n  {}\n  {}\n  {}\n  {}\n  {}\n\
         \x20 server {{ listen 127.0.0.1:{port}; root {d}/htdocs; }}\n}}\n",
        t("client_body"),
        t("proxy"),
        t("fastcgi"),
        t("uwsgi"),
        t("scgi"),
        d = d.display(),
    );
    std::fs::create_dir_all(d.join("tmp"))?;
    let conf_path = d.join("nginx.conf");
    std::fs::write(&conf_path, conf).context("cannot write the nginx configuration")?;
    let mut argv = vec![
        bin.display().to_string(),
        "-p".into(),
        format!("{}/", d.display()),
        "-c".into(),
        conf_path.display().to_string(),
    ];
    if nginx_supports_e(&bin) {
        argv.extend(["-e".into(), d.join("error.log").display().to_string()]);
    }
    let mut l = Launch::new("nginx", argv, &env.logs);
    l.user = super::server_user(USERS)?;
    l.cwd = Some(d);
    l.stop_signal = libc::SIGQUIT; // graceful shutdown
    Ok(Web {
        name: "nginx, one process (master_process off)".to_string(),
        inner: ProcessServer::new(l, Readiness::Port(port)),
    })
}

fn choose_server(kind: HttpServerKind, env: &mut Env, port: u16) -> Result<Box<dyn Server>> {
    match kind {
        HttpServerKind::Apache => Ok(Box::new(apache(env, port)?)),
        HttpServerKind::Nginx => Ok(Box::new(nginx(env, port)?)),
        HttpServerKind::Builtin => Ok(Box::new(builtin::HttpServer::new(port))),
        HttpServerKind::Auto => {
            if find_apache().is_some() {
                return Ok(Box::new(apache(env, port)?));
            }
            if find_program("nginx").is_some() {
                env.notes
                    .push("Apache httpd not installed: using nginx".to_string());
                return Ok(Box::new(nginx(env, port)?));
            }
            env.notes.push(
                "neither Apache httpd nor nginx installed: using cpulab's built-in HTTP server \
                 (a thread of cpulab)"
                    .to_string(),
            );
            Ok(Box::new(builtin::HttpServer::new(port)))
        }
    }
}

fn ab_client(ab: &Path, port: u16, secs: u32) -> ClientKind {
    // -t alone caps the run at 50,000 requests; -n after it raises the cap (ab stores ~50 bytes
    // per request, so keep it proportionate to the duration).
    let n = u64::from(secs.max(1)) * 100_000;
    ClientKind::Process {
        label: "ab".into(),
        argv: vec![
            ab.display().to_string(),
            "-q".into(),
            "-c".into(),
            "1".into(),
            "-t".into(),
            secs.to_string(),
            "-n".into(),
            n.to_string(),
            format!("http://127.0.0.1:{port}{PATH}"),
        ],
        user: None,
    }
}

fn wrk_client(wrk: &Path, port: u16, secs: u32) -> ClientKind {
    ClientKind::Process {
        label: "wrk".into(),
        argv: vec![
            wrk.display().to_string(),
            "-t".into(),
            "1".into(),
            "-c".into(),
            "1".into(),
            "-d".into(),
            format!("{secs}s"),
            format!("http://127.0.0.1:{port}{PATH}"),
        ],
        user: None,
    }
}

pub fn setup(server: HttpServerKind, client: HttpClientKind, env: &mut Env) -> Result<Setup> {
    let port = free_port()?;
    let docs = env.scratch.subdir("htdocs")?;
    std::fs::write(docs.join("index.html"), builtin::PAGE)?;
    let server = choose_server(server, env, port)?;
    let need = |name: &str, pkg: &str| super::require_program(name, pkg);
    let (factory, metric): (super::ClientFactory, Metric) = match client {
        HttpClientKind::Ab => {
            let ab = need("ab", "apache2-utils")?;
            (
                Box::new(move |s| ab_client(&ab, port, s)),
                builtin_metric("ab")?,
            )
        }
        HttpClientKind::Wrk => {
            let wrk = need("wrk", "wrk")?;
            (
                Box::new(move |s| wrk_client(&wrk, port, s)),
                builtin_metric("wrk")?,
            )
        }
        HttpClientKind::Builtin => (builtin_client(port), builtin::client_metric()),
        HttpClientKind::Auto => {
            if let Some(ab) = find_program("ab") {
                (
                    Box::new(move |s| ab_client(&ab, port, s)),
                    builtin_metric("ab")?,
                )
            } else if let Some(wrk) = find_program("wrk") {
                env.notes
                    .push("ab not installed: using wrk (one keep-alive connection)".into());
                (
                    Box::new(move |s| wrk_client(&wrk, port, s)),
                    builtin_metric("wrk")?,
                )
            } else {
                env.notes
                    .push("neither ab nor wrk installed: using cpulab's built-in client".into());
                (builtin_client(port), builtin::client_metric())
            }
        }
    };
    Ok(Setup {
        server,
        client: factory,
        metric,
        timed_by_us: true,
    })
}

fn builtin_client(port: u16) -> super::ClientFactory {
    Box::new(move |_| ClientKind::BuiltinHttp {
        port,
        path: PATH.to_string(),
    })
}

fn builtin_metric(name: &str) -> Result<Metric> {
    Metric::builtin(name).with_context(|| format!("built-in {name} parser"))
}

/// Whether the preset can run here: always (it falls back to built-in server and client).
pub fn available() -> Result<(), String> {
    Ok(())
}
