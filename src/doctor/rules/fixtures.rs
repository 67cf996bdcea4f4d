//! Hand-built inputs for the rules' tests. These are test inputs shaped like the field notes'
//! machines, never shown as measurements.

use crate::cpulist::CpuSet;
use crate::doctor::measurements::*;
use crate::stats::MeanCi;
use crate::topology::PlacementClass;
use std::collections::BTreeMap;

/// `n` deterministic samples around `mean`, spread by ±`rel` of it.
pub fn samples(mean: f64, rel: f64, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| mean * (1.0 + rel * ((i % 5) as f64 - 2.0) / 2.0))
        .collect()
}

pub fn mci(v: &[f64]) -> MeanCi {
    MeanCi::of(v).unwrap()
}

pub fn wake(
    method: &str,
    blocking: bool,
    class: PlacementClass,
    cpus: &str,
    mean: f64,
    halts: f64,
) -> WakeupRun {
    let s = samples(mean, 0.02, 20);
    let mut per = BTreeMap::new();
    per.insert("idle_entries".to_string(), halts);
    per.insert("irq_RES".to_string(), halts / 2.0);
    per.insert("irq_CAL".to_string(), halts / 2.0);
    WakeupRun {
        method: method.into(),
        blocking,
        class,
        cpus: (class != PlacementClass::Unpinned).then(|| cpus.to_string()),
        rtt_ns: mci(&s),
        p50_ns: mean,
        p99_ns: mean * 1.5,
        batch_means_ns: s,
        per_round_trip: per,
        steal_pct: 0.0,
        noisy: false,
        same_cpu_share: None,
        migrations_per_s: None,
        neighbour_load: None,
    }
}

pub fn throughput(placement: &str, cpus: &str, rate: f64) -> ThroughputRun {
    let s = samples(rate, 0.02, 5);
    ThroughputRun {
        test: "messaging".into(),
        placement: placement.into(),
        cpus: CpuSet::parse_list(cpus, false).unwrap(),
        messages_per_s: mci(&s),
        samples_per_s: s,
        per_message: BTreeMap::new(),
    }
}

pub fn cost(name: &str, ns: f64) -> PrimitiveCost {
    let s = samples(ns, 0.02, 10);
    PrimitiveCost {
        name: name.into(),
        cost_ns: mci(&s),
        min_ns: Some(ns * 0.97),
        samples_ns: s,
    }
}

pub fn ramp(cold: f64, warm: f64) -> FrequencyRamp {
    let (c, w) = (samples(cold, 0.02, 5), samples(warm, 0.02, 5));
    FrequencyRamp {
        cold_mhz: mci(&c),
        warm_mhz: mci(&w),
        cold_samples_mhz: c,
        warm_samples_mhz: w,
        ramp_up_ms: None,
        clock_mhz: true,
        clock: Some(clock_at(warm)),
    }
}

/// A clock check that accepted `mhz`: both chains agree and nothing bounds it.
pub fn clock_at(mhz: f64) -> crate::oscost::clock::ClockCheck {
    use crate::oscost::clock::{ChainRates, ClockRefs, IMUL_LATENCY_CYCLES, judge};
    judge(
        ChainRates {
            add_per_ns: mhz / 1000.0,
            imul_per_ns: mhz / 1000.0 / IMUL_LATENCY_CYCLES,
            tsc_per_ns: None,
        },
        ClockRefs::default(),
        true,
    )
}

pub fn share(share: f64, model: f64, steal: f64, other: f64) -> ShareCheck {
    let s = samples(share, 0.02, 5);
    ShareCheck {
        workers: 2,
        share: mci(&s),
        share_samples: s,
        model_share: model,
        other_load_cpus: other,
        steal_pct: steal,
    }
}

pub fn scale(policy: &str, threads: usize, speedup: f64, contended: usize) -> ScalePoint {
    let s = samples(speedup, 0.02, 5);
    ScalePoint {
        workload: "fib".into(),
        policy: policy.into(),
        threads,
        speedup: mci(&s),
        speedup_samples: s,
        contended_groups: Some(contended),
    }
}

pub fn preset(placement: &str, class: PlacementClass, tps: f64) -> PresetRun {
    let s = samples(tps, 0.02, 3);
    PresetRun {
        preset: "pgbench".into(),
        workload: "pgbench SELECT 1".into(),
        placement: placement.into(),
        class: Some(class),
        per_s: mci(&s),
        samples_per_s: s,
        per_transaction: BTreeMap::new(),
    }
}

fn facts() -> Facts {
    Facts {
        hypervisor: Some("KVM".into()),
        cpuidle_driver: Some("haltpoll".into()),
        guest_halt_poll_ns: Some(0),
        cpufreq_governor: Some("powersave".into()),
        mitigations: vec![("spectre_v2".into(), "Mitigation: Retpolines".into())],
        cpu_quota_cpus: Some(2.0),
        cgroup_version: Some(1),
        online_cpus: CpuSet::parse_list("0-1", false).unwrap(),
        allowed_cpus: CpuSet::parse_list("0-1", false).unwrap(),
        ..Default::default()
    }
}

/// Suspicious configuration (halt polling off, powersave, mitigations, a quota) but no
/// measured effect beyond noise: the doctor must say nothing is wrong.
pub fn quiet_machine() -> (Facts, Measurements) {
    use PlacementClass::*;
    let m = Measurements {
        wakeup: vec![
            wake("pipe", true, SameCpu, "0:0", 5000.0, 0.0),
            wake("pipe", true, SharedLlc, "0:1", 5100.0, 0.05),
            wake("pipe", true, Unpinned, "", 5050.0, 0.02),
            wake("spin", false, SharedLlc, "0:1", 200.0, 0.0),
        ],
        throughput: vec![
            throughput("packed", "0", 100e3),
            throughput("spread", "0-1", 101e3),
        ],
        oscost: Some(OsCosts {
            primitives: vec![
                cost("syscall_getppid", 60.0),
                cost("context_switch_yield", 1200.0),
            ],
            frequency: Some(ramp(3000.0, 3010.0)),
        }),
        share: Some(share(0.99, 1.0, 0.0, 0.0)),
        scaling: vec![scale("compact", 2, 1.95, 0), scale("scatter", 2, 1.96, 0)],
        presets: vec![
            preset("same-cpu", SameCpu, 60e3),
            preset("shared-llc", SharedLlc, 59e3),
        ],
        counters: RunCounters {
            interval_s: 40.0,
            steal_samples_pct: vec![0.0, 0.1, 0.0, 0.2],
            cfs_periods: Some(400),
            cfs_throttled_periods: Some(0),
            cfs_throttled_s: Some(0.0),
            ..Default::default()
        },
        skipped: vec![],
        app_watch: None,
        stage_times: vec![],
    };
    (facts(), m)
}

/// Every effect the rules know, shaped like the field notes' machines.
pub fn everything_wrong() -> (Facts, Measurements) {
    use PlacementClass::*;
    let mut f = facts();
    f.online_cpus = CpuSet::parse_list("0-3", false).unwrap();
    f.cpu_quota_cpus = Some(1.0);
    let mut unpinned = wake("pipe", true, Unpinned, "", 27000.0, 1.0);
    unpinned.batch_means_ns = [samples(11000.0, 0.02, 10), samples(43000.0, 0.02, 10)].concat();
    unpinned.rtt_ns = mci(&unpinned.batch_means_ns);
    let m = Measurements {
        wakeup: vec![
            wake("pipe", true, SameCpu, "0:0", 5000.0, 0.0),
            wake("pipe", true, SharedLlc, "0:1", 42000.0, 2.0),
            unpinned,
            wake("spin", false, SharedLlc, "0:1", 300.0, 0.0),
            {
                let mut busy = wake("pipe", true, Unpinned, "", 6000.0, 0.05);
                busy.same_cpu_share = Some(0.95);
                busy.neighbour_load = Some(1);
                busy
            },
        ],
        throughput: vec![
            throughput("packed", "0", 50e3),
            throughput("spread", "0-1", 90e3),
        ],
        oscost: Some(OsCosts {
            primitives: vec![
                cost("syscall_getppid", 600.0),
                cost("context_switch_yield", 6000.0),
            ],
            frequency: Some(ramp(1500.0, 3000.0)),
        }),
        share: Some(share(0.55, 1.0, 40.0, 0.0)),
        scaling: vec![scale("compact", 2, 1.2, 1), scale("scatter", 2, 1.9, 0)],
        presets: vec![
            preset("same-cpu", SameCpu, 66e3),
            preset("shared-llc", SharedLlc, 16.5e3),
        ],
        counters: RunCounters {
            interval_s: 40.0,
            steal_samples_pct: vec![38.0, 41.0, 40.0, 39.0],
            cfs_periods: Some(400),
            cfs_throttled_periods: Some(120),
            cfs_throttled_s: Some(6.0),
            disallowed_idle_pct: Some(95.0),
            other_busy_pct: BTreeMap::new(),
            patient_busy_pct: None,
        },
        skipped: vec![],
        app_watch: Some(crate::doctor::measurements::AppWatch {
            target: "comm postgres".into(),
            setup_s: None,
            interval_s: 5.0,
            incomplete: None,
            processes: vec![crate::doctor::measurements::WatchedProcess {
                name: "postgres".into(),
                pids: vec![812],
                wakeups_per_s: 48_000.0,
                cross_share: 0.71,
                cross_wakeups_per_s: 34_080.0,
                cgroup: Some("/system.slice/postgresql@15-main.service".into()),
                unit: Some("postgresql@15-main.service".into()),
            }],
        }),
        stage_times: vec![],
    };
    (f, m)
}

/// A wakeup run whose 20 batch means alternate `lo` and `hi`, so its mean is exactly their
/// midpoint, with only the per-round-trip counters given: `halts` idle entries and `ipi` as
/// (RES, CAL); `None` is not recorded.
pub fn exact_wake(
    method: &str,
    blocking: bool,
    class: PlacementClass,
    cpus: &str,
    (lo, hi): (f64, f64),
    halts: Option<f64>,
    ipi: Option<(f64, f64)>,
) -> WakeupRun {
    let mut w = wake(method, blocking, class, cpus, (lo + hi) / 2.0, 0.0);
    w.batch_means_ns = (0..20).map(|k| if k % 2 == 0 { lo } else { hi }).collect();
    w.rtt_ns = mci(&w.batch_means_ns);
    w.per_round_trip.clear();
    if let Some(h) = halts {
        w.per_round_trip.insert("idle_entries".into(), h);
    }
    if let Some((res, cal)) = ipi {
        w.per_round_trip.insert("irq_RES".into(), res);
        w.per_round_trip.insert("irq_CAL".into(), cal);
    }
    w
}
