//! Lines with whiskers (scaling curves).

use super::{esc, fmt_num, nice_step, open};
use std::fmt::Write;

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
