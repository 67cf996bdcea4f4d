//! Calling the experiment modules with the doctor's budget, and condensing what they return
//! (through [`super::adapt`]). One function per experiment; each is the single place that
//! knows how to drive its module for the doctor, and sizes its work to the stage's
//! [`Deadline`], returning what it left out when the deadline cut it short.

use super::adapt;
use super::measurements::{OsCosts, PresetRun, ScalePoint, ShareCheck, WakeupRun};
use super::mode::{Budget, Deadline, Mode};
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

/// Seconds kept after the watch's window for the last drain and the report.
const WATCH_CLOSE_S: f64 = 0.3;
/// A window shorter than this sees too few wakeups to judge: the watch is skipped instead.
pub const MIN_WATCH_S: f64 = 0.5;

/// The watch's window once `left_s` of its stage's deadline remain: what was asked, cut to
/// what is left after the close; `None` when less than [`MIN_WATCH_S`] would remain (pure).
pub fn watch_window_s(asked_s: f64, left_s: f64) -> Option<f64> {
    let w = asked_s.min(left_s - WATCH_CLOSE_S);
    (w >= MIN_WATCH_S).then_some(w)
}

/// A watch of the live application: where its wakeups land, from the scheduler tracepoints.
/// The deadline covers opening the mechanism (BTF, loading and attaching programs: seconds in
/// a debug build) as well as the window: the window gets what opening left, and the watch is
/// skipped when that is under [`MIN_WATCH_S`]. The second value says what the deadline cut.
pub fn watch(
    machine: &Machine,
    target: &crate::watch::Target,
    secs: f64,
    p: &Progress,
    deadline: Deadline,
) -> Result<(crate::doctor::measurements::AppWatch, Option<String>)> {
    if watch_window_s(secs, deadline.left_s()).is_none() {
        anyhow::bail!(
            "{:.1} s were left before the stage's deadline, too little to set the watch up and \
             watch for {MIN_WATCH_S} s",
            deadline.left_s().max(0.0)
        );
    }
    let sink = |level: Level, m: &str| p.emit(level, &format!("watch: {m}"));
    let sink = Sink::new(&sink);
    let settings = crate::watch::WatchSettings {
        target: target.clone(),
        duration_s: secs,
        ..Default::default()
    };
    let opened = std::time::Instant::now();
    let mut session = crate::watch::Session::open(machine, &settings, &sink)?;
    let setup_s = opened.elapsed().as_secs_f64();
    let Some(window) = watch_window_s(secs, deadline.left_s()) else {
        anyhow::bail!(
            "setting the watch up (BTF, programs) took {setup_s:.1} s and left {:.1} s before \
             the stage's deadline, under the {MIN_WATCH_S} s a window needs",
            deadline.left_s().max(0.0)
        );
    };
    session.shorten_window(window);
    session.enable(&sink)?;
    while session.read()?.is_none() {
        std::thread::sleep(session.poll_interval());
    }
    let r = session.close()?;
    let mut w = crate::doctor::measurements::AppWatch::from_report(&r);
    w.setup_s = Some(setup_s);
    let cut = (window < secs).then(|| {
        format!("a {window:.1} s window of {secs:.1} s: setting the watch up took {setup_s:.1} s")
    });
    for p in &mut w.processes {
        // A short-lived process (one pgbench run) may be gone: then a live one of its name.
        let pid = p
            .pids
            .iter()
            .copied()
            .find(|pid| cgroup_of(&machine.root, *pid).is_some())
            .or_else(|| live_pid_named(&machine.root, &p.name));
        let memberships = pid.and_then(|pid| {
            std::fs::read_to_string(machine.root.join(format!("proc/{pid}/cgroup"))).ok()
        });
        let m = crate::probe::cgroup::parse_proc_cgroup(memberships.as_deref().unwrap_or(""));
        p.cgroup = pick_cgroup(&m);
        p.unit = crate::probe::cgroup::systemd_unit(&m);
    }
    Ok((w, cut))
}

/// A live process whose command name is `name`.
fn live_pid_named(root: &std::path::Path, name: &str) -> Option<i32> {
    std::fs::read_dir(root.join("proc"))
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .find(|pid| {
            std::fs::read_to_string(root.join(format!("proc/{pid}/comm")))
                .is_ok_and(|c| c.trim() == name)
        })
}

/// The cgroup a process lives in, from /proc/<pid>/cgroup: the v1 cpuset hierarchy's path when
/// there is one (that is where a cpuset is set), else the v2 path.
pub fn cgroup_of(root: &std::path::Path, pid: i32) -> Option<String> {
    let text = std::fs::read_to_string(root.join(format!("proc/{pid}/cgroup"))).ok()?;
    pick_cgroup(&crate::probe::cgroup::parse_proc_cgroup(&text))
}

/// The cpuset hierarchy's path, else the unified (v2) one (pure).
pub fn pick_cgroup(m: &[crate::probe::cgroup::Membership]) -> Option<String> {
    m.iter()
        .find(|l| l.controllers.iter().any(|c| c == "cpuset"))
        .or_else(|| {
            m.iter()
                .find(|l| l.hierarchy == 0 && l.controllers.is_empty())
        })
        .map(|l| l.path.clone())
}

/// Overhead of one pingpong run beyond its warm-up and timed batches (threads, pinning).
const PINGPONG_RUN_OVERHEAD_S: f64 = 0.05;

/// The budget's wakeup settings with each run's time capped so `runs_left` runs fit in what
/// is left of the deadline; `None` when not even a short run fits.
fn fitted(b: &Budget, runs_left: usize, deadline: Deadline) -> Option<Budget> {
    let per_run = deadline.left_s() / runs_left.max(1) as f64;
    let mut fit = b.clone();
    let warmup = (b.wakeup_batch_s * 2.0).max(0.05);
    fit.wakeup_max_s = b
        .wakeup_max_s
        .min(per_run - warmup - PINGPONG_RUN_OVERHEAD_S);
    // At least three batches, or the run says nothing.
    (fit.wakeup_max_s >= 3.0 * b.wakeup_batch_s).then_some(fit)
}

/// Wakeup round trips: blocking (pipe) at every pair plus unpinned, and spinning at one pair
/// of each cross-CPU class (spinning on one CPU is meaningless), each run capped so they all
/// fit before the deadline; a part that no longer fits is left out and named.
pub fn wakeup(
    machine: &Machine,
    b: &Budget,
    p: &Progress,
    deadline: Deadline,
) -> Result<(Vec<WakeupRun>, Option<String>)> {
    let sink = |level: Level, m: &str| p.emit(level, &format!("pingpong: {m}"));
    let sink = Sink::new(&sink);
    let mut pairs = blocking_pairs(machine);
    pairs.push(pingpong::Placement::Unpinned);
    let spin_pairs: Vec<pingpong::Placement> = machine
        .topology
        .representative_pairs(&machine.allowed)
        .into_iter()
        .filter(|c| c.class != PlacementClass::SameCpu)
        .map(|c| pingpong::Placement::Pinned { a: c.a, b: c.b })
        .collect();
    let neighbours = usize::from(machine.allowed.len() > 1);
    let mut left = pairs.len() + spin_pairs.len() + neighbours;
    let mut cut = Vec::new();
    let mut runs = Vec::new();
    match fitted(b, left, deadline) {
        Some(fit) => {
            left -= pairs.len();
            let blocking = Pingpong::run(
                machine,
                &pingpong_settings(&fit, pingpong::Method::Pipe, pairs),
                &sink,
            )?;
            runs = adapt::wakeup(&blocking);
        }
        None => cut.push("the blocking round trips"),
    }
    if !spin_pairs.is_empty() {
        match fitted(b, left, deadline) {
            Some(fit) => {
                left -= spin_pairs.len();
                let spin = Pingpong::run(
                    machine,
                    &pingpong_settings(&fit, pingpong::Method::Spin, spin_pairs),
                    &sink,
                )?;
                runs.extend(adapt::wakeup(&spin));
            }
            None => cut.push("the spinning round trips"),
        }
    }
    if neighbours > 0 {
        match fitted(b, left, deadline) {
            Some(fit) => runs.extend(unpinned_with_neighbours(machine, &fit, p)?),
            None => cut.push("the unpinned round trip beside busy neighbours"),
        }
    }
    let cut = (!cut.is_empty()).then(|| format!("left out {}", cut.join(", ")));
    Ok((runs, cut))
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
    let busy = crate::load::BusyNeighbours::start(&others);
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

/// Seconds one frequency trial takes: idle, load and warm window.
fn freq_trial_s(f: &oscost::freq::FreqSettings) -> f64 {
    (f.idle + f.load + f.warm_window).as_secs_f64()
}

/// The OS primitive costs and the frequency ramp, fewer batches and trials when the deadline
/// is short: the primitives' batches first (at most half the time), the frequency trials in
/// the rest (two at least, with a shorter load when two full ones do not fit).
pub fn oscost(
    machine: &Machine,
    mode: Mode,
    p: &Progress,
    deadline: Deadline,
) -> Result<(OsCosts, Option<String>)> {
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
    let left = deadline.left_s();
    let mut cut = Vec::new();
    // Each primitive: a calibration and a warm-up batch besides its timed ones; slow ones
    // (fork + exec) overshoot their target, hence the factor 2.
    let per_batch = s.batch_target.as_secs_f64() * oscost::PRIMITIVES.len() as f64 * 2.0;
    let batches = ((left * 0.5 / per_batch) as usize)
        .saturating_sub(2)
        .clamp(3, s.batches);
    if batches < s.batches {
        cut.push(format!("{batches} of {} batches per primitive", s.batches));
        s.batches = batches;
    }
    if let Some(f) = s.frequency.as_mut() {
        let avail = (left - per_batch * (s.batches + 2) as f64) * 0.9;
        let trials = ((avail / freq_trial_s(f)) as usize).min(f.trials);
        if trials < f.trials && trials < 2 {
            // Two trials give an interval; shorten the sustained load instead.
            let load = avail / 2.0 - (f.idle + f.warm_window).as_secs_f64();
            if load < 0.2 {
                cut.push("no frequency trial".to_string());
                s.frequency = None;
            } else {
                cut.push(format!(
                    "2 frequency trials with {load:.2} s of load instead of {:.2} s",
                    f.load.as_secs_f64()
                ));
                f.trials = 2;
                f.load = Duration::from_secs_f64(load);
            }
        } else if trials < f.trials {
            cut.push(format!("{trials} of {} frequency trials", f.trials));
            f.trials = trials;
        }
    }
    let r = Oscost::run(machine, &s, &Sink::new(&|l, m| p.emit(l, m)))?;
    Ok((adapt::oscost(&r), (!cut.is_empty()).then(|| cut.join(", "))))
}

/// One CPU-bound worker alone, then one per usable CPU, no burners: on an idle machine each
/// worker keeps a whole CPU. Fewer repetitions (at least two) when the deadline is short.
pub fn share(
    machine: &Machine,
    b: &Budget,
    p: &Progress,
    deadline: Deadline,
) -> Result<(ShareCheck, Option<String>)> {
    let n = machine.allowed.len().max(1);
    let threads = if n > 1 { vec![1, n] } else { vec![1] };
    // Each run: its duration and about 50 ms of thread start-up.
    let per_rep = threads.len() as f64 * (b.share_run_s + 0.05);
    let repeats = ((deadline.left_s() / per_rep) as usize).clamp(2, b.share_repetitions);
    let s = share::ShareSettings {
        threads,
        burners: vec![],
        duration: Duration::from_secs_f64(b.share_run_s),
        repeats,
        ..share::ShareSettings::single(1, 0)
    };
    let r = Share::run(machine, &s, &Sink::new(&|l, m| p.emit(l, m)))?;
    let cut = (repeats < b.share_repetitions)
        .then(|| format!("{repeats} of {} repetitions", b.share_repetitions));
    adapt::share(&r)
        .map(|x| (x, cut))
        .ok_or_else(|| anyhow::anyhow!("the share check measured no worker rate"))
}

/// The thread counts the doctor's scale stage runs: one, the count where compact doubles up
/// the most groups more than scatter, and all usable CPUs. Three counts whatever the machine,
/// so the stage's time does not grow with the CPU count.
pub fn scale_counts(machine: &Machine) -> Vec<usize> {
    let n = machine.allowed.len().max(1);
    let all: Vec<usize> = (1..=n).collect();
    let (q, _) = scale::answer::question_threads(&machine.topology, &machine.allowed, &all);
    let mut counts = vec![1, q, n];
    counts.sort_unstable();
    counts.dedup();
    counts
}

/// Seconds one scale run may take for `runs` runs (warm-ups included) to fit `left_s`, at
/// most the budget's run length (pure).
pub fn scale_run_s(left_s: f64, runs: usize, budget_run_s: f64) -> f64 {
    ((left_s - 0.5) / (runs.max(1) as f64 * SCALE_RUN_OVERHEAD)).clamp(0.05, budget_run_s)
}

/// A run's time with its warm-up (fib of 4 less: 1/phi^4 of it) and a fresh pinned pool.
pub const SCALE_RUN_OVERHEAD: f64 = 1.2;

/// Fib at 1, the question count and all usable CPUs, compact against scatter: three sweeps at
/// least, more until the policies separate or the intervals are within ±10%, within the
/// stage's deadline; runs shortened when the deadline is short.
pub fn scale(
    machine: &Machine,
    b: &Budget,
    p: &Progress,
    deadline: Deadline,
) -> Result<(Vec<ScalePoint>, Option<String>)> {
    let mut s = scale::ScaleSettings::quick(machine);
    s.policies = vec![scale::Policy::Compact, scale::Policy::Scatter];
    s.threads = scale_counts(machine);
    let runs = s.repeats * s.policies.len() * s.threads.len();
    let secs = scale_run_s(deadline.left_s(), runs, b.scale_run_s);
    s.duration = Duration::from_secs_f64(secs);
    s.max_time = Duration::from_secs_f64((deadline.left_s() - 0.3).max(0.0));
    let r = Scale::run(machine, &s, &Sink::new(&|l, m| p.emit(l, m)))?;
    let mut cut: Vec<String> = Vec::new();
    if secs < b.scale_run_s {
        cut.push(format!(
            "runs of {secs:.2} s instead of {:.2} s",
            b.scale_run_s
        ));
    }
    if let Some(a) = r
        .answer
        .as_ref()
        .filter(|a| a.status == scale::answer::Status::Open)
    {
        cut.push(a.line.clone());
    }
    Ok((adapt::scale(&r), (!cut.is_empty()).then(|| cut.join("; "))))
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

#[cfg(test)]
mod tests {
    use super::{MIN_WATCH_S, SCALE_RUN_OVERHEAD, pick_cgroup, scale_run_s, watch_window_s};

    #[test]
    fn scale_runs_shrink_to_fit_the_deadline_and_never_grow_past_the_budget() {
        // 3 sweeps x 2 policies x 3 counts = 18 runs.
        assert_eq!(scale_run_s(60.0, 18, 0.5), 0.5);
        let s = scale_run_s(8.0, 18, 0.5);
        assert!((s - 7.5 / (18.0 * SCALE_RUN_OVERHEAD)).abs() < 1e-12, "{s}");
        assert_eq!(scale_run_s(0.0, 18, 0.5), 0.05);
    }

    // Issue 22: the watch stage took 7.5 s against 2.8 s planned; its setup was outside the
    // deadline.
    #[test]
    fn the_watch_window_gets_what_setup_left_of_the_deadline() {
        // Room for all of it.
        assert_eq!(watch_window_s(2.0, 5.0), Some(2.0));
        // Setup ate most of the deadline: the window is cut, the close still fits.
        let w = watch_window_s(2.0, 1.5).unwrap();
        assert!((MIN_WATCH_S..=1.5).contains(&w), "{w}");
        // Nothing worth watching is left: skipped, never a window past the deadline.
        assert_eq!(watch_window_s(2.0, 0.6), None);
        assert_eq!(watch_window_s(2.0, -1.0), None);
    }
    use crate::probe::cgroup::parse_proc_cgroup;

    #[test]
    fn the_cpuset_hierarchy_wins_else_the_unified_one() {
        let v2 = parse_proc_cgroup("0::/system.slice/postgresql@15-main.service\n");
        assert_eq!(
            pick_cgroup(&v2).as_deref(),
            Some("/system.slice/postgresql@15-main.service")
        );
        let v1 = parse_proc_cgroup(
            "12:cpuset:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n0::/\n",
        );
        assert_eq!(pick_cgroup(&v1).as_deref(), Some("/docker/abc"));
        assert_eq!(pick_cgroup(&[]), None);
    }
}
