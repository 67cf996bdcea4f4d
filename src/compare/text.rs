//! The comparison for people: what moved beyond noise first, then what did not.

use super::{Comparison, FigureDiff, Test, Verdict};
use crate::output::{Style, fmt_ns};
use comfy_table::{Table, presets};

/// A figure's value for display, with its unit where the name gives one: the name before a
/// typed figure's selector (`rtt_ns` of `rtt_ns[method=pipe,cpus=0:1]`), or a path's last part.
pub fn fmt_value(path: &str, v: f64) -> String {
    let name = match path.strip_suffix(']').and_then(|p| p.rfind('[')) {
        Some(open) => &path[..open],
        None => path,
    };
    if name.ends_with("_per_ns") {
        format!("{v:.3}/ns")
    } else if name.ends_with("_ns") {
        fmt_ns(v)
    } else if v != 0.0 && (v.abs() >= 1e6 || v.abs() < 1e-2) {
        format!("{v:.3e}")
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

/// A p-value for display.
pub fn fmt_p(p: f64) -> String {
    if p < 0.001 {
        "p<0.001".into()
    } else {
        format!("p={p:.3}")
    }
}

// Table cells stay uncoloured: escape codes would upset the column widths.
fn verdict_text(d: &FigureDiff) -> String {
    let p = d
        .p_value
        .map(|p| format!(" ({})", fmt_p(p)))
        .unwrap_or_default();
    match d.verdict {
        Verdict::Worse => format!("WORSE{p}"),
        Verdict::Better => format!("better{p}"),
        Verdict::Changed => format!("changed, direction unknown{p}"),
        Verdict::Same => format!("within noise{p}"),
        Verdict::Untested => "not judged (no samples)".into(),
    }
}

fn row(d: &FigureDiff) -> Vec<String> {
    vec![
        d.path.clone(),
        fmt_value(&d.path, d.a),
        fmt_value(&d.path, d.b),
        d.ratio
            .map(|r| format!("{r:.3}x"))
            .unwrap_or_else(|| "-".into()),
        verdict_text(d),
    ]
}

/// Renders the comparison. `all`: also list the plain numbers that were not judged.
pub fn render(c: &Comparison, all: bool, fail_pct: Option<f64>) -> String {
    let s = Style::new();
    let mut out = format!(
        "{}\n  A: {}\n  B: {}\n\n",
        s.bold(&format!("Comparing two {} results", c.result_kind)),
        c.a_file,
        c.b_file
    );
    if !c.context_differences.is_empty() {
        out += &s.bold("Conditions that differ\n");
        for (k, a, b) in c.context_differences.iter().take(20) {
            out += &format!("  {k}: {a}  ->  {b}\n");
        }
        if c.context_differences.len() > 20 {
            out += &format!("  ... and {} more\n", c.context_differences.len() - 20);
        }
        out += "\n";
    }
    let judged: Vec<&FigureDiff> = c.figures.iter().filter(|d| d.test != Test::None).collect();
    let plain: Vec<&FigureDiff> = c.figures.iter().filter(|d| d.test == Test::None).collect();
    let mut t = Table::new();
    t.load_style(presets::NOTHING);
    t.set_header(vec!["figure", "A", "B", "B/A", "verdict"]);
    for d in &judged {
        t.add_row(row(d));
    }
    if all {
        for d in &plain {
            t.add_row(row(d));
        }
    }
    if judged.is_empty() && !all {
        out += "No figure with raw samples or intervals is present in both results.\n";
    } else {
        out += &format!("{t}\n");
    }
    let count = |v| c.figures.iter().filter(|d| d.verdict == v).count();
    out += &format!(
        "\n{} worse, {} better, {} changed (direction unknown), {} within noise; \
         {} plain numbers not judged{}.\n",
        count(Verdict::Worse),
        count(Verdict::Better),
        count(Verdict::Changed),
        count(Verdict::Same),
        plain.len(),
        if all { "" } else { " (--all lists them)" }
    );
    if !c.only_in_a.is_empty() || !c.only_in_b.is_empty() {
        out += &format!(
            "{} figures only in A, {} only in B (not compared).\n",
            c.only_in_a.len(),
            c.only_in_b.len()
        );
    }
    out += &s.dim(&format!("Method: {}\n", c.method));
    if let Some(pct) = fail_pct {
        out += &match c.regressions.len() {
            0 => format!("No figure got worse by more than {pct}% beyond noise.\n"),
            n => s.red(&format!(
                "{n} figure(s) got worse by more than {pct}% beyond noise: {}\n",
                c.regressions.join(", ")
            )),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::fmt_value;

    #[test]
    fn a_typed_figure_keeps_its_unit_behind_its_selector() {
        // The unit is in the name before the selector; the selector's own text must not decide.
        assert_eq!(
            fmt_value("rtt_ns[method=pipe,class=shared-llc,cpus=0:1]", 71_308.311),
            "71.31 us"
        );
        assert_eq!(fmt_value("cost_ns[name=syscall_getppid]", 83.0), "83 ns");
        assert_eq!(fmt_value("rate_per_ns[x=1]", 0.8321), "0.832/ns");
        // A path from a document without typed figures still ends with its unit.
        assert_eq!(
            fmt_value("measurements.wakeup[method=pipe].rtt_ns", 2_300.0),
            "2.30 us"
        );
        // No unit in the name: a plain number, whatever the selector holds.
        assert_eq!(fmt_value("share[workers=2,unit_ns=1]", 0.5), "0.500");
    }
}
