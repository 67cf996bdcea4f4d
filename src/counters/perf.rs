//! Per-task perf counters through `perf_event_open(2)`.
//!
//! Software counters (context switches, migrations, task clock) exist on every kernel with perf
//! events; hardware ones (cycles, instructions) are missing in most VMs. Each counter is opened
//! on its own, not as a group, so a missing hardware counter never hides the software ones, and
//! each failure is kept with its reason (`ENOENT`: the event does not exist here; `EACCES`:
//! `perf_event_paranoid` forbids it for this user).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;

const PERF_TYPE_HARDWARE: u32 = crate::perf_event::TYPE_HARDWARE;
const PERF_TYPE_SOFTWARE: u32 = crate::perf_event::TYPE_SOFTWARE;
const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
const PERF_COUNT_HW_INSTRUCTIONS: u64 = 1;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
const PERF_COUNT_SW_CONTEXT_SWITCHES: u64 = 3;
const PERF_COUNT_SW_CPU_MIGRATIONS: u64 = 4;
/// PERF_ATTR_SIZE_VER0: the kernel accepts the original 64-byte layout.
const ATTR_SIZE: usize = 64;

/// The events cpulab counts, by the names `perf stat` uses.
pub const EVENTS: &[(&str, u32, u64)] = &[
    (
        "context-switches",
        PERF_TYPE_SOFTWARE,
        PERF_COUNT_SW_CONTEXT_SWITCHES,
    ),
    (
        "cpu-migrations",
        PERF_TYPE_SOFTWARE,
        PERF_COUNT_SW_CPU_MIGRATIONS,
    ),
    ("task-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK),
    ("cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES),
    (
        "instructions",
        PERF_TYPE_HARDWARE,
        PERF_COUNT_HW_INSTRUCTIONS,
    ),
];

fn open_event(
    kind: u32,
    config: u64,
    tid: i32,
    inherit: bool,
    user_only: bool,
) -> std::io::Result<OwnedFd> {
    let mut attr = [0u8; ATTR_SIZE];
    attr[0..4].copy_from_slice(&kind.to_ne_bytes());
    attr[4..8].copy_from_slice(&(ATTR_SIZE as u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&config.to_ne_bytes());
    // flags at offset 40: bit 1 inherit, bit 6 exclude_hv (needed for non-root on some kernels).
    let mut flags: u64 = 1 << 6;
    if inherit {
        flags |= 1 << 1;
    }
    if user_only {
        flags |= 1 << 5; // exclude_kernel
    }
    attr[40..48].copy_from_slice(&flags.to_ne_bytes());
    crate::perf_event::open(&attr, tid as libc::pid_t, -1)
}

fn is_denied(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

/// Why an event could not be opened, as a kind callers can branch on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Refusal {
    /// The event does not exist here (no PMU exposed: common in VMs).
    NotSupported,
    /// perf_event_paranoid or a security policy forbids it for this user.
    Denied,
    /// Anything else (the reason says what).
    Other,
}

/// An event that could not be opened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenFailure {
    pub refusal: Refusal,
    pub reason: String,
}

fn failure(e: &std::io::Error) -> OpenFailure {
    let refusal = match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => Refusal::NotSupported,
        _ if is_denied(e) => Refusal::Denied,
        _ => Refusal::Other,
    };
    OpenFailure {
        refusal,
        reason: reason(e),
    }
}

/// Why an event could not be opened, in words.
fn reason(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
            "not supported here (no such event: common in VMs)".to_string()
        }
        _ if is_denied(e) => {
            "permission denied (see /proc/sys/kernel/perf_event_paranoid)".to_string()
        }
        Some(libc::ENOSYS) => "perf events are not built into this kernel".to_string(),
        _ => e.to_string(),
    }
}

fn read_counter(fd: &OwnedFd) -> Option<u64> {
    crate::perf_event::read_count(fd)
}

/// Opens an event; a hardware event refused for permission (perf_event_paranoid >= 2 as
/// non-root) is retried counting user space only, and then carries a `:u` suffix. Software
/// events are not retried: context switches happen in the kernel, so a user-only count would
/// read zero and look like a measurement.
fn open_best(
    name: &str,
    kind: u32,
    config: u64,
    tid: i32,
    inherit: bool,
) -> Result<(String, OwnedFd), OpenFailure> {
    match open_event(kind, config, tid, inherit, false) {
        Ok(fd) => Ok((name.to_string(), fd)),
        Err(e) if kind == PERF_TYPE_HARDWARE && is_denied(&e) => {
            match open_event(kind, config, tid, inherit, true) {
                Ok(fd) => Ok((format!("{name}:u"), fd)),
                // Still refused: say so, not the user-only retry's own error.
                Err(e2) if is_denied(&e2) => Err(failure(&e)),
                Err(e2) => Err(failure(&e2)),
            }
        }
        Err(e) => Err(failure(&e)),
    }
}

/// A set of counters attached to one task (0 = the calling thread).
pub struct PerfCounters {
    open: Vec<(String, OwnedFd, u64)>,
    /// Events that could not be opened, with the reason.
    pub unavailable: BTreeMap<String, String>,
}

impl PerfCounters {
    /// Opens every event in [`EVENTS`] on `tid`. With `inherit`, threads and children created
    /// afterwards are counted too.
    pub fn open(tid: i32, inherit: bool) -> Self {
        let mut open = Vec::new();
        let mut unavailable = BTreeMap::new();
        for (name, kind, config) in EVENTS {
            match open_best(name, *kind, *config, tid, inherit) {
                Ok((label, fd)) => {
                    let start = read_counter(&fd).unwrap_or(0);
                    open.push((label, fd, start));
                }
                Err(e) => {
                    unavailable.insert(name.to_string(), e.reason);
                }
            }
        }
        Self { open, unavailable }
    }

    /// Counts since `open`, by event name. Never negative.
    pub fn read(&self) -> BTreeMap<String, u64> {
        self.open
            .iter()
            .filter_map(|(n, fd, start)| {
                Some((n.to_string(), read_counter(fd)?.saturating_sub(*start)))
            })
            .collect()
    }
}

/// Whether hardware and software counters can be opened on this machine, for the probe.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PerfAvailability {
    pub software: Result<(), OpenFailure>,
    pub hardware: Result<(), OpenFailure>,
}

pub fn availability() -> PerfAvailability {
    let sw = open_event(
        PERF_TYPE_SOFTWARE,
        PERF_COUNT_SW_CONTEXT_SWITCHES,
        0,
        false,
        false,
    )
    .map(|_| ())
    .map_err(|e| failure(&e));
    let hw = open_best(
        "instructions",
        PERF_TYPE_HARDWARE,
        PERF_COUNT_HW_INSTRUCTIONS,
        0,
        false,
    )
    .map(|_| ());
    // `perf_event_paranoid` is read by the probe, under its root ([`crate::probe::counters`]).
    PerfAvailability {
        software: sw,
        hardware: hw,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn software_counters_count_forward() {
        let c = PerfCounters::open(0, false);
        // Where perf events are unavailable (seccomp, paranoid 3) every event says why.
        if c.open.is_empty() {
            assert_eq!(c.unavailable.len(), EVENTS.len());
            crate::testing::skipped(
                "software_counters_count_forward",
                &format!("no perf event could be opened: {:?}", c.unavailable),
            );
            return;
        }
        for _ in 0..10 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let r = c.read();
        match r.get("context-switches") {
            Some(cs) => assert!(*cs >= 1, "ten sleeps switch out at least once"),
            None => crate::testing::skipped(
                "software_counters_count_forward",
                "the context-switches event did not open",
            ),
        }
    }
}
