//! Ctrl-C, SIGTERM and SIGHUP become an orderly teardown instead of an abrupt exit, for every
//! command that starts processes or changes settings (the doctor, try, pair, the exporter).
//! The dispatcher (`cli.rs`) installs the handlers once, before such a command starts, so an
//! interrupt stops the whole command, whichever stage it is in; code below only [`check`]s.
//!
//! The handlers only record which signal arrived (an atomic store, safe in a handler); the run
//! loop checks [`check`] between steps and while it waits, returns [`Interrupted`], and the drop
//! guards stop every process and remove the directory on the way out. The command then exits with
//! 128 + the signal number (130 for Ctrl-C, 143 for SIGTERM), as a shell would report it. A second
//! signal while tearing down exits at once; the parent-death signal and the watchdog still clean
//! up after that.
//!
//! [`watchdog`] is the shell that cleans up after a SIGKILL of cpulab, and [`started`] runs a
//! user's command (`watch -- COMMAND`, `try --measure cmd:`) so that it and everything it starts
//! end with cpulab, and an interrupt stops it at once.

pub mod started;
pub mod watchdog;

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The run was stopped by a signal; every process and directory has been cleaned up.
#[derive(Debug, thiserror::Error)]
#[error("interrupted by signal {signal} ({name}); servers stopped and temporary files removed")]
pub struct Interrupted {
    pub signal: i32,
    pub name: &'static str,
}

impl Interrupted {
    /// The exit status a shell would show: 128 + signal.
    pub fn exit_code(&self) -> i32 {
        128 + self.signal
    }
}

struct State {
    signal: Arc<AtomicUsize>,
}

static STATE: OnceLock<Option<State>> = OnceLock::new();

const SIGNALS: &[i32] = &[libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

pub fn name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "signal",
    }
}

/// Installs the handlers once per process. Returns false when they could not be installed (then
/// a signal ends cpulab at once and the parent-death signal and watchdog clean up).
pub fn install() -> bool {
    STATE
        .get_or_init(|| {
            let signal = Arc::new(AtomicUsize::new(0));
            let armed = Arc::new(AtomicBool::new(false));
            for &s in SIGNALS {
                let ok =
                    signal_hook::flag::register_conditional_shutdown(s, 128 + s, armed.clone())
                        .and_then(|_| {
                            signal_hook::flag::register_usize(s, signal.clone(), s as usize)
                        })
                        .and_then(|_| signal_hook::flag::register(s, armed.clone()));
                if ok.is_err() {
                    return None;
                }
            }
            Some(State { signal })
        })
        .is_some()
}

/// The signal that arrived since the handlers were installed, if any.
pub fn pending() -> Option<i32> {
    let s = STATE.get()?.as_ref()?.signal.load(Ordering::SeqCst);
    (s != 0).then_some(s as i32)
}

/// `Err(Interrupted)` once a signal has arrived.
pub fn check() -> anyhow::Result<()> {
    match pending() {
        Some(signal) => Err(anyhow::Error::new(Interrupted {
            signal,
            name: name(signal),
        })),
        None => Ok(()),
    }
}

/// Sleeps up to `d`, waking early when a signal arrives.
pub fn sleep(d: std::time::Duration) -> anyhow::Result<()> {
    let until = std::time::Instant::now() + d;
    loop {
        check()?;
        let now = std::time::Instant::now();
        if now >= until {
            return Ok(());
        }
        std::thread::sleep((until - now).min(std::time::Duration::from_millis(50)));
    }
}
