//! `share` behind the common [`Experiment`] interface: its figures and its page.

use super::{ShareReport, ShareSettings};
use crate::experiment::{Direction, Experiment, Figure, Progress, Unit};
use crate::machine::{Conditions, Machine};
use crate::output::Style;
use crate::report::envelope::Kind;
use crate::report::html::{self, chart, section};
use crate::report::svg::{self, Bar};
use crate::stats::MeanCi;
use anyhow::Result;
use maud::html;

/// The noisy-neighbour experiment.
pub struct Share;

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

impl Experiment for Share {
    type Settings = ShareSettings;
    type Report = ShareReport;
    const KIND: Kind = Kind::Experiment("share");

    fn load_watch(
        machine: &Machine,
        settings: &ShareSettings,
    ) -> Result<Option<crate::experiment::LoadWatch>> {
        Ok(Some(crate::experiment::LoadWatch::on(
            machine,
            None,
            std::time::Duration::from_millis(300),
            settings.check_load,
        )))
    }

    fn measure(
        machine: &Machine,
        settings: &ShareSettings,
        conditions: Conditions,
        progress: &Progress,
    ) -> Result<ShareReport> {
        super::measure(machine, settings, conditions, progress)
    }

    fn conditions(report: &ShareReport) -> &Conditions {
        &report.conditions
    }

    /// Per configuration: each worker's share relative to running alone, and its rate; one
    /// sample per run (the mean over that run's workers).
    fn figures(report: &ShareReport) -> Vec<Figure> {
        let mut out = Vec::new();
        for c in &report.configs {
            let id = format!("threads={},burners={}", c.threads, c.burners);
            let what = format!("{} worker(s) beside {} burner(s)", c.threads, c.burners);
            let per_run = |f: fn(&super::ShareRun) -> &Vec<f64>| {
                c.runs.iter().filter_map(|r| mean(f(r))).collect::<Vec<_>>()
            };
            if c.burners > 0 {
                out.extend(Figure::from_samples(
                    format!("relative[{id}]"),
                    format!("worker speed relative to alone, {what}"),
                    Unit::Share,
                    Direction::HigherIsBetter,
                    per_run(|r| &r.worker_relative),
                ));
            }
            out.extend(Figure::from_samples(
                format!("worker_rate_per_s[{id}]"),
                format!("work units per second per worker, {what}"),
                Unit::PerSecond,
                Direction::HigherIsBetter,
                per_run(|r| &r.worker_rate_per_s),
            ));
        }
        out
    }

    fn render_text(report: &ShareReport, style: &Style) -> String {
        super::render::render(report, style)
    }

    fn render_html(r: &ShareReport) -> String {
        page(r)
    }
}

fn pct(m: &Option<MeanCi>) -> String {
    m.as_ref().map_or("-".into(), |m| {
        format!("{:.1}% ± {:.1}", 100.0 * m.mean, 100.0 * m.ci95_half_width)
    })
}

fn page(r: &ShareReport) -> String {
    let contended: Vec<_> = r.configs.iter().filter(|c| c.burners > 0).collect();
    let mut bars = Vec::new();
    for c in &contended {
        let name = format!("{}w + {}b", c.threads, c.burners);
        if let Some(m) = &c.relative {
            bars.push(Bar {
                label: format!("{name} measured"),
                value: m.mean,
                ci: Some((m.ci95_low, m.ci95_high)),
                accent: true,
            });
        }
        bars.push(Bar {
            label: format!("{name} model"),
            value: c.model_relative,
            ci: None,
            accent: false,
        });
    }
    let cats: Vec<String> = r
        .configs
        .iter()
        .map(|c| format!("{}w + {}b", c.threads, c.burners))
        .collect();
    let share_of = |m: &Option<MeanCi>| m.as_ref().map_or(0.0, |m| m.mean);
    let cpu_series = vec![
        (
            "worker CPU".to_string(),
            r.configs
                .iter()
                .map(|c| share_of(&c.worker_cpu_share))
                .collect(),
        ),
        (
            "burner CPU".to_string(),
            r.configs
                .iter()
                .map(|c| share_of(&c.burner_cpu_share))
                .collect(),
        ),
    ];
    let rows: Vec<Vec<String>> = r
        .configs
        .iter()
        .map(|c| {
            vec![
                c.threads.to_string(),
                c.burners.to_string(),
                format!("{:.1}%", 100.0 * c.model_relative),
                pct(&c.relative),
                c.deviation_pp.map_or("-".into(), |d| format!("{d:+.1} pp")),
                pct(&c.worker_cpu_share),
                pct(&c.burner_cpu_share),
                c.steal_pct
                    .as_ref()
                    .map_or("n/a".into(), |s| format!("{:.1}%", s.mean)),
                c.throttle.map_or("n/a".into(), |d| {
                    format!("{}/{}", d.nr_throttled, d.nr_periods)
                }),
            ]
        })
        .collect();
    let pct_fmt = |v: f64| format!("{:.0}%", 100.0 * v);
    let body = html! {
        (section(
            "Speed beside the burners",
            "Each worker's work units per second relative to the same workers alone (mean of the \
             runs, whiskers the 95% interval), next to the max-min fair-share model's prediction.",
            if bars.is_empty() { html! {} } else {
                chart(svg::bars("Worker speed relative to alone: measured and model", &bars, &pct_fmt))
            },
        ))
        (section(
            "Where the CPU time went",
            "CPU time each worker and each burner got, as a share of the run (thread CPU clocks).",
            chart(svg::grouped("CPU share per thread", &cats, &cpu_series, &pct_fmt)),
        ))
        section {
            h2 { "Every configuration" }
            p.note {
                "Prime check up to " (r.max_prime) " per work unit; the model shares "
                (format!("{:.2}", r.usable_cpus)) " CPUs (" (r.usable_cpus_from) "); burners at "
                (format!("{:.0}", r.duty_pct)) "% duty; " (r.repeats) " run(s) of "
                (format!("{:.2}", r.requested_duration_s)) " s per row."
            }
            (html::table(
                &["workers", "burners", "model", "measured ±95%", "vs model", "worker CPU",
                  "burner CPU", "steal", "throttled"],
                &rows,
                2,
            ))
        }
        (html::conditions(&r.conditions, &[]))
    };
    html::page("cpulab share", html::facts_line(&r.conditions), body)
}
