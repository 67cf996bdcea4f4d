//! Text, HTML and the finding-style summary of a trial.

use super::compare::{Comparison, Verdict};
use super::{TrialReport, TrialRun};
use crate::experiment::Unit;
use crate::output::{Style, fmt_ns};
use maud::html;

/// A value in its unit, for people.
pub fn fmt(unit: Unit, v: f64) -> String {
    match unit {
        Unit::Nanoseconds => fmt_ns(v),
        Unit::CpuSecondsPerSecond => format!("{v:.3} CPU-s/s"),
        Unit::Seconds => format!("{v:.3} s"),
        Unit::PerSecond => format!("{v:.1}/s"),
        Unit::Share => format!("{:.1}%", v * 100.0),
        u => format!("{v:.4}{}", u.suffix()),
    }
}

fn ci(c: &Comparison, m: &crate::stats::MeanCi) -> String {
    if m.n >= 2 {
        format!(
            "{} ±{}",
            fmt(c.unit, m.mean),
            fmt(c.unit, m.ci95_half_width)
        )
    } else {
        fmt(c.unit, m.mean)
    }
}

fn ratio_text(c: &Comparison) -> String {
    match &c.ratio {
        Some(r) => format!("{:.3}x [{:.3}, {:.3}]", r.mean, r.ci95_low, r.ci95_high),
        None => "n/a".into(),
    }
}

fn verdict_text(c: &Comparison) -> String {
    match c.verdict {
        Verdict::NoDifference => match (c.detectable_rel, c.detectable) {
            (Some(d), _) => format!(
                "no difference beyond noise (could have seen ±{:.0}%)",
                d * 100.0
            ),
            (None, Some(d)) => format!(
                "no difference beyond noise (could have seen ±{})",
                fmt(c.unit, d)
            ),
            _ => "no difference beyond noise".into(),
        },
        v => match c.p_value {
            Some(p) => format!("{} ({})", v.as_str(), crate::compare::text::fmt_p(p)),
            None => v.as_str().into(),
        },
    }
}

fn is_cost(c: &Comparison) -> bool {
    c.name.starts_with("cost.")
}

/// The headline: the comparison that moved most beyond noise among the non-cost figures.
fn headline(run: &TrialRun) -> Option<&Comparison> {
    let moved = |c: &&Comparison| c.verdict != Verdict::NoDifference;
    let size = |c: &Comparison| c.ratio.as_ref().map_or(0.0, |r| r.mean.ln().abs());
    let p = |c: &Comparison| c.p_value.unwrap_or(1.0);
    run.comparisons
        .iter()
        .filter(|c| !is_cost(c))
        .filter(moved)
        .max_by(|a, b| size(a).total_cmp(&size(b)))
        .or_else(|| {
            run.comparisons
                .iter()
                .filter(|c| !is_cost(c))
                .min_by(|a, b| p(a).total_cmp(&p(b)))
        })
}

/// One finding-style paragraph per line: what changed, by how much, at what cost, how to keep it.
pub fn summary(r: &TrialReport) -> Vec<String> {
    let mut out = Vec::new();
    let what: Vec<String> = r
        .changes
        .iter()
        .map(|c| format!("{} {} -> {}", c.setting, c.before, c.value))
        .collect();
    let n = r.trial.comparisons.iter().filter(|c| !is_cost(c)).count();
    let better = r
        .trial
        .comparisons
        .iter()
        .filter(|c| !is_cost(c) && c.verdict == Verdict::Better)
        .count();
    let worse = r
        .trial
        .comparisons
        .iter()
        .filter(|c| !is_cost(c) && c.verdict == Verdict::Worse)
        .count();
    let mut s = format!(
        "Changing {} ({} rounds each side, interleaved): {better} of {n} figures better, {worse} worse",
        what.join(", "),
        r.rounds_per_side
    );
    if let Some(h) = headline(&r.trial) {
        s += &format!(
            "; {}: {} -> {} ({}, {})",
            h.label,
            ci(h, &h.baseline),
            ci(h, &h.changed),
            ratio_text(h),
            verdict_text(h)
        );
    }
    s += ".";
    out.push(s);
    let costs: Vec<String> = r
        .trial
        .comparisons
        .iter()
        .filter(|c| is_cost(c))
        .map(|c| {
            format!(
                "{}: {} -> {}",
                c.label,
                fmt(c.unit, c.baseline.mean),
                fmt(c.unit, c.changed.mean)
            )
        })
        .collect();
    out.push(if costs.is_empty() {
        "Cost: not measurable for these settings.".into()
    } else {
        format!("Cost: {}.", costs.join("; "))
    });
    if r.conditions.noisy {
        out.push("Other load was seen during some rounds: the figures may be spoiled (interleaving puts it on both sides, but it widens the intervals).".into());
    }
    if r.restore.kept {
        out.push(format!(
            "Kept on purpose (--keep); undo with: {}",
            r.restore.undo.join("; ")
        ));
    } else if r.restore.restored {
        out.push("Restored: every original value written back and read back as journalled.".into());
    }
    for c in &r.changes {
        out.push(format!(
            "To make {}={} permanent ({}{}): {}",
            c.setting,
            c.value,
            c.permanent.form,
            c.permanent
                .file
                .as_ref()
                .map(|f| format!(", {f}"))
                .unwrap_or_default(),
            c.permanent.text.trim_end().replace('\n', " | ")
        ));
    }
    out
}

fn table(run: &TrialRun) -> String {
    let mut s = String::new();
    for c in &run.comparisons {
        s += &format!(
            "  {}\n    baseline {}   changed {}   ratio {}   {}\n",
            c.label,
            ci(c, &c.baseline),
            ci(c, &c.changed),
            ratio_text(c),
            verdict_text(c)
        );
    }
    s
}

pub fn text(r: &TrialReport, style: &Style) -> String {
    let mut s = style.bold("cpulab try") + "\n";
    for c in &r.changes {
        s += &format!(
            "  {} {} -> {}{}\n",
            c.setting,
            c.before,
            c.value,
            c.from
                .as_ref()
                .map(|f| format!("  (from {f})"))
                .unwrap_or_default()
        );
    }
    s += &format!(
        "  measured: {}; {} rounds per side, ABAB...\n\n",
        r.measure, r.rounds_per_side
    );
    s += &(style.bold("Figures (95% CI over rounds; ratio = changed / baseline)") + "\n");
    s += &table(&r.trial);
    for item in &r.items {
        s += &format!(
            "\n{}\n",
            style.bold(&format!("{} alone", item.settings.join(", ")))
        );
        s += &table(item);
    }
    if !r.skipped.is_empty() {
        s += &format!("\n{}\n", style.bold("Not tried"));
        for k in &r.skipped {
            s += &format!("  {k}\n");
        }
    }
    s += &format!("\n{}\n", style.bold("Summary"));
    for l in &r.summary {
        s += &format!("  {l}\n");
    }
    for n in r.conditions.notes.iter().chain(&r.restore.notes) {
        s += &format!("  note: {n}\n");
    }
    s
}

pub fn html(r: &TrialReport) -> String {
    let mut runs = vec![("All changes".to_string(), &r.trial)];
    runs.extend(
        r.items
            .iter()
            .map(|i| (format!("{} alone", i.settings.join(", ")), i)),
    );
    let header = html! {
        h1 { "cpulab try" }
        p { (r.measure) }
    };
    let body = html! {
        section {
            h2 { "Settings" }
            table {
                tr { th { "setting" } th { "before" } th { "tried" } th { "exact writes" } }
                @for c in &r.changes {
                    tr {
                        td { (c.setting) }
                        td { (c.before) }
                        td { (c.value) }
                        td { code { (c.writes.join("; ")) } }
                    }
                }
            }
        }
        @for (title, run) in &runs {
            section {
                h2 { (title) }
                p { (r.rounds_per_side) " rounds per side, interleaved; 95% CI over round means." }
                table {
                    tr {
                        th { "figure" } th { "baseline" } th { "changed" } th { "ratio" }
                        th { "verdict" }
                    }
                    @for c in &run.comparisons {
                        tr {
                            td { (c.label) }
                            td.num { (ci(c, &c.baseline)) }
                            td.num { (ci(c, &c.changed)) }
                            td.num { (ratio_text(c)) }
                            td { (verdict_text(c)) }
                        }
                    }
                }
            }
        }
        section {
            h2 { "Summary" }
            @for l in &r.summary {
                p { (l) }
            }
        }
    };
    crate::report::html::page("cpulab try", header, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::{Direction, Figure};
    use crate::trial::{Round, Side};

    #[test]
    fn a_tiny_p_value_prints_as_a_bound_not_as_zero() {
        let vals = [42_000.0, 7_100.0, 43_500.0, 7_000.0, 41_800.0, 6_900.0];
        let rounds: Vec<Round> = vals
            .iter()
            .enumerate()
            .map(|(index, v)| Round {
                index,
                side: if index % 2 == 0 {
                    Side::Baseline
                } else {
                    Side::Changed
                },
                started_s: index as f64,
                figures: vec![Figure::single(
                    "rtt_ns",
                    "rtt",
                    Unit::Nanoseconds,
                    Direction::LowerIsBetter,
                    *v,
                )],
                noisy: false,
                load_before: None,
            })
            .collect();
        let c = &super::super::compare::compare_rounds(&rounds)[0];
        assert!(c.p_value.unwrap() < 0.001, "the JSON keeps the number");
        let v = verdict_text(c);
        assert!(v.contains("p<0.001") && !v.contains("p=0.000"), "{v}");
    }
}
