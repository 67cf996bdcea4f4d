//! Any server and client from the command line: `--server CMD --client CMD --metric REGEX`.
//!
//! Commands are split like a shell would split words (quotes, backslashes) but run without one,
//! so nothing in them is expanded or interpreted; `--shell` runs each through `sh -c` instead.
//! The server runs as given (as root it stays root: that is the user's choice), pinned before
//! exec like every server, and is ready when the readiness check passes.

use super::{ClientKind, Env, ProcessServer, Server, Setup};
use crate::cpulist::CpuSet;
use crate::pair::metric::Metric;
use crate::pair::observe::Target;
use crate::pair::procs::Launch;
use crate::pair::settings::Readiness;
use anyhow::Result;

struct Generic(ProcessServer);

impl Server for Generic {
    fn describe(&self) -> String {
        format!("`{}`", shell_words::join(&self.0.launch.argv))
    }
    fn command(&self) -> Vec<String> {
        self.0.launch.argv.clone()
    }
    fn start(&mut self, cpus: Option<&CpuSet>, env: &mut Env) -> Result<()> {
        self.0.start(cpus, env)
    }
    fn stop(&mut self, env: &mut Env) {
        self.0.stop(env)
    }
    fn target(&self) -> Option<Target> {
        self.0.target()
    }
    fn check_alive(&mut self) -> Result<()> {
        self.0.check_alive()
    }
}

fn label(argv: &[String]) -> String {
    argv.iter()
        .find(|a| !matches!(a.as_str(), "/bin/sh" | "sh" | "-c"))
        .or(argv.first())
        .map(|a| {
            let first = a.split_whitespace().next().unwrap_or(a);
            first.rsplit('/').next().unwrap_or(first).to_string()
        })
        .unwrap_or_else(|| "program".to_string())
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .collect()
}

pub fn setup(
    server: &[String],
    client: &[String],
    ready: &Readiness,
    metric: &Metric,
    env: &mut Env,
) -> Result<Setup> {
    let mut launch = Launch::new(
        &format!("server-{}", label(server)),
        server.to_vec(),
        &env.logs,
    );
    launch.stop_signal = libc::SIGTERM;
    let server = Generic(ProcessServer::new(launch, ready.clone()));
    let client_argv = client.to_vec();
    let client_label = format!("client-{}", label(client));
    Ok(Setup {
        server: Box::new(server),
        client: Box::new(move |_| ClientKind::Process {
            label: client_label.clone(),
            argv: client_argv.clone(),
            user: None,
        }),
        metric: metric.clone(),
        timed_by_us: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_file_name_safe() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            label(&s(&["/usr/bin/redis-server", "--port", "0"])),
            "redis-server"
        );
        assert_eq!(
            label(&s(&["/bin/sh", "-c", "python3 -m http.server"])),
            "python3"
        );
        assert_eq!(label(&[]), "program");
    }
}
