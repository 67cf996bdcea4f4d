//! Horizontal bars with 95% whiskers, and vertical grouped bars.

use super::{chart, f1, nice_step, ticks};
use maud::html;

/// One bar: a label, a value and its 95% interval.
#[derive(Clone, Debug)]
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub ci: Option<(f64, f64)>,
    /// Highlight (e.g. the fastest placement).
    pub accent: bool,
}

const LABEL_W: f64 = 210.0;
const PLOT_W: f64 = 460.0;
const VALUE_W: f64 = 110.0;

/// Horizontal bars with whiskers; `fmt` formats axis ticks and values.
pub fn bars(title: &str, bars: &[Bar], fmt: &dyn Fn(f64) -> String) -> String {
    let row = 26.0;
    let top = 30.0;
    let h = top + row * bars.len() as f64 + 30.0;
    let w = LABEL_W + PLOT_W + VALUE_W;
    let max = bars
        .iter()
        .map(|b| b.ci.map_or(b.value, |c| c.1.max(b.value)))
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE);
    let step = nice_step(max, 5.0);
    let top_tick = (max / step).ceil() * step;
    let x = |v: f64| LABEL_W + PLOT_W * (v / top_tick).clamp(0.0, 1.0);
    let body = html! {
        @for t in ticks(top_tick, step) {
            line class="grid" x1=(f1(x(t))) y1=(top - 4.0) x2=(f1(x(t))) y2=(f1(h - 24.0)) {}
            text class="tick" x=(f1(x(t))) y=(f1(h - 10.0)) text-anchor="middle" { (fmt(t)) }
        }
        @for (i, b) in bars.iter().enumerate() {
            @let y = top + row * i as f64;
            text class="label" x=(f1(LABEL_W - 8.0)) y=(f1(y + row * 0.62)) text-anchor="end" { (b.label) }
            rect class=(if b.accent { "bar accent" } else { "bar" }) x=(LABEL_W) y=(f1(y + 4.0))
                width=(f1((x(b.value) - LABEL_W).max(0.5))) height=(f1(row - 8.0)) {
                title { (b.label) ": " (fmt(b.value)) }
            }
            @if let Some((lo, hi)) = b.ci {
                @let cy = y + row / 2.0;
                path class="whisker" d={
                    "M" (f1(x(lo))) "," (f1(cy)) "H" (f1(x(hi)))
                    "M" (f1(x(lo))) "," (f1(cy - 5.0)) "V" (f1(cy + 5.0))
                    "M" (f1(x(hi))) "," (f1(cy - 5.0)) "V" (f1(cy + 5.0))
                } {}
            }
            text class="value" x=(f1(LABEL_W + PLOT_W + 8.0)) y=(f1(y + row * 0.62)) { (fmt(b.value)) }
        }
    };
    chart(w, h, title, body)
}

/// Vertical grouped bars: one group per category, one bar per series.
pub fn grouped(
    title: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
    fmt: &dyn Fn(f64) -> String,
) -> String {
    let (left, top, bottom) = (50.0, 44.0, 70.0);
    let group_w = (90.0_f64).max(18.0 * series.len() as f64 + 20.0);
    let plot_h = 200.0;
    let w = left + group_w * categories.len() as f64 + 20.0;
    let h = top + plot_h + bottom;
    let max = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE);
    let step = nice_step(max, 4.0);
    let top_tick = (max / step).ceil() * step;
    let y = |v: f64| top + plot_h * (1.0 - (v / top_tick).clamp(0.0, 1.0));
    let bw = (group_w - 20.0) / series.len().max(1) as f64;
    let body = html! {
        @for (k, (name, _)) in series.iter().enumerate() {
            @let lx = left + 150.0 * k as f64;
            rect class={ "s" (k) } x=(f1(lx)) y="24" width="10" height="10" {}
            text class="tick" x=(f1(lx + 14.0)) y="33" { (name) }
        }
        @for t in ticks(top_tick, step) {
            line class="grid" x1=(left) y1=(f1(y(t))) x2=(f1(w - 10.0)) y2=(f1(y(t))) {}
            text class="tick" x=(f1(left - 6.0)) y=(f1(y(t) + 4.0)) text-anchor="end" { (fmt(t)) }
        }
        @for (c, cat) in categories.iter().enumerate() {
            @let gx = left + group_w * c as f64 + 10.0;
            @for (k, (name, vals)) in series.iter().enumerate() {
                @let v = vals.get(c).copied().unwrap_or(0.0);
                rect class={ "s" (k) } x=(f1(gx + bw * k as f64)) y=(f1(y(v)))
                    width=(f1((bw - 2.0).max(1.0))) height=(f1((top + plot_h - y(v)).max(0.0))) {
                    title { (cat) " " (name) ": " (fmt(v)) }
                }
            }
            @let lx = gx + (group_w - 20.0) / 2.0;
            @for (li, part) in cat.splitn(2, ' ').enumerate() {
                text class="tick" x=(f1(lx)) y=(f1(top + plot_h + 16.0 + 14.0 * li as f64)) text-anchor="middle" { (part) }
            }
        }
    };
    chart(w.max(420.0), h, title, body)
}
