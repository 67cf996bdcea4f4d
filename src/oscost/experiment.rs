//! `oscost` behind the common [`Experiment`] interface: its figures and its page.

use super::{OpCost, OscostReport, OscostSettings};
use crate::experiment::{Direction, Experiment, Figure, Progress, Unit};
use crate::machine::{Conditions, Machine};
use crate::output::Style;
use crate::report::envelope::Kind;
use crate::report::html::{self, chart, section};
use crate::report::svg::{self, Bar};
use crate::units::fmt_ns;
use anyhow::Result;
use maud::html;

/// The OS-primitive cost experiment.
pub struct Oscost;

impl Experiment for Oscost {
    type Settings = OscostSettings;
    type Report = OscostReport;
    const KIND: Kind = Kind::Experiment("oscost");

    fn load_watch(
        machine: &Machine,
        settings: &OscostSettings,
    ) -> Result<Option<crate::experiment::LoadWatch>> {
        super::load_watch(machine, settings).map(Some)
    }

    fn measure(
        machine: &Machine,
        settings: &OscostSettings,
        conditions: Conditions,
        progress: &Progress,
    ) -> Result<OscostReport> {
        super::measure(machine, settings, conditions, progress)
    }

    fn conditions(report: &OscostReport) -> &Conditions {
        &report.conditions
    }

    /// Every primitive's cost per operation (samples: every batch), and the frequency probe's
    /// cold and warm loop speeds (samples: every trial).
    fn figures(report: &OscostReport) -> Vec<Figure> {
        let mut out: Vec<Figure> = report
            .ops
            .iter()
            .filter_map(|o| {
                Figure::from_samples(
                    format!("cost_ns[name={}]", o.name),
                    o.what.clone(),
                    Unit::Nanoseconds,
                    Direction::LowerIsBetter,
                    o.batch_samples_ns.clone(),
                )
            })
            .collect();
        if let Some(f) = &report.frequency {
            // MHz only when the clock check accepted the loop as a clock; else a loop rate.
            let (unit, scale) = match f.cycles_per_iteration {
                Some(c) => (Unit::Megahertz, c * 1e3),
                None => (Unit::PerSecond, 1e9),
            };
            for (name, label, v) in [
                (
                    "cold_speed",
                    "loop speed after idle (cold)",
                    f.trials
                        .iter()
                        .map(|t| t.cold_per_ns * scale)
                        .collect::<Vec<_>>(),
                ),
                (
                    "warm_speed",
                    "loop speed under load (warm)",
                    f.trials.iter().map(|t| t.warm_per_ns * scale).collect(),
                ),
            ] {
                out.extend(Figure::from_samples(
                    name,
                    label,
                    unit,
                    Direction::HigherIsBetter,
                    v,
                ));
            }
        }
        out
    }

    fn render_text(report: &OscostReport, style: &Style) -> String {
        super::render::render(report, style)
    }

    fn render_html(r: &OscostReport) -> String {
        page(r)
    }
}

fn bar(o: &OpCost) -> Option<Bar> {
    let m = o.per_op_ns.as_ref()?;
    Some(Bar {
        label: o.name.replace('_', " "),
        value: m.mean,
        ci: Some((m.ci95_low, m.ci95_high)),
        accent: false,
    })
}

fn page(r: &OscostReport) -> String {
    // Microsecond primitives and millisecond ones on one axis would hide the former.
    let (fast, slow): (Vec<Bar>, Vec<Bar>) = r
        .ops
        .iter()
        .filter_map(bar)
        .partition(|b| b.value < 10_000.0);
    let freq = loop_speed_chart(r);
    let rows = op_rows(r);
    let p = &r.platform;
    let body = html! {
        (section(
            "Cost per operation",
            "Mean of the batches with the 95% interval as whiskers; every batch is kept in the \
             JSON so two runs compare with a significance test (cpulab compare).",
            html! {
                @if !fast.is_empty() {
                    (chart(svg::bars("Cost per operation: entering the kernel and switching", &fast, &fmt_ns)))
                }
                @if !slow.is_empty() {
                    (chart(svg::bars("Cost per operation: creating tasks and mapping memory", &slow, &fmt_ns)))
                }
            },
        ))
        (section(
            "Loop speed after idle and under load",
            "A dependent loop timed in short slices after idle (cold) and after sustained load \
             (warm): how far the CPU's clock ramps.",
            freq.map(chart).unwrap_or_else(|| html! {}),
        ))
        section {
            h2 { "Every primitive" }
            (html::table(&["primitive", "mean ±95%", "median", "min", "check"], &rows, 1))
        }
        section {
            h2 { "Platform" }
            ul.plain {
                li { "mitigations: " (p.mitigations_summary)
                    @if !p.cmdline_mitigation_options.is_empty() {
                        " (" (p.cmdline_mitigation_options.join(" ")) ")"
                    }
                }
                li { "clocksource: " (p.clocksource.as_deref().unwrap_or("unknown")) }
                li { "transparent huge pages: " (p.thp_enabled.as_deref().unwrap_or("unknown")) }
            }
        }
        (html::conditions(&r.conditions, &[]))
    };
    let header = html! {
        p.facts {
            b { (r.conditions.hostname) } " · kernel " (r.conditions.kernel) " · pinned to CPU "
            (r.cpu) " · " (r.batches) " batches per primitive"
        }
    };
    html::page("cpulab oscost", header, body)
}

/// The loop-speed chart: a dependent loop's rate after idle and under load, where measured.
fn loop_speed_chart(r: &OscostReport) -> Option<String> {
    r.frequency.as_ref().and_then(|f| {
        let b = |label: &str, m: &Option<crate::stats::MeanCi>| {
            m.as_ref().map(|m| Bar {
                label: label.into(),
                value: m.mean,
                ci: Some((m.ci95_low, m.ci95_high)),
                accent: false,
            })
        };
        let bars: Vec<Bar> = [
            b("after idle (cold)", &f.cold_per_ns),
            b("under load (warm)", &f.warm_per_ns),
        ]
        .into_iter()
        .flatten()
        .collect();
        (!bars.is_empty()).then(|| {
            svg::bars(
                &format!("Effective speed of a dependent loop ({})", f.unit),
                &bars,
                &|v| format!("{v:.2}"),
            )
        })
    })
}

/// One table row per primitive: its cost with the interval, or why it is not available.
fn op_rows(r: &OscostReport) -> Vec<Vec<String>> {
    r.ops
        .iter()
        .map(|o| match &o.per_op_ns {
            Some(m) => vec![
                o.name.clone(),
                format!("{} ± {:.1}%", fmt_ns(m.mean), 100.0 * m.rel_half_width()),
                o.median_ns.map(fmt_ns).unwrap_or_default(),
                o.min_ns.map(fmt_ns).unwrap_or_default(),
                o.counted
                    .as_ref()
                    .map(|c| format!("{:.2} {}/op", c.per_op, c.counter))
                    .unwrap_or_default(),
            ],
            None => vec![
                o.name.clone(),
                format!(
                    "unavailable: {}",
                    o.unavailable.as_deref().unwrap_or("unknown")
                ),
                String::new(),
                String::new(),
                String::new(),
            ],
        })
        .collect()
}
