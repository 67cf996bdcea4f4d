//! `cpulab sim`: the hypervisor layer the guest cannot see, as a model checked against the
//! field notes.
//!
//! Three of the five field investigations ran on systems nobody here can run, and in every VM the
//! layer that decides the outcome, the hypervisor's vCPU scheduling, is invisible from inside. This
//! module is a small discrete-event simulation of one host ([`engine`], [`world`]): physical CPUs
//! with their modules and SMT siblings ([`host`]), a hypervisor scheduler behind one trait
//! ([`hypervisor`]), VMs whose guest scheduler chooses where a woken task runs ([`guest`]), the
//! workloads of the field notes ([`workload`]), and a few named costs ([`params`]). Scenario files
//! describe what to compare ([`scenario`], built-ins in [`builtin`]); [`validate`] checks the
//! model against the published tables ([`published`]) and [`render`] prints both, every simulated
//! figure labelled SIMULATED and every published one with its field-notes section.

pub mod builtin;
pub mod engine;
pub mod guest;
pub mod host;
pub mod hostcal;
pub mod hypervisor;
pub mod params;
pub mod published;
pub mod render;
pub mod scenario;
pub mod validate;
pub mod workload;
pub mod world;

use params::{Calibration, Costs};
use scenario::{Resolved, Scenario};
use serde::{Deserialize, Serialize};
use workload::{Role, Tally, WorkloadSpec};
use world::World;

/// The label every simulated figure carries.
pub const SIMULATED: &str = "SIMULATED";

/// The result of `cpulab sim SCENARIO`: with its envelope, the JSON schema.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SimReport {
    /// Always `"SIMULATED"`: nothing here was measured.
    pub label: String,
    pub scenario: String,
    pub description: String,
    pub seed: u64,
    /// Simulated time per configuration, ms.
    pub duration_ms: f64,
    pub host: String,
    /// Where the wakeup costs came from when `--calibrate` was given.
    pub calibration: Option<Calibration>,
    /// Where the KVM layer's costs came from when `--calibrate` was a host bench result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_calibration: Option<String>,
    pub configs: Vec<ConfigResult>,
}

/// One configuration's simulated outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfigResult {
    pub name: String,
    pub hypervisor: String,
    /// The one parameter set it ran with.
    pub params: Costs,
    pub workloads: Vec<WorkloadResult>,
    /// Share of one physical CPU each VM's vCPUs held, summed over its vCPUs (0..vcpus).
    pub vm_cpu: Vec<VmCpu>,
    /// Share of the run each physical CPU held some vCPU (0..1).
    pub pcpu_busy: Vec<f64>,
    /// Events handled.
    pub events: u64,
}

/// CPU a VM held.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VmCpu {
    pub vm: String,
    /// Physical CPUs' worth of time its vCPUs were on a CPU (entering, running or polling).
    pub cpus: f64,
}

/// One workload's simulated outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkloadResult {
    pub vm: String,
    pub kind: String,
    /// Units, transactions or chunks per second of simulated time.
    pub per_s: f64,
    /// What `per_s` counts.
    pub unit: String,
    /// Mean round trip of a transaction, microseconds (pairs only).
    pub mean_latency_us: Option<f64>,
    /// Time the job took, ms (fork-join only; `None` when it did not finish).
    pub makespan_ms: Option<f64>,
    /// Work done / elapsed time: CPUs' worth of full-speed work (fork-join only).
    pub speedup: Option<f64>,
}

/// Builds the world of one configuration with its tasks started.
pub fn build(r: &Resolved, seed: u64) -> (World, Vec<(String, WorkloadSpec)>) {
    let mut w = World::new(
        r.host.clone(),
        r.costs.clone(),
        r.hypervisor.scheduler(),
        seed,
    );
    let mut specs = Vec::new();
    let mut starts = Vec::new();
    for (vm_index, (vm, mask)) in r.vms.iter().enumerate() {
        let first = w.add_vm(vm.vcpus, *mask);
        let vmi = vm_index as u32;
        for spec in &vm.workload {
            let wl = specs.len() as u32;
            specs.push((vm.name.clone(), spec.clone()));
            w.tally.push(Tally::default());
            let pin = |i: u32| first + i;
            match spec {
                WorkloadSpec::Cpu {
                    threads,
                    unit_us,
                    vcpus,
                } => {
                    for i in 0..*threads {
                        let p = vcpus.as_ref().map(|l| pin(l[i as usize % l.len()]));
                        starts.push(w.add_task(vmi, Role::Cpu, wl, p, unit_us * 1e3));
                    }
                }
                WorkloadSpec::Pair {
                    client_us,
                    server_us,
                    client_vcpu,
                    server_vcpu,
                } => {
                    let c = w.t.len() as u32;
                    let cp = client_vcpu.map(pin);
                    let sp = server_vcpu.map(pin);
                    w.add_task(vmi, Role::Client { peer: c + 1 }, wl, cp, client_us * 1e3);
                    w.add_task(vmi, Role::Server { peer: c }, wl, sp, server_us * 1e3);
                    starts.push(c);
                }
                WorkloadSpec::ForkJoin {
                    threads,
                    work_ms,
                    chunk_us,
                } => {
                    let chunks = (work_ms * 1e3 / chunk_us).round().max(1.0) as u64;
                    let running = u64::from(*threads).min(chunks);
                    w.tally[wl as usize].pool = chunks - running;
                    for _ in 0..running {
                        starts.push(w.add_task(vmi, Role::Worker, wl, None, chunk_us * 1e3));
                    }
                }
            }
        }
    }
    for t in starts {
        w.start(t);
    }
    (w, specs)
}

/// Simulates one configuration for `duration_ms`.
pub fn simulate(r: &Resolved, duration_ms: f64, seed: u64, check: bool) -> ConfigResult {
    let (mut w, specs) = build(r, seed);
    let until = (duration_ms * 1e6) as u64;
    w.run(until, check);
    summarise(r, &w, &specs, until)
}

fn summarise(
    r: &Resolved,
    w: &World,
    specs: &[(String, WorkloadSpec)],
    until: u64,
) -> ConfigResult {
    let secs = until as f64 / 1e9;
    let workloads = specs
        .iter()
        .zip(&w.tally)
        .map(|((vm, spec), t)| {
            let per_s = t.units as f64 / secs;
            let (unit, lat, make, speedup) = match spec {
                WorkloadSpec::Cpu { .. } => ("units", None, None, None),
                WorkloadSpec::Pair { .. } => (
                    "transactions",
                    (t.units > 0).then(|| 1e6 * secs / t.units as f64),
                    None,
                    None,
                ),
                WorkloadSpec::ForkJoin { .. } => {
                    let make = t.finished_at.map(|f| f as f64 / 1e6);
                    let elapsed = t.finished_at.unwrap_or(until) as f64;
                    ("chunks", None, make, Some(t.work_ns / elapsed.max(1.0)))
                }
            };
            let per_s = match spec {
                WorkloadSpec::ForkJoin { .. } => {
                    t.units as f64 / (t.finished_at.unwrap_or(until) as f64 / 1e9).max(1e-9)
                }
                _ => per_s,
            };
            WorkloadResult {
                vm: vm.clone(),
                kind: spec.name().to_string(),
                per_s,
                unit: unit.to_string(),
                mean_latency_us: lat,
                makespan_ms: make,
                speedup,
            }
        })
        .collect();
    let vm_cpu = r
        .vms
        .iter()
        .enumerate()
        .map(|(i, (vm, _))| {
            let (first, n) = w.vms[i];
            let on: u64 = (first..first + n).map(|v| w.v[v as usize].on_ns).sum();
            VmCpu {
                vm: vm.name.clone(),
                cpus: on as f64 / until as f64,
            }
        })
        .collect();
    ConfigResult {
        name: r.name.clone(),
        hypervisor: r.hypervisor.as_str().to_string(),
        params: r.costs.clone(),
        workloads,
        vm_cpu,
        pcpu_busy: w
            .p
            .iter()
            .map(|p| p.occupied_ns as f64 / until as f64)
            .collect(),
        events: w.q.popped,
    }
}

/// Simulates every configuration of a scenario.
pub fn run_scenario(
    s: &Scenario,
    base: &Costs,
    calibration: Option<Calibration>,
    seed: u64,
) -> anyhow::Result<SimReport> {
    let resolved = s.resolve(base)?;
    let configs = resolved
        .iter()
        .map(|r| simulate(r, s.duration_ms, seed, false))
        .collect();
    Ok(SimReport {
        label: SIMULATED.to_string(),
        scenario: s.name.clone(),
        description: s.description.clone(),
        seed,
        duration_ms: s.duration_ms,
        host: resolved
            .first()
            .map(|r| r.host.describe())
            .unwrap_or_default(),
        calibration,
        host_calibration: None,
        configs,
    })
}

#[cfg(test)]
mod props;
