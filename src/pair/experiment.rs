//! `pair` behind the common [`Experiment`] interface: its figures and its page.

use super::{PairReport, PairSettings};
use crate::experiment::{Direction, Experiment, Figure, Progress, Unit};
use crate::machine::{Conditions, Machine};
use crate::output::Style;
use crate::report::envelope::Kind;
use crate::report::html::{self, chart, section};
use crate::report::svg::{self, Bar};
use crate::units::thousands;
use anyhow::Result;
use maud::html;

/// A real server and client under each placement.
pub struct Pair;

impl Experiment for Pair {
    type Settings = PairSettings;
    type Report = PairReport;
    const KIND: Kind = Kind::Experiment("pair");

    fn load_watch(
        machine: &Machine,
        settings: &PairSettings,
    ) -> Result<Option<crate::experiment::LoadWatch>> {
        Ok(Some(crate::experiment::LoadWatch::on(
            machine,
            None,
            std::time::Duration::from_millis(500),
            settings.check_load,
        )))
    }

    fn measure(
        machine: &Machine,
        settings: &PairSettings,
        conditions: Conditions,
        progress: &Progress,
    ) -> Result<PairReport> {
        super::measure(machine, settings, conditions, progress)
    }

    fn conditions(report: &PairReport) -> &Conditions {
        &report.conditions
    }

    /// The client's figure under each placement, one sample per run; its direction is the
    /// metric's own (throughput, or a cost with `--lower-is-better`).
    fn figures(report: &PairReport) -> Vec<Figure> {
        let e = &report.experiment;
        let (unit, direction) = if e.higher_is_better {
            (Unit::PerSecond, Direction::HigherIsBetter)
        } else {
            (Unit::Other, Direction::LowerIsBetter)
        };
        report
            .placements
            .iter()
            .filter_map(|p| {
                Figure::from_samples(
                    format!("metric[placement={}]", p.placement.label),
                    format!(
                        "{} ({}), {}",
                        e.metric_unit, e.metric_parser, p.placement.label
                    ),
                    unit,
                    direction,
                    p.runs.iter().map(|r| r.value).collect(),
                )
            })
            .collect()
    }

    fn render_text(report: &PairReport, style: &Style) -> String {
        super::report::render(report, style)
    }

    fn render_html(r: &PairReport) -> String {
        page(r)
    }
}

fn page(r: &PairReport) -> String {
    let e = &r.experiment;
    let bars: Vec<Bar> = r
        .placements
        .iter()
        .map(|p| Bar {
            label: p.placement.label.clone(),
            value: p.metric.mean,
            ci: Some((p.metric.ci95_low, p.metric.ci95_high)),
            accent: p.placement.label == r.best,
        })
        .collect();
    let cats: Vec<String> = r
        .placements
        .iter()
        .map(|p| p.placement.label.clone())
        .collect();
    let per = |k: &[&str]| -> Vec<f64> {
        r.placements
            .iter()
            .map(|p| k.iter().filter_map(|k| p.per_transaction.get(*k)).sum())
            .collect()
    };
    let series = vec![
        ("idle entries (halts)".to_string(), per(&["idle_entries"])),
        ("IPIs (RES+CAL)".to_string(), per(&["irq_RES", "irq_CAL"])),
    ];
    let body = html! {
        (section(
            "By placement",
            "Mean of the runs with its 95% interval as whiskers; the best placement is highlighted.",
            chart(svg::bars(&format!("{}: {} by placement", e.server, e.metric_unit), &bars, &thousands)),
        ))
        (section(
            "Counters per transaction",
            "Summed over the CPUs in use: about one halt and one IPI per wakeup means every \
             request crosses CPUs through an idle exit (in a VM: through the hypervisor).",
            chart(svg::grouped("Counters per transaction", &cats, &series, &|v| format!("{v:.2}"))),
        ))
        section {
            h2 { "What ran" }
            ul.plain {
                @if let Some(w) = &e.workload { li { "workload: " (w) } }
                li { "server: " (e.server) }
                li { "client: " code { (e.client_command.join(" ")) } }
                li { (e.repeat) " run(s) per placement, interleaved; server started "
                     (e.server_starts) " times" }
            }
            @for n in &r.notes { p.note { (n) } }
        }
        (html::conditions(&r.conditions, &[]))
    };
    html::page("cpulab pair", html::facts_line(&r.conditions), body)
}
