//! `scale` behind the common [`Experiment`] interface: its figures and its page.

use super::{ScaleReport, ScaleSettings};
use crate::experiment::{Direction, Experiment, Figure, Progress, Unit};
use crate::machine::{Conditions, Machine};
use crate::output::Style;
use crate::report::envelope::Kind;
use crate::report::html::{self, chart, section};
use crate::report::svg;
use anyhow::Result;
use maud::html;

/// The parallel-scaling experiment.
pub struct Scale;

impl Experiment for Scale {
    type Settings = ScaleSettings;
    type Report = ScaleReport;
    const KIND: Kind = Kind::Experiment("scale");

    fn load_watch(
        machine: &Machine,
        settings: &ScaleSettings,
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
        settings: &ScaleSettings,
        conditions: Conditions,
        progress: &Progress,
    ) -> Result<ScaleReport> {
        super::measure(machine, settings, conditions, progress)
    }

    fn conditions(report: &ScaleReport) -> &Conditions {
        &report.conditions
    }

    /// Per policy and thread count: the run's wall time (raw samples), and the speedup over
    /// one thread with its interval (samples: each run's work over its time, against the
    /// single thread's mean).
    fn figures(report: &ScaleReport) -> Vec<Figure> {
        let mut out = Vec::new();
        for p in &report.policies {
            let base = p
                .points
                .iter()
                .find(|x| x.threads == 1)
                .map(|x| x.time_s.mean);
            for x in &p.points {
                let id = format!("policy={},threads={}", p.policy, x.threads);
                let what = format!("{} thread(s), policy {}", x.threads, p.policy);
                out.extend(Figure::from_samples(
                    format!("time_s[{id}]"),
                    format!("time of one run, {what}"),
                    Unit::Seconds,
                    Direction::LowerIsBetter,
                    x.time_samples_s.clone(),
                ));
                if let (Some(base), Some(s), true) = (base, &x.speedup, x.threads > 1) {
                    let samples = x.speedup_samples(base);
                    if let Some(mut f) = Figure::from_samples(
                        format!("speedup[{id}]"),
                        format!("speedup over one thread, {what}"),
                        Unit::Ratio,
                        Direction::HigherIsBetter,
                        samples,
                    ) {
                        // The interval that also carries the single-thread run's uncertainty.
                        f.value = s.mean;
                        f.ci = Some(s.clone());
                        out.push(f);
                    }
                }
            }
        }
        out
    }

    fn render_text(report: &ScaleReport, style: &Style) -> String {
        super::render::render(report, style)
    }

    fn render_html(r: &ScaleReport) -> String {
        page(r)
    }
}

fn page(r: &ScaleReport) -> String {
    let curve = |f: &dyn Fn(&super::ScalePoint) -> Option<crate::stats::MeanCi>| {
        r.policies
            .iter()
            .map(|p| {
                let pts: Vec<svg::Point> = p
                    .points
                    .iter()
                    .filter_map(|x| {
                        let m = f(x)?;
                        Some((x.threads as f64, m.mean, Some((m.ci95_low, m.ci95_high))))
                    })
                    .collect();
                (p.policy.clone(), pts)
            })
            .collect::<Vec<_>>()
    };
    let speedup = curve(&|x| x.speedup.clone());
    let throughput = curve(&|x| Some(x.throughput.clone()));
    let body = html! {
        (section(
            "Speedup",
            "Speedup over one thread of the same policy, 95% interval as whiskers; the dashed \
             line is ideal scaling.",
            chart(svg::lines(
                &format!("{}: speedup by thread count", r.workload_name()),
                &speedup,
                ("threads", "speedup"),
                true,
            )),
        ))
        (section(
            "Throughput",
            "What the whole pool gets done per second at each thread count.",
            chart(svg::lines(
                &format!("{}: {} by thread count", r.workload_name(), r.throughput_unit),
                &throughput,
                ("threads", &r.throughput_unit),
                false,
            )),
        ))
        @for p in &r.policies {
            section {
                h2 { "Policy " (p.policy) }
                (html::table(
                    &["threads", "CPUs", "time s", &r.throughput_unit, "speedup ±95%",
                      "efficiency", "other load"],
                    &p.points.iter().map(|x| vec![
                        x.threads.to_string(),
                        x.cpus.as_ref().map_or("any".into(), |c| {
                            c.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
                        }),
                        format!("{:.3}", x.time_s.mean),
                        format!("{:.2}", x.throughput.mean),
                        x.speedup.as_ref().map_or("-".into(), |s| {
                            format!("{:.2} ± {:.2}", s.mean, s.ci95_half_width)
                        }),
                        x.efficiency.as_ref().map_or("-".into(), |e| format!("{:.0}%", 100.0 * e.mean)),
                        x.other_load_cpus.map_or("n/a".into(), |o| format!("{o:.2} CPU")),
                    ]).collect::<Vec<_>>(),
                    2,
                ))
                @for f in &p.pin_failures {
                    p.note { "Could not pin " (f) }
                }
            }
        }
        @if let Some(a) = &r.answer {
            (section("Answer", "Whether the runs tell the policies apart.", html! { p { (a.line) } }))
        }
        (html::conditions(&r.conditions, &[]))
    };
    html::page("cpulab scale", html! { p.facts { (r.work) } }, body)
}

impl ScaleReport {
    fn workload_name(&self) -> &'static str {
        match self.workload {
            super::Workload::Fib => "fib",
            super::Workload::Triad => "triad",
        }
    }
}
