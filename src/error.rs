//! Errors that decide the exit code.
//!
//! Anything the user can fix by changing the command line or its input (a bad CPU list, a CPU
//! outside the allowed set, a corrupt result file, a missing program) is a [`BadInput`] and exits
//! with code 2; every other failure exits with 1. The message is one line that names the problem
//! and the fix. One exit code is not cpulab's own: a command cpulab ran for the user that failed
//! by itself ([`PassedOn`]: `watch -- COMMAND`) has its status passed on, after the report.

/// Bad usage or bad input: exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// Shorthand for returning a [`BadInput`] as an `anyhow::Error`.
pub fn bad_input(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(BadInput(msg.into()))
}

/// Not a failure of cpulab's: the command it ran for the user (`watch -- COMMAND`) ended by itself
/// with a non-zero status, which cpulab exits with after its report was written, as `time` and
/// `perf stat` do (128 + S for a signal S, as a shell reports it).
#[derive(Debug, thiserror::Error)]
#[error("{what}; cpulab exits with its status {code}")]
pub struct PassedOn {
    /// 1 to 255.
    pub code: u8,
    /// How the command ended, in words (`the command exited with status 3`).
    pub what: String,
}

/// Exit code for an error chain: a passed-on command status as it is, 2 when any cause is bad
/// input, else 1.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    if let Some(p) = err.chain().find_map(|e| e.downcast_ref::<PassedOn>()) {
        return p.code;
    }
    if err.chain().any(|e| e.downcast_ref::<BadInput>().is_some()) {
        2
    } else {
        1
    }
}

/// True when the error is a closed pipe on output, which is not a failure (`cpulab ... | head`).
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
