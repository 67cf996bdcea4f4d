//! Lines with whiskers (scaling curves).

use super::{chart, f1, fmt_num, nice_step, ticks};
use maud::html;

/// One point of a line: x, y and the y interval.
pub type Point = (f64, f64, Option<(f64, f64)>);

/// Lines with whiskers (scaling curves); an optional dashed ideal line y = x.
pub fn lines(
    title: &str,
    series: &[(String, Vec<Point>)],
    axis: (&str, &str),
    ideal: bool,
) -> String {
    let (left, top, plot_w, plot_h) = (56.0, 44.0, 520.0, 240.0);
    let (w, h) = (left + plot_w + 30.0, top + plot_h + 46.0);
    let pts = series.iter().flat_map(|(_, p)| p.iter());
    let xmax = pts.clone().map(|p| p.0).fold(1.0, f64::max);
    let ymax = pts
        .map(|p| p.2.map_or(p.1, |c| c.1.max(p.1)))
        .fold(if ideal { xmax } else { 0.0 }, f64::max)
        .max(f64::MIN_POSITIVE);
    let (xs, ys) = (nice_step(xmax, 6.0).max(1.0), nice_step(ymax, 5.0));
    let (xt, yt) = ((xmax / xs).ceil() * xs, (ymax / ys).ceil() * ys);
    let px = |v: f64| left + plot_w * v / xt;
    let py = |v: f64| top + plot_h * (1.0 - v / yt);
    let m = xt.min(yt);
    let body = html! {
        @for t in ticks(yt, ys) {
            line class="grid" x1=(left) y1=(f1(py(t))) x2=(f1(left + plot_w)) y2=(f1(py(t))) {}
            text class="tick" x=(f1(left - 6.0)) y=(f1(py(t) + 4.0)) text-anchor="end" { (fmt_num(t)) }
        }
        @for t in ticks(xt, xs) {
            text class="tick" x=(f1(px(t))) y=(f1(top + plot_h + 16.0)) text-anchor="middle" { (fmt_num(t)) }
        }
        text class="tick" x=(f1(left + plot_w / 2.0)) y=(f1(h - 6.0)) text-anchor="middle" { (axis.0) }
        text class="tick" x=(left) y=(f1(top - 8.0)) { (axis.1) }
        @if ideal {
            line class="ideal" x1=(f1(px(0.0))) y1=(f1(py(0.0))) x2=(f1(px(m))) y2=(f1(py(m))) {}
        }
        @for (k, (name, p)) in series.iter().enumerate() {
            @let points = p
                .iter()
                .map(|(x, y, _)| format!("{:.1},{:.1}", px(*x), py(*y)))
                .collect::<Vec<_>>()
                .join(" ");
            polyline class={ "line l" (k) } points=(points) {}
            @for (x, y, ci) in p {
                @if let Some((lo, hi)) = ci {
                    path class="whisker" d={ "M" (f1(px(*x))) "," (f1(py(*lo))) "V" (f1(py(*hi))) } {}
                }
                circle class={ "l" (k) } cx=(f1(px(*x))) cy=(f1(py(*y))) r="3.5" {
                    title { (name) " " (fmt_num(*x)) ": " (format!("{y:.2}")) }
                }
            }
            // Legend to the right of the y-axis label.
            @let lx = left + 90.0 + 140.0 * k as f64;
            rect class={ "s" (k) } x=(f1(lx)) y="24" width="10" height="10" {}
            text class="tick" x=(f1(lx + 14.0)) y="33" { (name) }
        }
    };
    chart(w, h, title, body)
}
