//! Running the scaling experiment: for each repeat, every (policy, thread count) in turn gets a
//! fresh pinned pool, a warm-up and one timed run with per-CPU utilisation around it; then
//! speedups against the policy's own single thread.

use super::answer;
use super::contention::{self, Contention};
use super::policy::{self, Policy};
use super::workload::{self, TriadArrays};
use super::{PolicyResult, ScalePoint, ScaleReport, ScaleSettings, Workload};
use crate::counters::SystemSnapshot;
use crate::cpulist::CpuSet;
use crate::experiment::Progress;
use crate::load;
use crate::machine::{Conditions, Machine};
use crate::stats::MeanCi;
use anyhow::Result;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

/// How one run is executed, fixed before the first measurement so every point of a thread
/// count does the same work.
#[derive(Clone, Copy, Debug)]
enum Job {
    Fib { n: u32, cutoff: u32 },
    Triad { len: usize, passes: u32 },
}

impl Job {
    fn fib_n(self) -> Option<u32> {
        match self {
            Job::Fib { n, .. } => Some(n),
            Job::Triad { .. } => None,
        }
    }

    /// The job at `threads` threads and its work in single-thread runs: fib's argument grows by
    /// log_phi(threads), so a run at ideal scaling stays as long as the single thread's (issue
    /// 30: fixed work left 16 threads runs of 45 ms); the triad keeps its passes.
    fn at(self, threads: usize) -> (Job, f64) {
        match self {
            Job::Fib { n, cutoff } => {
                let m = workload::fib_for_threads(n, threads);
                (
                    Job::Fib { n: m, cutoff },
                    workload::fib_calls(m) / workload::fib_calls(n),
                )
            }
            triad => (triad, 1.0),
        }
    }
}

/// Every run so far, by policy and thread count.
struct Sweeps {
    counts: Vec<usize>,
    samples: Vec<Vec<Vec<RunSample>>>,
    pin_failures: Vec<Vec<String>>,
    runs: usize,
}

/// Measures every (policy, thread count) of `settings`, under `conditions`. Progress lines go
/// to `progress`.
pub fn measure(
    machine: &Machine,
    settings: &ScaleSettings,
    mut conditions: Conditions,
    progress: &Progress,
) -> Result<ScaleReport> {
    let mut counts = settings.threads.clone();
    counts.push(1);
    counts.sort_unstable();
    counts.dedup();
    let llc_total_kib = llc_total_kib(machine);
    progress.step("scale: sizing the workload");
    let job = prepare(settings, llc_total_kib, &mut conditions)?;
    let np = settings.policies.len();
    let mut sweeps = Sweeps {
        samples: vec![vec![Vec::new(); counts.len()]; np],
        pin_failures: vec![Vec::new(); np],
        counts,
        runs: 0,
    };
    let (question, differ) =
        answer::question_threads(&machine.topology, &machine.allowed, &sweeps.counts);
    let t0 = Instant::now();
    // Whole sweeps, so a burst of outside load spreads over every point (and widens every
    // interval) instead of bending one point of the curve; after the minimum, more while
    // the question is open and another sweep fits the time limit.
    let (policies, snap, status) = loop {
        sweep(machine, settings, job, &mut sweeps, progress)?;
        let policies = summarise(machine, settings, job, &sweeps);
        let snap = snapshot(&policies, question, sweeps.runs);
        let status = answer::status(&snap, settings.target_rel);
        let elapsed = t0.elapsed().as_secs_f64();
        if sweeps.runs >= settings.repeats
            && !answer::another(
                status,
                elapsed,
                elapsed / sweeps.runs as f64,
                settings.max_time.as_secs_f64(),
            )
        {
            break (policies, snap, status);
        }
    };
    let elapsed_s = t0.elapsed().as_secs_f64();
    let runs_needed = (status == answer::Status::Open)
        .then(|| answer::runs_needed(&snap, settings.target_rel))
        .flatten();
    let mut a = answer::Answer {
        status,
        question_threads: question,
        largest_threads: sweeps.counts.last().copied().unwrap_or(1),
        policies_differ: differ,
        widest_rel: answer::widest(&snap),
        target_rel: settings.target_rel,
        runs: sweeps.runs,
        elapsed_s,
        max_time_s: settings.max_time.as_secs_f64(),
        runs_needed,
        more_time_s: runs_needed
            .map(|n| n.saturating_sub(sweeps.runs) as f64 * elapsed_s / sweeps.runs as f64),
        line: String::new(),
    };
    a.line = answer::line(&a, snap.pair.as_ref());
    note_coinciding_policies(&mut conditions, &policies);
    note_other_load(&mut conditions, &policies);
    Ok(report(
        settings,
        job,
        llc_total_kib,
        conditions,
        policies,
        a,
    ))
}

/// One run of every (policy, thread count), in order.
fn sweep(
    machine: &Machine,
    settings: &ScaleSettings,
    job: Job,
    sweeps: &mut Sweeps,
    progress: &Progress,
) -> Result<()> {
    let rep = sweeps.runs;
    for (pi, p) in settings.policies.iter().enumerate() {
        for (ci, &n) in sweeps.counts.iter().enumerate() {
            progress.step(&format!(
                "scale: {p}, {n} thread(s), run {}{}",
                rep + 1,
                if rep < settings.repeats {
                    format!("/{}", settings.repeats)
                } else {
                    " (more for the question)".into()
                }
            ));
            let (sample, fails) = run_once(machine, p, n, job.at(n).0)?;
            sweeps.samples[pi][ci].push(sample);
            if rep == 0 {
                sweeps.pin_failures[pi].extend(fails);
            }
        }
    }
    sweeps.runs += 1;
    Ok(())
}

/// Every policy's points from the runs so far, with speedups.
fn summarise(
    machine: &Machine,
    settings: &ScaleSettings,
    job: Job,
    sweeps: &Sweeps,
) -> Vec<PolicyResult> {
    settings
        .policies
        .iter()
        .enumerate()
        .map(|(pi, p)| {
            let mut points: Vec<ScalePoint> = sweeps
                .counts
                .iter()
                .zip(&sweeps.samples[pi])
                .map(|(&n, runs)| summarise_point(machine, p, n, job, runs))
                .collect();
            add_speedups(&mut points);
            PolicyResult {
                policy: p.name().to_string(),
                explicit_cpus: match p {
                    Policy::Explicit(l) => Some(l.clone()),
                    _ => None,
                },
                points,
                pin_failures: sweeps.pin_failures[pi].clone(),
            }
        })
        .collect()
}

/// What the question reads from the points: compact's and scatter's speedups at the question
/// count, and every policy's there and at the largest count.
fn snapshot(policies: &[PolicyResult], question: usize, runs: usize) -> answer::Snapshot {
    let at = |p: &PolicyResult, n: usize| {
        p.points
            .iter()
            .find(|x| x.threads == n)
            .and_then(|x| x.speedup.clone())
    };
    let of = |name: &str| {
        policies
            .iter()
            .find(|p| p.policy == name)
            .and_then(|p| at(p, question))
    };
    let largest = policies
        .iter()
        .flat_map(|p| p.points.iter().map(|x| x.threads))
        .max()
        .unwrap_or(1);
    answer::Snapshot {
        pair: of("compact").zip(of("scatter")),
        speedups: policies
            .iter()
            .flat_map(|p| [at(p, question), at(p, largest)])
            .flatten()
            .collect(),
        runs,
    }
}

/// The report from the summarised points.
fn report(
    settings: &ScaleSettings,
    job: Job,
    llc_total_kib: Option<u64>,
    conditions: Conditions,
    policies: Vec<PolicyResult>,
    answer: answer::Answer,
) -> ScaleReport {
    let (fib_n, fib_cutoff, triad_len, triad_passes) = match job {
        Job::Fib { n, cutoff } => (Some(n), Some(cutoff), None, None),
        Job::Triad { len, passes } => (None, None, Some(len), Some(passes)),
    };
    ScaleReport {
        conditions,
        workload: settings.workload,
        work: match job {
            Job::Fib { n, cutoff } => format!(
                "fib({n}) at one thread, one step more per golden-ratio growth of the thread \
                 count (fib({}) at {} threads), rayon::join above {cutoff}, serial below",
                job.at(answer.largest_threads).0.fib_n().unwrap_or(n),
                answer.largest_threads
            ),
            Job::Triad { len, passes } => {
                format!("{passes} triad pass(es) a[i] = b[i] + s*c[i] over 3 x {len} f64")
            }
        },
        fib_n,
        fib_cutoff,
        triad_array_mib: triad_len.map(|l| (l * 8) as f64 / (1024.0 * 1024.0)),
        triad_passes,
        llc_total_kib,
        throughput_unit: match job {
            Job::Fib { n, .. } => format!("fib({n})/s"),
            Job::Triad { .. } => "GB/s".into(),
        },
        repeats: answer.runs,
        policies,
        answer: Some(answer),
    }
}

/// Marks the result noisy when other processes used a CPU's worth during the runs: speedups
/// then bend with competition, not only with placement.
fn note_other_load(conditions: &mut crate::machine::Conditions, policies: &[PolicyResult]) {
    let max_other = policies
        .iter()
        .flat_map(|p| p.points.iter().filter_map(|x| x.other_load_cpus))
        .fold(0.0, f64::max);
    if max_other >= load::OTHER_LOAD_NOISY_CPUS {
        conditions.noisy = true;
        conditions.notes.push(format!(
            "other processes used up to {max_other:.2} CPUs during the runs: speedups are \
             bent by competition, not only by placement"
        ));
    }
}

/// Sum of the distinct last-level caches over the allowed CPUs.
fn llc_total_kib(machine: &Machine) -> Option<u64> {
    let mut seen: Vec<CpuSet> = Vec::new();
    let mut total = 0;
    for id in machine.allowed.iter() {
        let cpu = machine.topology.cpu(id)?;
        let level = cpu.llc_level()?;
        let cache = cpu
            .caches
            .iter()
            .find(|c| c.level == level && c.kind != "Instruction")?;
        if !seen.contains(&cache.shared_cpus) {
            seen.push(cache.shared_cpus.clone());
            total += cache.size_kib?;
        }
    }
    (total > 0).then_some(total)
}

/// Fixes the work of one run: fib's argument, or the triad's array length and pass count.
fn prepare(s: &ScaleSettings, llc_kib: Option<u64>, cond: &mut Conditions) -> Result<Job> {
    match s.workload {
        Workload::Fib => Ok(Job::Fib {
            n: s.fib_n
                .unwrap_or_else(|| workload::calibrate_fib(s.duration)),
            cutoff: s.fib_cutoff,
        }),
        Workload::Triad => {
            let mib = s
                .triad_mib
                .unwrap_or_else(|| (4 * llc_kib.unwrap_or(16 * 1024) / 1024).clamp(64, 1024));
            if let Some(l) = llc_kib
                && mib * 1024 < 2 * l
            {
                cond.notes.push(format!(
                    "triad arrays of {mib} MiB are not much larger than the {} MiB of LLC: \
                     the triad measures cache, not memory, bandwidth",
                    l / 1024
                ));
            }
            let len = (mib * 1024 * 1024 / 8) as usize;
            let (pool, _) = workload::build_pool(1, None)?;
            let mut arrays = TriadArrays::new(&pool, len);
            let t0 = Instant::now();
            arrays.pass(&pool, 3.0);
            let per_pass = t0.elapsed().as_secs_f64().max(1e-6);
            let passes = (s.duration.as_secs_f64() / per_pass)
                .ceil()
                .clamp(1.0, 10_000.0) as u32;
            Ok(Job::Triad { len, passes })
        }
    }
}

/// What one timed run saw.
#[derive(Clone, Debug)]
struct RunSample {
    time_s: f64,
    /// Busy percent per allowed CPU during the run.
    busy_pct: BTreeMap<u32, f64>,
    steal_pct: Option<f64>,
    other_load_cpus: Option<f64>,
}

/// One run of (policy, n): build and pin the pool, prepare and warm up, then time the job with
/// counters around it.
fn run_once(machine: &Machine, p: &Policy, n: usize, job: Job) -> Result<(RunSample, Vec<String>)> {
    let cpus = policy::select(&machine.topology, &machine.allowed, n, p);
    let (pool, failures) = workload::build_pool(n, cpus)?;
    let mut triad = match job {
        Job::Triad { len, .. } => Some(TriadArrays::new(&pool, len)),
        Job::Fib { n: f, cutoff } => {
            black_box(pool.install(|| workload::fib_par(f.saturating_sub(4), cutoff)));
            None
        }
    };
    let before = SystemSnapshot::take(&machine.root);
    let own_before = load::process_cpu_s();
    let t0 = Instant::now();
    match (job, triad.as_mut()) {
        (Job::Fib { n: f, cutoff }, _) => {
            black_box(pool.install(|| workload::fib_par(black_box(f), cutoff)));
        }
        (Job::Triad { passes, .. }, Some(arrays)) => {
            for _ in 0..passes {
                arrays.pass(&pool, 3.0);
            }
        }
        (Job::Triad { .. }, None) => {}
    }
    let time_s = t0.elapsed().as_secs_f64();
    let d = before.delta(&SystemSnapshot::take(&machine.root), &machine.allowed);
    let other_load_cpus = load::other_load_cpus(&d, load::process_cpu_s() - own_before);
    if let Some(t) = &triad {
        black_box(t.checksum());
    }
    let failures = failures.lock().map(|v| v.clone()).unwrap_or_default();
    Ok((
        RunSample {
            time_s,
            busy_pct: d.cpu_time.iter().map(|(c, s)| (*c, s.busy_pct())).collect(),
            steal_pct: (!d.cpu_time.is_empty()).then(|| d.steal_pct()),
            other_load_cpus,
        },
        failures,
    ))
}

/// Turns the runs of one (policy, n) into a point (speedups are added per policy later).
fn summarise_point(
    machine: &Machine,
    p: &Policy,
    n: usize,
    job: Job,
    runs: &[RunSample],
) -> ScalePoint {
    let (job, work_rel) = job.at(n);
    let times: Vec<f64> = runs.iter().map(|r| r.time_s).collect();
    let throughput: Vec<f64> = times
        .iter()
        .map(|t| match job {
            Job::Fib { .. } => work_rel / t.max(1e-12),
            Job::Triad { len, passes } => (3 * 8 * len) as f64 * passes as f64 / t.max(1e-12) / 1e9,
        })
        .collect();
    let mut busy_pct: BTreeMap<u32, f64> = BTreeMap::new();
    for r in runs {
        for (c, b) in &r.busy_pct {
            *busy_pct.entry(*c).or_default() += b / runs.len() as f64;
        }
    }
    let cpus = policy::select(&machine.topology, &machine.allowed, n, p);
    let planned = cpus.as_ref().map(|c| {
        contention::count(
            &machine.topology,
            &machine.allowed,
            &CpuSet::from_iter_u32(c.iter().copied()),
        )
    });
    let observed: Option<Contention> = (!busy_pct.is_empty()).then(|| {
        let busy = contention::busy_from_utilisation(&busy_pct);
        contention::count(&machine.topology, &machine.allowed, &busy)
    });
    let mean_of = |v: Vec<f64>| MeanCi::of(&v).map(|m| m.mean);
    ScalePoint {
        threads: n,
        work_rel,
        fib_n: job.fib_n(),
        cpus,
        time_s: MeanCi::of(&times).unwrap_or_else(|| MeanCi::single(0.0)),
        throughput: MeanCi::of(&throughput).unwrap_or_else(|| MeanCi::single(0.0)),
        time_samples_s: times,
        speedup: None,
        efficiency: None,
        planned,
        observed,
        busy_pct,
        steal_pct: mean_of(runs.iter().filter_map(|r| r.steal_pct).collect()),
        other_load_cpus: mean_of(runs.iter().filter_map(|r| r.other_load_cpus).collect()),
    }
}

/// Speedup and efficiency of every point against the single-thread point of the same policy.
fn add_speedups(points: &mut [ScalePoint]) {
    let Some(base) = points
        .iter()
        .find(|p| p.threads == 1)
        .map(|p| p.time_s.clone())
    else {
        return;
    };
    for p in points.iter_mut() {
        // The baseline against itself is 1 by definition; its noise is carried by every
        // other point's interval.
        let s = if p.threads == 1 {
            Some(MeanCi {
                n: base.n,
                ..MeanCi::single(1.0)
            })
        } else {
            // Base time over this time, times the work of a run here in single-thread runs.
            base.ratio(&p.time_s).map(|s| scale_ci(&s, p.work_rel))
        };
        if let Some(s) = s {
            let n = p.threads as f64;
            p.efficiency = Some(scale_ci(&s, 1.0 / n));
            p.speedup = Some(s);
        }
    }
}

fn scale_ci(m: &MeanCi, k: f64) -> MeanCi {
    MeanCi {
        mean: m.mean * k,
        ci95_low: m.ci95_low * k,
        ci95_high: m.ci95_high * k,
        ci95_half_width: m.ci95_half_width * k,
        stddev: m.stddev * k,
        n: m.n,
    }
}

/// Says so when compact and scatter chose the same CPUs at every count: on this topology they
/// are one policy, and their difference is noise.
fn note_coinciding_policies(cond: &mut Conditions, policies: &[PolicyResult]) {
    let cpus_of = |name: &str| -> Option<Vec<Option<CpuSet>>> {
        let p = policies.iter().find(|p| p.policy == name)?;
        Some(
            p.points
                .iter()
                .map(|x| x.cpus.as_ref().map(|c| c.iter().copied().collect()))
                .collect(),
        )
    };
    if let (Some(c), Some(s)) = (cpus_of("compact"), cpus_of("scatter"))
        && c == s
    {
        cond.notes.push(
            "compact and scatter chose the same CPUs at every thread count: this topology has \
             no SMT siblings or shared-L2 modules to fill or avoid, so they differ only by noise"
                .to_string(),
        );
    }
}
