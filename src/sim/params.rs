//! The named costs of the model, their defaults, and `--calibrate`.
//!
//! Everything the simulator charges for is one of a handful of named costs, so a prediction can
//! be read back to its assumptions: a halt exit, an IPI, a host reschedule, a context flush when
//! a vCPU resumes elsewhere, the slowdown of a core whose module (or SMT) sibling is busy, the
//! halt-polling windows, and the cold stretch of the work a vCPU does right after a halt. A table is simulated with one [`Costs`] for its host, printed beside
//! it; nothing is fitted per cell. `--calibrate` replaces the wakeup costs with ones derived from
//! a cpulab `pingpong` or `doctor` result measured on the user's own machine, so "what if" starts
//! from this machine rather than from our defaults.

use super::published::get;
use crate::error::bad_input;
use crate::report::envelope::Kind;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Costs in nanoseconds (and one factor). Every field has a default; a scenario or a host profile
/// overrides some.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Costs {
    /// Exit to the hypervisor and re-entry paid by a halted vCPU that is woken, on the wakee's
    /// critical path.
    pub halt_exit_ns: f64,
    /// Delivery of the IPI that wakes a halted vCPU: the host waking the vCPU's thread, on the
    /// wakee's critical path. The sender does not wait for it (its short VM exit for the write
    /// is part of `remote_wake_ns`).
    pub ipi_ns: f64,
    /// The sender's part of any wakeup of a task on another vCPU: remote queueing, cache-line
    /// transfer and, for a halted target, the IPI write. Guest work on the waker's vCPU; the
    /// wakeup reaches the target once it is done.
    pub remote_wake_ns: f64,
    /// The host scheduler picking a vCPU to run on a physical CPU.
    pub host_resched_ns: f64,
    /// Flushing a vCPU's context from the physical CPU it last ran on before it resumes on
    /// another one.
    pub context_flush_ns: f64,
    /// Guest context switch between two tasks on one vCPU.
    pub guest_switch_ns: f64,
    /// Fraction of speed a core loses while the other core of its module (or its SMT sibling)
    /// is busy: 0 = no sharing, 0.5 = half speed.
    pub module_contention: f64,
    /// Fraction of speed every core loses when all cores of its package are busy (turbo bins
    /// falling with the number of active cores), linear in between: 0 = flat frequency.
    pub turbo_drop: f64,
    /// Guest halt polling: an idle vCPU spins this long before it halts (0 = off).
    pub guest_poll_ns: f64,
    /// Host halt polling: the hypervisor spins this long on a halted vCPU before it gives the
    /// physical CPU away (0 = off).
    pub host_poll_ns: f64,
    /// Hypervisor time slice when more vCPUs are runnable than physical CPUs.
    pub slice_ns: f64,
    /// A vCPU woken from halt with no idle physical CPU preempts the running vCPU that has had
    /// the most CPU time, when that is at least this much more than its own (CFS wakeup
    /// preemption, Xen's BOOST); otherwise it waits for a slice to end.
    pub wake_preempt_ns: f64,
    /// How much slower the first work after a halt runs, as a fraction of that work: a vCPU that
    /// halted gave up its physical CPU, and what the woken task had in the core's caches was
    /// lost or went stale meanwhile (the host ran other threads there, or idled the core), so
    /// it refills as it touches it. Paid by a halted vCPU that is resumed, never by one that
    /// polled (in the guest or the host) or was busy, so never by a same-vCPU wakeup.
    pub cold_stretch: f64,
    /// The work after the resume that `cold_stretch` applies to, ns: the cost per wakeup is
    /// `cold_stretch * min(work after waking, cold_work_ns)`, growing with the work and bounded,
    /// since a refill ends once the task's working set is back.
    pub cold_work_ns: f64,
    /// The guest choosing the vCPU of a woken task that may run on more than one (Linux's
    /// `select_task_rq`: wake-affine and the idle-sibling scan), on the waker's vCPU before the
    /// wakeup leaves. A task pinned to one vCPU skips it.
    pub wake_choice_ns: f64,
}

impl Default for Costs {
    /// A KVM guest on a current x86 server: a cross-vCPU blocking wakeup costs about 20 us
    /// (field notes, "this project's machines": 42 us cross vs 5 us same-CPU round trip).
    fn default() -> Self {
        Self {
            halt_exit_ns: 10_000.0,
            ipi_ns: 4_000.0,
            remote_wake_ns: 1_000.0,
            host_resched_ns: 5_000.0,
            context_flush_ns: 5_000.0,
            guest_switch_ns: GUEST_SWITCH_DEFAULT_NS,
            module_contention: 0.0,
            turbo_drop: 0.0,
            guest_poll_ns: 0.0,
            host_poll_ns: 0.0,
            slice_ns: 10_000_000.0,
            wake_preempt_ns: 1_000_000.0,
            cold_stretch: cold_stretch_from_a(),
            cold_work_ns: cold_work_from_a(GUEST_SWITCH_DEFAULT_NS),
            wake_choice_ns: WAKE_CHOICE_NS,
        }
    }
}

const GUEST_SWITCH_DEFAULT_NS: f64 = 2_000.0;

/// The choice of a woken task's vCPU, measured on this project's 2-vCPU KVM guest (AMD EPYC
/// host, kernel 6.18, 2026-11-28) by the rule written down before measuring it (docs/sim.md):
/// on the waker's vCPU, from `sched:sched_waking` to `csd:csd_queue_cpu`, pgbench waking an
/// unpinned PostgreSQL backend against a pinned one, five `cpulab pair` runs of each: 1127 ns
/// against 654 ns, a difference of 474 ns (95% Welch interval 332 to 615 ns). Not a figure of
/// any table.
pub const WAKE_CHOICE_NS: f64 = 474.0;

/// Field notes A's `perf stat` of the PostgreSQL backend with the client on its vCPU or on
/// another (the SELECT 1 placements): IPC 0.48 and 0.40. Across vCPUs each one idles, so halts,
/// between transactions; the same instructions took 0.48 / 0.40 = 1.2x the cycles: 20% more
/// time for the work after a wakeup from a halt. Not a figure of table M. (The
/// GHz the same run printed, 2.94 against 1.80, is left out: in a guest it is cycles over task
/// time, and task time also holds hypervisor exits the other costs already charge.)
pub fn cold_stretch_from_a() -> f64 {
    get("a.perf.ipc.same").value / get("a.perf.ipc.diff").value - 1.0
}

/// The work over which that IPC was averaged: A's backend burst, the same-vCPU transaction
/// (180 s over the transactions) less two guest switches, two thirds of it the server's as
/// [`crate::sim::builtin::pair`] splits it. The model does not extrapolate the stretch beyond
/// a burst that long.
pub fn cold_work_from_a(guest_switch_ns: f64) -> f64 {
    let txn_ns = 180e9 / get("a.select1.same").value;
    (txn_ns - 2.0 * guest_switch_ns) * 2.0 / 3.0
}

impl Costs {
    /// The cost on the critical path of one wakeup of a halted vCPU on its last physical CPU.
    pub fn halted_wake_ns(&self) -> f64 {
        self.remote_wake_ns + self.ipi_ns + self.host_resched_ns + self.halt_exit_ns
    }

    /// What resuming from a halt adds to the `work_ns` the woken vCPU does next (its switch to
    /// the woken task and the task's burst): zero without a halt.
    pub fn cold_cost_ns(&self, work_ns: f64) -> f64 {
        self.cold_stretch * work_ns.max(0.0).min(self.cold_work_ns)
    }

    /// Every field, named, for printing beside a table.
    pub fn describe(&self) -> String {
        format!(
            "halt exit {:.1} us, IPI {:.1} us, remote wake {:.1} us, host resched {:.1} us, \
             context flush {:.1} us, guest switch {:.1} us, module contention {:.0}%, \
             turbo drop {:.1}%, guest poll {:.0} us, host poll {:.0} us, slice {:.0} ms, wake preempt at {:.1} ms lead, \
             cold stretch {:.0}% of the first {:.1} us after a halt, wake choice {:.2} us",
            self.halt_exit_ns / 1e3,
            self.ipi_ns / 1e3,
            self.remote_wake_ns / 1e3,
            self.host_resched_ns / 1e3,
            self.context_flush_ns / 1e3,
            self.guest_switch_ns / 1e3,
            self.module_contention * 100.0,
            self.turbo_drop * 100.0,
            self.guest_poll_ns / 1e3,
            self.host_poll_ns / 1e3,
            self.slice_ns / 1e6,
            self.wake_preempt_ns / 1e6,
            self.cold_stretch * 100.0,
            self.cold_work_ns / 1e3,
            self.wake_choice_ns / 1e3
        )
    }

    /// Rejects costs the model cannot run with (one line, exit 2): each named with the value
    /// given and the range it takes. A time is at most one second (a cost beyond that is no
    /// cost of one wakeup or switch, and is almost surely a unit mistake), a fraction within
    /// what the model can slow a core by.
    pub fn check(&self) -> Result<()> {
        let times = [
            ("halt_exit_ns", self.halt_exit_ns),
            ("ipi_ns", self.ipi_ns),
            ("remote_wake_ns", self.remote_wake_ns),
            ("host_resched_ns", self.host_resched_ns),
            ("context_flush_ns", self.context_flush_ns),
            ("guest_switch_ns", self.guest_switch_ns),
            ("guest_poll_ns", self.guest_poll_ns),
            ("host_poll_ns", self.host_poll_ns),
            ("wake_preempt_ns", self.wake_preempt_ns),
            ("cold_work_ns", self.cold_work_ns),
            ("wake_choice_ns", self.wake_choice_ns),
        ];
        for (name, v) in times {
            in_range(
                name,
                v,
                0.0..=MAX_COST_NS,
                "0 to 1e9 nanoseconds (one second)",
            )?;
        }
        in_range(
            "slice_ns",
            self.slice_ns,
            1e4..=MAX_COST_NS,
            "1e4 to 1e9 nanoseconds (10 us to one second)",
        )?;
        let fractions = [
            ("turbo_drop", self.turbo_drop),
            ("module_contention", self.module_contention),
        ];
        for (name, v) in fractions {
            // Below 1, or a busy core would stop: at most 0.95.
            in_range(name, v, 0.0..=0.95, "a fraction from 0 to 0.95")?;
        }
        in_range(
            "cold_stretch",
            self.cold_stretch,
            0.0..=10.0,
            "a fraction from 0 to 10",
        )
    }
}

/// The longest any cost may be: one second.
pub const MAX_COST_NS: f64 = 1e9;

/// `name = v` within `range`, else bad input quoting the value (never three hundred digits of
/// it) and the range in words.
pub fn in_range(
    name: &str,
    v: f64,
    range: std::ops::RangeInclusive<f64>,
    give: &str,
) -> Result<()> {
    if range.contains(&v) {
        Ok(())
    } else {
        Err(bad_input(format!(
            "{name} = {} is out of range; give {give}",
            crate::units::fmt_given(v)
        )))
    }
}

/// Wakeup costs measured on a machine, read from a cpulab result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// The file they came from.
    pub source: String,
    /// `pingpong` or `doctor`.
    pub kind: String,
    /// Blocking method the round trips were measured with (`pipe` preferred).
    pub method: String,
    /// Mean same-CPU round trip, ns (measured).
    pub same_rtt_ns: f64,
    /// Mean round trip between two different CPUs, ns (measured).
    pub cross_rtt_ns: f64,
    /// `guest_halt_poll_ns` of the machine when the doctor saw it.
    pub guest_halt_poll_ns: Option<u64>,
    /// The same work after each wakeup timed on one CPU and across two (`pingpong --touch`):
    /// sets the cold stretch when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold: Option<ColdCalibration>,
    /// Why the calibration's run was marked noisy (other load before it), if it was: queueing
    /// behind other tasks lengthens a cross-CPU round trip without any halt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noisy: Option<String>,
}

/// The work after each wakeup of a `pingpong --touch` result, from the calibration's two runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ColdCalibration {
    /// Bytes written after each wakeup.
    pub bytes: u64,
    /// Its mean time after a same-CPU wakeup, ns (measured).
    pub same_ns: f64,
    /// Its mean time after a wakeup from another CPU, ns (measured).
    pub cross_ns: f64,
}

impl ColdCalibration {
    /// How much longer the same work took after a cross-CPU wakeup: the measured stretch.
    pub fn stretch(&self) -> f64 {
        self.cross_ns / self.same_ns - 1.0
    }

    /// What was measured, in words: `512 KiB written: 8.34 us across vCPUs against 8.37 us on
    /// one`.
    pub fn describe(&self) -> String {
        format!(
            "{} written: {:.2} us across vCPUs against {:.2} us on one",
            crate::units::fmt_bytes(self.bytes),
            self.cross_ns / 1e3,
            self.same_ns / 1e3
        )
    }
}

/// Syscall work of one side of a pipe round trip, ns, outside the switch or wakeup itself.
pub const PIPE_WORK_NS: f64 = 500.0;

impl Calibration {
    /// The round trips the field notes quote for this project's machine (`perf bench sched
    /// pipe`: ~5.0 us same CPU, ~42 us cross CPU), used when no file is given.
    pub fn field_notes() -> Self {
        Self {
            source: "field notes, this project's machines (perf bench sched pipe)".into(),
            kind: "published".into(),
            method: "pipe".into(),
            same_rtt_ns: 5_000.0,
            cross_rtt_ns: 42_000.0,
            guest_halt_poll_ns: Some(0),
            cold: None,
            noisy: None,
        }
    }

    /// Rejects a file whose times no machine measures (a round trip of 1e300 ns was once taken
    /// and printed as three hundred digits): each within 1 ns to one second, and the costs they
    /// give within [`Costs::check`]'s ranges. One line naming the file, exit 2.
    pub fn check(&self) -> Result<()> {
        let file = format!("--calibrate {}", self.source);
        let mut times = vec![
            ("same-CPU mean round trip (ns)", self.same_rtt_ns),
            ("cross-CPU mean round trip (ns)", self.cross_rtt_ns),
        ];
        if let Some(c) = &self.cold {
            times.push(("same-CPU work after each wakeup (ns)", c.same_ns));
            times.push(("cross-CPU work after each wakeup (ns)", c.cross_ns));
        }
        for (what, v) in times {
            in_range(
                &format!("{file}: {what}"),
                v,
                1.0..=MAX_COST_NS,
                "1 to 1e9 nanoseconds (one second)",
            )?;
        }
        self.apply(&Costs::default())
            .check()
            .map_err(|e| bad_input(format!("{file}: the costs its times give: {e}")))
    }

    /// Costs whose same-CPU and cross-CPU round trips match the measured ones: the guest switch
    /// from the same-CPU trip (two switches and two sides' syscall work), and the four wakeup
    /// costs scaled together from what the cross trip adds per direction, keeping the defaults'
    /// proportions (one measured number cannot split them further). The cross trip's woken side
    /// resumes from a halt, so its switch and syscall work pay the base's cold stretch, which is
    /// taken out before the wakeup costs are scaled.
    /// A measured work after each wakeup sets the cold stretch (never below zero: work that ran
    /// faster after a cross-CPU wakeup has no cold cost to charge) over the time that work took
    /// on one CPU, before the wakeup costs are derived.
    pub fn apply(&self, base: &Costs) -> Costs {
        let mut c = base.clone();
        if let Some(cold) = &self.cold {
            c.cold_stretch = cold.stretch().max(0.0);
            c.cold_work_ns = cold.same_ns;
        }
        c.guest_switch_ns = (self.same_rtt_ns / 2.0 - PIPE_WORK_NS).max(100.0);
        let after_wake = PIPE_WORK_NS + c.guest_switch_ns;
        let per_wake =
            (self.cross_rtt_ns / 2.0 - after_wake - c.cold_cost_ns(after_wake)).max(100.0);
        let scale = per_wake / base.halted_wake_ns().max(1.0);
        c.remote_wake_ns = base.remote_wake_ns * scale;
        c.ipi_ns = base.ipi_ns * scale;
        c.host_resched_ns = base.host_resched_ns * scale;
        c.halt_exit_ns = base.halt_exit_ns * scale;
        c
    }
}

pub(super) const PINGPONG: Kind =
    <crate::pingpong::Pingpong as crate::experiment::Experiment>::KIND;

/// Reads a `pingpong` or `doctor` result and takes its blocking round trips.
pub fn load_calibration(path: &Path) -> Result<Calibration> {
    // The envelope's loader, told the one experiment kind it takes beside the doctor's.
    let loaded = crate::report::envelope::load(path, &[PINGPONG])?;
    from_loaded(&loaded, &path.display().to_string())
}

pub(super) fn from_loaded(
    loaded: &crate::report::envelope::Loaded,
    name: &str,
) -> Result<Calibration> {
    let name = name.to_string();
    let v = &loaded.value;
    // (method, class, mean rtt ns, work after each wakeup: bytes and mean ns) of every
    // blocking run.
    let mut runs: Vec<Run> = Vec::new();
    let mut poll = None;
    match loaded.kind {
        PINGPONG => {
            for r in v["runs"].as_array().into_iter().flatten() {
                let (Some(m), Some(c), Some(ns)) = (
                    r["method"].as_str(),
                    r["placement"].as_str(),
                    r["mean_rtt_ns"]["mean"].as_f64(),
                ) else {
                    continue;
                };
                let touch = r["touch"]["bytes"]
                    .as_u64()
                    .zip(r["touch"]["mean_ns"]["mean"].as_f64());
                runs.push((m.into(), c.into(), ns, touch));
            }
        }
        Kind::Doctor => {
            poll = v["facts"]["guest_halt_poll_ns"].as_u64();
            for r in v["measurements"]["wakeup"].as_array().into_iter().flatten() {
                if r["blocking"].as_bool() != Some(true) {
                    continue;
                }
                let (Some(m), Some(c), Some(ns)) = (
                    r["method"].as_str(),
                    r["class"].as_str(),
                    r["rtt_ns"]["mean"].as_f64(),
                ) else {
                    continue;
                };
                runs.push((m.into(), c.into(), ns, None));
            }
        }
        other => {
            return Err(bad_input(format!(
                "{name} is a `cpulab {other}` result; --calibrate takes a pingpong, doctor or \
                 host bench result (cpulab pingpong --json > r.json)"
            )));
        }
    }
    let mut cal = pick(&runs, &name, loaded.kind.as_str(), poll)?;
    cal.check()?;
    cal.noisy = noisy_reason(&v["conditions"]);
    Ok(cal)
}

/// Why a result's `conditions` say other load may have spoiled its figures, if they say so.
fn noisy_reason(conditions: &serde_json::Value) -> Option<String> {
    (conditions["noisy"].as_bool() == Some(true)).then(|| {
        conditions["load_before"]["reason"]
            .as_str()
            .unwrap_or("other load before the run")
            .to_string()
    })
}

/// One blocking run of a calibration file: method, placement class, mean round trip (ns), and
/// the work after each wakeup (bytes, mean ns) when it was timed.
type Run = (String, String, f64, Option<(u64, f64)>);

/// The same-CPU and the first cross-CPU run of the preferred blocking method.
fn pick(runs: &[Run], name: &str, kind: &str, poll: Option<u64>) -> Result<Calibration> {
    let blocking = ["pipe", "unix", "eventfd", "futex", "tcp"];
    for m in blocking {
        let same = runs.iter().find(|r| r.0 == m && r.1 == "same-cpu");
        let cross = runs
            .iter()
            .find(|r| r.0 == m && r.1 != "same-cpu" && r.1 != "unpinned");
        if let (Some(s), Some(c)) = (same, cross)
            && s.2 > 0.0
            && c.2 > 0.0
        {
            return Ok(Calibration {
                source: name.to_string(),
                kind: kind.to_string(),
                method: m.to_string(),
                same_rtt_ns: s.2,
                cross_rtt_ns: c.2,
                guest_halt_poll_ns: poll,
                cold: match (s.3, c.3) {
                    (Some((bytes, same_ns)), Some((b, cross_ns)))
                        if bytes == b && same_ns > 0.0 && cross_ns > 0.0 =>
                    {
                        Some(ColdCalibration {
                            bytes,
                            same_ns,
                            cross_ns,
                        })
                    }
                    _ => None,
                },
                noisy: None,
            });
        }
    }
    Err(bad_input(format!(
        "{name} has no blocking round trip measured both on one CPU and across two; \
         measure with `cpulab pingpong --json` on a machine with at least 2 CPUs"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    // That a calibration reproduces its round trips is checked through the model, not by
    // algebra on the costs: validate's table M simulates the pipe pair with the calibrated costs
    // (`sim::validate::tests::this_machine_halt_polling_recovers_and_misses_are_explained`).

    #[test]
    fn a_noisy_result_carries_its_reason_and_a_quiet_one_none() {
        let noisy: serde_json::Value = serde_json::from_str(
            r#"{"noisy": true, "load_before": {"reason": "other load before the run: cpu0 26% busy"}}"#,
        )
        .unwrap();
        assert_eq!(
            noisy_reason(&noisy).as_deref(),
            Some("other load before the run: cpu0 26% busy")
        );
        let bare: serde_json::Value = serde_json::from_str(r#"{"noisy": true}"#).unwrap();
        assert_eq!(
            noisy_reason(&bare).as_deref(),
            Some("other load before the run")
        );
        for quiet in [r#"{"noisy": false}"#, r#"{}"#] {
            let v: serde_json::Value = serde_json::from_str(quiet).unwrap();
            assert_eq!(noisy_reason(&v), None, "{quiet}");
        }
    }

    #[test]
    fn pick_prefers_pipe_and_skips_unpinned() {
        let runs = vec![
            ("unix".into(), "same-cpu".into(), 9000.0, None),
            ("unix".into(), "shared-llc".into(), 34000.0, None),
            ("pipe".into(), "same-cpu".into(), 5000.0, None),
            ("pipe".into(), "unpinned".into(), 11000.0, None),
            ("pipe".into(), "shared-llc".into(), 42000.0, None),
        ];
        let c = pick(&runs, "r.json", "pingpong", None).unwrap();
        assert_eq!(c.method, "pipe");
        assert_eq!(c.cross_rtt_ns, 42000.0);
        assert_eq!(c.cold, None, "no work timed, no measured stretch");
        assert_eq!(
            c.apply(&Costs::default()).cold_stretch,
            Costs::default().cold_stretch,
            "the stretch stays the default's"
        );
        assert!(pick(&runs[..1], "r.json", "pingpong", None).is_err());
    }

    #[test]
    fn work_timed_after_each_wakeup_sets_the_cold_stretch() {
        let runs: Vec<Run> = vec![
            (
                "pipe".into(),
                "same-cpu".into(),
                5000.0,
                Some((262_144, 4000.0)),
            ),
            (
                "pipe".into(),
                "shared-llc".into(),
                42000.0,
                Some((262_144, 5000.0)),
            ),
        ];
        let c = pick(&runs, "r.json", "pingpong", None).unwrap();
        let cold = c.cold.clone().unwrap();
        assert_eq!(
            (cold.bytes, cold.same_ns, cold.cross_ns),
            (262_144, 4000.0, 5000.0)
        );
        let costs = c.apply(&Costs::default());
        assert!(
            (costs.cold_stretch - 0.25).abs() < 1e-12,
            "{}",
            costs.cold_stretch
        );
        assert_eq!(costs.cold_work_ns, 4000.0);
        // Faster after a cross-CPU wakeup: nothing cold to charge, never a negative cost.
        let mut warm = runs.clone();
        warm[1].3 = Some((262_144, 3000.0));
        let c = pick(&warm, "r.json", "pingpong", None).unwrap();
        assert_eq!(c.apply(&Costs::default()).cold_stretch, 0.0);
        // Different sizes on the two runs are not one measurement.
        warm[1].3 = Some((65_536, 5000.0));
        assert_eq!(pick(&warm, "r.json", "pingpong", None).unwrap().cold, None);
    }

    #[test]
    fn the_cold_cost_is_the_stretch_of_the_work_after_waking_up_to_its_bound() {
        let c = Costs {
            cold_stretch: 0.25,
            cold_work_ns: 8_000.0,
            ..Costs::default()
        };
        assert_eq!(c.cold_cost_ns(0.0), 0.0);
        assert_eq!(c.cold_cost_ns(-5.0), 0.0);
        assert_eq!(c.cold_cost_ns(4_000.0), 1_000.0);
        // Grows with the work after waking, then stops at the bound.
        let costs: Vec<f64> = [1e3, 2e3, 4e3, 8e3, 16e3, 1e6]
            .iter()
            .map(|&w| c.cold_cost_ns(w))
            .collect();
        assert!(costs[..4].windows(2).all(|w| w[1] > w[0]), "{costs:?}");
        assert!(costs[3..].iter().all(|&x| x == 2_000.0), "{costs:?}");
        let none = Costs {
            cold_stretch: 0.0,
            ..c
        };
        assert_eq!(none.cold_cost_ns(4_000.0), 0.0);
    }

    /// The default stretch is field notes A's IPC ratio, over A's backend burst, and nothing
    /// from table M: 0.48 / 0.40 - 1 = 0.2; (180 s / 6,507,144 - 2 x 2 us) x 2/3 = 15.77 us.
    #[test]
    fn the_default_cold_stretch_is_field_notes_a_perf_stat() {
        let d = Costs::default();
        assert!((d.cold_stretch - 0.2).abs() < 1e-12, "{}", d.cold_stretch);
        assert!(
            (d.cold_work_ns - 15_774.6).abs() < 0.1,
            "{}",
            d.cold_work_ns
        );
    }

    /// The pipe rows of table M stay exact with the stretch in place: the woken side's switch and
    /// syscall work pay it, and `apply` takes it out of the wakeup costs, so a larger stretch
    /// leaves smaller wakeup costs.
    #[test]
    fn calibration_takes_the_pipes_cold_cost_out_of_the_wakeup_costs() {
        let cal = Calibration::field_notes();
        let with = cal.apply(&Costs::default());
        let without = cal.apply(&Costs {
            cold_stretch: 0.0,
            ..Costs::default()
        });
        assert_eq!(with.guest_switch_ns, without.guest_switch_ns);
        let after_wake = PIPE_WORK_NS + with.guest_switch_ns;
        let per_wake = |c: &Costs| c.halted_wake_ns() + after_wake + c.cold_cost_ns(after_wake);
        assert!((per_wake(&with) - cal.cross_rtt_ns / 2.0).abs() < 1e-6);
        assert!((per_wake(&without) - cal.cross_rtt_ns / 2.0).abs() < 1e-6);
        assert!(with.halted_wake_ns() < without.halted_wake_ns());
    }

    /// A calibration file holding absurd times is refused, one line quoting the value short:
    /// once a 1e300 ns round trip was taken and printed as three hundred digits.
    #[test]
    fn calibrations_with_times_no_machine_measures_are_bad_input() {
        assert!(Calibration::field_notes().check().is_ok());
        for (same, cross) in [(1e300, 3e300), (5_000.0, f64::INFINITY), (0.5, 42_000.0)] {
            let c = Calibration {
                same_rtt_ns: same,
                cross_rtt_ns: cross,
                ..Calibration::field_notes()
            };
            let e = c.check().unwrap_err();
            let m = format!("{e:#}");
            assert_eq!(crate::error::exit_code(&e), 2, "{m}");
            assert!(m.contains("1 to 1e9 nanoseconds") && m.len() < 200, "{m}");
        }
        // Each time in range, but a stretch of 1e6 no core shows: the derived cost is refused.
        let c = Calibration {
            cold: Some(ColdCalibration {
                bytes: 4096,
                same_ns: 1.0,
                cross_ns: 1e6,
            }),
            ..Calibration::field_notes()
        };
        let m = format!("{:#}", c.check().unwrap_err());
        assert!(m.contains("cold_stretch = 999999 is out of range"), "{m}");
    }

    #[test]
    fn out_of_range_costs_are_bad_input() {
        let c = Costs {
            module_contention: 1.5,
            ..Costs::default()
        };
        assert_eq!(crate::error::exit_code(&c.check().unwrap_err()), 2);
        for bad in [-0.1, 11.0, f64::NAN] {
            let c = Costs {
                cold_stretch: bad,
                ..Costs::default()
            };
            assert_eq!(crate::error::exit_code(&c.check().unwrap_err()), 2, "{bad}");
        }
        let c = Costs {
            cold_work_ns: -1.0,
            ..Costs::default()
        };
        assert_eq!(crate::error::exit_code(&c.check().unwrap_err()), 2);
        // A time beyond one second is refused, quoted short with the range it takes.
        let c = Costs {
            halt_exit_ns: 1e300,
            ..Costs::default()
        };
        assert_eq!(
            format!("{:#}", c.check().unwrap_err()),
            "halt_exit_ns = 1e300 is out of range; give 0 to 1e9 nanoseconds (one second)"
        );
    }
}
