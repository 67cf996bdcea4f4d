//! Built-in scenarios: one per field-notes table, plus this project's own machine.
//!
//! Each host gets one parameter set, written out in full in its scenario so the output states it;
//! which published figure (if any) set a parameter is said in [`HostProfile::derived_from`], and
//! that figure is then not an independent check. Service times are inputs: a pair's CPU time per
//! transaction is its published same-vCPU rate less two guest context switches, split a third to
//! the client and two thirds to the server. Everything a placement adds is left to the model.

use super::host::HostShape;
use super::hostcal::HostCalibration;
use super::hypervisor::HvKind;
use super::params::{Calibration, Costs};
use super::published::get;
use super::scenario::{ConfigSpec, Scenario, VmSpec};
use super::workload::WorkloadSpec;

/// A host of the field notes with its one parameter set.
pub struct HostProfile {
    pub shape: HostShape,
    pub hypervisor: HvKind,
    pub costs: Costs,
    /// Which figure set which parameter; the rest are [`Costs::default`].
    pub derived_from: String,
}

fn shape(name: &str, packages: u32, modules: u32, cores: u32) -> HostShape {
    HostShape {
        name: name.into(),
        packages,
        modules_per_package: modules,
        cores_per_module: cores,
        threads_per_core: 1,
    }
}

/// Field notes A and C: Intel i5-6600, Hyper-V root scheduler.
pub fn host_a() -> HostProfile {
    HostProfile {
        shape: shape("Intel i5-6600, Hyper-V", 1, 4, 1),
        hypervisor: HvKind::Root,
        costs: Costs {
            context_flush_ns: 21_000.0,
            turbo_drop: 1.0 - 3.6 / 3.9,
            ..Costs::default()
        },
        derived_from: "context_flush_ns from A's SELECT 1 same/different ratio (3.6x); \
                       turbo_drop from Intel's turbo bins for the i5-6600 (3.9 GHz one core \
                       busy, 3.6 GHz all four); cold stretch from A's perf stat of the backend \
                       (IPC 0.48 same vCPU, 0.40 different), over A's backend burst; wake choice \
                       as timed on this project's KVM guest (the default); the other costs are \
                       the defaults"
            .into(),
    }
}

/// Field notes B: AMD A10-5800K (2 modules of 2 cores), Hyper-V classic and root.
pub fn host_b() -> HostProfile {
    let d = Costs::default();
    let k = 0.33;
    HostProfile {
        shape: shape("AMD A10-5800K, Hyper-V", 1, 2, 2),
        hypervisor: HvKind::Classic,
        costs: Costs {
            halt_exit_ns: d.halt_exit_ns * k,
            ipi_ns: d.ipi_ns * k,
            remote_wake_ns: d.remote_wake_ns * k,
            host_resched_ns: d.host_resched_ns * k,
            context_flush_ns: 90_000.0,
            ..d
        },
        derived_from: "wakeup costs (default x 0.33) from B's classic pgbench ratio, \
                       context_flush_ns from B's root pgbench ratio, both with the default cold \
                       stretch (A's perf stat) in place; module contention not modelled for \
                       this host (0); wake choice as timed on this project's KVM guest (the \
                       default)"
            .into(),
    }
}

/// Field notes E: 2x AMD Opteron 6376 (8 modules of 2 cores each), Xen 4.4 credit.
pub fn host_e() -> HostProfile {
    HostProfile {
        shape: shape("2x AMD Opteron 6376, Xen 4.4", 2, 8, 2),
        hypervisor: HvKind::Credit,
        costs: Costs {
            module_contention: 0.275,
            ..Costs::default()
        },
        derived_from: "module_contention from E's 38% gap (a core runs at 1/1.38 with its \
                       module sibling busy); cold stretch from A's perf stat (the default); wake \
                       choice as timed on this project's KVM guest (the default)"
            .into(),
    }
}

/// This project's machine: KVM on AMD EPYC, wakeup costs from a calibration.
pub fn host_m(cal: &Calibration) -> HostProfile {
    let costs = cal.apply(&Costs::default());
    HostProfile {
        shape: shape("this project's KVM host (AMD EPYC)", 1, 8, 1),
        hypervisor: HvKind::Kvm,
        derived_from: match &cal.cold {
            None => "guest switch and wakeup costs from the calibration's same and cross \
                     round trips (the two pipe rows are its inputs, not checks); cold stretch \
                     from A's perf stat of the backend (IPC 0.48 same vCPU, 0.40 different), \
                     over A's backend burst; wake choice timed on this guest's wakeup path \
                     (docs/sim.md); none of it from this table"
                .into(),
            Some(c) => format!(
                "guest switch and wakeup costs from the calibration's same and cross round \
                 trips (the two pipe rows are its inputs, not checks); cold stretch {:.0}% over \
                 the first {:.1} us after a halt from the calibration's work after each wakeup \
                 ({}); wake choice timed on this guest's wakeup path (docs/sim.md); none \
                 of it from this table",
                costs.cold_stretch * 100.0,
                costs.cold_work_ns / 1e3,
                c.describe()
            ),
        },
        costs,
    }
}

fn table_of(c: &Costs) -> toml::Table {
    // invariant: Costs is a flat struct of floats, always a TOML table.
    toml::Table::try_from(c).unwrap_or_default()
}

/// The client's and server's work per transaction, us, of a pair whose same-vCPU rate would be
/// `tps` with these costs: the transaction less two guest switches, a third to the client.
pub fn pair_work_us(tps: f64, c: &Costs) -> (f64, f64) {
    let work_us = (1e6 / tps - 2.0 * c.guest_switch_ns / 1e3).max(0.2);
    (work_us / 3.0, work_us * 2.0 / 3.0)
}

/// A pgbench-like pair whose same-vCPU rate would be `tps` with these costs.
pub fn pair(tps: f64, c: &Costs, client: Option<u32>, server: Option<u32>) -> WorkloadSpec {
    let (client_us, server_us) = pair_work_us(tps, c);
    WorkloadSpec::Pair {
        client_us,
        server_us,
        client_vcpu: client,
        server_vcpu: server,
    }
}

fn vm(name: &str, vcpus: u32, pcpus: Option<&str>, workload: Vec<WorkloadSpec>) -> VmSpec {
    VmSpec {
        name: name.into(),
        vcpus,
        pcpus: pcpus.map(str::to_string),
        workload,
    }
}

fn config(name: &str, hv: Option<HvKind>, vms: Vec<VmSpec>) -> ConfigSpec {
    ConfigSpec {
        name: name.into(),
        hypervisor: hv,
        params: toml::Table::new(),
        vm: vms,
    }
}

fn scenario(
    name: &str,
    description: &str,
    h: &HostProfile,
    ms: f64,
    configs: Vec<ConfigSpec>,
) -> Scenario {
    Scenario {
        name: name.into(),
        description: format!("{description} Parameters: {}.", h.derived_from),
        duration_ms: ms,
        hypervisor: h.hypervisor,
        host: h.shape.clone(),
        params: table_of(&h.costs),
        configs,
    }
}

fn cpu(threads: u32, unit_us: f64) -> WorkloadSpec {
    WorkloadSpec::Cpu {
        threads,
        unit_us,
        vcpus: None,
    }
}

/// Field notes A: same vs different vCPU, load makes it faster, 1 vCPU vs 2-4.
pub fn a() -> Scenario {
    let h = host_a();
    let c = &h.costs;
    let sel1 = get("a.select1.same").value / 180.0;
    let s = get("a.s.vcpus1").value;
    let mut configs = vec![
        config(
            "SELECT 1, same vCPU",
            None,
            vec![vm("guest", 4, None, vec![pair(sel1, c, Some(0), Some(0))])],
        ),
        config(
            "SELECT 1, different vCPU",
            None,
            vec![vm("guest", 4, None, vec![pair(sel1, c, Some(1), Some(0))])],
        ),
        config(
            "-S, guest idle",
            None,
            vec![vm("guest", 4, None, vec![pair(s, c, None, None)])],
        ),
        config(
            "-S, stress-ng -c 3",
            None,
            vec![vm(
                "guest",
                4,
                None,
                vec![cpu(3, 1000.0), pair(s, c, None, None)],
            )],
        ),
    ];
    for n in 1..=4 {
        configs.push(config(
            &format!("-S, {n} vCPU"),
            None,
            vec![vm("guest", n, None, vec![pair(s, c, None, None)])],
        ));
    }
    scenario(
        "a-hyperv-pgbench",
        "Field notes A: PostgreSQL and pgbench -c 1 in a 4-vCPU Hyper-V guest.",
        &h,
        1000.0,
        configs,
    )
}

/// Field notes B: classic vs root, same vs different vCPU, Apache and PostgreSQL.
pub fn b() -> Scenario {
    let h = host_b();
    let c = &h.costs;
    let mut configs = Vec::new();
    for (app, id) in [("Apache ab -c 1", "httpd"), ("pgbench SELECT 1", "pg")] {
        let rate = get(&format!("b.{id}.classic.same")).value;
        for hv in [HvKind::Classic, HvKind::Root] {
            for (place, client) in [("same vCPU", 0), ("different vCPU", 1)] {
                configs.push(config(
                    &format!("{app}, {}, {place}", hv.as_str()),
                    Some(hv),
                    vec![vm(
                        "guest",
                        4,
                        None,
                        vec![pair(rate, c, Some(client), Some(0))],
                    )],
                ));
            }
        }
    }
    scenario(
        "b-classic-vs-root",
        "Field notes B: Hyper-V classic vs root scheduler, 4-vCPU guest.",
        &h,
        1000.0,
        configs,
    )
}

/// Field notes C: fair share of time slices between two 4-vCPU VMs on 4 cores.
pub fn c() -> Scenario {
    let h = host_a();
    let unit = 1e6 / get("c.1.alone").value;
    let mut configs = Vec::new();
    for threads in [1, 4] {
        let vm1 = || vm("vm1", 4, None, vec![cpu(threads, unit)]);
        configs.push(config(
            &format!("{threads} thread(s), alone"),
            None,
            vec![vm1()],
        ));
        configs.push(config(
            &format!("{threads} thread(s), VM2 idle"),
            None,
            vec![vm1(), vm("vm2", 4, None, vec![])],
        ));
        for busy in [3, 4] {
            configs.push(config(
                &format!("{threads} thread(s), VM2 {busy} busy"),
                None,
                vec![vm1(), vm("vm2", 4, None, vec![cpu(busy, 1000.0)])],
            ));
        }
    }
    scenario(
        "c-fair-share",
        "Field notes C: sysbench cpu in VM1 beside stress-ng in VM2, Hyper-V root.",
        &h,
        3000.0,
        configs,
    )
}

/// This host as a `cpulab host bench` result measured it ([`crate::sim::hostcal`]): a flat host
/// of the CPUs the bench used, KVM, the four KVM costs from the result's input rows and the
/// guest-side costs 0 (cpulab's guests run no guest OS).
pub fn host_h(hc: &HostCalibration) -> HostProfile {
    HostProfile {
        shape: shape(
            &format!(
                "this host ({}, as cpulab host bench measured it)",
                hc.module.as_deref().unwrap_or("KVM")
            ),
            1,
            hc.host_cpus.max(1),
            1,
        ),
        hypervisor: HvKind::Kvm,
        costs: hc.table_costs(),
        derived_from: format!(
            "{}; guest work {:.2} us per message (the spin ping-pong's half round trip); no \
             guest switch, remote wake, cold stretch or wake choice: cpulab's guests are one \
             program per vCPU with no guest OS; none of it from a held-out row",
            hc.describe(),
            hc.kvm_costs().guest_work_ns / 1e3
        ),
    }
}

/// The pair CPUs of table H's configurations, as the simulated host numbers them.
pub const H_PAIR: &str = "0,1";
pub const H_ONE: &str = "0";

/// Table H's configurations, each the simulated twin of a host bench row.
pub fn h(hc: &HostCalibration) -> Scenario {
    let h = host_h(hc);
    let w_us = (hc.kvm_costs().guest_work_ns / 1e3).max(crate::sim::workload::MIN_WORK_US);
    let all = format!("0-{}", hc.host_cpus.max(1) - 1);
    let pair = || WorkloadSpec::Pair {
        client_us: w_us,
        server_us: w_us,
        client_vcpu: Some(0),
        server_vcpu: Some(1),
    };
    let guest = |pcpus: &str| vm("guest", 2, Some(pcpus), vec![pair()]);
    let with = |name: &str, params: &[(&str, f64)], vms: Vec<VmSpec>| {
        let mut c = config(name, None, vms);
        for (k, v) in params {
            c.params.insert((*k).into(), toml::Value::Float(*v));
        }
        c
    };
    // A spin never halts: the waiting side polls in the guest for longer than any window.
    let spin = [("guest_poll_ns", crate::sim::params::MAX_COST_NS)];
    let mut configs = vec![
        with("spin, pinned pair", &spin, vec![guest(H_PAIR)]),
        with("halt, pinned pair, module limit", &[], vec![guest(H_PAIR)]),
        with("halt, one CPU", &[], vec![guest(H_ONE)]),
        with("halt, unpinned", &[], vec![guest(&all)]),
        with("spin, unpinned", &spin, vec![guest(&all)]),
    ];
    // The sweep's rows with the halt exit its own part measured (the host moves between parts).
    let sweep_exit = hc.kvm_costs().sweep_halt_exit_ns;
    configs.push(with(
        "halt, pinned pair, sweep, module limit",
        &[("halt_exit_ns", sweep_exit)],
        vec![guest(H_PAIR)],
    ));
    for s in &hc.sweep {
        configs.push(with(
            &format!("halt, pinned pair, limit {} ns", s.limit_ns),
            &[
                ("host_poll_ns", s.limit_ns as f64),
                ("halt_exit_ns", sweep_exit),
            ],
            vec![guest(H_PAIR)],
        ));
    }
    for g in &hc.guest_poll {
        configs.push(with(
            &format!("guest poll, window {} ns", g.window_ns),
            &[("guest_poll_ns", g.window_ns as f64)],
            vec![guest(H_PAIR)],
        ));
    }
    let burners = |name: &str, n: u32| {
        vm(
            name,
            n,
            Some(&all),
            vec![WorkloadSpec::Cpu {
                threads: n,
                unit_us: 100.0,
                vcpus: Some((0..n).collect()),
            }],
        )
    };
    for s in &hc.share {
        let (k, m) = (s.vm1_vcpus, s.vm2_vcpus);
        configs.push(config(
            &format!("share {k}+{m}, vm1 alone"),
            None,
            vec![burners("vm1", k)],
        ));
        configs.push(config(
            &format!("share {k}+{m}, vm2 alone"),
            None,
            vec![burners("vm2", m)],
        ));
        configs.push(config(
            &format!("share {k}+{m}, together"),
            None,
            vec![burners("vm1", k), burners("vm2", m)],
        ));
    }
    scenario(
        "h-this-host",
        "This host's KVM as cpulab host bench measured it: the halt, spin and polling \
         ping-pongs of its guests by placement and halt-poll limit, and two VMs of burners \
         sharing its CPUs.",
        &h,
        2000.0,
        configs,
    )
}

/// The E placements: name, physical CPUs of the 16-vCPU VM.
pub const E_PLACEMENTS: [(&str, &str); 3] = [
    ("8-8", "0-7,16-23"),
    ("0-16", "16-31"),
    ("one core per module", "0-31:2"),
];

/// Thread counts of the E curves.
pub const E_THREADS: [u32; 8] = [1, 2, 4, 6, 8, 10, 12, 16];

/// Field notes E: parallel Fibonacci in a 16-vCPU Xen VM by placement and thread count.
pub fn e() -> Scenario {
    let h = host_e();
    let mut configs = Vec::new();
    for (place, pcpus) in E_PLACEMENTS {
        for t in E_THREADS {
            let fj = WorkloadSpec::ForkJoin {
                threads: t,
                work_ms: 2000.0,
                chunk_us: 500.0,
            };
            configs.push(config(
                &format!("{place}, {t} threads"),
                None,
                vec![vm("vm", 16, Some(pcpus), vec![fj])],
            ));
        }
    }
    scenario(
        "e-opteron-placement",
        "Field notes E: work-stealing Fibonacci, 16 vCPUs on 2x Opteron 6376, Xen credit.",
        &h,
        4000.0,
        configs,
    )
}

/// This project's machine: a 2-vCPU KVM guest, pipe round trips and pgbench SELECT 1.
pub fn m(cal: &Calibration) -> Scenario {
    let h = host_m(cal);
    let c = &h.costs;
    let pg = get("m.pg.same").value;
    let pipe = WorkloadSpec::Pair {
        client_us: super::params::PIPE_WORK_NS / 1e3,
        server_us: super::params::PIPE_WORK_NS / 1e3,
        client_vcpu: Some(0),
        server_vcpu: Some(1),
    };
    let pipe_same = WorkloadSpec::Pair {
        client_us: super::params::PIPE_WORK_NS / 1e3,
        server_us: super::params::PIPE_WORK_NS / 1e3,
        client_vcpu: Some(0),
        server_vcpu: Some(0),
    };
    let g = |w: Vec<WorkloadSpec>| vec![vm("guest", 2, None, w)];
    let mut poll = config(
        "pgbench, different vCPU, guest halt polling 100 us",
        None,
        g(vec![pair(pg, c, Some(1), Some(0))]),
    );
    poll.params
        .insert("guest_poll_ns".into(), toml::Value::Float(100_000.0));
    let configs = vec![
        config("pipe, same vCPU", None, g(vec![pipe_same])),
        config("pipe, cross vCPU", None, g(vec![pipe])),
        config(
            "pgbench, same vCPU",
            None,
            g(vec![pair(pg, c, Some(0), Some(0))]),
        ),
        config(
            "pgbench, different vCPU",
            None,
            g(vec![pair(pg, c, Some(1), Some(0))]),
        ),
        config(
            "pgbench, server unpinned",
            None,
            g(vec![pair(pg, c, Some(0), None)]),
        ),
        config(
            "pgbench, busy loop on the other vCPU",
            None,
            g(vec![
                WorkloadSpec::Cpu {
                    threads: 1,
                    unit_us: 1000.0,
                    vcpus: Some(vec![1]),
                },
                pair(pg, c, Some(0), None),
            ]),
        ),
        poll,
    ];
    scenario(
        "this-machine",
        "This project's 2-vCPU KVM guest (field notes, reproduced here).",
        &h,
        500.0,
        configs,
    )
}

/// Every built-in scenario by name, with the calibration for this machine's.
pub fn all(cal: &Calibration) -> Vec<Scenario> {
    vec![a(), b(), c(), e(), m(cal)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_resolves_and_prints_as_toml_that_reads_back() {
        for s in all(&Calibration::field_notes()) {
            s.resolve(&Costs::default()).unwrap();
            let text = toml::to_string(&s).unwrap();
            let back = super::super::scenario::parse(&text, &s.name).unwrap();
            assert_eq!(back.configs.len(), s.configs.len(), "{}", s.name);
        }
    }
}
