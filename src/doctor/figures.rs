//! Evidence figures as data and in words: a typed [`Quantity`] or [`Versus`] is defined here
//! with the one place it becomes English. Rules state figures as data; the text and HTML
//! reporters render them through these functions (`findings::Evidence::in_words` joins them to a
//! note), so a figure reads the same in every finding and a `--json` reader gets the number the
//! sentence was made from.

use crate::units::{fmt_ns, thousands};
use serde::{Deserialize, Serialize};

/// One value in its unit, at the precision people read it in: `20.27 us`, `16,512/s`, `37%`,
/// `3781 MHz`, `0.53`.
pub fn value(v: f64, unit: &str) -> String {
    match unit {
        "ns" => fmt_ns(v),
        "per_s" if v.abs() >= 100.0 => format!("{}/s", thousands(v)),
        "per_s" => format!("{v:.1}/s"),
        "pct" if v.abs() >= 10.0 || v == 0.0 => format!("{v:.0}%"),
        "pct" => format!("{v:.1}%"),
        "share" => value(v * 100.0, "pct"),
        "mhz" => format!("{v:.0} MHz"),
        "ms" => format!("{v:.1} ms"),
        "s" => format!("{v:.2} s"),
        "cpus" => format!("{v:.2} CPUs"),
        "cycles" => format!("{} cycles", thousands(v)),
        "count" => thousands(v),
        "tps" => format!("{} tps", thousands(v)),
        "s_per_s" => format!("{v:.3} s/s"),
        "ratio" | "per_round_trip" | "per_transaction" => format!("{v:.2}"),
        other => format!("{v} {other}"),
    }
}

/// A figure with what qualifies it: `20.27 us (95% CI 19.69 us to 20.85 us, n=23)`,
/// `12 of 40 (30%)`, `0.53 (95% CI 0.47 to 0.59, n=3); runs from 0.53 to 0.54`.
pub fn quantity(q: &Quantity) -> String {
    let u = q.unit.as_str();
    let mut out = value(q.value, u);
    if let Some(total) = q.of {
        out = format!("{out} of {}", value(total, u));
        if total > 0.0 {
            out = format!("{out} ({})", value(100.0 * q.value / total, "pct"));
        }
    }
    match (q.ci95, q.n) {
        (Some([lo, hi]), Some(n)) => {
            out = format!("{out} (95% CI {} to {}, n={n})", value(lo, u), value(hi, u));
        }
        (Some([lo, hi]), None) => {
            out = format!("{out} (95% CI {} to {})", value(lo, u), value(hi, u));
        }
        (None, Some(n)) => out = format!("{out} (n={n})"),
        (None, None) => {}
    }
    if let Some([lo, hi]) = q.range {
        out = format!("{out}; runs from {} to {}", value(lo, u), value(hi, u));
    }
    out
}

/// Two values of one figure: `0.87 (across vCPUs) vs 0.00 (on one)`.
pub fn versus(v: &Versus) -> String {
    format!(
        "{} ({}) vs {} ({})",
        value(v.a.value, &v.unit),
        v.a.label,
        value(v.b.value, &v.unit),
        v.b.label
    )
}

/// A figure as data: what `--json` readers use instead of the text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Quantity {
    /// The figure (a mean, when `ci95` is given).
    pub value: f64,
    /// Its unit: `ns`, `per_s`, `share`, `pct`, `cycles`, `mhz`, `count`, `per_round_trip`.
    pub unit: String,
    /// 95% confidence interval, low and high, in `unit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci95: Option<[f64; 2]>,
    /// Samples behind the mean and interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<usize>,
    /// The whole `value` is a part of, in `unit` ("12 throttled periods of 40").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub of: Option<f64>,
    /// Lowest and highest of the runs behind the mean, in `unit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<[f64; 2]>,
}

/// Two values of one figure side by side ("1.94 idle vs 0.00 with busy neighbours"), as data:
/// a script reads both numbers and their unit instead of parsing the sentence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Versus {
    /// The unit both values share (`per_round_trip`, `pct`, `count`).
    pub unit: String,
    pub a: Side,
    pub b: Side,
}

/// One side of a [`Versus`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Side {
    /// What the side is: "idle", "with busy neighbours", "packed".
    pub label: String,
    pub value: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(value: f64, unit: &str) -> Quantity {
        Quantity {
            value,
            unit: unit.into(),
            ci95: None,
            n: None,
            of: None,
            range: None,
        }
    }

    #[test]
    fn figures_read_in_their_unit() {
        assert_eq!(value(20_270.9, "ns"), "20.27 us");
        assert_eq!(value(518_946.8, "per_s"), "518,947/s");
        assert_eq!(value(37.4, "pct"), "37%");
        assert_eq!(value(3.21, "pct"), "3.2%");
        assert_eq!(value(0.374, "share"), "37%");
        assert_eq!(value(15_448.0, "cycles"), "15,448 cycles");
        assert_eq!(value(0.8674, "per_round_trip"), "0.87");
    }

    #[test]
    fn interval_part_and_range_follow_the_figure() {
        let mut m = q(20_270.97, "ns");
        m.ci95 = Some([19_690.46, 20_851.48]);
        m.n = Some(23);
        assert_eq!(quantity(&m), "20.27 us (95% CI 19.69 us to 20.85 us, n=23)");
        let mut part = q(12.0, "count");
        part.of = Some(40.0);
        assert_eq!(quantity(&part), "12 of 40 (30%)");
        let mut share = q(0.53, "ratio");
        share.ci95 = Some([0.47, 0.59]);
        share.n = Some(3);
        share.range = Some([0.528, 0.541]);
        assert_eq!(
            quantity(&share),
            "0.53 (95% CI 0.47 to 0.59, n=3); runs from 0.53 to 0.54"
        );
    }
}
