//! The hypervisor side, measured: `cpulab host bench` runs VMs of cpulab's own on this
//! machine's KVM ([`bench`]); `cpulab host` watches the VMs of a KVM host from outside
//! ([`watch`]).

pub mod bench;
pub mod watch;

use crate::experiment::{Direction, Experiment, Figure, LoadWatch, Progress, Unit};
use crate::machine::{Conditions, Machine};
use crate::output::Style;
use crate::report::envelope::Kind;
use anyhow::Result;
use bench::report::HostBenchReport;
use bench::settings::BenchSettings;

/// CLOCK_MONOTONIC now, ns (what `Instant` reads on Linux, but as a number another process can
/// compare with its own: a guest's `--series`, a watcher's window).
pub fn monotonic_ns() -> Result<u64> {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_err(|e| anyhow::anyhow!("cannot read CLOCK_MONOTONIC: {e}"))?;
    Ok(t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
}

/// A borderless text table of rows of cells under `header`: the same rows the HTML page's
/// tables show.
pub fn text_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::NOTHING);
    t.set_header(header.iter().map(|h| h.to_string()));
    for r in rows {
        t.add_row(r.clone());
    }
    t.to_string()
}

/// `cpulab host bench`, as an experiment: its result kind is `host-bench`.
pub struct HostBench;

impl Experiment for HostBench {
    type Settings = BenchSettings;
    type Report = HostBenchReport;
    const KIND: Kind = Kind::Experiment("host-bench");

    fn load_watch(machine: &Machine, s: &BenchSettings) -> Result<Option<LoadWatch>> {
        Ok(Some(LoadWatch::on(
            machine,
            s.cpus.as_ref(),
            std::time::Duration::from_millis(300),
            s.check_load,
        )))
    }

    fn measure(
        machine: &Machine,
        s: &BenchSettings,
        conditions: Conditions,
        progress: &Progress,
    ) -> Result<HostBenchReport> {
        bench::measure(machine, s, conditions, progress)
    }

    fn conditions(r: &HostBenchReport) -> &Conditions {
        &r.conditions
    }

    fn figures(r: &HostBenchReport) -> Vec<Figure> {
        figures(r)
    }

    fn render_text(r: &HostBenchReport, st: &Style) -> String {
        bench::render::render_text(r, st)
    }

    fn render_html(r: &HostBenchReport) -> String {
        bench::render::page(r)
    }
}

fn point_id(p: &bench::report::Point) -> String {
    let mut id = format!("exchange={},placement={}", p.exchange.as_str(), p.placement);
    if let Some(l) = p.halt_poll_limit_ns {
        id += &format!(",halt_poll_ns={l}");
    }
    if let Some(w) = p.poll_window_ns {
        id += &format!(",window_ns={w}");
    }
    id
}

fn figures(r: &HostBenchReport) -> Vec<Figure> {
    let sweep_points = r.sweep.iter().flat_map(|s| s.rows.iter().map(|x| &x.point));
    let mut out: Vec<Figure> = r
        .points
        .iter()
        .chain(sweep_points)
        .filter_map(|p| {
            Figure::from_samples(
                format!("rtt_ns[{}]", point_id(p)),
                format!(
                    "{} ping-pong round trip, vCPU threads {}",
                    p.exchange.as_str(),
                    p.cpus
                ),
                Unit::Nanoseconds,
                Direction::LowerIsBetter,
                p.rtt_ns_per_window.clone(),
            )
        })
        .collect();
    // Two sweep points may share an id with an exchange point (the module default): keep one.
    let mut seen = std::collections::BTreeSet::new();
    out.retain(|f| seen.insert(f.name.clone()));
    for t in &r.timer {
        let limit = t
            .halt_poll_limit_ns
            .map_or(String::new(), |l| format!(",halt_poll_ns={l}"));
        out.extend(Figure::from_samples(
            format!("timer_period_ns[period_ns={}{limit}]", t.period_ns),
            format!(
                "achieved period of a timer armed {} ahead, CPU {}",
                crate::units::fmt_ns(t.period_ns as f64),
                t.cpu
            ),
            Unit::Nanoseconds,
            Direction::LowerIsBetter,
            t.achieved_period_ns_per_window.clone(),
        ));
    }
    for row in &r.share {
        out.extend(Figure::from_samples(
            format!("share[vm1={},vm2={}]", row.vm1_vcpus, row.vm2_vcpus),
            format!(
                "VM1's share beside VM2, {} + {} busy vCPUs on {} CPUs",
                row.vm1_vcpus, row.vm2_vcpus, row.host_cpus
            ),
            Unit::Share,
            Direction::Neither,
            row.vm1_share_samples.clone(),
        ));
    }
    out
}

/// A saved host-bench result, as the registry lists it (its command is `cpulab host bench`).
impl crate::experiment::erased::Listed for HostBench {
    const KIND: Kind = <HostBench as Experiment>::KIND;

    fn render_document(doc: &serde_json::Value, style: &Style) -> Result<(String, String)> {
        crate::experiment::erased::render_as::<HostBench>(doc, style)
    }

    fn figures_of_document(doc: &serde_json::Value) -> Result<Vec<Figure>> {
        crate::experiment::erased::figures_as::<HostBench>(doc)
    }
}

/// `cpulab host`, as an experiment: its result kind is `host`.
pub struct HostWatch;

impl Experiment for HostWatch {
    type Settings = watch::WatchSettings;
    type Report = watch::HostReport;
    const KIND: Kind = Kind::Experiment("host");

    /// The VMs' load is what it watches.
    fn load_watch(_: &Machine, _: &watch::WatchSettings) -> Result<Option<LoadWatch>> {
        Ok(None)
    }

    fn measure(
        machine: &Machine,
        s: &watch::WatchSettings,
        conditions: Conditions,
        progress: &Progress,
    ) -> Result<watch::HostReport> {
        watch::measure(machine, s, conditions, progress)
    }

    fn conditions(r: &watch::HostReport) -> &Conditions {
        &r.conditions
    }

    fn figures(r: &watch::HostReport) -> Vec<Figure> {
        let mut out = Vec::new();
        for vm in &r.vms {
            if let Some(s) = vm.share {
                out.push(Figure::single(
                    format!("vm_share[vm={}]", vm.name),
                    format!("what {}'s running vCPUs got of what they wanted", vm.name),
                    Unit::Share,
                    Direction::HigherIsBetter,
                    s,
                ));
            }
            for c in &vm.vcpus {
                if let Some(w) = c.run_queue_share {
                    out.push(Figure::single(
                        format!("run_queue_share[vm={},vcpu={}]", vm.name, c.vcpu),
                        format!("{} vCPU {}'s run-queue wait (its steal)", vm.name, c.vcpu),
                        Unit::Share,
                        Direction::LowerIsBetter,
                        w,
                    ));
                }
            }
        }
        out
    }

    fn render_text(r: &watch::HostReport, st: &Style) -> String {
        watch::render::render_text(r, st)
    }

    fn render_html(r: &watch::HostReport) -> String {
        watch::render::page(r)
    }
}

/// A saved `cpulab host` result, as the registry lists it.
impl crate::experiment::erased::Listed for HostWatch {
    const KIND: Kind = <HostWatch as Experiment>::KIND;

    fn render_document(doc: &serde_json::Value, style: &Style) -> Result<(String, String)> {
        crate::experiment::erased::render_as::<HostWatch>(doc, style)
    }

    fn figures_of_document(doc: &serde_json::Value) -> Result<Vec<Figure>> {
        crate::experiment::erased::figures_as::<HostWatch>(doc)
    }
}
