//! A matrix of values as coloured cells (the placement matrix).

use super::{chart, f1};
use maud::html;

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
    let side = f1(cell - 2.0);
    let body = html! {
        text class="tick" x=(f1(left + cell * cols.len() as f64 / 2.0)) y="34" text-anchor="middle" { (axis.1) }
        @for (j, c) in cols.iter().enumerate() {
            text class="label" x=(f1(left + cell * (j as f64 + 0.5))) y=(f1(top - 6.0)) text-anchor="middle" { (c) }
        }
        text class="tick" x="4" y=(f1(top - 6.0)) { (axis.0) }
        @for (i, r) in rows.iter().enumerate() {
            @let y = top + cell * i as f64;
            text class="label" x=(f1(left - 8.0)) y=(f1(y + cell / 2.0 + 4.0)) text-anchor="end" { (r) }
            @for (j, v) in cells.get(i).into_iter().flatten().enumerate() {
                @let x = left + cell * j as f64;
                @match v {
                    Some(v) => {
                        @let t = scale(*v);
                        rect class="heat" x=(f1(x)) y=(f1(y)) width=(side) height=(side) fill=(heat(t)) {
                            title { (r) " / " (cols.get(j).map_or("", |c| c.as_str())) ": " (fmt(*v)) }
                        }
                        text class=(if t > 0.55 { "cell dark" } else { "cell" }) x=(f1(x + cell / 2.0))
                            y=(f1(y + cell / 2.0 + 4.0)) text-anchor="middle" { (fmt(*v)) }
                    }
                    None => {
                        rect class="heat empty" x=(f1(x)) y=(f1(y)) width=(side) height=(side) {
                            title { "not measured" }
                        }
                    }
                }
            }
        }
    };
    chart(w.max(320.0), h, title, body)
}
