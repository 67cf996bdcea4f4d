//! Property tests of the engine: random hosts, hypervisors, VMs and workloads, checked for the
//! physics every run must obey whatever the parameters.

use super::hypervisor::HvKind;
use super::params::Costs;
use super::scenario::{ConfigSpec, Scenario, VmSpec};
use super::workload::WorkloadSpec;
use super::{build, host::HostShape, simulate};
use proptest::prelude::*;

fn workload() -> impl Strategy<Value = WorkloadSpec> {
    prop_oneof![
        (1u32..4, 50.0f64..2000.0).prop_map(|(threads, unit_us)| WorkloadSpec::Cpu {
            threads,
            unit_us,
            vcpus: None
        }),
        (1.0f64..50.0, 1.0f64..80.0, any::<bool>(), any::<bool>()).prop_map(|(c, s, pc, ps)| {
            WorkloadSpec::Pair {
                client_us: c,
                server_us: s,
                client_vcpu: pc.then_some(0),
                server_vcpu: ps.then_some(0),
            }
        }),
        (1u32..5, 1.0f64..10.0).prop_map(|(threads, work_ms)| WorkloadSpec::ForkJoin {
            threads,
            work_ms,
            chunk_us: 200.0
        }),
    ]
}

fn vm(i: usize) -> impl Strategy<Value = VmSpec> {
    (1u32..4, prop::collection::vec(workload(), 0..3)).prop_map(move |(vcpus, workload)| VmSpec {
        name: format!("vm{i}"),
        vcpus,
        pcpus: None,
        workload,
    })
}

fn costs() -> impl Strategy<Value = Costs> {
    (
        0.0f64..20_000.0,
        0.0f64..50_000.0,
        0.0f64..0.5,
        0.0f64..0.2,
        prop_oneof![Just(0.0), 1_000.0f64..50_000.0],
        prop_oneof![Just(0.0), 1_000.0f64..50_000.0],
        (0.0f64..1.0, 0.0f64..100_000.0),
    )
        .prop_map(
            |(halt, flush, module, turbo, gpoll, hpoll, (cold, cold_work))| Costs {
                halt_exit_ns: halt,
                cold_stretch: cold,
                cold_work_ns: cold_work,
                context_flush_ns: flush,
                module_contention: module,
                turbo_drop: turbo,
                guest_poll_ns: gpoll,
                host_poll_ns: hpoll,
                slice_ns: 1_000_000.0,
                ..Costs::default()
            },
        )
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        1u32..3,
        1u32..4,
        1u32..3,
        prop_oneof![
            Just(HvKind::Root),
            Just(HvKind::Classic),
            Just(HvKind::Credit),
            Just(HvKind::Kvm)
        ],
        costs(),
        (vm(0), vm(1), vm(2)),
        1usize..4,
    )
        .prop_map(|(packages, modules, cores, hv, c, vms, n)| {
            let vms = [vms.0, vms.1, vms.2];
            Scenario {
                name: "random".into(),
                description: String::new(),
                duration_ms: 20.0,
                hypervisor: hv,
                host: HostShape {
                    name: String::new(),
                    packages,
                    modules_per_package: modules,
                    cores_per_module: cores,
                    threads_per_core: 1,
                },
                params: toml::Table::try_from(&c).unwrap(),
                configs: vec![ConfigSpec {
                    name: "c".into(),
                    hypervisor: None,
                    params: toml::Table::new(),
                    vm: vms[..n].to_vec(),
                }],
            }
        })
}

/// Requests per second of a pgbench -c 1-like pair in a 2-vCPU guest on a 4-core host, client on
/// the server's vCPU or (with `split`) the other one.
fn pair_rate(c: &Costs, hv: HvKind, split: bool) -> f64 {
    pair_rate_of(c, hv, split, (5.0, 10.0), 20.0)
}

/// The same with the client's and server's work per transaction (us) and the simulated time (ms).
fn pair_rate_of(c: &Costs, hv: HvKind, split: bool, work_us: (f64, f64), ms: f64) -> f64 {
    pair_rate_pinned(c, hv, (Some(u32::from(split)), Some(0)), work_us, ms)
}

/// A pair in a 2-vCPU guest with the client's and server's pins (`None`: free on both vCPUs).
fn pair_rate_pinned(
    c: &Costs,
    hv: HvKind,
    (client, server): (Option<u32>, Option<u32>),
    work_us: (f64, f64),
    ms: f64,
) -> f64 {
    let s = Scenario {
        name: "mono".into(),
        description: String::new(),
        duration_ms: 20.0,
        hypervisor: hv,
        host: HostShape {
            name: String::new(),
            packages: 1,
            modules_per_package: 4,
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
                pcpus: None,
                workload: vec![WorkloadSpec::Pair {
                    client_us: work_us.0,
                    server_us: work_us.1,
                    client_vcpu: client,
                    server_vcpu: server,
                }],
            }],
        }],
    };
    simulate(&s.resolve(&Costs::default()).unwrap()[0], ms, 1, false).workloads[0].per_s
}

/// The choice of a free wakee's vCPU is paid only by a wakeup of a task that has a choice: with
/// both ends pinned it changes nothing, to the last bit; with the server free, each transaction
/// pays it once (the client wakes the server; the pinned client's own wakeup skips it), on the
/// critical path.
#[test]
fn the_wake_choice_is_paid_once_per_wakeup_of_a_free_task_and_never_by_a_pinned_one() {
    let base = Costs {
        wake_choice_ns: 0.0,
        ..Costs::default()
    };
    let with = Costs {
        wake_choice_ns: 2_000.0,
        ..Costs::default()
    };
    let rate = |c: &Costs, pins| pair_rate_pinned(c, HvKind::Kvm, pins, (5.0, 10.0), 200.0);
    for pins in [(Some(0), Some(0)), (Some(1), Some(0))] {
        assert_eq!(rate(&base, pins), rate(&with, pins), "{pins:?}");
    }
    // Server free, client on vCPU 1: the server goes to the idle vCPU 0 every time, as the
    // pinned different-vCPU pair does, plus one choice per transaction.
    let free = (Some(1), None);
    assert_eq!(rate(&base, free), rate(&base, (Some(1), Some(0))));
    let extra_us = 1e6 / rate(&with, free) - 1e6 / rate(&base, free);
    assert!(
        (extra_us / 2.0 - 1.0).abs() < 0.05,
        "one 2 us choice per transaction, got {extra_us:.3} us"
    );
}

/// What the cold stretch adds to one transaction, us: the time per transaction with `c` less
/// the time with the stretch off, client and server each doing `work_us` per transaction.
fn cold_extra_us(c: &Costs, split: bool, work_us: f64) -> f64 {
    let off = Costs {
        cold_stretch: 0.0,
        ..c.clone()
    };
    let per_txn = |c: &Costs| 1e6 / pair_rate_of(c, HvKind::Kvm, split, (work_us, work_us), 200.0);
    per_txn(c) - per_txn(&off)
}

/// Across vCPUs that halt between transactions, each side resumes cold: its switch and burst
/// pay the stretch, so the cost per transaction grows with the work after waking (two wakees,
/// each `stretch * (switch + burst)`) until the burst passes `cold_work_ns`, then stays put.
#[test]
fn across_halted_vcpus_the_cold_cost_grows_with_the_work_after_waking_then_stops() {
    let c = Costs {
        cold_stretch: 0.2,
        cold_work_ns: 12_000.0,
        ..Costs::default()
    };
    let works = [1.0, 4.0, 8.0, 20.0, 40.0];
    let extra: Vec<f64> = works.iter().map(|&w| cold_extra_us(&c, true, w)).collect();
    for (w, x) in works.iter().zip(&extra) {
        let expect = 2.0 * c.cold_cost_ns((c.guest_switch_ns + w * 1e3).min(c.cold_work_ns)) / 1e3;
        // Within the 200 ms run's rounding to whole transactions.
        assert!(
            (x / expect - 1.0).abs() < 0.05,
            "{w} us: {x} us, expected {expect} us"
        );
    }
    // Grows while the work after waking is within cold_work_ns (2 + 1, 2 + 4, 2 + 8 us) ...
    assert!(extra[0] < extra[1] && extra[1] < extra[2], "{extra:?}");
    // ... and stops growing beyond it (2 + 20 and 2 + 40 us are both past 12 us).
    assert!((extra[4] / extra[3] - 1.0).abs() < 0.05, "{extra:?}");
}

/// A wakeup that stays on its vCPU never halts it, nor does one to a vCPU that polls (in the
/// guest or in the host): nothing starts cold, so the stretch costs nothing but the first
/// transaction (every vCPU starts halted). Where the vCPUs halt, it is a cost.
#[test]
fn the_cold_cost_vanishes_on_one_vcpu_and_when_the_target_polls() {
    let ms = 50.0;
    // Transactions lost to a stretch of 0.5 over 50 us of work after each wakeup.
    let lost = |base: &Costs, split: bool| {
        let on = Costs {
            cold_stretch: 0.5,
            cold_work_ns: 50_000.0,
            ..base.clone()
        };
        let off = Costs {
            cold_stretch: 0.0,
            ..on.clone()
        };
        let rate = |c: &Costs| pair_rate_of(c, HvKind::Kvm, split, (5.0, 10.0), ms);
        (rate(&off) - rate(&on)) * ms / 1e3
    };
    let d = Costs::default();
    let guest_poll = Costs {
        guest_poll_ns: 200_000.0,
        ..d.clone()
    };
    let host_poll = Costs {
        host_poll_ns: 200_000.0,
        ..d.clone()
    };
    for (what, base, split) in [
        ("one vCPU", &d, false),
        ("guest polling", &guest_poll, true),
        ("host polling", &host_poll, true),
    ] {
        let n = lost(base, split);
        assert!(
            (0.0..=1.0 + 1e-9).contains(&n),
            "{what}: {n} transactions lost"
        );
    }
    // Halting across vCPUs, each transaction pays about 0.5 * (2 + 5 + 2 + 10) us on ~60 us.
    let n = lost(&d, true);
    assert!(n > 50.0, "halting across vCPUs: {n} transactions lost");
}

/// A counterexample `more_cost_is_never_faster` once found: with guest halt polling, an IPI
/// slower than the poll window made a pair across vCPUs 2.8x faster (46,950 against 16,950
/// requests/s). The sender used to pay the IPI's delivery as its own guest work, slowed by
/// `turbo_drop` like any guest work, so its vCPU stayed awake a little longer than the reply was
/// delayed (cost / rate against cost): past some IPI cost the reply landed inside its poll window
/// and both vCPUs settled into polling. The sender now pays only its part before the wakeup
/// leaves, and the delivery latency is the target's alone.
#[test]
fn slower_ipi_beyond_the_poll_window_must_not_speed_up_a_pair() {
    let base = Costs {
        halt_exit_ns: 9905.278034795534,
        ipi_ns: 4000.0,
        remote_wake_ns: 1000.0,
        host_resched_ns: 5000.0,
        context_flush_ns: 0.0,
        guest_switch_ns: 2000.0,
        module_contention: 0.0,
        turbo_drop: 0.03056118114907415,
        guest_poll_ns: 21911.401317402393,
        host_poll_ns: 0.0,
        slice_ns: 1_000_000.0,
        wake_preempt_ns: 1_000_000.0,
        cold_stretch: 0.0,
        cold_work_ns: 0.0,
        wake_choice_ns: 0.0,
    };
    let more = Costs {
        ipi_ns: base.ipi_ns + 18409.430990360717,
        ..base.clone()
    };
    let (slow, fast) = (
        pair_rate(&more, HvKind::Classic, true),
        pair_rate(&base, HvKind::Classic, true),
    );
    assert!(slow <= fast, "{slow} > {fast}");
}

proptest! {
    // A fixed seed: the same cases every run, so CI is reproducible; see the test above for the
    // counterexample a random seed once found.
    #![proptest_config(ProptestConfig {
        cases: 64,
        rng_seed: proptest::test_runner::RngSeed::Fixed(20261122),
        ..ProptestConfig::default()
    })]

    /// No physical CPU runs two vCPUs, no vCPU runs on two CPUs (checked after every event), and
    /// the work the CPUs executed is exactly the work the tasks and the guest overheads received.
    #[test]
    fn one_thing_per_cpu_and_work_is_conserved(s in scenario(), seed in any::<u64>()) {
        let r = &s.resolve(&Costs::default()).unwrap()[0];
        let (mut w, _) = build(r, seed);
        w.run(20_000_000, true);
        let executed: f64 = w.p.iter().map(|p| p.exec_work).sum();
        let received: f64 = w.tally.iter().map(|t| t.work_ns).sum::<f64>() + w.overhead_done;
        prop_assert!((executed - received).abs() <= 1e-6 * executed.max(1.0), "{executed} vs {received}");
        // Each CPU-bound or fork-join workload received exactly its completed units plus the
        // partial bursts of its tasks.
        for (i, tally) in w.tally.iter().enumerate() {
            let tasks: Vec<_> = w.t.iter().filter(|t| t.workload as usize == i).collect();
            if tasks.iter().all(|t| matches!(t.role, super::workload::Role::Cpu | super::workload::Role::Worker)) {
                let burst = tasks[0].burst;
                let partial: f64 = tasks.iter().map(|t| if t.blocked { 0.0 } else { burst - t.remaining }).sum();
                let expect = tally.units as f64 * burst + partial;
                prop_assert!((tally.work_ns - expect).abs() <= 1e-6 * expect.max(1.0), "{} vs {expect}", tally.work_ns);
            }
        }
        // No CPU executes more than full speed for the whole run.
        for p in &w.p {
            prop_assert!(p.exec_work <= 20_000_000.0 + 1.0);
            prop_assert!(p.occupied_ns <= 20_000_000);
        }
    }

    /// Shares never exceed capacity, and a VM with nothing to run takes nothing (field notes C).
    #[test]
    fn shares_fit_capacity_and_idle_vms_take_nothing(s in scenario(), seed in any::<u64>()) {
        let r = &s.resolve(&Costs::default()).unwrap()[0];
        let out = simulate(r, s.duration_ms, seed, false);
        let total: f64 = out.vm_cpu.iter().map(|v| v.cpus).sum();
        prop_assert!(total <= r.host.len() as f64 + 1e-9, "{total}");
        for ((spec, _), used) in r.vms.iter().zip(&out.vm_cpu) {
            prop_assert!(used.cpus <= f64::from(spec.vcpus) + 1e-9);
            if spec.workload.is_empty() {
                prop_assert_eq!(used.cpus, 0.0);
            }
        }
    }

    /// The same seed gives the same figures, to the last bit.
    #[test]
    fn a_seed_determines_the_run(s in scenario(), seed in any::<u64>()) {
        let r = &s.resolve(&Costs::default()).unwrap()[0];
        prop_assert_eq!(simulate(r, 20.0, seed, false), simulate(r, 20.0, seed, false));
    }

    /// Raising any wakeup cost never makes a request/response pair faster.
    #[test]
    fn more_cost_is_never_faster(
        base in costs(),
        extra in 1.0f64..50_000.0,
        which in 0usize..7,
        hv in prop_oneof![Just(HvKind::Classic), Just(HvKind::Kvm), Just(HvKind::Credit)],
        split in any::<bool>(),
    ) {
        let run = |c: &Costs| pair_rate(c, hv, split);
        let mut more = base.clone();
        match which {
            0 => more.halt_exit_ns += extra,
            1 => more.ipi_ns += extra,
            2 => more.host_resched_ns += extra,
            3 => more.guest_switch_ns += extra,
            4 => more.cold_stretch += extra / 50_000.0,
            5 => more.wake_choice_ns += extra,
            _ => more.remote_wake_ns += extra,
        }
        prop_assert!(run(&more) <= run(&base), "{} > {}", run(&more), run(&base));
    }
}
