//! `cpulab history report --html`: one chart per figure over time, its change points marked,
//! and the fingerprint facts that changed at each written beside it.
//!
//! Each chart is [`crate::report::svg::lines`]: the run means (with their 95% interval as
//! whiskers) against the run's place in the series, and a second line holding each segment's
//! mean, so a change point shows as a step. Built from `report::html`'s primitives with maud,
//! like every other page.

use super::changes::ChangePoint;
use super::fingerprint::Changed;
use crate::report::{html, svg};
use maud::{Markup, html};

/// One run's value of a figure: run id, time, mean, 95% interval.
pub type RunPoint = (i64, i64, f64, Option<(f64, f64)>);

/// One figure's series on one hardware key.
pub struct Series {
    pub kind: String,
    pub hardware_key: String,
    pub figure: String,
    pub label: String,
    /// The unit as the y axis names it (`ns`, `/s`, ...).
    pub unit: String,
    /// `(run id, time, mean, 95% interval)`, oldest first.
    pub points: Vec<RunPoint>,
    pub change_points: Vec<ChangePoint>,
    /// For each change point, the facts that changed between the runs on either side.
    pub changed_facts: Vec<Vec<Changed>>,
}

fn chart(s: &Series) -> String {
    let runs: Vec<svg::Point> = s
        .points
        .iter()
        .enumerate()
        .map(|(i, (_, _, v, ci))| ((i + 1) as f64, *v, *ci))
        .collect();
    let mut bounds = vec![0];
    bounds.extend(s.change_points.iter().map(|c| c.at));
    bounds.push(s.points.len());
    // Each segment's mean from half a run before its first run to half a run after its last,
    // so a change point is a vertical step between two runs.
    let n = s.points.len() as f64;
    let mut steps = Vec::new();
    for w in bounds.windows(2) {
        let seg = &s.points[w[0]..w[1]];
        if seg.is_empty() {
            continue;
        }
        let mean = seg.iter().map(|p| p.2).sum::<f64>() / seg.len() as f64;
        steps.push(((w[0] as f64 + 0.5).max(1.0), mean, None));
        steps.push(((w[1] as f64 + 0.5).min(n), mean, None));
    }
    svg::lines(
        &s.figure,
        &[
            ("run mean".to_string(), runs),
            ("segment mean (steps are change points)".to_string(), steps),
        ],
        ("run in the series", &s.unit),
        false,
    )
}

fn change_list(s: &Series) -> Markup {
    html! {
        @if s.change_points.is_empty() {
            p.note { "No change point: every move is within noise or under the minimum effect." }
        } @else {
            ul {
                @for (c, facts) in s.change_points.iter().zip(&s.changed_facts) {
                    @let (id, t, _, _) = s.points[c.at];
                    li {
                        strong { (format!("{:+.1}%", c.change_pct)) }
                        " at run " (c.at + 1) " (@" (id) ", " (super::when::utc(t)) "), p = "
                        (format!("{:.1e}", c.p_value)) ": "
                        @if facts.is_empty() {
                            "no configuration change in the fingerprint (neighbours, steal and \
                             the host are not in it)"
                        } @else {
                            (facts.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))
                        }
                    }
                }
            }
        }
    }
}

/// The whole page.
pub fn page(series: &[Series], threshold_pct: f64) -> String {
    let body = html! {
        @if series.is_empty() {
            p { "The history holds no figure with three runs or more on one hardware key yet." }
        }
        @for s in series {
            section {
                h2 { (s.kind) ": " (s.figure) }
                p.note { (s.label) " on " (s.hardware_key) ", " (s.points.len()) " runs" }
                (html::chart(chart(s)))
                (change_list(s))
            }
        }
    };
    let header = html! {
        p.facts {
            "Change points: binary segmentation with Welch's t-test (p < 0.01, at least 3 runs \
             a side, at least " (threshold_pct) "% apart); deterministic."
        }
    };
    html::page("cpulab history", header, body)
}
