//! Calling the experiment modules with the doctor's budget, and condensing what they return
//! (through [`super::adapt`]). One function per experiment; each is the single place that
//! knows how to drive its module for the doctor.

use super::adapt;
use super::measurements::{OsCosts, PresetRun, ScalePoint, ShareCheck, WakeupRun};
use super::mode::{Budget, Mode};
use super::progress::Progress;
use crate::experiment::{Experiment, Level, Progress as Sink};
use crate::machine::Machine;
use crate::oscost::Oscost;
use crate::pair::Pair;
use crate::pingpong::Pingpong;
use crate::scale::Scale;
use crate::share::Share;
use crate::topology::PlacementClass;
use crate::{oscost, pair, pingpong, scale, share};
use anyhow::{Result, bail};
use std::time::Duration;

/// Every ordered pair of usable CPUs when there are few (a full matrix), else one pair per
/// placement class.
fn blocking_pairs(machine: &Machine) -> Vec<pingpong::Placement> {
    let cpus = machine.allowed.to_vec();
    if cpus.len() <= 4 {
        cpus.iter()
            .flat_map(|&a| {
                cpus.iter()
                    .map(move |&b| pingpong::Placement::Pinned { a, b })
            })
            .collect()
    } else {
        machine
            .topology
            .representative_pairs(&machine.allowed)
            .into_iter()
            .map(|p| pingpong::Placement::Pinned { a: p.a, b: p.b })
            .collect()
    }
}

fn pingpong_settings(
    b: &Budget,
    method: pingpong::Method,
    pairs: Vec<pingpong::Placement>,
) -> pingpong::PingpongSettings {
    pingpong::PingpongSettings {
        methods: vec![method],
        pairs: pingpong::PairSpec::List(pairs),
        warmup_s: (b.wakeup_batch_s * 2.0).max(0.05),
        max_time_s: b.wakeup_max_s,
        target_ci_rel: b.wakeup_target_ci,
        batch_s: b.wakeup_batch_s,
        // The doctor checked for other load once, before the battery.
        load_check_s: 0.0,
        ..Default::default()
    }
}

/// A watch of the live application: where its wakeups land, from the scheduler tracepoints.
pub fn watch(
    machine: &Machine,
    target: &crate::watch::Target,
    secs: f64,
    p: &Progress,
) -> Result<crate::doctor::measurements::AppWatch> {
    let sink = |level: Level, m: &str| p.emit(level, &format!("watch: {m}"));
    let sink = Sink::new(&sink);
    let settings = crate::watch::WatchSettings {
        target: target.clone(),
        duration_s: secs,
        ..Default::default()
    };
    let r = crate::watch::run(machine, &settings, &sink)?;
    Ok(crate::doctor::measurements::AppWatch::from_report(&r))
}

/// Wakeup round trips: blocking (pipe) at every pair plus unpinned, and spinning at one pair
/// of each cross-CPU class (spinning on one CPU is meaningless).
pub fn wakeup(machine: &Machine, b: &Budget, p: &Progress) -> Result<Vec<WakeupRun>> {
    let sink = |level: Level, m: &str| p.emit(level, &format!("pingpong: {m}"));
    let sink = Sink::new(&sink);
    let mut pairs = blocking_pairs(machine);
    pairs.push(pingpong::Placement::Unpinned);
    let blocking = Pingpong::run(
        machine,
        &pingpong_settings(b, pingpong::Method::Pipe, pairs),
        &sink,
    )?;
    let mut runs = adapt::wakeup(&blocking);
    let spin_pairs: Vec<pingpong::Placement> = machine
        .topology
        .representative_pairs(&machine.allowed)
        .into_iter()
        .filter(|c| c.class != PlacementClass::SameCpu)
        .map(|c| pingpong::Placement::Pinned { a: c.a, b: c.b })
        .collect();
    if !spin_pairs.is_empty() {
        let spin = Pingpong::run(
            machine,
            &pingpong_settings(b, pingpong::Method::Spin, spin_pairs),
            &sink,
        )?;
        runs.extend(adapt::wakeup(&spin));
    }
    runs.extend(unpinned_with_neighbours(machine, b, p)?);
    Ok(runs)
}

/// The unpinned blocking round trip again, with a busy neighbour (a normal-priority spinning
/// thread) on every usable CPU but the first: field notes A's "adding load made it faster".
fn unpinned_with_neighbours(machine: &Machine, b: &Budget, p: &Progress) -> Result<Vec<WakeupRun>> {
    let others: Vec<Option<u32>> = machine
        .allowed
        .to_vec()
        .into_iter()
        .skip(1)
        .map(Some)
        .collect();
    if others.is_empty() {
        return Ok(vec![]);
    }
    let n = others.len();
    let sink =
        |level: Level, m: &str| p.emit(level, &format!("pingpong with {n} busy neighbour(s): {m}"));
    let sink = Sink::new(&sink);
    let busy = share::load::BusyNeighbours::start(&others);
    let r = Pingpong::run(
        machine,
        &pingpong_settings(
            b,
            pingpong::Method::Pipe,
            vec![pingpong::Placement::Unpinned],
        ),
        &sink,
    );
    drop(busy);
    let mut runs = adapt::wakeup(&r?);
    for w in &mut runs {
        w.neighbour_load = Some(others.len());
    }
    Ok(runs)
}

/// The OS primitive costs and the frequency ramp.
pub fn oscost(machine: &Machine, mode: Mode, p: &Progress) -> Result<OsCosts> {
    let mut s = match mode {
        Mode::Quick => oscost::OscostSettings::quick(),
        _ => oscost::OscostSettings::standard(),
    };
    if mode == Mode::Thorough {
        s.batches = 60;
        if let Some(f) = s.frequency.as_mut() {
            f.trials = 6;
        }
    }
    let r = Oscost::run(machine, &s, &Sink::new(&|l, m| p.emit(l, m)))?;
    Ok(adapt::oscost(&r))
}

/// One CPU-bound worker alone, then one per usable CPU, no burners: on an idle machine each
/// worker keeps a whole CPU.
pub fn share(machine: &Machine, b: &Budget, p: &Progress) -> Result<ShareCheck> {
    let n = machine.allowed.len().max(1);
    let s = share::ShareSettings {
        threads: if n > 1 { vec![1, n] } else { vec![1] },
        burners: vec![],
        duration: Duration::from_secs_f64(b.share_run_s),
        repeats: b.share_repetitions,
        ..share::ShareSettings::single(1, 0)
    };
    let r = Share::run(machine, &s, &Sink::new(&|l, m| p.emit(l, m)))?;
    adapt::share(&r).ok_or_else(|| anyhow::anyhow!("the share check measured no worker rate"))
}

/// Fib at 1..=usable CPUs threads, compact against scatter.
pub fn scale(machine: &Machine, b: &Budget, p: &Progress) -> Result<Vec<ScalePoint>> {
    let mut s = scale::ScaleSettings::quick(machine);
    s.policies = vec![scale::Policy::Compact, scale::Policy::Scatter];
    s.duration = Duration::from_secs_f64(b.scale_run_s);
    let r = Scale::run(machine, &s, &Sink::new(&|l, m| p.emit(l, m)))?;
    Ok(adapt::scale(&r))
}

/// A real application preset under the automatic placements.
pub fn preset(machine: &Machine, name: &str, mode: Mode, p: &Progress) -> Result<Vec<PresetRun>> {
    let b = mode.budget();
    let preset = match name {
        "pgbench" => pair::settings::Preset::Pgbench,
        "http" => pair::settings::Preset::Http,
        other => bail!("unknown preset {other}"),
    };
    let mut s =
        pair::settings::PairSettings::preset(preset, b.preset_run_s.round().max(1.0) as u32);
    s.check_load = false;
    let sink = |level: Level, m: &str| p.emit(level, &format!("{name}: {m}"));
    let r = Pair::run(machine, &s, &Sink::new(&sink))?;
    Ok(adapt::pair(&r, name))
}
