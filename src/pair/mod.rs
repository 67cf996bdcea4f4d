//! `cpulab pair`: a real server and a real client under each placement, with the counters that
//! explain the difference.
//!
//! The field notes' central finding is that a request-response pair (PostgreSQL and pgbench,
//! Apache and ab) can lose three quarters of its throughput when the client and the server's
//! backend sit on different vCPUs: every request wakes the other side across CPUs, and in a VM a
//! cross-CPU wakeup is an IPI through the hypervisor plus, when the target vCPU halted, a halt
//! exit. This module runs that experiment with the real programs: it starts the server with its
//! whole process tree pinned (affinity set before exec, so forked backends inherit it), runs the
//! client pinned to the same CPU, to one CPU of each placement class, and unpinned, repeats each
//! placement in interleaved rounds, and counts around every run the server tree's and the
//! client's context switches, migrations and CPU time, and the CPUs' halts, interrupts by type
//! and steal, per transaction.
//!
//! Placement changes restart the server rather than re-pinning it: re-pinning would have to chase
//! every thread of every process through /proc while new ones are forked, and would leave memory
//! the server allocated on its old CPU's node; a restart places the whole tree from its first
//! fork, exactly as `taskset -c N pg_ctl start` did in the field notes. Persistent state (the
//! database cluster) survives restarts; one discarded warm-up run follows each start.
//!
//! Nothing is left behind on any exit path: see `procs` (pinning, process groups, parent-death
//! signal, orderly stop), `cleanup` (drop guards, panic hook, stale directories), `watchdog`
//! (SIGKILL of cpulab) and `crate::signals` (Ctrl-C and SIGTERM become an orderly teardown).

pub mod cleanup;
pub mod command;
mod experiment;
pub mod metric;
pub mod observe;
pub mod placement;
pub mod presets;
pub mod procs;
pub mod proctable;
pub mod report;
pub mod runner;
pub mod settings;

pub use experiment::Pair;
pub use report::{PairReport, PlacementResult};
pub use runner::RunResult;
pub use settings::{PairSettings, Preset};

use crate::cpulist::CpuSet;
use crate::experiment::Progress;
use crate::machine::{Conditions, Machine};
use anyhow::Result;
use settings::{Programs, Workload};

/// Seconds of the discarded warm-up run after each server start (presets).
const WARMUP_S: u32 = 1;

/// Whether a preset can run on this machine, without starting anything. `Err` is one line
/// naming what is missing and the package that provides it.
pub fn preset_available(preset: Preset) -> Result<(), String> {
    match preset {
        Preset::Pgbench => presets::pgbench::available(),
        Preset::Http => presets::http::available(),
        Preset::Redis => presets::redis::available(),
    }
}

fn workload(settings: &PairSettings) -> Option<String> {
    match &settings.programs {
        Programs::Pgbench(p) => Some(match p.workload {
            Workload::Select1 => format!(
                "select1 (SELECT 1; with -n), -c {} -j {}",
                p.clients, p.threads
            ),
            Workload::Readonly => format!(
                "readonly (pgbench -S at scale {}), -c {} -j {}",
                p.scale, p.clients, p.threads
            ),
        }),
        Programs::Http { .. } => Some("GET of a small static page, one connection".to_string()),
        Programs::Redis => Some("GET, one connection (redis-benchmark -c 1 -t get)".to_string()),
        Programs::Generic { .. } => None,
    }
}

/// The notes a pair's report carries beside the environment's own: too few runs for an
/// interval, busy neighbours, perf's observer effect and whether its events could be read.
fn run_notes(
    settings: &PairSettings,
    results: &[PlacementResult],
    notes: Vec<String>,
) -> Vec<String> {
    let mut notes = notes;
    if settings.repeat < settings::MIN_REPEAT {
        notes.push(format!(
            "only {} run(s) per placement: the intervals are not meaningful",
            settings.repeat
        ));
    }
    if settings.neighbour_load > 0 {
        notes.push(format!(
            "{} busy neighbour(s) (normal-priority spinning threads, unpinned) ran beside every \
             measured run: these figures are for a machine with that load, not an idle one",
            settings.neighbour_load
        ));
    }
    if settings.use_perf {
        notes.push(
            "counted with perf events (--perf): exact, but they slow every context switch, so \
             these figures are lower than an unobserved run's"
                .to_string(),
        );
        let missing = results
            .iter()
            .flat_map(|r| &r.runs)
            .find_map(|x| x.server.as_ref().and_then(|s| s.perf_unavailable.clone()));
        if let Some(why) = missing {
            notes.push(format!(
                "perf events unavailable ({why}): counts come from /proc samples"
            ));
        }
    }
    notes
}

/// Runs the experiment under `conditions`. `progress` receives one line per step (for a status
/// line on stderr).
///
/// Spawns every server and client from the calling thread, which must live until this returns
/// (the kernel's parent-death signal fires when the spawning *thread* exits).
pub fn measure(
    machine: &Machine,
    settings: &PairSettings,
    mut conditions: Conditions,
    progress: &Progress,
) -> Result<PairReport> {
    let placements = placement::plan(machine, &settings.placements);
    if machine.allowed.len() < 2 {
        conditions.notes.push(
            "only one CPU may be used: no cross-CPU placement can be measured here".to_string(),
        );
    }
    let mut env = presets::Env::create(settings.ready_timeout)?;
    let mut setup = presets::build(settings, &mut env)?;
    progress.step(&format!("preparing {}", setup.server.describe()));
    setup.server.prepare(&mut env)?;
    // After the load check and the preparation, so neither is slowed or fooled by them.
    let neighbours = (settings.neighbour_load > 0).then(|| {
        progress.step(&format!(
            "starting {} busy neighbour(s) (spinning threads)",
            settings.neighbour_load
        ));
        crate::load::BusyNeighbours::start(&vec![None; settings.neighbour_load])
    });
    let secs = settings.duration_s;
    let schedule = placement::schedule(placements.len(), settings.repeat);
    let mut runs: Vec<Vec<RunResult>> = vec![Vec::new(); placements.len()];
    let mut running: Option<Option<CpuSet>> = None;
    let mut starts = 0;
    for (k, &i) in schedule.iter().enumerate() {
        crate::signals::check()?;
        let p = &placements[i];
        if running.as_ref() != Some(&p.server_cpus) {
            let on = p
                .server_cpus
                .as_ref()
                .map(|c| format!("CPU {c}"))
                .unwrap_or("no pinning".into());
            progress.step(&format!("starting the server ({on})"));
            setup.server.start(p.server_cpus.as_ref(), &mut env)?;
            running = Some(p.server_cpus.clone());
            starts += 1;
            if settings.warmup {
                let w = if setup.timed_by_us { WARMUP_S } else { secs };
                runner::run_once(machine, p, &mut setup, &mut env, settings, w, k)?;
            }
        }
        let r = runner::run_once(machine, p, &mut setup, &mut env, settings, secs, k)?;
        progress.step(&format!(
            "[{}/{}] {}: {:.0} {}",
            k + 1,
            schedule.len(),
            p.label,
            r.value,
            setup.metric.unit
        ));
        runs[i].push(r);
    }
    setup.server.stop(&mut env);
    drop(neighbours);
    let mut results: Vec<PlacementResult> = placements
        .into_iter()
        .zip(runs)
        .filter_map(|(p, r)| report::summarise(p, r))
        .collect();
    let best = report::rank(&mut results, setup.metric.higher_is_better);
    let notes = run_notes(settings, &results, std::mem::take(&mut env.notes));
    let experiment = report::ExperimentInfo {
        preset: settings.preset_name().map(str::to_string),
        workload: workload(settings),
        server: setup.server.describe(),
        server_command: setup.server.command(),
        client_command: (setup.client)(secs).command(),
        metric_parser: setup.metric.parser.clone(),
        metric_unit: setup.metric.unit.clone(),
        higher_is_better: setup.metric.higher_is_better,
        duration_s: setup.timed_by_us.then_some(secs),
        repeat: settings.repeat,
        server_strategy:
            "restarted with the new affinity (set before exec) whenever its CPUs change".to_string(),
        server_starts: starts,
        warmup: settings.warmup,
        neighbour_load: settings.neighbour_load,
    };
    drop(setup);
    drop(env);
    Ok(PairReport {
        conditions,
        experiment,
        placements: results,
        best,
        notes,
    })
}
