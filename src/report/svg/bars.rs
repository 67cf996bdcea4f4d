//! Horizontal bars with 95% whiskers, and vertical grouped bars.

use super::{esc, nice_step, open};
use std::fmt::Write;

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
    let mut s = open(w, h, title);
    let _ = write!(
        s,
        r#"<text class="title" x="0" y="16">{}</text>"#,
        esc(title)
    );
    let mut t = 0.0;
    while t <= top_tick + step * 0.01 {
        let _ = write!(
            s,
            r#"<line class="grid" x1="{0:.1}" y1="{1}" x2="{0:.1}" y2="{2:.1}"/><text class="tick" x="{0:.1}" y="{3:.1}" text-anchor="middle">{4}</text>"#,
            x(t),
            top - 4.0,
            h - 24.0,
            h - 10.0,
            esc(&fmt(t))
        );
        t += step;
    }
    for (i, b) in bars.iter().enumerate() {
        let y = top + row * i as f64;
        let class = if b.accent { "bar accent" } else { "bar" };
        let _ = write!(
            s,
            r#"<text class="label" x="{:.1}" y="{:.1}" text-anchor="end">{}</text><rect class="{class}" x="{LABEL_W}" y="{:.1}" width="{:.1}" height="{:.1}"><title>{}: {}</title></rect>"#,
            LABEL_W - 8.0,
            y + row * 0.62,
            esc(&b.label),
            y + 4.0,
            (x(b.value) - LABEL_W).max(0.5),
            row - 8.0,
            esc(&b.label),
            esc(&fmt(b.value))
        );
        if let Some((lo, hi)) = b.ci {
            let cy = y + row / 2.0;
            let _ = write!(
                s,
                r#"<path class="whisker" d="M{0:.1},{1:.1}H{2:.1}M{0:.1},{3:.1}V{4:.1}M{2:.1},{3:.1}V{4:.1}"/>"#,
                x(lo),
                cy,
                x(hi),
                cy - 5.0,
                cy + 5.0
            );
        }
        let _ = write!(
            s,
            r#"<text class="value" x="{:.1}" y="{:.1}">{}</text>"#,
            LABEL_W + PLOT_W + 8.0,
            y + row * 0.62,
            esc(&fmt(b.value))
        );
    }
    s + "</svg>"
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
    let mut s = open(w.max(420.0), h, title);
    let _ = write!(
        s,
        r#"<text class="title" x="0" y="16">{}</text>"#,
        esc(title)
    );
    for (k, (name, _)) in series.iter().enumerate() {
        let lx = left + 150.0 * k as f64;
        let _ = write!(
            s,
            r#"<rect class="s{k}" x="{lx:.1}" y="24" width="10" height="10"/><text class="tick" x="{:.1}" y="33">{}</text>"#,
            lx + 14.0,
            esc(name)
        );
    }
    let mut t = 0.0;
    while t <= top_tick + step * 0.01 {
        let _ = write!(
            s,
            r#"<line class="grid" x1="{left}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}"/><text class="tick" x="{2:.1}" y="{3:.1}" text-anchor="end">{4}</text>"#,
            y(t),
            w - 10.0,
            left - 6.0,
            y(t) + 4.0,
            esc(&fmt(t))
        );
        t += step;
    }
    let bw = (group_w - 20.0) / series.len().max(1) as f64;
    for (c, cat) in categories.iter().enumerate() {
        let gx = left + group_w * c as f64 + 10.0;
        for (k, (name, vals)) in series.iter().enumerate() {
            let v = vals.get(c).copied().unwrap_or(0.0);
            let _ = write!(
                s,
                r#"<rect class="s{k}" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}"><title>{} {}: {}</title></rect>"#,
                gx + bw * k as f64,
                y(v),
                (bw - 2.0).max(1.0),
                (top + plot_h - y(v)).max(0.0),
                esc(cat),
                esc(name),
                esc(&fmt(v))
            );
        }
        let lx = gx + (group_w - 20.0) / 2.0;
        for (li, part) in cat.splitn(2, ' ').enumerate() {
            let _ = write!(
                s,
                r#"<text class="tick" x="{lx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                top + plot_h + 16.0 + 14.0 * li as f64,
                esc(part)
            );
        }
    }
    s + "</svg>"
}
