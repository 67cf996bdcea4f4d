//! `--calibrate` from a `cpulab host bench` result: the hypervisor's own costs, measured on a
//! real KVM with cpulab's guests, instead of derived from a guest's pipe round trips.
//!
//! Each cost of the KVM layer comes from one difference of two measured halt ping-pongs, so
//! each input row sets one cost and no cost is split by an assumed proportion:
//!
//! - the spin ping-pong (a shared word, no IPI, no halt) on two host CPUs: the guest's own work
//!   per message, `spin / 2` on each side (what this KVM takes to run the guest's instructions);
//! - the halt ping-pong on the same two CPUs with the module's halt-poll limit, whose polls win:
//!   a halt the host polls through, `halt_exit_ns = (polled - spin) / 2` (the exit, the poll
//!   seeing the IPI, the re-entry; the sender's ICR write is in it too, so `remote_wake_ns` is 0);
//! - the halt ping-pong with both vCPU threads on one host CPU, where KVM cannot poll (another
//!   task is runnable there) and no idle CPU has to be woken: `host_resched_ns = (one CPU -
//!   polled) / 2`, the host switching the CPU to the woken vCPU's thread;
//! - in the halt-poll sweep, its own row with the module's limit (the same setting as the second
//!   row, measured in the sweep's part of the run: the host's state moves between parts, so the
//!   sweep's rows are simulated with this row's halt exit), and its row with polling off:
//!   `ipi_ns = (off - sweep polled) / 2 - host_resched_ns`, the host waking the halted vCPU's
//!   thread onto its idle CPU.
//!
//! Everything else the result holds is held out: the unpinned rows, every other limit of the
//! halt-poll sweep (KVM's adaptive window decides those), the fair-share rows and the guest
//! polling rows. [`super::validate`]'s table H simulates them with these costs.

use crate::error::bad_input;
use crate::host::bench::report::{Exchange, HostBenchReport, Point};
use crate::stats::MeanCi;
use crate::topology::PlacementClass;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::Path;

use super::params::Costs;

/// A measured figure with its 95% interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    pub mean: f64,
    pub ci95_low: f64,
    pub ci95_high: f64,
}

impl From<&MeanCi> for Measured {
    fn from(m: &MeanCi) -> Self {
        Self {
            mean: m.mean,
            ci95_low: m.ci95_low,
            ci95_high: m.ci95_high,
        }
    }
}

/// A halt ping-pong row of the sweep, by the VM's own limit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    pub limit_ns: u64,
    pub rtt_ns: Measured,
    pub polls_won_share: Option<f64>,
}

/// A fair-share row: VM1's and VM2's busy vCPUs on the same host CPUs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShareMeasured {
    pub vm1_vcpus: u32,
    pub vm2_vcpus: u32,
    pub host_cpus: u32,
    pub vm1: Measured,
    pub vm2: Measured,
}

/// The guest polling ping-pong by its window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GuestPollPoint {
    pub window_ns: u64,
    pub rtt_ns: Measured,
}

/// What a `cpulab host bench` result gives the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostCalibration {
    /// The file, or the bundled measurement, it came from.
    pub source: String,
    /// The KVM module (`kvm_pvm`, `kvm_amd`, `kvm_intel`), when the result names one.
    pub module: Option<String>,
    /// Guest instructions were emulated (kvm_pvm): the guest's work is the emulator's.
    pub guest_code_emulated: bool,
    /// The cpulab revision and start time of the measurement.
    pub revision: Option<String>,
    pub started_unix_s: u64,
    /// Why the result was marked noisy (other load before it), if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noisy: Option<String>,
    /// Host CPUs the bench could use: the simulated host's CPUs.
    pub host_cpus: u32,
    /// The module's `halt_poll_ns`: the limit of every row that sets none of its own.
    pub module_halt_poll_ns: u64,
    /// The two-CPU pair the pinned rows ran on (`0:1`) and the one CPU (`0:0`).
    pub pair: String,
    pub one_cpu: String,
    // The four input rows.
    pub spin_ns: Measured,
    pub polled_ns: Measured,
    pub one_cpu_ns: Measured,
    /// The sweep's own row with the module's limit: the same setting as `polled_ns`, measured
    /// in the sweep's part of the run, beside the rows it calibrates.
    pub sweep_polled_ns: Measured,
    pub off_ns: Measured,
    // Held out.
    pub unpinned_halt_ns: Option<Measured>,
    pub unpinned_spin_ns: Option<Measured>,
    pub sweep: Vec<SweepPoint>,
    pub share: Vec<ShareMeasured>,
    pub guest_poll: Vec<GuestPollPoint>,
    /// Timer-wake rows the result holds; the model has no timer workload.
    pub timer_rows: usize,
}

/// The result measured on this project's 2-vCPU KVM guest that `sim validate` checks table H
/// against when no host bench result is given (docs/sim.md says when and how it was taken).
pub const BUNDLED: &str = include_str!("data/host-bench.json");
pub const BUNDLED_NAME: &str =
    "the bundled host bench of this project's machine (src/sim/data/host-bench.json)";

const HOST_BENCH: crate::report::envelope::Kind =
    <crate::host::HostBench as crate::experiment::Experiment>::KIND;

/// What `--calibrate` read: a guest's round trips, or the hypervisor's own costs.
#[derive(Clone, Debug)]
pub enum Calibrated {
    /// A `pingpong` or `doctor` result.
    Guest(super::params::Calibration),
    /// A `host bench` result.
    Host(Box<HostCalibration>),
}

/// Reads a `pingpong`, `doctor` or `host bench` result.
pub fn load_any(path: &Path) -> Result<Calibrated> {
    // The envelope's loader, told the experiment kinds it takes beside the doctor's.
    let loaded = crate::report::envelope::load(path, &[super::params::PINGPONG, KIND])?;
    let name = path.display().to_string();
    if is_host_bench(loaded.kind) {
        return from_value(&loaded.value, &name).map(|h| Calibrated::Host(Box::new(h)));
    }
    super::params::from_loaded(&loaded, &name).map(Calibrated::Guest)
}

/// Reads a host bench result from a document already loaded.
pub fn from_value(v: &serde_json::Value, name: &str) -> Result<HostCalibration> {
    let r: HostBenchReport = serde_json::from_value(v.clone()).map_err(|e| {
        bad_input(format!(
            "{name}: not a host bench result this cpulab reads ({e}); write it again with `cpulab host bench --json`"
        ))
    })?;
    from_report(&r, name)
}

/// The bundled measurement.
pub fn bundled() -> Result<HostCalibration> {
    let loaded = crate::report::envelope::parse(BUNDLED, BUNDLED_NAME, &[HOST_BENCH])?;
    from_value(&loaded.value, BUNDLED_NAME)
}

/// Whether a loaded document is a host bench result.
pub fn is_host_bench(kind: crate::report::envelope::Kind) -> bool {
    kind == HOST_BENCH
}

pub const KIND: crate::report::envelope::Kind = HOST_BENCH;

fn rtt(p: &Point) -> Option<Measured> {
    p.rtt_ns.as_ref().map(Measured::from)
}

fn is_pair(p: &Point) -> bool {
    !matches!(
        p.placement,
        PlacementClass::SameCpu | PlacementClass::Unpinned
    )
}

/// The rows the model needs, or one line naming what is missing and the fix.
pub fn from_report(r: &HostBenchReport, name: &str) -> Result<HostCalibration> {
    let missing = |what: &str| {
        bad_input(format!(
            "{name} has no {what}; --calibrate needs `cpulab host bench` with its exchange and \
             halt-poll parts (`--parts exchange,halt-poll`, the default) on at least 2 CPUs"
        ))
    };
    let module = r.kvm.module_halt_poll_ns;
    let exchange = |x: Exchange, pick: &dyn Fn(&Point) -> bool| {
        r.points
            .iter()
            .find(|p| p.exchange == x && p.halt_poll_limit_ns.is_none() && pick(p))
    };
    let spin =
        exchange(Exchange::Spin, &is_pair).ok_or_else(|| missing("spin ping-pong on two CPUs"))?;
    let polled = exchange(Exchange::Halt, &|p| is_pair(p) && p.cpus == spin.cpus)
        .ok_or_else(|| missing("halt ping-pong on the spin row's two CPUs"))?;
    let one = exchange(Exchange::Halt, &|p| p.placement == PlacementClass::SameCpu)
        .ok_or_else(|| missing("halt ping-pong with both vCPUs on one CPU"))?;
    let sweep = r.sweep.as_ref().ok_or_else(|| missing("halt-poll sweep"))?;
    let off = sweep
        .rows
        .iter()
        .find(|s| s.point.halt_poll_limit_ns == Some(0))
        .ok_or_else(|| missing("halt-poll sweep row with polling off (limit 0)"))?;
    let sweep_module = sweep
        .rows
        .iter()
        .find(|s| s.point.halt_poll_limit_ns.is_none())
        .ok_or_else(|| missing("halt-poll sweep row with the module's limit"))?;
    let module_ns = module.ok_or_else(|| {
        bad_input(format!(
            "{name} does not say the kvm module's halt_poll_ns, which its default rows ran with; \
             measure again where /sys/module/kvm/parameters/halt_poll_ns is readable"
        ))
    })?;
    let need = |p: &Point, what: &str| rtt(p).ok_or_else(|| missing(what));
    let unpinned =
        |x: Exchange| exchange(x, &|p| p.placement == PlacementClass::Unpinned).and_then(rtt);
    let noisy = r.conditions.noisy.then(|| {
        r.conditions
            .load_before
            .as_ref()
            .and_then(|l| l.reason.clone())
            .unwrap_or_else(|| "other load before the run".into())
    });
    Ok(HostCalibration {
        source: name.to_string(),
        module: r.kvm.module.clone(),
        guest_code_emulated: r.kvm.guest_code_emulated,
        revision: r.conditions.cpulab_revision.clone(),
        started_unix_s: r.conditions.started_unix_s,
        noisy,
        host_cpus: r.conditions.allowed_cpus.len() as u32,
        module_halt_poll_ns: module_ns,
        pair: spin.cpus.clone(),
        one_cpu: one.cpus.clone(),
        spin_ns: need(spin, "spin ping-pong round trip")?,
        polled_ns: need(polled, "halt ping-pong round trip on two CPUs")?,
        one_cpu_ns: need(one, "halt ping-pong round trip on one CPU")?,
        sweep_polled_ns: need(
            &sweep_module.point,
            "sweep round trip with the module's limit",
        )?,
        off_ns: need(&off.point, "round trip with polling off")?,
        unpinned_halt_ns: unpinned(Exchange::Halt),
        unpinned_spin_ns: unpinned(Exchange::Spin),
        sweep: sweep
            .rows
            .iter()
            .filter_map(|s| {
                Some(SweepPoint {
                    limit_ns: s.point.halt_poll_limit_ns?,
                    rtt_ns: rtt(&s.point)?,
                    polls_won_share: s.polls_won_share,
                })
            })
            .collect(),
        share: r
            .share
            .iter()
            .filter_map(|s| {
                Some(ShareMeasured {
                    vm1_vcpus: s.vm1_vcpus,
                    vm2_vcpus: s.vm2_vcpus,
                    host_cpus: s.host_cpus,
                    vm1: s.vm1_share.as_ref()?.into(),
                    vm2: s.vm2_share.as_ref()?.into(),
                })
            })
            .collect(),
        guest_poll: r
            .points
            .iter()
            .filter(|p| p.exchange == Exchange::Poll && p.cpus == spin.cpus)
            .filter_map(|p| {
                Some(GuestPollPoint {
                    window_ns: p.poll_window_ns?,
                    rtt_ns: rtt(p)?,
                })
            })
            .collect(),
        timer_rows: r.timer.len(),
    })
}

/// The costs the input rows give, each from one difference (never below zero; a negative
/// difference is named in [`HostCalibration::disorder`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvmCosts {
    /// The guest's own work per message, ns.
    pub guest_work_ns: f64,
    /// A halt polled through, from the exchange part's rows.
    pub halt_exit_ns: f64,
    pub host_resched_ns: f64,
    /// The IPI to an idle CPU: what polling off adds in the sweep's part, less the host's
    /// switch the exchange part measured.
    pub ipi_ns: f64,
    /// A halt polled through, from the sweep part's own row with the module's limit: the
    /// sweep's rows are simulated with it.
    pub sweep_halt_exit_ns: f64,
}

impl HostCalibration {
    pub fn kvm_costs(&self) -> KvmCosts {
        let half = |a: f64, b: f64| ((a - b) / 2.0).max(0.0);
        let resched = half(self.one_cpu_ns.mean, self.polled_ns.mean);
        KvmCosts {
            guest_work_ns: self.spin_ns.mean / 2.0,
            halt_exit_ns: half(self.polled_ns.mean, self.spin_ns.mean),
            host_resched_ns: resched,
            ipi_ns: (half(self.off_ns.mean, self.sweep_polled_ns.mean) - resched).max(0.0),
            sweep_halt_exit_ns: half(self.sweep_polled_ns.mean, self.spin_ns.mean),
        }
    }

    /// How far the same setting (halt ping-pong on the pair, the module's limit) moved between
    /// the exchange part and the sweep part of the run: the sweep's row over the exchange's.
    pub fn drift(&self) -> f64 {
        self.sweep_polled_ns.mean / self.polled_ns.mean - 1.0
    }

    /// Input rows out of the model's order (spin <= polled <= one CPU, polled <= off), each a
    /// cost the model then takes as zero: said beside the table, never hidden.
    pub fn disorder(&self) -> Vec<String> {
        let rows = [
            ("spin", self.spin_ns.mean),
            ("halt, polls won", self.polled_ns.mean),
            ("halt on one CPU", self.one_cpu_ns.mean),
        ];
        let mut out: Vec<String> = rows
            .windows(2)
            .filter(|w| w[1].1 < w[0].1)
            .map(|w| {
                format!(
                    "the {} round trip ({:.2} us) is below the {} one ({:.2} us): the cost between them is taken as 0",
                    w[1].0,
                    w[1].1 / 1e3,
                    w[0].0,
                    w[0].1 / 1e3
                )
            })
            .collect();
        let k = self.kvm_costs();
        if (self.off_ns.mean - self.sweep_polled_ns.mean) / 2.0 < k.host_resched_ns {
            out.push(format!(
                "polling off adds {:.2} us per side in the sweep, less than the host's switch \
                 ({:.2} us): the IPI to an idle CPU is taken as 0",
                (self.off_ns.mean - self.sweep_polled_ns.mean) / 2e3,
                k.host_resched_ns / 1e3
            ));
        }
        out
    }

    /// The costs of table H: cpulab's guests run no guest OS (one program per vCPU, no run
    /// queue, no task switch, a few instructions with nothing to refill after a halt), so the
    /// guest-side costs are 0 and the four KVM costs are the measured ones; the host polls up to
    /// the module's limit.
    pub fn table_costs(&self) -> Costs {
        let k = self.kvm_costs();
        Costs {
            halt_exit_ns: k.halt_exit_ns,
            ipi_ns: k.ipi_ns,
            remote_wake_ns: 0.0,
            host_resched_ns: k.host_resched_ns,
            guest_switch_ns: 0.0,
            cold_stretch: 0.0,
            cold_work_ns: 0.0,
            wake_choice_ns: 0.0,
            host_poll_ns: self.module_halt_poll_ns as f64,
            ..Costs::default()
        }
    }

    /// A scenario with this host's KVM costs in place of its own (its configurations' own
    /// overrides, each a "what if", still apply). Only a KVM scenario: the costs of Hyper-V or
    /// Xen are not this host's to set (one line, exit 2).
    pub fn calibrate_scenario(
        &self,
        sc: &super::scenario::Scenario,
    ) -> Result<super::scenario::Scenario> {
        use super::hypervisor::HvKind;
        let other = std::iter::once(sc.hypervisor)
            .chain(sc.configs.iter().filter_map(|c| c.hypervisor))
            .find(|h| *h != HvKind::Kvm);
        if let Some(h) = other {
            return Err(bad_input(format!(
                "--calibrate {}: a host bench result sets a KVM host's costs, and scenario {}                  runs the {} hypervisor; give a kvm scenario, or a pingpong or doctor result",
                self.source,
                sc.name,
                h.as_str()
            )));
        }
        let k = self.kvm_costs();
        let mut out = sc.clone();
        for (key, v) in [
            ("halt_exit_ns", k.halt_exit_ns),
            ("ipi_ns", k.ipi_ns),
            ("host_resched_ns", k.host_resched_ns),
            ("host_poll_ns", self.module_halt_poll_ns as f64),
        ] {
            out.params.insert(key.into(), toml::Value::Float(v));
        }
        Ok(out)
    }

    /// Where the costs came from, in words.
    pub fn describe(&self) -> String {
        let k = self.kvm_costs();
        format!(
            "{}{}: halt exit {:.2} us (halt ping-pong {} polled {:.2} us less spin {:.2} us, per side), \
             host reschedule {:.2} us (one CPU {} {:.2} us less polled, per side), IPI to an idle \
             CPU {:.2} us (the sweep's polling off {:.2} us less its module-limit row {:.2} us, \
             per side, less the host reschedule), halt polling up to the module's {:.0} us",
            self.source,
            match (&self.module, self.guest_code_emulated) {
                (Some(m), true) => format!(
                    " ({m}: guest instructions emulated, so every cost includes the emulator's time)"
                ),
                (Some(m), false) => format!(" ({m})"),
                (None, _) => String::new(),
            },
            k.halt_exit_ns / 1e3,
            self.pair,
            self.polled_ns.mean / 1e3,
            self.spin_ns.mean / 1e3,
            k.host_resched_ns / 1e3,
            self.one_cpu,
            self.one_cpu_ns.mean / 1e3,
            k.ipi_ns / 1e3,
            self.off_ns.mean / 1e3,
            self.sweep_polled_ns.mean / 1e3,
            self.module_halt_poll_ns as f64 / 1e3
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::host::HostShape;
    use crate::sim::hypervisor::HvKind;
    use crate::sim::scenario::{ConfigSpec, Scenario, VmSpec};
    use crate::sim::workload::WorkloadSpec;

    /// The halt ping-pong of cpulab's guests in the model: 4 us of guest work per message,
    /// both vCPU threads on `pcpus` of a 2-CPU host. Returns (round trip us, CPU-seconds the
    /// two host CPUs were held per second).
    fn pingpong(c: &Costs, hv: HvKind, pcpus: &str) -> (f64, f64) {
        let s = Scenario {
            name: "pingpong".into(),
            description: String::new(),
            duration_ms: 200.0,
            hypervisor: hv,
            host: HostShape {
                name: String::new(),
                packages: 1,
                modules_per_package: 2,
                cores_per_module: 1,
                threads_per_core: 1,
            },
            params: toml::Table::try_from(c).unwrap(),
            configs: vec![ConfigSpec {
                name: "p".into(),
                hypervisor: None,
                params: toml::Table::new(),
                vm: vec![VmSpec {
                    name: "g".into(),
                    vcpus: 2,
                    pcpus: Some(pcpus.into()),
                    workload: vec![WorkloadSpec::Pair {
                        client_us: 4.0,
                        server_us: 4.0,
                        client_vcpu: Some(0),
                        server_vcpu: Some(1),
                    }],
                }],
            }],
        };
        let r = crate::sim::run_scenario(&s, &Costs::default(), None, 1).unwrap();
        let cfg = &r.configs[0];
        (
            cfg.workloads[0].mean_latency_us.unwrap(),
            cfg.pcpu_busy.iter().sum(),
        )
    }

    fn kvm_costs(host_poll_ns: f64, ipi_ns: f64) -> Costs {
        Costs {
            halt_exit_ns: 5_000.0,
            ipi_ns,
            remote_wake_ns: 0.0,
            host_resched_ns: 10_000.0,
            guest_switch_ns: 0.0,
            cold_stretch: 0.0,
            wake_choice_ns: 0.0,
            host_poll_ns,
            ..Costs::default()
        }
    }

    /// Polling off, each message pays the whole wakeup: 2 x (4 + 5 + 20 + 10) us. A halt polled
    /// through pays its exit alone, whatever the IPI to an idle CPU would have cost.
    #[test]
    fn a_halt_the_host_polls_through_pays_its_exit_and_no_ipi() {
        let (off, _) = pingpong(&kvm_costs(0.0, 20_000.0), HvKind::Kvm, "0-1");
        assert!((off - 78.0).abs() < 0.5, "{off}");
        let (polled, _) = pingpong(&kvm_costs(1e6, 20_000.0), HvKind::Kvm, "0-1");
        let (polled_slow_ipi, _) = pingpong(&kvm_costs(1e6, 80_000.0), HvKind::Kvm, "0-1");
        assert!((polled - 18.0).abs() < 0.5, "{polled}");
        assert!(
            (polled - polled_slow_ipi).abs() < 0.1,
            "{polled} {polled_slow_ipi}"
        );
    }

    /// KVM's window grows only after halts shorter than the limit: with halts of about 39 us and
    /// a 30 us limit it never polls (the round trip and the CPU held are polling off's), while a
    /// fixed window of 30 us polls every halt in vain and burns CPU for it.
    #[test]
    fn kvm_never_polls_a_vcpu_whose_halts_outlast_the_limit() {
        let (off, off_cpu) = pingpong(&kvm_costs(0.0, 20_000.0), HvKind::Kvm, "0-1");
        let (kvm30, kvm30_cpu) = pingpong(&kvm_costs(30_000.0, 20_000.0), HvKind::Kvm, "0-1");
        assert!((kvm30 - off).abs() < 0.1, "{kvm30} {off}");
        assert!((kvm30_cpu - off_cpu).abs() < 0.01, "{kvm30_cpu} {off_cpu}");
        let (fixed30, fixed30_cpu) =
            pingpong(&kvm_costs(30_000.0, 20_000.0), HvKind::Classic, "0-1");
        assert!(
            (fixed30 - off).abs() < 0.5,
            "a poll that fails saves nothing: {fixed30}"
        );
        assert!(
            fixed30_cpu > off_cpu + 0.5,
            "{fixed30_cpu} against {off_cpu}"
        );
        // A limit above the halts: the window grows from 10 us until it covers them, then every
        // halt is polled through.
        let (kvm60, kvm60_cpu) = pingpong(&kvm_costs(60_000.0, 20_000.0), HvKind::Kvm, "0-1");
        assert!((kvm60 - 18.0).abs() < 0.5, "{kvm60}");
        assert!(
            kvm60_cpu > 1.9,
            "both CPUs held, running or polling: {kvm60_cpu}"
        );
    }

    /// On one CPU KVM cannot poll (another task is runnable there), so the limit changes
    /// nothing, and the woken vCPU waits for the CPU instead of an IPI to an idle one: each
    /// message pays its exit and the host's switch, 2 x (4 + 5 + 10) us.
    #[test]
    fn on_one_cpu_the_waiting_vcpu_ends_the_poll_and_pays_no_ipi() {
        let (none, _) = pingpong(&kvm_costs(0.0, 20_000.0), HvKind::Kvm, "0");
        let (limit, _) = pingpong(&kvm_costs(200_000.0, 20_000.0), HvKind::Kvm, "0");
        assert!((none - 38.0).abs() < 0.5, "{none}");
        assert!((limit - none).abs() < 0.1, "{limit} {none}");
    }

    fn bundled_value() -> serde_json::Value {
        serde_json::from_str(BUNDLED).unwrap()
    }

    #[test]
    fn the_bundled_result_gives_four_input_rows_and_costs_from_their_differences() {
        let h = bundled().unwrap();
        let k = h.kvm_costs();
        assert!(h.disorder().is_empty(), "{:?}", h.disorder());
        // The rows' order holds, so no cost was clamped: each is positive, and together they
        // add back up to the rows they came from (the sweep's part with its own halt exit).
        for c in [
            k.guest_work_ns,
            k.halt_exit_ns,
            k.host_resched_ns,
            k.ipi_ns,
            k.sweep_halt_exit_ns,
        ] {
            assert!(c > 0.0, "{k:?}");
        }
        let near = |a: f64, b: f64| (a - b).abs() < 1e-6 * b;
        assert!(near(
            2.0 * (k.guest_work_ns + k.halt_exit_ns),
            h.polled_ns.mean
        ));
        assert!(near(
            2.0 * (k.guest_work_ns + k.halt_exit_ns + k.host_resched_ns),
            h.one_cpu_ns.mean
        ));
        assert!(near(
            2.0 * (k.guest_work_ns + k.sweep_halt_exit_ns + k.host_resched_ns + k.ipi_ns),
            h.off_ns.mean
        ));
        assert!(h.host_cpus >= 2 && !h.sweep.is_empty() && !h.share.is_empty());
        let t = h.table_costs();
        assert_eq!(
            (t.guest_switch_ns, t.remote_wake_ns, t.cold_stretch),
            (0.0, 0.0, 0.0)
        );
        t.check().unwrap();
    }

    #[test]
    fn a_result_without_an_input_row_is_one_line_naming_it() {
        type Cut = fn(&mut serde_json::Value);
        let cases: [(&str, Cut); 3] = [
            ("halt-poll sweep", |v| v["sweep"] = serde_json::Value::Null),
            ("one CPU", |v| {
                let pts = v["points"].as_array_mut().unwrap();
                pts.retain(|p| p["placement"] != "same-cpu");
            }),
            ("spin ping-pong", |v| {
                let pts = v["points"].as_array_mut().unwrap();
                pts.retain(|p| p["exchange"] != "spin");
            }),
        ];
        for (what, cut) in cases {
            let mut v = bundled_value();
            cut(&mut v);
            let e = from_value(&v, "hb.json").unwrap_err();
            let m = format!("{e:#}");
            assert_eq!(crate::error::exit_code(&e), 2, "{m}");
            assert!(m.starts_with("hb.json has no") && m.contains(what), "{m}");
            assert!(m.contains("cpulab host bench") && !m.contains('\n'), "{m}");
        }
    }

    #[test]
    fn input_rows_out_of_order_are_named_and_their_cost_is_zero() {
        let mut h = bundled().unwrap();
        h.one_cpu_ns.mean = h.polled_ns.mean - 1_000.0;
        assert_eq!(h.kvm_costs().host_resched_ns, 0.0);
        let d = h.disorder();
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].starts_with("the halt on one CPU round trip"), "{d:?}");
    }
}
