//! Running the share experiment: burners first, then workers behind a start gate, counters around
//! the measured interval, and the alone runs interleaved with the loaded ones.

use super::cgroup::{CgroupCpu, ThrottleDelta};
use super::model;
use super::{ShareConfig, ShareReport, ShareRun, ShareSettings};
use crate::counters::SystemSnapshot;
use crate::experiment::Progress;
use crate::load::{self, Duty, Gate, OTHER_LOAD_NOISY_CPUS, WorkerOutcome};
use crate::machine::{Conditions, Machine};
use crate::stats::MeanCi;
use anyhow::{Context, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Sets every flag and opens the gate when dropped, so a panic or an early return can never
/// leave a burner spinning or a worker waiting while the scope waits to join them.
struct StopOnDrop<'a>(&'a [&'a AtomicBool], &'a Gate);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        for f in self.0 {
            f.store(true, Ordering::Relaxed);
        }
        self.1.open();
    }
}

/// Measures every configuration of `settings` on `machine`, under `conditions`. Progress lines
/// go to `progress`.
pub fn measure(
    machine: &Machine,
    settings: &ShareSettings,
    mut conditions: Conditions,
    progress: &Progress,
) -> Result<ShareReport> {
    let cgroup = match CgroupCpu::read(&machine.root) {
        Ok(c) => Some(c),
        Err(e) => {
            conditions
                .notes
                .push(format!("cgroup quota and throttling unavailable: {e}"));
            None
        }
    };
    let allowed_n = machine.allowed.len() as f64;
    let (usable_cpus, usable_cpus_from) = match cgroup.as_ref().and_then(|c| c.limit_cpus) {
        Some(limit) if limit < allowed_n => (
            limit,
            format!("cgroup CFS quota: {limit:.2} CPUs (fewer than the {allowed_n} allowed)"),
        ),
        _ => (
            allowed_n,
            format!("{allowed_n} allowed CPUs ({})", machine.allowed),
        ),
    };
    if let Some(c) = &settings.burner_cpus {
        conditions.notes.push(format!(
            "burners pinned to CPUs {c}: the model assumes the scheduler can balance every \
             thread over all usable CPUs, which pinning may prevent"
        ));
    }
    let mut burners: Vec<usize> = settings
        .burners
        .iter()
        .copied()
        .filter(|&b| b > 0)
        .collect();
    burners.sort_unstable();
    burners.dedup();
    let with_alone: Vec<usize> = std::iter::once(0).chain(burners).collect();

    let mut configs = Vec::new();
    for &t in &settings.threads {
        let mut runs: Vec<Vec<RawRun>> = vec![Vec::new(); with_alone.len()];
        for rep in 0..settings.repeats {
            for (i, &b) in with_alone.iter().enumerate() {
                progress.step(&format!(
                    "share: {t} worker(s), {b} burner(s), run {}/{}",
                    rep + 1,
                    settings.repeats
                ));
                runs[i].push(one_run(machine, settings, t, b, cgroup.as_ref())?);
            }
        }
        let alone_rates: Vec<f64> = runs[0]
            .iter()
            .flat_map(|r| r.workers.iter().map(rate))
            .collect();
        let alone_mean = alone_rates.iter().sum::<f64>() / alone_rates.len().max(1) as f64;
        for (i, &b) in with_alone.iter().enumerate() {
            configs.push(summarise(
                t,
                b,
                &runs[i],
                alone_mean,
                usable_cpus,
                settings.duty_pct / 100.0,
            ));
        }
    }
    note_steal_and_throttling(&mut conditions, &configs);
    Ok(ShareReport {
        conditions,
        max_prime: settings.max_prime,
        usable_cpus,
        usable_cpus_from,
        cgroup,
        duty_pct: settings.duty_pct,
        burner_cpus: settings.burner_cpus.clone(),
        requested_duration_s: settings.duration.as_secs_f64(),
        repeats: settings.repeats,
        configs,
    })
}

/// What one run measured, before it is related to the alone baseline.
#[derive(Clone, Debug)]
struct RawRun {
    interval_s: f64,
    workers: Vec<WorkerOutcome>,
    burner_cpu_share: Vec<f64>,
    steal_pct: Option<f64>,
    other_load_cpus: Option<f64>,
    throttle: Option<ThrottleDelta>,
}

fn rate(w: &WorkerOutcome) -> f64 {
    if w.interval_s > 0.0 {
        w.events as f64 / w.interval_s
    } else {
        0.0
    }
}

/// One run: start `b` burners, let them settle, run `t` workers for the duration.
fn one_run(
    machine: &Machine,
    s: &ShareSettings,
    t: usize,
    b: usize,
    cgroup: Option<&CgroupCpu>,
) -> Result<RawRun> {
    let stop_workers = AtomicBool::new(false);
    let stop_burners = AtomicBool::new(false);
    let gate = Gate::new();
    let duty = Duty {
        fraction: s.duty_pct / 100.0,
        period: s.duty_period,
    };
    let pins: Vec<Option<u32>> = (0..b)
        .map(|i| s.burner_cpus.as_ref().map(|c| c.to_vec()[i % c.len()]))
        .collect();
    std::thread::scope(|sc| -> Result<RawRun> {
        let flags = [&stop_workers, &stop_burners];
        let _guard = StopOnDrop(&flags, &gate);
        let (tx, rx) = mpsc::channel();
        let mut burner_handles = Vec::new();
        for (i, pin) in pins.iter().enumerate() {
            let tx = tx.clone();
            let stop = &stop_burners;
            let pin = *pin;
            let h = std::thread::Builder::new()
                .name(format!("burner-{i}"))
                .spawn_scoped(sc, move || {
                    let _ = tx.send(load::thread_clock(nix::sys::pthread::pthread_self()));
                    load::run_burner(stop, duty, pin)
                })
                .context("cannot start a burner thread")?;
            burner_handles.push(h);
        }
        drop(tx);
        let clocks: Vec<Option<libc::clockid_t>> = rx.iter().take(b).collect();
        if b > 0 {
            // Let the burners reach their CPUs and the load balancer settle.
            std::thread::sleep(Duration::from_millis(30));
        }
        let mut worker_handles = Vec::new();
        for i in 0..t {
            let (bar, stop) = (&gate, &stop_workers);
            let h = std::thread::Builder::new()
                .name(format!("worker-{i}"))
                .spawn_scoped(sc, move || load::run_worker(bar, stop, s.max_prime))
                .context("cannot start a worker thread")?;
            worker_handles.push(h);
        }
        let cg_before = cgroup.and_then(|c| c.read_stat());
        let sys_before = SystemSnapshot::take(&machine.root);
        let cpu_before: Vec<f64> = clocks.iter().map(|c| clock_s(*c)).collect();
        let own_before = load::process_cpu_s();
        gate.open();
        let t0 = Instant::now();
        // Wakes early on a signal: the run is then stopped and torn down, and reported as
        // interrupted below, never as a short measurement.
        let slept = crate::signals::sleep(s.duration);
        stop_workers.store(true, Ordering::Relaxed);
        let mut workers = Vec::with_capacity(t);
        for h in worker_handles {
            workers.push(h.join().unwrap_or_default());
        }
        let interval_s = t0.elapsed().as_secs_f64();
        let cpu_after: Vec<f64> = clocks.iter().map(|c| clock_s(*c)).collect();
        let sys_after = SystemSnapshot::take(&machine.root);
        let own_cpu_s = load::process_cpu_s() - own_before;
        let cg_after = cgroup.and_then(|c| c.read_stat());
        stop_burners.store(true, Ordering::Relaxed);
        for h in burner_handles {
            let _ = h.join();
        }
        slept?;
        let delta = sys_before.delta(&sys_after, &machine.allowed);
        let burner_cpu_share = cpu_before
            .iter()
            .zip(&cpu_after)
            .map(|(a, z)| ((z - a) / interval_s).max(0.0))
            .collect();
        Ok(RawRun {
            interval_s,
            workers,
            burner_cpu_share,
            steal_pct: (!delta.cpu_time.is_empty()).then(|| delta.steal_pct()),
            other_load_cpus: load::other_load_cpus(&delta, own_cpu_s),
            throttle: match (cg_before, cg_after) {
                (Some(a), Some(z)) => Some(a.delta(&z)),
                _ => None,
            },
        })
    })
}

fn clock_s(c: Option<libc::clockid_t>) -> f64 {
    c.map(load::cpu_clock_s).unwrap_or(0.0)
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn summarise(
    t: usize,
    b: usize,
    raw: &[RawRun],
    alone_mean: f64,
    usable: f64,
    duty: f64,
) -> ShareConfig {
    let runs: Vec<ShareRun> = raw
        .iter()
        .map(|r| {
            let rates: Vec<f64> = r.workers.iter().map(rate).collect();
            ShareRun {
                interval_s: r.interval_s,
                worker_events: r.workers.iter().map(|w| w.events).collect(),
                worker_relative: rates
                    .iter()
                    .map(|x| {
                        if alone_mean > 0.0 {
                            x / alone_mean
                        } else {
                            0.0
                        }
                    })
                    .collect(),
                worker_rate_per_s: rates,
                worker_cpu_share: r
                    .workers
                    .iter()
                    .map(|w| (w.cpu_s / w.interval_s.max(1e-9)).max(0.0))
                    .collect(),
                burner_cpu_share: r.burner_cpu_share.clone(),
                steal_pct: r.steal_pct,
                other_load_cpus: r.other_load_cpus,
                throttle: r.throttle,
            }
        })
        .collect();
    let per_run = |f: &dyn Fn(&ShareRun) -> &Vec<f64>| -> Option<MeanCi> {
        let v: Vec<f64> = runs.iter().filter_map(|r| mean(f(r))).collect();
        MeanCi::of(&v)
    };
    let relative = per_run(&|r| &r.worker_relative);
    let model_relative = model::relative_share(usable, t, b, duty);
    let all_rel = runs.iter().flat_map(|r| r.worker_relative.iter().copied());
    let steal: Vec<f64> = runs.iter().filter_map(|r| r.steal_pct).collect();
    let other: Vec<f64> = runs.iter().filter_map(|r| r.other_load_cpus).collect();
    let throttle = runs
        .iter()
        .map(|r| r.throttle)
        .try_fold(ThrottleDelta::default(), |acc, d| {
            d.map(|d| ThrottleDelta {
                nr_periods: acc.nr_periods + d.nr_periods,
                nr_throttled: acc.nr_throttled + d.nr_throttled,
                throttled_us: acc.throttled_us + d.throttled_us,
            })
        });
    ShareConfig {
        threads: t,
        burners: b,
        model_cpu_share: model::worker_share(usable, t, b, duty),
        model_relative,
        deviation_pp: relative.as_ref().map(|r| 100.0 * (r.mean - model_relative)),
        worker_relative_min: all_rel.clone().reduce(f64::min),
        worker_relative_max: all_rel.reduce(f64::max),
        worker_rate_per_s: per_run(&|r| &r.worker_rate_per_s),
        worker_cpu_share: per_run(&|r| &r.worker_cpu_share),
        burner_cpu_share: if b == 0 {
            None
        } else {
            per_run(&|r| &r.burner_cpu_share)
        },
        steal_pct: MeanCi::of(&steal),
        other_load_cpus: MeanCi::of(&other),
        relative,
        throttle,
        runs,
    }
}

/// Adds a note when steal or cgroup throttling was seen: either explains a share below model
/// without any local neighbour.
fn note_steal_and_throttling(conditions: &mut Conditions, configs: &[ShareConfig]) {
    let max_steal = configs
        .iter()
        .filter_map(|c| c.steal_pct.as_ref().map(|s| s.mean))
        .fold(0.0, f64::max);
    if max_steal >= 1.0 {
        conditions.notes.push(format!(
            "steal up to {max_steal:.1}% during the runs: a neighbour outside this VM took \
             physical CPU time; shares below the model may be the hypervisor's, not ours"
        ));
    }
    let max_other = configs
        .iter()
        .filter_map(|c| c.other_load_cpus.as_ref().map(|s| s.mean))
        .fold(0.0, f64::max);
    if max_other >= OTHER_LOAD_NOISY_CPUS {
        conditions.noisy = true;
        conditions.notes.push(format!(
            "other processes used up to {max_other:.2} CPUs during the runs: they competed \
             with the workers and burners, so measured shares are below what the model \
             describes"
        ));
    }
    let throttled: u64 = configs
        .iter()
        .filter_map(|c| c.throttle.map(|t| t.nr_throttled))
        .sum();
    if throttled > 0 {
        conditions.notes.push(format!(
            "the cgroup was throttled in {throttled} CFS periods during the runs: its quota, \
             not a neighbour, capped the workers"
        ));
    }
}
