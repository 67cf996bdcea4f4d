//! The only code that knows both the experiments' reports and the doctor's measurements.
//!
//! Each function condenses one module's result into the small types the rules read
//! ([`super::measurements`]). When an experiment's report grows, only its adapter changes.

use super::measurements::{
    Facts, FrequencyRamp, OsCosts, PresetRun, PrimitiveCost, ScalePoint, ShareCheck, WakeupRun,
};
use crate::probe::Probe;
use crate::stats::MeanCi;
use crate::{oscost, pair, pingpong, scale, share};

/// The probe facts the rules use as context.
pub fn facts(p: &Probe) -> Facts {
    let mut f = facts_only(p);
    f.environment = crate::doctor::measurements::Environment::detect(&f);
    f.environment_evidence = p.virt.evidence.clone();
    f
}

fn facts_only(p: &Probe) -> Facts {
    let t = &p.topology;
    let policies = p.freq.policies.value();
    let first_policy = policies.and_then(|v| v.first());
    let limits = p.sched.cgroup.cpu.value();
    Facts {
        hypervisor: p.virt.hypervisor.clone(),
        container: p.virt.container.detected.then(|| {
            p.virt
                .container
                .runtime
                .clone()
                .unwrap_or_else(|| "container".into())
        }),
        cpuidle_driver: p.idle.driver.value().cloned(),
        guest_halt_poll_ns: p.halt_poll_ns(),
        kvm_poll_control: p.virt.kvm_feature("poll_control") == Some(true),
        cpufreq_governor: first_policy.and_then(|x| x.governor.clone()),
        energy_perf_preference: first_policy.and_then(|x| x.energy_performance_preference.clone()),
        mitigations: p.mitigations.active(),
        cpu_quota_cpus: p.cpu_quota_cpus(),
        cgroup_path: limits.map(|l| l.dir.clone()),
        // The version of the hierarchy holding the cpu controller (a hybrid system has both).
        cgroup_version: limits.and_then(|l| l.version.trim_start_matches('v').parse().ok()),
        online_cpus: t.online.clone(),
        allowed_cpus: t.allowed.clone(),
        affinity_cpus: t.affinity.value().cloned(),
        cpuset_cpus: t.cgroup_cpuset.value().map(|c| c.cpus.clone()),
        cpuset_file: t.cgroup_cpuset.value().map(|c| c.file.clone()),
        smt_active: t.threads_per_core > 1,
        shared_l2_groups: t.modules.len(),
        cpu_model: p.cpu_model.value().cloned(),
        deepest_idle_state: p.idle.states.value().and_then(|v| {
            v.iter()
                .filter(|s| !s.disabled)
                .filter_map(|s| Some((s.name.clone(), s.latency_us?)))
                .max_by_key(|s| s.1)
        }),
        tuned_profile: p.sched.tuned_profile.value().cloned(),
        hardware_counters: Some(if p.counters.hardware_available() {
            "available".to_string()
        } else {
            p.counters
                .hardware
                .why()
                .map(|u| format!("unavailable: {}", u.detail))
                .unwrap_or_else(|| "unavailable".into())
        }),
        ..Default::default()
    }
}

/// Every run of a pingpong report.
pub fn wakeup(r: &pingpong::PingpongReport) -> Vec<WakeupRun> {
    pingpong::summary::wakeup_runs(r)
}

/// The primitives with their kept batches, and the frequency ramp in MHz.
pub fn oscost(r: &oscost::OscostReport) -> OsCosts {
    let primitives = r
        .ops
        .iter()
        .filter_map(|o| {
            Some(PrimitiveCost {
                name: o.name.clone(),
                cost_ns: o.per_op_ns.clone()?,
                samples_ns: o.batch_samples_ns.clone(),
                min_ns: o.min_ns,
            })
        })
        .collect();
    let frequency = r.frequency.as_ref().and_then(|f| {
        // Cycles per iteration only when the clock check accepted the loop as a clock.
        let scale = f.cycles_per_iteration.unwrap_or(1.0) * 1000.0;
        let mhz = |v: &[f64]| v.iter().map(|x| x * scale).collect::<Vec<_>>();
        let cold = mhz(&f.trials.iter().map(|t| t.cold_per_ns).collect::<Vec<_>>());
        let warm = mhz(&f.trials.iter().map(|t| t.warm_per_ns).collect::<Vec<_>>());
        Some(FrequencyRamp {
            cold_mhz: MeanCi::of(&cold)?,
            warm_mhz: MeanCi::of(&warm)?,
            cold_samples_mhz: cold,
            warm_samples_mhz: warm,
            ramp_up_ms: f.ramp_up_us.as_ref().map(|m| m.mean / 1000.0),
            clock_mhz: f.cycles_per_iteration.is_some(),
            clock: f.clock.clone(),
        })
    });
    OsCosts {
        primitives,
        frequency,
    }
}

/// Each worker's rate with one per usable CPU, against one worker alone.
pub fn share(r: &share::ShareReport) -> Option<ShareCheck> {
    let alone = r
        .configs
        .iter()
        .find(|c| c.threads == 1 && c.burners == 0)?;
    let all = r
        .configs
        .iter()
        .filter(|c| c.burners == 0)
        .max_by_key(|c| c.threads)?;
    let alone_mean = alone.worker_rate_per_s.as_ref()?.mean;
    if alone_mean <= 0.0 {
        return None;
    }
    let samples: Vec<f64> = all
        .runs
        .iter()
        .filter(|run| !run.worker_rate_per_s.is_empty())
        .map(|run| {
            run.worker_rate_per_s.iter().sum::<f64>()
                / run.worker_rate_per_s.len() as f64
                / alone_mean
        })
        .collect();
    let other = all
        .other_load_cpus
        .as_ref()
        .map_or(0.0, |m| m.mean.max(0.0));
    Some(ShareCheck {
        workers: all.threads,
        // The single-worker baseline ran in its own block, not interleaved with these runs,
        // so its own uncertainty belongs in the interval: a ratio of two means, not a mean of
        // ratios against a baseline taken as exact.
        share: all
            .worker_rate_per_s
            .as_ref()?
            .ratio(alone.worker_rate_per_s.as_ref()?)?,
        share_samples: samples,
        model_share: (r.usable_cpus / (all.threads as f64 + other)).min(1.0),
        other_load_cpus: other,
        steal_pct: all.steal_pct.as_ref().map_or(0.0, |m| m.mean),
    })
}

/// Speedup per policy and thread count (scale's figure), with per-run samples against the
/// policy's own single-thread mean.
pub fn scale(r: &scale::ScaleReport) -> Vec<ScalePoint> {
    let workload = format!("{:?}", r.workload).to_lowercase();
    let mut out = Vec::new();
    for p in &r.policies {
        let Some(base) = p
            .points
            .iter()
            .find(|x| x.threads == 1)
            .map(|x| x.time_s.mean)
        else {
            continue;
        };
        for x in &p.points {
            let samples = x.speedup_samples(base);
            // scale's own speedup carries the single-thread baseline's uncertainty too;
            // the per-run samples are kept for significance tests in `compare`.
            let Some(speedup) = x.speedup.clone() else {
                continue;
            };
            let contended = x
                .observed
                .as_ref()
                .or(x.planned.as_ref())
                .map(|c| c.smt_cores_contended + c.l2_modules_contended);
            out.push(ScalePoint {
                workload: workload.clone(),
                policy: p.policy.clone(),
                threads: x.threads,
                speedup,
                speedup_samples: samples,
                contended_groups: contended,
            });
        }
    }
    out
}

/// Each placement of a preset run.
pub fn pair(r: &pair::PairReport, preset: &str) -> Vec<PresetRun> {
    // `select1 (SELECT 1; with -n), -c 1 -j 1` -> `pgbench select1`: the details stay in the
    // pair report; the doctor needs a name.
    let short = r
        .experiment
        .workload
        .as_deref()
        .unwrap_or("")
        .split([',', '('])
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    let workload = format!("{preset} {short}").trim().to_string();
    r.placements
        .iter()
        .map(|p| PresetRun {
            preset: preset.to_string(),
            workload: workload.clone(),
            placement: p.placement.label.clone(),
            class: Some(p.placement.class),
            per_s: p.metric.clone(),
            samples_per_s: p.runs.iter().map(|x| x.value).collect(),
            per_transaction: p.per_transaction.clone(),
        })
        .collect()
}
