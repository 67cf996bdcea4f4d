//! Charts as inline SVG, generated here so the report needs no script, font or network.
//!
//! Four shapes cover every figure cpulab reports: a heatmap (the placement matrix), horizontal
//! bars with 95% whiskers (one figure per placement, method or primitive), grouped bars (counters
//! per round trip), and lines with whiskers (scaling curves). Each function returns one `<svg>`
//! element sized in CSS pixels; text uses the page's system font. Exporters return text and do
//! no I/O.
//!
//! The markup is written with [`maud`], which escapes every interpolated string (titles, labels,
//! hostnames in them), so no chart builds SVG with `format!` and a hand-called escape. SVG
//! elements are written with an explicit end tag (`line ... {}`): inside HTML, SVG has no void
//! elements, and a bare `<line>` would swallow what follows.

mod bars;
mod heatmap;
mod lines;

pub use bars::{Bar, bars, grouped};
pub use heatmap::heatmap;
pub use lines::{Point, lines};

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

/// The `<svg>` element around `body`, with its title as the first text.
pub(crate) fn chart(w: f64, h: f64, title: &str, body: maud::Markup) -> String {
    maud::html! {
        svg class="chart" xmlns="http://www.w3.org/2000/svg" width=(f0(w)) height=(f0(h))
            viewBox={ "0 0 " (f0(w)) " " (f0(h)) } role="img" aria-label=(title) {
            text class="title" x="0" y="16" { (title) }
            (body)
        }
    }
    .into_string()
}

/// Ticks from 0 to `top` (inclusive) every `step`.
pub(crate) fn ticks(top: f64, step: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut t = 0.0;
    while t <= top + step * 0.01 {
        out.push(t);
        t += step;
    }
    out
}

/// A coordinate with one decimal.
pub(crate) fn f1(v: f64) -> String {
    format!("{v:.1}")
}

fn f0(v: f64) -> String {
    format!("{v:.0}")
}

pub(crate) fn fmt_num(v: f64) -> String {
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
