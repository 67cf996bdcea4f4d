//! Charts as inline SVG, generated here so the report needs no script, font or network.
//!
//! Four shapes cover every figure cpulab reports: a heatmap (the placement matrix), horizontal
//! bars with 95% whiskers (one figure per placement, method or primitive), grouped bars (counters
//! per round trip), and lines with whiskers (scaling curves). Each function returns one `<svg>`
//! element sized in CSS pixels; text uses the page's system font. Exporters return text and do
//! no I/O.

use std::fmt::Write;

/// Escapes text for HTML and SVG.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One bar: a label, a value and its 95% interval.
#[derive(Clone, Debug)]
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub ci: Option<(f64, f64)>,
    /// Highlight (e.g. the fastest placement).
    pub accent: bool,
}

/// A step of 1, 2 or 5 times a power of ten, giving about `n` ticks over `range`.
pub fn nice_step(range: f64, n: f64) -> f64 {
    if range <= 0.0 || !range.is_finite() {
        return 1.0;
    }
    let raw = range / n;
    let p = 10f64.powf(raw.log10().floor());
    let m = raw / p;
    p * if m < 1.5 {
        1.0
    } else if m < 3.5 {
        2.0
    } else if m < 7.5 {
        5.0
    } else {
        10.0
    }
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

fn open(w: f64, h: f64, title: &str) -> String {
    format!(
        r#"<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" role="img" aria-label="{}">"#,
        esc(title)
    )
}

/// A colour from pale to deep orange for `t` in 0..1.
fn heat(t: f64) -> String {
    let t = t.clamp(0.0, 1.0);
    let lerp = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        lerp(255.0, 179.0),
        lerp(245.0, 40.0),
        lerp(235.0, 0.0)
    )
}

/// A matrix of values (rows x columns), coloured on a log scale; `None` cells are grey.
pub fn heatmap(
    title: &str,
    rows: &[String],
    cols: &[String],
    cells: &[Vec<Option<f64>>],
    fmt: &dyn Fn(f64) -> String,
    axis: (&str, &str),
) -> String {
    let cell = if cols.len() > 8 { 44.0 } else { 86.0 };
    let (left, top) = (90.0, 58.0);
    let w = left + cell * cols.len() as f64 + 20.0;
    let h = top + cell * rows.len() as f64 + 20.0;
    let vals: Vec<f64> = cells
        .iter()
        .flatten()
        .flatten()
        .copied()
        .filter(|v| *v > 0.0)
        .collect();
    let (lo, hi) = vals
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(*v), b.max(*v)));
    let scale = |v: f64| {
        if hi > lo {
            (v.ln() - lo.ln()) / (hi.ln() - lo.ln())
        } else {
            0.0
        }
    };
    let mut s = open(w.max(320.0), h, title);
    let _ = write!(
        s,
        r#"<text class="title" x="0" y="16">{}</text>"#,
        esc(title)
    );
    let _ = write!(
        s,
        r#"<text class="tick" x="{:.1}" y="34" text-anchor="middle">{}</text>"#,
        left + cell * cols.len() as f64 / 2.0,
        esc(axis.1)
    );
    for (j, c) in cols.iter().enumerate() {
        let _ = write!(
            s,
            r#"<text class="label" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            left + cell * (j as f64 + 0.5),
            top - 6.0,
            esc(c)
        );
    }
    let _ = write!(
        s,
        r#"<text class="tick" x="4" y="{:.1}">{}</text>"#,
        top - 6.0,
        esc(axis.0)
    );
    for (i, r) in rows.iter().enumerate() {
        let y = top + cell * i as f64;
        let _ = write!(
            s,
            r#"<text class="label" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            left - 8.0,
            y + cell / 2.0 + 4.0,
            esc(r)
        );
        for (j, v) in cells.get(i).into_iter().flatten().enumerate() {
            let x = left + cell * j as f64;
            match v {
                Some(v) => {
                    let t = scale(*v);
                    let text_class = if t > 0.55 { "cell dark" } else { "cell" };
                    let _ = write!(
                        s,
                        r#"<rect class="heat" x="{x:.1}" y="{y:.1}" width="{c:.1}" height="{c:.1}" fill="{}"><title>{} / {}: {}</title></rect><text class="{text_class}" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                        heat(t),
                        esc(r),
                        esc(&cols[j]),
                        esc(&fmt(*v)),
                        x + cell / 2.0,
                        y + cell / 2.0 + 4.0,
                        esc(&fmt(*v)),
                        c = cell - 2.0
                    );
                }
                None => {
                    let _ = write!(
                        s,
                        r#"<rect class="heat empty" x="{x:.1}" y="{y:.1}" width="{c:.1}" height="{c:.1}"><title>not measured</title></rect>"#,
                        c = cell - 2.0
                    );
                }
            }
        }
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
    let mut s = open(w, h, title);
    let _ = write!(
        s,
        r#"<text class="title" x="0" y="16">{}</text>"#,
        esc(title)
    );
    let mut t = 0.0;
    while t <= yt + ys * 0.01 {
        let _ = write!(
            s,
            r#"<line class="grid" x1="{left}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}"/><text class="tick" x="{2:.1}" y="{3:.1}" text-anchor="end">{4}</text>"#,
            py(t),
            left + plot_w,
            left - 6.0,
            py(t) + 4.0,
            fmt_num(t)
        );
        t += ys;
    }
    let mut t = 0.0;
    while t <= xt + xs * 0.01 {
        let _ = write!(
            s,
            r#"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            px(t),
            top + plot_h + 16.0,
            fmt_num(t)
        );
        t += xs;
    }
    let _ = write!(
        s,
        r#"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text class="tick" x="{left}" y="{:.1}">{}</text>"#,
        left + plot_w / 2.0,
        h - 6.0,
        esc(axis.0),
        top - 8.0,
        esc(axis.1)
    );
    if ideal {
        let m = xt.min(yt);
        let _ = write!(
            s,
            r#"<line class="ideal" x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}"/>"#,
            px(0.0),
            py(0.0),
            px(m),
            py(m)
        );
    }
    for (k, (name, p)) in series.iter().enumerate() {
        let d: Vec<String> = p
            .iter()
            .map(|(x, y, _)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline class="line l{k}" points="{}"/>"#,
            d.join(" ")
        );
        for (x, y, ci) in p {
            if let Some((lo, hi)) = ci {
                let _ = write!(
                    s,
                    r#"<path class="whisker" d="M{0:.1},{1:.1}V{2:.1}"/>"#,
                    px(*x),
                    py(*lo),
                    py(*hi)
                );
            }
            let _ = write!(
                s,
                r#"<circle class="l{k}" cx="{:.1}" cy="{:.1}" r="3.5"><title>{} {}: {:.2}</title></circle>"#,
                px(*x),
                py(*y),
                esc(name),
                fmt_num(*x),
                y
            );
        }
        // Legend to the right of the y-axis label.
        let lx = left + 90.0 + 140.0 * k as f64;
        let _ = write!(
            s,
            r#"<rect class="s{k}" x="{lx:.1}" y="24" width="10" height="10"/><text class="tick" x="{:.1}" y="33">{}</text>"#,
            lx + 14.0,
            esc(name)
        );
    }
    s + "</svg>"
}

fn fmt_num(v: f64) -> String {
    if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(nice_step(42_000.0, 5.0), 10_000.0);
        assert_eq!(nice_step(7.0, 5.0), 1.0);
        assert_eq!(nice_step(0.0, 5.0), 1.0);
    }

    #[test]
    fn charts_are_single_svg_elements_with_escaped_text() {
        let b = bars(
            "a <b>",
            &[Bar {
                label: "x&y".into(),
                value: 2.0,
                ci: Some((1.5, 2.5)),
                accent: true,
            }],
            &|v| format!("{v}"),
        );
        assert!(b.starts_with("<svg") && b.ends_with("</svg>"));
        assert!(b.contains("a &lt;b&gt;") && b.contains("x&amp;y"));
        assert_eq!(b.matches("<svg").count(), 1);
        let h = heatmap(
            "m",
            &["0".into()],
            &["0".into(), "1".into()],
            &[vec![Some(5.0), None]],
            &|v| format!("{v}"),
            ("a", "b"),
        );
        assert_eq!(h.matches("class=\"heat").count(), 2);
        let g = grouped(
            "g",
            &["pipe same".into()],
            &[("halts".into(), vec![1.0])],
            &|v| format!("{v}"),
        );
        assert!(g.contains("class=\"s0\""));
        let l = lines(
            "l",
            &[(
                "compact".into(),
                vec![(1.0, 1.0, None), (2.0, 1.8, Some((1.7, 1.9)))],
            )],
            ("threads", "speedup"),
            true,
        );
        assert_eq!(l.matches("<circle").count(), 2);
    }
}
