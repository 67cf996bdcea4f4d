//! The doctor's figures, typed: what `compare` and the history read from a doctor result.
//!
//! A doctor report holds many measurements in the shape its rules read ([`Measurements`]).
//! Before this module, `compare` walked the JSON document and guessed each figure's direction
//! from its key, which cannot tell `migrations_per_s` (a cost counted per second) from
//! `messages_per_s` (a rate). Here every figure is stated once with its unit, its direction and
//! its raw samples, as every experiment's `figures()` does, so a reader asks for a doctor figure
//! by name (`rtt_ns[method=pipe,class=shared-llc,cpus=0:1]`) and never guesses.
//!
//! Names follow the experiments' own: `NAME[identity]`, the identity being what tells two runs
//! of one document apart. A figure measured once (a percentile, a count per round trip) is a
//! single value: it is shown and stored, but a test of noise needs samples.

use super::DoctorReport;
use super::measurements::{
    AppWatch, Measurements, OsCosts, PresetRun, RunCounters, ScalePoint, ShareCheck, ThroughputRun,
    WakeupRun,
};
use crate::experiment::Direction::{HigherIsBetter, LowerIsBetter, Neither};
use crate::experiment::{Direction, Figure, Unit};

/// Every typed figure of a doctor report.
pub fn figures(r: &DoctorReport) -> Vec<Figure> {
    let mut out = of_measurements(&r.measurements);
    out.push(Figure::single(
        "duration_s",
        "whole doctor run",
        Unit::Seconds,
        Direction::Neither,
        r.duration_s,
    ));
    out
}

fn wakeup_identity(w: &WakeupRun) -> String {
    let mut id = format!(
        "method={},class={},cpus={}",
        w.method,
        w.class.as_str(),
        w.cpus.as_deref().unwrap_or("unpinned")
    );
    if let Some(n) = w.neighbour_load {
        id += &format!(",neighbours={n}");
    }
    id
}

/// A saved doctor result, as the registry lists it (its command is the built-in `cpulab doctor`):
/// its typed figures (unit, direction, samples) are what `compare` and the history read.
impl crate::experiment::erased::Listed for DoctorReport {
    const KIND: crate::report::envelope::Kind = crate::report::envelope::Kind::Doctor;

    fn render_document(
        doc: &serde_json::Value,
        style: &crate::output::Style,
    ) -> anyhow::Result<(String, String)> {
        render_document(doc, style)
    }

    fn figures_of_document(doc: &serde_json::Value) -> anyhow::Result<Vec<Figure>> {
        figures_of_document(doc)
    }
}

/// Text and page of a loaded doctor document, rendered exactly as it was judged (the
/// registry's renderer).
pub fn render_document(
    doc: &serde_json::Value,
    _style: &crate::output::Style,
) -> anyhow::Result<(String, String)> {
    let r = typed(doc)?;
    Ok((super::text::render(&r), super::html::page(&r)))
}

/// The typed figures of a loaded doctor document (the registry's reader).
pub fn figures_of_document(doc: &serde_json::Value) -> anyhow::Result<Vec<Figure>> {
    Ok(figures(&typed(doc)?))
}

fn typed(doc: &serde_json::Value) -> anyhow::Result<DoctorReport> {
    serde_json::from_value(doc.clone()).map_err(|e| {
        crate::error::bad_input(format!(
            "this doctor result does not match its schema ({e}); write it again with `cpulab doctor --json`"
        ))
    })
}

/// The figures of the measurements alone (what a hand-built report's rules also read).
pub fn of_measurements(m: &Measurements) -> Vec<Figure> {
    let mut out: Vec<Figure> = m.wakeup.iter().flat_map(wakeup_figures).collect();
    out.extend(throughput_figures(&m.throughput));
    if let Some(o) = &m.oscost {
        out.extend(oscost_figures(o));
    }
    if let Some(s) = &m.share {
        out.extend(share_figure(s));
    }
    out.extend(scaling_figures(&m.scaling));
    out.extend(m.presets.iter().flat_map(preset_figures));
    out.extend(counter_figures(&m.counters));
    if let Some(a) = &m.app_watch {
        out.extend(watch_figures(a));
    }
    out
}

/// A wakeup run's figures: its round trips, percentiles, counters per round trip,
/// migrations and share on one CPU.
fn wakeup_figures(w: &WakeupRun) -> Vec<Figure> {
    let mut out = Vec::new();
    let id = wakeup_identity(w);
    let what = format!(
        "{} round trip, {} ({})",
        w.method,
        w.class.as_str(),
        w.cpus.as_deref().unwrap_or("unpinned")
    );
    out.extend(Figure::from_samples(
        format!("rtt_ns[{id}]"),
        what.clone(),
        Unit::Nanoseconds,
        LowerIsBetter,
        w.batch_means_ns.clone(),
    ));
    for (name, v) in [("p50_ns", w.p50_ns), ("p99_ns", w.p99_ns)] {
        out.push(Figure::single(
            format!("{name}[{id}]"),
            format!("{what}, {}", &name[..3]),
            Unit::Nanoseconds,
            LowerIsBetter,
            v,
        ));
    }
    for (counter, v) in &w.per_round_trip {
        out.push(Figure::single(
            format!("{counter}_per_round_trip[{id}]"),
            format!("{counter} per round trip, {what}"),
            Unit::PerOperation,
            LowerIsBetter,
            *v,
        ));
    }
    // More migrations per second is worse although the name ends in a rate: the reason
    // directions are typed rather than read from names.
    if let Some(v) = w.migrations_per_s {
        out.push(Figure::single(
            format!("migrations_per_s[{id}]"),
            format!("CPU migrations of both ends per second, {what}"),
            Unit::PerSecond,
            LowerIsBetter,
            v,
        ));
    }
    if let Some(v) = w.same_cpu_share {
        out.push(Figure::single(
            format!("same_cpu_share[{id}]"),
            format!("share of the run on one CPU, {what}"),
            Unit::Share,
            Neither,
            v,
        ));
    }
    out
}

/// The messaging rate of each placement.
fn throughput_figures(runs: &[ThroughputRun]) -> Vec<Figure> {
    let mut out = Vec::new();
    for t in runs {
        let id = format!("test={},placement={}", t.test, t.placement);
        out.extend(Figure::from_samples(
            format!("messages_per_s[{id}]"),
            format!("{} messages per second, {}", t.test, t.placement),
            Unit::PerSecond,
            HigherIsBetter,
            t.samples_per_s.clone(),
        ));
    }
    out
}

/// The OS primitives' costs and the loop's speed cold, warm and its ramp.
fn oscost_figures(o: &OsCosts) -> Vec<Figure> {
    let mut out = Vec::new();
    for p in &o.primitives {
        out.extend(Figure::from_samples(
            format!("cost_ns[name={}]", p.name),
            p.name.replace('_', " "),
            Unit::Nanoseconds,
            LowerIsBetter,
            p.samples_ns.clone(),
        ));
    }
    if let Some(f) = &o.frequency {
        // A loop's speed is a clock frequency only when the loop retires one iteration per
        // cycle; otherwise it is a rate of the loop, compared as such.
        let unit = if f.clock_mhz {
            Unit::Megahertz
        } else {
            Unit::Other
        };
        for (name, label, s) in [
            (
                "cold_mhz",
                "loop speed after idle (cold)",
                &f.cold_samples_mhz,
            ),
            (
                "warm_mhz",
                "loop speed under load (warm)",
                &f.warm_samples_mhz,
            ),
        ] {
            out.extend(Figure::from_samples(
                name,
                label,
                unit,
                HigherIsBetter,
                s.clone(),
            ));
        }
        if let Some(ms) = f.ramp_up_ms {
            out.push(Figure::single(
                "ramp_up_s",
                "time to 95% of the warm loop speed",
                Unit::Seconds,
                LowerIsBetter,
                ms / 1e3,
            ));
        }
    }
    out
}

/// The parallel speedups.
fn scaling_figures(points: &[ScalePoint]) -> Vec<Figure> {
    let mut out = Vec::new();
    for p in points {
        out.extend(Figure::from_samples(
            format!(
                "speedup[workload={},policy={},threads={}]",
                p.workload, p.policy, p.threads
            ),
            format!(
                "{} speedup, {} placement, {} threads",
                p.workload, p.policy, p.threads
            ),
            Unit::Ratio,
            HigherIsBetter,
            p.speedup_samples.clone(),
        ));
    }
    out
}

/// An application's rate at one placement and its counters per transaction.
fn preset_figures(p: &PresetRun) -> Vec<Figure> {
    let mut out = Vec::new();
    let id = format!("preset={},placement={}", p.preset, p.placement);
    out.extend(Figure::from_samples(
        format!("per_s[{id}]"),
        format!("{} per second, {}", p.workload, p.placement),
        Unit::PerSecond,
        HigherIsBetter,
        p.samples_per_s.clone(),
    ));
    for (counter, v) in &p.per_transaction {
        out.push(Figure::single(
            format!("{counter}_per_transaction[{id}]"),
            format!("{counter} per transaction, {}", p.workload),
            Unit::PerOperation,
            LowerIsBetter,
            *v,
        ));
    }
    out
}

/// Steal and cgroup throttling over the battery.
fn counter_figures(c: &RunCounters) -> Vec<Figure> {
    let mut out = Vec::new();
    out.extend(Figure::from_samples(
        "steal_pct",
        "steal on the allowed CPUs, percent, one sample per experiment",
        Unit::Other,
        LowerIsBetter,
        c.steal_samples_pct.clone(),
    ));
    if let Some(s) = c.cfs_throttled_s {
        out.push(Figure::single(
            "cfs_throttled_s",
            "seconds the cgroup was throttled during the battery",
            Unit::Seconds,
            LowerIsBetter,
            s,
        ));
    }
    out
}

/// The watched processes' shares of wakeups placed on another CPU.
fn watch_figures(a: &AppWatch) -> Vec<Figure> {
    let mut out = Vec::new();
    for p in &a.processes {
        out.push(Figure::single(
            format!("cross_share[process={}]", p.name),
            format!("{}: share of wakeups placed on another CPU", p.name),
            Unit::Share,
            Neither,
            p.cross_share,
        ));
    }
    out
}

/// Each worker's share of one worker alone, when its samples give a figure.
fn share_figure(s: &ShareCheck) -> Option<Figure> {
    Figure::from_samples(
        format!("share[workers={}]", s.workers),
        format!(
            "each of {} CPU-bound workers' share of one alone",
            s.workers
        ),
        Unit::Share,
        HigherIsBetter,
        s.share_samples.clone(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::MeanCi;
    use crate::topology::PlacementClass;

    fn run(migrations: f64) -> WakeupRun {
        WakeupRun {
            method: "pipe".into(),
            blocking: true,
            class: PlacementClass::Unpinned,
            cpus: None,
            rtt_ns: MeanCi::of(&[1.0, 2.0]).unwrap(),
            p50_ns: 1.0,
            p99_ns: 2.0,
            batch_means_ns: vec![1.0, 2.0],
            per_round_trip: [("irq_CAL".to_string(), 1.0)].into(),
            steal_pct: 0.0,
            noisy: false,
            same_cpu_share: Some(0.5),
            migrations_per_s: Some(migrations),
            neighbour_load: None,
        }
    }

    #[test]
    fn every_figure_name_is_unique_and_typed() {
        let m = Measurements {
            wakeup: vec![run(10.0)],
            ..Default::default()
        };
        let f = of_measurements(&m);
        let mut names: Vec<_> = f.iter().map(|x| x.name.clone()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), f.len());
        let mig = f
            .iter()
            .find(|x| x.name.starts_with("migrations_per_s"))
            .unwrap();
        assert_eq!(mig.direction, Direction::LowerIsBetter);
        assert_eq!(mig.unit, Unit::PerSecond);
        let rtt = f.iter().find(|x| x.name.starts_with("rtt_ns")).unwrap();
        assert_eq!(rtt.samples, vec![1.0, 2.0]);
        assert!(rtt.ci.is_some());
    }
}
