//! Counters: which perf events cpulab's experiments will be able to open here.
//!
//! Software counters (context switches, migrations) show the scheduler's side of a wakeup;
//! hardware ones (cycles, instructions) show frequency and IPC, the evidence that settled the
//! field notes' case A. Most VMs expose no PMU, and `perf_event_paranoid` may forbid even
//! software events to non-root users. Opening a counter is the only honest test, so this is done
//! on the live machine only: a fixture root stands for a machine that is not this one.

use super::reading::{Reading, Reason, read_parsed};
use crate::counters::perf;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The counters section of the probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// `/proc/sys/kernel/perf_event_paranoid` (-1 allows everything; 2 or more restricts
    /// non-root users to their own user-space events; Debian's 3 forbids all).
    pub perf_event_paranoid: Reading<i32>,
    /// A software counter (context switches) could be opened on this thread.
    pub software: Reading<bool>,
    /// A hardware counter (instructions) could be opened on this thread.
    pub hardware: Reading<bool>,
}

/// Turns an open attempt into a reading.
fn opened(r: &Result<(), perf::OpenFailure>) -> Reading<bool> {
    match r {
        Ok(()) => Reading::Value(true),
        Err(e) => {
            let reason = match e.refusal {
                perf::Refusal::Denied => Reason::PermissionDenied,
                perf::Refusal::NotSupported => Reason::NotExposed,
                perf::Refusal::Other => Reason::Unreadable,
            };
            Reading::unavailable(reason, e.reason.clone())
        }
    }
}

impl Counters {
    pub fn read(root: &Path, live: bool) -> Self {
        let perf_event_paranoid =
            read_parsed(&root.join("proc/sys/kernel/perf_event_paranoid"), |t| {
                t.parse().ok()
            });
        if !live {
            let not = || {
                Reading::unavailable(
                    Reason::NotApplicable,
                    "counters are opened on the live machine only, not for a fixture root",
                )
            };
            return Self {
                perf_event_paranoid,
                software: not(),
                hardware: not(),
            };
        }
        let a = perf::availability();
        Self {
            perf_event_paranoid,
            software: opened(&a.software),
            hardware: opened(&a.hardware),
        }
    }

    pub fn hardware_available(&self) -> bool {
        self.hardware.value() == Some(&true)
    }

    pub fn software_available(&self) -> bool {
        self.software.value() == Some(&true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_open_failures() {
        let fail = |refusal| {
            Err(perf::OpenFailure {
                refusal,
                reason: "as the kernel said".into(),
            })
        };
        let r = opened(&fail(perf::Refusal::NotSupported));
        assert_eq!(r.why().unwrap().reason, Reason::NotExposed);
        let r = opened(&fail(perf::Refusal::Denied));
        assert_eq!(r.why().unwrap().reason, Reason::PermissionDenied);
        let r = opened(&fail(perf::Refusal::Other));
        assert_eq!(r.why().unwrap().reason, Reason::Unreadable);
        assert_eq!(opened(&Ok(())), Reading::Value(true));
    }
}
