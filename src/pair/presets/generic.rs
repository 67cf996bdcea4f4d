//! Any server and client from the command line: `--server CMD --client CMD --metric REGEX`.
//!
//! Commands are split like a shell would split words (quotes, backslashes) but run without one,
//! so nothing in them is expanded or interpreted; `--shell` runs each through `sh -c` instead.
//! The server runs as given (as root it stays root: that is the user's choice), pinned before
//! exec like every server, and is ready when the readiness check passes.

use super::{ClientKind, Env, ProcessBacked, ProcessServer, Setup};
use crate::pair::metric::Metric;
use crate::pair::procs::Launch;
use crate::pair::settings::Readiness;
use anyhow::Result;

struct Generic(ProcessServer);

impl ProcessBacked for Generic {
    fn describe(&self) -> String {
        format!("`{}`", shell_words::join(&self.0.launch.argv))
    }
    fn process(&self) -> &ProcessServer {
        &self.0
    }
    fn process_mut(&mut self) -> &mut ProcessServer {
        &mut self.0
    }
}

/// A short name for messages and log files: the program's file name (`sh` under --shell).
fn label(argv: &[String]) -> String {
    let first = argv.first().map(String::as_str).unwrap_or("program");
    let base = first.rsplit('/').next().unwrap_or(first);
    let clean: String = base
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .collect();
    if clean.is_empty() {
        "program".to_string()
    } else {
        clean
    }
}

/// Bad input (exit 2) when a command's program cannot be found, before anything starts.
fn check_program(what: &str, argv: &[String]) -> Result<()> {
    let prog = argv.first().map(String::as_str).unwrap_or("");
    let found = if prog.contains('/') {
        std::path::Path::new(prog).is_file()
    } else {
        super::find_program(prog).is_some()
    };
    if found {
        Ok(())
    } else {
        Err(crate::error::bad_input(format!(
            "{what} program `{prog}` not found: install it or give its full path"
        )))
    }
}

pub fn setup(
    server: &[String],
    client: &[String],
    ready: &Readiness,
    metric: &Metric,
    env: &mut Env,
) -> Result<Setup> {
    check_program("--server", server)?;
    check_program("--client", client)?;
    let mut launch = Launch::new(&label(server), server.to_vec(), &env.logs);
    launch.stop_signal = libc::SIGTERM;
    let server = Generic(ProcessServer::new(launch, ready.clone()));
    let client_argv = client.to_vec();
    let client_label = label(client);
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
            "sh"
        );
        assert_eq!(label(&[]), "program");
    }
}
