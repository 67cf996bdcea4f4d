//! A matrix of values as coloured cells (the placement matrix).

use super::{esc, open};
use std::fmt::Write;

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
